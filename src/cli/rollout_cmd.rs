//! `poolwright rollout pause|resume|status POOL`: a human's hand on a rollout.
//! With a daemon running on the state directory, pause and resume go through
//! its API (it applies them at the pool's next safe point); otherwise they are
//! journal edits made under the state lock, so no apply acts meanwhile.

use std::path::Path;

use super::exit;
use super::rollout_wait::Awaited;
use crate::daemon::client::Client;
use crate::reconcile::control;
use crate::rollout::control::{describe, describe_mark};
use crate::rollout::{RolloutState, Status};
use crate::store::{Activity, Journal, StateDir, StateLock};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RolloutAction {
    Pause,
    Resume,
}

/// `poolwright rollout SUBCOMMAND`.
#[derive(Debug, clap::Subcommand)]
pub enum RolloutCommand {
    /// Stop starting new steps of a pool's rollout (steps in flight finish)
    #[command(after_help = "Examples:\n  \
        poolwright rollout pause web --reason \"INC-4711: latency alarms\"\n  \
        poolwright rollout status web")]
    Pause {
        #[command(flatten)]
        target: RolloutTarget,
        /// Why (recorded in the daemon's log and the event, with who asked)
        #[arg(long, value_name = "TEXT")]
        reason: Option<String>,
    },
    /// Continue a paused or Degraded rollout (resets the circuit breaker), or
    /// allow a rolled-back template to be tried again
    #[command(after_help = "Examples:\n  \
        poolwright rollout resume web --reason \"alarms cleared\"")]
    Resume {
        #[command(flatten)]
        target: RolloutTarget,
        /// Why (recorded in the daemon's log and the event, with who asked)
        #[arg(long, value_name = "TEXT")]
        reason: Option<String>,
    },
    /// Show where a pool's rollout stands: its status, what runs it, its phase
    ///
    /// With --wait and a daemon running, it first waits for the daemon to have
    /// the pool's template as the files say it now (or at --revision, or the
    /// --template given), so a wait started right after an edit waits for
    /// that edit's roll, not the last one; then it follows the pool until
    /// every node runs that template, printing a line as it moves.
    ///
    /// Exit status: 0, or with --wait, 0 only once every node runs the
    /// template (completed) and 1 when its rollout is Degraded or rolled back,
    /// its change across pools halted, or the time ran out.
    #[command(after_help = "Examples:\n  \
        poolwright rollout status web\n  \
        poolwright rollout status web --wait --timeout 30m   # in CI, after a merge\n  \
        poolwright rollout status web --wait --revision main@1a2b3c4\n  \
        poolwright rollout status web -o json")]
    Status {
        #[command(flatten)]
        target: RolloutTarget,
        /// Wait until the rollout ends: exit 0 when it completed, 1 when it is
        /// Degraded, rolled back, or stopped (nothing runs it)
        #[arg(long)]
        wait: bool,
        /// With --wait, give up (exit 1) after this long
        #[arg(long, default_value = "1h", value_parser = super::parse_duration, value_name = "DURATION", requires = "wait")]
        timeout: std::time::Duration,
        /// With --wait: the roll of the pool's template once the daemon has
        /// this revision in force (`main@1a2b3c4`, or a commit of 7+ hex digits)
        #[arg(long, value_name = "REV", requires = "wait", conflicts_with = "template", value_parser = parse_revision)]
        revision: Option<String>,
        /// With --wait: the roll to this template hash (`plan -o json`: a
        /// pool's `rollout.target`)
        #[arg(long, value_name = "HASH", requires = "wait", value_parser = parse_template)]
        template: Option<String>,
        /// Output format (with --wait, the final state)
        #[arg(long, short, value_enum, default_value_t = super::Output::Text)]
        output: super::Output,
    },
}

/// The pool and the state directory its journal is in.
#[derive(Debug, clap::Args)]
pub struct RolloutTarget {
    /// The pool's name
    #[arg(value_parser = super::parse_pool_name)]
    pub pool: String,
    #[arg(long, env = "POOLWRIGHT_STATE_DIR", default_value = crate::store::DEFAULT_STATE_DIR, value_name = "DIR")]
    pub state_dir: std::path::PathBuf,
}

