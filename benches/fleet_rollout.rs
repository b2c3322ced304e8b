//! Changes across pools (BENCHMARKS.md): `poolwright run` and `apply` on the
//! embedded simulator, with a FleetRollout over the fleet.
//!
//! 1. halt: a bad image for every one of POOLS pools (canary stage of 1
//!    pool, halt after 1 failure): pools touched, calls on the others, and
//!    from the canary's failed node to the halt in the events and in status.
//! 2. overhead: a good image over POOLS pools in 3 stages with soaks: the
//!    change's time against the sum of its stages' makespans (first
//!    admission to last pool done) and soaks.
//! 3. idle: CPU of the daemon over IDLE_SECS with the halted change over
//!    IDLE_POOLS pools.
//! 4. forecast: `poolwright forecast`'s p10..p90 for a 3-stage change
//!    against RUNS real `apply`s of it.
//!
//! cargo bench --bench fleet_rollout
//!   POOLWRIGHT_BENCH_ONLY (halt,overhead,idle,forecast), _POOLS (2000),
//!   _IDLE_POOLS (10000), _IDLE_SECS (30), _RUNS (20)

#[path = "common/mod.rs"]
mod common;
use common::{Daemon, env_or, http_get};

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use jiff::Timestamp;
use serde_json::Value;

const FILES: usize = 10;

fn status(d: &Daemon) -> Value {
    serde_json::from_str(&http_get(&d.url, "/v1/status?pools=none")).unwrap()
}

fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let f: Vec<&str> = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

/// The fleet: a provider, a FleetRollout, and `pools` pools in FILES files.
struct Fleet<'a> {
    root: &'a Path,
    pools: usize,
    size: u32,
    rings: String,
    speed: u32,
    /// The pools' startupTimeout: short where a boot that hangs must fail
    /// fast, long where a slow boot is just slow (the forecast's case).
    startup: &'static str,
}

