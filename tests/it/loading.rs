//! Loading a directory as users lay it out: examples, editor leftovers, hidden
//! state, ignore files, limits and the checked-in schema.

use std::fs;
use std::path::{Path, PathBuf};

use poolwright::desired_dir::load_dir;
use poolwright::spec::{Limits, schema};

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

const PROVIDER: &str =
    "apiVersion: poolwright/v1\nkind: Provider\nmetadata: {name: sim}\nspec: {type: sim}\n";

fn pool(name: &str) -> String {
    format!(
        "apiVersion: poolwright/v1\nkind: NodePool\nmetadata: {{name: {name}}}\nspec:\n  providerRef: sim\n  size: 2\n  template: {{image: img-1}}\n"
    )
}

#[test]
fn the_demo_fleet_validates_without_the_cloud_examples() {
    let report = load_dir(&repo("examples"), &Limits::default());
    assert!(report.diagnostics.is_empty(), "{:#?}", report.diagnostics);
    let config = report.config.unwrap();
    assert_eq!(
        config.pools.keys().collect::<Vec<_>>(),
        ["api", "batch", "cache", "web"]
    );
    assert_eq!(config.providers.keys().collect::<Vec<_>>(), ["sim"]);
    assert!(
        config.clusters.is_empty(),
        "examples/.poolwrightignore keeps kubernetes/ out"
    );
}

#[test]
fn every_example_directory_validates() {
    for (dir, pools, clusters) in [
        ("examples/aws", 1, 0),
        ("examples/kubernetes", 1, 1),
        ("examples/fleet", 12, 0),
    ] {
        let report = load_dir(&repo(dir), &Limits::default());
        assert!(
            report.diagnostics.is_empty(),
            "{dir}: {:#?}",
            report.diagnostics
        );
        let config = report.config.unwrap();
        assert_eq!(
            (config.pools.len(), config.clusters.len()),
            (pools, clusters),
            "{dir}"
        );
    }
}

#[test]
fn every_example_file_points_editors_at_the_schema() {
    let mut checked = 0;
    for entry in walk(&repo("examples")) {
        if entry.extension().is_some_and(|e| e == "yaml") {
            let text = fs::read_to_string(&entry).unwrap();
            let first = text.lines().next().unwrap();
            let rel = first
                .strip_prefix("# yaml-language-server: $schema=")
                .unwrap_or_else(|| panic!("{} lacks the modeline", entry.display()));
            let target = entry.parent().unwrap().join(rel);
            assert_eq!(
                fs::canonicalize(&target).unwrap(),
                fs::canonicalize(repo("schemas/poolwright.schema.json")).unwrap(),
                "{}",
                entry.display()
            );
            checked += 1;
        }
    }
    assert!(checked >= 7, "found only {checked} example files");
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[test]
fn the_checked_in_schema_is_the_generated_one() {
    let checked_in = fs::read_to_string(repo("schemas/poolwright.schema.json")).unwrap();
    assert!(
        checked_in == schema::json_schema_text(),
        "schemas/poolwright.schema.json is stale: run `cargo run -- schema > schemas/poolwright.schema.json`"
    );
    let value: serde_json::Value = serde_json::from_str(&checked_in).unwrap();
    assert_eq!(value["$schema"], "http://json-schema.org/draft-07/schema#");
    for kind in ["ProviderDoc", "ClusterDoc", "NodePoolDoc"] {
        assert_eq!(
            value["definitions"][kind]["additionalProperties"], false,
            "{kind}"
        );
    }
}

#[test]
fn editor_leftovers_hidden_files_and_other_extensions_are_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    fs::write(d.join("providers.yaml"), PROVIDER).unwrap();
    fs::write(d.join("web.yml"), pool("web")).unwrap();
    // Each of these would be invalid if it were read.
    for junk in [
        ".web.yml.swp",
        "web.yml~",
        ".#web.yml",
        "4913",
        ".hidden.yaml",
        "notes.txt",
        "web.yaml.bak",
    ] {
        fs::write(d.join(junk), "not: [valid").unwrap();
    }
    fs::create_dir_all(d.join(".poolwright")).unwrap();
    fs::write(d.join(".poolwright/state.yaml"), "junk: [").unwrap();
    fs::create_dir_all(d.join(".git")).unwrap();
    fs::write(d.join(".git/config.yaml"), "junk: [").unwrap();
    let report = load_dir(d, &Limits::default());
    assert!(report.diagnostics.is_empty(), "{:#?}", report.diagnostics);
    assert_eq!(report.files, 2);
    assert_eq!(report.config.unwrap().pools.len(), 1);
}

