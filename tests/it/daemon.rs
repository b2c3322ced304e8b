//! `poolwright run` end to end on the simulator: a real daemon process, its
//! HTTP status surface, its event log, the simulator's audit of the calls it
//! received, and real signals.

use crate::support::daemon as daemon_support;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::git_servers::git;
use daemon_support::Daemon;

use serde_json::Value;

const PROVIDER: &str = "apiVersion: poolwright/v1\nkind: Provider\nmetadata: {name: sim}\nspec:\n  type: sim\n  seed: 7\n  speed: 50\n  bootTime: {fixed: 20s}\n  healthDelay: {fixed: 5s}\n  drainTime: {fixed: 10s}\n  terminateTime: {fixed: 5s}\n";

fn pool(image: &str) -> String {
    format!(
        "apiVersion: poolwright/v1\nkind: NodePool\nmetadata: {{name: web}}\nspec:\n  providerRef: sim\n  size: 4\n  template: {{image: {image}}}\n  rollout:\n    maxSurge: 1\n    maxUnavailable: 0\n    health: {{minReady: 200ms}}\n"
    )
}

fn setup(image: &str) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("config");
    std::fs::create_dir_all(&config).unwrap();
    std::fs::write(config.join("providers.yaml"), PROVIDER).unwrap();
    std::fs::write(config.join("web.yaml"), pool(image)).unwrap();
    tmp
}

fn events(root: &Path) -> Vec<Value> {
    crate::support::jsonl::read(&root.join("state/events.jsonl"))
}

