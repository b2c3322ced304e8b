//! Phases 3 and 4: the stages in order (start on the gates, complete when
//! every pool is done, soak, pass on the gates), then the change completes.

use super::{Decision, FleetWait, Inputs, PoolFact, StageTally, after, gates, when};
use crate::fleet::change::{ChangeStatus, PoolRecord, StageRecord};
use crate::fleet::rules::{Rules, StageRules};
use crate::fleet::verdict::current_stage;
use crate::model::EventKind;

/// Move the stages on as far as they go now; `freed` slots (pools just done
/// or failed) go to the waiting pools of the stage in progress.
pub(super) fn advance(mut d: Decision, rules: &Rules, inp: &Inputs, freed: usize) -> Decision {
    let now = inp.now;
    loop {
        let i = current_stage(&d.change, rules);
        let Some(stage) = rules.stages.get(i) else {
            d.change.status = ChangeStatus::Completed { at: now };
            d.note(EventKind::FleetCompleted, None, "every stage passed");
            return d;
        };
        let name = stage.name.clone();
        if d.change.record(&name).is_none() {
            if let Err((gate, due)) = gates::hold(&d.change, rules, now) {
                return d.wait(FleetWait::ToStart { stage: name, gate }, due);
            }
            start(&mut d, stage, now);
        }
        let completed = d.change.record(&name).and_then(|r| r.completed_at);
        if completed.is_none() {
            let tally = tally(&d, stage, inp);
            if freed > 0 {
                // Slots freed: the next waiting pools of the stage may take them.
                d.wake.extend(tally.waiting.iter().take(freed).cloned());
            }
            if !tally.complete() {
                return d.wait(FleetWait::Rolling { stage: name, tally }, None);
            }
            complete(&mut d, stage, tally.rolled, now);
        }
        let soak_until = d
            .change
            .record(&name)
            .and_then(|r| r.soak_until)
            .unwrap_or(now);
        if now < soak_until {
            let why = FleetWait::Soaking {
                stage: name,
                until: soak_until,
            };
            return d.wait(why, Some(soak_until));
        }
        if let Err((gate, due)) = gates::hold(&d.change, rules, now) {
            return d.wait(FleetWait::Gates { stage: name, gate }, due);
        }
        if let Some(r) = d.change.record_mut(&name) {
            r.passed_at = Some(now);
        }
        d.note(
            EventKind::FleetStagePassed,
            None,
            format!("stage {name} passed"),
        );
    }
}

fn start(d: &mut Decision, stage: &StageRules, now: jiff::Timestamp) {
    d.change.stages.push(StageRecord {
        name: stage.name.clone(),
        started_at: now,
        completed_at: None,
        rolled: 0,
        soak_until: None,
        passed_at: None,
    });
    d.note(
        EventKind::FleetStageStarted,
        None,
        format!(
            "stage {} started: {} pool(s)",
            stage.name,
            stage.pools.len()
        ),
    );
    d.wake.extend(stage.pools.iter().cloned());
}

/// Each pool of the stage counted by where it stands.
fn tally(d: &Decision, stage: &StageRules, inp: &Inputs) -> StageTally {
    let mut t = StageTally {
        total: stage.pools.len(),
        ..StageTally::default()
    };
    for pool in &stage.pools {
        match (d.change.pools.get(pool), (inp.facts)(pool)) {
            (Some(PoolRecord::Done { .. }), _) => {
                t.done += 1;
                t.rolled += 1;
            }
            (Some(PoolRecord::Failed { .. } | PoolRecord::RolledBack { .. }), _)
            | (_, PoolFact::Failed(_) | PoolFact::RolledBack(_)) => t.failed.push(pool.clone()),
            (Some(PoolRecord::Rolling { .. }), _) => t.rolling += 1,
            (_, PoolFact::InSync) => t.done += 1,
            (_, PoolFact::Rolls) => t.waiting.push(pool.clone()),
            (_, PoolFact::Unknown) => t.unknown += 1,
            (_, PoolFact::Paused(why) | PoolFact::Error(why)) => {
                t.held.push(format!("{pool} ({why})"))
            }
        }
    }
    t
}

/// Every pool of the stage is done: it soaks from now if it rolled a pool.
fn complete(d: &mut Decision, stage: &StageRules, rolled: u32, now: jiff::Timestamp) {
    let name = &stage.name;
    let soak_until = if rolled > 0 {
        after(now, stage.soak)
    } else {
        now
    };
    if let Some(r) = d.change.record_mut(name) {
        r.completed_at = Some(now);
        r.rolled = rolled;
        r.soak_until = Some(soak_until);
    }
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
