//! The `poolwright` binary as users run it: exit codes, streams and formats.

use std::path::Path;
use std::process::{Command, Output};

fn poolwright(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_poolwright"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("the poolwright binary runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn validate_exits_0_on_a_valid_directory() {
    let out = poolwright(&["validate", "examples"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "examples is valid: 6 file(s), 1 provider(s), 0 cluster(s), 4 node pool(s), 2 disruption policy(ies)\n"
    );
    assert!(out.stderr.is_empty());
}

#[test]
fn validate_exits_1_and_prints_every_error_with_its_location() {
    let out = poolwright(&["validate", "tests/invalid/several-errors-in-one-file.yaml"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    // Four errors, the verdict, and (one error is a providerRef the file
    // alone cannot resolve) the hint that `--dir` gives it its context.
    assert_eq!(lines.len(), 6, "{stderr}");
    assert_eq!(
        lines[0],
        "tests/invalid/several-errors-in-one-file.yaml:12:9: error: size must not be negative, got -1"
    );
    assert_eq!(
        lines[4],
        "tests/invalid/several-errors-in-one-file.yaml is invalid: 4 error(s); nothing was changed"
    );
    assert!(
        lines[5].starts_with("hint: the files were checked alone;"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty());
}

#[test]
fn validate_json_is_versioned_and_lists_diagnostics() {
    let out = poolwright(&[
        "validate",
        "tests/invalid/unknown-field-typo.yaml",
        "--output",
        "json",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["formatVersion"], 1);
    assert_eq!(doc["valid"], false);
    assert_eq!(doc["errorCount"], 1);
    let d = &doc["diagnostics"][0];
    assert_eq!(d["file"], "tests/invalid/unknown-field-typo.yaml");
    assert_eq!(
        (d["line"].as_u64(), d["column"].as_u64()),
        (Some(15), Some(5))
    );
    assert_eq!(d["severity"], "error");
    assert!(
        d["message"]
            .as_str()
            .unwrap()
            .contains("did you mean \"maxSurge\"?")
    );

    let out = poolwright(&["validate", "examples", "-o", "json"]);
    assert_eq!(out.status.code(), Some(0));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["valid"], true);
    assert_eq!(doc["kinds"]["nodePools"], 4);
}

#[test]
fn validate_reports_a_missing_directory() {
    let out = poolwright(&["validate", "no/such/dir"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).starts_with("no/such/dir:1:1: error: cannot read:"));
}

/// Usage errors exit 1 with clap's message: 2 is only `plan
/// --detailed-exitcode`'s "changes present", so a mistyped flag in CI never
/// reads as pending changes.
#[test]
fn usage_errors_exit_1_never_2() {
    for args in [
        &["validate", "--output", "yaml"][..],
        &["frobnicate"],
        &["plan", "--detailed-exitcod"],
    ] {
        let out = poolwright(args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert!(
            text(&out.stderr).starts_with("error: "),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
    // Help and version are not errors.
    assert_eq!(poolwright(&["--help"]).status.code(), Some(0));
    assert_eq!(poolwright(&["plan", "--help"]).status.code(), Some(0));
    assert_eq!(poolwright(&["--version"]).status.code(), Some(0));
}

/// Terraform's `-no-color` is accepted wherever `--no-color` is, on every
/// command (Terraform's flags are single-dash).
#[test]
fn no_color_is_accepted_in_terraforms_spelling_on_every_command() {
    let out = poolwright(&["validate", "examples", "-no-color"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = poolwright(&["-no-color", "validate", "examples"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = poolwright(&["schema", "--no-color"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

/// `poolwright version`: the release and the git revision it was built from.
#[test]
fn version_names_the_release_and_the_revision() {
    let out = poolwright(&["version"]);
    assert_eq!(out.status.code(), Some(0));
    let line = text(&out.stdout);
    assert!(
        line.starts_with(&format!("poolwright {} (", env!("CARGO_PKG_VERSION"))),
        "{line}"
    );
    // Built from this checkout: the revision is HEAD's.
    let head = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    if head.status.success() {
        let head = text(&head.stdout);
        assert!(line.contains(head.trim()), "{line} names {head}");
    }
    let json = poolwright(&["version", "-o", "json"]);
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(v["version"], env!("CARGO_PKG_VERSION"));
    assert!(v["revision"].is_string(), "{v}");
}

/// `status --url` takes an address without a scheme as http, and a daemon
/// that cannot be reached is named with the reason (connection refused).
#[test]
fn status_url_without_a_scheme_and_a_refused_connection_are_said_plainly() {
    // A port nothing listens on: bind one, then free it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out = poolwright(&["status", "--url", &format!("127.0.0.1:{port}")]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(!err.contains("builder error"), "{err}");
    assert!(
        err.contains(&format!("http://127.0.0.1:{port}/v1/status")),
        "{err}"
    );
    assert!(err.to_lowercase().contains("connection refused"), "{err}");
    let out = poolwright(&["status", "--url", "ftp://127.0.0.1:1"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("http or https"),
        "{}",
        text(&out.stderr)
    );
}

/// The help texts say what the flags do, and every command shows examples.
#[test]
fn help_texts_are_specific_and_have_examples() {
    let plan = text(&poolwright(&["plan", "--help"]).stdout);
    assert!(
        !plan.contains("Delete pools poolwright manages"),
        "plan does not delete: {plan}"
    );
    assert!(plan.contains("--prune"), "{plan}");
    let pause = text(&poolwright(&["rollout", "pause", "--help"]).stdout);
    assert!(pause.contains("Usage: poolwright rollout pause"), "{pause}");
    assert!(pause.contains("--reason"), "{pause}");
    for cmd in [
        "validate", "plan", "apply", "forecast", "run", "status", "rollout", "fleet", "plugin",
    ] {
        let help = text(&poolwright(&[cmd, "--help"]).stdout);
        assert!(
            help.contains("Examples:"),
            "{cmd} --help has no examples:\n{help}"
        );
    }
}

#[test]
fn schema_prints_the_checked_in_schema() {
    let out = poolwright(&["schema"]);
    assert_eq!(out.status.code(), Some(0));
    let file =
        std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("schemas/poolwright.schema.json"))
            .unwrap();
    assert!(
        out.stdout == file,
        "poolwright schema differs from schemas/poolwright.schema.json"
    );
}

/// The published plug-in contract is generated from the Rust request and
/// answer types: the checked-in file cannot drift from what poolwright sends.
#[test]
fn the_checked_in_plugin_contract_is_what_the_code_speaks() {
    let out = poolwright(&["plugin", "openapi"]);
    assert_eq!(out.status.code(), Some(0));
    let file = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("schemas/provider-plugin.openapi.yaml"),
    )
    .unwrap();
    assert!(
        out.stdout == file,
        "schemas/provider-plugin.openapi.yaml is stale: run `cargo run -- plugin openapi > schemas/provider-plugin.openapi.yaml`"
    );
    let doc: serde_json::Value = serde_saphyr::from_slice(&file).unwrap();
    assert_eq!(doc["openapi"], "3.1.0");
    for path in [
        "/v1/capabilities",
        "/v1/describe",
        "/v1/pools",
        "/v1/pools/{pool}",
        "/v1/pools/{pool}/adopt",
        "/v1/pools/{pool}/size",
        "/v1/pools/{pool}/template",
        "/v1/pools/{pool}/bounds",
        "/v1/pools/{pool}/attributes",
        "/v1/pools/{pool}/nodes",
        "/v1/pools/{pool}/nodes/{node}/terminate",
        "/v1/pools/{pool}/nodes/{node}/reimage",
    ] {
        assert!(doc["paths"][path].is_object(), "{path} is in the contract");
    }
}

#[test]
fn completions_are_generated_for_common_shells() {
    for shell in ["bash", "zsh", "fish"] {
        let out = poolwright(&["completions", shell]);
        assert_eq!(out.status.code(), Some(0), "{shell}");
        let script = text(&out.stdout);
        assert!(
            script.contains("validate") && script.contains("poolwright"),
            "{shell}"
        );
    }
}

/// `validate FILE... --dir DIR`: the changed files of a pre-commit hook,
/// checked with the rest of their directory as context; only their own
/// problems fail it. Without --dir, the files stand alone.
#[test]
fn validate_checks_files_in_the_context_of_their_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("pools");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy("examples/providers.yaml", dir.join("providers.yaml")).unwrap();
    std::fs::copy("examples/pools/web.yaml", dir.join("web.yaml")).unwrap();
    std::fs::copy("examples/pools/api.yaml", dir.join("api.yaml")).unwrap();
    let web = dir.join("web.yaml");
    let (web, dir_s) = (web.to_str().unwrap(), dir.to_str().unwrap());
    // Alone, its provider is missing.
    let out = poolwright(&["validate", web]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    // In its directory's context, it is valid.
    let out = poolwright(&["validate", web, "--dir", dir_s]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("1 file(s) valid in the context of"));
    // A broken other file is noted, not this file's failure.
    std::fs::write(
        dir.join("api.yaml"),
        "apiVersion: poolwright/v1\nkind: NodePool\n",
    )
    .unwrap();
    let out = poolwright(&["validate", web, "--dir", dir_s]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("error(s) in other files"),
        "{}",
        text(&out.stderr)
    );
    // Its own error fails it, with its place.
    let broken = std::fs::read_to_string("examples/pools/web.yaml")
        .unwrap()
        .replace("maxSurge: 2", "maxSurg: 2");
    std::fs::write(dir.join("web.yaml"), broken).unwrap();
    let out = poolwright(&["validate", web, "--dir", dir_s]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("web.yaml:19:5: error: unknown field \"maxSurg\""),
        "{}",
        text(&out.stderr)
    );
    // A file outside the directory is refused.
    let out = poolwright(&["validate", "examples/policies.yaml", "--dir", dir_s]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("is not in the desired-state directory"));
}

/// `init` then `doctor`, as a newcomer runs them: the scaffold validates and
/// plans one pool; doctor passes on it, and fails on a state directory that
/// others can write into, naming the directory and the fix.
#[test]
fn init_scaffolds_a_repository_that_plans_and_doctor_names_a_world_writable_state_dir() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("config");
    let state = tmp.path().join("state");
    let repo_s = repo.to_str().unwrap();
    let state_s = state.to_str().unwrap();
    let init = poolwright(&["init", repo_s]);
    assert!(init.status.success(), "{}", text(&init.stderr));
    let plan = poolwright(&["plan", repo_s, "--state-dir", state_s]);
    assert!(plan.status.success(), "{}", text(&plan.stderr));
    assert!(
        text(&plan.stdout).contains("1 to add"),
        "{}",
        text(&plan.stdout)
    );
    // A second init writes nothing.
    let again = poolwright(&["init", repo_s]);
    assert_eq!(again.status.code(), Some(1));
    assert!(
        text(&again.stderr).contains("already exist"),
        "{}",
        text(&again.stderr)
    );

    std::fs::create_dir(&state).unwrap();
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o700)).unwrap();
    let ok = poolwright(&[
        "doctor",
        repo_s,
        "--state-dir",
        state_s,
        "--listen",
        "127.0.0.1:0",
    ]);
    let out = text(&ok.stdout);
    assert!(ok.status.success(), "{out}");
    assert!(out.contains("ok    desired state"), "{out}");
    assert!(out.contains("provider sim"), "{out}");

    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o777)).unwrap();
    let bad = poolwright(&[
        "doctor",
        repo_s,
        "--state-dir",
        state_s,
        "--listen",
        "127.0.0.1:0",
        "-o",
        "json",
    ]);
    assert_eq!(bad.status.code(), Some(1), "{}", text(&bad.stdout));
    let json: serde_json::Value = serde_json::from_slice(&bad.stdout).unwrap();
    let failed: Vec<&serde_json::Value> = json["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["verdict"] == "fail")
        .collect();
    assert_eq!(failed.len(), 1, "{json:#}");
    assert_eq!(failed[0]["topic"], "state directory");
    assert!(
        failed[0]["text"].as_str().unwrap().contains("0777"),
        "{json:#}"
    );
    assert!(
        failed[0]["fix"].as_str().unwrap().contains("chmod"),
        "{json:#}"
    );
}

/// The measured case: the state directory is per working directory, so
/// after one config directory was applied, `init` of a second and
/// `plan --prune` of it from the same place said `3 to destroy`: the first
/// one's pools. A state directory serves one desired state; another is
/// refused, naming both, whatever it asks, and changes nothing.
#[test]
fn a_state_directory_serves_one_desired_state_and_refuses_another_naming_both() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let run = |args: &[&str]| -> Output {
        Command::new(env!("CARGO_BIN_EXE_poolwright"))
            .current_dir(root)
            .args(args)
            .env_remove("POOLWRIGHT_STATE_DIR")
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap()
    };
    std::fs::create_dir(root.join("first")).unwrap();
    std::fs::write(
        root.join("first/pools.yaml"),
        "apiVersion: poolwright/v1\nkind: Provider\nmetadata: {name: sim}\nspec: {type: sim, speed: 100}\n---\napiVersion: poolwright/v1\nkind: NodePool\nmetadata: {name: web}\nspec: {providerRef: sim, size: 1, template: {image: img-1}}\n---\napiVersion: poolwright/v1\nkind: NodePool\nmetadata: {name: db}\nspec: {providerRef: sim, size: 1, template: {image: img-1}}\n",
    )
    .unwrap();
    let apply = run(&["apply", "first", "--auto-approve"]);
    assert!(apply.status.success(), "{}", text(&apply.stderr));
    assert!(run(&["init", "second"]).status.success());

    for args in [
        &["plan", "second", "--prune"][..],
        &["apply", "second", "--prune", "--auto-approve"],
        &["forecast", "second"],
    ] {
        let out = run(args);
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stdout}{stderr}");
        assert!(
            !stdout.contains("to destroy") && !stdout.contains("will be destroyed"),
            "{args:?}: {stdout}"
        );
        let first = root.join("first").canonicalize().unwrap();
        let second = root.join("second").canonicalize().unwrap();
        assert!(
            stderr.contains("serves another desired state")
                && stderr.contains(first.to_str().unwrap())
                && stderr.contains(second.to_str().unwrap()),
            "{args:?} names both: {stderr}"
        );
    }
    let daemon = run(&["run", "second", "--listen", "127.0.0.1:0"]);
    assert_eq!(daemon.status.code(), Some(1), "{}", text(&daemon.stderr));
    assert!(
        text(&daemon.stderr).contains("serves another desired state"),
        "{}",
        text(&daemon.stderr)
    );
    // The first one's pools are still there, and it still plans as before.
    let plan = run(&["plan", "first", "--prune"]);
    assert!(plan.status.success(), "{}", text(&plan.stderr));
    assert!(
        text(&plan.stdout).contains("No changes."),
        "{}",
        text(&plan.stdout)
    );
    // From its own directory, the second has its own state: no pool of the
    // first is seen, nothing is destroyed.
    let own = Command::new(env!("CARGO_BIN_EXE_poolwright"))
        .current_dir(root.join("second"))
        .args(["plan", ".", "--prune"])
        .env_remove("POOLWRIGHT_STATE_DIR")
        .output()
        .unwrap();
    let out = text(&own.stdout);
    assert!(own.status.success(), "{}", text(&own.stderr));
    assert!(out.contains("1 to add, 0 to change, 0 to destroy"), "{out}");
    assert!(!out.contains("web") && !out.contains("\"db\""), "{out}");
}
