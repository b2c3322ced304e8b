//! `poolwright rollout pause|resume|status POOL`: a human's hand on a rollout.
//! With a daemon running on the state directory, pause and resume go through
//! its API (it applies them at the pool's next safe point); otherwise they are
//! journal edits made under the state lock, so no apply acts meanwhile.

use std::path::Path;

use super::exit;
use crate::daemon::client::Client;
use crate::reconcile::control;
use crate::rollout::control::{describe, describe_mark};
use crate::store::Journal;
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

pub(super) fn rollout(
    action: RolloutAction,
    pool: &str,
    state_dir: &Path,
    reason: Option<&str>,
) -> anyhow::Result<u8> {
    let state = StateDir::new(state_dir);
    let journal = Journal::new(state.journal_dir());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    if action == RolloutAction::Status {
        // The journal itself when it can be read; else through a running
        // daemon (its group's members reach its socket, not its files).
        let unread = match rt.block_on(journal.load(pool)) {
            Ok(r) => return Ok(print_status(r.as_ref(), pool)),
            Err(e) => e,
        };
        let Some(daemon) = rt.block_on(Client::find(&state.root)) else {
            return Err(unreadable(&state.root, unread));
        };
        let r: Option<crate::rollout::RolloutState> =
            rt.block_on(daemon.get_json(&format!("/v1/pools/{pool}/rollout")))?;
        return Ok(print_status(r.as_ref(), pool));
    }
    if let Some(daemon) = rt.block_on(Client::find_control(&state.root)) {
        let verb = if action == RolloutAction::Pause {
            "pause"
        } else {
            "resume"
        };
        let body = serde_json::json!({ "reason": reason });
        let answer = rt.block_on(daemon.post_json(&format!("/v1/pools/{pool}/{verb}"), &body))?;
        return Ok(match answer {
            Ok(message) => {
                println!("{message} (through the daemon's control socket)");
                exit::OK
            }
            Err(message) => {
                println!("{message}");
                exit::FAILED
            }
        });
    }
    let _lock = StateLock::acquire(
        &state.root,
        &format!("poolwright rollout {action:?} {pool}").to_lowercase(),
    )
    .map_err(|e| unreadable(&state.root, e))?;
    let who = match reason {
        Some(reason) => format!("a human: {reason}"),
        None => "a human".to_string(),
    };
    let result = match action {
        RolloutAction::Pause => {
            rt.block_on(control::pause(&journal, pool, &who, jiff::Timestamp::now()))
        }
        _ => rt
            .block_on(control::resume(&journal, pool, jiff::Timestamp::now()))
            .map(|m| format!("{m}; the next `poolwright apply` (or the daemon) continues")),
    };
    Ok(match result {
        Ok(message) => {
            println!("{message}");
            exit::OK
        }
        Err(message) => {
            println!("{message}");
            exit::FAILED
        }
    })
}

/// What to do when no daemon answers and the state directory's files
/// cannot be used either (a member of the control group, say).
fn unreadable(state: &Path, e: impl std::fmt::Display) -> anyhow::Error {
    anyhow::anyhow!(
        "{e}\nNo daemon answers on {} and the state directory cannot be used directly: \
         start the daemon, or run this as the daemon's user",
        crate::daemon::listen::control_socket_path(state).display()
    )
}

fn print_status(r: Option<&crate::rollout::RolloutState>, pool: &str) -> u8 {
    let Some(r) = r else {
        println!("nodepool.{pool}: no rollout in progress");
        return exit::OK;
    };
    let s = &r.settings;
    println!("nodepool.{pool}: {}", describe(&r.status));
    println!(
        "  target template {}, size {}, surge {}, unavailable {}, floor {}",
        r.target,
        s.size,
        s.budget.surge,
        s.budget.unavailable,
        r.floor()
    );
    println!(
        "  started {}, {} old node(s) removed, {} failure(s)",
        r.started_at, r.removed, r.failures
    );
    for (node, mark) in &r.marks {
        println!("  {node}: {}", describe_mark(mark));
    }
    for (node, why) in &r.held {
        println!("  {node}: held by do-not-disrupt ({why}); left in service");
    }
    exit::OK
}
