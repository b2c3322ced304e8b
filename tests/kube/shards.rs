//! `poolwright run --ha kubernetes --shards 8`: three daemons on one
//! desired-state directory and one simulator (`POOLWRIGHT_SIM_DIR`, shared as
//! one cloud account would be), against a real kube-apiserver (kine) holding
//! the shard, member and journal objects. Every pool is acted on by the holder
//! of its shard only; a daemon killed mid-rollout (SIGKILL) has its shards
//! taken over once their leases expire and its rollouts finished without a
//! node terminated twice; a daemon joining takes its share at safe points.

use crate::support::daemon as daemon_support;
use crate::support::kube as kube_support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use daemon_support::Daemon;
use kube_support::ControlPlane;
use poolwright::ha::shards::shard_of;
use serde_json::Value;

const LEASE_SECS: u64 = 6;
const RETRY_SECS: u64 = 1;
const SHARDS: u32 = 8;
const POOLS: usize = 200;
const FILES: usize = 4;

fn write_fleet(config: &Path, image: u32) {
    std::fs::create_dir_all(config).unwrap();
    std::fs::write(
        config.join("provider.yaml"),
        "apiVersion: poolwright/v1\nkind: Provider\nmetadata: {name: sim}\nspec:\n  type: sim\n  seed: 7\n  speed: 20\n",
    )
    .unwrap();
    for f in 0..FILES {
        let text: String = (f..POOLS)
            .step_by(FILES)
            .map(|n| {
                format!(
                    "---\napiVersion: poolwright/v1\nkind: NodePool\nmetadata: {{name: pool-{n:03}}}\nspec:\n  providerRef: sim\n  size: 2\n  template: {{image: img-{image}}}\n  rollout: {{maxSurge: 1, maxUnavailable: 0}}\n"
                )
            })
            .collect();
        let tmp = config.join(format!(".pools-{f}.tmp"));
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, config.join(format!("pools-{f}.yaml"))).unwrap();
    }
}

pub(crate) fn start(root: &Path, cp: &ControlPlane, identity: &str) -> Daemon {
    start_as(root, cp, identity, &format!("state-{identity}"))
}

/// A daemon with the state directory `root/STATE`, whatever its identity.
fn start_as(root: &Path, cp: &ControlPlane, identity: &str, state: &str) -> Daemon {
    let args = [
        "--ha",
        "kubernetes",
        "--ha-kubeconfig",
        cp.kubeconfig.to_str().unwrap(),
        "--ha-namespace",
        "default",
        "--ha-identity",
        identity,
        "--ha-lease-duration",
        &format!("{LEASE_SECS}s"),
        "--ha-renew-deadline",
        "4s",
        "--ha-retry-period",
        &format!("{RETRY_SECS}s"),
        "--shards",
        &SHARDS.to_string(),
        "--parallelism",
        "32",
    ];
    let sim = root.join("sim");
    Daemon::start_in(
        root,
        state,
        &args,
        &[("POOLWRIGHT_SIM_DIR", sim.to_str().unwrap())],
    )
}

fn held(s: &Value) -> Vec<u64> {
    s["daemon"]["ha"]["shards"]["held"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_u64).collect())
        .unwrap_or_default()
}

/// Every pool in sync (two nodes, both on the desired template), as this
/// daemon sees it.
fn all_in_sync() -> impl Fn(&Value) -> bool {
    |s: &Value| {
        s["pools"].as_array().is_some_and(|pools| {
            pools.len() == POOLS
                && pools.iter().all(|p| {
                    p["state"] == "in-sync"
                        && p["rollout"]["available"] == 2
                        && p["rollout"]["updated"] == 2
                })
        })
    }
}

