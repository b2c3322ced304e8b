//! The embedded simulator models what the executor must cope with, reproducibly.

use crate::support::world as common;

use std::sync::Arc;

use common::block_on;
use jiff::SignedDuration;
use poolwright::clock::{Clock, ManualClock};
use poolwright::model::OpKey;
use poolwright::model::{NodeState, NodeTemplate, PoolSpec};
use poolwright::provider::sim::Sim;
use poolwright::provider::{ErrorKind, Provider};
use poolwright::spec::types::{Distribution, SimProvider};
use poolwright::spec::values::Duration;

fn settings(yaml_overrides: impl FnOnce(&mut SimProvider)) -> SimProvider {
    let mut s = SimProvider {
        boot_time: Distribution::Fixed(Duration::secs(30)),
        health_delay: Distribution::Fixed(Duration::secs(10)),
        ..SimProvider::default()
    };
    yaml_overrides(&mut s);
    s
}

fn spec(name: &str, size: u32) -> PoolSpec {
    PoolSpec {
        name: name.into(),
        size,
        autoscaling: None,
        template: NodeTemplate {
            image: Some("img-1".into()),
            ..NodeTemplate::default()
        },
        in_place: Default::default(),
        placement: Default::default(),
    }
}

fn clock() -> Arc<ManualClock> {
    Arc::new(ManualClock::new("2026-12-01T00:00:00Z".parse().unwrap()))
}

fn states(sim: &Sim, pool: &str) -> Vec<NodeState> {
    let pools = block_on(sim.describe_pools(&[pool.to_string()])).unwrap();
    pools[0].nodes.iter().map(|n| n.state).collect()
}

#[test]
fn nodes_boot_then_become_healthy_on_the_clock() {
    let c = clock();
    let sim = Sim::open("sim", &settings(|_| {}), None, c.clone() as Arc<dyn Clock>).unwrap();
    block_on(sim.create_pool(&spec("web", 3), &OpKey::derive(&["test"]))).unwrap();
    assert_eq!(states(&sim, "web"), [NodeState::Pending; 3]);
    c.advance(SignedDuration::from_secs(39));
    assert_eq!(states(&sim, "web"), [NodeState::Pending; 3]);
    c.advance(SignedDuration::from_secs(1));
    assert_eq!(states(&sim, "web"), [NodeState::Healthy; 3]);
}

#[test]
fn speed_divides_every_latency() {
    let c = clock();
    let s = settings(|s| s.speed = Some(poolwright::spec::At::bare(10.0)));
    let sim = Sim::open("sim", &s, None, c.clone() as Arc<dyn Clock>).unwrap();
    block_on(sim.create_pool(&spec("web", 1), &OpKey::derive(&["test"]))).unwrap();
    c.advance(SignedDuration::from_secs(4));
    assert_eq!(states(&sim, "web"), [NodeState::Healthy]);
}

#[test]
fn never_healthy_nodes_stay_unhealthy_after_booting() {
    let c = clock();
    let s = settings(|s| s.failures.never_healthy = 1.0);
    let sim = Sim::open("sim", &s, None, c.clone() as Arc<dyn Clock>).unwrap();
    block_on(sim.create_pool(&spec("web", 2), &OpKey::derive(&["test"]))).unwrap();
    c.advance(SignedDuration::from_secs(3600));
    assert_eq!(states(&sim, "web"), [NodeState::Unhealthy; 2]);
}

#[test]
fn quota_refuses_launches_atomically() {
    let c = clock();
    let sim = Sim::open(
        "sim",
        &settings(|s| s.quota = Some(4)),
        None,
        c as Arc<dyn Clock>,
    )
    .unwrap();
    block_on(sim.create_pool(&spec("web", 3), &OpKey::derive(&["test"]))).unwrap();
    let err = block_on(sim.create_nodes("web", 2, 5, &OpKey::derive(&["test"]))).unwrap_err();
    assert_eq!(err.kind, ErrorKind::Quota);
    assert_eq!(
        err.to_string(),
        "CreateNodes(web, 2) failed: quota or capacity refused: InsufficientCapacity: 2 more node(s) would exceed the quota of 4 (3 in use)"
    );
    assert_eq!(states(&sim, "web").len(), 3);
    block_on(sim.create_nodes("web", 1, 4, &OpKey::derive(&["test"]))).unwrap();
    assert_eq!(states(&sim, "web").len(), 4);
}

#[test]
fn injected_api_errors_are_deterministic_and_transient() {
    let run = || {
        let sim = Sim::open(
            "sim",
            &settings(|s| s.failures.api_errors = 0.5),
            None,
            clock() as Arc<dyn Clock>,
        )
        .unwrap();
        (0..20)
            .map(|_| match block_on(sim.describe_pools(&[])) {
                Ok(_) => 'o',
                Err(e) => {
                    assert!(e.is_transient(), "{e}");
                    'x'
                }
            })
            .collect::<String>()
    };
    let first = run();
    assert_eq!(first, run(), "same seed, same failures");
    assert!(first.contains('o') && first.contains('x'), "{first}");
}

