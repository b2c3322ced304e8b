//! The daemon's figures (BENCHMARKS.md): `poolwright run` on a fleet of
//! simulated pools (3 nodes each, one speed-1000 simulator, 10 files).
//!
//! 1. Convergence from empty: every pool created and every node healthy.
//! 2. Idle: CPU (mean and the busiest second) and RSS, with the resync's
//!    slices running as they do in service.
//! 3. Edit latency over N edits, each changing one pool's document in one
//!    file (atomic rename): saved -> that pool's plan starts (`plannedAt`).
//!
//! cargo bench --bench daemon_idle
//!   POOLWRIGHT_BENCH_POOLS (1000), _EDITS (100), _IDLE_SECS (30), _RESYNC (5m)

#[path = "common/mod.rs"]
mod common;
use common::{Daemon, env_or, http_get};

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

fn status(url: &str, query: &str) -> Value {
    serde_json::from_str(&http_get(url, &format!("/v1/status?{query}"))).unwrap()
}

/// utime + stime in clock ticks, and VmRSS in KiB.
fn cpu_and_rss(pid: u32) -> (u64, u64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    let ticks = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    let rss = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    (ticks, rss)
}

const FILES: usize = 10;

fn pool_name(p: usize) -> String {
    format!("pool-{p:05}")
}

/// The file holding pool `edited` is rewritten with its label set to `edit`.
fn write_file(dir: &Path, pools: usize, f: usize, edited: Option<(usize, usize)>) {
    let mut text = String::new();
    for p in (f..pools).step_by(FILES) {
        let labels = match edited {
            Some((e, n)) if e == p => format!(", labels: {{edit: \"{n}\"}}"),
            _ => String::new(),
        };
        text.push_str(&format!(
            "---\napiVersion: poolwright/v1\nkind: NodePool\nmetadata: {{name: {}}}\nspec:\n  providerRef: sim\n  size: 3\n  template: {{image: img-1{labels}}}\n",
            pool_name(p)
        ));
    }
    let tmp = dir.join(format!(".pools-{f:02}.yaml.tmp"));
    std::fs::write(&tmp, text).unwrap();
    // An editor's atomic save.
    std::fs::rename(&tmp, dir.join(format!("pools-{f:02}.yaml"))).unwrap();
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn main() {
    let pools: usize = env_or("POOLWRIGHT_BENCH_POOLS", 1000);
    let edits: usize = env_or("POOLWRIGHT_BENCH_EDITS", 100);
    let idle_secs: u64 = env_or("POOLWRIGHT_BENCH_IDLE_SECS", 30);
    let resync: String = env_or("POOLWRIGHT_BENCH_RESYNC", "5m".to_string());
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("config");
    std::fs::create_dir_all(&config).unwrap();
    std::fs::write(
        config.join("providers.yaml"),
        "apiVersion: poolwright/v1\nkind: Provider\nmetadata: {name: sim}\nspec: {type: sim, seed: 1, speed: 1000}\n",
    )
    .unwrap();
    for f in 0..FILES {
        write_file(&config, pools, f, None);
    }
    let child = Command::new(env!("CARGO_BIN_EXE_poolwright"))
        .current_dir(tmp.path())
        .args([
            "run",
            "config",
            "--state-dir",
            "state",
            "--listen",
            "127.0.0.1:0",
            "--resync",
            &resync,
        ])
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    let _daemon = Daemon {
        child,
        url: String::new(),
    };
    let started = Instant::now();
    let url = loop {
        if let Ok(t) = std::fs::read_to_string(tmp.path().join("state/daemon.json")) {
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

    // 1. Converged: every pool in sync with 3 healthy nodes (the totals, not
    // a 10,000-pool document every poll).
    let limit = Duration::from_secs(60 + pools as u64 / 10);
    loop {
        let s = status(&url, "pools=none");
        let t = &s["totals"];
        if t["byState"]["in-sync"] == pools && t["nodes"]["available"] == 3 * pools {
            break;
        }
        assert!(
            started.elapsed() < limit,
            "{pools} pools did not converge in {limit:?}: {t}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let converged = started.elapsed().as_secs_f64();
    let planned = status(&url, "pools=none")["reconcile"]["poolsPlanned"]
        .as_u64()
        .unwrap();
    println!(
        "daemon_idle: {pools} pools converged in {converged:.1} s ({:.1} plans per pool)",
        planned as f64 / pools as f64
    );
    std::thread::sleep(Duration::from_secs(2));

    // 2. Idle: no edits; the resync's slices run as in service.
    let ticks_per_sec = 100.0; // USER_HZ on Linux
    let before = status(&url, "pools=none")["reconcile"]["poolsPlanned"]
        .as_u64()
        .unwrap();
    let (mut last, _) = cpu_and_rss(pid);
    let (first, mut peak) = (last, 0u64);
    for _ in 0..idle_secs {
        std::thread::sleep(Duration::from_secs(1));
        let (t, _) = cpu_and_rss(pid);
        peak = peak.max(t - last);
        last = t;
    }
    let (_, rss) = cpu_and_rss(pid);
    let after = status(&url, "pools=none")["reconcile"]["poolsPlanned"]
        .as_u64()
        .unwrap();
    let cpu = (last - first) as f64 / ticks_per_sec / idle_secs as f64 * 100.0;
    println!(
        "daemon_idle: idle CPU {cpu:.2}% of one core over {idle_secs} s (busiest second {:.0}%), RSS {:.1} MiB; the resync (--resync {resync}) planned {} pools meanwhile",
        peak as f64 / ticks_per_sec * 100.0,
        rss as f64 / 1024.0,
        after - before
    );

    // 3. Edit -> plan latency: one pool's document changes in one file.
    let mut latencies = Vec::new();
    for edit in 1..=edits {
        let p = (edit * 7919) % pools;
        let name = pool_name(p);
        let query = format!("pool={name}");
        let saved = jiff::Timestamp::now();
        write_file(&config, pools, p % FILES, Some((p, edit)));
        let deadline = Instant::now() + Duration::from_secs(30);
        let planned = loop {
            let s = status(&url, &query);
            if let Some(at) = s["pools"][0]["plannedAt"].as_str() {
                let at: jiff::Timestamp = at.parse().unwrap();
                if at > saved {
                    break at;
                }
            }
            assert!(
                Instant::now() < deadline,
                "{name} was not planned within 30 s of its edit"
            );
            std::thread::sleep(Duration::from_millis(2));
        };
        latencies.push(planned.duration_since(saved).as_secs_f64() * 1000.0);
        std::thread::sleep(Duration::from_millis(300));
    }
    latencies.sort_by(f64::total_cmp);
    let (_, rss_after) = cpu_and_rss(pid);
    println!(
        "daemon_idle: edit -> plan over {edits} edits (one pool's document in one file of {FILES}, atomic rename): p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms; RSS after {:.1} MiB",
        percentile(&latencies, 0.5),
        percentile(&latencies, 0.99),
        latencies.last().unwrap(),
        rss_after as f64 / 1024.0
    );
}
