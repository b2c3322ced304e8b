//! How the executor behaves when things go wrong or are held back: failed nodes,
//! rollback, drain timeouts, refused surge, canary, checkpoints, maintenance
//! windows, a new desired state mid-rollout, and scale-down.

use crate::support::rollout_sim as sim;

use poolwright::model::NodeState;
use poolwright::rollout::Status;
use poolwright::spec::At;
use poolwright::spec::types::{Disruption, DisruptionPolicy, OnDrainTimeout, OnFailure, Window};
use poolwright::spec::values::{Duration, TimeOfDay, Weekday};
use sim::{Scenario, assert_bounds, assert_bounds_ratchet, template};

#[test]
fn a_new_node_that_never_becomes_healthy_degrades_the_pool_and_stops_take_downs() {
    let mut sc = Scenario::new(5, 1, 1);
    sc.sim.failures.bad_images = vec!["img-2".into()];
    sc.max_seconds = 1800;
    let run = sc.run();
    assert!(
        matches!(&run.status, Status::Degraded { reason } if reason.contains("did not become healthy within 10m")),
        "{:?}",
        run.status
    );
    assert_bounds(&run, 5, 1, 1);
    let degraded = run.first("degraded").expect("a degraded event");
    let failed = run.first("node_failed").unwrap();
    assert!(failed < degraded);
    assert!(
        run.events[degraded..]
            .iter()
            .all(|e| e.event != "drain_started"),
        "no old node is taken down after the failure"
    );
    // The one old node already taken down before the failure is all that is missing.
    assert!(
        run.final_pool
            .live_nodes()
            .filter(|n| n.template == template("img-1").hash())
            .count()
            >= 4
    );
}

#[test]
fn on_failure_rollback_returns_the_pool_to_the_previous_template() {
    let mut sc = Scenario::new(4, 1, 1);
    sc.sim.failures.bad_images = vec!["img-2".into()];
    sc.settings.on_failure = OnFailure::Rollback;
    let run = sc.run();
    assert!(
        matches!(run.status, Status::RolledBack { .. }),
        "{:?}",
        run.status
    );
    assert_eq!(run.count("rollback_started"), 1);
    assert_bounds(&run, 4, 1, 1);
    let old = template("img-1").hash();
    assert_eq!(run.final_pool.template.hash(), old);
    assert!(
        run.final_pool
            .live_nodes()
            .all(|n| n.template == old && n.state == NodeState::Healthy)
    );
    assert_eq!(run.final_pool.live_nodes().count(), 4);
}

#[test]
fn a_rollback_returns_an_old_node_being_drained_to_service() {
    // The new node fails (2 min) while an old one is still draining (30 min).
    let mut sc = Scenario::new(4, 1, 1);
    sc.sim.failures.bad_images = vec!["img-2".into()];
    sc.sim.drain_time = poolwright::spec::types::Distribution::Fixed(Duration::secs(1800));
    sc.settings.on_failure = OnFailure::Rollback;
    sc.settings.startup_timeout = Duration::secs(120);
    let run = sc.run();
    assert!(
        matches!(run.status, Status::RolledBack { .. }),
        "{:?}",
        run.status
    );
    assert_eq!(run.count("node_uncordoned"), 1, "{:?}", run.names());
    let back = run.first("rollback_started").unwrap();
    let uncordoned = run.first("node_uncordoned").unwrap();
    assert!(back < uncordoned);
    let node = run.events[uncordoned].node.clone().unwrap();
    assert!(
        !run.events
            .iter()
            .any(|e| e.event == "terminate_requested" && e.node.as_ref() == Some(&node)),
        "the uncordoned node {node} was terminated anyway"
    );
    assert!(
        run.final_pool
            .live_nodes()
            .any(|n| *n.id == *node && n.state == NodeState::Healthy && !n.cordoned),
        "{node} is not back in service: {:?}",
        run.final_pool.nodes
    );
    assert_bounds(&run, 4, 1, 1);
    // Well before the 30-minute drain would have ended.
    assert!(run.seconds < 1800, "took {}s", run.seconds);
}