#[test]
fn the_seed_decides_every_latency() {
    let boots = |seed: u64| {
        let c = clock();
        let s = SimProvider {
            seed,
            ..SimProvider::default()
        };
        let sim = Sim::open("sim", &s, None, c.clone() as Arc<dyn Clock>).unwrap();
        block_on(sim.create_pool(&spec("web", 5), &OpKey::derive(&["test"]))).unwrap();
        (0..240)
            .map(|_| {
                c.advance(SignedDuration::from_secs(1));
                states(&sim, "web")
                    .iter()
                    .filter(|s| **s == NodeState::Healthy)
                    .count()
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(boots(1), boots(1));
    assert_ne!(boots(1), boots(2));
}

#[test]
fn the_fleet_persists_and_a_corrupt_state_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let c = clock();
    let sim = Sim::open(
        "sim",
        &settings(|_| {}),
        Some(dir.path()),
        c.clone() as Arc<dyn Clock>,
    )
    .unwrap();
    block_on(sim.create_pool(&spec("web", 2), &OpKey::derive(&["test"]))).unwrap();
    let again = Sim::open(
        "sim",
        &settings(|_| {}),
        Some(dir.path()),
        c.clone() as Arc<dyn Clock>,
    )
    .unwrap();
    assert_eq!(states(&again, "web").len(), 2);
    std::fs::write(dir.path().join("sim/sim.json"), "{not json").unwrap();
    let err = Sim::open(
        "sim",
        &settings(|_| {}),
        Some(dir.path()),
        c as Arc<dyn Clock>,
    )
    .err()
    .unwrap();
    assert!(err.to_string().contains("sim.json is corrupt"), "{err}");
}

#[test]
fn terminating_with_decrement_shrinks_and_without_replaces() {
    let c = clock();
    let sim = Sim::open("sim", &settings(|_| {}), None, c.clone() as Arc<dyn Clock>).unwrap();
    block_on(sim.create_pool(&spec("web", 3), &OpKey::derive(&["test"]))).unwrap();
    let ids = |sim: &Sim| {
        block_on(sim.describe_pools(&["web".into()])).unwrap()[0]
            .nodes
            .iter()
            .map(|n| (n.id.clone(), n.state))
            .collect::<Vec<_>>()
    };
    let first = ids(&sim)[0].0.clone();
    block_on(sim.terminate_node("web", &first, false, &OpKey::derive(&["test"]))).unwrap();
    let after = ids(&sim);
    assert_eq!(after.len(), 4, "terminating plus a replacement: {after:?}");
    assert_eq!(after[0].1, NodeState::Terminating);
    c.advance(SignedDuration::from_secs(60));
    let second = ids(&sim)[0].0.clone();
    block_on(sim.terminate_node("web", &second, true, &OpKey::derive(&["test"]))).unwrap();
    c.advance(SignedDuration::from_secs(60));
    assert_eq!(
        block_on(sim.describe_pools(&["web".into()])).unwrap()[0].size,
        2
    );
    let err =
        block_on(sim.terminate_node("web", &first, true, &OpKey::derive(&["test"]))).unwrap_err();
    assert_eq!(
        err.kind,
        ErrorKind::NotFound,
        "a node is never terminated twice"
    );
}

/// A large fleet is persisted as a snapshot plus a log of changes (each
/// change costs one record, not a rewrite of every pool), and another
/// process opening it sees exactly what was done, deletions included.
#[test]
fn a_large_fleet_persists_changes_as_a_log_and_reopens_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let c = clock();
    let open = || {
        Sim::open(
            "sim",
            &settings(|_| {}),
            Some(dir.path()),
            c.clone() as Arc<dyn Clock>,
        )
        .unwrap()
    };
    let sim = open();
    let names: Vec<String> = (0..400).map(|i| format!("pool-{i:04}")).collect();
    for n in &names {
        block_on(sim.create_pool(&spec(n, 3), &OpKey::derive(&["test", n]))).unwrap();
    }
    block_on(sim.set_size("pool-0007", 5, &OpKey::derive(&["resize"]))).unwrap();
    block_on(sim.delete_pool("pool-0009", &OpKey::derive(&["delete"]))).unwrap();
    let log = dir.path().join("sim/sim.log.jsonl");
    let snapshot = dir.path().join("sim/sim.json");
    let (log_len, snap_len) = (
        std::fs::metadata(&log).map(|m| m.len()).unwrap_or(0),
        std::fs::metadata(&snapshot).unwrap().len(),
    );
    assert!(
        log_len > 0 && log_len <= snap_len,
        "log {log_len} bytes beside a snapshot of {snap_len}"
    );
    let before = block_on(sim.describe_pools(&names)).unwrap();
    drop(sim);
    let after = block_on(open().describe_pools(&names)).unwrap();
    assert_eq!(before, after);
    assert_eq!(after.len(), 399);
    assert_eq!(
        after.iter().find(|p| p.name == "pool-0007").unwrap().size,
        5
    );
}
