//! `poolwright fleet status|pause|resume [NAME]`: where a change across
//! pools is, and an operator's hand on it. Through the running daemon: its
//! `/v1/fleet` for status, its control socket for pause and resume (the same
//! authority as `rollout pause|resume`).

use std::fmt::Write as _;
use std::path::Path;

use super::{Output, exit};
use crate::daemon::client::Client;
use crate::fleet::{ChangeStatus, GateOutcome};
use crate::reconcile::fleet::FleetStatus;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum FleetAction {
    /// Show each FleetRollout's change: its stage, its pools, its gates, a halt
    Status,
    /// Start no further pool of the change; pools rolling stop at a safe point
    Pause,
    /// Continue a paused or halted change (a halted one needs --reason)
    Resume,
}

pub(super) fn fleet(
    action: FleetAction,
    name: Option<&str>,
    state_dir: &Path,
    url: Option<&str>,
    reason: Option<&str>,
    output: Output,
) -> anyhow::Result<u8> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let no_daemon = || {
        anyhow::anyhow!(
            "no daemon is running on state directory {} (a change across pools is driven by `poolwright run`; pass --url for status elsewhere)",
            state_dir.display()
        )
    };
    if action != FleetAction::Status {
        let name = name.ok_or_else(|| {
            anyhow::anyhow!("name the FleetRollout (or the id of its change) to {action:?}")
        })?;
        if action == FleetAction::Resume && reason.is_none_or(|r| r.trim().is_empty()) {
            anyhow::bail!(
                "resuming a change across pools overrides what stopped it: say why with --reason"
            );
        }
        let Some(daemon) = rt.block_on(Client::find_control(state_dir)) else {
            return journaled(action, name, state_dir, reason, &rt);
        };
        let verb = if action == FleetAction::Pause {
            "pause"
        } else {
            "resume"
        };
        let body = serde_json::json!({ "reason": reason });
        let path = format!("/v1/fleet/{}/{verb}", encode(name));
        return Ok(match rt.block_on(daemon.post_json(&path, &body))? {
            Ok(message) => {
                println!("{message}");
                exit::OK
            }
            Err(message) => {
                eprintln!("{message}");
                exit::FAILED
            }
        });
    }
    let client = match url {
        Some(u) => Client::at(u),
        None => rt.block_on(Client::find(state_dir)).ok_or_else(no_daemon)?,
    };
    let all: FleetList = rt.block_on(client.get_json("/v1/fleet"))?;
    let shown: Vec<&FleetStatus> = all
        .fleets
        .iter()
        .filter(|f| {
            name.is_none_or(|n| f.name == n || f.change.as_ref().is_some_and(|c| c.id == n))
        })
        .collect();
    if let Some(n) = name
        && shown.is_empty()
    {
        anyhow::bail!("no FleetRollout or change named {n:?} in the daemon's desired state");
    }
    match output {
        Output::Json => println!("{}", serde_json::to_string_pretty(&shown)?),
        Output::Text => {
            if shown.is_empty() {
                println!("No FleetRollout in the desired state in force.");
            }
            for f in &shown {
                print!("{}", render(f));
            }
        }
    }
    let halted = shown.iter().any(|f| {
        f.change
            .as_ref()
            .is_some_and(|c| matches!(c.status, ChangeStatus::Halted { .. }))
    });
    Ok(if halted { exit::FAILED } else { exit::OK })
}

/// No daemon runs: the change's journal is edited under the state lock (so
/// no apply acts meanwhile); the next `apply` (or the daemon) follows it.
fn journaled(
    action: FleetAction,
    name: &str,
    state_dir: &Path,
    reason: Option<&str>,
    rt: &tokio::runtime::Runtime,
) -> anyhow::Result<u8> {
    use crate::reconcile::fleet::{FleetControl, control_journaled};
    let state = crate::store::StateDir::new(state_dir);
    let _lock = crate::store::StateLock::acquire(
        &state.root,
        &format!("poolwright fleet {action:?} {name}").to_lowercase(),
    )?;
    let journal = crate::store::FleetJournal::new(state.fleet_dir());
    let control = if action == FleetAction::Pause {
        FleetControl::Pause
    } else {
        FleetControl::Resume
    };
    let who = format!("a human ({})", crate::store::overrides::operator());
    let why = reason.unwrap_or("no reason given").to_string();
    let mut resumed = None;
    let mut found = false;
    rt.block_on(journal.update(name, |current| {
        let mut s = current?;
        found = true;
        resumed = control_journaled(&mut s.change, &control, &who, &why, jiff::Timestamp::now());
        resumed.is_some().then_some(s)
    }))
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    if !found {
        anyhow::bail!(
            "no journal of FleetRollout {name:?} in {} (name the FleetRollout, not its change, when no daemon runs)",
            state.fleet_dir().display()
        );
    }
    let Some(pools) = resumed else {
        let verb = format!("{action:?}").to_lowercase();
        println!("fleet rollout {name}: its change is not in a state to {verb}");
        return Ok(exit::FAILED);
    };
    let rollouts = crate::store::Journal::new(state.journal_dir());
    for pool in pools {
        if let Ok(m) = rt.block_on(crate::reconcile::control::resume(
            &rollouts,
            &pool,
            jiff::Timestamp::now(),
        )) {
            println!("{m}");
        }
    }
    println!(
        "fleet rollout {name}: {}; the next `poolwright apply` (or the daemon) follows it",
        if action == FleetAction::Pause {
            "paused"
        } else {
            "resumed"
        }
    );
    Ok(exit::OK)
}