#[test]
fn the_circuit_breaker_stops_after_k_failed_nodes() {
    let mut sc = Scenario::new(6, 3, 0);
    sc.sim.failures.bad_images = vec!["img-2".into()];
    sc.settings.max_failed_nodes = 2;
    sc.max_seconds = 1800;
    let run = sc.run();
    assert!(
        matches!(&run.status, Status::Degraded { reason } if reason.contains("circuit breaker")),
        "{:?}",
        run.status
    );
    assert!(run.count("node_failed") >= 2);
}

fn blocked_drains(on_timeout: OnDrainTimeout) -> sim::Run {
    let mut sc = Scenario::new(3, 1, 0);
    sc.sim.failures.drain_blocked = 1.0;
    sc.settings.drain_timeout = Duration::secs(60);
    sc.settings.on_drain_timeout = on_timeout;
    sc.max_seconds = 1800;
    sc.run()
}

#[test]
fn drain_timeout_fail_leaves_the_node_cordoned_and_degrades() {
    let run = blocked_drains(OnDrainTimeout::Fail);
    assert!(
        matches!(&run.status, Status::Degraded { reason } if reason.contains("PodDisruptionBudget")),
        "{:?}",
        run.status
    );
    assert_eq!(
        run.count("drain_blocked"),
        1,
        "the blocking PDB is reported once"
    );
    assert!(run.events.iter().any(|e| {
        e.event == "drain_blocked"
            && e.message
                .contains("PodDisruptionBudget app allows 0 disruptions")
    }));
    assert_eq!(run.count("terminate_requested"), 0);
    assert_eq!(
        run.final_pool.live_nodes().filter(|n| n.cordoned).count(),
        1
    );
}

#[test]
fn drain_timeout_force_deletes_what_is_left_and_carries_on() {
    let run = blocked_drains(OnDrainTimeout::Force);
    assert_eq!(run.status, Status::Completed);
    assert_eq!(run.count("drain_forced"), 3);
    assert_bounds(&run, 3, 1, 0);
}

#[test]
fn drain_timeout_quarantine_keeps_the_node_cordoned_in_a_surge_slot() {
    let mut sc = Scenario::new(3, 2, 0);
    sc.sim.failures.drain_blocked = 1.0;
    sc.settings.drain_timeout = Duration::secs(60);
    sc.settings.on_drain_timeout = OnDrainTimeout::Quarantine;
    sc.max_seconds = 1800;
    let run = sc.run();
    assert_bounds(&run, 3, 2, 0);
    assert_eq!(run.count("node_quarantined"), 2);
    let quarantined: Vec<_> = run.final_pool.live_nodes().filter(|n| n.cordoned).collect();
    assert_eq!(quarantined.len(), 2);
    assert!(
        quarantined
            .iter()
            .all(|n| n.template == template("img-1").hash())
    );
    let updated = run
        .final_pool
        .live_nodes()
        .filter(|n| n.template == template("img-2").hash())
        .count();
    assert_eq!(
        updated, 2,
        "each quarantined node has a new node in its place"
    );
    // Both surge slots are held: the rollout says so instead of waiting forever.
    assert!(
        matches!(&run.status, Status::Degraded { reason } if reason.contains("2 quarantined node(s) hold the surge capacity")),
        "{:?}",
        run.status
    );
}

