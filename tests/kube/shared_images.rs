//! Image channels under `run --ha kubernetes --shards`: two daemons on one
//! desired state and one simulator share one image record (a ConfigMap
//! beside the leases). One daemon asks the source; an image it finds
//! reaches the pools of both; a recall taken by the other daemon rolls
//! every pool back and is never picked again.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::shards::{start, wait_balanced};
use crate::support::daemon::{Daemon, http};
use crate::support::kube::ControlPlane;

const POOLS: usize = 12;

fn write_config(config: &Path) {
    std::fs::create_dir_all(config).unwrap();
    std::fs::write(
        config.join("provider.yaml"),
        "apiVersion: poolwright/v1\nkind: Provider\nmetadata: {name: sim}\nspec:\n  type: sim\n  seed: 7\n  speed: 20\n  images:\n    - {image: img-1, released: \"2026-01-01T00:00:00Z\"}\n---\napiVersion: poolwright/v1\nkind: ImageChannel\nmetadata: {name: base}\nspec:\n  source: {sim: {provider: sim}}\n  interval: 10s\n",
    )
    .unwrap();
    let pools: String = (0..POOLS)
        .map(|n| {
            format!(
                "---\napiVersion: poolwright/v1\nkind: NodePool\nmetadata: {{name: pool-{n:03}}}\nspec:\n  providerRef: sim\n  size: 2\n  template: {{image: {{channel: base}}}}\n  rollout: {{maxSurge: 1, maxUnavailable: 0, health: {{minReady: 0s}}}}\n"
            )
        })
        .collect();
    std::fs::write(config.join("pools.yaml"), pools).unwrap();
}

fn cli(root: &Path, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_poolwright"))
        .current_dir(root)
        .args(args)
        .env_remove("POOLWRIGHT_STATE_DIR")
        .env("POOLWRIGHT_SIM_DIR", root.join("sim"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "poolwright {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Each pool's template image at the shared simulator, and whether both of
/// its live nodes run that template.
fn at_the_simulator(root: &Path) -> BTreeMap<String, (String, bool)> {
    crate::support::sim_images::read(&root.join("sim/sim.json"))
        .into_iter()
        .map(|(pool, (image, nodes))| {
            let on = nodes.len() == 2 && nodes.iter().all(|n| *n == image);
            (pool, (image, on))
        })
        .collect()
}

fn wait_all_on(root: &Path, image: &str, limit: Duration, daemons: &[&Daemon]) {
    let started = Instant::now();
    loop {
        let sim = at_the_simulator(root);
        if sim.len() == POOLS && sim.values().all(|(i, on)| i == image && *on) {
            return;
        }
        assert!(
            started.elapsed() < limit,
            "not every pool on {image} after {limit:?}: {sim:#?}\n{}",
            daemons
                .iter()
                .map(|d| d.log_tail())
                .collect::<Vec<_>>()
                .join("\n---\n")
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn images(d: &Daemon) -> Value {
    let (code, body) = http(&d.url, "GET", "/v1/images");
    assert_eq!(code, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

fn in_force(d: &Daemon) -> Option<String> {
    images(d)["channels"][0]["record"]["inForce"]["image"]
        .as_str()
        .map(str::to_string)
}

/// How many times the daemons together found `image` eligible.
fn eligible(daemons: &[&Daemon], image: &str) -> usize {
    daemons
        .iter()
        .flat_map(|d| d.events())
        .filter(|e| {
            e["event"] == "image_eligible"
                && e["message"]
                    .as_str()
                    .is_some_and(|m| m.contains(&format!(" {image} ")))
        })
        .count()
}

#[test]
fn sharded_daemons_share_one_image_record_one_asks_and_a_recall_on_either_reaches_every_pool() {
    let cp = ControlPlane::start();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    std::fs::create_dir_all(root.join("sim")).unwrap();
    write_config(&root.join("config"));
    let a = start(root, &cp, "a");
    let b = start(root, &cp, "b");
    wait_balanced(&[&a, &b], Duration::from_secs(60));
    wait_all_on(root, "img-1", Duration::from_secs(120), &[&a, &b]);
    for d in [&a, &b] {
        d.wait_for("img-1 in force", Duration::from_secs(30), |_| {
            in_force(d).as_deref() == Some("img-1")
        });
    }
    // One daemon asks the source (the holder of shard 0); the other follows
    // the record it keeps.
    let asker: Vec<bool> = [&a, &b]
        .iter()
        .map(|d| images(d)["asksSources"] == true)
        .collect();
    assert_eq!(
        asker.iter().filter(|x| **x).count(),
        1,
        "exactly one daemon asks the source: {asker:?}"
    );
    let (asks, follows) = if asker[0] { (&a, &b) } else { (&b, &a) };

    // A release reaches the pools of both daemons.
    cli(root, &["sim", "release", "img-2", "--state-dir", "state-a"]);
    wait_all_on(root, "img-2", Duration::from_secs(120), &[&a, &b]);
    follows.wait_for(
        "the follower shows img-2 in force",
        Duration::from_secs(10),
        |_| in_force(follows).as_deref() == Some("img-2"),
    );
    // Each image was found once, by whichever daemon asked at the time
    // (shard 0 may have changed hands as b joined), never by both.
    assert_eq!(eligible(&[&a, &b], "img-2"), 1);
    assert_eq!(eligible(&[&a, &b], "img-1"), 1);

    // A recall taken by the daemon that does not ask: every pool back to
    // img-2's predecessor, on both daemons' shards.
    let follows_state = if asker[0] { "state-b" } else { "state-a" };
    let said = cli(
        root,
        &[
            "image",
            "recall",
            "img-2",
            "--reason",
            "kernel panic on boot",
            "--state-dir",
            follows_state,
        ],
    );
    assert!(said.contains("back to img-1"), "{said}");
    wait_all_on(root, "img-1", Duration::from_secs(120), &[&a, &b]);
    for d in [&a, &b] {
        d.wait_for(
            "img-2 recalled, img-1 in force, on both",
            Duration::from_secs(10),
            |_| {
                let v = images(d);
                v["recalled"]["img-2"]["reason"] == "kernel panic on boot"
                    && v["channels"][0]["record"]["inForce"]["image"] == "img-1"
            },
        );
    }
    // The asking daemon asks again (every 10 s) and does not pick it.
    std::thread::sleep(Duration::from_secs(12));
    assert_eq!(in_force(asks).as_deref(), Some("img-1"));
    assert_eq!(eligible(&[&a, &b], "img-2"), 1, "img-2 was picked again");
    let sim = at_the_simulator(root);
    assert!(
        sim.values().all(|(i, _)| i == "img-1"),
        "a pool went back to the recalled image: {sim:#?}"
    );
}
