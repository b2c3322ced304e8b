//! Property: for random sizes, budgets, boot and drain latencies, failures and
//! quotas, the bounds hold at every sampled instant; without failures every
//! rollout completes with every node updated.

use crate::support::rollout_sim as sim;

use poolwright::model::NodeState;
use poolwright::rollout::{Budget, Status};
use poolwright::spec::located::At;
use poolwright::spec::types::{Distribution, Rollout, Semantics};
use poolwright::spec::values::{Duration, IntOrPercent};
use proptest::prelude::*;
use sim::{Scenario, template};

#[derive(Debug, Clone)]
struct Case {
    size: u32,
    /// Whose rounding and defaults resolved `surge` and `unavailable`.
    semantics: Semantics,
    surge: u32,
    unavailable: u32,
    boot_median: u64,
    boot_sigma: f64,
    drain: u64,
    never_healthy: f64,
    quota_extra: Option<u32>,
    canary: bool,
    seed: u64,
}

/// A budget as a user writes it: a count, a percentage or nothing (the
/// semantics' default). GKE and Yandex take whole numbers only.
fn written() -> impl Strategy<Value = Option<IntOrPercent>> {
    prop_oneof![
        1 => Just(None),
        3 => (0i64..4).prop_map(|n| Some(IntOrPercent::Int(n))),
        2 => (0i64..=100).prop_map(|p| Some(IntOrPercent::Percent(p))),
    ]
}

fn semantics() -> impl Strategy<Value = Semantics> {
    prop_oneof![
        Just(Semantics::Kubernetes),
        Just(Semantics::Oke),
        Just(Semantics::Aks),
        Just(Semantics::Gke),
        Just(Semantics::Yandex),
    ]
}

