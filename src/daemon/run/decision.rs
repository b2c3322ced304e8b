//! The daemon's per-pool choice, a pure function of what it knows about the
//! pool (its plan, its journal, its worker, this daemon's role), returning an
//! explicit next action, as a kube-runtime reconciler returns one. The
//! reconciler carries the action out (status board, a worker, a wake-up).

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};

use crate::daemon::views::board::PoolState;
use crate::plan::{Headline, PoolPlan};
use crate::reconcile::apply::describe_step;
use crate::rollout::Status;

/// What the daemon knows about one pool in this round.
pub struct PoolFacts<'a> {
    pub plan: &'a PoolPlan,
    /// Its rollout journal's status, when it has one.
    pub journal: Option<&'a Status>,
    /// The key of the work planned now (`plan::work_key`).
    pub key: &'a str,
    /// The key of the work its running worker was given, if one runs.
    pub worker: Option<&'a str>,
    /// This daemon may act (not a standby, its fence holds).
    pub may_act: bool,
    /// Why not, when it may not.
    pub standby_note: &'a str,
    pub dry_run: bool,
    /// The key and end of its last worker.
    pub last_finished: Option<(&'a str, Timestamp)>,
    pub retry_after: Duration,
    pub now: Timestamp,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PoolAction {
    /// Its worker runs the work planned now: let it.
    Busy,
    /// Its worker runs older work: stop it at its next safe point; a new one
    /// starts when it has ended.
    Supersede,
    /// Nothing to do; show this.
    Show(PoolState, String),
    /// It could not be planned: show it as an error (and its last error).
    Error(String),
    /// The same work ended recently: look again at this instant.
    RetryAt(Timestamp),
    /// Start a worker on the planned steps.
    Spawn,
}

/// A pool's due steps, in one line.
pub fn steps(p: &PoolPlan) -> String {
    p.steps
        .iter()
        .map(describe_step)
        .collect::<Vec<_>>()
        .join(", then ")
}

pub fn choose_action(f: &PoolFacts) -> PoolAction {
    let p = f.plan;
    if let Some(running) = f.worker {
        return if running == f.key {
            PoolAction::Busy
        } else {
            PoolAction::Supersede
        };
    }
    // A rollout waiting for a human is shown as such and left alone; but
    // a halted change's roll back supersedes a rollout Degraded on the
    // template it brought (that is what a bad template leaves).
    let turning_back = p.steps.iter().any(|s| {
        matches!(
            s,
            crate::plan::Step::Roll {
                rollback: Some(_),
                ..
            }
        )
    });
    match f.journal {
        Some(Status::Paused { reason }) => {
            return PoolAction::Show(
                PoolState::Paused,
                format!(
                    "rollout paused ({reason}); `poolwright rollout resume {}` continues it",
                    p.pool
                ),
            );
        }
        Some(Status::Degraded { reason }) if !turning_back => {
            return PoolAction::Show(
                PoolState::Degraded,
                format!(
                    "rollout Degraded: {reason}; `poolwright rollout resume {}` after looking into it",
                    p.pool
                ),
            );
        }
        _ => {}
    }
    if let Some(why) = p.waiting() {
        // Rolled back from the template the files still ask for.
        return PoolAction::Show(PoolState::Degraded, why.to_string());
    }
    match p.headline {
        Headline::Error => return PoolAction::Error(p.reason.clone()),
        Headline::LeftAlone => return PoolAction::Show(PoolState::LeftAlone, p.reason.clone()),
        _ => {}
    }
    // A FleetRollout holds its roll (a later stage, no free slot, a halt);
    // any other step goes ahead.
    if !p.has_changes()
        && let Some(held) = p.fleet.as_ref().and_then(|f| f.held.as_ref())
    {
        return PoolAction::Show(PoolState::Held, held.message.clone());
    }
    if !p.has_changes() {
        return match p.blocked() {
            Some(b) => PoolAction::Show(PoolState::Blocked, b.with_until()),
            None => PoolAction::Show(PoolState::InSync, "matches the desired state".into()),
        };
    }
    if !f.may_act {
        return PoolAction::Show(
            PoolState::Pending,
            format!("{}; the leader would {}", f.standby_note, steps(p)),
        );
    }
    if f.dry_run {
        return PoolAction::Show(PoolState::Pending, format!("dry-run: would {}", steps(p)));
    }
    if let Some((last, at)) = f.last_finished
        && last == f.key
    {
        let due = at
            .saturating_add(SignedDuration::try_from(f.retry_after).unwrap_or_default())
            .unwrap_or(at);
        if f.now < due {
            return PoolAction::RetryAt(due);
        }
    }
    PoolAction::Spawn
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{Hold, Step};

    fn plan(headline: Headline, steps: Vec<Step>) -> PoolPlan {
        PoolPlan {
            pool: "web".into(),
            provider: "sim".into(),
            cluster: None,
            headline,
            reason: "because".into(),
            attributes: vec![],
            steps,
            rollout: None,
            hold: None,
            drift: vec![],
            prevent_destroy: false,
            policy_overridden: None,
            notes: vec![],
            fleet: None,
            preflight: None,
            deferred: None,
        }
    }

    fn now() -> Timestamp {
        "2026-12-02T12:00:00Z".parse().unwrap()
    }

    fn facts<'a>(p: &'a PoolPlan) -> PoolFacts<'a> {
        PoolFacts {
            plan: p,
            journal: None,
            key: "k2",
            worker: None,
            may_act: true,
            standby_note: "x holds the lease",
            dry_run: false,
            last_finished: None,
            retry_after: Duration::from_secs(30),
            now: now(),
        }
    }

    #[test]
    fn each_situation_and_its_action() {
        let scale = || {
            vec![Step::Scale {
                from: 3,
                to: 4,
                settings: None,
            }]
        };
        let work = plan(Headline::Update, scale());
        let idle = plan(Headline::NoOp, vec![]);
        let mut blocked = plan(Headline::RollCreateFirst, vec![]);
        blocked.hold = Some(Hold::Policy {
            policy: "disruption policy Block".into(),
            until: None,
            timezone: None,
        });
        let mut held = plan(Headline::RollCreateFirst, vec![]);
        held.fleet = Some(crate::plan::fleet::PoolFleet {
            name: "rings".into(),
            change: "main@abc".into(),
            stage: "rest".into(),
            stage_number: 3,
            stages: 3,
            held: Some(crate::model::said::Said::new(
                crate::fleet::StageWait::Stage {
                    fleet: "rings".into(),
                    change: "main@abc".into(),
                    stage: "rest".into(),
                    current: "canary".into(),
                    waits: "is rolling".into(),
                },
            )),
            rollback: false,
        });
        let paused = Status::Paused {
            reason: "by ops".into(),
        };
        let later = now().saturating_add(SignedDuration::from_secs(30)).unwrap();
        type Case<'a> = (&'a str, PoolFacts<'a>, PoolAction);
        let cases: Vec<Case> = vec![
            (
                "same work running",
                PoolFacts {
                    worker: Some("k2"),
                    ..facts(&work)
                },
                PoolAction::Busy,
            ),
            (
                "new work",
                PoolFacts {
                    worker: Some("k1"),
                    ..facts(&work)
                },
                PoolAction::Supersede,
            ),
            (
                "paused",
                PoolFacts {
                    journal: Some(&paused),
                    ..facts(&work)
                },
                PoolAction::Show(
                    PoolState::Paused,
                    "rollout paused (by ops); `poolwright rollout resume web` continues it".into(),
                ),
            ),
            (
                "in sync",
                facts(&idle),
                PoolAction::Show(PoolState::InSync, "matches the desired state".into()),
            ),
            (
                "blocked",
                facts(&blocked),
                PoolAction::Show(
                    PoolState::Blocked,
                    "blocked by disruption policy Block".into(),
                ),
            ),
            (
                "held by its change across pools",
                facts(&held),
                PoolAction::Show(
                    PoolState::Held,
                    "fleet rollout rings (change main@abc): stage rest starts after stage canary, which is rolling".into(),
                ),
            ),
            (
                "standby",
                PoolFacts {
                    may_act: false,
                    ..facts(&work)
                },
                PoolAction::Show(
                    PoolState::Pending,
                    "x holds the lease; the leader would scale 3 -> 4".into(),
                ),
            ),
            (
                "dry run",
                PoolFacts {
                    dry_run: true,
                    ..facts(&work)
                },
                PoolAction::Show(PoolState::Pending, "dry-run: would scale 3 -> 4".into()),
            ),
            (
                "just tried",
                PoolFacts {
                    last_finished: Some(("k2", now())),
                    ..facts(&work)
                },
                PoolAction::RetryAt(later),
            ),
            (
                "tried other work",
                PoolFacts {
                    last_finished: Some(("k1", now())),
                    ..facts(&work)
                },
                PoolAction::Spawn,
            ),
            ("go", facts(&work), PoolAction::Spawn),
        ];
        for (name, f, want) in cases {
            assert_eq!(choose_action(&f), want, "{name}");
        }
        let error = plan(Headline::Error, vec![]);
        assert_eq!(
            choose_action(&facts(&error)),
            PoolAction::Error("because".into())
        );
    }
}