pub(super) fn run(cmd: RolloutCommand) -> anyhow::Result<u8> {
    match cmd {
        RolloutCommand::Pause { target, reason } => rollout(
            RolloutAction::Pause,
            &target.pool,
            &super::service_dir::state_dir(&target.state_dir),
            reason.as_deref(),
        ),
        RolloutCommand::Resume { target, reason } => rollout(
            RolloutAction::Resume,
            &target.pool,
            &super::service_dir::state_dir(&target.state_dir),
            reason.as_deref(),
        ),
        RolloutCommand::Status {
            target,
            wait,
            timeout,
            revision,
            template,
            output,
        } => {
            let awaited = match (revision, template) {
                (Some(r), _) => Awaited::Revision(r),
                (_, Some(t)) => Awaited::Template(t),
                _ => Awaited::Now,
            };
            status(
                &target.pool,
                &super::service_dir::state_dir(&target.state_dir),
                wait.then_some((timeout, awaited)),
                output,
            )
        }
    }
}

fn rollout(
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
        RolloutAction::Resume => rt
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
        crate::daemon::serve::listen::control_socket_path(state).display()
    )
}

/// Where a rollout stands, as `rollout status` reports it.
struct Standing {
    journal: Option<RolloutState>,
    /// Who acts on the state directory now, when that can be known.
    activity: Activity,
    /// Read through the daemon (which runs it), not from the journal.
    via_daemon: bool,
}

impl Standing {
    fn read(
        rt: &tokio::runtime::Runtime,
        pool: &str,
        state: &StateDir,
    ) -> anyhow::Result<Standing> {
        let journal = Journal::new(state.journal_dir());
        // The journal itself when it can be read; else through a running
        // daemon (its group's members reach its socket, not its files).
        let unread = match rt.block_on(journal.load(pool)) {
            Ok(r) => {
                return Ok(Standing {
                    journal: r,
                    activity: StateLock::activity(&state.root),
                    via_daemon: false,
                });
            }
            Err(e) => e,
        };
        let Some(daemon) = rt.block_on(Client::find(&state.root)) else {
            return Err(unreadable(&state.root, unread));
        };
        let r: Option<RolloutState> =
            rt.block_on(daemon.get_json(&format!("/v1/pools/{pool}/rollout")))?;
        Ok(Standing {
            journal: r,
            activity: Activity::Unknown,
            via_daemon: true,
        })
    }

    /// One word for scripts: none, running, stopped, paused, degraded,
    /// completed, rolled-back.
    fn word(&self) -> &'static str {
        match self.journal.as_ref().map(|r| &r.status) {
            None => "none",
            Some(Status::Running) if self.activity == Activity::Idle => "stopped",
            Some(Status::Running) => "running",
            Some(Status::Paused { .. }) => "paused",
            Some(Status::Degraded { .. }) => "degraded",
            Some(Status::Completed) => "completed",
            Some(Status::RolledBack { .. }) => "rolled-back",
        }
    }

    /// What runs it, in words.
    fn runner(&self) -> Option<String> {
        if self.via_daemon {
            return Some("the daemon".into());
        }
        match &self.activity {
            Activity::Held(Some(h)) => {
                Some(format!("{} (pid {}, since {})", h.command, h.pid, h.since))
            }
            Activity::Held(None) => Some("another poolwright process".into()),
            Activity::Idle | Activity::Unknown => None,
        }
    }

    /// The line that says what it is doing now and until when.
    fn phase(&self, now: jiff::Timestamp) -> Option<String> {
        let r = self.journal.as_ref()?;
        if r.status != Status::Running {
            return None;
        }
        if let Some(until) = r.bake_until.filter(|u| *u > now) {
            return Some(format!("baking at a checkpoint until {until}"));
        }
        if r.settings.canary && !r.canary_done {
            return Some(format!(
                "canary: one new node first, then minReady {}",
                r.settings.min_ready
            ));
        }
        crate::rollout::phase::old_leaving(r)
    }

    fn text(&self, pool: &str, now: jiff::Timestamp) -> String {
        let Some(r) = &self.journal else {
            return format!("nodepool.{pool}: no rollout in progress\n");
        };
        let s = &r.settings;
        let headline = match (self.word(), self.runner()) {
            ("stopped", _) => {
                "stopped: nothing runs it now; it resumes where it stopped on the next \
                 `poolwright apply` (or when the daemon starts)"
                    .to_string()
            }
            ("running", Some(who)) => format!("running, by {who}"),
            _ => describe(&r.status),
        };
        let mut out = format!("nodepool.{pool}: {headline}\n");
        if let Some(phase) = self.phase(now) {
            out += &format!("  now: {phase}\n");
        }
        out += &format!(
            "  target template {}, size {}, surge {}, unavailable {}, floor {}\n",
            r.target,
            s.size,
            s.budget.surge,
            s.budget.unavailable,
            r.floor()
        );
        out += &format!(
            "  started {}, {} old node(s) removed, {} failure(s)\n",
            r.started_at, r.removed, r.failures
        );
        for (node, mark) in &r.marks {
            out += &format!("  {node}: {}\n", describe_mark(mark));
        }
        for (node, why) in &r.held {
            out += &format!("  {node}: held by do-not-disrupt ({why}); left in service\n");
        }
        out
    }

    fn json(&self, pool: &str, now: jiff::Timestamp) -> serde_json::Value {
        serde_json::json!({
            "formatVersion": 1,
            "pool": pool,
            "status": self.word(),
            "runBy": self.runner(),
            "phase": self.phase(now),
            "message": self.journal.as_ref().map(|r| describe(&r.status)),
            "rollout": self.journal,
        })
    }

    /// With --wait: whether it has ended, and the exit code it ended with.
    fn ended(&self) -> Option<u8> {
        match self.word() {
            "none" | "completed" => Some(exit::OK),
            "degraded" | "rolled-back" | "stopped" => Some(exit::FAILED),
            _ => None,
        }
    }
}