fn case() -> impl Strategy<Value = Case> {
    (
        (1u32..10, semantics(), written(), written()),
        5u64..90,
        0.0f64..0.8,
        0u64..60,
        prop_oneof![3 => Just(0.0), 1 => 0.05f64..0.3],
        proptest::option::of(0u32..3),
        proptest::bool::weighted(0.3),
        any::<u64>(),
    )
        .prop_map(
            |(
                (size, semantics, surge, unavailable),
                boot_median,
                boot_sigma,
                drain,
                never_healthy,
                quota_extra,
                canary,
                seed,
            )| {
                let whole = |v: Option<IntOrPercent>| match (semantics, v) {
                    (Semantics::Gke | Semantics::Yandex, Some(IntOrPercent::Percent(p))) => {
                        Some(IntOrPercent::Int(p % 4))
                    }
                    _ => v,
                };
                // Resolved by the product's own rules for the semantics (both
                // 0 comes to unavailable 1; the README's rollout section).
                let budget = Budget::resolve(
                    &Rollout {
                        semantics: Some(At::bare(semantics)),
                        max_surge: whole(surge).map(At::bare),
                        max_unavailable: whole(unavailable).map(At::bare),
                        ..Rollout::default()
                    },
                    size,
                );
                Case {
                    size,
                    semantics,
                    surge: budget.surge,
                    unavailable: budget.unavailable,
                    boot_median,
                    boot_sigma,
                    drain,
                    never_healthy,
                    quota_extra,
                    canary,
                    seed,
                }
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn bounds_hold_and_failure_free_rollouts_complete(c in case()) {
        prop_assert!(c.surge + c.unavailable >= 1, "{:?} resolved to a budget that cannot move", c.semantics);
        let mut sc = Scenario::new(c.size, c.surge, c.unavailable);
        sc.settings.semantics = c.semantics;
        sc.sim.seed = c.seed;
        sc.sim.boot_time = Distribution::Lognormal { median: Duration::secs(c.boot_median), sigma: c.boot_sigma };
        sc.sim.drain_time = Distribution::Fixed(Duration::secs(c.drain));
        sc.sim.failures.never_healthy = c.never_healthy;
        sc.sim.quota = c.quota_extra.map(|extra| c.size + extra);
        sc.settings.canary = c.canary;
        // A boot from the far tail of the lognormal must not count as a
        // failed node here: startupTimeout failures have tests of their own.
        sc.settings.startup_timeout = Duration::secs(4 * 3600);
        sc.max_seconds = 6 * 3600;
        let run = sc.run();

        // The floor ratchets up: availability never drops below
        // min(size - unavailable, the most seen available before).
        let mut peak = 0;
        for s in &run.samples {
            prop_assert!(s.total <= c.size + c.surge, "t={}: {} nodes > {} + {}", s.t, s.total, c.size, c.surge);
            let floor = c.size.saturating_sub(c.unavailable).min(peak);
            prop_assert!(s.available >= floor, "t={}: {} available < floor {} (peak {})", s.t, s.available, floor, peak);
            peak = peak.max(s.available);
        }
        prop_assert!(run.floor <= c.size.saturating_sub(c.unavailable));

        let quota_blocks_surge = c.quota_extra.is_some_and(|extra| extra == 0) && c.unavailable == 0;
        if c.never_healthy == 0.0 && !quota_blocks_surge {
            prop_assert_eq!(&run.status, &Status::Completed, "after {}s: {:?}", run.seconds, run.names().iter().rev().take(5).collect::<Vec<_>>());
            let target = template("img-2").hash();
            prop_assert_eq!(run.final_pool.live_nodes().count() as u32, c.size);
            prop_assert!(run.final_pool.live_nodes().all(|n| n.template == target && n.state == NodeState::Healthy));
        }
        // Never more terminations than nodes taken down or failed, and never the same node twice.
        let mut terminated: Vec<&str> = run.events.iter().filter(|e| e.event == "terminate_requested").filter_map(|e| e.node.as_deref()).collect();
        let n = terminated.len();
        terminated.sort_unstable();
        terminated.dedup();
        prop_assert_eq!(terminated.len(), n, "a node was terminated twice");
    }
}

/// `rollout.order`: every order takes the same nodes, within the same
/// bounds, and only the sequence differs: oldest and newest by launch (then
/// id), a label's value ascending (numbers as numbers, unlabelled last),
/// one zone at a time with no drain of the next zone before the current
/// one's last node has drained.
mod orders {
    use super::*;
    use poolwright::spec::types::TakeDownOrder;

    const PRIO: [&str; 4] = ["3", "10", "web", "1"];

    /// (zone, label value) of the node of this simulator serial.
    fn placed(id: &str, zones: usize) -> (usize, Option<&'static str>) {
        let serial: usize = id.rsplit('-').next().unwrap().parse().unwrap();
        (serial % zones, Some(PRIO[serial % 4]))
    }

    fn label_key(v: Option<&str>) -> (u8, i64, String) {
        match v {
            None => (2, 0, String::new()),
            Some(v) => match v.parse::<i64>() {
                Ok(n) => (0, n, String::new()),
                Err(_) => (1, 0, v.to_string()),
            },
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

        #[test]
        fn every_order_takes_the_same_nodes_within_the_same_bounds(
            size in 1u32..12,
            surge in 0u32..3,
            unavailable in 0u32..3,
            zones in 1usize..4,
            seed in any::<u64>(),
        ) {
            let unavailable = if surge + unavailable == 0 { 1 } else { unavailable };
            let mut taken_by_order = Vec::new();
            for order in [
                TakeDownOrder::Oldest,
                TakeDownOrder::Newest,
                TakeDownOrder::Zone,
                TakeDownOrder::Label("prio".into()),
            ] {
                let mut sc = Scenario::new(size, surge, unavailable);
                sc.sim.seed = seed;
                sc.stagger = true;
                sc.sim.zones = ["a", "b", "c"][..zones].iter().map(|z| z.to_string()).collect();
                // Labels by serial: the values in turn (a node without the
                // label, which goes last, is the order's unit test).
                sc.sim.node_labels = [("prio".to_string(), PRIO.iter().map(|v| v.to_string()).collect())].into();
                sc.settings.order = order.clone();
                sc.settings.startup_timeout = Duration::secs(4 * 3600);
                sc.max_seconds = 6 * 3600;
                let run = sc.run();
                prop_assert_eq!(&run.status, &Status::Completed, "{:?}", order);
                let mut peak = 0;
                for s in &run.samples {
                    prop_assert!(s.total <= size + surge, "{:?} t={}: {} nodes", order, s.t, s.total);
                    let floor = size.saturating_sub(unavailable).min(peak);
                    prop_assert!(s.available >= floor, "{:?} t={}: {} < floor {}", order, s.t, s.available, floor);
                    peak = peak.max(s.available);
                }
                let drained: Vec<String> = run.events.iter()
                    .filter(|e| e.event == "drain_started")
                    .filter_map(|e| e.node.clone())
                    .collect();
                // The sequence each order promises (the old nodes were
                // launched one a second: launch order is id order).
                match &order {
                    TakeDownOrder::Oldest => {
                        let mut want = drained.clone();
                        want.sort();
                        prop_assert_eq!(&drained, &want);
                    }
                    TakeDownOrder::Newest => {
                        let mut want = drained.clone();
                        want.sort_by(|a, b| b.cmp(a));
                        prop_assert_eq!(&drained, &want);
                    }
                    TakeDownOrder::Label(_) => {
                        let mut want = drained.clone();
                        want.sort_by_key(|id| (label_key(placed(id, zones).1), id.clone()));
                        prop_assert_eq!(&drained, &want);
                    }
                    TakeDownOrder::Zone => {
                        // Each zone's drains form one block, and the next
                        // zone's first drain comes after the current zone's
                        // last node drained.
                        let mut seen = Vec::new();
                        for id in &drained {
                            let z = placed(id, zones).0;
                            if seen.last() != Some(&z) {
                                prop_assert!(!seen.contains(&z), "zone {} again after {:?}: {:?}", z, seen, drained);
                                seen.push(z);
                            }
                        }
                        let at = |event: &str, id: &str| run.events.iter().position(|e| e.event == event && e.node.as_deref() == Some(id));
                        for w in drained.windows(2) {
                            let (a, b) = (&w[0], &w[1]);
                            if placed(a, zones).0 != placed(b, zones).0 {
                                prop_assert!(at("node_drained", a) < at("drain_started", b), "{} drained after {} began", a, b);
                            }
                        }
                    }
                }
                let mut taken = drained;
                taken.sort();
                taken_by_order.push((order, taken));
            }
            // The same nodes, whatever the order.
            for (order, taken) in &taken_by_order[1..] {
                prop_assert_eq!(taken, &taken_by_order[0].1, "{:?}", order);
            }
        }
    }
}

mod way_out {
    //! Every state the executor can reach has a way out: a rollout driven
    //! into any state by failures (nodes that never become healthy, drains a
    //! PodDisruptionBudget never allows, a quota refusing surge, a human's
    //! pause), then given a healthy provider and drains that succeed,
    //! completes, with a human resuming it whenever it stops for one.

    use std::sync::Arc;

    use jiff::SignedDuration;
    use poolwright::clock::{Clock, ManualClock};
    use poolwright::model::{NodeTemplate, OpKey, PoolSpec};
    use poolwright::provider::sim::Sim;
    use poolwright::provider::{Provider, SimDrainer};
    use poolwright::reconcile::control;
    use poolwright::reconcile::{EventSink, Executor, Tick};
    use poolwright::rollout::Status;
    use poolwright::spec::types::{
        Distribution, OnDrainTimeout, OnFailure, SimFailures, SimProvider,
    };
    use poolwright::spec::values::Duration;
    use poolwright::store::Journal;
    use proptest::prelude::*;

    use crate::support::rollout_sim::settings;

    fn template(image: &str) -> NodeTemplate {
        NodeTemplate {
            image: Some(image.into()),
            ..NodeTemplate::default()
        }
    }

    #[derive(Debug, Clone)]
    struct Case {
        size: u32,
        surge: u32,
        unavailable: u32,
        never_healthy: f64,
        drain_blocked: f64,
        quota_extra: Option<u32>,
        on_timeout: OnDrainTimeout,
        on_failure: OnFailure,
        max_failed: u32,
        canary: bool,
        pause_at: Option<i64>,
        faulty_seconds: i64,
        seed: u64,
    }

    fn case() -> impl Strategy<Value = Case> {
        (
            (1u32..8, 0u32..3, 0u32..3),
            (0.0f64..0.6, 0.0f64..0.6, proptest::option::of(0u32..2)),
            (
                prop_oneof![
                    Just(OnDrainTimeout::Fail),
                    Just(OnDrainTimeout::Force),
                    Just(OnDrainTimeout::Quarantine)
                ],
                prop_oneof![Just(OnFailure::Pause), Just(OnFailure::Rollback)],
                1u32..4,
                proptest::bool::weighted(0.3),
            ),
            (proptest::option::of(0i64..3600), 0i64..7200, any::<u64>()),
        )
            .prop_map(
                |(
                    (size, surge, unavailable),
                    (never_healthy, drain_blocked, quota_extra),
                    (on_timeout, on_failure, max_failed, canary),
                    (pause_at, faulty_seconds, seed),
                )| Case {
                    size,
                    surge,
                    unavailable: if surge == 0 && unavailable == 0 {
                        1
                    } else {
                        unavailable
                    },
                    never_healthy,
                    drain_blocked,
                    quota_extra,
                    on_timeout,
                    on_failure,
                    max_failed,
                    canary,
                    pause_at,
                    faulty_seconds,
                    seed,
                },
            )
    }

    fn sim_settings(c: &Case, faulty: bool) -> SimProvider {
        SimProvider {
            seed: c.seed,
            boot_time: Distribution::Uniform {
                min: Duration::secs(10),
                max: Duration::secs(90),
            },
            health_delay: Distribution::Fixed(Duration::secs(5)),
            drain_time: Distribution::Fixed(Duration::secs(20)),
            terminate_time: Distribution::Fixed(Duration::secs(5)),
            quota: if faulty {
                c.quota_extra.map(|e| c.size + e)
            } else {
                None
            },
            failures: if faulty {
                SimFailures {
                    never_healthy: c.never_healthy,
                    drain_blocked: c.drain_blocked,
                    ..SimFailures::default()
                }
            } else {
                SimFailures::default()
            },
            ..SimProvider::default()
        }
    }

    /// (the status it ended with, human resumes, virtual seconds of phase 2)
    fn drive(c: &Case) -> (Status, u32, i64) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let clock = Arc::new(ManualClock::new("2026-12-02T12:00:00Z".parse().unwrap()));
        let state = tempfile::tempdir().unwrap();
        let journal = Journal::new(state.path().join("journal"));
        let events = EventSink::none();
        let mut set = settings(c.size, c.surge, c.unavailable);
        set.on_drain_timeout = c.on_timeout;
        set.on_failure = c.on_failure;
        set.max_failed_nodes = c.max_failed;
        set.canary = c.canary;
        set.drain_timeout = Duration::secs(300);
        set.startup_timeout = Duration::secs(600);
        let open = |faulty: bool| {
            Arc::new(
                Sim::open(
                    "sim",
                    &sim_settings(c, faulty),
                    Some(state.path()),
                    clock.clone() as Arc<dyn Clock>,
                )
                .unwrap(),
            )
        };
        // Phase 1: a faulty world, for a while (or until the rollout stops).
        let sim = open(true);
        let spec = PoolSpec {
            name: "web".into(),
            size: c.size,
            autoscaling: None,
            template: template("img-1"),
            in_place: Default::default(),
            placement: Default::default(),
        };
        rt.block_on(sim.create_pool(&spec, &OpKey::derive(&["create"])))
            .unwrap();
        clock.advance(SignedDuration::from_secs(300));
        {
            let provider: Arc<dyn Provider> = sim.clone();
            let mut ex = rt
                .block_on(Executor::start(
                    "web",
                    template("img-2"),
                    set.clone(),
                    provider,
                    Arc::new(SimDrainer::new(sim.clone())),
                    &journal,
                    &events,
                    clock.as_ref(),
                ))
                .unwrap();
            let mut t = 0;
            while t < c.faulty_seconds {
                if c.pause_at == Some(t) && ex.state.status == Status::Running {
                    let _ =
                        poolwright::rollout::control::pause(&mut ex.state, "a test", clock.now());
                }
                match rt.block_on(ex.tick()) {
                    Ok(Tick::Finished(_)) => break,
                    Ok(Tick::Continue { .. }) => {}
                    Err(e) => panic!("phase 1: {e}"),
                }
                clock.advance(SignedDuration::from_secs(1));
                t += 1;
            }
        }
        drop(sim);
        // Phase 2: healthy provider, drains that succeed; a human resumes
        // whenever the rollout stops for one; each resume is a new apply.
        let sim = open(false);
        let mut resumes = 0;
        let mut t = 0;
        'applies: loop {
            let provider: Arc<dyn Provider> = sim.clone();
            let mut ex = match rt.block_on(Executor::start(
                "web",
                template("img-2"),
                set.clone(),
                provider,
                Arc::new(SimDrainer::new(sim.clone())),
                &journal,
                &events,
                clock.as_ref(),
            )) {
                Ok(ex) => ex,
                // Rolled back from this very template: that rollout ended.
                Err(e @ poolwright::reconcile::ExecutorError::RolledBack { .. }) => {
                    return (
                        Status::RolledBack {
                            failed: template("img-2").hash(),
                            reason: e.to_string(),
                        },
                        resumes,
                        t,
                    );
                }
                Err(e) => panic!("phase 2 start: {e}"),
            };
            loop {
                if t > 12 * 3600 {
                    if std::env::var_os("WAY_OUT_DEBUG").is_some() {
                        eprintln!("{}", serde_json::to_string_pretty(&ex.state).unwrap());
                        let pool = rt
                            .block_on(sim.describe_pools(&["web".to_string()]))
                            .unwrap();
                        eprintln!("{pool:#?}");
                    }
                    return (ex.state.status.clone(), resumes, t);
                }
                match rt.block_on(ex.tick()) {
                    Ok(Tick::Finished(s)) => return (s, resumes, t),
                    Ok(Tick::Continue { .. }) => {}
                    Err(e) => panic!("phase 2: {e}"),
                }
                let stopped = matches!(
                    ex.state.status,
                    Status::Degraded { .. } | Status::Paused { .. }
                );
                if stopped && !ex.in_flight() {
                    resumes += 1;
                    rt.block_on(control::resume(&journal, "web", clock.now()))
                        .unwrap();
                    continue 'applies;
                }
                clock.advance(SignedDuration::from_secs(1));
                t += 1;
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        #[test]
        fn from_any_reachable_state_a_healed_rollout_completes(c in case()) {
            let (status, resumes, seconds) = drive(&c);
            prop_assert!(
                matches!(status, Status::Completed | Status::RolledBack { .. }),
                "stuck after {seconds}s of a healthy world and {resumes} resume(s): {status:?}"
            );
            prop_assert!(resumes <= 12, "{resumes} resumes: a human should not have to resume that often");
        }
    }
}
