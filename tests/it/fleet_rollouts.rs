//! Changes across pools, staged by a FleetRollout, on the daemon with the
//! embedded simulator.
//!
//! The measured case behind them: 40 pools of 3 nodes under one provider,
//! `onFailure: rollback`, and one edit that gave every pool an image whose
//! nodes never become healthy. Without a FleetRollout the daemon started 8
//! pools at once (the per-provider `--parallelism`), each failed its first
//! node and rolled back, then the next 8, and after 150 s all 40 pools were
//! degraded: nothing linked the pools, so nothing stopped the change.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use jiff::Timestamp;
use serde_json::Value;

use crate::support::daemon::Daemon;

fn provider(speed: u32) -> String {
    format!(
        "apiVersion: poolwright/v1\nkind: Provider\nmetadata: {{name: sim}}\nspec: {{type: sim, seed: 7, speed: {speed}, failures: {{badImages: [img-bad]}}}}\n"
    )
}

const RINGS: &str = "apiVersion: poolwright/v1
kind: FleetRollout
metadata: {name: rings}
spec:
  stages:
    - {name: canary, selector: {matchLabels: {ring: canary}}, soak: 30s}
    - {name: early, pools: \"25%\", soak: 30s}
    - {name: rest}
  halt: {failedPools: 1}
";

/// `count` pools of `size` nodes on `image`; pool-00 is the canary.
fn pools(count: usize, size: u32, image: &str, rollout: &str) -> String {
    (0..count)
        .map(|i| {
            let ring = if i == 0 { "canary" } else { "main" };
            format!(
                "---\napiVersion: poolwright/v1\nkind: NodePool\nmetadata: {{name: pool-{i:03}, labels: {{ring: {ring}}}}}\nspec:\n  providerRef: sim\n  size: {size}\n  template: {{image: {image}}}\n  rollout: {rollout}\n"
            )
        })
        .collect()
}

fn write(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

fn fleet(s: &Value) -> Value {
    s["fleets"][0].clone()
}

fn ts(e: &Value) -> Timestamp {
    e["ts"].as_str().unwrap().parse().unwrap()
}

/// The simulator's audit: each mutating call, as `Name(pool, ...)`.
fn audit(root: &Path) -> Vec<String> {
    crate::support::jsonl::read(&root.join("state/sim/sim.audit.jsonl"))
        .iter()
        .map(|v| v["call"].as_str().unwrap().to_string())
        .collect()
}

/// A scratch directory with an empty `config/` for the desired state; the
/// daemon or apply runs in the scratch directory itself.
fn scratch() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config");
    std::fs::create_dir(&config).unwrap();
    (dir, config)
}

fn pool_of_call(call: &str) -> &str {
    call.split_once('(')
        .map(|(_, rest)| rest.split([',', ')']).next().unwrap_or(""))
        .unwrap_or("")
}

#[test]
fn a_bad_image_for_every_pool_stops_at_the_canary_and_the_other_39_are_untouched() {
    let (dir, config) = scratch();
    let root = dir.path();
    let rollout = "{onFailure: rollback, health: {startupTimeout: 5s}}";
    write(&config.join("provider.yaml"), &provider(20));
    write(&config.join("rings.yaml"), RINGS);
    write(&config.join("pools.yaml"), &pools(40, 3, "img-1", rollout));
    let d = Daemon::start(root, &[]);
    d.wait_for("40 pools in sync", Duration::from_secs(60), |s| {
        s["pools"]
            .as_array()
            .is_some_and(|p| p.len() == 40 && p.iter().all(|p| p["state"] == "in-sync"))
    });
    let before = audit(root).len();

    // One edit gives every pool the bad image.
    write(
        &config.join("pools.yaml"),
        &pools(40, 3, "img-bad", rollout),
    );
    let s = d.wait_for("the change halts", Duration::from_secs(60), |s| {
        fleet(s)["status"] == "halted"
    });
    let f = fleet(&s);
    assert_eq!(f["failed"], 1, "{f:#}");
    assert!(
        f["message"].as_str().unwrap().contains("pool-000"),
        "the halt names the failed pool: {f:#}"
    );

    // The halt came within a second of the failure.
    let events = d.events();
    let failed = events
        .iter()
        .find(|e| e["event"] == "node_failed")
        .expect("the canary's node failed");
    let halted = events
        .iter()
        .find(|e| e["event"] == "fleet_halted")
        .expect("a fleet_halted event");
    assert_eq!(failed["pool"], "pool-000");
    let gap = ts(halted).duration_since(ts(failed));
    assert!(
        gap < jiff::SignedDuration::from_secs(1),
        "halted {gap} after the failure"
    );
    assert_eq!(halted["fleet"]["name"], "rings");
    // The halt names the node and why it failed, not only "a new node failed".
    let node = failed["node"].as_str().unwrap();
    let reason = halted["message"].as_str().unwrap();
    assert!(
        reason.contains(&format!(
            "new node {node} was not healthy within startupTimeout"
        )),
        "{reason}"
    );

    // Only the canary pool launched a node; the simulator saw no call on
    // the other 39, then or since.
    std::thread::sleep(Duration::from_secs(3));
    let launched: BTreeSet<String> = d
        .events()
        .iter()
        .filter(|e| e["event"] == "node_create_requested")
        .map(|e| e["pool"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(launched, BTreeSet::from(["pool-000".to_string()]));
    let calls = audit(root);
    let touched: BTreeSet<&str> = calls[before..].iter().map(|c| pool_of_call(c)).collect();
    assert_eq!(
        touched,
        BTreeSet::from(["pool-000"]),
        "calls since the edit: {:?}",
        &calls[before..]
    );
    let held = d.status()["pools"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["state"] == "held")
        .count();
    assert_eq!(held, 39, "every other pool is held, and says so");
    let pool = d.pool("pool-017");
    assert!(
        pool["message"].as_str().unwrap().contains("halted"),
        "{pool:#}"
    );
    assert_eq!(
        d.metric("poolwright_fleet_halted", &[("fleet", "rings")]),
        1.0
    );

    // The CLI says where the change stands, and exits 1 while it is halted.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_poolwright"))
        .current_dir(root)
        .args(["fleet", "status", "--state-dir", "state"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("HALTED") && text.contains("pool-000"),
        "{text}"
    );
}

/// A new node counts as available at once (the simulator's clock runs fast;
/// `minReady` is real time).
const ROLLOUT: &str = "{health: {minReady: 0s}}";

/// A good image over 200 pools, 3 stages with soaks, at most 8 at once: the
/// stages start in order, each after the soak of the one before, and no
/// more than 8 pools ever roll at once.
#[test]
fn a_good_image_over_200_pools_rolls_stage_by_stage_within_8_at_once() {
    let (dir, config) = scratch();
    let root = dir.path();
    let rings = RINGS
        .replace("soak: 30s}", "soak: 3s}")
        .replace("  halt:", "  maxConcurrentPools: 8\n  halt:");
    write(&config.join("provider.yaml"), &provider(200));
    write(&config.join("rings.yaml"), &rings);
    write(&config.join("pools.yaml"), &pools(200, 1, "img-1", ROLLOUT));
    let d = Daemon::start(root, &["--parallelism", "16"]);
    d.wait_for("200 pools in sync", Duration::from_secs(120), |s| {
        s["pools"]
            .as_array()
            .is_some_and(|p| p.len() == 200 && p.iter().all(|p| p["state"] == "in-sync"))
    });
    let first = fleet(&d.status())["change"].clone();
    let from = d.events().len();
    write(&config.join("pools.yaml"), &pools(200, 1, "img-2", ROLLOUT));
    d.wait_for("the change completes", Duration::from_secs(300), |s| {
        fleet(s)["change"] != first && fleet(s)["status"] == "completed"
    });
    let events: Vec<Value> = d.events().split_off(from);
    let fleet_events: Vec<&Value> = events
        .iter()
        .filter(|e| e["event"].as_str().unwrap().starts_with("fleet_"))
        .collect();
    // Never more than 8 in flight.
    let (mut rolling, mut most) = (0i32, 0i32);
    for e in &fleet_events {
        match e["event"].as_str().unwrap() {
            "fleet_pool_admitted" => rolling += 1,
            "fleet_pool_done" | "fleet_pool_failed" => rolling -= 1,
            _ => {}
        }
        most = most.max(rolling);
    }
    assert!(most <= 8, "{most} pools rolled at once");
    assert_eq!(most, 8, "the slots were used");
    // The stages in order, each after the soak of the one before.
    let at = |event: &str, stage: &str| -> Timestamp {
        ts(fleet_events
            .iter()
            .find(|e| {
                e["event"] == event
                    && e["message"]
                        .as_str()
                        .unwrap()
                        .contains(&format!("stage {stage} "))
            })
            .unwrap_or_else(|| panic!("no {event} for stage {stage}: {fleet_events:#?}")))
    };
    let stages = ["canary", "early", "rest"];
    for pair in stages.windows(2) {
        let (done, next) = (
            at("fleet_stage_completed", pair[0]),
            at("fleet_stage_started", pair[1]),
        );
        let gap = next.duration_since(done);
        assert!(
            gap >= jiff::SignedDuration::from_secs(3),
            "stage {} started {gap} after stage {} completed: the soak is 3s",
            pair[1],
            pair[0]
        );
    }
    // Every pool of a stage was admitted after the stage started, and
    // finished before the next stage started.
    let staged: BTreeMap<String, usize> = {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_poolwright"))
            .current_dir(root)
            .args(["validate", "config", "-o", "json"])
            .output()
            .unwrap();
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        v["fleetRollouts"]["rings"]["stages"]
            .as_array()
            .unwrap()
            .iter()
            .enumerate()
            .flat_map(|(i, s)| {
                s["pools"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(move |p| (p.as_str().unwrap().to_string(), i))
            })
            .collect()
    };
    assert_eq!(staged.len(), 200);
    for e in fleet_events
        .iter()
        .filter(|e| e["event"] == "fleet_pool_admitted")
    {
        let pool = e["pool"].as_str().unwrap();
        let stage = staged[pool];
        assert!(
            ts(e) >= at("fleet_stage_started", stages[stage]),
            "{pool} before its stage"
        );
        if stage > 0 {
            assert!(
                ts(e) >= at("fleet_stage_passed", stages[stage - 1]),
                "{pool} before the soak ended"
            );
        }
    }
}

/// A gate on a real metric: Prometheus scrapes an exporter the test
/// controls; the metric breaches during the second stage's soak, the change
/// halts, and with `onHalt: rollback` the pools it rolled go back, each
/// within its own budget, while the pools of the last stage never start.
#[test]
fn a_prometheus_gate_breached_during_a_soak_halts_and_rolls_the_rolled_pools_back() {
    use crate::support::prometheus::{Exporter, Prometheus};
    let exporter = Exporter::start(0.0);
    let prom = Prometheus::start(&exporter.addr);
    prom.wait_for_sample("test_errors_per_second", 0.0);

    let (dir, config) = scratch();
    let root = dir.path();
    let rings = format!(
        "apiVersion: poolwright/v1
kind: FleetRollout
metadata: {{name: rings}}
spec:
  stages:
    - {{name: canary, selector: {{matchLabels: {{ring: canary}}}}, soak: 2s}}
    - {{name: early, pools: \"50%\", soak: 60s}}
    - {{name: rest}}
  halt: {{failedPools: 1, onHalt: rollback}}
  gates:
    - name: errors
      prometheus: {{url: \"{}\", query: \"test_errors_per_second < 1\"}}
      for: 2s
      interval: 1s
",
        prom.url
    );
    write(&config.join("provider.yaml"), &provider(100));
    write(&config.join("rings.yaml"), &rings);
    write(&config.join("pools.yaml"), &pools(10, 2, "img-1", ROLLOUT));
    let d = Daemon::start(root, &[]);
    d.wait_for("10 pools in sync", Duration::from_secs(60), |s| {
        s["pools"]
            .as_array()
            .is_some_and(|p| p.len() == 10 && p.iter().all(|p| p["state"] == "in-sync"))
    });
    let first = fleet(&d.status())["change"].clone();
    let from = d.events().len();
    write(&config.join("pools.yaml"), &pools(10, 2, "img-2", ROLLOUT));
    d.wait_for_event("stage early done: its soak begins", |e| {
        e["event"] == "fleet_stage_completed"
            && e["message"]
                .as_str()
                .unwrap()
                .starts_with("stage early done")
            && e["fleet"]["change"] != first
    });
    assert_eq!(fleet(&d.status())["status"], "running");
    // The metric breaches mid-soak.
    exporter.set(5.0);
    let s = d.wait_for("the gate halts the change", Duration::from_secs(30), |s| {
        fleet(s)["status"] == "halted"
    });
    let message = fleet(&s)["message"].as_str().unwrap().to_string();
    assert!(message.contains("gate errors breached"), "{message}");
    // The rolled pools go back; the last stage's never started.
    let (code, body) = d.get("/v1/fleet/rings");
    assert_eq!(code, 200, "{body}");
    let f: Value = serde_json::from_str(&body).unwrap();
    let rolled: Vec<String> = f["change"]["pools"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    assert_eq!(rolled.len(), 5, "canary and early (50% of 10): {rolled:?}");
    d.wait_for(
        "the rolled pools are back on img-1",
        Duration::from_secs(60),
        |_| {
            let (_, body) = d.get("/v1/fleet/rings");
            let f: Value = serde_json::from_str(&body).unwrap();
            f["change"]["pools"]
                .as_object()
                .unwrap()
                .values()
                .all(|r| r["state"] == "rolledBack")
        },
    );
    let events: Vec<Value> = d.events().split_off(from);
    for pool in &rolled {
        assert!(
            events.iter().any(|e| e["pool"] == pool.as_str()
                && e["event"] == "rollout_started"
                && e["message"].as_str().unwrap().contains("rolling back")),
            "{pool} rolled back through the executor"
        );
        // Within its budget (surge 1, unavailable 0) at every step.
        for e in events.iter().filter(|e| e["pool"] == pool.as_str()) {
            if let Some(c) = e.get("counts") {
                assert!(c["total"].as_u64().unwrap() <= 3, "{e}");
            }
        }
    }
    let untouched: Vec<&Value> = events
        .iter()
        .filter(|e| {
            e["event"] == "node_create_requested"
                && !rolled.contains(&e["pool"].as_str().unwrap().to_string())
        })
        .collect();
    assert!(
        untouched.is_empty(),
        "the last stage never started: {untouched:#?}"
    );
    assert_eq!(
        d.metric(
            "poolwright_fleet_pools",
            &[("fleet", "rings"), ("state", "rolled-back")]
        ),
        5.0
    );
}

/// kill -9 of the daemon at random moments of a staged change (mid-stage
/// and mid-soak), 20 times, restarting it each time: the change resumes from
/// its journal, every stage starts and passes exactly once and in order, and
/// every soak lasts its full length and is not restarted by a kill.
#[test]
fn kill_9_mid_stage_and_mid_soak_neither_skips_nor_repeats_a_stage() {
    use rand::{RngExt, SeedableRng};
    let (dir, config) = scratch();
    let root = dir.path();
    let soak = 3;
    let rings = RINGS
        .replace("soak: 30s}", &format!("soak: {soak}s}}"))
        .replace("\"25%\"", "\"50%\"");
    write(&config.join("provider.yaml"), &provider(50));
    write(&config.join("rings.yaml"), &rings);
    write(&config.join("pools.yaml"), &pools(6, 2, "img-1", ROLLOUT));
    let mut d = Daemon::start(root, &[]);
    d.wait_for("6 pools in sync", Duration::from_secs(60), |s| {
        s["pools"]
            .as_array()
            .is_some_and(|p| p.len() == 6 && p.iter().all(|p| p["state"] == "in-sync"))
    });
    let first = fleet(&d.status())["change"].clone();
    write(&config.join("pools.yaml"), &pools(6, 2, "img-2", ROLLOUT));
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(30);
    let mut downtime = Vec::new();
    for _ in 0..20 {
        std::thread::sleep(Duration::from_millis(rng.random_range(200..1500)));
        let killed = Timestamp::now();
        d.kill();
        d = Daemon::start(root, &[]);
        downtime.push((killed, Timestamp::now()));
    }
    d.wait_for("the change completes", Duration::from_secs(120), |s| {
        fleet(s)["change"] != first && fleet(s)["status"] == "completed"
    });
    let events: Vec<Value> = d
        .events()
        .into_iter()
        .filter(|e| e["fleet"]["name"] == "rings" && e["fleet"]["change"] != first)
        .collect();
    // The journal is the record: each stage once, in order, each passed
    // after its full soak and not a soak restarted by a kill (an event can
    // be lost in a kill between the journal's write and its emission, never
    // emitted twice).
    let journal: Value = serde_json::from_str(
        &std::fs::read_to_string(root.join("state/fleet/rings.json")).unwrap(),
    )
    .unwrap();
    let records = journal["change"]["stages"].as_array().unwrap();
    let stages = ["canary", "early", "rest"];
    let names: Vec<&str> = records
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, stages, "each stage started once, in order");
    let at = |r: &Value, k: &str| -> Timestamp { r[k].as_str().unwrap().parse().unwrap() };
    for (i, r) in records.iter().enumerate() {
        let stage = stages[i];
        if i > 0 {
            assert!(
                at(r, "startedAt") >= at(&records[i - 1], "passedAt"),
                "stage {stage} started before the one before passed"
            );
        }
        let (completed, passed) = (at(r, "completedAt"), at(r, "passedAt"));
        if stage != "rest" {
            let soaked = passed.duration_since(completed);
            // The full soak, and no more than the soak plus the downtime
            // that fell in it (and a second of slack): a kill mid-soak
            // resumed it where it was.
            let down: jiff::SignedDuration = downtime
                .iter()
                .filter(|(k, r)| *r > completed && *k < passed)
                .map(|(k, r)| r.duration_since(*k))
                .sum();
            assert!(
                soaked >= jiff::SignedDuration::from_secs(soak),
                "stage {stage} soaked {soaked}, less than {soak}s"
            );
            assert!(
                soaked <= jiff::SignedDuration::from_secs(soak + 1) + down,
                "stage {stage} soaked {soaked} with {down} of downtime in it: restarted?"
            );
        }
        for kind in [
            "fleet_stage_started",
            "fleet_stage_completed",
            "fleet_stage_passed",
        ] {
            let n = events
                .iter()
                .filter(|e| {
                    e["event"] == kind
                        && e["message"]
                            .as_str()
                            .unwrap()
                            .starts_with(&format!("stage {stage} "))
                })
                .count();
            assert!(n <= 1, "{kind} for stage {stage} {n} times: {events:#?}");
        }
    }
    let started = events
        .iter()
        .filter(|e| e["event"] == "fleet_change_started")
        .count();
    assert_eq!(started, 1, "a restart does not begin the change again");
}

/// `apply` runs a change across pools stage by stage too: a good image goes
/// through every stage, waiting out the soaks; a bad one halts at the
/// canary and apply fails, saying why; `fleet resume` (no daemon: edited in
/// the journal under the state lock) lets the next apply try again.
#[test]
fn apply_runs_the_stages_and_stops_on_a_halt() {
    let (dir, config) = scratch();
    let root = dir.path();
    let rings = RINGS
        .replace("soak: 30s}", "soak: 1s}")
        .replace("\"25%\"", "\"50%\"")
        .replace("  halt:", "  maxConcurrentPools: 2\n  halt:");
    let rollout = "{health: {minReady: 0s, startupTimeout: 3s}}";
    write(&config.join("provider.yaml"), &provider(100));
    write(&config.join("rings.yaml"), &rings);
    let apply = || {
        std::process::Command::new(env!("CARGO_BIN_EXE_poolwright"))
            .current_dir(root)
            .args(["apply", "config", "--auto-approve"])
            .output()
            .unwrap()
    };
    write(&config.join("pools.yaml"), &pools(6, 2, "img-1", rollout));
    assert!(apply().status.success());
    write(&config.join("pools.yaml"), &pools(6, 2, "img-2", rollout));
    let out = apply();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let order: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("started: ") && l.contains("stage "))
        .collect();
    assert_eq!(order.len(), 3, "{text}");
    assert!(order[0].contains("canary") && order[1].contains("early") && order[2].contains("rest"));
    assert!(
        text.contains("every change across pools is complete"),
        "{text}"
    );

    write(&config.join("pools.yaml"), &pools(6, 2, "img-bad", rollout));
    let out = apply();
    let (text, err) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(1), "{text}{err}");
    assert!(err.contains("halted") && err.contains("pool-000"), "{err}");
    assert!(
        !text.contains("stage early started"),
        "nothing after the canary: {text}"
    );
    // The halted change, as a program reads it: JSON lines only, and one
    // outcome, last, that says stopped and why.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_poolwright"))
        .current_dir(root)
        .args(["apply", "config", "--auto-approve", "-o", "json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let lines = crate::support::jsonl::parse(&String::from_utf8_lossy(&out.stdout));
    let outcomes: Vec<&Value> = lines.iter().filter(|l| l["type"] == "outcome").collect();
    assert_eq!(outcomes.len(), 1, "{lines:#?}");
    assert_eq!(lines.last(), Some(outcomes[0]));
    assert_eq!(outcomes[0]["outcome"], "stopped");
    assert!(
        outcomes[0]["errors"].to_string().contains("halted"),
        "{lines:#?}"
    );
    let resume = std::process::Command::new(env!("CARGO_BIN_EXE_poolwright"))
        .current_dir(root)
        .args(["fleet", "resume", "rings", "--reason", "a test"])
        .output()
        .unwrap();
    assert!(
        resume.status.success(),
        "{}",
        String::from_utf8_lossy(&resume.stderr)
    );
    let journal: Value = serde_json::from_str(
        &std::fs::read_to_string(root.join(".poolwright/fleet/rings.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(journal["change"]["status"]["state"], "running");
}

/// An error between steps stops apply, but not by cutting off the rolls in
/// flight: here the change's journal cannot be written when the small pool
/// finishes, while the large one still rolls. The large pool stops at its
/// next safe point and says so, the small pool's finished roll is counted,
/// and the next apply (the journal writable again) finishes the roll.
#[test]
fn an_error_between_steps_stops_the_rolls_in_flight_at_a_safe_point() {
    let (dir, config) = scratch();
    let root = dir.path();
    let rings = "apiVersion: poolwright/v1\nkind: FleetRollout\nmetadata: {name: rings}\nspec:\n  maxConcurrentPools: 2\n  stages:\n    - {name: all}\n";
    let pool = |name: &str, size: u32, image: &str| {
        format!(
            "---\napiVersion: poolwright/v1\nkind: NodePool\nmetadata: {{name: {name}}}\nspec:\n  providerRef: sim\n  size: {size}\n  template: {{image: {image}}}\n  rollout: {{maxSurge: 1, maxUnavailable: 0, health: {{minReady: 0s, startupTimeout: 60s}}}}\n"
        )
    };
    let pools = |image: &str| format!("{}{}", pool("small", 1, image), pool("large", 12, image));
    write(&config.join("provider.yaml"), &provider(30));
    write(&config.join("rings.yaml"), rings);
    let apply = || {
        std::process::Command::new(env!("CARGO_BIN_EXE_poolwright"))
            .current_dir(root)
            .args([
                "apply",
                "config",
                "--auto-approve",
                "-o",
                "json",
                "--events",
                "events.jsonl",
            ])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    write(&config.join("pools.yaml"), &pools("img-1"));
    assert!(apply().wait().unwrap().success());

    write(&config.join("pools.yaml"), &pools("img-2"));
    let events_file = root.join("events.jsonl");
    let fleet_dir = root.join(".poolwright/fleet");
    let before = crate::support::jsonl::read(&events_file).len();
    let child = apply();
    // Both rolls started: the change's journal becomes a file, so the
    // small pool's end cannot be recorded.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let events = crate::support::jsonl::read(&events_file);
        let started: BTreeSet<&str> = events[before..]
            .iter()
            .filter(|e| e["event"] == "rollout_started")
            .filter_map(|e| e["pool"].as_str())
            .collect();
        if started.len() == 2 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "both rolls never started: {events:#?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::fs::rename(&fleet_dir, root.join("fleet.moved")).unwrap();
    std::fs::write(&fleet_dir, "not a directory\n").unwrap();
    let out = child.wait_with_output().unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    let lines = crate::support::jsonl::parse(&stdout);
    let outcome = lines.last().unwrap();
    assert_eq!(outcome["outcome"], "stopped", "{stdout}");
    assert!(
        outcome["errors"].to_string().contains("journal"),
        "{stdout}"
    );
    let events = crate::support::jsonl::read(&events_file);
    let large: Vec<&Value> = events[before..]
        .iter()
        .filter(|e| e["pool"] == "large")
        .collect();
    assert!(
        large.iter().any(|e| e["event"] == "rollout_stopped"),
        "the large pool's roll stopped at a safe point, saying so: {large:#?}"
    );
    assert!(
        !large.iter().any(|e| e["event"] == "rollout_completed"),
        "the large pool was still rolling when apply stopped: {large:#?}"
    );
    // What ended before apply stopped is counted: the small pool's roll.
    let completed = events[before..]
        .iter()
        .filter(|e| e["event"] == "rollout_completed")
        .count();
    assert_eq!(
        outcome["stepsDone"].as_u64(),
        Some(completed as u64),
        "{stdout}"
    );

    std::fs::remove_file(&fleet_dir).unwrap();
    std::fs::rename(root.join("fleet.moved"), &fleet_dir).unwrap();
    let out = apply().wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let events = crate::support::jsonl::read(&events_file);
    assert!(
        events
            .iter()
            .any(|e| e["pool"] == "large" && e["event"] == "rollout_completed"),
        "the next apply finishes the roll"
    );
}

/// The pool named in a simulator's file as the provider holds it: its
/// template's image and the image of each of its live nodes.
fn sim_pool(root: &Path, provider: &str, pool: &str) -> (String, Vec<String>) {
    let fleet: Value = serde_json::from_str(
        &std::fs::read_to_string(root.join(format!("state/sim/{provider}.json"))).unwrap(),
    )
    .unwrap();
    let p = &fleet["pools"][pool];
    let hash = p["templateHash"].clone();
    let image = p["template"]["image"].as_str().unwrap().to_string();
    let nodes = p["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n.get("goneAt").is_none())
        .map(|n| {
            if n["template"] == hash {
                image.clone()
            } else {
                format!("another template ({})", n["template"])
            }
        })
        .collect();
    (image, nodes)
}

/// The measured case: with `halt: {onHalt: rollback}`, a pool whose own
/// rollout went Degraded on the bad image (`onFailure: pause`, the default;
/// or `onFailure: rollback` with `maxFailedNodes` reached first) stayed
/// Degraded with the bad image as the provider's template, so the next
/// scale-up or repair would launch it, and no `fleet_pool_rolled_back` came.
/// A halt that says roll back rolls back every pool the change touched.
#[test]
fn a_rollback_halt_returns_degraded_pools_to_the_previous_image_at_the_provider_and_on_every_node()
{
    let (dir, config) = scratch();
    let root = dir.path();
    write(
        &config.join("provider.yaml"),
        "apiVersion: poolwright/v1\nkind: Provider\nmetadata: {name: flaky}\nspec: {type: sim, seed: 7, speed: 20, failures: {badImages: [img-2]}}\n",
    );
    write(
        &config.join("rings.yaml"),
        "apiVersion: poolwright/v1\nkind: FleetRollout\nmetadata: {name: rings}\nspec:\n  stages:\n    - {name: all}\n  halt: {failedPools: 2, onHalt: rollback}\n",
    );
    // The change halts when both have failed (so neither is stopped before
    // its own failure). m01 fails its node with `onFailure: pause` (Degraded); m02 has
    // `onFailure: rollback`, but `maxFailedNodes: 1` trips first (Degraded).
    let pools = |image: &str| {
        [("m01", ""), ("m02", ", onFailure: rollback, maxFailedNodes: 1")]
            .iter()
            .map(|(name, extra)| {
                format!(
                    "---\napiVersion: poolwright/v1\nkind: NodePool\nmetadata: {{name: {name}}}\nspec:\n  providerRef: flaky\n  size: 2\n  template: {{image: {image}}}\n  rollout: {{maxSurge: 1, maxUnavailable: 0, health: {{startupTimeout: 5s, minReady: 0s}}{extra}}}\n"
                )
            })
            .collect::<String>()
    };
    write(&config.join("pools.yaml"), &pools("img-1"));
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_poolwright"))
        .current_dir(root)
        .args(["apply", "config", "--auto-approve", "--state-dir", "state"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let d = Daemon::start(root, &[]);
    d.wait_for("2 pools in sync", Duration::from_secs(60), |s| {
        s["pools"]
            .as_array()
            .is_some_and(|p| p.len() == 2 && p.iter().all(|p| p["state"] == "in-sync"))
    });
    let from = d.events().len();
    write(&config.join("pools.yaml"), &pools("img-2"));
    d.wait_for("the change halts", Duration::from_secs(60), |s| {
        fleet(s)["status"] == "halted"
    });
    let rolled_back = |_: &Value| {
        let (_, body) = d.get("/v1/fleet/rings");
        let f: Value = serde_json::from_str(&body).unwrap();
        f["change"]["pools"]
            .as_object()
            .is_some_and(|p| p.len() == 2 && p.values().all(|r| r["state"] == "rolledBack"))
    };
    d.wait_for(
        "both pools rolled back, the Degraded one too",
        Duration::from_secs(60),
        rolled_back,
    );
    let events: Vec<Value> = d.events().split_off(from);
    for pool in ["m01", "m02"] {
        let degraded = events
            .iter()
            .position(|e| e["pool"] == pool && e["event"] == "degraded");
        let back = events.iter().position(|e| {
            e["pool"] == pool
                && e["event"] == "rollout_started"
                && e["message"].as_str().unwrap().contains("rolling back")
        });
        assert!(
            degraded.is_some() && back > degraded,
            "{pool}: Degraded on img-2, then rolled back through the executor: {events:#?}"
        );
        assert!(
            events
                .iter()
                .any(|e| e["pool"] == pool && e["event"] == "fleet_pool_rolled_back"),
            "{pool}: a fleet_pool_rolled_back event: {events:#?}"
        );
    }
    // Every node the roll back launched is healthy: the pools end in
    // service on img-1, within their budget (surge 1) all the way.
    d.wait_for(
        "both pools back to 2 available nodes",
        Duration::from_secs(60),
        |s| {
            s["pools"].as_array().is_some_and(|p| {
                p.iter()
                    .all(|p| p["rollout"]["available"] == 2 && p["state"] != "rolling")
            })
        },
    );
    for e in &events {
        if let Some(c) = e.get("counts") {
            assert!(c["total"].as_u64().unwrap() <= 3, "{e}");
        }
    }
    assert!(d.terminate().success());
    for pool in ["m01", "m02"] {
        let (template, nodes) = sim_pool(root, "flaky", pool);
        assert_eq!(template, "img-1", "{pool}: the provider's template");
        assert_eq!(nodes, vec!["img-1"; 2], "{pool}: its live nodes");
    }
}
