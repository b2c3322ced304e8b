//! The stage and halt decision: a pure function of the change as
//! journaled, what is known of each governed pool now, the gates' readings
//! and the time. Level-triggered, like `rollout::decide`: called again with
//! the same inputs it decides the same, so a restart repeats nothing.
//!
//! In order:
//! 1. An admitted pool whose latest plan has nothing left to roll is done;
//!    one whose rollout waits for a human (Degraded, rolled back) failed.
//! 2. `halt.failedPools` failed pools halt the change; so does a gate that
//!    is breached while the change has rolled or is rolling a pool.
//! 3. The stage in progress: it starts once every gate holds (for its
//!    `for`); it completes when each of its pools is done (rolled, or
//!    nothing to roll); its soak runs from then if it rolled a pool; it
//!    passes when the soak is over and every gate has held for its `for`.
//!    A stage that passes lets the next start in the same call.
//! 4. Every stage passed: the change is complete.

use jiff::{SignedDuration, Timestamp};

use super::change::{
    Change, ChangeStatus, GATE_HISTORY, GateOutcome, PoolRecord, Reading, StageRecord,
};
use super::rules::Rules;
use super::verdict::current_stage;
use crate::model::EventKind;

/// What is known of a governed pool now: from its latest plan made since
/// the change began, and whether its worker runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PoolFact {
    /// Not planned since the change began.
    Unknown,
    /// Its nodes run its desired template, and nothing is in flight.
    InSync,
    /// It has nodes to roll, or a roll under way.
    Rolls,
    /// Its rollout waits for a human after a failure (Degraded).
    Failed(String),
    /// Its rollout ended rolled back (its own `onFailure: rollback`, or the
    /// halt's `onHalt: rollback`).
    RolledBack(String),
    /// A human paused its rollout (not a failure; it holds its stage).
    Paused(String),
    /// It could not be planned (its provider did not answer...).
    Error(String),
}

/// Everything the decision reads besides the change itself.
pub struct Inputs<'a> {
    pub now: Timestamp,
    pub rules: &'a Rules,
    /// Each governed pool's fact.
    pub facts: &'a dyn Fn(&str) -> PoolFact,
}

/// Something to report, as a `fleet_*` event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FleetNote {
    pub event: EventKind,
    pub pool: Option<String>,
    pub message: String,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    pub change: Change,
    pub notes: Vec<FleetNote>,
    /// Pools to plan again: their stage opened, a slot was freed, or the
    /// change halted (their roll is held, or rolls back).
    pub wake: Vec<String>,
    /// Pools whose workers stop at their next safe point (the change halted
    /// or was paused).
    pub stop: Vec<String>,
    /// What the change waits for, in a sentence (`None`: nothing, or done).
    pub waiting: Option<String>,
    /// When time alone changes something (a soak ends, a gate's `for` is met).
    pub next_due: Option<Timestamp>,
}

impl Decision {
    fn note(&mut self, event: EventKind, pool: Option<&str>, message: impl Into<String>) {
        self.notes.push(FleetNote {
            event,
            pool: pool.map(str::to_string),
            message: message.into(),
        });
    }
}

fn after(t: Timestamp, d: std::time::Duration) -> Timestamp {
    t.saturating_add(SignedDuration::try_from(d).unwrap_or(SignedDuration::MAX))
        .unwrap_or(Timestamp::MAX)
}

fn when(t: Timestamp) -> String {
    t.strftime("%Y-%m-%d %H:%M:%S UTC").to_string()
}

/// A gate read: its record follows (holding since when, the breaks); the
/// note when it starts or stops holding.
pub fn read_gate(
    change: &mut Change,
    gate: &str,
    outcome: GateOutcome,
    now: Timestamp,
) -> Option<FleetNote> {
    let rec = change.gates.entry(gate.to_string()).or_default();
    let held = rec.last.as_ref().map(|r| r.outcome.holds());
    let reading = Reading { at: now, outcome };
    let holds = reading.outcome.holds();
    if holds {
        rec.holding_since.get_or_insert(now);
    } else {
        rec.holding_since = None;
        rec.breaks.push(reading.clone());
        if rec.breaks.len() > GATE_HISTORY {
            rec.breaks.remove(0);
        }
    }
    let message = describe(&reading.outcome);
    rec.last = Some(reading);
    (held != Some(holds)).then(|| FleetNote {
        event: EventKind::FleetGateChanged,
        pool: None,
        message: format!("gate {gate} {message}"),
    })
}

