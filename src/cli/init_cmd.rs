//! `poolwright init DIR`: a config repository to start from. A provider (the
//! embedded simulator, with the AWS and plug-in forms beside it in comments),
//! one pool, a shared disruption policy, the JSON Schema the files' modelines
//! point at (editors complete and check fields from it) and a `.gitignore`
//! for what poolwright writes next to them. Nothing is overwritten: when any
//! of these files exists, nothing is written at all.

use std::path::{Path, PathBuf};

use anyhow::Context;

use super::exit;

/// The files of a new config repository, relative to its root.
fn scaffold() -> Vec<(&'static str, String)> {
    vec![
        ("providers.yaml", PROVIDERS.to_string()),
        ("policies.yaml", POLICIES.to_string()),
        ("pools/example.yaml", POOL.to_string()),
        (
            "schemas/poolwright.schema.json",
            crate::spec::schema::json_schema_text(),
        ),
        (".gitignore", GITIGNORE.to_string()),
    ]
}

const PROVIDERS: &str = r#"# yaml-language-server: $schema=schemas/poolwright.schema.json
# How poolwright reaches the machines. The embedded simulator needs no cloud
# account: its fleet lives in the state directory (./.poolwright), so a plan
# after an apply says "No changes."
apiVersion: poolwright/v1
kind: Provider
metadata:
  name: sim
spec:
  type: sim
  speed: 20          # the simulator's clock runs 20x faster than real time
# An AWS account instead (pools are Auto Scaling groups; credentials come from
# the standard chain: environment, profile, instance role):
#
# apiVersion: poolwright/v1
# kind: Provider
# metadata:
#   name: aws
# spec:
#   type: aws
#   region: eu-central-1
#
# Any other platform through an HTTP plug-in (`poolwright plugin check URL`
# tells whether one speaks the contract):
#
# apiVersion: poolwright/v1
# kind: Provider
# metadata:
#   name: oke
# spec:
#   type: http
#   url: http://127.0.0.1:8181
"#;

const POLICIES: &str = r#"# yaml-language-server: $schema=schemas/poolwright.schema.json
# When disruptive changes (a new image, an instance type) may start: pools
# name this with `disruption.policyRef`. In-place changes (labels, tags) are
# never held.
apiVersion: poolwright/v1
kind: DisruptionPolicy
metadata:
  name: weekday-nights
spec:
  policy: AllowDuringMaintenanceWindow
  windows:
    - days: [Mon, Tue, Wed, Thu]
      start: "22:00"
      duration: 4h
      timezone: UTC
"#;

const POOL: &str = r#"# yaml-language-server: $schema=../schemas/poolwright.schema.json
# One pool: three nodes of one template. Change `image:` and `poolwright plan`
# shows the roll: one extra node at a time (maxSurge 1), never fewer than
# three available (maxUnavailable 0).
apiVersion: poolwright/v1
kind: NodePool
metadata:
  name: example
spec:
  providerRef: sim
  size: 3
  template:
    image: img-2026-12
    instanceType: m7i.large
    labels: {team: platform}
  rollout:
    maxSurge: 1
    maxUnavailable: 0
    health: {startupTimeout: 10m, minReady: 10s}
  disruption:
    # Allow rolls at any time while you try things; switch to the shared
    # schedule in ../policies.yaml with `policyRef: weekday-nights`.
    policy: Allow
  lifecycle:
    preventDestroy: true
"#;

const GITIGNORE: &str = "# What poolwright writes beside the desired state: its state directory
# (inventory, journals, the simulator's fleet) and saved plans.
.poolwright/
*.plan
";

/// The directories between `dir` and `files` that exist and are not real
/// directories (a link to one included).
fn planted_dirs<'a>(dir: &Path, files: impl Iterator<Item = &'a Path>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for file in files {
        let Some(parent) = file.strip_prefix(dir).ok().and_then(Path::parent) else {
            continue;
        };
        let mut at = dir.to_path_buf();
        for part in parent.components() {
            at.push(part);
            let shown = at.display().to_string();
            if let Ok(m) = at.symlink_metadata()
                && !m.is_dir()
                && !out.contains(&shown)
            {
                out.push(shown);
            }
        }
    }
    out
}