/// `drain.maxBlockedNodes`: quarantine stops at the limit, and the pool
/// turns Degraded and says so, with surge to spare.
#[test]
fn past_max_blocked_nodes_the_pool_turns_degraded_instead_of_quarantining_more() {
    let mut sc = Scenario::new(5, 3, 0);
    sc.sim.failures.drain_blocked = 1.0;
    sc.settings.drain_timeout = Duration::secs(60);
    sc.settings.on_drain_timeout = OnDrainTimeout::Quarantine;
    sc.settings.max_blocked_nodes = Some(1);
    sc.max_seconds = 1800;
    let run = sc.run();
    assert_bounds(&run, 5, 3, 0);
    assert_eq!(run.count("node_quarantined"), 1);
    assert!(
        matches!(&run.status, Status::Degraded { reason }
            if reason.contains("1 node(s) are already quarantined (drain.maxBlockedNodes 1)")),
        "{:?}",
        run.status
    );
    // The node past the limit stays cordoned, out of service, not quarantined.
    let cordoned = run.final_pool.live_nodes().filter(|n| n.cordoned).count();
    assert!(cordoned >= 2, "{cordoned} cordoned");
}

#[test]
fn refused_surge_falls_back_to_terminate_before_create_when_unavailable_allows() {
    let mut sc = Scenario::new(5, 2, 1);
    sc.sim.quota = Some(5);
    let run = sc.run();
    assert_eq!(run.status, Status::Completed);
    assert!(run.count("surge_refused") >= 1);
    assert_bounds(&run, 5, 0, 1);
}

#[test]
fn refused_surge_with_no_unavailable_stalls_without_breaking_bounds() {
    let mut sc = Scenario::new(5, 2, 0);
    sc.sim.quota = Some(5);
    sc.max_seconds = 900;
    let run = sc.run();
    assert_eq!(run.status, Status::Running, "stalled, not failed");
    assert!(run.count("surge_refused") >= 2, "retried with backoff");
    assert_eq!(run.count("drain_started"), 0);
    assert_bounds(&run, 5, 0, 0);
}

#[test]
fn canary_goes_first_alone() {
    let mut sc = Scenario::new(5, 2, 0);
    sc.settings.canary = true;
    let run = sc.run();
    assert_eq!(run.status, Status::Completed);
    let second_create = run
        .events
        .iter()
        .filter(|e| e.event == "node_create_requested")
        .nth(1)
        .unwrap()
        .ts;
    let canary = run
        .events
        .iter()
        .find(|e| e.event == "canary_healthy")
        .expect("canary event")
        .ts;
    assert!(
        canary <= second_create,
        "nothing else starts before the canary is healthy for minReady"
    );
}

#[test]
fn checkpoints_bake_before_continuing() {
    let mut sc = Scenario::new(4, 1, 0);
    sc.settings.checkpoints = vec![(50, Duration::secs(300))];
    let run = sc.run();
    assert_eq!(run.status, Status::Completed);
    let cp = run
        .events
        .iter()
        .find(|e| e.event == "checkpoint")
        .expect("checkpoint")
        .ts;
    let resumed = cp
        .saturating_add(jiff::SignedDuration::from_secs(300))
        .unwrap();
    let started_during_bake = run
        .events
        .iter()
        .filter(|e| matches!(e.event.as_str(), "node_create_requested" | "drain_started"))
        .filter(|e| e.ts > cp && e.ts < resumed)
        .count();
    assert_eq!(started_during_bake, 0);
}

/// Issue 14 1b, as measured on `examples/` (web: 6 nodes, surge 2, canary, a
/// 50% checkpoint baking 30s): the checkpoint was reached in the same step
/// that started draining the next old node, which was then drained and
/// terminated during the bake. A gate holds from the moment it is reached.
#[test]
fn a_checkpoint_holds_from_the_moment_it_is_reached() {
    let mut sc = Scenario::new(6, 2, 0);
    sc.settings.canary = true;
    sc.settings.checkpoints = vec![(50, Duration::secs(30))];
    let run = sc.run();
    assert_eq!(run.status, Status::Completed);
    let cp = run
        .events
        .iter()
        .find(|e| e.event == "checkpoint")
        .expect("checkpoint")
        .ts;
    let resumed = cp
        .saturating_add(jiff::SignedDuration::from_secs(30))
        .unwrap();
    let started: Vec<String> = run
        .events
        .iter()
        .filter(|e| matches!(e.event.as_str(), "node_create_requested" | "drain_started"))
        .filter(|e| e.ts >= cp && e.ts < resumed)
        .map(|e| format!("{} {} {:?}", e.ts, e.event, e.node))
        .collect();
    assert!(
        started.is_empty(),
        "steps started while baking at the checkpoint: {started:?}"
    );
}

