//! Node images that follow a channel (`kind: ImageChannel`), on the daemon
//! and the CLI with the embedded simulator's catalogue.
//!
//! The measured case behind them: an image change was a hand edit per pool
//! (40 edits for 40 pools), nothing said when a newer image existed, and
//! nothing could take a bad image back out after its change completed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::support::daemon::Daemon;

const PROVIDER: &str = "apiVersion: poolwright/v1
kind: Provider
metadata: {name: sim}
spec:
  type: sim
  seed: 11
  speed: 100
  images:
    - {image: img-1, released: \"2026-01-01T00:00:00Z\"}
";

fn channel(extra: &str) -> String {
    format!(
        "apiVersion: poolwright/v1\nkind: ImageChannel\nmetadata: {{name: base}}\nspec:\n  source: {{sim: {{provider: sim}}}}\n  interval: 10s\n{extra}"
    )
}

const RINGS: &str = "apiVersion: poolwright/v1
kind: FleetRollout
metadata: {name: rings}
spec:
  maxConcurrentPools: 8
  stages:
    - {name: canary, selector: {matchLabels: {ring: canary}}, soak: 4s}
    - {name: early, pools: \"25%\", soak: 4s}
    - {name: rest}
";

/// `count` pools of 2 nodes following the channel; pool-000 is the canary.
fn pools(count: usize) -> String {
    (0..count)
        .map(|i| {
            let ring = if i == 0 { "canary" } else { "main" };
            format!(
                "---\napiVersion: poolwright/v1\nkind: NodePool\nmetadata: {{name: pool-{i:03}, labels: {{ring: {ring}}}}}\nspec:\n  providerRef: sim\n  size: 2\n  template: {{image: {{channel: base}}}}\n  rollout: {{maxSurge: 1, maxUnavailable: 0, health: {{minReady: 0s}}}}\n"
            )
        })
        .collect()
}

fn cli(root: &Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_poolwright"))
        .current_dir(root)
        .args(args)
        .env_remove("POOLWRIGHT_STATE_DIR")
        .env_remove("POOLWRIGHT_SIM_DIR")
        .output()
        .unwrap()
}

fn ok(root: &Path, args: &[&str]) -> String {
    let out = cli(root, args);
    assert!(
        out.status.success(),
        "poolwright {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `root/config` with the simulator, the channel `base` (with `extra`
/// lines), `fleet` when given, and `count` pools following the channel.
fn write_config(root: &Path, extra: &str, fleet: Option<&str>, count: usize) {
    let config = root.join("config");
    std::fs::create_dir(&config).unwrap();
    std::fs::write(config.join("provider.yaml"), PROVIDER).unwrap();
    std::fs::write(config.join("channel.yaml"), channel(extra)).unwrap();
    if let Some(fleet) = fleet {
        std::fs::write(config.join("rings.yaml"), fleet).unwrap();
    }
    std::fs::write(config.join("pools.yaml"), pools(count)).unwrap();
}

/// The simulator's vendor publishes `image` (released now, or at `released`).
fn release(root: &Path, image: &str, released: Option<&str>) {
    let mut args = vec!["sim", "release", image, "--state-dir", "state"];
    args.extend(released.map(|r| ["--released", r]).into_iter().flatten());
    ok(root, &args);
}

/// Each pool's template image at the simulator, and its live nodes' images.
fn sim_images(root: &Path) -> BTreeMap<String, (String, Vec<String>)> {
    crate::support::sim_images::read(&root.join("state/sim/sim.json"))
}

fn all_on(root: &Path, image: &str) -> bool {
    let s = sim_images(root);
    s.len() == 40
        && s.values()
            .all(|(t, nodes)| t == image && nodes.len() == 2 && nodes.iter().all(|n| n == image))
}

fn change(s: &Value) -> Value {
    s["fleets"][0].clone()
}

/// The events of one change across pools, by kind.
fn of_change<'a>(events: &'a [Value], id: &str, kind: &str) -> Vec<&'a Value> {
    events
        .iter()
        .filter(|e| e["event"] == kind && e["fleet"]["change"] == id)
        .collect()
}

/// Most pools of `id` rolling at once: admitted and not yet done.
fn most_at_once(events: &[Value], id: &str) -> usize {
    let (mut now, mut most) = (0usize, 0usize);
    for e in events.iter().filter(|e| e["fleet"]["change"] == id) {
        match e["event"].as_str() {
            Some("fleet_pool_admitted") => now += 1,
            Some("fleet_pool_done" | "fleet_pool_failed") => now = now.saturating_sub(1),
            _ => {}
        }
        most = most.max(now);
    }
    most
}

#[test]
fn a_released_image_reaches_40_pools_stage_by_stage_a_later_one_waits_and_a_recall_takes_it_back_at_once()
 {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write_config(root, "", Some(RINGS), 40);
    let files_before = std::fs::read_to_string(root.join("config/pools.yaml")).unwrap();
    let d = Daemon::start(root, &[]);
    d.wait_for("40 pools in sync on img-1", Duration::from_secs(90), |s| {
        s["pools"]
            .as_array()
            .is_some_and(|p| p.len() == 40 && p.iter().all(|p| p["state"] == "in-sync"))
    });
    assert!(all_on(root, "img-1"));

    // 1. The vendor releases img-2: one change, staged, with no edit.
    release(root, "img-2", None);
    d.wait_for("the change of img-2 begins", Duration::from_secs(30), |s| {
        change(s)["change"] == "channel base@img-2"
    });
    // 2. img-3, released while img-2's change is in flight, waits.
    release(root, "img-3", None);
    d.wait_for_event("img-3 queued", |e| {
        e["event"] == "image_queued" && e["message"].as_str().unwrap().contains("img-3")
    });
    let (_, body) = d.get("/v1/images");
    let images: Value = serde_json::from_str(&body).unwrap();
    let rec = &images["channels"][0]["record"];
    assert_eq!(rec["inForce"]["image"], "img-2", "{images:#}");
    assert_eq!(rec["queued"]["image"], "img-3", "{images:#}");

    d.wait_for("img-2's change completes", Duration::from_secs(120), |s| {
        change(s)["change"] != "channel base@img-2" || change(s)["status"] == "completed"
    });
    let events = d.events();
    // Stage by stage: no pool of a later stage was admitted before the
    // stage before it passed.
    let admitted = of_change(&events, "channel base@img-2", "fleet_pool_admitted");
    let passed = of_change(&events, "channel base@img-2", "fleet_stage_passed");
    assert_eq!(admitted.len(), 40, "every pool rolled in img-2's change");
    assert_eq!(admitted[0]["pool"], "pool-000", "the canary first");
    let canary_passed = passed[0]["ts"].as_str().unwrap().to_string();
    assert!(
        admitted[1..]
            .iter()
            .all(|e| e["ts"].as_str().unwrap() >= canary_passed.as_str()),
        "no pool before the canary's stage passed"
    );
    assert!(most_at_once(&events, "channel base@img-2") <= 8);

    // 3. Then img-3 follows as its own change, and completes.
    d.wait_for("img-3's change completes", Duration::from_secs(120), |s| {
        change(s)["change"] == "channel base@img-3" && change(s)["status"] == "completed"
    });
    d.wait_for("every node on img-3", Duration::from_secs(30), |_| {
        all_on(root, "img-3")
    });
    let events = d.events();
    assert_eq!(
        of_change(&events, "channel base@img-3", "fleet_pool_admitted").len(),
        40
    );

    // 4. A recall after completion: every pool back to img-2 in one change
    // with no soak, at most maxConcurrentPools at once.
    let said = ok(
        root,
        &[
            "image",
            "recall",
            "img-3",
            "--reason",
            "kernel bug",
            "--state-dir",
            "state",
        ],
    );
    assert!(said.contains("back to img-2"), "{said}");
    d.wait_for("the recall completes", Duration::from_secs(120), |s| {
        change(s)["change"] == "recall img-3" && change(s)["status"] == "completed"
    });
    d.wait_for("every node on img-2", Duration::from_secs(30), |_| {
        all_on(root, "img-2")
    });
    let events = d.events();
    let stages: BTreeSet<&str> = of_change(&events, "recall img-3", "fleet_stage_started")
        .iter()
        .filter_map(|e| e["message"].as_str())
        .collect();
    assert_eq!(stages.len(), 1, "one stage, no soaks: {stages:?}");
    assert!(stages.iter().all(|m| m.contains("recall")), "{stages:?}");
    assert!(most_at_once(&events, "recall img-3") <= 8);
    // Every pool's budget held at every event: 2 nodes, surge 1.
    for e in events.iter().filter(|e| e["counts"].is_object()) {
        assert!(
            e["counts"]["total"].as_u64().unwrap() <= 3,
            "over budget: {e}"
        );
    }
    // The channel never picks img-3 again, even asked again.
    let (_, body) = d.get("/v1/images");
    let images: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(images["channels"][0]["record"]["inForce"]["image"], "img-2");
    assert!(
        images["recalled"]["img-3"]["reason"] == "kernel bug",
        "{images:#}"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("config/pools.yaml")).unwrap(),
        files_before,
        "no file was edited"
    );
}

/// `plan` resolves the channel when it is made: the newest eligible image,
/// shown with its release and age; an image younger than `minReleaseAge`
/// waits, and the plan says until when; a denied image is never picked.
#[test]
fn plan_resolves_the_newest_eligible_image_and_says_until_when_a_younger_one_waits() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write_config(root, "  minReleaseAge: 3d\n  deny: [img-2]\n", None, 1);
    ok(
        root,
        &["apply", "config", "--state-dir", "state", "--auto-approve"],
    );
    release(root, "img-2", Some("2026-02-01T00:00:00Z"));
    let young = jiff::Timestamp::now() - jiff::SignedDuration::from_hours(24);
    release(root, "img-3", Some(&young.to_string()));
    let plan = ok(root, &["plan", "config", "--state-dir", "state"]);
    assert!(
        plan.contains("No changes"),
        "img-2 denied, img-3 too young: {plan}"
    );
    let until = (young + jiff::SignedDuration::from_hours(72))
        .strftime("%Y-%m-%d %H:%M UTC")
        .to_string();
    assert!(
        plan.contains(&format!("img-3 is not eligible until {until}")),
        "{plan}"
    );
    // Old enough: the plan rolls to it, saying where it came from.
    let old = jiff::Timestamp::now() - jiff::SignedDuration::from_hours(24 * 6);
    release(root, "img-3", Some(&old.to_string()));
    let plan = ok(root, &["plan", "config", "--state-dir", "state"]);
    assert!(
        plan.contains("image = \"img-1\" -> \"img-3\" (channel base, released")
            && plan.contains("6d old"),
        "{plan}"
    );
}