/// A revision as `--revision` takes it: `BRANCH@SHA` or a commit prefix.
fn parse_revision(s: &str) -> Result<String, String> {
    let ok =
        !s.is_empty() && s.len() <= 300 && !s.chars().any(|c| c.is_control() || c.is_whitespace());
    if ok {
        Ok(s.to_string())
    } else {
        Err("a revision such as main@1a2b3c4, or a commit's first 7+ hex digits".into())
    }
}

/// A template hash as `plan -o json` prints it.
fn parse_template(s: &str) -> Result<String, String> {
    if !s.is_empty() && s.len() <= 64 && s.chars().all(|c| c.is_ascii_hexdigit()) {
        Ok(s.to_ascii_lowercase())
    } else {
        Err("a template hash: hex digits, as `plan -o json` gives a pool's rollout.target".into())
    }
}

fn status(
    pool: &str,
    state_dir: &Path,
    wait: Option<(std::time::Duration, Awaited)>,
    output: super::Output,
) -> anyhow::Result<u8> {
    let state = StateDir::new(state_dir);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let show = |s: &Standing| -> anyhow::Result<()> {
        let now = jiff::Timestamp::now();
        match output {
            super::Output::Text => print!("{}", s.text(pool, now)),
            super::Output::Json => {
                println!("{}", serde_json::to_string_pretty(&s.json(pool, now))?)
            }
        }
        Ok(())
    };
    let Some((timeout, awaited)) = wait else {
        show(&Standing::read(&rt, pool, &state)?)?;
        return Ok(exit::OK);
    };
    // With a daemon, the roll of what was changed; without one, the
    // journal as it stands (an `apply` running, or nothing).
    if let Some(daemon) = rt.block_on(Client::find(&state.root)) {
        return super::rollout_wait::wait(&rt, &daemon, pool, &awaited, timeout, output);
    }
    if awaited != Awaited::Now {
        anyhow::bail!(
            "--revision and --template wait for the daemon's roll, and no daemon answers for {}",
            state.root.display()
        );
    }
    let deadline = std::time::Instant::now() + timeout;
    let mut last_word = "";
    loop {
        let s = Standing::read(&rt, pool, &state)?;
        if let Some(code) = s.ended() {
            show(&s)?;
            return Ok(code);
        }
        // One line per change of status on a terminal's or a CI log's way.
        if output == super::Output::Text && s.word() != last_word {
            eprintln!(
                "{} nodepool.{pool}: {}{}",
                jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ"),
                s.word(),
                s.phase(jiff::Timestamp::now())
                    .map(|p| format!(" ({p})"))
                    .unwrap_or_default()
            );
            last_word = s.word();
        }
        if std::time::Instant::now() >= deadline {
            show(&s)?;
            eprintln!(
                "error: nodepool.{pool}: the rollout had not ended after {:#}",
                jiff::SignedDuration::try_from(timeout).unwrap_or_default()
            );
            return Ok(exit::FAILED);
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
}
