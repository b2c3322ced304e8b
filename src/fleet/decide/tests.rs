use std::collections::BTreeMap;
use std::time::Duration;

use proptest::prelude::*;

use super::*;
use crate::fleet::change::{GateOutcome, PoolRecord};
use crate::fleet::rules::{GateRules, StageRules};
use crate::fleet::verdict::{Verdict, admit, verdict};
use crate::model::{NodeTemplate, TemplateHash};
use crate::spec::types::OnHalt;

fn at(s: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + s).unwrap()
}

/// Stages of `sizes` pools each, named s0, s1...; pools p0, p1... in order.
fn rules(sizes: &[usize], soak: u64, max: Option<usize>, failed: usize) -> Rules {
    let mut n = 0;
    let stages = sizes
        .iter()
        .enumerate()
        .map(|(i, k)| {
            let pools = (n..n + k).map(|p| format!("p{p}")).collect();
            n += k;
            StageRules {
                name: format!("s{i}"),
                soak: Duration::from_secs(soak),
                pools,
            }
        })
        .collect();
    Rules::for_tests("rings", stages, max, failed, OnHalt::Hold, Vec::new())
}

fn template(image: &str) -> NodeTemplate {
    NodeTemplate {
        image: Some(image.into()),
        ..NodeTemplate::default()
    }
}

fn change(r: &Rules) -> Change {
    let targets = r
        .stages
        .iter()
        .flat_map(|s| s.pools.iter().map(|p| (p.clone(), TemplateHash(2))))
        .collect();
    Change::new("main@abc".into(), targets, at(0))
}

fn facts(map: &BTreeMap<String, PoolFact>) -> impl Fn(&str) -> PoolFact + '_ {
    move |p| map.get(p).cloned().unwrap_or(PoolFact::Unknown)
}

#[test]
fn the_canary_fails_and_the_change_halts_with_the_rest_untouched() {
    let r = rules(&[1, 10, 29], 1800, None, 1);
    let mut c = change(&r);
    let mut known: BTreeMap<String, PoolFact> = (0..40)
        .map(|i| (format!("p{i}"), PoolFact::Rolls))
        .collect();
    let d = decide_change(
        &c,
        &Inputs {
            now: at(0),
            rules: &r,
            facts: &facts(&known),
        },
    );
    c = d.change;
    assert_eq!(d.wake, ["p0"], "only the canary stage opens");
    assert_eq!(verdict(&c, &r, "p0"), Verdict::Go);
    assert!(matches!(
        verdict(&c, &r, "p1"),
        Verdict::Hold(crate::fleet::StageWait::Stage { .. })
    ));
    admit(&mut c, &r, "p0", &template("img-1"), at(1)).unwrap();
    assert!(
        admit(&mut c, &r, "p5", &template("img-1"), at(1)).is_err(),
        "stage s1 has not started"
    );
    known.insert(
        "p0".into(),
        PoolFact::Failed("node p0-n1 did not become healthy".into()),
    );
    let d = decide_change(
        &c,
        &Inputs {
            now: at(30),
            rules: &r,
            facts: &facts(&known),
        },
    );
    assert!(matches!(d.change.status, ChangeStatus::Halted { ref pools, .. } if pools == &["p0"]));
    assert!(d.notes.iter().any(|n| n.event == EventKind::FleetHalted));
    for p in ["p1", "p39"] {
        assert!(
            matches!(
                verdict(&d.change, &r, p),
                Verdict::Hold(crate::fleet::StageWait::Halted { .. })
            ),
            "{p} never starts"
        );
    }
    assert_eq!(d.change.pools.len(), 1, "no other pool was admitted");
}

/// The decision at `now` with the facts `known`.
fn decide_at(
    c: &Change,
    r: &Rules,
    known: &BTreeMap<String, PoolFact>,
    now: Timestamp,
) -> Decision {
    decide_change(
        c,
        &Inputs {
            now,
            rules: r,
            facts: &facts(known),
        },
    )
}

