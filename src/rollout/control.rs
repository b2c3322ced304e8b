//! A human's hand on a rollout, as pure transitions of its journal state:
//! pause and resume. `reconcile::control` loads and saves the journal around
//! them; the executor picks the new status up on its next round.

use jiff::Timestamp;

use super::state::{Mark, RolloutState, Status};

/// Why a pause or resume did nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("nodepool.{pool}: not running ({status}); nothing to pause")]
    NotRunning { pool: String, status: String },
    #[error("nodepool.{pool}: {status}; nothing to resume")]
    NothingToResume { pool: String, status: String },
}

pub fn describe(s: &Status) -> String {
    match s {
        Status::Running => "running".into(),
        Status::Paused { reason } => format!("paused: {reason}"),
        Status::Degraded { reason } => format!("Degraded: {reason}"),
        Status::Completed => "completed".into(),
        Status::RolledBack { reason, .. } => format!("rolled back: {reason}"),
    }
}

/// Stop starting new steps (steps in flight finish).
pub fn pause(r: &mut RolloutState, who: &str, now: Timestamp) -> Result<String, Refused> {
    let pool = r.pool.clone();
    if r.status != Status::Running {
        return Err(Refused::NotRunning {
            pool,
            status: describe(&r.status),
        });
    }
    r.status = Status::Paused {
        reason: format!("paused by {who} at {now}"),
    };
    Ok(format!(
        "nodepool.{pool}: paused; `poolwright rollout resume {pool}` continues it"
    ))
}

/// What resuming does to a journal.
#[derive(Clone, Debug, PartialEq)]
pub enum Resumed {
    /// The rollout continues from this state.
    Continue(Box<RolloutState>, String),
    /// A rolled-back rollout is forgotten, so its template may be tried again.
    Forget(String),
}

/// Continue a paused or Degraded rollout, or allow a rolled-back template to
/// be tried again. Every way the executor can stop has a way out here: a
/// tripped circuit breaker is reset, and a node whose drain timed out (left
/// cordoned by `onTimeout: fail`, or quarantined) is drained again from now,
/// with a new `drain.timeout`.
pub fn resume(r: &RolloutState, now: Timestamp) -> Result<Resumed, Refused> {
    let pool = &r.pool;
    match &r.status {
        Status::Paused { .. } | Status::Degraded { .. } => {
            let mut r = r.clone();
            if r.failures >= r.settings.max_failed_nodes {
                r.failures = 0;
            }
            let mut retried = 0;
            for mark in r.marks.values_mut() {
                if matches!(mark, Mark::DrainFailed | Mark::Quarantined) {
                    *mark = Mark::Draining {
                        since: now,
                        blocked: None,
                    };
                    retried += 1;
                }
            }
            r.status = Status::Running;
            // Time spent stopped is not a lack of progress.
            r.last_progress_at = now;
            r.stall_reported = false;
            let message = match retried {
                0 => format!("nodepool.{pool}: resumed"),
                n => format!(
                    "nodepool.{pool}: resumed; the drain of {n} node(s) that timed out is tried again"
                ),
            };
            Ok(Resumed::Continue(Box::new(r), message))
        }
        Status::RolledBack { .. } => Ok(Resumed::Forget(format!(
            "nodepool.{pool}: the rolled-back template may be tried again"
        ))),
        other => Err(Refused::NothingToResume {
            pool: pool.clone(),
            status: describe(other),
        }),
    }
}

/// One line per node the rollout has touched.
pub fn describe_mark(mark: &Mark) -> String {
    match mark {
        Mark::Draining {
            blocked: Some(b), ..
        } => format!("draining, blocked: {b}"),
        Mark::Draining { since, .. } => format!("draining since {since}"),
        Mark::DrainFailed => "drain failed; cordoned".into(),
        Mark::Quarantined => "quarantined; cordoned".into(),
        Mark::Terminating { at } => format!("terminating since {at}"),
        Mark::Reimaging { at } => format!("reimaging since {at}"),
        Mark::Uncordoning => "returning to service".into(),
    }
}
