//! `run --git-url`: fetch the config repo on an interval, and at once when a
//! push webhook says so; put a new branch tip in force when it may be
//! applied (it descends from the commit in force, or `--git-allow-rewrite`),
//! and tell the loop to load it.
//!
//! A failed fetch changes nothing: the commit in force stays, and status,
//! metrics and a `git_fetch_failed` event say why; retries back off. A tip
//! that rewrites history is not applied: status, a `commit_refused` event
//! and a metric name it.

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use crate::daemon::source::RemoteSource;
use crate::daemon::source::previews::Wanted;
use crate::daemon::views::board::{Board, GitStatus, RefusedCommit};
use crate::daemon::views::metrics::{Metrics, RefusedLabels};
use crate::git::mirror::{Fetched, Lineage};
use crate::git::verify::{Format, Trusted};
use crate::model::{Event, EventKind};
use crate::reconcile::EventSink;

/// How often, and what may be applied.
#[derive(Clone, Debug)]
pub struct FetchSettings {
    pub interval: Duration,
    pub allow_rewrite: bool,
    /// `--git-verify`: the format and the file of the trusted keys (read
    /// again on every fetched tip, so keys can be added and revoked without
    /// a restart).
    pub verify: Option<Verify>,
}

/// `--git-verify FORMAT` with its keys file.
#[derive(Clone, Debug)]
pub struct Verify {
    pub format: Format,
    pub keys: std::path::PathBuf,
}

/// "Fetch now", from a push webhook, with the commit it announced.
#[derive(Clone, Debug)]
pub struct Poke {
    pub after: Option<String>,
}

/// Where push webhooks lead (`POST /v1/hooks/git`): the secret they are
/// signed with, the branch watched, and the fetcher's pokes.
pub struct HookTarget {
    pub secret_file: Option<std::path::PathBuf>,
    pub branch: String,
    /// `--preview-refs`: a push to one of these fetches too.
    pub preview_refs: Vec<String>,
    pub pokes: mpsc::Sender<Poke>,
}

impl HookTarget {
    /// The target, and the receiving end the fetcher reads.
    pub fn new(
        secret_file: Option<std::path::PathBuf>,
        branch: &str,
        preview_refs: &[String],
    ) -> (Arc<HookTarget>, mpsc::Receiver<Poke>) {
        // A full queue already holds a fetch to come.
        let (pokes, rx) = mpsc::channel(16);
        (
            Arc::new(HookTarget {
                secret_file,
                branch: branch.to_string(),
                preview_refs: preview_refs.to_vec(),
                pokes,
            }),
            rx,
        )
    }
}

pub struct Fetcher {
    pub source: Arc<RemoteSource>,
    pub settings: FetchSettings,
    pub board: Arc<Board>,
    pub metrics: Arc<Metrics>,
    pub events: Arc<EventSink>,
    /// One `()` tells the loop to load the desired state again.
    pub reload: mpsc::UnboundedSender<()>,
    /// What to preview, after every fetch: the refs of `--preview-refs`,
    /// and the branch tip when it is refused.
    pub previews: watch::Sender<Wanted>,
}

/// The first retry after a failure; each further one waits twice as long,
/// up to the interval (or 5 minutes, if the interval is shorter).
const FIRST_RETRY: Duration = Duration::from_secs(2);

/// When to try again after `failures` failures in a row.
pub fn backoff(failures: u32, interval: Duration) -> Duration {
    let cap = interval.max(Duration::from_secs(300));
    FIRST_RETRY
        .saturating_mul(1u32 << failures.saturating_sub(1).min(16))
        .min(cap)
}

impl Fetcher {
    pub fn spawn(self, pokes: mpsc::Receiver<Poke>) -> JoinHandle<()> {
        self.board.update(|d| {
            let o = self.source.mirror.options();
            d.git = Some(GitStatus {
                url: self.source.mirror.shown_url(),
                branch: o.branch.clone(),
                path: o.path.display().to_string(),
                verify: self
                    .settings
                    .verify
                    .as_ref()
                    .map(|v| v.format.as_str().to_string()),
                in_force: self
                    .source
                    .in_force()
                    .and_then(|c| self.source.mirror.revision(&c).ok()),
                ..GitStatus::default()
            });
        });
        tokio::spawn(self.run(pokes))
    }