/// The simulator's own record of the calls it received.
fn audit_calls(root: &Path, prefix: &str) -> Vec<String> {
    std::fs::read_to_string(root.join("state/sim/sim.audit.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|v| v["call"].as_str().map(str::to_string))
        .filter(|c| c.starts_with(prefix))
        .collect()
}

fn in_sync_with(image_nodes: u64) -> impl Fn(&Value) -> bool {
    move |s: &Value| {
        s["pools"].as_array().is_some_and(|pools| {
            pools.iter().any(|p| {
                p["name"] == "web"
                    && p["state"] == "in-sync"
                    && p["rollout"]["updated"] == image_nodes
                    && p["rollout"]["available"] == image_nodes
            })
        })
    }
}

fn assert_bounds(root: &Path) {
    for e in events(root) {
        if e["pool"] != "web" || e["event"] == "pool_created" {
            continue;
        }
        let Some(c) = e.get("counts") else { continue };
        assert!(c["total"].as_u64().unwrap() <= 5, "surge exceeded: {e}");
        assert!(
            c["available"].as_u64().unwrap() >= 4,
            "unavailable exceeded: {e}"
        );
    }
}

#[test]
fn a_template_change_rolls_to_completion_seen_through_status_metrics_and_events() {
    let tmp = setup("img-1");
    let d = Daemon::start(tmp.path(), &[]);
    let s = d.wait_for(
        "the pool created and healthy",
        Duration::from_secs(30),
        in_sync_with(4),
    );
    let first = s["pools"][0]["rollout"]["target"].clone();
    let (code, body) = d.get("/readyz");
    assert_eq!((code, body.as_str()), (200, "ready\n"));
    assert_eq!(d.get("/healthz").0, 200);

    std::fs::write(tmp.path().join("config/web.yaml"), pool("img-2")).unwrap();
    let s = d.wait_for("the rollout to complete", Duration::from_secs(60), |s| {
        in_sync_with(4)(s) && s["pools"][0]["rollout"]["target"] != first
    });
    let target = s["pools"][0]["rollout"]["target"]
        .as_str()
        .unwrap()
        .to_string();

    let evs = events(tmp.path());
    let completed: Vec<&Value> = evs
        .iter()
        .filter(|e| e["event"] == "rollout_completed")
        .collect();
    assert_eq!(completed.len(), 1, "one rollout, completed once: {evs:#?}");
    assert!(evs.iter().any(
        |e| e["event"] == "rollout_started" && e["message"].as_str().unwrap().contains(&target)
    ));
    assert_bounds(tmp.path());
    assert_eq!(
        audit_calls(tmp.path(), "TerminateNode(").len(),
        4,
        "each old node terminated once"
    );

    // Metrics parse as Prometheus text and say what happened.
    assert!(d.metric("poolwright_reconciles_total", &[("trigger", "files")]) >= 1.0);
    assert_eq!(d.metric("poolwright_config_valid", &[]), 1.0);
    assert_eq!(d.metric("poolwright_pools", &[("state", "in-sync")]), 1.0);
    assert_eq!(
        d.metric("poolwright_nodes", &[("pool", "web"), ("state", "healthy")]),
        4.0
    );
    assert!(
        d.metric(
            "poolwright_provider_calls_total",
            &[("provider", "sim"), ("call", "create_nodes")]
        ) >= 4.0
    );
    assert!(
        d.metric(
            "poolwright_provider_call_duration_seconds_count",
            &[("call", "describe_pools")]
        ) >= 1.0
    );
    assert!(d.metric("poolwright_events_total", &[("event", "rollout_completed")]) == 1.0);
    assert!(d.metric("poolwright_reconcile_duration_seconds_count", &[]) >= 2.0);

    assert!(d.terminate().success(), "SIGTERM exits 0");
}

#[test]
fn an_invalid_file_acts_on_nothing_and_status_says_where() {
    let tmp = setup("img-1");
    let d = Daemon::start(tmp.path(), &[]);
    d.wait_for(
        "the pool created and healthy",
        Duration::from_secs(30),
        in_sync_with(4),
    );
    let calls_before = audit_calls(tmp.path(), "").len();

    // A template change together with a broken value: nothing may act.
    std::fs::write(
        tmp.path().join("config/web.yaml"),
        pool("img-2").replace("size: 4", "size: -4"),
    )
    .unwrap();
    let s = d.wait_for("the load error in status", Duration::from_secs(10), |s| {
        s["config"]["valid"] == false
    });
    let errors = s["config"]["errors"].as_array().unwrap();
    assert_eq!(errors.len(), 1, "{errors:?}");
    let e = errors[0].as_str().unwrap();
    assert!(
        e.starts_with("config/web.yaml:6:9: error:"),
        "file:line:col first: {e}"
    );
    assert_eq!(d.metric("poolwright_config_valid", &[]), 0.0);
    assert!(d.metric("poolwright_config_load_errors_total", &[]) >= 1.0);
    assert_eq!(
        d.get("/readyz").0,
        200,
        "still ready: the last good desired state is in force"
    );
    // A resync still reconciles with the last good state, and changes nothing.
    Command::new("kill")
        .args(["-HUP", &d.child.id().to_string()])
        .status()
        .unwrap();
    std::thread::sleep(Duration::from_millis(800));
    let mutating: Vec<String> = audit_calls(tmp.path(), "")[calls_before..]
        .iter()
        .filter(|c| !c.starts_with("DescribePools"))
        .cloned()
        .collect();
    assert!(
        mutating.is_empty(),
        "a broken file made calls: {mutating:?}"
    );
    assert_eq!(d.pool("web")["state"], "in-sync");

    // The next good load resumes.
    std::fs::write(tmp.path().join("config/web.yaml"), pool("img-2")).unwrap();
    d.wait_for("the fixed file to load", Duration::from_secs(10), |s| {
        s["config"]["valid"] == true
    });
    d.wait_for("the rollout to complete", Duration::from_secs(60), |s| {
        in_sync_with(4)(s) && s["reconcile"]["count"].as_u64().unwrap() > 2
    });
    assert_eq!(audit_calls(tmp.path(), "TerminateNode(").len(), 4);
}

#[test]
fn in_git_committed_only_mode_a_commit_reconciles_once_and_an_edit_not_at_all() {
    let tmp = setup("img-1");
    let config = tmp.path().join("config");
    git(&config, &["init", "-q", "-b", "main"]);
    git(&config, &["add", "."]);
    git(&config, &["commit", "-q", "-m", "first fleet"]);
    let d = Daemon::start(tmp.path(), &["--git-committed-only"]);
    let s = d.wait_for(
        "the pool created and healthy",
        Duration::from_secs(30),
        in_sync_with(4),
    );
    assert_eq!(s["config"]["revision"]["subject"], "first fleet");
    assert_eq!(s["config"]["revision"]["dirty"], false);
    let files = |d: &Daemon| d.metric("poolwright_reconciles_total", &[("trigger", "files")]);
    assert_eq!(files(&d), 0.0);

    // An uncommitted edit: no reconcile, nothing acts.
    std::fs::write(config.join("web.yaml"), pool("img-2")).unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(files(&d), 0.0, "an uncommitted edit triggered a reconcile");
    assert_eq!(audit_calls(tmp.path(), "SetTemplate(").len(), 0);

    // Committing it: exactly one reconcile, from the commit, carrying its revision.
    git(&config, &["commit", "-q", "-am", "roll web to img-2"]);
    d.wait_for(
        "the commit to be reconciled",
        Duration::from_secs(10),
        |s| s["config"]["revision"]["subject"] == "roll web to img-2",
    );
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(files(&d), 1.0, "one commit, one reconcile");
    d.wait_for("the rollout to complete", Duration::from_secs(60), |s| {
        in_sync_with(4)(s)
            && s["pools"][0]["revision"]
                .as_str()
                .is_some_and(|r| r.starts_with("main@"))
    });
    let evs = events(tmp.path());
    let started = evs
        .iter()
        .find(|e| e["event"] == "rollout_started")
        .expect("a rollout");
    assert!(
        started["revision"].as_str().unwrap().starts_with("main@"),
        "events carry the revision: {started}"
    );
}

#[test]
fn sigterm_mid_rollout_stops_at_a_safe_point_and_a_restart_finishes_without_repeating() {
    let tmp = setup("img-1");
    let d = Daemon::start(tmp.path(), &[]);
    d.wait_for(
        "the pool created and healthy",
        Duration::from_secs(30),
        in_sync_with(4),
    );
    std::fs::write(tmp.path().join("config/web.yaml"), pool("img-2")).unwrap();
    // Let the rollout act, then stop the daemon mid-way.
    d.wait_for_event("the rollout to get going", |e| {
        e["event"] == "node_create_requested" && e["counts"]["updated"] == 1
    });
    let status = d.terminate();
    assert!(
        status.success(),
        "SIGTERM mid-rollout exits 0, got {status}"
    );
    assert!(
        tmp.path().join("state/journal/web.json").exists(),
        "the journal holds the unfinished rollout"
    );
    assert!(!tmp.path().join("state/daemon.json").exists());
    let log = std::fs::read_to_string(tmp.path().join("daemon.log")).unwrap();
    assert!(log.contains("stopping: no new steps start"), "{log}");

    let d = Daemon::start(tmp.path(), &[]);
    d.wait_for(
        "the resumed rollout to complete",
        Duration::from_secs(60),
        |s| in_sync_with(4)(s) && !tmp.path().join("state/journal/web.json").exists(),
    );
    let mut terminated = audit_calls(tmp.path(), "TerminateNode(");
    let n = terminated.len();
    terminated.sort();
    terminated.dedup();
    assert_eq!(
        (n, terminated.len()),
        (4, 4),
        "each old node terminated exactly once"
    );
    let created: usize = audit_calls(tmp.path(), "CreateNodes(").len();
    assert_eq!(
        created,
        4,
        "one new node per old node, none repeated: {:?}",
        audit_calls(tmp.path(), "CreateNodes(")
    );
    assert_bounds(tmp.path());
    let evs = events(tmp.path());
    let count = |name: &str| evs.iter().filter(|e| e["event"] == name).count();
    assert_eq!(
        count("rollout_started"),
        2,
        "started, then resumed from the journal"
    );
    assert_eq!(count("rollout_stopped"), 1, "the stop is recorded as such");
    // The restarted daemon finds the pool above its size (the surge in
    // flight): that is the rollout's own doing, not a scale step.
    assert_eq!(
        count("pool_scaled"),
        0,
        "a resumed rollout's surge is not reported as a scale: {:?}",
        evs.iter()
            .filter(|e| e["event"] == "pool_scaled")
            .collect::<Vec<_>>()
    );
    assert_eq!(
        count("rollout_completed"),
        1,
        "completed once, by the second daemon"
    );
}

#[test]
fn the_daemon_holds_the_state_lock_and_takes_pause_and_resume() {
    let tmp = setup("img-1");
    let d = Daemon::start(tmp.path(), &[]);
    d.wait_for(
        "the pool created and healthy",
        Duration::from_secs(30),
        in_sync_with(4),
    );
    let cli = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_poolwright"))
            .current_dir(tmp.path())
            .args(args)
            .env_remove("POOLWRIGHT_STATE_DIR")
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let out = cli(&["apply", "config", "--state-dir", "state", "--auto-approve"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("is locked by poolwright run config (pid"),
        "{err}"
    );

    // `poolwright status` renders the daemon's status.
    let out = cli(&["status", "--state-dir", "state"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("web   in-sync  4/4 done, 4 available"),
        "{text}"
    );

    // Pause a rollout through the daemon, then resume it.
    std::fs::write(tmp.path().join("config/web.yaml"), pool("img-2")).unwrap();
    let started = Instant::now();
    while !tmp.path().join("state/journal/web.json").exists() {
        assert!(started.elapsed() < Duration::from_secs(10));
        std::thread::sleep(Duration::from_millis(10));
    }
    let out = cli(&["rollout", "pause", "web", "--state-dir", "state"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("through the daemon"));
    d.wait_for("the pause to take hold", Duration::from_secs(10), |s| {
        s["pools"][0]["state"] == "paused"
    });
    let terminated = audit_calls(tmp.path(), "TerminateNode(").len();
    std::thread::sleep(Duration::from_millis(1000));
    let out = cli(&["rollout", "status", "web", "--state-dir", "state"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("paused by uid"));
    assert_eq!(
        audit_calls(tmp.path(), "TerminateNode(").len(),
        terminated,
        "paused: no node taken down"
    );
    let out = cli(&["rollout", "resume", "web", "--state-dir", "state"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    d.wait_for(
        "the resumed rollout to complete",
        Duration::from_secs(60),
        |s| in_sync_with(4)(s) && !tmp.path().join("state/journal/web.json").exists(),
    );
    assert_bounds(tmp.path());
}

#[test]
fn dry_run_plans_and_exports_but_never_acts() {
    let tmp = setup("img-1");
    let d = Daemon::start(tmp.path(), &["--dry-run"]);
    let s = d.wait_for("a plan", Duration::from_secs(10), |s| {
        s["pools"][0]["state"] == "pending"
    });
    assert_eq!(s["daemon"]["mode"], "dry-run");
    assert!(
        s["pools"][0]["message"]
            .as_str()
            .unwrap()
            .contains("dry-run: would create pool (4 nodes)"),
        "{s:#}"
    );
    let (code, plan) = d.get("/v1/plan");
    assert_eq!(code, 200);
    let plan: Value = serde_json::from_str(&plan).unwrap();
    assert_eq!(plan["pools"][0]["actions"][0], "create", "{plan:#}");
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        audit_calls(tmp.path(), "")
            .iter()
            .all(|c| c.starts_with("DescribePools")),
        "dry-run acted"
    );
    assert!(!tmp.path().join("state/inventory.json").exists());
    let log = std::fs::read_to_string(tmp.path().join("daemon.log")).unwrap();
    assert!(log.contains("would apply"), "the diff is logged: {log}");
}

#[test]
fn a_pool_held_by_its_disruption_policy_is_shown_blocked_with_until_when() {
    let tmp = setup("img-1");
    let frozen = |image: &str| {
        pool(image) + "  disruption: {policy: Block, until: \"2099-01-01T00:00:00Z\"}\n"
    };
    std::fs::write(tmp.path().join("config/web.yaml"), frozen("img-1")).unwrap();
    let d = Daemon::start(tmp.path(), &[]);
    d.wait_for(
        "the pool created (creating is not disruptive)",
        Duration::from_secs(30),
        in_sync_with(4),
    );
    std::fs::write(tmp.path().join("config/web.yaml"), frozen("img-2")).unwrap();
    let s = d.wait_for("the roll to be held", Duration::from_secs(10), |s| {
        s["pools"][0]["state"] == "blocked"
    });
    let p = &s["pools"][0];
    assert_eq!(p["blocked"]["until"], "2099-01-01T00:00:00Z", "{p:#}");
    assert!(
        p["blocked"]["reason"]
            .as_str()
            .unwrap()
            .contains("disruption policy Block")
    );
    assert!(
        p["message"]
            .as_str()
            .unwrap()
            .contains("until 2099-01-01T00:00:00Z")
    );
    assert_eq!(
        d.metric("poolwright_blocked_operations", &[("pool", "web")]),
        1.0
    );
    assert_eq!(
        d.metric(
            "poolwright_next_window_start_timestamp_seconds",
            &[("pool", "web")]
        ),
        4070908800.0
    );
    assert_eq!(d.metric("poolwright_pools", &[("state", "blocked")]), 1.0);
    let evs = events(tmp.path());
    assert_eq!(
        evs.iter()
            .filter(|e| e["event"] == "blocked_by_policy")
            .count(),
        1,
        "{evs:#?}"
    );
    assert!(audit_calls(tmp.path(), "TerminateNode(").is_empty());
    // Lifting the freeze lets the roll go, and says so.
    std::fs::write(tmp.path().join("config/web.yaml"), pool("img-2")).unwrap();
    d.wait_for("the rollout to complete", Duration::from_secs(60), |s| {
        in_sync_with(4)(s) && audit_calls(tmp.path(), "TerminateNode(").len() == 4
    });
    let resumed: Vec<Value> = events(tmp.path())
        .into_iter()
        .filter(|e| e["event"] == "resumed_in_window")
        .collect();
    assert_eq!(resumed.len(), 1, "announced once: {resumed:#?}");
    assert!(
        d.metric(
            "poolwright_policy_blocked_seconds_total",
            &[("pool", "web")]
        ) > 0.0
    );
}

#[test]
fn systemd_hears_ready_status_watchdog_and_stopping() {
    use std::os::unix::net::UnixDatagram;
    let tmp = setup("img-1");
    let socket_path = tmp.path().join("notify.sock");
    let socket = UnixDatagram::bind(&socket_path).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let d = Daemon::start_with_env(
        tmp.path(),
        &[],
        &[
            ("NOTIFY_SOCKET", socket_path.to_str().unwrap()),
            ("WATCHDOG_USEC", "400000"),
        ],
    );
    let mut seen = Vec::new();
    let read = |until: &str, seen: &mut Vec<String>| {
        let started = Instant::now();
        let mut buf = [0u8; 4096];
        while !seen.iter().any(|m: &String| m.contains(until)) {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "no {until} in {seen:?}"
            );
            let n = socket.recv(&mut buf).expect("a notification");
            seen.push(String::from_utf8_lossy(&buf[..n]).to_string());
        }
    };
    read("READY=1", &mut seen);
    let ready = seen.iter().find(|m| m.contains("READY=1")).unwrap();
    assert!(ready.contains("STATUS=1 pools:"), "{ready}");
    // The watchdog is fed from the loop at half the interval.
    let before = seen.iter().filter(|m| m.contains("WATCHDOG=1")).count();
    let started = Instant::now();
    while seen.iter().filter(|m| m.contains("WATCHDOG=1")).count() < before + 3 {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "watchdog not fed: {seen:?}"
        );
        let mut buf = [0u8; 4096];
        let n = socket.recv(&mut buf).unwrap();
        seen.push(String::from_utf8_lossy(&buf[..n]).to_string());
    }
    assert!(d.terminate().success());
    read("STOPPING=1", &mut seen);
}

#[test]
fn a_new_desired_state_mid_rollout_supersedes_it_through_the_executor() {
    let tmp = setup("img-1");
    let d = Daemon::start(tmp.path(), &[]);
    d.wait_for(
        "the pool created and healthy",
        Duration::from_secs(30),
        in_sync_with(4),
    );
    std::fs::write(tmp.path().join("config/web.yaml"), pool("img-2")).unwrap();
    d.wait_for_event("the rollout to get going", |e| {
        e["event"] == "node_create_requested"
    });
    std::fs::write(tmp.path().join("config/web.yaml"), pool("img-3")).unwrap();
    let s = d.wait_for(
        "the superseding rollout to complete",
        Duration::from_secs(90),
        |s| in_sync_with(4)(s) && !tmp.path().join("state/journal/web.json").exists(),
    );
    let evs = events(tmp.path());
    let starts: Vec<&Value> = evs
        .iter()
        .filter(|e| e["event"] == "rollout_started")
        .collect();
    assert_eq!(starts.len(), 2, "{evs:#?}");
    let final_target = s["pools"][0]["rollout"]["target"].as_str().unwrap();
    assert!(
        starts[1]["message"]
            .as_str()
            .unwrap()
            .contains(final_target)
    );
    assert_eq!(
        evs.iter()
            .filter(|e| e["event"] == "rollout_completed")
            .count(),
        1
    );
    assert_bounds(tmp.path());
}

/// Issue 14 1c, as measured: under `poolwright run`, a roll of 8 nodes at
/// maxSurge 1; the file is changed to maxSurge 4. The daemon kept launching one
/// node at a time. A change of the rollout settings must reach the running
/// rollout at its next step, and say what changed.
#[test]
fn a_budget_edited_mid_rollout_takes_effect_at_the_next_step() {
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("config");
    std::fs::create_dir_all(&config).unwrap();
    std::fs::write(
        config.join("providers.yaml"),
        "apiVersion: poolwright/v1\nkind: Provider\nmetadata: {name: sim}\nspec:\n  type: sim\n  seed: 7\n  speed: 10\n  bootTime: {fixed: 30s}\n  healthDelay: {fixed: 5s}\n  drainTime: {fixed: 5s}\n  terminateTime: {fixed: 5s}\n",
    )
    .unwrap();
    let web = |image: &str, surge: u32| {
        format!(
            "apiVersion: poolwright/v1\nkind: NodePool\nmetadata: {{name: web}}\nspec:\n  providerRef: sim\n  size: 8\n  template: {{image: {image}}}\n  rollout:\n    maxSurge: {surge}\n    maxUnavailable: 0\n    health: {{minReady: 0s}}\n"
        )
    };
    std::fs::write(config.join("web.yaml"), web("img-1", 1)).unwrap();
    let d = Daemon::start(tmp.path(), &[]);
    d.wait_for("8 nodes up", Duration::from_secs(60), in_sync_with(8));
    std::fs::write(config.join("web.yaml"), web("img-2", 1)).unwrap();
    d.wait_for_event("the first replacement", |e| {
        e["event"] == "node_create_requested"
    });
    let edited = Instant::now();
    std::fs::write(config.join("web.yaml"), web("img-2", 4)).unwrap();
    d.wait_for_event("the settings change reported", |e| {
        e["event"] == "rollout_settings_changed"
            && e["message"]
                .as_str()
                .is_some_and(|m| m.contains("maxSurge 1 -> 4"))
    });
    let took = edited.elapsed();
    assert!(
        took < Duration::from_secs(3),
        "the new budget reached the rollout after {took:?}"
    );
    // Now up to 4 surge nodes at once: more than 9 nodes are seen.
    let started = Instant::now();
    loop {
        let most = events(tmp.path())
            .iter()
            .filter(|e| e["pool"] == "web")
            .filter_map(|e| e["counts"]["total"].as_u64())
            .max()
            .unwrap_or(0);
        if most > 9 {
            assert!(most <= 12, "surge 4 exceeded: {most} nodes");
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "still one node at a time after the edit; log: {}",
            d.log_tail()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    d.wait_for("the roll to finish", Duration::from_secs(90), |s| {
        in_sync_with(8)(s) && !tmp.path().join("state/journal/web.json").exists()
    });
    let starts = events(tmp.path())
        .iter()
        .filter(|e| e["event"] == "rollout_started")
        .count();
    assert_eq!(starts, 2, "the same rollout, resumed with the new settings");
}

/// A roll that the disruption policy does not hold (an image change under
/// `appliesTo: [config]`, the AKS rule) is not held either once a SIGTERM
/// and a restart interrupt it: the journal keeps what kind of change it is.
#[test]
fn a_resumed_rollout_keeps_its_change_classes_across_a_sigterm_and_restart() {
    let tmp = setup("img-1");
    let guarded = |image: &str| {
        pool(image)
            + "  disruption: {policy: Block, until: \"2099-01-01T00:00:00Z\", appliesTo: [config]}\n"
    };
    std::fs::write(tmp.path().join("config/web.yaml"), guarded("img-1")).unwrap();
    let d = Daemon::start(tmp.path(), &[]);
    d.wait_for("the pool created", Duration::from_secs(30), in_sync_with(4));
    std::fs::write(tmp.path().join("config/web.yaml"), guarded("img-2")).unwrap();
    d.wait_for_event("the image roll to get going", |e| {
        e["event"] == "node_create_requested" && e["counts"]["updated"] == 1
    });
    assert!(d.terminate().success());
    let journal = std::fs::read_to_string(tmp.path().join("state/journal/web.json")).unwrap();
    let journal: Value = serde_json::from_str(&journal).unwrap();
    assert_eq!(
        journal["classes"],
        serde_json::json!(["image"]),
        "{journal:#}"
    );

    // The plan of the interrupted roll names the journal's class, not all four.
    let plan = Command::new(env!("CARGO_BIN_EXE_poolwright"))
        .current_dir(tmp.path())
        .args(["plan", "config", "--state-dir", "state"])
        .env_remove("POOLWRIGHT_STATE_DIR")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&plan.stdout);
    assert!(!text.contains("blocked by disruption policy"), "{text}");
    assert!(!text.contains("kubernetesVersion"), "{text}");
    assert!(plan.status.success(), "{text}");

    let d = Daemon::start(tmp.path(), &[]);
    d.wait_for(
        "the resumed image roll to complete, not held",
        Duration::from_secs(60),
        |s| in_sync_with(4)(s) && !tmp.path().join("state/journal/web.json").exists(),
    );
    let evs = events(tmp.path());
    assert!(
        !evs.iter().any(|e| e["event"] == "blocked_by_policy"),
        "{:#?}",
        evs.iter()
            .filter(|e| e["event"] == "blocked_by_policy")
            .collect::<Vec<_>>()
    );
    assert_eq!(audit_calls(tmp.path(), "TerminateNode(").len(), 4);
    drop(d);
}

/// `poolwright` run as another user, in group `gid` besides its own.
fn as_member(uid: u32, gid: u32, root: &Path, args: &[&str]) -> std::process::Output {
    Command::new("setpriv")
        .args([
            &format!("--reuid={uid}"),
            &format!("--regid={uid}"),
            &format!("--groups={gid}"),
            "--",
            env!("CARGO_BIN_EXE_poolwright"),
        ])
        .args(args)
        .current_dir(root)
        .env_remove("POOLWRIGHT_STATE_DIR")
        .env("NO_COLOR", "1")
        .output()
        .expect("running setpriv (util-linux)")
}

/// A member of `--control-group` uses the CLI end to end, as a second uid:
/// `status`, `rollout status` and `rollout pause|resume` reach the daemon on
/// its socket, without reading the daemon's files (daemon.json, journals
/// and the lock are the daemon's alone). Needs root, to be two users.
#[test]
fn a_control_group_member_uses_the_cli_as_another_user() {
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "this test runs the CLI as a second user and needs root (CI runs as root)"
    );
    let (member, group) = (4243, 4242);
    let tmp = setup("img-1");
    // As the unit lays it out: the state directory 0750, in the group.
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    let state = tmp.path().join("state");
    std::fs::create_dir_all(&state).unwrap();
    std::os::unix::fs::chown(&state, None, Some(group)).unwrap();
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o750)).unwrap();
    let d = Daemon::start(tmp.path(), &["--control-group", &group.to_string()]);
    d.wait_for("web in sync", Duration::from_secs(30), in_sync_with(4));
    std::fs::write(
        tmp.path().join("config/web.yaml"),
        pool("img-2").replace("minReady: 200ms", "minReady: 30s"),
    )
    .unwrap();
    d.wait_for_event("the roll under way", |e| {
        e["event"] == "node_create_requested"
    });

    let text = |o: &std::process::Output| {
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    };
    let st = ["--state-dir", "state"];
    let o = as_member(member, group, tmp.path(), &[&["status"][..], &st].concat());
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("web"), "{}", text(&o));
    let o = as_member(
        member,
        group,
        tmp.path(),
        &[&["rollout", "status", "web"][..], &st].concat(),
    );
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("nodepool.web: running"), "{}", text(&o));
    let o = as_member(
        member,
        group,
        tmp.path(),
        &[
            &["rollout", "pause", "web", "--reason", "member test"][..],
            &st,
        ]
        .concat(),
    );
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("through the daemon's control socket"),
        "{}",
        text(&o)
    );
    d.wait_for("paused", Duration::from_secs(30), |s| {
        s["pools"][0]["state"] == "paused"
    });
    let o = as_member(
        member,
        group,
        tmp.path(),
        &[&["rollout", "status", "web"][..], &st].concat(),
    );
    assert!(text(&o).contains("paused"), "{}", text(&o));
    // Someone outside the group reaches nothing, and is told why.
    let o = Command::new("setpriv")
        .args(["--reuid=4244", "--regid=4244", "--clear-groups", "--"])
        .arg(env!("CARGO_BIN_EXE_poolwright"))
        .args(["rollout", "resume", "web", "--state-dir", "state"])
        .current_dir(tmp.path())
        .env_remove("POOLWRIGHT_STATE_DIR")
        .output()
        .unwrap();
    assert!(!o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("No daemon answers on"), "{}", text(&o));
}

