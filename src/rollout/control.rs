//! A human's hand on a rollout: pause and resume, as journal edits. The CLI
//! makes them under the state lock; the daemon makes them between a pool's
//! steps. Either way the executor picks the new status up on its next round.

use super::journal::Journal;
use super::state::{Mark, RolloutState, Status};

/// What a pause or resume did, in one sentence for the operator; `Err` when
/// there was nothing to do (and why).
pub type Outcome = Result<String, String>;

pub fn describe(s: &Status) -> String {
    match s {
        Status::Running => "running".into(),
        Status::Paused { reason } => format!("paused: {reason}"),
        Status::Degraded { reason } => format!("Degraded: {reason}"),
        Status::Completed => "completed".into(),
        Status::RolledBack { reason, .. } => format!("rolled back: {reason}"),
    }
}

async fn load(journal: &Journal, pool: &str) -> Result<RolloutState, String> {
    journal
        .load(pool)
        .await
        .map_err(|e| format!("{e:#}"))?
        .ok_or_else(|| format!("nodepool.{pool}: no rollout in progress"))
}

/// Stop starting new steps (steps in flight finish).
pub async fn pause(journal: &Journal, pool: &str, who: &str, now: jiff::Timestamp) -> Outcome {
    let mut r = load(journal, pool).await?;
    if r.status != Status::Running {
        return Err(format!(
            "nodepool.{pool}: not running ({}); nothing to pause",
            describe(&r.status)
        ));
    }
    r.status = Status::Paused {
        reason: format!("paused by {who} at {now}"),
    };
    journal.save(&r).await.map_err(|e| format!("{e:#}"))?;
    Ok(format!(
        "nodepool.{pool}: paused; `poolwright rollout resume {pool}` continues it"
    ))
}

/// Continue a paused or Degraded rollout (resetting a tripped circuit breaker),
/// or allow a rolled-back template to be tried again.
pub async fn resume(journal: &Journal, pool: &str) -> Outcome {
    let mut r = load(journal, pool).await?;
    match &r.status {
        Status::Paused { .. } | Status::Degraded { .. } => {
            if r.failures >= r.settings.max_failed_nodes {
                r.failures = 0;
            }
            r.status = Status::Running;
            journal.save(&r).await.map_err(|e| format!("{e:#}"))?;
            Ok(format!("nodepool.{pool}: resumed"))
        }
        Status::RolledBack { .. } => {
            journal.remove(pool).await.map_err(|e| format!("{e:#}"))?;
            Ok(format!(
                "nodepool.{pool}: the rolled-back template may be tried again"
            ))
        }
        other => Err(format!(
            "nodepool.{pool}: {}; nothing to resume",
            describe(other)
        )),
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
    }
}