#[test]
fn stages_soak_and_wait_for_their_gates_in_order() {
    let mut r = rules(&[1, 2], 600, None, 1);
    r.gates.push(GateRules {
        name: "errors".into(),
        hold_for: Duration::from_secs(120),
        interval: Duration::from_secs(15),
        url: "http://127.0.0.1:9090".into(),
        query: "up".into(),
        timeout: Duration::from_secs(10),
    });
    let mut c = change(&r);
    let mut known: BTreeMap<String, PoolFact> =
        (0..3).map(|i| (format!("p{i}"), PoolFact::Rolls)).collect();
    // Before stage s0 starts, the gate must hold for 2 minutes.
    let d = decide_at(&c, &r, &known, at(0));
    assert!(
        matches!(
            &d.waiting,
            Some(FleetWait::ToStart { gate: GateWait::NotRead { gate }, .. }) if gate == "errors"
        ),
        "{:?}",
        d.waiting
    );
    read_gate(
        &mut c,
        "errors",
        GateOutcome::Holds {
            value: "0.2".into(),
        },
        at(0),
    );
    let d = decide_at(&c, &r, &known, at(60));
    assert_eq!(d.next_due, Some(at(120)));
    let d = decide_at(&c, &r, &known, at(120));
    c = d.change;
    assert!(c.record("s0").is_some());
    admit(&mut c, &r, "p0", &template("img-1"), at(121)).unwrap();
    known.insert("p0".into(), PoolFact::InSync);
    let d = decide_at(&c, &r, &known, at(200));
    c = d.change;
    assert_eq!(d.next_due, Some(at(800)), "soak of 600s from completion");
    assert!(
        matches!(verdict(&c, &r, "p1"), Verdict::Hold(_)),
        "s1 waits for the soak"
    );
    // A breach during the soak halts.
    let mut breached = c.clone();
    read_gate(
        &mut breached,
        "errors",
        GateOutcome::Breached {
            value: "empty".into(),
        },
        at(300),
    );
    let d = decide_at(&breached, &r, &known, at(300));
    assert!(d.change.is_halted(), "{:?}", d.change.status);
    // An unreachable gate does not hold, and does not halt: the stage waits.
    let mut unknown = c.clone();
    read_gate(
        &mut unknown,
        "errors",
        GateOutcome::Unknown {
            error: "connection refused".into(),
        },
        at(700),
    );
    let d = decide_at(&unknown, &r, &known, at(800));
    assert!(!d.change.is_halted());
    assert!(
        matches!(
            &d.waiting,
            Some(FleetWait::Gates { gate: GateWait::NotHolding { reading, .. }, .. })
                if reading.contains("connection refused")
        ),
        "{:?}",
        d.waiting
    );
    // Held throughout: s1 starts at the soak's end.
    read_gate(
        &mut c,
        "errors",
        GateOutcome::Holds {
            value: "0.1".into(),
        },
        at(790),
    );
    let d = decide_at(&c, &r, &known, at(800));
    assert!(d.change.passed("s0"));
    assert!(d.change.record("s1").is_some());
    assert_eq!(d.wake, ["p1", "p2"]);
}

#[test]
fn a_halt_with_rollback_turns_the_rolled_pools_round_and_holds_the_rest() {
    let mut r = rules(&[1, 2, 2], 60, None, 1);
    r.on_halt = OnHalt::Rollback;
    let mut c = change(&r);
    let mut known: BTreeMap<String, PoolFact> =
        (0..5).map(|i| (format!("p{i}"), PoolFact::Rolls)).collect();
    c = decide_change(
        &c,
        &Inputs {
            now: at(0),
            rules: &r,
            facts: &facts(&known),
        },
    )
    .change;
    admit(&mut c, &r, "p0", &template("img-1"), at(1)).unwrap();
    known.insert("p0".into(), PoolFact::InSync);
    c = decide_change(
        &c,
        &Inputs {
            now: at(10),
            rules: &r,
            facts: &facts(&known),
        },
    )
    .change;
    c = decide_change(
        &c,
        &Inputs {
            now: at(100),
            rules: &r,
            facts: &facts(&known),
        },
    )
    .change;
    admit(&mut c, &r, "p1", &template("img-1"), at(101)).unwrap();
    known.insert("p1".into(), PoolFact::Failed("a node failed".into()));
    let d = decide_change(
        &c,
        &Inputs {
            now: at(110),
            rules: &r,
            facts: &facts(&known),
        },
    );
    assert!(d.change.is_halted());
    assert_eq!(d.wake.len(), 5, "every governed pool is planned again");
    let back = TemplateHash(template("img-1").hash().0);
    assert_eq!(
        verdict(&d.change, &r, "p0"),
        Verdict::RollBack { to: back },
        "done: goes back"
    );
    assert_eq!(
        verdict(&d.change, &r, "p1"),
        Verdict::RollBack { to: back },
        "failed: goes back"
    );
    assert!(
        matches!(verdict(&d.change, &r, "p2"), Verdict::Hold(_)),
        "never started: held"
    );
    // Once rolled back, its record says so.
    known.insert("p0".into(), PoolFact::RolledBack("change halted".into()));
    let d = decide_change(
        &d.change,
        &Inputs {
            now: at(200),
            rules: &r,
            facts: &facts(&known),
        },
    );
    assert!(matches!(
        d.change.pools["p0"],
        PoolRecord::RolledBack { .. }
    ));
}

#[test]
fn a_stage_with_nothing_to_roll_has_no_soak() {
    let r = rules(&[1, 1], 3600, None, 1);
    let known: BTreeMap<String, PoolFact> = [
        ("p0".into(), PoolFact::InSync),
        ("p1".into(), PoolFact::Rolls),
    ]
    .into();
    let d = decide_change(
        &change(&r),
        &Inputs {
            now: at(0),
            rules: &r,
            facts: &facts(&known),
        },
    );
    assert!(d.change.passed("s0"));
    assert_eq!(verdict(&d.change, &r, "p1"), Verdict::Go);
}