    async fn run(self, mut pokes: mpsc::Receiver<Poke>) {
        let mut failures = 0u32;
        // The first fetch at once.
        let mut next = tokio::time::Instant::now();
        let mut fetched_tip: Option<String> = None;
        let mut last_error: Option<String> = None;
        loop {
            tokio::select! {
                () = tokio::time::sleep_until(next) => {}
                poke = pokes.recv() => {
                    let Some(poke) = poke else { return };
                    // A burst of pushes makes one fetch; a push of the tip
                    // already fetched makes none.
                    let mut announced = vec![poke.after];
                    while let Ok(p) = pokes.try_recv() {
                        announced.push(p.after);
                    }
                    let known = failures == 0
                        && fetched_tip.is_some()
                        && announced.iter().all(|a| a == &fetched_tip);
                    if known {
                        continue;
                    }
                }
            }
            let source = self.source.clone();
            let bound = source.mirror.options().limits.timeout + Duration::from_secs(10);
            let fetch = tokio::task::spawn_blocking(move || source.mirror.fetch());
            let result = match tokio::time::timeout(bound, fetch).await {
                Ok(Ok(r)) => r.map_err(|e| e.to_string()),
                Ok(Err(e)) => Err(format!("the fetch stopped: {e}")),
                Err(_) => Err(format!(
                    "fetching {}: no answer within {}s",
                    self.source.mirror.shown_url(),
                    bound.as_secs()
                )),
            };
            let now = Timestamp::now();
            match result {
                Ok(fetched) => {
                    failures = 0;
                    last_error = None;
                    self.metrics.git_fetches.inc();
                    self.metrics.git_last_fetch.set(now.as_second());
                    fetched_tip = Some(fetched.revision.commit.clone());
                    let interval = self.settings.interval;
                    next = tokio::time::Instant::now() + interval;
                    self.take(fetched, now, next_at(now, interval)).await;
                }
                Err(message) => {
                    failures += 1;
                    self.metrics.git_fetch_failures.inc();
                    let delay = backoff(failures, self.settings.interval);
                    next = tokio::time::Instant::now() + delay;
                    if last_error.as_deref() != Some(message.as_str()) {
                        tracing::error!(
                            failures,
                            "{message}; the commit in force stays; retrying in {}s",
                            delay.as_secs()
                        );
                        self.emit(now, EventKind::GitFetchFailed, message.clone());
                    }
                    self.board.update(|d| {
                        if let Some(g) = &mut d.git {
                            g.failures = failures;
                            g.error = Some(message.clone());
                            g.next_fetch_at = Some(next_at(now, delay));
                        }
                    });
                    last_error = Some(message);
                }
            }
        }
    }

    /// A fetched tip: accept it (the loop then loads it), or say why not.
    async fn take(&self, fetched: Fetched, now: Timestamp, next_fetch_at: Timestamp) {
        let tip = fetched.revision.commit.clone();
        // Accepted already (in force, or it did not load: the desired state
        // says why, and the tip is not loaded again until it moves).
        let refusal = if self.source.accepted().as_deref() == Some(tip.as_str()) {
            None
        } else {
            self.judge(&fetched).await
        };
        let already = self.board.read(|d| {
            d.git
                .as_ref()
                .and_then(|g| g.refused.as_ref())
                .is_some_and(|r| r.commit == tip)
        });
        if let Some((reason, message)) = &refusal
            && !already
        {
            tracing::error!(commit = %tip, "{message}");
            self.metrics
                .git_commits_refused
                .get_or_create(&RefusedLabels {
                    reason: (*reason).to_string(),
                })
                .inc();
            self.emit(now, EventKind::CommitRefused, message.clone());
        }
        let branch = format!("refs/heads/{}", self.source.mirror.options().branch);
        self.previews.send_replace(Wanted {
            refs: fetched.previews.clone(),
            dropped: fetched.previews_dropped,
            error: fetched.previews_error.clone(),
            refused: refusal
                .as_ref()
                .map(|(_, why)| (branch, fetched.revision.clone(), why.clone())),
        });
        self.board.update(|d| {
            if let Some(g) = &mut d.git {
                g.failures = 0;
                g.error = None;
                g.fetched = Some(fetched.revision.clone());
                g.last_fetch_at = Some(now);
                g.next_fetch_at = Some(next_fetch_at);
                g.refused = match &refusal {
                    Some((_, message)) if !already => Some(RefusedCommit {
                        commit: tip.clone(),
                        reason: message.clone(),
                        at: now,
                    }),
                    Some(_) => g.refused.take(),
                    None => None,
                };
            }
        });
    }

