//! Pause and resume as journal edits: load the rollout's journal, apply the
//! pure transition (`rollout::control`), save it. The CLI makes them under the
//! state lock; the daemon between a pool's steps.

use crate::rollout::RolloutState;
use crate::rollout::control::{self, Refused, Resumed};
use crate::store::Journal;

/// Why a pause or resume did nothing.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error("nodepool.{0}: no rollout in progress")]
    NoRollout(String),
    #[error(transparent)]
    Refused(#[from] Refused),
    /// The journal could not be read or written.
    #[error("{0:#}")]
    Journal(#[from] anyhow::Error),
}

async fn load(journal: &Journal, pool: &str) -> Result<RolloutState, ControlError> {
    journal
        .load(pool)
        .await?
        .ok_or_else(|| ControlError::NoRollout(pool.to_string()))
}

/// Stop starting new steps (steps in flight finish). What it did, in one
/// sentence for the operator; `Err` when there was nothing to do (and why).
pub async fn pause(
    journal: &Journal,
    pool: &str,
    who: &str,
    now: jiff::Timestamp,
) -> Result<String, ControlError> {
    let mut r = load(journal, pool).await?;
    let message = control::pause(&mut r, who, now)?;
    journal.save(&r).await?;
    Ok(message)
}

/// Continue a paused or Degraded rollout, or allow a rolled-back template to
/// be tried again.
pub async fn resume(
    journal: &Journal,
    pool: &str,
    now: jiff::Timestamp,
) -> Result<String, ControlError> {
    let r = load(journal, pool).await?;
    match control::resume(&r, now)? {
        Resumed::Continue(r, message) => {
            journal.save(&r).await?;
            Ok(message)
        }
        Resumed::Forget(message) => {
            journal.remove(pool).await?;
            Ok(message)
        }
    }
}