/// Bad input: a pool naming a missing channel is a located error; a
/// channel no pool follows is said; a deny list of 10,000 entries, a
/// source of the wrong type and an interval out of bounds are refused.
#[test]
fn a_missing_channel_an_unused_one_and_out_of_bounds_values_are_said_where_they_are() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let config = root.join("config");
    std::fs::create_dir(&config).unwrap();
    std::fs::write(config.join("provider.yaml"), PROVIDER).unwrap();
    let pools = pools(1).replace("{channel: base}", "{channel: bsae}");
    std::fs::write(config.join("pools.yaml"), &pools).unwrap();
    let deny: Vec<String> = (0..10_000).map(|i| format!("ami-{i:05}")).collect();
    std::fs::write(
        config.join("channel.yaml"),
        channel(&format!("  deny: [{}]\n", deny.join(", "))),
    )
    .unwrap();
    std::fs::write(
        config.join("other.yaml"),
        "apiVersion: poolwright/v1\nkind: ImageChannel\nmetadata: {name: other}\nspec:\n  source: {aws: {provider: sim, ssmParameter: /x}}\n  interval: 1s\n",
    )
    .unwrap();
    let out = cli(root, &["validate", "config"]);
    assert!(!out.status.success());
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    for want in [
        "pools.yaml:8:",
        "template.image.channel \"bsae\" does not name a ImageChannel",
        "did you mean \"base\"",
        "deny lists 10000 images: at most 1000",
        "a aws source needs a provider of type aws, but provider \"sim\" is of type sim",
        "interval must be from 10s to 24h",
        "ImageChannel \"base\" is followed by no pool",
    ] {
        assert!(text.contains(want), "missing {want:?} in:\n{text}");
    }
    assert!(!root.join("state").exists(), "nothing was written");
}