/// A fleet rolled by a simulated world: pools take their slot when their
/// verdict says go, roll for a few ticks, and succeed or fail.
#[derive(Debug, Clone)]
struct World {
    sizes: Vec<usize>,
    max: Option<usize>,
    failed_pools: usize,
    /// Per pool: needs a roll, ticks to roll, fails.
    pools: Vec<(bool, u8, bool)>,
    soak: u64,
}

fn world() -> impl Strategy<Value = World> {
    (
        proptest::collection::vec(1usize..6, 1..4),
        proptest::option::of(1usize..4),
        1usize..3,
        0u64..3,
    )
        .prop_flat_map(|(sizes, max, failed_pools, soak)| {
            let n: usize = sizes.iter().sum();
            (
                Just(sizes),
                Just(max),
                Just(failed_pools),
                proptest::collection::vec(
                    (any::<bool>(), 1u8..4, proptest::bool::weighted(0.1)),
                    n,
                ),
                Just(soak),
            )
        })
        .prop_map(|(sizes, max, failed_pools, pools, soak)| World {
            sizes,
            max,
            failed_pools,
            pools,
            soak,
        })
}

proptest! {
    /// Never more than maxConcurrentPools pools hold a slot; no pool is
    /// admitted before its stage started, nor after a halt; a stage
    /// passes only with all its pools done, in order; the change halts
    /// exactly when failedPools pools failed, and completes otherwise.
    #[test]
    fn stages_in_order_within_the_slots_and_halts_on_failures(w in world()) {
        let r = rules(&w.sizes, w.soak, w.max, w.failed_pools);
        let mut c = change(&r);
        let n = w.pools.len();
        let mut facts_now: BTreeMap<String, PoolFact> = (0..n)
            .map(|i| (format!("p{i}"), if w.pools[i].0 { PoolFact::Rolls } else { PoolFact::InSync }))
            .collect();
        let mut left: Vec<u8> = w.pools.iter().map(|p| p.1).collect();
        let failing = w.pools.iter().filter(|p| p.0 && p.2).count();
        for tick in 0..200i64 {
            let now = at(tick);
            let d = decide_change(&c, &Inputs { now, rules: &r, facts: &facts(&facts_now) });
            // Stages start in order, each after the one before passed.
            for (k, s) in d.change.stages.iter().enumerate() {
                prop_assert_eq!(&s.name, &r.stages[k].name);
                if k > 0 {
                    prop_assert!(d.change.stages[k - 1].passed_at.is_some_and(|p| p <= s.started_at));
                }
                if s.passed_at.is_some() {
                    for p in &r.stages[k].pools {
                        let done = matches!(d.change.pools.get(p), Some(PoolRecord::Done { .. }))
                            || (!d.change.pools.contains_key(p) && facts_now[p] == PoolFact::InSync);
                        prop_assert!(done, "stage {} passed with {p} not done", s.name);
                    }
                }
            }
            c = d.change;
            if matches!(c.status, ChangeStatus::Halted { .. } | ChangeStatus::Completed { .. }) {
                break;
            }
            // Pools ask for their slot in a fixed order.
            for i in 0..n {
                let pool = format!("p{i}");
                if facts_now[&pool] == PoolFact::Rolls && !c.pools.contains_key(&pool) {
                    let stage = r.stage_of(&pool).unwrap();
                    let admitted = admit(&mut c, &r, &pool, &template("img-1"), now).is_ok();
                    if admitted {
                        prop_assert!(c.record(&r.stages[stage].name).is_some(), "{pool} admitted before its stage started");
                    }
                }
            }
            if let Some(max) = w.max {
                prop_assert!(c.rolling() <= max, "{} rolling, max {max}", c.rolling());
            }
            // Rolling pools move on.
            for (i, ticks) in left.iter_mut().enumerate() {
                let pool = format!("p{i}");
                if matches!(c.pools.get(&pool), Some(PoolRecord::Rolling { .. })) {
                    *ticks = ticks.saturating_sub(1);
                    if *ticks == 0 {
                        facts_now.insert(pool, if w.pools[i].2 { PoolFact::Failed("a node failed".into()) } else { PoolFact::InSync });
                    }
                }
            }
        }
        let recorded = c.failed().len();
        match &c.status {
            ChangeStatus::Halted { .. } => prop_assert!(recorded >= w.failed_pools, "halted with {recorded} failed pools"),
            ChangeStatus::Completed { .. } => prop_assert!(failing == 0),
            other => {
                // Fewer failures than the threshold: a failed pool holds its stage.
                prop_assert!(recorded > 0 && recorded < w.failed_pools, "{other:?} after 200 ticks, {recorded} failed");
            }
        }
    }
}