/// Issue 14 1a, as measured: a pool of 10 with surge 0 and unavailable 2,
/// rolled 9 s after it was created while most of its nodes still booted
/// (uniform 1 to 30 s). The rollout started at "floor 4" and ran the whole
/// way at 4 available nodes. Availability must never drop below
/// min(size - unavailable, the highest availability seen so far).
#[test]
fn the_availability_floor_ratchets_up_as_a_degraded_pool_recovers() {
    let mut sc = Scenario::new(10, 0, 2);
    sc.settle_seconds = 9;
    sc.sim.boot_time = poolwright::spec::types::Distribution::Uniform {
        min: Duration::secs(1),
        max: Duration::secs(30),
    };
    sc.sim.health_delay = poolwright::spec::types::Distribution::Fixed(Duration::ZERO);
    sc.settings.min_ready = Duration::ZERO;
    let run = sc.run();
    assert_eq!(run.status, Status::Completed);
    assert_bounds_ratchet(&run, 10, 2);
    // It started degraded (nodes still booting) and recovered: the ratchet
    // had something to do.
    assert!(run.samples[0].available < 8, "{:?}", run.samples[0]);
    assert!(run.samples.iter().any(|s| s.available >= 8));
}

fn window_at(hour: &str, hours: u64) -> Disruption {
    Disruption {
        policy: Some(At::bare(DisruptionPolicy::AllowDuringMaintenanceWindow)),
        policy_ref: None,
        applies_to: None,
        until: None,
        windows: vec![At::bare(Window {
            days: At::bare(Weekday::ALL.to_vec()),
            start: Some(At::bare(TimeOfDay::parse(hour).unwrap())),
            cron: None,
            duration: At::bare(Duration::secs(hours * 3600)),
            timezone: At::bare("UTC".into()),
        })],
    }
}

#[test]
fn disruptive_steps_start_only_inside_the_window() {
    // Starts at 12:00 UTC; the window is 13:00-13:02, too short to finish in one go.
    let mut sc = Scenario::new(4, 0, 1);
    sc.disruption = Disruption {
        windows: vec![At::bare(Window {
            duration: At::bare(Duration::secs(120)),
            ..window_at("13:00", 1).windows[0].value.clone()
        })],
        ..window_at("13:00", 1)
    };
    sc.max_seconds = 36 * 3600;
    let run = sc.run();
    assert_eq!(run.status, Status::Completed);
    assert!(run.count("blocked_by_policy") >= 1);
    assert!(
        run.count("resumed_in_window") >= 2,
        "the rollout spans several windows"
    );
    for e in run.events.iter().filter(|e| e.event == "drain_started") {
        let t = e.ts.to_zoned(jiff::tz::TimeZone::UTC);
        assert!(
            t.hour() == 13 && t.minute() < 2,
            "drain started outside the window at {}",
            e.ts
        );
    }
    assert_bounds(&run, 4, 0, 1);
}

#[test]
fn a_new_desired_state_mid_rollout_supersedes_it_safely() {
    let mut sc = Scenario::new(6, 2, 1);
    sc.supersede_at = Some((70, template("img-3")));
    let run = sc.run();
    assert_eq!(run.status, Status::Completed);
    assert_bounds(&run, 6, 2, 1);
    let newest = template("img-3").hash();
    assert!(
        run.final_pool
            .live_nodes()
            .all(|n| n.template == newest && n.state == NodeState::Healthy)
    );
    assert_eq!(run.final_pool.live_nodes().count(), 6);
    assert_eq!(run.count("rollout_started"), 2);
}

