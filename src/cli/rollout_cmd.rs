//! `poolwright rollout pause|resume|status POOL`: a human's hand on a rollout,
//! through its journal (under the state lock, so no apply acts meanwhile).

use std::path::Path;

use super::exit;
use crate::rollout::{Journal, Mark, Status};
use crate::store::{StateDir, StateLock};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum RolloutAction {
    /// Stop starting new steps (steps in flight finish)
    Pause,
    /// Continue a paused or Degraded rollout (resets the circuit breaker),
    /// or allow a rolled-back template to be tried again
    Resume,
    /// Show the rollout's state
    Status,
}

pub(super) fn rollout(action: RolloutAction, pool: &str, state_dir: &Path) -> anyhow::Result<u8> {
    let state = StateDir::new(state_dir);
    let journal = Journal::new(state.journal_dir());
    let _lock = match action {
        RolloutAction::Status => None,
        _ => Some(StateLock::acquire(
            &state.root,
            &format!("poolwright rollout {action:?} {pool}").to_lowercase(),
        )?),
    };
    let Some(mut r) = journal.load(pool)? else {
        println!("nodepool.{pool}: no rollout in progress");
        return Ok(if action == RolloutAction::Status {
            exit::OK
        } else {
            exit::FAILED
        });
    };
    match action {
        RolloutAction::Status => {
            let s = &r.settings;
            println!("nodepool.{pool}: {}", describe(&r.status));
            println!(
                "  target template {}, size {}, surge {}, unavailable {}, floor {}",
                r.target, s.size, s.budget.surge, s.budget.unavailable, r.floor
            );
            println!(
                "  started {}, {} old node(s) removed, {} failure(s)",
                r.started_at, r.removed, r.failures
            );
            for (node, mark) in &r.marks {
                let what = match mark {
                    Mark::Draining {
                        blocked: Some(b), ..
                    } => format!("draining, blocked: {b}"),
                    Mark::Draining { since, .. } => format!("draining since {since}"),
                    Mark::DrainFailed => "drain failed; cordoned".into(),
                    Mark::Quarantined => "quarantined; cordoned".into(),
                    Mark::Terminating { at } => format!("terminating since {at}"),
                    Mark::Reimaging { at } => format!("reimaging since {at}"),
                };
                println!("  {node}: {what}");
            }
            return Ok(exit::OK);
        }
        RolloutAction::Pause => {
            if r.status != Status::Running {
                println!(
                    "nodepool.{pool}: not running ({}); nothing to pause",
                    describe(&r.status)
                );
                return Ok(exit::FAILED);
            }
            r.status = Status::Paused {
                reason: format!("paused by a human at {}", jiff::Timestamp::now()),
            };
            journal.save(&r)?;
            println!("nodepool.{pool}: paused; `poolwright rollout resume {pool}` continues it");
        }
        RolloutAction::Resume => match &r.status {
            Status::Paused { .. } | Status::Degraded { .. } => {
                if r.failures >= r.settings.max_failed_nodes {
                    r.failures = 0;
                }
                r.status = Status::Running;
                journal.save(&r)?;
                println!(
                    "nodepool.{pool}: resumed; the next `poolwright apply` (or the daemon) continues it"
                );
            }
            Status::RolledBack { .. } => {
                journal.remove(pool)?;
                println!(
                    "nodepool.{pool}: the rolled-back template may be tried again by the next apply"
                );
            }
            other => {
                println!("nodepool.{pool}: {}; nothing to resume", describe(other));
                return Ok(exit::FAILED);
            }
        },
    }
    Ok(exit::OK)
}

fn describe(s: &Status) -> String {
    match s {
        Status::Running => "running".into(),
        Status::Paused { reason } => format!("paused: {reason}"),
        Status::Degraded { reason } => format!("Degraded: {reason}"),
        Status::Completed => "completed".into(),
        Status::RolledBack { reason, .. } => format!("rolled back: {reason}"),
    }
}