/// A reading in words.
pub fn describe(outcome: &GateOutcome) -> String {
    match outcome {
        GateOutcome::Holds { value } => format!("holds ({value})"),
        GateOutcome::Breached { value } => format!("is breached ({value})"),
        GateOutcome::Unknown { error } => format!("cannot be evaluated: {error}"),
    }
}

/// Whether every gate holds and has held for its `for`: `Ok`, or what it
/// waits for and when that could be met.
fn gates_hold(
    change: &Change,
    rules: &Rules,
    now: Timestamp,
) -> Result<(), (String, Option<Timestamp>)> {
    for g in &rules.gates {
        let rec = change.gates.get(&g.name);
        let Some(last) = rec.and_then(|r| r.last.as_ref()) else {
            return Err((format!("gate {} has not been evaluated yet", g.name), None));
        };
        if !last.outcome.holds() {
            return Err((format!("gate {} {}", g.name, describe(&last.outcome)), None));
        }
        let since = rec.and_then(|r| r.holding_since).unwrap_or(now);
        let due = after(since, g.hold_for);
        if now < due {
            let held = now.duration_since(since).as_secs();
            return Err((
                format!(
                    "gate {} has held {held}s of its {}s",
                    g.name,
                    g.hold_for.as_secs()
                ),
                Some(due),
            ));
        }
    }
    Ok(())
}

fn halt(d: &mut Decision, rules: &Rules, reason: String, pools: Vec<String>, now: Timestamp) {
    d.change.status = ChangeStatus::Halted {
        reason: reason.clone(),
        pools: pools.clone(),
        at: now,
    };
    d.change.log(now, "halted", reason.clone());
    d.stop = d
        .change
        .pools
        .iter()
        .filter(|(_, r)| matches!(r, PoolRecord::Rolling { .. }))
        .map(|(p, _)| p.clone())
        .collect();
    // Every governed pool is planned again: those in flight stop (or roll
    // back), and every held pool says why it now waits.
    d.wake = rules
        .stages
        .iter()
        .flat_map(|s| s.pools.iter().cloned())
        .collect();
    d.note(
        EventKind::FleetHalted,
        pools.first().map(String::as_str),
        reason,
    );
    d.waiting = Some("halted".into());
}

