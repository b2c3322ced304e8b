//! Pause and resume as journal edits: load the rollout's journal, apply the
//! pure transition (`rollout::control`), save it. The CLI makes them under the
//! state lock; the daemon between a pool's steps.

use crate::rollout::RolloutState;
use crate::rollout::control::{self, Resumed};
use crate::store::Journal;

/// What a pause or resume did, in one sentence for the operator; `Err` when
/// there was nothing to do (and why).
pub type Outcome = Result<String, String>;

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
    let message = control::pause(&mut r, who, now)?;
    journal.save(&r).await.map_err(|e| format!("{e:#}"))?;
    Ok(message)
}

/// Continue a paused or Degraded rollout, or allow a rolled-back template to
/// be tried again.
pub async fn resume(journal: &Journal, pool: &str, now: jiff::Timestamp) -> Outcome {
    let r = load(journal, pool).await?;
    match control::resume(&r, now)? {
        Resumed::Continue(r, message) => {
            journal.save(&r).await.map_err(|e| format!("{e:#}"))?;
            Ok(message)
        }
        Resumed::Forget(message) => {
            journal.remove(pool).await.map_err(|e| format!("{e:#}"))?;
            Ok(message)
        }
    }
}