/// A source that fails keeps the image in force, changes nothing, and says
/// why in status, an event and a metric; when it answers again, a newer
/// image rolls pools no FleetRollout governs straight away.
#[test]
fn a_failing_source_keeps_the_image_in_force_and_says_why_in_status_an_event_and_a_metric() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write_config(root, "", None, 2);
    let d = Daemon::start(root, &[]);
    let on = |image: &str| {
        let s = sim_images(root);
        s.len() == 2
            && s.values()
                .all(|(t, n)| t == image && n.len() == 2 && n.iter().all(|x| x == image))
    };
    d.wait_for("2 pools on img-1", Duration::from_secs(60), |_| on("img-1"));
    let catalogue = root.join("state/sim/images.json");
    std::fs::create_dir_all(catalogue.parent().unwrap()).unwrap();
    std::fs::write(&catalogue, "{not json").unwrap();
    d.wait_for_event("the source fails", |e| e["event"] == "image_source_failed");
    let s = d.wait_for("status says why", Duration::from_secs(5), |s| {
        s["images"][0]["error"].is_string()
    });
    let error = s["images"][0]["error"].as_str().unwrap();
    assert!(error.contains("corrupt"), "{error}");
    assert_eq!(s["images"][0]["inForce"], "img-1");
    let (_, metrics) = d.get("/metrics");
    assert!(
        metrics.contains("poolwright_image_source_failing{channel=\"base\"} 1"),
        "{metrics}"
    );
    assert!(on("img-1"), "nothing changed");
    // It answers again, with a newer image: ungoverned pools roll to it.
    // (`sim release` refuses to overwrite a corrupt catalogue: it goes first.)
    std::fs::remove_file(&catalogue).unwrap();
    release(root, "img-2", Some("2026-03-01T00:00:00Z"));
    d.wait_for_event("the source recovers", |e| {
        e["event"] == "image_source_recovered"
    });
    d.wait_for("2 pools on img-2", Duration::from_secs(60), |_| on("img-2"));
    let (_, metrics) = d.get("/metrics");
    assert!(metrics.contains("poolwright_image_source_failing{channel=\"base\"} 0"));
}