pub fn decide_change(prev: &Change, inp: &Inputs) -> Decision {
    let now = inp.now;
    let rules = inp.rules.for_change(prev);
    let mut d = Decision {
        change: prev.clone(),
        notes: Vec::new(),
        wake: Vec::new(),
        stop: Vec::new(),
        waiting: None,
        next_due: None,
    };
    if let ChangeStatus::Halted { .. } = d.change.status {
        // Pools the halt turned round are rolled back once their plans say so.
        let back: Vec<String> = d
            .change
            .pools
            .iter()
            .filter(|(p, r)| {
                !matches!(r, PoolRecord::RolledBack { .. })
                    && matches!((inp.facts)(p), PoolFact::RolledBack(_))
            })
            .map(|(p, _)| p.clone())
            .collect();
        for pool in back {
            let from = d.change.pools[&pool].from();
            d.change
                .pools
                .insert(pool.clone(), PoolRecord::RolledBack { at: now, from });
            d.note(
                EventKind::FleetPoolRolledBack,
                Some(&pool),
                "back on the template it had before the change",
            );
        }
        return d;
    }
    if !matches!(d.change.status, ChangeStatus::Running) {
        return d;
    }
    // 1. Admitted pools follow what their plans say.
    let mut freed = 0;
    let admitted: Vec<(String, PoolRecord)> = d
        .change
        .pools
        .iter()
        .filter(|(_, r)| matches!(r, PoolRecord::Rolling { .. }))
        .map(|(p, r)| (p.clone(), r.clone()))
        .collect();
    for (pool, record) in admitted {
        let from = record.from();
        match (inp.facts)(&pool) {
            PoolFact::InSync => {
                d.change
                    .pools
                    .insert(pool.clone(), PoolRecord::Done { at: now, from });
                d.note(
                    EventKind::FleetPoolDone,
                    Some(&pool),
                    "rolled: every node runs the desired template",
                );
                freed += 1;
            }
            PoolFact::Failed(reason) | PoolFact::RolledBack(reason) => {
                d.change.pools.insert(
                    pool.clone(),
                    PoolRecord::Failed {
                        at: now,
                        reason: reason.clone(),
                        from,
                    },
                );
                d.note(EventKind::FleetPoolFailed, Some(&pool), reason);
                freed += 1;
            }
            _ => {}
        }
    }
    // 2. Halts.
    let failed = d.change.failed();
    if failed.len() >= rules.failed_pools {
        let pools: Vec<String> = failed.iter().map(|(p, _)| p.to_string()).collect();
        let reason = format!(
            "{} pool(s) failed (halt.failedPools {}): {}",
            failed.len(),
            rules.failed_pools,
            failed
                .iter()
                .map(|(p, r)| format!("{p}: {r}"))
                .collect::<Vec<_>>()
                .join("; ")
        );
        halt(&mut d, rules, reason, pools, now);
        return d;
    }
    let exposed = d
        .change
        .pools
        .values()
        .any(|r| matches!(r, PoolRecord::Rolling { .. } | PoolRecord::Done { .. }));
    if exposed {
        for g in &rules.gates {
            if let Some(GateOutcome::Breached { value }) = d
                .change
                .gates
                .get(&g.name)
                .and_then(|r| r.last.as_ref())
                .map(|r| &r.outcome)
            {
                let reason = format!("gate {} breached ({value}): {}", g.name, g.query);
                halt(&mut d, rules, reason, Vec::new(), now);
                return d;
            }
        }
    }
    // 3. The stages, in order.
    loop {
        let i = current_stage(&d.change, rules);
        let Some(stage) = rules.stages.get(i) else {
            // 4. Every stage passed.
            d.change.status = ChangeStatus::Completed { at: now };
            d.note(EventKind::FleetCompleted, None, "every stage passed");
            return d;
        };
        let name = stage.name.clone();
        if d.change.record(&name).is_none() {
            if let Err((why, due)) = gates_hold(&d.change, rules, now) {
                d.waiting = Some(format!("stage {name} waits to start: {why}"));
                d.next_due = due;
                return d;
            }
            d.change.stages.push(StageRecord {
                name: name.clone(),
                started_at: now,
                completed_at: None,
                rolled: 0,
                soak_until: None,
                passed_at: None,
            });
            d.note(
                EventKind::FleetStageStarted,
                None,
                format!("stage {name} started: {} pool(s)", stage.pools.len()),
            );
            d.wake.extend(stage.pools.iter().cloned());
        }
        let rec = d.change.record(&name).cloned().expect("started above");
        if rec.completed_at.is_none() {
            let mut counts = Counts::default();
            for pool in &stage.pools {
                counts.add(pool, d.change.pools.get(pool), (inp.facts)(pool));
            }
            if freed > 0 {
                // Slots freed: the next waiting pools of the stage may take them.
                d.wake
                    .extend(counts.waiting_pools.iter().take(freed).cloned());
            }
            if !counts.complete() {
                d.waiting = Some(format!(
                    "stage {name}: {}",
                    counts.describe(stage.pools.len())
                ));
                return d;
            }
            let rolled = counts.rolled;
            let soak_until = if rolled > 0 {
                after(now, stage.soak)
            } else {
                now
            };
            let r = d.change.record_mut(&name).expect("started above");
            r.completed_at = Some(now);
            r.rolled = rolled;
            r.soak_until = Some(soak_until);
            d.note(
                EventKind::FleetStageCompleted,
                None,
                if rolled == 0 {
                    format!("stage {name} done: no pool had anything to roll, nothing to soak")
                } else if stage.soak.is_zero() {
                    format!("stage {name} done: {rolled} pool(s) rolled")
                } else {
                    format!(
                        "stage {name} done: {rolled} pool(s) rolled; soaking {}s, until {}",
                        stage.soak.as_secs(),
                        when(soak_until)
                    )
                },
            );
        }
        let rec = d.change.record(&name).cloned().expect("started above");
        let soak_until = rec.soak_until.unwrap_or(now);
        if now < soak_until {
            d.waiting = Some(format!("stage {name} soaks until {}", when(soak_until)));
            d.next_due = Some(soak_until);
            return d;
        }
        if let Err((why, due)) = gates_hold(&d.change, rules, now) {
            d.waiting = Some(format!("stage {name} soaked; waits for {why}"));
            d.next_due = due;
            return d;
        }
        d.change.record_mut(&name).expect("started above").passed_at = Some(now);
        d.note(
            EventKind::FleetStagePassed,
            None,
            format!("stage {name} passed"),
        );
    }
}