    /// May a new tip be applied? Its lineage from the commit in force, and
    /// its signature; accepted when it may, the refusal when not.
    async fn judge(&self, fetched: &Fetched) -> Option<(&'static str, String)> {
        let tip = fetched.revision.commit.clone();
        let in_force = self.source.in_force();
        let lineage = {
            let (source, tip) = (self.source.clone(), tip.clone());
            let in_force = in_force.clone();
            tokio::task::spawn_blocking(move || source.mirror.lineage(in_force.as_deref(), &tip))
                .await
                .map_err(anyhow::Error::from)
                .and_then(|r| r)
        };
        match lineage {
            Ok(Lineage::Rewritten) if self.settings.allow_rewrite => {
                tracing::warn!(
                    commit = %tip,
                    "the branch was rewritten (its tip does not descend from the commit in force); applying it, as --git-allow-rewrite says"
                );
            }
            Ok(Lineage::Rewritten) => {
                return Some((
                    "rewrite",
                    format!(
                        "{} does not descend from the commit in force {}: the branch was rewritten (a force-push or a reset); not applied without --git-allow-rewrite",
                        fetched.revision.short(),
                        in_force.as_deref().map(short).unwrap_or_default()
                    ),
                ));
            }
            // Forward, the first, or the commit in force itself after a tip
            // that did not load: each is loaded.
            Ok(Lineage::First | Lineage::Forward | Lineage::Same) => {}
            Err(e) => {
                return Some(("unreadable", format!("reading the history of {tip}: {e:#}")));
            }
        }
        if let Err(refusal) = self.verified(&tip).await {
            return Some(refusal);
        }
        self.accept(fetched);
        None
    }

    /// With `--git-verify`: is the tip signed by a trusted key?
    async fn verified(&self, tip: &str) -> Result<(), (&'static str, String)> {
        let Some(verify) = self.settings.verify.clone() else {
            return Ok(());
        };
        let (source, commit) = (self.source.clone(), tip.to_string());
        let checked =
            tokio::task::spawn_blocking(move || verify_commit(&source, &verify, &commit)).await;
        checked.unwrap_or_else(|e| Err(("unreadable", format!("verifying {tip}: {e}"))))
    }

    /// The loop loads the fetched tip; once it loads cleanly it is in force
    /// (`Reconciler::confirm_commit`).
    fn accept(&self, fetched: &Fetched) {
        tracing::info!(
            commit = %fetched.revision.commit,
            objects = fetched.objects,
            "{}: {} accepted; loading it",
            self.source.mirror.shown_url(),
            fetched.revision.short()
        );
        self.source.accept(&fetched.revision.commit);
        let _ = self.reload.send(());
    }

    fn emit(&self, ts: Timestamp, event: EventKind, message: String) {
        self.events
            .emit(Event::new(ts, String::new(), event, message));
    }
}

/// Is `commit` signed by a key `verify` trusts? The refusal's reason label
/// and message when not.
pub fn verify_commit(
    source: &RemoteSource,
    verify: &Verify,
    commit: &str,
) -> Result<(), (&'static str, String)> {
    let trusted =
        Trusted::load(verify.format, &verify.keys).map_err(|e| ("signers", e.to_string()))?;
    let (signature, payload, time) = source
        .mirror
        .signature(commit)
        .map_err(|e| ("unreadable", format!("reading commit {commit}: {e:#}")))?;
    trusted
        .verify(
            signature.as_deref(),
            &payload,
            time,
            Timestamp::now().as_second(),
        )
        .map(|_| ())
        .map_err(|why| {
            (
                why.reason(),
                format!(
                    "{} is not applied: {why} (--git-verify {})",
                    short(commit),
                    verify.format.as_str()
                ),
            )
        })
}

fn next_at(now: Timestamp, after: Duration) -> Timestamp {
    now.checked_add(jiff::SignedDuration::try_from(after).unwrap_or_default())
        .unwrap_or(now)
}

fn short(commit: &str) -> &str {
    commit.get(..7).unwrap_or(commit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_back_off_up_to_the_interval() {
        let minute = Duration::from_secs(60);
        let waits: Vec<u64> = (1..=10).map(|n| backoff(n, minute).as_secs()).collect();
        assert_eq!(waits, [2, 4, 8, 16, 32, 64, 128, 256, 300, 300]);
        let hour = Duration::from_secs(3600);
        assert_eq!(backoff(20, hour), hour);
        assert_eq!(backoff(u32::MAX, hour), hour);
    }
}