#[derive(serde::Deserialize)]
struct FleetList {
    fleets: Vec<FleetStatus>,
}

/// A name for a URL path: only what a FleetRollout name or a change id holds.
fn encode(name: &str) -> String {
    url::form_urlencoded::byte_serialize(name.as_bytes()).collect()
}

fn when(t: jiff::Timestamp) -> String {
    t.strftime("%Y-%m-%d %H:%M:%S UTC").to_string()
}

/// One FleetRollout, as a person reads it.
pub fn render(f: &FleetStatus) -> String {
    let mut out = String::new();
    let Some(c) = &f.change else {
        let _ = writeln!(out, "fleet rollout {}: no change yet", f.name);
        return out;
    };
    let _ = writeln!(
        out,
        "fleet rollout {}: change {} {} (started {})",
        f.name,
        c.id,
        c.status.as_str(),
        when(c.started_at)
    );
    match &c.status {
        ChangeStatus::Halted { reason, at, .. } => {
            let _ = writeln!(out, "  HALTED at {}: {reason}", when(*at));
            let _ = writeln!(
                out,
                "  nothing more of this change starts; `poolwright fleet resume {} --reason ...` after looking into it",
                f.name
            );
        }
        ChangeStatus::Paused { by, reason, at } => {
            let _ = writeln!(out, "  paused at {} by {by}: {reason}", when(*at));
        }
        ChangeStatus::Completed { at } => {
            let _ = writeln!(out, "  every stage passed at {}", when(*at));
        }
        ChangeStatus::Running => {
            if let Some(w) = &f.waiting {
                let _ = writeln!(out, "  now: {}", w.message);
            }
        }
    }
    if let Some(e) = &f.error {
        let _ = writeln!(out, "  error: {e}");
    }
    for (i, s) in f.stages.iter().enumerate() {
        let state = match &s.record {
            None => "not started".to_string(),
            Some(r) => match (r.completed_at, r.soak_until, r.passed_at) {
                (_, _, Some(p)) => format!("passed {}", when(p)),
                (Some(_), Some(u), None) if r.rolled > 0 => format!("soaking until {}", when(u)),
                (Some(_), _, None) => "done, waiting for its gates".into(),
                (None, _, _) => format!("rolling since {}", when(r.started_at)),
            },
        };
        let _ = writeln!(
            out,
            "  stage {} {}: {} pool(s): {} done, {} rolling, {} waiting, {} failed; {state}",
            i + 1,
            s.name,
            s.pools,
            s.done,
            s.rolling,
            s.waiting,
            s.failed
        );
        let named: Vec<String> = s
            .cells
            .iter()
            .filter(|(_, cell)| {
                matches!(
                    cell.as_str(),
                    "rolling" | "stopped" | "failed" | "rolled-back"
                )
            })
            .take(10)
            .map(|(pool, cell)| format!("{pool} ({cell})"))
            .collect();
        if !named.is_empty() {
            let _ = writeln!(out, "    {}", named.join(", "));
        }
    }
    for (name, g) in &c.gates {
        let last = g.last.as_ref().map(|r| {
            let what = match &r.outcome {
                GateOutcome::Holds { value } => format!("holds ({value})"),
                GateOutcome::Breached { value } => format!("BREACHED ({value})"),
                GateOutcome::Unknown { error } => format!("cannot be read: {error}"),
            };
            format!("{what}, read {}", when(r.at))
        });
        let _ = writeln!(
            out,
            "  gate {name}: {}{}",
            last.unwrap_or_else(|| "not read yet".into()),
            g.holding_since
                .map(|s| format!(", holding since {}", when(s)))
                .unwrap_or_default()
        );
    }
    for h in f.history.iter().take(3) {
        let _ = writeln!(
            out,
            "  earlier: change {} {}{} ({} rolled, {} failed)",
            h.id,
            h.status,
            h.superseded_by
                .as_ref()
                .map(|s| format!(", superseded by {s}"))
                .unwrap_or_default(),
            h.pools_rolled,
            h.pools_failed
        );
    }
    out
}
