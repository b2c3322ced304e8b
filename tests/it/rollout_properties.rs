//! Property: for random sizes, budgets, boot and drain latencies, failures and
//! quotas, the bounds hold at every sampled instant; without failures every
//! rollout completes with every node updated.

use crate::support::rollout_sim as sim;

use poolwright::model::NodeState;
use poolwright::rollout::Status;
use poolwright::spec::types::Distribution;
use poolwright::spec::values::Duration;
use proptest::prelude::*;
use sim::{Scenario, template};

#[derive(Debug, Clone)]
struct Case {
    size: u32,
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

fn case() -> impl Strategy<Value = Case> {
    (
        1u32..10,
        0u32..4,
        0u32..4,
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
                size,
                surge,
                unavailable,
                boot_median,
                boot_sigma,
                drain,
                never_healthy,
                quota_extra,
                canary,
                seed,
            )| Case {
                size,
                surge,
                // Both 0 resolves to unavailable 1 (DESIGN.md).
                unavailable: if surge == 0 && unavailable == 0 {
                    1
                } else {
                    unavailable
                },
                boot_median,
                boot_sigma,
                drain,
                never_healthy,
                quota_extra,
                canary,
                seed,
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn bounds_hold_and_failure_free_rollouts_complete(c in case()) {
        let mut sc = Scenario::new(c.size, c.surge, c.unavailable);
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

        for s in &run.samples {
            prop_assert!(s.total <= c.size + c.surge, "t={}: {} nodes > {} + {}", s.t, s.total, c.size, c.surge);
            prop_assert!(s.available >= run.floor, "t={}: {} available < floor {}", s.t, s.available, run.floor);
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
