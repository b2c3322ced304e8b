//! `poolwright plan` and `apply` as a user runs them: exit codes, saved plans,
//! the state lock, events, JSON, and prune safety.

use crate::support::world as common;

use std::path::Path;
use std::process::{Command, Output};

use common::{PROVIDER, pool};

struct Cli {
    dir: tempfile::TempDir,
}

impl Cli {
    fn new() -> Cli {
        let c = Cli {
            dir: tempfile::tempdir().unwrap(),
        };
        c.write("config/providers.yaml", PROVIDER);
        c.write("config/web.yaml", &pool("web", 3, "img-1", ""));
        c
    }
    fn write(&self, rel: &str, text: &str) {
        let p = self.dir.path().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    fn run(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_poolwright"))
            .args(args)
            .current_dir(self.dir.path())
            .env_remove("POOLWRIGHT_STATE_DIR")
            .env("NO_COLOR", "1")
            .output()
            .unwrap()
    }
    fn path(&self, rel: &str) -> std::path::PathBuf {
        self.dir.path().join(rel)
    }
}

fn out(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}
fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn detailed_exitcode_says_whether_there_are_changes() {
    let c = Cli::new();
    let o = c.run(&["plan", "config", "--detailed-exitcode"]);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(out(&o).contains("Plan: 1 to add, 0 to change, 0 to destroy, 0 to roll (0 nodes)."));
    // Terraform's single-dash spelling works too.
    assert_eq!(
        c.run(&["plan", "config", "-detailed-exitcode"])
            .status
            .code(),
        Some(2)
    );
    assert_eq!(c.run(&["plan", "config"]).status.code(), Some(0));

    let o = c.run(&["apply", "config", "--auto-approve"]);
    assert_eq!(o.status.code(), Some(0), "{}{}", out(&o), err(&o));
    assert!(out(&o).contains("Apply complete: 1 step(s) done."));

    let o = c.run(&["plan", "config", "--detailed-exitcode"]);
    assert_eq!(o.status.code(), Some(0));
    assert!(out(&o).contains("No changes."));
}

#[test]
fn an_invalid_directory_is_exit_1_and_changes_nothing() {
    let c = Cli::new();
    assert_eq!(
        c.run(&["apply", "config", "--auto-approve"]).status.code(),
        Some(0)
    );
    c.write(
        "config/web.yaml",
        &pool("web", 3, "img-1", "  rollout: {maxSurg: 1}\n"),
    );
    let o = c.run(&["apply", "config", "--auto-approve"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        err(&o).contains("config/web.yaml:8:13: error: unknown field \"maxSurg\""),
        "{}",
        err(&o)
    );
    assert!(err(&o).contains("nothing was changed"));
    assert_eq!(
        c.run(&["plan", "config", "--detailed-exitcode"])
            .status
            .code(),
        Some(1)
    );
}

#[test]
fn apply_without_a_terminal_needs_auto_approve() {
    let c = Cli::new();
    let o = c.run(&["apply", "config"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(err(&o).contains("standard input is not a terminal; pass --auto-approve"));
    assert!(
        !c.path(".poolwright/sim/sim.json").exists(),
        "nothing was created"
    );
}

#[test]
fn a_saved_plan_applies_only_while_fresh() {
    let c = Cli::new();
    let o = c.run(&["plan", "config", "-out", "web.plan"]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    // The saved plan was the approval, as in Terraform: applying it asks
    // nothing, even with no terminal to ask on.
    let o = c.run(&["apply", "web.plan"]);
    assert_eq!(o.status.code(), Some(0), "{}{}", out(&o), err(&o));
    assert!(out(&o).contains("Apply complete: 1 step(s) done."));
    assert!(!out(&o).contains("Do you want to perform these actions?"));
    // No terminal: every event is a timestamped line (a CI log is never
    // empty while a roll runs).
    assert!(
        err(&o)
            .lines()
            .any(|l| l.get(19..21) == Some("Z ")
                && l[21..].starts_with("nodepool.web: pool_created")),
        "{}",
        err(&o)
    );
    // A directory still needs the approval.
    c.write("config/web.yaml", &pool("web", 4, "img-1", ""));
    let o = c.run(&["apply", "config"]);
    assert_eq!(o.status.code(), Some(1), "{}{}", out(&o), err(&o));
    assert!(err(&o).contains("pass --auto-approve"), "{}", err(&o));
    c.write("config/web.yaml", &pool("web", 3, "img-1", ""));

    // A plan made, then the files change: refused.
    c.write("config/web.yaml", &pool("web", 4, "img-1", ""));
    assert_eq!(
        c.run(&["plan", "config", "--out", "scale.plan"])
            .status
            .code(),
        Some(0)
    );
    c.write("config/web.yaml", &pool("web", 5, "img-1", ""));
    let o = c.run(&["apply", "scale.plan", "--auto-approve"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        err(&o).contains("plan is stale: the desired state changed"),
        "{}",
        err(&o)
    );

    // A plan made, then the pools change: refused too.
    assert_eq!(
        c.run(&["plan", "config", "--out", "scale.plan"])
            .status
            .code(),
        Some(0)
    );
    // (another desired state, with a state directory of its own, adopts the
    // same simulated pool and scales it)
    c.write("other/providers.yaml", PROVIDER);
    c.write(
        "other/web.yaml",
        &pool("web", 2, "img-1", "  adopt: true\n"),
    );
    let other = Command::new(env!("CARGO_BIN_EXE_poolwright"))
        .args([
            "apply",
            "other",
            "--auto-approve",
            "--state-dir",
            "other-state",
        ])
        .current_dir(c.dir.path())
        .env("POOLWRIGHT_SIM_DIR", c.path(".poolwright/sim"))
        .output()
        .unwrap();
    assert_eq!(other.status.code(), Some(0), "{}", err(&other));
    let o = c.run(&["apply", "scale.plan", "--auto-approve"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        err(&o).contains("plan is stale: the observed pools changed"),
        "{}",
        err(&o)
    );
}

#[test]
fn apply_refuses_while_another_process_holds_the_state_lock() {
    let c = Cli::new();
    let _held =
        poolwright::store::StateLock::acquire(&c.path(".poolwright"), "poolwright run config")
            .unwrap();
    let o = c.run(&["apply", "config", "--auto-approve"]);
    assert_eq!(o.status.code(), Some(1));
    let e = err(&o);
    assert!(
        e.contains("is locked by poolwright run config (pid "),
        "{e}"
    );
    assert!(
        e.contains("only one apply or daemon may act on it at a time"),
        "{e}"
    );
}

#[test]
fn events_are_json_lines_with_counts() {
    let c = Cli::new();
    let o = c.run(&[
        "apply",
        "config",
        "--auto-approve",
        "--events",
        "events.jsonl",
    ]);
    assert_eq!(o.status.code(), Some(0));
    let text = std::fs::read_to_string(c.path("events.jsonl")).unwrap();
    let events: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["pool"], "web");
    assert_eq!(events[0]["event"], "pool_created");
    assert_eq!(events[0]["counts"]["desired"], 3);
    assert_eq!(events[0]["counts"]["total"], 3);
    assert!(events[0]["ts"].as_str().unwrap().ends_with('Z'));
}

/// `apply -o json`, as a program reads it: JSON lines only on standard
/// output (the plan first, then every event, the outcome last), the same
/// events the --events file gets; a roll's events carry their phase.
#[test]
fn apply_json_streams_the_plan_each_event_and_the_outcome_last() {
    let c = Cli::new();
    let lines = |o: &Output| crate::support::jsonl::parse(&out(o));
    let o = c.run(&["apply", "config", "-o", "json", "--auto-approve"]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let v = lines(&o);
    assert_eq!(v[0]["type"], "plan", "{v:#?}");
    assert_eq!(v[0]["plan"]["formatVersion"], 2, "{v:#?}");
    assert_eq!(
        v[0]["plan"]["pools"][0]["actions"],
        serde_json::json!(["create"])
    );
    assert_eq!(v[1]["type"], "event");
    assert_eq!(v[1]["event"], "pool_created");
    assert_eq!(v[1]["counts"]["desired"], 3);
    let last = v.last().unwrap();
    assert_eq!(last["type"], "outcome");
    assert_eq!(last["outcome"], "complete");
    assert_eq!(last["stepsDone"], 1);
    assert_eq!(last["errors"], serde_json::json!([]));

    // A roll: its events, with their phase, between the plan and the outcome.
    c.write(
        "config/web.yaml",
        &pool(
            "web",
            3,
            "img-2",
            "  rollout:\n    maxSurge: 1\n    health: {minReady: 100ms}\n",
        ),
    );
    let o = c.run(&[
        "apply",
        "config",
        "-json",
        "-auto-approve",
        "--events",
        "events.jsonl",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let v = lines(&o);
    let events: Vec<&serde_json::Value> = v.iter().filter(|e| e["type"] == "event").collect();
    let file: Vec<serde_json::Value> = std::fs::read_to_string(c.path("events.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        events.len(),
        file.len(),
        "stdout has every event the file has"
    );
    assert!(
        events
            .iter()
            .any(|e| e["event"] == "node_drained" && e["phase"]["kind"].is_string()),
        "{events:#?}"
    );
    assert_eq!(v.last().unwrap()["outcome"], "complete");
    // Nothing for a person on standard output: the plan's text is not there.
    assert!(!out(&o).contains("Apply complete"), "{}", out(&o));
    assert!(err(&o).contains("Apply complete"), "{}", err(&o));

    // No changes, and an error before any step: still an outcome line last.
    let o = c.run(&["apply", "config", "-o", "json", "--auto-approve"]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert_eq!(lines(&o).last().unwrap()["outcome"], "no-changes");
    c.write("config/broken.yaml", "kind: NodePool\nspec: [\n");
    let o = c.run(&["apply", "config", "-o", "json", "--auto-approve"]);
    assert_eq!(o.status.code(), Some(1));
    let v = lines(&o);
    assert_eq!(v.len(), 1, "{v:#?}");
    assert_eq!(v[0]["type"], "outcome");
    assert_eq!(v[0]["outcome"], "error");
    assert!(
        v[0]["errors"][0].as_str().unwrap().contains("invalid"),
        "{v:#?}"
    );
    assert!(err(&o).contains("broken.yaml:"), "{}", err(&o));
    std::fs::remove_file(c.path("config/broken.yaml")).unwrap();
    let o = c.run(&["apply", "config", "-o", "json"]);
    assert_eq!(o.status.code(), Some(1));
    let v = lines(&o);
    assert_eq!(v.len(), 1, "{v:#?}");
    assert_eq!(v[0]["outcome"], "error");
    assert!(
        v[0]["errors"][0]
            .as_str()
            .unwrap()
            .contains("cannot ask for confirmation"),
        "{v:#?}"
    );
}

#[test]
fn plan_json_is_versioned_with_terraform_actions() {
    let c = Cli::new();
    assert_eq!(
        c.run(&["apply", "config", "--auto-approve"]).status.code(),
        Some(0)
    );
    c.write(
        "config/web.yaml",
        &pool(
            "web",
            3,
            "img-2",
            "  rollout: {maxSurge: 0, maxUnavailable: 1}\n",
        ),
    );
    let o = c.run(&["plan", "config", "-o", "json"]);
    assert_eq!(o.status.code(), Some(0));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(doc["formatVersion"], 2);
    let web = &doc["pools"][0];
    assert_eq!(web["name"], "web");
    assert_eq!(web["actions"], serde_json::json!(["delete", "create"]));
    assert_eq!(web["before"]["image"], "img-1");
    assert_eq!(web["after"]["image"], "img-2");
    assert_eq!(web["rollout"]["strategy"], "terminate-before-create");
    assert_eq!(web["rollout"]["bounds"], serde_json::json!([2, 3]));
    assert_eq!(doc["summary"]["rollNodes"], 3);
}

#[test]
fn plan_shows_the_git_revision_of_the_config_repo() {
    let c = Cli::new();
    let git = |args: &[&str]| {
        let s = Command::new("git")
            .args(args)
            .current_dir(c.path("config"))
            .output()
            .unwrap();
        assert!(s.status.success(), "git {args:?}: {}", err(&s));
    };
    git(&["init", "-q", "-b", "main"]);
    git(&[
        "-c",
        "user.name=t",
        "-c",
        "user.email=t@example.com",
        "add",
        ".",
    ]);
    git(&[
        "-c",
        "user.name=t",
        "-c",
        "user.email=t@example.com",
        "commit",
        "-q",
        "-m",
        "Add the web pool",
    ]);
    let o = c.run(&["plan", "config"]);
    let text = out(&o);
    assert!(text.contains("Desired state: config at main@"), "{text}");
    assert!(!text.contains("(dirty)"), "{text}");
    assert!(text.contains("Commit: Add the web pool"), "{text}");
    c.write("config/web.yaml", &pool("web", 4, "img-1", ""));
    assert!(out(&c.run(&["plan", "config"])).contains("(dirty)"));
}

// ------------------------------------------------------------------ prune safety

fn sim_pools(c: &Cli) -> Vec<String> {
    let path = c.path(".poolwright/sim/sim.json");
    let fleet: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    fleet["pools"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect()
}

#[test]
fn a_removed_file_deletes_nothing_unless_pruning_is_enabled() {
    let c = Cli::new();
    c.write("config/old.yaml", &pool("old", 2, "img-1", ""));
    assert_eq!(
        c.run(&["apply", "config", "--auto-approve"]).status.code(),
        Some(0)
    );
    std::fs::remove_file(c.path("config/old.yaml")).unwrap();
    let o = c.run(&["apply", "config", "--auto-approve"]);
    assert_eq!(o.status.code(), Some(0));
    assert!(out(&o).contains("pruning is disabled"));
    assert_eq!(sim_pools(&c), ["old", "web"]);
    let o = c.run(&["apply", "config", "--auto-approve", "--prune"]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert_eq!(sim_pools(&c), ["web"]);
}

#[test]
fn an_unparsable_file_deletes_nothing_even_with_prune() {
    let c = Cli::new();
    c.write("config/old.yaml", &pool("old", 2, "img-1", ""));
    assert_eq!(
        c.run(&["apply", "config", "--auto-approve"]).status.code(),
        Some(0)
    );
    c.write(
        "config/old.yaml",
        "apiVersion: poolwright/v1\nkind: NodePool\nmetadata: {name: old\n",
    );
    let o = c.run(&["apply", "config", "--auto-approve", "--prune"]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(sim_pools(&c), ["old", "web"]);
}

#[test]
fn a_pool_poolwright_did_not_create_is_never_deleted() {
    let c = Cli::new();
    assert_eq!(
        c.run(&["apply", "config", "--auto-approve"]).status.code(),
        Some(0)
    );
    // Another tool creates "legacy" in the same simulator, with its own state dir
    // copy: poolwright's inventory does not list it.
    c.write("other/providers.yaml", PROVIDER);
    c.write("other/legacy.yaml", &pool("legacy", 1, "img-1", ""));
    let foreign_state = c.path("foreign-state");
    std::fs::create_dir_all(foreign_state.join("sim")).unwrap();
    std::fs::copy(
        c.path(".poolwright/sim/sim.json"),
        foreign_state.join("sim/sim.json"),
    )
    .unwrap();
    let o = c.run(&[
        "apply",
        "other",
        "--auto-approve",
        "--state-dir",
        foreign_state.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    std::fs::copy(
        foreign_state.join("sim/sim.json"),
        c.path(".poolwright/sim/sim.json"),
    )
    .unwrap();
    assert_eq!(sim_pools(&c), ["legacy", "web"]);

    let o = c.run(&["apply", "config", "--auto-approve", "--prune"]);
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(sim_pools(&c), ["legacy", "web"]);
}

#[test]
fn a_protected_pool_survives_its_file_being_removed() {
    let c = Cli::new();
    c.write(
        "config/db.yaml",
        &pool("db", 2, "img-1", "  lifecycle: {preventDestroy: true}\n"),
    );
    assert_eq!(
        c.run(&["apply", "config", "--auto-approve"]).status.code(),
        Some(0)
    );
    std::fs::remove_file(c.path("config/db.yaml")).unwrap();
    let o = c.run(&["apply", "config", "--auto-approve", "--prune"]);
    assert_eq!(o.status.code(), Some(0));
    assert!(out(&o).contains("protected by lifecycle.preventDestroy"));
    assert_eq!(sim_pools(&c), ["db", "web"]);
}

#[test]
fn an_empty_directory_deletes_nothing_even_with_prune() {
    let c = Cli::new();
    assert_eq!(
        c.run(&["apply", "config", "--auto-approve"]).status.code(),
        Some(0)
    );
    for f in ["config/web.yaml", "config/providers.yaml"] {
        std::fs::remove_file(c.path(f)).unwrap();
    }
    let o = c.run(&["apply", "config", "--auto-approve", "--prune"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(err(&o).contains("no desired-state files"));
    assert!(Path::new(&c.path(".poolwright/sim/sim.json")).exists());
    assert_eq!(sim_pools(&c), ["web"]);
}

// ------------------------------------------------------------------ rollouts

const BAD_IMAGE_PROVIDER: &str = "apiVersion: poolwright/v1\nkind: Provider\nmetadata: {name: sim}\nspec: {type: sim, seed: 1, speed: 100, failures: {brokenImages: [img-bad]}}\n";

fn rolling_pool(image: &str, on_failure: &str) -> String {
    pool(
        "web",
        2,
        image,
        &format!(
            "  rollout:\n    maxSurge: 1\n    maxUnavailable: 0\n    onFailure: {on_failure}\n    health: {{startupTimeout: 2s, minReady: 100ms}}\n"
        ),
    )
}

#[test]
fn a_bad_image_degrades_the_pool_until_a_human_resumes() {
    let c = Cli::new();
    c.write("config/providers.yaml", BAD_IMAGE_PROVIDER);
    c.write("config/web.yaml", &rolling_pool("img-1", "pause"));
    assert_eq!(
        c.run(&["apply", "config", "--auto-approve"]).status.code(),
        Some(0)
    );
    std::thread::sleep(std::time::Duration::from_millis(1500));

    c.write("config/web.yaml", &rolling_pool("img-bad", "pause"));
    let o = c.run(&[
        "apply",
        "config",
        "--auto-approve",
        "--events",
        "events.jsonl",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", out(&o));
    let e = err(&o);
    assert!(
        e.contains("Degraded: node web-") && e.contains("did not become healthy within 2s"),
        "{e}"
    );
    assert!(e.contains("poolwright rollout resume web"), "{e}");
    let events = std::fs::read_to_string(c.path("events.jsonl")).unwrap();
    assert!(
        events.contains("\"event\":\"node_failed\"") && events.contains("\"event\":\"degraded\"")
    );
    assert!(
        !events.contains("\"event\":\"drain_started\""),
        "no old node was taken down"
    );

    let o = c.run(&["rollout", "status", "web"]);
    assert!(out(&o).contains("nodepool.web: Degraded"), "{}", out(&o));
    let o = c.run(&["rollout", "resume", "web"]);
    assert_eq!(o.status.code(), Some(0));
    assert!(out(&o).contains("resumed"));

    // A fixed image supersedes the failed rollout and completes.
    c.write("config/web.yaml", &rolling_pool("img-2", "pause"));
    let o = c.run(&["apply", "config", "--auto-approve"]);
    assert_eq!(o.status.code(), Some(0), "{}{}", out(&o), err(&o));
    assert_eq!(
        c.run(&["plan", "config", "--detailed-exitcode"])
            .status
            .code(),
        Some(0)
    );
    assert!(out(&c.run(&["rollout", "status", "web"])).contains("no rollout in progress"));
}

#[test]
fn a_rolled_back_template_is_not_retried_until_resumed() {
    let c = Cli::new();
    c.write("config/providers.yaml", BAD_IMAGE_PROVIDER);
    c.write("config/web.yaml", &rolling_pool("img-1", "rollback"));
    assert_eq!(
        c.run(&["apply", "config", "--auto-approve"]).status.code(),
        Some(0)
    );
    std::thread::sleep(std::time::Duration::from_millis(1500));
    c.write("config/web.yaml", &rolling_pool("img-bad", "rollback"));
    let o = c.run(&["apply", "config", "--auto-approve"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(err(&o).contains("rolled back"), "{}", err(&o));

    let o = c.run(&["apply", "config", "--auto-approve"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        err(&o).contains("was rolled back at ")
            && err(&o)
                .contains("`poolwright rollout resume web` allows the template to be tried again"),
        "{}",
        err(&o)
    );
    assert!(
        out(&o).contains("Nothing will happen"),
        "the plan says the rolled-back template is left alone: {}",
        out(&o)
    );
    assert_eq!(c.run(&["rollout", "resume", "web"]).status.code(), Some(0));
}

/// SIGTERM (what a CI runner or `timeout` sends) stops `apply` at a safe
/// point as Ctrl-C does: the stop is an event, the journal resumes it.
#[test]
fn sigterm_stops_apply_at_a_safe_point_and_the_next_apply_resumes() {
    let c = Cli::new();
    assert_eq!(
        c.run(&["apply", "config", "--auto-approve"]).status.code(),
        Some(0)
    );
    c.write(
        "config/web.yaml",
        &pool(
            "web",
            3,
            "img-2",
            "  rollout: {maxSurge: 1, maxUnavailable: 0}\n",
        ),
    );
    let child = Command::new(env!("CARGO_BIN_EXE_poolwright"))
        .args([
            "apply",
            "config",
            "--auto-approve",
            "--events",
            "events.jsonl",
        ])
        .current_dir(c.dir.path())
        .env_remove("POOLWRIGHT_STATE_DIR")
        .env("NO_COLOR", "1")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let events = || {
        std::fs::read_to_string(c.path("events.jsonl"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .collect::<Vec<_>>()
    };
    let started = std::time::Instant::now();
    while !events()
        .iter()
        .any(|e| e["event"] == "node_create_requested")
    {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(30),
            "the roll never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(
        Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap()
            .success()
    );
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(1), "stopped, not killed: {}", err(&o));
    assert!(
        err(&o).contains("Terminated (SIGTERM): stopping at the next safe point"),
        "{}",
        err(&o)
    );
    assert!(out(&o).contains("Apply interrupted"), "{}", out(&o));
    assert!(
        events().iter().any(|e| e["event"] == "rollout_stopped"),
        "{:#?}",
        events()
    );
    assert!(c.path(".poolwright/journal/web.json").exists());
    // `desired` is the pool's size (3), never the provider's size with the
    // roll's surge in it (4), the stop's events included.
    let sizes: Vec<_> = events()
        .iter()
        .filter_map(|e| e["counts"]["desired"].as_u64())
        .collect();
    assert!(
        !sizes.is_empty() && sizes.iter().all(|d| *d == 3),
        "{sizes:?}"
    );
    // Stopped: nothing runs the roll now, and the status says so.
    let o = c.run(&["rollout", "status", "web"]);
    assert!(
        out(&o).contains("stopped: nothing runs it now; it resumes where it stopped on the next `poolwright apply`"),
        "{}",
        out(&o)
    );
    let o = c.run(&["rollout", "status", "web", "--wait"]);
    assert_eq!(o.status.code(), Some(1), "a stopped roll ends the wait");
    let o = c.run(&["rollout", "status", "web", "-o", "json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["status"], "stopped", "{v}");
    let o = c.run(&[
        "apply",
        "config",
        "--auto-approve",
        "--events",
        "events.jsonl",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}{}", out(&o), err(&o));
    assert!(!c.path(".poolwright/journal/web.json").exists());
    let sizes: Vec<_> = events()
        .iter()
        .filter_map(|e| e["counts"]["desired"].as_u64())
        .collect();
    assert!(sizes.iter().all(|d| *d == 3), "{sizes:?}");
    // Done: a wait ends at once, with 0.
    let o = c.run(&["rollout", "status", "web", "--wait"]);
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
}

/// The pool attached to Cluster `prod`.
fn in_cluster(pool: &str) -> String {
    pool.replace(
        "  providerRef: sim\n",
        "  providerRef: sim\n  clusterRef: prod\n",
    )
}

/// A Cluster that cannot be reached fails `plan` (it planned without the
/// nodes' Ready state, cordons and budgets) and `apply` before it acts,
/// unless `--allow-unreachable` says that is known and accepted.
#[test]
fn an_unreachable_cluster_fails_plan_and_apply_unless_allowed() {
    let c = Cli::new();
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    c.write(
        "kubeconfig",
        &format!(
            "apiVersion: v1\nkind: Config\nclusters: [{{name: c, cluster: {{server: \"https://127.0.0.1:{port}\"}}}}]\ncontexts: [{{name: x, context: {{cluster: c, user: u}}}}]\nusers: [{{name: u, user: {{token: t}}}}]\ncurrent-context: x\n"
        ),
    );
    c.write(
        "config/cluster.yaml",
        &format!(
            "apiVersion: poolwright/v1\nkind: Cluster\nmetadata: {{name: prod}}\nspec: {{kubeconfig: {}}}\n",
            c.path("kubeconfig").display()
        ),
    );
    c.write("config/web.yaml", &in_cluster(&pool("web", 3, "img-1", "")));
    // A new pool has no nodes to see: the cluster is not asked.
    let o = c.run(&["apply", "config", "--auto-approve"]);
    assert_eq!(o.status.code(), Some(0), "{}{}", out(&o), err(&o));
    let o = c.run(&["plan", "config"]);
    assert_eq!(o.status.code(), Some(1), "{}{}", out(&o), err(&o));
    assert!(out(&o).contains("No changes."), "{}", out(&o));
    assert!(
        err(&o).contains("error: cluster prod could not be read")
            && err(&o).contains("pass --allow-unreachable"),
        "{}",
        err(&o)
    );
    let o = c.run(&["plan", "config", "--allow-unreachable"]);
    assert_eq!(o.status.code(), Some(0), "{}{}", out(&o), err(&o));
    assert!(
        err(&o).contains("warning: cluster prod could not be read"),
        "{}",
        err(&o)
    );
    // A roll is refused before anything is done: no drain could reach it.
    c.write("config/web.yaml", &in_cluster(&pool("web", 3, "img-2", "")));
    let o = c.run(&["apply", "config", "--auto-approve"]);
    assert_eq!(o.status.code(), Some(1), "{}{}", out(&o), err(&o));
    assert!(err(&o).contains("nothing was changed"), "{}", err(&o));
    assert!(
        !c.path(".poolwright/journal/web.json").exists(),
        "no roll began"
    );
}