/// In sync means the desired number of nodes available: a pool created with
/// an image whose nodes never become healthy has nothing due, and is shown
/// `unavailable` with its count, never `in-sync` with 0 available. Once the
/// image is fixed and rolled, it is in sync.
#[test]
fn a_pool_with_no_node_available_is_not_in_sync() {
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("config");
    std::fs::create_dir_all(&config).unwrap();
    std::fs::write(
        config.join("providers.yaml"),
        PROVIDER.replace(
            "  speed: 50\n",
            "  speed: 50\n  failures: {badImages: [img-bad]}\n",
        ),
    )
    .unwrap();
    std::fs::write(config.join("web.yaml"), pool("img-bad")).unwrap();
    let d = Daemon::start(tmp.path(), &[]);
    let s = d.wait_for(
        "the pool created, its nodes booted and never healthy",
        Duration::from_secs(30),
        |s| s["pools"][0]["state"] == "unavailable" && s["pools"][0]["rollout"]["total"] == 4,
    );
    let web = &s["pools"][0];
    assert_eq!(web["rollout"]["available"], 0, "{web}");
    assert_eq!(web["rollout"]["desired"], 4, "{web}");
    assert!(
        web["message"]
            .as_str()
            .unwrap()
            .starts_with("0 of 4 node(s) available"),
        "{web}"
    );
    // Never shown in sync meanwhile: a few more looks say the same.
    std::thread::sleep(Duration::from_secs(2));
    let (_, body) = d.get("/v1/status");
    let s: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(s["pools"][0]["state"], "unavailable", "{s}");
}
