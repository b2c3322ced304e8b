//! Images that follow a channel (BENCHMARKS.md): `poolwright run` on the
//! embedded simulator with POOLS pools following CHANNELS channels (each
//! channel's pools governed by a FleetRollout of its own, a canary stage of
//! one pool first), every channel asking the simulator's catalogue every
//! INTERVAL seconds.
//!
//! 1. calls: the daemon's `channel_images` calls over ROUNDS intervals,
//!    against the number of channels per interval.
//! 2. release: `poolwright sim release` of an eligible image at a random
//!    moment of the interval, to the first canary pool admitted (rolling).
//! 3. recall: `poolwright image recall` of that image once its changes run,
//!    to each affected pool's first step of the recall (its admission).
//!
//! cargo bench --bench image_channels
//!   POOLWRIGHT_BENCH_POOLS (2000), _CHANNELS (5), _INTERVAL (10), _ROUNDS (3)

#[path = "common/mod.rs"]
mod common;
use common::{Daemon, env_or, http_get};

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use jiff::Timestamp;
use serde_json::Value;

fn cli(root: &Path, args: &[&str]) {
    let out = Command::new(env!("CARGO_BIN_EXE_poolwright"))
        .current_dir(root)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn events(root: &Path) -> Vec<Value> {
    std::fs::read_to_string(root.join("state/events.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

fn ts(e: &Value) -> Timestamp {
    e["ts"].as_str().unwrap().parse().unwrap()
}

/// The daemon's channel_images calls so far.
fn asks(d: &Daemon) -> u64 {
    http_get(&d.url, "/metrics")
        .lines()
        .filter(|l| {
            l.starts_with("poolwright_provider_calls_total")
                && l.contains("call=\"channel_images\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

fn write_config(root: &Path, pools: usize, channels: usize, interval: u64) {
    let config = root.join("config");
    std::fs::create_dir_all(&config).unwrap();
    let mut text = "apiVersion: poolwright/v1\nkind: Provider\nmetadata: {name: sim}\nspec:\n  type: sim\n  seed: 1\n  speed: 200\n  images: [{image: img-1, released: \"2026-01-01T00:00:00Z\"}]\n".to_string();
    for c in 0..channels {
        text.push_str(&format!(
            "---\napiVersion: poolwright/v1\nkind: ImageChannel\nmetadata: {{name: ch{c}}}\nspec:\n  source: {{sim: {{provider: sim}}}}\n  interval: {interval}s\n---\napiVersion: poolwright/v1\nkind: FleetRollout\nmetadata: {{name: rings{c}}}\nspec:\n  selector: {{matchLabels: {{channel: ch{c}}}}}\n  maxConcurrentPools: 50\n  stages:\n    - {{name: canary, selector: {{matchLabels: {{channel: ch{c}, ring: canary}}}}, soak: 10m}}\n    - {{name: rest}}\n"
        ));
    }
    std::fs::write(config.join("channels.yaml"), text).unwrap();
    // At most 1,000 documents a file: 500 pools each.
    for (f, chunk) in (0..pools).collect::<Vec<_>>().chunks(500).enumerate() {
        let mut text = String::new();
        for &p in chunk {
            let c = p % channels;
            let ring = if p < channels { "canary" } else { "main" };
            text.push_str(&format!(
                "---\napiVersion: poolwright/v1\nkind: NodePool\nmetadata: {{name: pool-{p:05}, labels: {{channel: ch{c}, ring: {ring}}}}}\nspec:\n  providerRef: sim\n  size: 1\n  template: {{image: {{channel: ch{c}}}}}\n  rollout: {{health: {{minReady: 0s}}}}\n"
            ));
        }
        std::fs::write(config.join(format!("pools-{f:02}.yaml")), text).unwrap();
    }
}

fn main() {
    let pools: usize = env_or("POOLWRIGHT_BENCH_POOLS", 2000);
    let channels: usize = env_or("POOLWRIGHT_BENCH_CHANNELS", 5);
    let interval: u64 = env_or("POOLWRIGHT_BENCH_INTERVAL", 10);
    let rounds: u64 = env_or("POOLWRIGHT_BENCH_ROUNDS", 3);
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write_config(root, pools, channels, interval);
    let child = Command::new(env!("CARGO_BIN_EXE_poolwright"))
        .current_dir(root)
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
        if let Ok(t) = std::fs::read_to_string(root.join("state/daemon.json")) {
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
    let d = Daemon { child, url };
    loop {
        let s: Value = serde_json::from_str(&http_get(&d.url, "/v1/status?pools=none")).unwrap();
        if s["totals"]["byState"]["in-sync"] == pools {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(600),
            "did not converge: {}",
            s["totals"]
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    println!(
        "{pools} pools on {channels} channels in sync after {:.1}s",
        started.elapsed().as_secs_f64()
    );

    // 1. Calls per interval.
    let a0 = asks(&d);
    std::thread::sleep(Duration::from_secs(interval * rounds));
    let a1 = asks(&d);
    println!(
        "calls: {} channel_images calls in {rounds} intervals of {interval}s: {:.2} per interval ({channels} channels)",
        a1 - a0,
        (a1 - a0) as f64 / rounds as f64
    );

    // 2. An eligible image released at a moment of the interval.
    std::thread::sleep(Duration::from_millis(
        1000 + (Timestamp::now().as_millisecond() % 5000) as u64,
    ));
    let released = Timestamp::now();
    cli(
        root,
        &[
            "sim",
            "release",
            "img-2",
            "--state-dir",
            "state",
            "--released",
            &(released - jiff::SignedDuration::from_hours(1)).to_string(),
        ],
    );
    let wait = Instant::now();
    let firsts = loop {
        let ev = events(root);
        let firsts: Vec<Timestamp> = (0..channels)
            .filter_map(|c| {
                ev.iter()
                    .find(|e| {
                        e["event"] == "fleet_pool_admitted"
                            && e["fleet"]["change"]
                                == "channel ch{c}@img-2".replace("{c}", &c.to_string())
                    })
                    .map(ts)
            })
            .collect();
        if firsts.len() == channels {
            break firsts;
        }
        assert!(
            wait.elapsed() < Duration::from_secs(interval * 3 + 30),
            "no canary admitted"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let lat: Vec<f64> = firsts
        .iter()
        .map(|t| t.duration_since(released).as_secs_f64())
        .collect();
    println!(
        "release: release to each channel's canary rolling: min {:.2}s, max {:.2}s (interval {interval}s)",
        lat.iter().cloned().fold(f64::MAX, f64::min),
        lat.iter().cloned().fold(0.0, f64::max)
    );

    // 3. A recall while the canaries soak: every pool of every channel
    // (the canaries back, the rest never went) — the canaries are the
    // affected pools; every pool's first step of the recall is measured.
    std::thread::sleep(Duration::from_secs(3));
    let recalled = Timestamp::now();
    cli(
        root,
        &[
            "image",
            "recall",
            "img-2",
            "--reason",
            "bench",
            "--state-dir",
            "state",
        ],
    );
    let wait = Instant::now();
    loop {
        let ev = events(root);
        let admitted: Vec<Timestamp> = ev
            .iter()
            .filter(|e| {
                e["event"] == "fleet_pool_admitted" && e["fleet"]["change"] == "recall img-2"
            })
            .map(ts)
            .collect();
        if admitted.len() >= channels {
            let last = admitted.iter().max().unwrap();
            let first = admitted.iter().min().unwrap();
            println!(
                "recall: recall to the first affected pool's first step {:.3}s, to the last of {} {:.3}s",
                first.duration_since(recalled).as_secs_f64(),
                admitted.len(),
                last.duration_since(recalled).as_secs_f64()
            );
            break;
        }
        assert!(
            wait.elapsed() < Duration::from_secs(30),
            "the recall admitted {} pools",
            admitted.len()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}