/// Write the scaffold into `dir` (created if missing) and check it loads.
pub(super) fn init(dir: &Path) -> anyhow::Result<u8> {
    let files: Vec<(PathBuf, String)> = scaffold()
        .into_iter()
        .map(|(rel, text)| (dir.join(rel), text))
        .collect();
    let present: Vec<String> = files
        .iter()
        .filter(|(p, _)| p.symlink_metadata().is_ok())
        .map(|(p, _)| p.display().to_string())
        .collect();
    if !present.is_empty() {
        eprintln!(
            "error: {} already exist(s); init writes nothing over a file, so nothing was written",
            present.join(", ")
        );
        return Ok(exit::FAILED);
    }
    // A directory of the scaffold (`pools/`, `schemas/`) that is a link, or
    // not a directory, is refused before anything is written: init never
    // writes through a link someone planted, nor leaves half a scaffold.
    let planted: Vec<String> = planted_dirs(dir, files.iter().map(|(p, _)| p.as_path()));
    if !planted.is_empty() {
        eprintln!(
            "error: {} is a link or not a directory; init writes only into real directories, so nothing was written",
            planted.join(", ")
        );
        return Ok(exit::FAILED);
    }
    for (path, text) in &files {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        // create_new: a file that appeared since the check is not replaced.
        use std::io::Write;
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(path)
            .and_then(|mut f| f.write_all(text.as_bytes()))
            .with_context(|| format!("writing {}", path.display()))?;
        println!("  created {}", path.display());
    }
    // What was written must be what poolwright accepts.
    let report = crate::desired_dir::load_dir(dir, &crate::spec::Limits::default());
    if report.config.is_none() {
        for d in &report.diagnostics {
            eprintln!("{d}");
        }
        anyhow::bail!("the scaffold in {} does not validate", dir.display());
    }
    let d = dir.display();
    println!(
        "\nA config repository is in {d}. Next, from inside it (its state directory is its own):\n  \
         cd {d}\n  \
         poolwright plan      # what apply would do: create the pool `example`\n  \
         poolwright apply     # do it (on the simulator; the fleet is kept in ./.poolwright)\n  \
         git init && git add . && git commit -m 'poolwright config'"
    );
    Ok(exit::OK)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scaffold_validates_with_a_pool_a_provider_and_a_policy() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(init(dir.path()).unwrap(), exit::OK);
        let report = crate::desired_dir::load_dir(dir.path(), &crate::spec::Limits::default());
        assert!(
            report.diagnostics.is_empty(),
            "{:?}",
            report
                .diagnostics
                .iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
        );
        let config = report.config.unwrap();
        assert!(config.pools.contains_key("example"));
        assert!(config.providers.contains_key("sim"));
        assert!(config.policies.contains_key("weekday-nights"));
        let ignore = std::fs::read_to_string(dir.path().join(".gitignore")).unwrap();
        assert!(ignore.lines().any(|l| l == ".poolwright/"), "{ignore}");
    }

    #[test]
    fn init_writes_nothing_when_any_file_exists() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("policies.yaml"), "mine").unwrap();
        assert_eq!(init(dir.path()).unwrap(), exit::FAILED);
        assert_eq!(
            std::fs::read_to_string(dir.path().join("policies.yaml")).unwrap(),
            "mine"
        );
        assert!(!dir.path().join("providers.yaml").exists());
        assert!(!dir.path().join("pools").exists());
    }

    /// The red team's case: `pools` (or `schemas`) planted as a link to
    /// another directory; init wrote through it and left half a scaffold.
    #[test]
    fn init_refuses_a_planted_link_and_writes_nothing() {
        for planted in ["pools", "schemas"] {
            let tmp = tempfile::tempdir().unwrap();
            let dir = tmp.path().join("repo");
            let elsewhere = tmp.path().join("elsewhere");
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::create_dir_all(&elsewhere).unwrap();
            std::os::unix::fs::symlink(&elsewhere, dir.join(planted)).unwrap();
            assert_eq!(init(&dir).unwrap(), exit::FAILED, "{planted}");
            assert_eq!(
                std::fs::read_dir(&elsewhere).unwrap().count(),
                0,
                "{planted}: nothing is written through the link"
            );
            let written: Vec<_> = std::fs::read_dir(&dir)
                .unwrap()
                .flatten()
                .map(|e| e.file_name())
                .collect();
            assert_eq!(
                written,
                vec![std::ffi::OsString::from(planted)],
                "{planted}"
            );
        }
    }
}
