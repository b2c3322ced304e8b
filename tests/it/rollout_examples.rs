//! The documented examples (GKE/OKE/Yandex surge and unavailable semantics),
//! reproduced on the simulator under a virtual clock. Bounds are checked at every
//! simulated second; sequences come from the event log.

use crate::support::rollout_sim as sim;

use poolwright::model::NodeState;
use poolwright::rollout::Status;
use sim::{Scenario, assert_bounds, template};

fn all_updated(run: &sim::Run) -> bool {
    let target = template("img-2").hash();
    run.final_pool
        .live_nodes()
        .all(|n| n.template == target && n.state == NodeState::Healthy)
}

#[test]
fn surge_0_unavailable_2_terminates_before_creating() {
    let run = Scenario::new(5, 0, 2).run();
    assert_eq!(run.status, Status::Completed);
    assert_bounds(&run, 5, 0, 2);
    assert_eq!(run.max_total(), 5);
    assert_eq!(run.min_available(), 3, "two nodes out at once");
    // The first two steps take two old nodes down; nothing is created before a termination.
    let names = run.names();
    assert_eq!(
        &names[..3],
        ["rollout_started", "drain_started", "drain_started"]
    );
    assert!(
        run.first("terminate_requested").unwrap() < run.first("node_create_requested").unwrap()
    );
    assert!(all_updated(&run));
    assert_eq!(run.count("terminate_requested"), 5);
}

#[test]
fn surge_2_unavailable_0_creates_before_terminating() {
    let run = Scenario::new(5, 2, 0).run();
    assert_eq!(run.status, Status::Completed);
    assert_bounds(&run, 5, 2, 0);
    assert_eq!(run.max_total(), 7);
    assert_eq!(run.min_available(), 5, "capacity never drops");
    let names = run.names();
    assert_eq!(
        &names[..3],
        [
            "rollout_started",
            "node_create_requested",
            "node_create_requested"
        ]
    );
    assert!(run.first("node_create_requested").unwrap() < run.first("drain_started").unwrap());
    assert!(all_updated(&run));
}

#[test]
fn surge_2_unavailable_2_does_both_at_once() {
    let run = Scenario::new(5, 2, 2).run();
    assert_eq!(run.status, Status::Completed);
    assert_bounds(&run, 5, 2, 2);
    assert_eq!(run.max_total(), 7);
    assert_eq!(run.min_available(), 3);
    // Both kinds of step start in the first round.
    let first_round: Vec<&str> = run
        .events
        .iter()
        .take_while(|e| e.ts == run.events[0].ts)
        .map(|e| e.event.as_str())
        .collect();
    assert!(
        first_round.contains(&"node_create_requested") && first_round.contains(&"drain_started"),
        "{first_round:?}"
    );
    assert!(all_updated(&run));
}

#[test]
fn surge_2_unavailable_1_stays_within_4_to_7_nodes() {
    let run = Scenario::new(5, 2, 1).run();
    assert_eq!(run.status, Status::Completed);
    assert_bounds(&run, 5, 2, 1);
    assert!(
        run.min_total() >= 4 && run.max_total() <= 7,
        "{}..{}",
        run.min_total(),
        run.max_total()
    );
    assert_eq!(run.min_available(), 4);
    assert!(all_updated(&run));
}

#[test]
fn defaults_surge_1_unavailable_0() {
    let run = Scenario::new(5, 1, 0).run();
    assert_eq!(run.status, Status::Completed);
    assert_bounds(&run, 5, 1, 0);
    assert_eq!(run.max_total(), 6);
    assert_eq!(run.min_available(), 5);
    assert!(all_updated(&run));
    // One at a time: a create, then (once healthy) a drain, then a terminate, five times.
    assert_eq!(run.count("node_create_requested"), 5);
    assert_eq!(run.count("node_healthy"), 5);
}

#[test]
fn pipelining_reuses_a_freed_slot_at_once() {
    // With varied boot times, a slot freed by a fast node is refilled before the
    // slowest node of its "batch" is healthy.
    let mut sc = Scenario::new(6, 2, 0);
    sc.sim.boot_time = poolwright::spec::types::Distribution::Uniform {
        min: poolwright::spec::values::Duration::secs(10),
        max: poolwright::spec::values::Duration::secs(120),
    };
    sc.sim.seed = 3;
    let run = sc.run();
    assert_eq!(run.status, Status::Completed);
    assert_bounds(&run, 6, 2, 0);
    let creates: Vec<_> = run
        .events
        .iter()
        .filter(|e| e.event == "node_create_requested")
        .collect();
    let healthy: Vec<_> = run
        .events
        .iter()
        .filter(|e| e.event == "node_healthy")
        .collect();
    // The third create comes before the second of the first two nodes is healthy.
    assert!(
        creates[2].ts < healthy[1].ts,
        "third create {} vs second healthy {}",
        creates[2].ts,
        healthy[1].ts
    );
}
