//! Crash safety, as it happens: a real `poolwright apply` process rolling a pool
//! on the simulator is killed with SIGKILL at a random moment, then run again.
//! Every trial must end with every node updated, the bounds held across the
//! whole event history, and no node ever terminated twice (per the simulator's
//! own audit of the calls it received).
//!
//! POOLWRIGHT_CRASH_TRIALS sets the number of trials (default 50).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rand::{RngExt, SeedableRng};

const SIZE: u64 = 5;
const SURGE: u64 = 1;
const UNAVAILABLE: u64 = 1;

fn provider(seed: u64) -> String {
    format!(
        "apiVersion: poolwright/v1\nkind: Provider\nmetadata: {{name: sim}}\nspec:\n  type: sim\n  seed: {seed}\n  speed: 100\n  bootTime: {{lognormal: {{median: 30s, sigma: 0.4}}}}\n  healthDelay: {{fixed: 5s}}\n  drainTime: {{fixed: 10s}}\n  terminateTime: {{fixed: 3s}}\n"
    )
}

fn pool(image: &str) -> String {
    format!(
        "apiVersion: poolwright/v1\nkind: NodePool\nmetadata: {{name: web}}\nspec:\n  providerRef: sim\n  size: {SIZE}\n  template: {{image: {image}}}\n  rollout:\n    maxSurge: {SURGE}\n    maxUnavailable: {UNAVAILABLE}\n    health: {{minReady: 200ms}}\n"
    )
}

fn poolwright(dir: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_poolwright"));
    c.current_dir(dir)
        .env_remove("POOLWRIGHT_STATE_DIR")
        .stdin(Stdio::null());
    c
}

fn apply(dir: &Path) -> std::process::Output {
    poolwright(dir)
        .args([
            "apply",
            "config",
            "--auto-approve",
            "--events",
            "events.jsonl",
        ])
        .output()
        .unwrap()
}

/// Ok(true) when the kill landed mid-rollout (after it had acted, before it ended).
fn trial(n: u64) -> Result<bool, String> {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::create_dir_all(dir.join("config")).unwrap();
    std::fs::write(dir.join("config/providers.yaml"), provider(n)).unwrap();
    std::fs::write(dir.join("config/web.yaml"), pool("img-1")).unwrap();
    let out = apply(dir);
    if !out.status.success() {
        return Err(format!(
            "creating the pool failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    std::thread::sleep(Duration::from_millis(1200)); // booted and healthy
    std::fs::write(dir.join("config/web.yaml"), pool("img-2")).unwrap();

    // Roll, and kill -9 at a random moment.
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(n);
    let kill_after = Duration::from_millis(rng.random_range(0..2500));
    let mut child = poolwright(dir)
        .args([
            "apply",
            "config",
            "--auto-approve",
            "--events",
            "events.jsonl",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(kill_after);
    let _ = child.kill(); // SIGKILL
    let _ = child.wait();

    // Run again until it converges.
    let started = Instant::now();
    loop {
        let out = apply(dir);
        if out.status.success() {
            let plan = poolwright(dir)
                .args(["plan", "config", "--detailed-exitcode"])
                .output()
                .unwrap();
            if plan.status.code() == Some(0) {
                break;
            }
        }
        if started.elapsed() > Duration::from_secs(90) {
            return Err(format!(
                "trial {n} (killed after {kill_after:?}) did not converge: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }

    // Bounds across the whole history, both processes included.
    let events = std::fs::read_to_string(dir.join("events.jsonl")).unwrap();
    for line in events.lines() {
        let e: serde_json::Value =
            serde_json::from_str(line).map_err(|e| format!("bad event line {line:?}: {e}"))?;
        if e["pool"] != "web" || e["event"] == "pool_created" {
            continue;
        }
        let Some(c) = e.get("counts") else { continue };
        let (total, available) = (
            c["total"].as_u64().unwrap(),
            c["available"].as_u64().unwrap(),
        );
        if total > SIZE + SURGE || available < SIZE - UNAVAILABLE {
            return Err(format!(
                "trial {n} (killed after {kill_after:?}): bounds broken at {line}"
            ));
        }
    }
    // No node terminated twice, per the provider's own audit.
    let audit = std::fs::read_to_string(dir.join(".poolwright/sim/sim.audit.jsonl")).unwrap();
    let mut terminated: Vec<String> = audit
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| v["call"].as_str().map(str::to_string))
        .filter(|c| c.starts_with("TerminateNode("))
        .collect();
    let count = terminated.len();
    terminated.sort();
    terminated.dedup();
    if terminated.len() != count {
        return Err(format!(
            "trial {n} (killed after {kill_after:?}): a node was terminated twice: {audit}"
        ));
    }
    if count as u64 != SIZE {
        return Err(format!(
            "trial {n}: expected {SIZE} terminations (one per old node), saw {count}"
        ));
    }
    // Interrupted mid-rollout: the killed process started the rollout and acted,
    // and a later process started it again (resumed from the journal).
    let names: Vec<String> = events
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| v["event"].as_str().map(str::to_string))
        .collect();
    let starts: Vec<usize> = names
        .iter()
        .enumerate()
        .filter(|(_, e)| *e == "rollout_started")
        .map(|(i, _)| i)
        .collect();
    let interrupted = starts.len() >= 2
        && names[starts[0]..starts[1]]
            .iter()
            .any(|e| e == "drain_started" || e == "node_create_requested");
    Ok(interrupted)
}

#[test]
fn killed_apply_resumes_without_repeating_or_skipping_a_step() {
    let trials: u64 = std::env::var("POOLWRIGHT_CRASH_TRIALS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50);
    // Two trials at a time: each is a separate state directory and process.
    let results: Vec<Result<bool, String>> = (0..trials)
        .collect::<Vec<_>>()
        .chunks(2)
        .flat_map(|pair| {
            let handles: Vec<_> = pair
                .iter()
                .map(|&n| std::thread::spawn(move || trial(n)))
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap())
                .collect::<Vec<_>>()
        })
        .collect();
    let failures: Vec<&String> = results.iter().filter_map(|r| r.as_ref().err()).collect();
    assert!(
        failures.is_empty(),
        "{} of {trials} trials failed:\n{}",
        failures.len(),
        failures
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    );
    let interrupted = results.iter().filter(|r| matches!(r, Ok(true))).count();
    println!("{interrupted} of {trials} trials were killed mid-rollout and resumed");
    assert!(
        interrupted * 4 >= trials as usize,
        "only {interrupted} of {trials} kills landed mid-rollout: the test is not testing crashes"
    );
}