impl Fleet<'_> {
    fn config(&self) -> std::path::PathBuf {
        self.root.join("config")
    }

    fn write(&self, image: &str) {
        let config = self.config();
        std::fs::create_dir_all(&config).unwrap();
        std::fs::write(
            config.join("provider.yaml"),
            format!(
                "apiVersion: poolwright/v1\nkind: Provider\nmetadata: {{name: sim}}\nspec: {{type: sim, seed: 1, speed: {}, failures: {{badImages: [img-bad]}}}}\n---\n{}",
                self.speed, self.rings
            ),
        )
        .unwrap();
        for f in 0..FILES {
            let mut text = String::new();
            for p in (f..self.pools).step_by(FILES) {
                let ring = if p == 0 { "canary" } else { "main" };
                text.push_str(&format!(
                    "---\napiVersion: poolwright/v1\nkind: NodePool\nmetadata: {{name: pool-{p:05}, labels: {{ring: {ring}}}}}\nspec:\n  providerRef: sim\n  size: {}\n  template: {{image: {image}}}\n  rollout: {{onFailure: rollback, health: {{minReady: 0s, startupTimeout: {}}}}}\n",
                    self.size, self.startup
                ));
            }
            let tmp = config.join(format!(".pools-{f:02}.tmp"));
            std::fs::write(&tmp, text).unwrap();
            std::fs::rename(&tmp, config.join(format!("pools-{f:02}.yaml"))).unwrap();
        }
    }

    fn run(&self) -> Daemon {
        let _ = std::fs::remove_file(self.root.join("state/daemon.json"));
        let child = Command::new(env!("CARGO_BIN_EXE_poolwright"))
            .current_dir(self.root)
            .args([
                "run",
                "config",
                "--state-dir",
                "state",
                "--listen",
                "127.0.0.1:0",
                "--resync",
                "10m",
                "--parallelism",
                "64",
            ])
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let started = Instant::now();
        let url = loop {
            if let Ok(t) = std::fs::read_to_string(self.root.join("state/daemon.json")) {
                break serde_json::from_str::<Value>(&t).unwrap()["url"]
                    .as_str()
                    .unwrap()
                    .to_string();
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "the daemon did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        Daemon { child, url }
    }

    fn converge(&self, d: &Daemon) {
        let started = Instant::now();
        loop {
            let s = status(d);
            if s["totals"]["byState"]["in-sync"] == self.pools {
                return;
            }
            assert!(
                started.elapsed() < Duration::from_secs(120 + self.pools as u64 / 10),
                "did not converge: {}",
                s["totals"]
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn events(&self) -> Vec<Value> {
        std::fs::read_to_string(self.root.join("state/events.jsonl"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    fn audit(&self) -> Vec<String> {
        std::fs::read_to_string(self.root.join("state/sim/sim.audit.jsonl"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| {
                serde_json::from_str::<Value>(l).ok()?["call"]
                    .as_str()
                    .map(str::to_string)
            })
            .collect()
    }
}

fn ts(e: &Value) -> Timestamp {
    e["ts"].as_str().unwrap().parse().unwrap()
}

fn rings(soak: &str, max: usize) -> String {
    format!(
        "apiVersion: poolwright/v1\nkind: FleetRollout\nmetadata: {{name: rings}}\nspec:\n  maxConcurrentPools: {max}\n  stages:\n    - {{name: canary, selector: {{matchLabels: {{ring: canary}}}}, soak: {soak}}}\n    - {{name: early, pools: \"25%\", soak: {soak}}}\n    - {{name: rest}}\n  halt: {{failedPools: 1}}\n"
    )
}

fn halt(pools: usize) {
    let dir = tempfile::tempdir().unwrap();
    let fleet = Fleet {
        root: dir.path(),
        pools,
        size: 3,
        rings: rings("30m", 50),
        speed: 1000,
        startup: "5s",
    };
    fleet.write("img-1");
    let d = fleet.run();
    fleet.converge(&d);
    let before = fleet.audit().len();
    fleet.write("img-bad");
    // Poll status closely from the edit on.
    let (mut failed_at, mut status_halted_at) = (None, None);
    let started = Instant::now();
    while status_halted_at.is_none() {
        let s = status(&d);
        if s["fleets"][0]["status"] == "halted" {
            status_halted_at = Some(Timestamp::now());
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "no halt: {}",
            s["fleets"]
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let events = fleet.events();
    for e in &events {
        if e["event"] == "node_failed" && failed_at.is_none() {
            failed_at = Some(ts(e));
        }
    }
    let failed_at = failed_at.expect("the canary's node failed");
    let halted = events
        .iter()
        .find(|e| e["event"] == "fleet_halted")
        .expect("fleet_halted");
    let calls = fleet.audit();
    let touched: BTreeSet<String> = calls[before..]
        .iter()
        .filter_map(|c| Some(c.split_once('(')?.1.split([',', ')']).next()?.to_string()))
        .collect();
    println!(
        "fleet_rollout halt: {pools} pools, bad image for all: {} pool(s) touched ({}), {} call(s) on the others; failed node -> fleet_halted event {:.0} ms, -> halted in status {:.0} ms (polled every 20 ms)",
        touched.len(),
        touched.iter().cloned().collect::<Vec<_>>().join(", "),
        calls[before..]
            .iter()
            .filter(|c| !c.contains("pool-00000"))
            .count(),
        ts(halted).duration_since(failed_at).as_secs_f64() * 1000.0,
        status_halted_at
            .unwrap()
            .duration_since(failed_at)
            .as_secs_f64()
            * 1000.0,
    );
}

fn overhead(pools: usize) {
    let dir = tempfile::tempdir().unwrap();
    let fleet = Fleet {
        root: dir.path(),
        pools,
        size: 1,
        rings: rings("20s", 100),
        speed: 1000,
        startup: "5s",
    };
    fleet.write("img-1");
    let d = fleet.run();
    fleet.converge(&d);
    let from = fleet.events().len();
    fleet.write("img-2");
    let started = Instant::now();
    loop {
        let s = status(&d);
        if s["fleets"][0]["status"] == "completed" && s["fleets"][0]["change"] != Value::Null {
            let ev = fleet.events();
            if ev[from..].iter().any(|e| e["event"] == "fleet_completed") {
                break;
            }
        }
        assert!(
            started.elapsed() < Duration::from_secs(1200),
            "the change did not complete"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let ev: Vec<Value> = fleet.events().split_off(from);
    let fleet_ev: Vec<&Value> = ev.iter().filter(|e| e["fleet"].is_object()).collect();
    let first = ts(fleet_ev
        .iter()
        .find(|e| e["event"] == "fleet_change_started")
        .unwrap());
    let done = ts(fleet_ev
        .iter()
        .find(|e| e["event"] == "fleet_completed")
        .unwrap());
    // Each stage's makespan: its first admission to its last pool done.
    let mut sum = 0.0;
    let mut stage_starts: Vec<Timestamp> = fleet_ev
        .iter()
        .filter(|e| e["event"] == "fleet_stage_started")
        .map(|e| ts(e))
        .collect();
    stage_starts.push(done);
    let mut parts = Vec::new();
    for w in stage_starts.windows(2) {
        let inside = |e: &&&Value| ts(e) >= w[0] && ts(e) < w[1];
        let admitted: Vec<Timestamp> = fleet_ev
            .iter()
            .filter(inside)
            .filter(|e| e["event"] == "fleet_pool_admitted")
            .map(|e| ts(e))
            .collect();
        let finished: Vec<Timestamp> = fleet_ev
            .iter()
            .filter(inside)
            .filter(|e| e["event"] == "fleet_pool_done")
            .map(|e| ts(e))
            .collect();
        let (Some(a), Some(b)) = (admitted.iter().min(), finished.iter().max()) else {
            continue;
        };
        let makespan = b.duration_since(*a).as_secs_f64();
        sum += makespan;
        parts.push(format!("{makespan:.1}s"));
    }
    let soaks = 2.0 * 20.0;
    let total = done.duration_since(first).as_secs_f64();
    println!(
        "fleet_rollout overhead: {pools} pools, 3 stages (makespans {}) + soaks {soaks:.0}s = {:.1}s; the change took {total:.1}s: {:.3}x",
        parts.join(", "),
        sum + soaks,
        total / (sum + soaks)
    );
}

fn idle(pools: usize, secs: u64) {
    let dir = tempfile::tempdir().unwrap();
    let fleet = Fleet {
        root: dir.path(),
        pools,
        size: 1,
        rings: rings("30m", 50),
        speed: 1000,
        startup: "5s",
    };
    fleet.write("img-1");
    let d = fleet.run();
    fleet.converge(&d);
    fleet.write("img-bad");
    let started = Instant::now();
    while status(&d)["fleets"][0]["status"] != "halted" {
        assert!(started.elapsed() < Duration::from_secs(300), "no halt");
        std::thread::sleep(Duration::from_millis(200));
    }
    std::thread::sleep(Duration::from_secs(5));
    let pid = d.child.id();
    let mut last = cpu_ticks(pid);
    let first = last;
    let mut peak = 0;
    for _ in 0..secs {
        std::thread::sleep(Duration::from_secs(1));
        let t = cpu_ticks(pid);
        peak = peak.max(t - last);
        last = t;
    }
    println!(
        "fleet_rollout idle: {pools} pools, halted change: {:.2}% of a core over {secs}s (busiest second {}%)",
        (last - first) as f64 / secs as f64,
        peak
    );
}

fn forecast(runs: usize) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let fleet = Fleet {
        root,
        pools: 12,
        size: 3,
        rings: rings("5s", 3),
        speed: 20,
        startup: "60s",
    };
    let cli = |args: &[&str]| -> std::process::Output {
        Command::new(env!("CARGO_BIN_EXE_poolwright"))
            .current_dir(root)
            .args(args)
            .args(["--state-dir", "state"])
            .output()
            .unwrap()
    };
    fleet.write("img-0");
    let created = cli(&["apply", "config", "--auto-approve"]);
    assert!(
        created.status.success(),
        "{}{}",
        String::from_utf8_lossy(&created.stdout),
        String::from_utf8_lossy(&created.stderr)
    );
    let mut inside = 0;
    let mut errors = Vec::new();
    for i in 1..=runs {
        fleet.write(&format!("img-{i}"));
        let f = cli(&["forecast", "config", "-o", "json", "--runs", "200"]);
        assert!(f.status.success(), "{}", String::from_utf8_lossy(&f.stderr));
        let report: Value = serde_json::from_slice(&f.stdout).unwrap();
        let d = &report["fleets"][0]["durationSeconds"];
        let (p10, p50, p90) = (
            d["p10"].as_f64().unwrap(),
            d["p50"].as_f64().unwrap(),
            d["p90"].as_f64().unwrap(),
        );
        let from = fleet.events().len();
        let out = cli(&[
            "apply",
            "config",
            "--auto-approve",
            "--events",
            "state/events.jsonl",
        ]);
        assert!(
            out.status.success(),
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let ev: Vec<Value> = fleet.events().split_off(from);
        let start = ev
            .iter()
            .find(|e| e["event"] == "fleet_change_started")
            .map(ts)
            .unwrap();
        let end = ev
            .iter()
            .find(|e| e["event"] == "fleet_completed")
            .map(ts)
            .unwrap();
        let real = end.duration_since(start).as_secs_f64();
        let ok = real >= p10 && real <= p90;
        inside += usize::from(ok);
        errors.push((p50 - real) / real);
        println!(
            "  run {i}: forecast p10 {p10:.1}s p50 {p50:.1}s p90 {p90:.1}s, real {real:.1}s{}",
            if ok { "" } else { "  OUTSIDE" }
        );
    }
    errors.sort_by(f64::total_cmp);
    println!(
        "fleet_rollout forecast: {inside} of {runs} real changes inside p10..p90 ({:.0}%); p50 error median {:+.1}%",
        100.0 * inside as f64 / runs as f64,
        100.0 * errors[errors.len() / 2]
    );
}

fn main() {
    let only: String = env_or(
        "POOLWRIGHT_BENCH_ONLY",
        "halt,overhead,idle,forecast".to_string(),
    );
    let pools: usize = env_or("POOLWRIGHT_BENCH_POOLS", 2000);
    if only.contains("halt") {
        halt(pools);
    }
    if only.contains("overhead") {
        overhead(pools);
    }
    if only.contains("idle") {
        idle(
            env_or("POOLWRIGHT_BENCH_IDLE_POOLS", 10_000),
            env_or("POOLWRIGHT_BENCH_IDLE_SECS", 30),
        );
    }
    if only.contains("forecast") {
        forecast(env_or("POOLWRIGHT_BENCH_RUNS", 20));
    }
}
