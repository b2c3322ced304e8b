//! What a change says of one pool's roll, and the admission that takes a
//! concurrency slot. The planner asks the verdict (a held roll is not a
//! step, and the plan says why); the daemon admits a pool, journaled,
//! before its worker starts.

use std::fmt;

use jiff::Timestamp;

use super::change::{Change, ChangeStatus, PoolRecord};
use super::rules::Rules;
use crate::model::{NodeTemplate, TemplateHash};
use crate::spec::types::OnHalt;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// It may roll now: it holds a slot, or one is free.
    Go,
    /// Its roll waits.
    Hold(StageWait),
    /// The change halted with `onHalt: rollback`: back to this template.
    RollBack { to: TemplateHash },
}

/// Why a governed pool's roll waits for its change: its stage has not
/// started, every slot is taken, the change halted or is paused. Said in
/// one place (`Display`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(
    tag = "kind",
    rename_all = "camelCase",
    rename_all_fields = "camelCase"
)]
pub enum StageWait {
    /// Its stage has not started.
    Stage {
        fleet: String,
        change: String,
        stage: String,
        /// The stage in progress, and what it waits for.
        current: String,
        waits: String,
    },
    /// Every slot (`maxConcurrentPools`) is taken.
    Slots {
        fleet: String,
        change: String,
        rolling: usize,
        max: usize,
    },
    Halted {
        fleet: String,
        change: String,
        reason: String,
    },
    Paused {
        fleet: String,
        change: String,
        by: String,
        reason: String,
    },
}

impl fmt::Display for StageWait {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StageWait::Stage {
                fleet,
                change,
                stage,
                current,
                waits,
            } if stage == current => write!(
                f,
                "fleet rollout {fleet} (change {change}): stage {stage} has not started: {waits}"
            ),
            StageWait::Stage {
                fleet,
                change,
                stage,
                current,
                waits,
            } => write!(
                f,
                "fleet rollout {fleet} (change {change}): stage {stage} starts after stage {current}, which {waits}"
            ),
            StageWait::Slots {
                fleet,
                change,
                rolling,
                max,
            } => write!(
                f,
                "fleet rollout {fleet} (change {change}): waiting for a slot: {rolling} of maxConcurrentPools {max} pools roll"
            ),
            StageWait::Halted {
                fleet,
                change,
                reason,
            } => write!(
                f,
                "fleet rollout {fleet}: change {change} halted: {reason}; `poolwright fleet resume {fleet} --reason ...` after looking into it"
            ),
            StageWait::Paused {
                fleet,
                change,
                by,
                reason,
            } => write!(
                f,
                "fleet rollout {fleet}: change {change} paused by {by} ({reason}); `poolwright fleet resume {fleet}` continues it"
            ),
        }
    }
}

/// The first stage not passed, as an index (`stages.len()` when all did).
pub fn current_stage(change: &Change, rules: &Rules) -> usize {
    rules
        .stages
        .iter()
        .position(|s| !change.passed(&s.name))
        .unwrap_or(rules.stages.len())
}

/// What the stage in progress waits for, in a few words.
pub fn stage_waits(change: &Change, rules: &Rules, stage: usize) -> String {
    let Some(s) = rules.stages.get(stage) else {
        return "is done".into();
    };
    match change.record(&s.name) {
        None => "waits for its gates to hold before it starts".into(),
        Some(r) => match (r.completed_at, r.soak_until) {
            (None, _) => "is rolling".into(),
            (Some(_), Some(until)) if r.rolled > 0 => {
                format!("soaks until {}", until.strftime("%Y-%m-%d %H:%M:%S UTC"))
            }
            _ => "waits for its gates to hold".into(),
        },
    }
}

pub fn verdict(change: &Change, rules: &Rules, pool: &str) -> Verdict {
    let rules = rules.for_change(change);
    let (fleet, id) = (rules.fleet.clone(), change.id.clone());
    let record = change.pools.get(pool);
    match &change.status {
        ChangeStatus::Halted { reason, .. } => {
            return match record {
                Some(
                    PoolRecord::Rolling { from, .. }
                    | PoolRecord::Done { from, .. }
                    | PoolRecord::Failed { from, .. },
                ) if rules.on_halt == OnHalt::Rollback => Verdict::RollBack { to: *from },
                _ => Verdict::Hold(StageWait::Halted {
                    fleet,
                    change: id,
                    reason: reason.clone(),
                }),
            };
        }
        ChangeStatus::Paused { by, reason, .. } => {
            return Verdict::Hold(StageWait::Paused {
                fleet,
                change: id,
                by: by.clone(),
                reason: reason.clone(),
            });
        }
        ChangeStatus::Completed { .. } | ChangeStatus::Running => {}
    }
    if matches!(record, Some(PoolRecord::Rolling { .. })) {
        return Verdict::Go;
    }
    let Some(stage) = rules.stage_of(pool) else {
        return Verdict::Go;
    };
    let current = current_stage(change, rules);
    let started = rules
        .stages
        .get(stage)
        .is_some_and(|s| change.record(&s.name).is_some());
    if stage > current || (stage == current && !started) {
        return Verdict::Hold(StageWait::Stage {
            fleet,
            change: id,
            stage: rules.stages[stage].name.clone(),
            current: rules
                .stages
                .get(current)
                .map_or_else(String::new, |s| s.name.clone()),
            waits: stage_waits(change, rules, current),
        });
    }
    if let Some(max) = rules.max_concurrent_pools {
        let rolling = change.rolling();
        if rolling >= max {
            return Verdict::Hold(StageWait::Slots {
                fleet,
                change: id,
                rolling,
                max,
            });
        }
    }
    Verdict::Go
}

/// Take a slot for `pool`, rolling from `from`: refused with the hold when
/// the verdict is not `Go`. A pool already rolling keeps its slot.
pub fn admit(
    change: &mut Change,
    rules: &Rules,
    pool: &str,
    from: &NodeTemplate,
    now: Timestamp,
) -> Result<(), Verdict> {
    match verdict(change, rules, pool) {
        Verdict::Go => {}
        other => return Err(other),
    }
    if matches!(change.pools.get(pool), Some(PoolRecord::Rolling { .. })) {
        return Ok(());
    }
    let hash = from.hash();
    change.templates.entry(hash).or_insert_with(|| from.clone());
    change.pools.insert(
        pool.to_string(),
        PoolRecord::Rolling {
            since: now,
            from: hash,
        },
    );
    Ok(())
}