/// A stage's pools, counted by where each stands.
#[derive(Default)]
struct Counts {
    done: usize,
    rolled: u32,
    rolling: usize,
    waiting: usize,
    waiting_pools: Vec<String>,
    unknown: usize,
    failed: Vec<String>,
    held: Vec<String>,
}

impl Counts {
    fn add(&mut self, pool: &str, record: Option<&PoolRecord>, fact: PoolFact) {
        match (record, fact) {
            (Some(PoolRecord::Done { .. }), _) => {
                self.done += 1;
                self.rolled += 1;
            }
            (Some(PoolRecord::Failed { .. } | PoolRecord::RolledBack { .. }), _)
            | (_, PoolFact::Failed(_) | PoolFact::RolledBack(_)) => {
                self.failed.push(pool.to_string())
            }
            (Some(PoolRecord::Rolling { .. }), _) => self.rolling += 1,
            (_, PoolFact::InSync) => self.done += 1,
            (_, PoolFact::Rolls) => {
                self.waiting += 1;
                self.waiting_pools.push(pool.to_string());
            }
            (_, PoolFact::Unknown) => self.unknown += 1,
            (_, PoolFact::Paused(why) | PoolFact::Error(why)) => {
                self.held.push(format!("{pool} ({why})"))
            }
        }
    }

    fn complete(&self) -> bool {
        self.rolling == 0
            && self.waiting == 0
            && self.unknown == 0
            && self.failed.is_empty()
            && self.held.is_empty()
    }

    fn describe(&self, total: usize) -> String {
        let mut parts = vec![format!("{}/{total} pools done", self.done)];
        if self.rolling > 0 {
            parts.push(format!("{} rolling", self.rolling));
        }
        if self.waiting > 0 {
            parts.push(format!("{} waiting for a slot", self.waiting));
        }
        if self.unknown > 0 {
            parts.push(format!("{} not looked at yet", self.unknown));
        }
        let list = |names: &[String]| {
            let shown: Vec<&str> = names.iter().take(3).map(String::as_str).collect();
            match names.len() - shown.len() {
                0 => shown.join(", "),
                n => format!("{} and {n} more", shown.join(", ")),
            }
        };
        if !self.failed.is_empty() {
            parts.push(format!("failed: {}", list(&self.failed)));
        }
        if !self.held.is_empty() {
            parts.push(format!("held: {}", list(&self.held)));
        }
        parts.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use proptest::prelude::*;

    use super::*;
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
            Verdict::Hold(crate::fleet::Hold::Stage { .. })
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
        assert!(
            matches!(d.change.status, ChangeStatus::Halted { ref pools, .. } if pools == &["p0"])
        );
        assert!(d.notes.iter().any(|n| n.event == EventKind::FleetHalted));
        for p in ["p1", "p39"] {
            assert!(
                matches!(
                    verdict(&d.change, &r, p),
                    Verdict::Hold(crate::fleet::Hold::Halted { .. })
                ),
                "{p} never starts"
            );
        }
        assert_eq!(d.change.pools.len(), 1, "no other pool was admitted");
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
        let d = decide_change(
            &c,
            &Inputs {
                now: at(0),
                rules: &r,
                facts: &facts(&known),
            },
        );
        assert!(
            d.waiting
                .as_deref()
                .unwrap()
                .contains("has not been evaluated"),
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
        let d = decide_change(
            &c,
            &Inputs {
                now: at(60),
                rules: &r,
                facts: &facts(&known),
            },
        );
        assert_eq!(d.next_due, Some(at(120)));
        let d = decide_change(
            &c,
            &Inputs {
                now: at(120),
                rules: &r,
                facts: &facts(&known),
            },
        );
        c = d.change;
        assert!(c.record("s0").is_some());
        admit(&mut c, &r, "p0", &template("img-1"), at(121)).unwrap();
        known.insert("p0".into(), PoolFact::InSync);
        let d = decide_change(
            &c,
            &Inputs {
                now: at(200),
                rules: &r,
                facts: &facts(&known),
            },
        );
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
        let d = decide_change(
            &breached,
            &Inputs {
                now: at(300),
                rules: &r,
                facts: &facts(&known),
            },
        );
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
        let d = decide_change(
            &unknown,
            &Inputs {
                now: at(800),
                rules: &r,
                facts: &facts(&known),
            },
        );
        assert!(!d.change.is_halted());
        assert!(
            d.waiting.as_deref().unwrap().contains("connection refused"),
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
        let d = decide_change(
            &c,
            &Inputs {
                now: at(800),
                rules: &r,
                facts: &facts(&known),
            },
        );
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
}
