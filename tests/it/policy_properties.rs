//! Property: across multi-day rollouts on the virtual clock, with random
//! maintenance windows (weekly and cron, several per pool, in zones with DST,
//! including half-hour DST shifts), no disruptive step starts outside a window,
//! every step in flight when a window closes completes, and the bounds hold.

use crate::support::rollout_sim as sim;

use std::collections::BTreeSet;

use poolwright::policy::gate;
use poolwright::spec::At;
use poolwright::spec::types::{Disruption, DisruptionPolicy, Window};
use poolwright::spec::values::{Duration, TimeOfDay, Weekday};
use proptest::prelude::*;
use sim::{Scenario, assert_bounds};

const ZONES: [&str; 5] = [
    "UTC",
    "Europe/Berlin",
    "America/New_York",
    "Asia/Kolkata",
    "Australia/Lord_Howe",
];
/// Starts around DST changes and ordinary weeks.
const STARTS: [&str; 5] = [
    "2026-03-27T18:00:00Z",
    "2026-10-23T18:00:00Z",
    "2026-11-06T00:00:00Z",
    "2026-04-03T09:00:00Z",
    "2026-12-02T12:00:00Z",
];

fn window() -> impl Strategy<Value = Window> {
    let weekly = (
        proptest::sample::subsequence(Weekday::ALL.to_vec(), 1..=7),
        0u8..24,
        prop_oneof![Just(0u8), Just(15), Just(30), Just(45)],
        5u64..360,
        0..ZONES.len(),
    )
        .prop_map(|(days, h, m, minutes, z)| Window {
            days: At::bare(days),
            start: Some(At::bare(
                TimeOfDay::parse(&format!("{h:02}:{m:02}")).unwrap(),
            )),
            cron: None,
            duration: At::bare(Duration::secs(minutes * 60)),
            timezone: At::bare(ZONES[z].to_string()),
        });
    let cron = (
        prop_oneof![
            Just("0 22 * * 1-5"),
            Just("30 2 * * 0,6"),
            Just("*/20 3-4 * * *"),
            Just("15 1 1-7 * *")
        ],
        10u64..240,
        0..ZONES.len(),
    )
        .prop_map(|(expr, minutes, z)| Window {
            days: At::bare(Weekday::ALL.to_vec()),
            start: None,
            cron: Some(At::bare(expr.to_string())),
            duration: At::bare(Duration::secs(minutes * 60)),
            timezone: At::bare(ZONES[z].to_string()),
        });
    prop_oneof![3 => weekly, 1 => cron]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    #[test]
    fn disruptive_steps_start_only_inside_windows_and_steps_in_flight_finish(
        windows in proptest::collection::vec(window(), 1..4),
        size in 1u32..7,
        surge in 0u32..3,
        unavailable in 0u32..3,
        start in 0..STARTS.len(),
    ) {
        let (surge, unavailable) = if surge + unavailable == 0 { (1, 0) } else { (surge, unavailable) };
        let disruption = Disruption {
            policy: Some(At::bare(DisruptionPolicy::AllowDuringMaintenanceWindow)),
            windows: windows.into_iter().map(At::bare).collect(),
            ..Disruption::default()
        };
        let mut sc = Scenario::new(size, surge, unavailable);
        sc.disruption = disruption.clone();
        sc.start = STARTS[start];
        sc.max_seconds = 8 * 24 * 3600;
        let run = sc.run();

        // Every disruptive start happened while the gate was open.
        let mut draining = BTreeSet::new();
        for e in &run.events {
            let starts_a_step = match e.event.as_str() {
                "drain_started" => {
                    draining.insert(e.node.clone());
                    true
                }
                // A termination that no drain led up to takes a node down by itself.
                "terminate_requested" => !draining.contains(&e.node),
                "reimage_requested" => true,
                _ => false,
            };
            if starts_a_step {
                prop_assert!(
                    gate(&disruption, e.ts).is_open(),
                    "{} of {:?} at {} is outside every window", e.event, e.node, e.ts
                );
            }
        }
        // Every step in flight finished: each drained node was terminated.
        let terminated: BTreeSet<_> = run
            .events
            .iter()
            .filter(|e| e.event == "terminate_requested")
            .map(|e| e.node.clone())
            .collect();
        for node in &draining {
            prop_assert!(terminated.contains(node), "{node:?} was drained but never terminated");
        }
        assert_bounds(&run, size, surge, unavailable);
    }
}
