//! The daemon's figures (BENCHMARKS.md): `poolwright run` on 1,000 simulated
//! pools. Idle CPU between resyncs and resident memory, then the save-to-plan
//! latency over 100 edits (file written -> the reconcile it caused starts).
//!
//! cargo bench --bench daemon_idle   (POOLWRIGHT_BENCH_POOLS, _EDITS to change the sizes)

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

fn http_get(url: &str, path: &str) -> String {
    let addr = url.trim_start_matches("http://");
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    raw.split_once("\r\n\r\n").unwrap().1.to_string()
}

fn status(url: &str) -> Value {
    serde_json::from_str(&http_get(url, "/v1/status")).unwrap()
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

fn write_pools(dir: &Path, pools: usize, files: usize, edit: usize) {
    for f in 0..files {
        let mut text = format!("# edit {}\n", if f == edit % files { edit } else { 0 });
        for p in (f..pools).step_by(files) {
            text.push_str(&format!(
                "---\napiVersion: poolwright/v1\nkind: NodePool\nmetadata: {{name: pool-{p:04}}}\nspec:\n  providerRef: sim\n  size: 3\n  template: {{image: img-1}}\n"
            ));
        }
        let tmp = dir.join(format!(".pools-{f:02}.yaml.tmp"));
        std::fs::write(&tmp, text).unwrap();
        // An editor's atomic save.
        std::fs::rename(&tmp, dir.join(format!("pools-{f:02}.yaml"))).unwrap();
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn main() {
    let pools: usize = std::env::var("POOLWRIGHT_BENCH_POOLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let edits: usize = std::env::var("POOLWRIGHT_BENCH_EDITS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    let files = 10;
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("config");
    std::fs::create_dir_all(&config).unwrap();
    std::fs::write(
        config.join("providers.yaml"),
        "apiVersion: poolwright/v1\nkind: Provider\nmetadata: {name: sim}\nspec: {type: sim, seed: 1, speed: 1000}\n",
    )
    .unwrap();
    write_pools(&config, pools, files, 0);
    let mut child = Command::new(env!("CARGO_BIN_EXE_poolwright"))
        .current_dir(tmp.path())
        .args([
            "run",
            "config",
            "--state-dir",
            "state",
            "--listen",
            "127.0.0.1:0",
            "--resync",
            "5m",
        ])
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
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
    // Converged: every pool created and every node healthy (no wake-ups pending).
    loop {
        let s = status(&url);
        let ok = s["pools"].as_array().map(|p| {
            p.len() == pools
                && p.iter()
                    .all(|p| p["state"] == "in-sync" && p["rollout"]["available"] == 3)
        });
        if ok == Some(true) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "did not converge"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    println!(
        "daemon_idle: {pools} pools converged in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    std::thread::sleep(Duration::from_secs(2));

    // Idle: no edits, no resync due.
    let ticks_per_sec = 100.0; // USER_HZ on Linux
    let (t0, _) = cpu_and_rss(pid);
    let window = Duration::from_secs(20);
    std::thread::sleep(window);
    let (t1, rss) = cpu_and_rss(pid);
    let cpu = (t1 - t0) as f64 / ticks_per_sec / window.as_secs_f64() * 100.0;
    println!(
        "daemon_idle: idle CPU {cpu:.2}% of one core over {} s, RSS {:.1} MiB",
        window.as_secs(),
        rss as f64 / 1024.0
    );

    // Save -> plan latency.
    let mut latencies = Vec::new();
    let mut durations = Vec::new();
    for edit in 1..=edits {
        let before = status(&url)["reconcile"]["count"].as_u64().unwrap();
        let saved = jiff::Timestamp::now();
        write_pools(&config, pools, files, edit);
        let s = loop {
            let s = status(&url);
            if s["reconcile"]["count"].as_u64().unwrap() > before
                && s["reconcile"]["lastFinishedAt"].as_str()
                    >= s["reconcile"]["lastStartedAt"].as_str()
            {
                break s;
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        let started: jiff::Timestamp = s["reconcile"]["lastStartedAt"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        let finished: jiff::Timestamp = s["reconcile"]["lastFinishedAt"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        latencies.push(started.duration_since(saved).as_secs_f64() * 1000.0);
        durations.push(finished.duration_since(started).as_secs_f64() * 1000.0);
        std::thread::sleep(Duration::from_millis(100));
    }
    latencies.sort_by(f64::total_cmp);
    durations.sort_by(f64::total_cmp);
    let (_, rss_after) = cpu_and_rss(pid);
    println!(
        "daemon_idle: save-to-plan over {edits} edits (one file of {files} rewritten by atomic rename): p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms",
        percentile(&latencies, 0.5),
        percentile(&latencies, 0.99),
        latencies.last().unwrap()
    );
    println!(
        "daemon_idle: reconcile of {pools} pools (load, observe, plan): p50 {:.0} ms, p99 {:.0} ms; RSS after {:.1} MiB",
        percentile(&durations, 0.5),
        percentile(&durations, 0.99),
        rss_after as f64 / 1024.0
    );
    let _ = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status();
    let _ = child.wait();
}