#[test]
fn scale_down_drains_before_terminating_within_the_budget() {
    let mut sc = Scenario::new(5, 0, 1);
    sc.settings.size = 3;
    sc.settings.budget.unavailable = 1;
    // Same template: only the size changes.
    let run = {
        let mut sc = sc;
        sc.supersede_at = None;
        sc
    };
    let run = sim_same_template(run);
    assert_eq!(run.status, Status::Completed);
    assert_eq!(run.final_pool.live_nodes().count(), 3);
    assert_eq!(run.count("drain_started"), 2);
    assert!(run.first("drain_started").unwrap() < run.first("terminate_requested").unwrap());
}

/// A scenario whose target is the current template (a pure size change).
fn sim_same_template(sc: Scenario) -> sim::Run {
    let mut sc = sc;
    sc.supersede_at = Some((0, template("img-1")));
    sc.run()
}

#[test]
fn a_quota_that_fits_part_of_the_surge_is_used_rather_than_stalling() {
    // Found by the property test: surge 2 asked all-or-nothing, the quota fit 1.
    let mut sc = Scenario::new(2, 2, 0);
    sc.sim.quota = Some(3);
    sc.sim.boot_time = poolwright::spec::types::Distribution::Fixed(Duration::secs(5));
    sc.sim.drain_time = poolwright::spec::types::Distribution::Fixed(Duration::ZERO);
    let run = sc.run();
    assert_eq!(run.status, Status::Completed);
    assert_bounds(&run, 2, 1, 0);
}

#[test]
fn old_nodes_that_are_healthy_count_as_available_however_recently() {
    // Found running `apply` for real: old nodes healthy for less than minReady
    // were counted unavailable, the floor came out 0, and old nodes were drained
    // with nothing in their place. minReady gates new nodes only.
    let mut sc = Scenario::new(5, 2, 0);
    sc.settings.min_ready = Duration::secs(300);
    sc.settle_seconds = 45; // healthy at 40s: 5s ago
    let run = sc.run();
    assert_eq!(run.floor, 5);
    assert_eq!(run.status, Status::Completed);
    assert_bounds(&run, 5, 2, 0);
    assert!(run.first("node_create_requested").unwrap() < run.first("drain_started").unwrap());
}

#[test]
fn reimage_mode_replaces_nodes_in_place_without_new_machines() {
    let mut sc = Scenario::new(4, 0, 1);
    sc.settings.reimage = true;
    let before: Vec<String> = {
        // Node ids are the machines: the same ids must remain.
        (0..4).map(|i| format!("web-{i:05}")).collect()
    };
    let run = sc.run();
    assert_eq!(run.status, Status::Completed);
    assert_bounds(&run, 4, 0, 1);
    assert_eq!(run.count("reimage_requested"), 4);
    assert_eq!(run.count("node_create_requested"), 0);
    assert_eq!(run.count("terminate_requested"), 0);
    let mut after: Vec<String> = run
        .final_pool
        .live_nodes()
        .map(|n| n.id.to_string())
        .collect();
    after.sort();
    assert_eq!(after, before);
    let target = template("img-2").hash();
    assert!(
        run.final_pool
            .live_nodes()
            .all(|n| n.template == target && n.state == NodeState::Healthy && !n.cordoned)
    );
}

