//! A change across pools in the plan: each governed pool's stage and why its
//! roll waits (then it is not a step), a halted change's roll back, and each
//! FleetRollout's stage plan. The one place a plan follows a FleetRollout.

use serde::{Deserialize, Serialize};

use super::{PoolPlan, Step};
use crate::fleet::verdict::{current_stage, stage_waits};
use crate::fleet::{ChangeStatus, FleetView, PoolRecord, StageWait, Verdict, verdict};
use crate::model::NodeTemplate;
use crate::model::said::Said;
use crate::spec::types::OnHalt;

/// A governed pool's place in its FleetRollout.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolFleet {
    /// The FleetRollout.
    pub name: String,
    /// The change in force (or the one this plan would begin).
    pub change: String,
    pub stage: String,
    /// 1-based.
    pub stage_number: usize,
    pub stages: usize,
    /// Why its roll waits, when it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held: Option<Said<StageWait>>,
    /// It goes back to the template it had (the change halted, `onHalt:
    /// rollback`); it may be back already.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub rollback: bool,
}

/// A FleetRollout's stage plan.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FleetPlan {
    pub name: String,
    pub change: String,
    /// Applying this desired state begins the change.
    #[serde(default)]
    pub new: bool,
    /// `running`, `paused`, `halted`, `completed`.
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub stages: Vec<StagePlan>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrent_pools: Option<usize>,
    pub failed_pools: usize,
    pub on_halt: OnHalt,
    /// `NAME (for Ns): QUERY`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gates: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StagePlan {
    pub name: String,
    pub pools: usize,
    /// Its pools this plan has something to roll for.
    pub rolling: usize,
    pub soak_seconds: u64,
    /// `waiting`, `rolling`, `soaking until ...`, `passed`, or what it waits for.
    pub state: String,
    /// Its first pools, in admission order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub first: Vec<String>,
}

/// A pool's way back: its change halted with `onHalt: rollback`, and this is
/// the template the pool had before it.
#[derive(Clone, Debug)]
pub(super) struct TurnBack {
    pub template: NodeTemplate,
    pub reason: String,
}

/// The template `pool` goes back to, when its FleetRollout's change halted
/// with `onHalt: rollback` after admitting it (the planner builds the roll
/// back like any roll).
pub(super) fn turned_back(view: &FleetView, pool: &str) -> Option<TurnBack> {
    let c = &view.change;
    let Verdict::RollBack { to } = verdict(c, &view.rules, pool) else {
        return None;
    };
    let template = c.templates.get(&to)?.clone();
    let reason = match &c.status {
        ChangeStatus::Halted { reason, .. } => format!(
            "change {} of fleet rollout {} halted ({reason}); onHalt: rollback",
            c.id, view.rules.fleet
        ),
        _ => format!("change {} halted", c.id),
    };
    Some(TurnBack { template, reason })
}

/// Follow the FleetRollout governing the pool: note its stage, and hold its
/// roll (no `Roll` step) when the change says to wait. A pool it turned
/// round (`turned_back`) was planned by the planner's roll builder.
pub(super) fn govern(p: &mut PoolPlan, view: &FleetView, turned_back: bool) {
    let rules = &view.rules;
    let c = &view.change;
    let Some(stage) = rules.stage_of(&p.pool) else {
        return;
    };
    let mut place = PoolFleet {
        name: rules.fleet.clone(),
        change: c.id.clone(),
        stage: rules.stages[stage].name.clone(),
        stage_number: stage + 1,
        stages: rules.stages.len(),
        held: None,
        rollback: turned_back,
    };
    if !turned_back
        && let Verdict::Hold(hold) = verdict(c, rules, &p.pool)
        && p.rollout.is_some()
    {
        // Only a roll waits: creates, scale-ups and in-place edits go ahead.
        p.steps.retain(|s| !matches!(s, Step::Roll { .. }));
        place.held = Some(Said::new(hold));
    }
    p.fleet = Some(place);
}

/// Each FleetRollout's stage plan, from its view and the pools' plans.
pub fn stage_plans<'a>(
    views: impl IntoIterator<Item = (&'a String, &'a FleetView)>,
    pools: &[PoolPlan],
) -> Vec<FleetPlan> {
    views
        .into_iter()
        .map(|(name, view)| {
            let c = &view.change;
            let rules = view.rules.for_change(c);
            let current = current_stage(c, rules);
            let stages = rules
                .stages
                .iter()
                .enumerate()
                .map(|(i, s)| {
                    let rolling = s
                        .pools
                        .iter()
                        .filter(|p| {
                            pools
                                .binary_search_by(|x| x.pool.as_str().cmp(p))
                                .ok()
                                .is_some_and(|k| pools[k].rollout.is_some())
                                || matches!(c.pools.get(*p), Some(PoolRecord::Rolling { .. }))
                        })
                        .count();
                    let state = match c.record(&s.name) {
                        Some(r) if r.passed_at.is_some() => "passed".to_string(),
                        Some(_) => stage_waits(c, rules, i).replace("is rolling", "rolling"),
                        None if i == current => format!("next: {}", stage_waits(c, rules, i)),
                        None => "waiting".into(),
                    };
                    StagePlan {
                        name: s.name.clone(),
                        pools: s.pools.len(),
                        rolling,
                        soak_seconds: s.soak.as_secs(),
                        state,
                        first: s.pools.iter().take(5).cloned().collect(),
                    }
                })
                .collect();
            FleetPlan {
                name: name.clone(),
                change: c.id.clone(),
                new: view.new,
                status: c.status.as_str().into(),
                reason: match &c.status {
                    ChangeStatus::Halted { reason, .. } | ChangeStatus::Paused { reason, .. } => {
                        Some(reason.clone())
                    }
                    _ => None,
                },
                stages,
                max_concurrent_pools: rules.max_concurrent_pools,
                failed_pools: rules.failed_pools,
                on_halt: rules.on_halt,
                gates: rules
                    .gates
                    .iter()
                    .map(|g| format!("{} (for {}s): {}", g.name, g.hold_for.as_secs(), g.query))
                    .collect(),
            }
        })
        .collect()
}

/// What a pool's plan says for its FleetRollout: nothing to roll, something
/// to roll (or a roll under way), a failure that waits for a human, a pause,
/// or no plan at all.
pub fn fact_of(
    p: &PoolPlan,
    journal: Option<&crate::rollout::RolloutState>,
    worker_running: bool,
) -> crate::fleet::PoolFact {
    use crate::fleet::PoolFact;
    use crate::rollout::Status;
    if worker_running {
        return PoolFact::Rolls;
    }
    // Turned round by its change's halt: rolling back until it is back.
    if p.fleet.as_ref().is_some_and(|f| f.rollback) {
        return match p.rollout {
            Some(_) => PoolFact::Rolls,
            None => PoolFact::RolledBack("back on the template it had before the change".into()),
        };
    }
    match journal.map(|j| &j.status) {
        Some(Status::Degraded { reason }) => return PoolFact::Failed(reason.clone()),
        Some(Status::RolledBack { reason, .. }) if p.waiting().is_some() => {
            return PoolFact::RolledBack(reason.clone());
        }
        Some(Status::Paused { reason }) => return PoolFact::Paused(reason.clone()),
        _ => {}
    }
    if p.headline == super::Headline::Error {
        return PoolFact::Error(p.reason.clone());
    }
    let running = journal.is_some_and(|j| !j.status.is_terminal());
    if p.rollout.is_some() || running {
        PoolFact::Rolls
    } else {
        PoolFact::InSync
    }
}
