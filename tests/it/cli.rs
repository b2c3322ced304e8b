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
    assert_eq!(lines.len(), 5, "{stderr}");
    assert_eq!(
        lines[0],
        "tests/invalid/several-errors-in-one-file.yaml:12:9: error: size must not be negative, got -1"
    );
    assert_eq!(
        lines[4],
        "tests/invalid/several-errors-in-one-file.yaml is invalid: 4 error(s); nothing was changed"
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

#[test]
fn usage_errors_exit_2() {
    let out = poolwright(&["validate", "--output", "yaml"]);
    assert_eq!(out.status.code(), Some(2));
    let out = poolwright(&["frobnicate"]);
    assert_eq!(out.status.code(), Some(2));
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