/// `lifecycle.maxNodeAge` on a virtual clock: nothing is due until the
/// oldest nodes pass the limit; then the plan names them and rolls them (as
/// a repair) on the same template, and the next plan is clean.
#[test]
fn nodes_past_max_node_age_are_replaced_through_the_executor() {
    use crate::support::world::{PROVIDER, World, pool};
    use jiff::SignedDuration;
    use poolwright::clock::Clock;
    use poolwright::plan::Step;

    let w = World::new();
    w.write("providers.yaml", PROVIDER);
    w.write(
        "web.yaml",
        &pool(
            "web",
            3,
            "img-1",
            "  lifecycle: {maxNodeAge: 30d}\n  rollout: {maxSurge: 1, maxUnavailable: 0}\n",
        ),
    );
    let done = w.apply();
    assert!(done.errors.is_empty(), "{:?}", done.errors);
    let born = w.clock.now();
    let ids = |w: &World| -> Vec<String> {
        let config = w.config();
        let obs = w.observed(&config);
        let mut ids: Vec<String> = obs.pools["web"]
            .live_nodes()
            .map(|n| n.id.to_string())
            .collect();
        ids.sort();
        ids
    };
    let first = ids(&w);
    // 29 days later: nothing due; the plan says when the first one is.
    w.clock.advance(SignedDuration::from_hours(29 * 24));
    let plan = w.plan();
    let text = w.text(&plan);
    assert!(plan.pools[0].rollout.is_none(), "{text}");
    // A minute short of 30 days: within the window, all three are due.
    w.clock
        .set(born + SignedDuration::from_hours(30 * 24) - SignedDuration::from_mins(1));
    let plan = w.plan();
    let text = w.text(&plan);
    let r = plan.pools[0]
        .rollout
        .as_ref()
        .unwrap_or_else(|| panic!("{text}"));
    assert_eq!(r.outdated, 3, "{text}");
    assert_eq!(
        r.classes,
        vec![poolwright::spec::types::ChangeClass::Repair]
    );
    assert!(
        text.contains("3 of 3 nodes are past lifecycle.maxNodeAge (30d)"),
        "{text}"
    );
    assert!(
        text.contains("3 node(s) due, replaced as a repair"),
        "{text}"
    );
    assert!(
        plan.pools[0]
            .steps
            .iter()
            .any(|s| matches!(s, Step::Roll { settings, .. } if settings.retire_before.is_some())),
        "{text}"
    );
    let done = w.apply();
    assert!(done.errors.is_empty(), "{:?}", done.errors);
    let now = ids(&w);
    assert_eq!(now.len(), 3);
    assert!(
        now.iter().all(|id| !first.contains(id)),
        "every node replaced: {first:?} -> {now:?}"
    );
    let plan = w.plan();
    assert!(plan.pools[0].rollout.is_none(), "{}", w.text(&plan));
}

/// do-not-disrupt on a node (a provider tag): the roll does everything else,
/// keeps no surge for the held node, keeps it in service, and completes with
/// the hold named; lifted, the next rollout replaces it.
#[test]
fn a_held_node_is_left_in_service_and_the_roll_completes_with_holds() {
    let mut sc = Scenario::new(4, 1, 0);
    sc.hold = vec!["web-00001".into()];
    let run = sc.run();
    assert_eq!(run.status, Status::Completed);
    assert_bounds(&run, 4, 1, 0);
    let held: Vec<_> = run
        .events
        .iter()
        .filter(|e| e.event == "node_held")
        .collect();
    assert_eq!(held.len(), 1, "{:?}", run.names());
    assert_eq!(held[0].node.as_deref(), Some("web-00001"));
    assert!(held[0].message.contains("poolwright.io/do-not-disrupt"));
    let done = run.events.iter().find(|e| e.event == "completed").unwrap();
    assert!(
        done.message
            .contains("except 1 held by do-not-disrupt: web-00001"),
        "{}",
        done.message
    );
    // Never touched, still serving; three new nodes beside it, no more.
    assert!(
        run.events
            .iter()
            .all(|e| e.node.as_deref() != Some("web-00001") || e.event == "node_held"),
        "{:?}",
        run.events
    );
    let live: Vec<_> = run.final_pool.live_nodes().collect();
    assert_eq!(live.len(), 4, "no surge kept for the held node");
    let old = template("img-1").hash();
    let kept: Vec<_> = live.iter().filter(|n| n.template == old).collect();
    assert_eq!(kept.len(), 1);
    assert_eq!(&*kept[0].id, "web-00001");
    assert!(kept[0].state == NodeState::Healthy && !kept[0].cordoned);
}