/// Each shard's holder, as the daemons report it. Two daemons' reports are
/// read one after the other, so a shard just handed over may show in both:
/// `None` then (that two never act at once is checked on the events).
fn holders(daemons: &[&Daemon]) -> Option<BTreeMap<u64, String>> {
    let mut out = BTreeMap::new();
    for d in daemons {
        let s = d.status();
        let Some(me) = s["daemon"]["ha"]["identity"].as_str() else {
            continue;
        };
        for i in held(&s) {
            if out.insert(i, me.to_string()).is_some() {
                return None;
            }
        }
    }
    Some(out)
}

/// Wait until the live daemons hold all shards between them, each S/n or one more.
pub(crate) fn wait_balanced(daemons: &[&Daemon], limit: Duration) -> BTreeMap<u64, String> {
    let started = Instant::now();
    loop {
        let h = holders(daemons).unwrap_or_default();
        let n = daemons.len() as u32;
        let mut per: BTreeMap<&str, u32> = BTreeMap::new();
        for who in h.values() {
            *per.entry(who.as_str()).or_default() += 1;
        }
        if h.len() == SHARDS as usize
            && per.len() == daemons.len()
            && per
                .values()
                .all(|c| *c == SHARDS / n || *c == SHARDS.div_ceil(n))
        {
            return h;
        }
        assert!(
            started.elapsed() < limit,
            "shards not balanced over {n} daemons after {limit:?}: {h:?}\n{}",
            daemons
                .iter()
                .map(|d| {
                    let s = d.status();
                    let busy: Vec<String> = s["pools"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter(|p| p["state"] != "in-sync")
                        .take(12)
                        .map(|p| format!("{} {} {}", p["name"], p["state"], p["message"]))
                        .collect();
                    let metrics = daemon_support::http(&d.url, "GET", "/metrics").1;
                    let calls: Vec<&str> = metrics
                        .lines()
                        .filter(|l| {
                            l.starts_with("poolwright_provider_call_duration_seconds_sum")
                                || l.starts_with("poolwright_provider_call_duration_seconds_count")
                        })
                        .collect();
                    format!(
                        "{:#}\n{}\n{}\n{}",
                        s["daemon"]["ha"],
                        busy.join("\n"),
                        calls.join("\n"),
                        d.log_matching("shard", 15)
                    )
                })
                .collect::<Vec<_>>()
                .join("\n---\n")
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn count(events: &[Value], event: &str) -> usize {
    events.iter().filter(|e| e["event"] == event).count()
}

#[test]
fn sharded_daemons_each_act_on_their_own_pools_through_a_kill_and_a_join() {
    let cp = ControlPlane::start();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    std::fs::create_dir_all(root.join("sim")).unwrap();
    write_fleet(&root.join("config"), 1);

    let a = start(root, &cp, "a");
    let b = start(root, &cp, "b");
    let c = start(root, &cp, "c");
    let shards = wait_balanced(&[&a, &b, &c], Duration::from_secs(60));
    eprintln!("shards: {shards:?}");
    let s = a.status();
    assert_eq!(
        s["daemon"]["ha"]["shards"]["count"], SHARDS,
        "{:#}",
        s["daemon"]
    );
    let members = s["daemon"]["ha"]["shards"]["members"].clone();
    assert_eq!(
        members,
        serde_json::json!(["a", "b", "c"]),
        "{:#}",
        s["daemon"]
    );
    a.wait_for(
        "every pool created",
        Duration::from_secs(240),
        all_in_sync(),
    );

    // Each pool was created once, by a daemon holding its shard's lease at
    // the time (the event carries the term it acted under). The first daemon
    // up may create pools of shards it gives back once the others join.
    let mut created = BTreeSet::new();
    for d in [&a, &b, &c] {
        for e in d.events().iter().filter(|e| e["event"] == "pool_created") {
            assert!(e["epoch"].is_i64(), "created without a term: {e}");
            assert!(
                created.insert(e["pool"].as_str().unwrap().to_string()),
                "created twice: {e}"
            );
        }
    }
    assert_eq!(created.len(), POOLS);
    // A pool of another daemon's shard says who acts on it.
    let foreign = (0..POOLS)
        .map(|n| format!("pool-{n:03}"))
        .find(|p| shards[&u64::from(shard_of(p, SHARDS))] != "a")
        .unwrap();
    let text = daemon_support::http(&a.url, "GET", "/v1/status").1;
    assert!(text.contains("\"shards\""), "{text}");
    let shown = a.pool(&foreign);
    assert_eq!(shown["state"], "in-sync", "{shown:#}");

    // A new image for every pool; kill b once its rollouts are under way.
    write_fleet(&root.join("config"), 2);
    let started = Instant::now();
    while count(&b.events(), "terminate_requested") < 3 {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "b did not start replacing nodes: {}",
            b.log_tail()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let b_shards: Vec<u64> = held(&b.status());
    b.kill();
    let killed_at = Instant::now();
    let after = wait_balanced(&[&a, &c], Duration::from_secs(LEASE_SECS + 20));
    let handover = killed_at.elapsed();
    eprintln!(
        "shards {b_shards:?} of b moved {handover:?} after SIGKILL (lease {LEASE_SECS}s, retry {RETRY_SECS}s): {after:?}"
    );
    // Seen from here: the lease duration and one retry period, plus the
    // time for both survivors' status to say so.
    assert!(
        handover <= Duration::from_secs(LEASE_SECS + RETRY_SECS + 2),
        "handover took {handover:?}"
    );
    // Measured by the daemons, from the renewal time the killed daemon last
    // wrote (its clock, before its write reached the API server, which on a
    // loaded machine can be seconds): every take-over within the histogram's
    // 16 s bucket (lease duration and one retry period is about 7 s unloaded).
    for d in [&a, &c] {
        let text = daemon_support::http(&d.url, "GET", "/metrics").1;
        let value = |prefix: &str| -> f64 {
            text.lines()
                .find(|l| l.starts_with(prefix))
                .and_then(|l| l.rsplit(' ').next())
                .and_then(|v| v.parse().ok())
                .unwrap_or(0.0)
        };
        let all = value("poolwright_shard_handover_seconds_count");
        let within = value("poolwright_shard_handover_seconds_bucket{le=\"16.0\"}");
        assert_eq!(within, all, "a take-over took longer than 16 s:\n{text}");
    }
    for d in [&a, &c] {
        eprintln!("{}", d.log_matching("took the shard", 8));
    }
    let handover_metric = a.metric("poolwright_shard_handover_seconds_count", &[])
        + c.metric("poolwright_shard_handover_seconds_count", &[]);
    assert!(
        handover_metric >= b_shards.len() as f64,
        "{handover_metric}"
    );

    // A fourth daemon joins while a third image rolls: it takes its share.
    write_fleet(&root.join("config"), 3);
    std::thread::sleep(Duration::from_secs(2));
    let d = start(root, &cp, "d");
    let last = wait_balanced(&[&a, &c, &d], Duration::from_secs(90));
    eprintln!("after d joined: {last:?}");
    a.wait_for(
        "every pool on the last image",
        Duration::from_secs(300),
        all_in_sync(),
    );

    // Every acting event names its daemon, and within one term of a shard
    // (its epoch) only one daemon acted on a pool.
    let mut by_term: BTreeMap<(String, i64), BTreeSet<String>> = BTreeMap::new();
    let mut all = Vec::new();
    for (who, daemon) in [("a", &a), ("c", &c), ("d", &d)] {
        for e in daemon.events() {
            assert_eq!(e["daemon"], who, "{e}");
            all.push(e);
        }
    }
    let b_events: Vec<Value> = std::fs::read_to_string(root.join("state-b/events.jsonl"))
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    for e in &b_events {
        assert_eq!(e["daemon"], "b", "{e}");
    }
    all.extend(b_events);
    for e in &all {
        if let Some(epoch) = e["epoch"].as_i64() {
            by_term
                .entry((e["pool"].as_str().unwrap().to_string(), epoch))
                .or_default()
                .insert(e["daemon"].as_str().unwrap().to_string());
        }
    }
    let shared: Vec<_> = by_term.iter().filter(|(_, who)| who.len() > 1).collect();
    assert!(
        shared.is_empty(),
        "pools acted on by two daemons in one term: {shared:?}"
    );
    // And never at the same time: per pool, the spans (first to last acting
    // event) of each daemon's terms do not overlap another daemon's.
    type Span = (String, i64, jiff::Timestamp, jiff::Timestamp);
    let mut spans: BTreeMap<String, Vec<Span>> = BTreeMap::new();
    for e in all.iter().filter(|e| e["epoch"].is_i64()) {
        let pool = e["pool"].as_str().unwrap().to_string();
        let who = e["daemon"].as_str().unwrap().to_string();
        let epoch = e["epoch"].as_i64().unwrap();
        let ts: jiff::Timestamp = e["ts"].as_str().unwrap().parse().unwrap();
        let list = spans.entry(pool).or_default();
        match list.iter_mut().find(|s| s.0 == who && s.1 == epoch) {
            Some(span) => {
                span.2 = span.2.min(ts);
                span.3 = span.3.max(ts);
            }
            None => list.push((who, epoch, ts, ts)),
        }
    }
    for (pool, list) in &spans {
        for (i, a) in list.iter().enumerate() {
            for b in list[i + 1..].iter().filter(|b| b.0 != a.0) {
                assert!(
                    a.3 < b.2 || b.3 < a.2,
                    "{pool} acted on by {} and {} at the same time: {list:?}",
                    a.0,
                    b.0
                );
            }
        }
    }
    assert_eq!(count(&all, "pool_created"), POOLS);

    // The simulator's own record: no node was terminated twice, and every
    // pool ended with two nodes on the last image.
    let audit = std::fs::read_to_string(root.join("sim/sim.audit.jsonl")).unwrap();
    let mut terminated: BTreeMap<String, usize> = BTreeMap::new();
    for line in audit.lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        let call = v["call"].as_str().unwrap();
        if let Some(args) = call.strip_prefix("TerminateNode(") {
            let node = args.split(", ").nth(1).unwrap().trim_end_matches(')');
            *terminated.entry(node.to_string()).or_default() += 1;
        }
    }
    let twice: Vec<_> = terminated.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "terminated twice: {twice:?}");
    // Every node ever launched (serials are handed out in order, one per
    // launch) is either one of the 400 left or was terminated, once.
    let last_serial = |text: &str| -> Option<u64> {
        text.lines()
            .rev()
            .find_map(|l| serde_json::from_str::<Value>(l).ok()?["nextSerial"].as_u64())
    };
    let snapshot = std::fs::read_to_string(root.join("sim/sim.json")).unwrap();
    let launched = std::fs::read_to_string(root.join("sim/sim.log.jsonl"))
        .ok()
        .and_then(|log| last_serial(&log))
        .or_else(|| serde_json::from_str::<Value>(&snapshot).unwrap()["nextSerial"].as_u64())
        .unwrap();
    eprintln!("{launched} nodes launched, {} terminated", terminated.len());
    assert_eq!(terminated.len() as u64 + 2 * POOLS as u64, launched);
    assert!(
        terminated.len() >= 2 * POOLS,
        "at least one image was rolled everywhere"
    );

    // status on any daemon shows who holds what.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_poolwright"))
        .current_dir(root)
        .args(["status", "--state-dir", "state-d"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("shards"), "{text}");
    assert!(d.metric("poolwright_shards_held", &[]) >= 2.0);

    // A clean stop gives the shards back at once.
    let stopped = Instant::now();
    assert!(d.terminate().success());
    wait_balanced(&[&a, &c], Duration::from_secs(LEASE_SECS));
    eprintln!("shards of d moved {:?} after SIGTERM", stopped.elapsed());
}

/// Two sharded daemons started with one `--ha-identity`: both would renew
/// the same shard leases and act on the same pools. The first to see a
/// renewal it did not write stops holding every shard at once, gives none
/// back (they are its twin's), says why, and stays stopped; the other holds
/// every shard.
#[test]
fn a_sharded_twin_stops_holding_every_shard_and_gives_none_back() {
    let cp = ControlPlane::start();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    std::fs::create_dir_all(root.join("sim")).unwrap();
    let config = root.join("config");
    std::fs::create_dir_all(&config).unwrap();
    std::fs::write(
        config.join("fleet.yaml"),
        "apiVersion: poolwright/v1\nkind: Provider\nmetadata: {name: sim}\nspec:\n  type: sim\n  seed: 7\n  speed: 20\n---\napiVersion: poolwright/v1\nkind: NodePool\nmetadata: {name: web}\nspec:\n  providerRef: sim\n  size: 1\n  template: {image: img-1}\n",
    )
    .unwrap();
    let all: Vec<u64> = (0..u64::from(SHARDS)).collect();
    let first = start_as(root, &cp, "twin", "state-first");
    first.wait_for(
        "the first to hold every shard",
        Duration::from_secs(60),
        |s| held(s) == all,
    );
    let second = start_as(root, &cp, "twin", "state-second");
    let stopped = |s: &Value| {
        held(s).is_empty()
            && s["daemon"]["ha"]["leader"] == false
            && s["daemon"]["ha"]["shards"]["error"]
                .as_str()
                .is_some_and(|e| e.contains("same identity") && e.contains("--ha-identity"))
    };
    let started = Instant::now();
    let first_stopped = loop {
        if stopped(&first.status()) {
            break true;
        }
        if stopped(&second.status()) {
            break false;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "neither twin noticed the other: {:#}\n{:#}",
            first.status()["daemon"],
            second.status()["daemon"]
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let (out, on) = if first_stopped {
        (first, second)
    } else {
        (second, first)
    };
    on.wait_for(
        "the other twin to hold every shard",
        Duration::from_secs(20),
        |s| held(s) == all,
    );
    // Rounds later: the stopped one holds nothing and has given nothing back
    // (a give-back would show as a shard free or changing hands).
    std::thread::sleep(Duration::from_secs(3 * RETRY_SECS));
    assert!(stopped(&out.status()), "{:#}", out.status()["daemon"]);
    let s = on.status();
    assert_eq!(held(&s), all, "{:#}", s["daemon"]);
    assert!(
        !out.log_matching("released", 50).contains("released"),
        "{}",
        out.log_matching("released", 50)
    );

    // A daemon of its own identity joins and takes its share; then the
    // running twin is killed. The stopped one no longer renews the member
    // lease the twins shared, so it expires and the newcomer takes every
    // shard: none is left to a daemon that will never act.
    let c = start(root, &cp, "c");
    c.wait_for("c to take its share", Duration::from_secs(60), |s| {
        held(s).len() == SHARDS as usize / 2
    });
    on.kill();
    c.wait_for(
        "c to take every shard once the twin is gone",
        Duration::from_secs(60),
        |s| held(s) == all,
    );
    assert!(stopped(&out.status()), "{:#}", out.status()["daemon"]);
}

/// A change across pools under `--shards`: three daemons share one fleet
/// journal (a ConfigMap beside the leases). The canary pool's daemon sees it
/// fail and halts the change; the other daemons read the halt within a
/// retry period and start nothing of that change: no call of theirs reaches
/// the simulator.
#[test]
fn sharded_daemons_honour_one_halt_of_a_change_across_pools() {
    const N: usize = 24;
    let cp = ControlPlane::start();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let config = root.join("config");
    std::fs::create_dir_all(&config).unwrap();
    std::fs::create_dir_all(root.join("sim")).unwrap();
    std::fs::write(
        config.join("provider.yaml"),
        "apiVersion: poolwright/v1\nkind: Provider\nmetadata: {name: sim}\nspec: {type: sim, seed: 7, speed: 20, failures: {badImages: [img-bad]}}\n---\napiVersion: poolwright/v1\nkind: FleetRollout\nmetadata: {name: rings}\nspec:\n  stages:\n    - {name: canary, selector: {matchLabels: {ring: canary}}, soak: 5s}\n    - {name: rest}\n  halt: {failedPools: 1}\n",
    )
    .unwrap();
    let pools = |image: &str| -> String {
        (0..N)
            .map(|n| {
                let ring = if n == 0 { "canary" } else { "main" };
                format!(
                    "---\napiVersion: poolwright/v1\nkind: NodePool\nmetadata: {{name: pool-{n:03}, labels: {{ring: {ring}}}}}\nspec:\n  providerRef: sim\n  size: 2\n  template: {{image: {image}}}\n  rollout: {{health: {{minReady: 0s, startupTimeout: 4s}}}}\n"
                )
            })
            .collect()
    };
    std::fs::write(config.join("pools.yaml"), pools("img-1")).unwrap();
    let daemons = [
        start(root, &cp, "a"),
        start(root, &cp, "b"),
        start(root, &cp, "c"),
    ];
    let refs: Vec<&Daemon> = daemons.iter().collect();
    let holder = wait_balanced(&refs, Duration::from_secs(60));
    for d in &daemons {
        d.wait_for("every pool in sync", Duration::from_secs(90), |s| {
            s["pools"]
                .as_array()
                .is_some_and(|p| p.len() == N && p.iter().all(|p| p["state"] == "in-sync"))
        });
    }
    let canary_shard = u64::from(shard_of("pool-000", SHARDS));
    let canary_daemon = holder[&canary_shard].clone();
    let audit_before = std::fs::read_to_string(root.join("sim/sim.audit.jsonl"))
        .unwrap()
        .lines()
        .count();

    std::fs::write(config.join("pools.yaml"), pools("img-bad")).unwrap();
    // The canary's daemon halts the change; every daemon shows the halt.
    let halted_at = {
        let d = daemons
            .iter()
            .find(|d| d.status()["daemon"]["ha"]["identity"] == canary_daemon.as_str())
            .unwrap();
        d.wait_for("the canary's daemon halts", Duration::from_secs(60), |s| {
            s["fleets"][0]["status"] == "halted"
        });
        Instant::now()
    };
    for d in &daemons {
        d.wait_for("every daemon sees the halt", Duration::from_secs(5), |s| {
            s["fleets"][0]["status"] == "halted"
        });
    }
    let seen = halted_at.elapsed();
    assert!(
        seen < Duration::from_secs(RETRY_SECS * 3),
        "the halt reached every daemon {seen:?} after the first saw it"
    );
    // Nothing of the change started but the canary, for a while after.
    std::thread::sleep(Duration::from_secs(4));
    let audit: Vec<String> = std::fs::read_to_string(root.join("sim/sim.audit.jsonl"))
        .unwrap()
        .lines()
        .skip(audit_before)
        .map(str::to_string)
        .collect();
    let touched: BTreeSet<String> = audit
        .iter()
        .filter_map(|l| {
            let call = serde_json::from_str::<Value>(l).ok()?["call"]
                .as_str()?
                .to_string();
            Some(
                call.split_once('(')?
                    .1
                    .split([',', ')'])
                    .next()?
                    .to_string(),
            )
        })
        .collect();
    assert_eq!(
        touched,
        BTreeSet::from(["pool-000".to_string()]),
        "calls since the edit: {audit:#?}"
    );
    for d in &daemons {
        let admitted: Vec<Value> = d
            .events()
            .into_iter()
            .filter(|e| e["event"] == "fleet_pool_admitted" && e["pool"] != "pool-000")
            .collect();
        assert!(
            admitted.is_empty(),
            "a daemon admitted a roll of the halted change: {admitted:#?}"
        );
    }
}