/// While a change is in flight, a newer image waits: `plan` says so (as the
/// daemon queues it), `forecast` says when it reaches every pool (after the
/// change in flight ends), and `/v1/images` gives each node's image and
/// that image's age.
#[test]
fn a_queued_image_is_forecast_after_the_change_in_flight_and_each_nodes_image_age_is_shown() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    // The canary soaks an hour: the change stays in flight.
    let slow = "apiVersion: poolwright/v1\nkind: FleetRollout\nmetadata: {name: rings}\nspec:\n  stages:\n    - {name: canary, selector: {matchLabels: {ring: canary}}, soak: 1h}\n    - {name: rest}\n";
    write_config(root, "", Some(slow), 4);
    let d = Daemon::start(root, &[]);
    let in_sync = |s: &Value| {
        s["pools"]
            .as_array()
            .is_some_and(|p| p.len() == 4 && p.iter().all(|p| p["state"] == "in-sync"))
    };
    d.wait_for("4 pools in sync on img-1", Duration::from_secs(60), in_sync);
    release(root, "img-2", Some("2026-12-01T00:00:00Z"));
    d.wait_for("the canary soaks on img-2", Duration::from_secs(60), |s| {
        change(s)["change"] == "channel base@img-2"
            && s["pools"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["name"] == "pool-000" && p["state"] == "in-sync")
            && serde_json::to_string(&change(s)).unwrap().contains("soak")
    });
    release(root, "img-3", None);
    d.wait_for_event("img-3 queued", |e| {
        e["event"] == "image_queued" && e["message"].as_str().unwrap().contains("img-3")
    });

    // `plan` beside the daemon queues it too: the pools stay on img-2.
    let plan = ok(root, &["plan", "config", "--state-dir", "state"]);
    assert!(
        plan.contains("channel base: img-3 is eligible and waits for the change in flight"),
        "{plan}"
    );

    // `forecast`: img-3 begins when the change in flight ends (its canary
    // soaks an hour), then reaches all 4 pools.
    let text = ok(
        root,
        &["forecast", "config", "--state-dir", "state", "--runs", "20"],
    );
    assert!(text.contains("channel base: queued image img-3"), "{text}");
    let json: Value = serde_json::from_str(&ok(
        root,
        &[
            "forecast",
            "config",
            "--state-dir",
            "state",
            "--runs",
            "20",
            "-o",
            "json",
        ],
    ))
    .unwrap();
    let q = &json["queued"][0];
    assert_eq!(q["image"], "img-3", "{json:#}");
    assert_eq!(q["change"], "channel base@img-3", "{q:#}");
    assert_eq!(q["waitsFor"], serde_json::json!(["rings"]), "{q:#}");
    assert_eq!(q["poolsRolled"], 4, "{q:#}");
    let ts = |v: &Value| v.as_str().unwrap().parse::<jiff::Timestamp>().unwrap();
    let now = jiff::Timestamp::now();
    let begins = ts(&q["beginsP50"]);
    assert!(
        begins.duration_since(now) > jiff::SignedDuration::from_mins(50),
        "it waits for the hour's soak: {q:#}"
    );
    assert!(ts(&q["finishP50"]) > begins, "{q:#}");
    assert!(ts(&q["finishP90"]) >= ts(&q["finishP50"]), "{q:#}");

    // Each node's image and that image's age.
    let (_, body) = d.get("/v1/images");
    let images: Value = serde_json::from_str(&body).unwrap();
    let pools = images["channels"][0]["pools"].as_array().unwrap().clone();
    let nodes = |pool: &str| -> Vec<Value> {
        pools.iter().find(|p| p["pool"] == pool).unwrap()["nodes"]
            .as_array()
            .unwrap()
            .clone()
    };
    let canary = nodes("pool-000");
    assert_eq!(canary.len(), 2, "{images:#}");
    assert!(
        canary
            .iter()
            .all(|n| n["image"] == "img-2" && n["released"] == "2026-12-01T00:00:00Z"),
        "{images:#}"
    );
    let waiting = nodes("pool-001");
    assert!(
        waiting
            .iter()
            .all(|n| n["image"] == "img-1" && n["ageSeconds"].as_i64().unwrap() > 300 * 86_400),
        "{images:#}"
    );
    let shown = ok(root, &["images", "--state-dir", "state"]);
    assert!(shown.contains("nodes: 2 on img-2 ("), "{shown}");
    assert!(shown.contains("nodes: 2 on img-1 ("), "{shown}");
}
