//! The emergency override through the real binary: a frozen pool is rolled
//! only with `apply --override-disruption-policy --reason`, and the override is
//! shown in the plan, recorded as an event and in `STATE/overrides.jsonl`.

use std::path::Path;
use std::process::{Command, Output, Stdio};

const PROVIDER: &str = "apiVersion: poolwright/v1\nkind: Provider\nmetadata: {name: sim}\nspec: {type: sim, seed: 3, speed: 200}\n";

fn pool(image: &str) -> String {
    format!(
        "apiVersion: poolwright/v1\nkind: DisruptionPolicy\nmetadata: {{name: freeze}}\nspec:\n  policy: Block\n  until: \"2099-01-01T00:00:00Z\"\n---\napiVersion: poolwright/v1\nkind: NodePool\nmetadata: {{name: web}}\nspec:\n  providerRef: sim\n  size: 2\n  template: {{image: {image}}}\n  rollout: {{maxSurge: 1, maxUnavailable: 0, health: {{minReady: 100ms}}}}\n  disruption: {{policyRef: freeze}}\n"
    )
}

fn poolwright(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_poolwright"))
        .current_dir(dir)
        .args(args)
        .env_remove("POOLWRIGHT_STATE_DIR")
        .env("USER", "alice")
        .env_remove("SUDO_USER")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn a_freeze_holds_until_an_override_with_a_reason_which_is_recorded() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::create_dir_all(dir.join("config")).unwrap();
    std::fs::write(dir.join("config/providers.yaml"), PROVIDER).unwrap();
    std::fs::write(dir.join("config/web.yaml"), pool("img-1")).unwrap();
    let out = poolwright(dir, &["apply", "config", "--auto-approve"]);
    assert!(out.status.success(), "{}", text(&out));
    std::thread::sleep(std::time::Duration::from_millis(500));

    std::fs::write(dir.join("config/web.yaml"), pool("img-2")).unwrap();
    let out = poolwright(dir, &["plan", "config"]);
    let plan = text(&out);
    assert!(
        plan.contains("blocked by disruption policy Block until 2099-01-01"),
        "{plan}"
    );

    // The override needs a reason.
    let out = poolwright(
        dir,
        &[
            "apply",
            "config",
            "--auto-approve",
            "--override-disruption-policy",
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));

    let out = poolwright(
        dir,
        &[
            "apply",
            "config",
            "--auto-approve",
            "--events",
            "events.jsonl",
            "--override-disruption-policy",
            "--reason",
            "CVE-2026-1234 kernel fix",
        ],
    );
    let shown = text(&out);
    assert!(out.status.success(), "{shown}");
    assert!(
        shown.contains(
            "EMERGENCY OVERRIDE: disruption policy Block, overridden; disruptive steps start now"
        ),
        "{shown}"
    );

    let events = std::fs::read_to_string(dir.join("events.jsonl")).unwrap();
    let overridden: Vec<serde_json::Value> = events
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|e| e["event"] == "disruption_policy_overridden")
        .collect();
    assert_eq!(overridden.len(), 1, "{events}");
    assert!(
        overridden[0]["message"]
            .as_str()
            .unwrap()
            .contains("by alice: \"CVE-2026-1234 kernel fix\"")
    );
    assert!(
        events.contains("\"rollout_completed\""),
        "the roll went through: {events}"
    );

    let record = std::fs::read_to_string(dir.join(".poolwright/overrides.jsonl")).unwrap();
    let record: serde_json::Value = serde_json::from_str(record.lines().next().unwrap()).unwrap();
    assert_eq!(record["pool"], "web");
    assert_eq!(record["by"], "alice");
    assert_eq!(record["reason"], "CVE-2026-1234 kernel fix");

    let out = poolwright(dir, &["plan", "config", "--detailed-exitcode"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
}