#[test]
fn subdirectories_are_read_in_byte_order_and_ignore_files_are_honoured() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    fs::create_dir_all(d.join("b/nested")).unwrap();
    fs::create_dir_all(d.join("a")).unwrap();
    fs::create_dir_all(d.join("drafts")).unwrap();
    fs::write(d.join("b/nested/z.yaml"), pool("z")).unwrap();
    fs::write(d.join("a/providers.yaml"), PROVIDER).unwrap();
    fs::write(d.join("Upper.yaml"), pool("upper")).unwrap();
    fs::write(d.join("drafts/broken.yaml"), "nope: [").unwrap();
    fs::write(d.join(".poolwrightignore"), "drafts/\n").unwrap();
    // A duplicate tells us which file was read first: the error lands on the later one.
    fs::write(d.join("b/dup.yaml"), pool("z")).unwrap();
    let report = load_dir(d, &Limits::default());
    let errors: Vec<String> = report.errors().map(|e| e.to_string()).collect();
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert!(errors[0].contains("b/nested/z.yaml:3:"), "{}", errors[0]);
    assert!(errors[0].contains("first defined at"), "{}", errors[0]);
    assert_eq!(report.files, 4);
}

#[test]
fn a_file_over_the_size_limit_is_refused_without_parsing() {
    let dir = tempfile::tempdir().unwrap();
    let mut big = String::from(PROVIDER);
    big.push_str(&"# padding\n".repeat(200));
    fs::write(dir.path().join("big.yaml"), &big).unwrap();
    let limits = Limits {
        max_file_bytes: 1024,
        ..Limits::default()
    };
    let report = load_dir(dir.path(), &limits);
    let errors: Vec<String> = report.errors().map(|e| e.to_string()).collect();
    assert_eq!(errors.len(), 1);
    assert!(errors[0].ends_with("big.yaml:1:1: error: file is larger than the limit of 1024 bytes; split it into several files"), "{}", errors[0]);
    assert!(report.config.is_none());
}

#[test]
fn zero_bytes_invalid_utf8_and_an_empty_directory_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let report = load_dir(dir.path(), &Limits::default());
    assert!(
        report
            .errors()
            .next()
            .unwrap()
            .message
            .contains("no desired-state files")
    );

    fs::write(dir.path().join("empty.yaml"), "").unwrap();
    fs::write(
        dir.path().join("latin1.yaml"),
        b"apiVersion: poolwright/v1\nkind: Provider # caf\xe9\n",
    )
    .unwrap();
    let report = load_dir(dir.path(), &Limits::default());
    let errors: Vec<String> = report.errors().map(|e| e.to_string()).collect();
    assert_eq!(errors.len(), 2, "{errors:#?}");
    assert!(errors[0].ends_with("empty.yaml:1:1: error: file contains no documents; an empty file is refused (add a document or delete the file)"));
    assert!(
        errors[1].ends_with("latin1.yaml:2:21: error: file is not valid UTF-8"),
        "{}",
        errors[1]
    );
}