/// The plan names a held node and leaves it out; once the label is removed,
/// the next plan rolls it and apply replaces it.
#[test]
fn a_lifted_hold_is_rolled_on_the_next_look() {
    use crate::support::world::{PROVIDER, World, pool};
    use poolwright::provider::sim::Sim;
    use poolwright::spec::types::SimProvider;
    let w = World::new();
    w.write("providers.yaml", PROVIDER);
    w.write("web.yaml", &pool("web", 3, "img-1", ""));
    assert!(w.apply().errors.is_empty());
    let label = |value: Option<&str>| {
        let settings = SimProvider {
            seed: 7,
            ..SimProvider::default()
        };
        let sim = Sim::open("sim", &settings, Some(w.state.path()), w.clock.clone()).unwrap();
        sim.set_label("web", "web-00000", "karpenter.sh/do-not-disrupt", value)
            .unwrap();
    };
    label(Some("true"));
    w.write("web.yaml", &pool("web", 3, "img-2", ""));
    let plan = w.plan();
    let text = w.text(&plan);
    assert!(
        text.contains("do-not-disrupt holds 1 outdated node(s), left out of the roll and kept in service: web-00000 (the node carries karpenter.sh/do-not-disrupt: \"true\")"),
        "{text}"
    );
    assert_eq!(
        plan.pools[0].rollout.as_ref().map(|r| r.outdated),
        Some(2),
        "{text}"
    );
    let done = w.apply();
    assert!(done.errors.is_empty(), "{:?}", done.errors);
    let ids = |w: &World| -> Vec<String> {
        let config = w.config();
        let obs = w.observed(&config);
        obs.pools["web"]
            .live_nodes()
            .map(|n| n.id.to_string())
            .collect()
    };
    assert!(ids(&w).contains(&"web-00000".to_string()));
    // Lifted: the next look rolls it.
    label(None);
    let plan = w.plan();
    assert_eq!(
        plan.pools[0].rollout.as_ref().map(|r| r.outdated),
        Some(1),
        "{}",
        w.text(&plan)
    );
    assert!(w.apply().errors.is_empty());
    assert!(!ids(&w).contains(&"web-00000".to_string()));
    assert_eq!(ids(&w).len(), 3);
}

/// What `size + maxSurge` counts: nodes not terminating, by default (a
/// terminating node takes no work, as in a Deployment), so a pool of 20 with
/// surge 2 can list 23 while one is still going; with `countTerminating`
/// (a cloud quota's count) a new node waits until an old one is gone.
#[test]
fn count_terminating_bounds_every_listed_node_by_size_plus_surge() {
    let slow_goodbye = |count: bool| {
        let mut sc = Scenario::new(20, 2, 0);
        sc.sim.terminate_time = poolwright::spec::types::Distribution::Fixed(Duration::secs(60));
        sc.settings.count_terminating = count;
        sc.max_seconds = 6 * 3600;
        let run = sc.run();
        assert_eq!(run.status, Status::Completed, "{:?}", run.names());
        assert_bounds(&run, 20, 2, 0);
        run
    };
    let default = slow_goodbye(false);
    assert!(
        default.max_listed() > 22,
        "terminating nodes are not counted by default: at most {} listed",
        default.max_listed()
    );
    let counted = slow_goodbye(true);
    assert_eq!(
        counted.max_listed(),
        22,
        "with countTerminating, every listed node counts"
    );
    assert!(
        counted.seconds > default.seconds,
        "waiting for the old to go costs time: {}s vs {}s",
        counted.seconds,
        default.seconds
    );
}