#[test]
fn documents_keep_their_file_line_numbers_across_separators() {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "# header\n\n---\n{PROVIDER}---\n# comment only\n---\n{}...\n---\n{}",
        pool("a"),
        pool("b").replace("size: 2", "size: -3")
    );
    fs::write(dir.path().join("multi.yaml"), text).unwrap();
    let report = load_dir(dir.path(), &Limits::default());
    let errors: Vec<String> = report.errors().map(|e| e.to_string()).collect();
    // Provider: lines 4-7, "---" 8, comment doc 9, "---" 10, pool a 11-17, "..." 18, "---" 19, pool b 20-26.
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert!(
        errors[0].ends_with("multi.yaml:25:9: error: size must not be negative, got -3"),
        "{}",
        errors[0]
    );
}

#[test]
fn a_valid_config_carries_defaults_and_positions() {
    let report = load_dir(&repo("examples/pools/batch.yaml"), &Limits::default());
    // A single file without its provider and shared policy has dangling
    // references, and says so.
    let errors: Vec<String> = report.errors().map(|e| e.to_string()).collect();
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(errors[0].contains("providerRef \"sim\" does not name a Provider"));
    assert!(
        errors[1]
            .contains("disruption.policyRef \"year-end-freeze\" does not name a DisruptionPolicy")
    );

    let config = load_dir(&repo("examples"), &Limits::default())
        .config
        .unwrap();
    let api = &config.pools["api"];
    assert!(api.file.ends_with("examples/pools/api.yaml"));
    let rollout = &api.doc.spec.rollout;
    assert_eq!(rollout.drain.timeout.to_string(), "30m");
    assert_eq!(rollout.health.min_ready.to_string(), "30s");
    assert_eq!(rollout.max_failed_nodes.value, 3);
    assert_eq!(rollout.max_unavailable.as_ref().unwrap().pos.line, 18);
}

#[test]
fn a_shared_disruption_policy_is_resolved_into_its_pools_field_by_field() {
    let config = load_dir(&repo("examples"), &Limits::default())
        .config
        .unwrap();
    use poolwright::spec::types::DisruptionPolicy;
    // api uses weekend-nights as it is.
    let api = &config.pools["api"].doc.spec.disruption;
    assert_eq!(api.policy(), DisruptionPolicy::AllowDuringMaintenanceWindow);
    assert_eq!(api.windows.len(), 2);
    assert_eq!(
        api.windows[1].cron.as_ref().unwrap().as_str(),
        "0 22 * * 1-5"
    );
    // batch: the year-end freeze ends by itself.
    let batch = &config.pools["batch"].doc.spec.disruption;
    assert_eq!(batch.policy(), DisruptionPolicy::Block);
    assert_eq!(batch.until(), Some("2027-01-04T07:00:00Z".parse().unwrap()));

    // A pool's own field overrides the shared one; the rest is inherited.
    let tmp = tempfile::tempdir().unwrap();
    fs::write(
        tmp.path().join("all.yaml"),
        "apiVersion: poolwright/v1\nkind: Provider\nmetadata: {name: sim}\nspec: {type: sim}\n---\n\
         apiVersion: poolwright/v1\nkind: DisruptionPolicy\nmetadata: {name: nights}\nspec:\n  policy: AllowDuringMaintenanceWindow\n  windows: [{start: \"01:00\", duration: 2h}]\n---\n\
         apiVersion: poolwright/v1\nkind: NodePool\nmetadata: {name: web}\nspec:\n  providerRef: sim\n  size: 1\n  template: {image: i}\n  disruption:\n    policyRef: nights\n    windows: [{start: \"03:00\", duration: 1h, timezone: Asia/Tokyo}]\n",
    )
    .unwrap();
    let config = load_dir(tmp.path(), &Limits::default()).config.unwrap();
    let web = &config.pools["web"].doc.spec.disruption;
    assert_eq!(web.policy(), DisruptionPolicy::AllowDuringMaintenanceWindow);
    assert_eq!(web.windows.len(), 1);
    assert_eq!(web.windows[0].timezone.as_str(), "Asia/Tokyo");
}
