//! The daemon's status board: what it is doing, what is blocked and why, per
//! pool. Written by the reconcile loop and the pool workers, read by
//! `/v1/status`, `poolwright status` and the systemd STATUS line.

use crate::sync::RwLocked;
use std::collections::BTreeMap;
use std::sync::RwLock;
use std::sync::atomic::{AtomicU64, Ordering};

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::ha::HaStatus;
use crate::model::phase::Phase;
use crate::model::{Counts, Event};
use crate::model::{EventKind, TemplateHash};
use crate::plan::render::Revision;

pub const FORMAT_VERSION: u32 = 1;

/// What a pool is doing now, in one word (also the `state` label in metrics).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PoolState {
    /// Matches the desired state, with the desired number of nodes available.
    InSync,
    /// Nothing is due, but fewer nodes are available than desired (booting,
    /// unhealthy, or gone): not in sync, and nothing of poolwright's is
    /// running to fix it.
    Unavailable,
    /// Steps are being applied (a rollout, a scale, an in-place update...).
    Applying,
    /// Changes are due but a disruption policy holds the disruptive ones.
    Blocked,
    /// Its roll waits for its FleetRollout (a later stage, a slot, a halt).
    Held,
    /// A human paused its rollout.
    Paused,
    /// Its rollout stopped on failures and waits for a human.
    Degraded,
    /// Dry-run: changes are due and would be applied.
    Pending,
    /// Nothing will be done, and `message` says why.
    LeftAlone,
    /// The last attempt failed (see `lastError`); retried on the next reconcile.
    Error,
}

impl PoolState {
    pub fn as_str(self) -> &'static str {
        match self {
            PoolState::InSync => "in-sync",
            PoolState::Unavailable => "unavailable",
            PoolState::Applying => "applying",
            PoolState::Blocked => "blocked",
            PoolState::Held => "held",
            PoolState::Paused => "paused",
            PoolState::Degraded => "degraded",
            PoolState::Pending => "pending",
            PoolState::LeftAlone => "left-alone",
            PoolState::Error => "error",
        }
    }
    pub const ALL: [PoolState; 10] = [
        PoolState::InSync,
        PoolState::Unavailable,
        PoolState::Applying,
        PoolState::Blocked,
        PoolState::Held,
        PoolState::Paused,
        PoolState::Degraded,
        PoolState::Pending,
        PoolState::LeftAlone,
        PoolState::Error,
    ];
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BlockedStatus {
    pub reason: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timezone: Option<String>,
    /// When this block began (this daemon's view).
    pub since: Timestamp,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LastError {
    pub at: Timestamp,
    pub message: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RolloutProgress {
    pub target: String,
    #[serde(flatten)]
    pub counts: Counts,
    pub last_event: String,
    pub last_event_at: Timestamp,
    /// Drains refused now, by node: who refuses (the pods, their
    /// PodDisruptionBudgets), as the last `drain_blocked` said.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub blocked_drains: BTreeMap<String, String>,
    /// Old nodes held by do-not-disrupt, by node, and why (kept after the
    /// rollout completes with holds, until the hold is lifted or the node
    /// goes).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub held_nodes: BTreeMap<String, String>,
    /// What the roll is doing or waiting for, and until when, as its last
    /// event said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolStatus {
    pub name: String,
    pub provider: String,
    pub state: PoolState,
    /// One sentence: what it is doing or why not.
    pub message: String,
    /// The desired state's revision this pool was last planned from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// The steps due now (what a dry-run would have done).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<RolloutProgress>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocked: Option<BlockedStatus>,
    /// Total time this daemon has seen the pool blocked by its disruption policy.
    #[serde(default)]
    pub blocked_seconds: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<LastError>,
    /// When this daemon last planned the pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub planned_at: Option<Timestamp>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigStatus {
    /// Whether the last load succeeded.
    pub valid: bool,
    /// Every error of the last failed load, as FILE:LINE:COL: error: MESSAGE.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_load_at: Option<Timestamp>,
    /// The revision of the desired state in force (the last good load).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<Revision>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_force_since: Option<Timestamp>,
    /// The revision that failed to load, when the last load failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rejected_revision: Option<Revision>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReconcileStatus {
    /// Rounds since start: each plans the pools that were due together.
    pub count: u64,
    /// Pool plans computed since start (a round plans one or more pools).
    #[serde(default)]
    pub pools_planned: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_trigger: Option<String>,
    /// When the change that caused the last plan was noticed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_triggered_at: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_started_at: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_finished_at: Option<Timestamp>,
    /// When the resync under way will have looked at every pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_resync_at: Option<Timestamp>,
    /// Pools waiting to be observed and planned.
    #[serde(default)]
    pub queued: usize,
    /// Pools due to be looked at later (nodes settling, a window, a retry).
    #[serde(default)]
    pub scheduled: usize,
    /// Providers being asked about a batch of pools now (a provider that
    /// does not answer holds up its own pools only, and shows here).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub observing: Vec<Observing>,
    /// Why the last round planned and did nothing (the journals or the
    /// inventory could not be read); absent when it got through.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// An observation in flight: which provider, how many pools, since when.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Observing {
    pub provider: String,
    pub pools: usize,
    pub since: Timestamp,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DaemonInfo {
    pub pid: u32,
    pub started_at: Timestamp,
    pub dir: String,
    /// `dir` resolved to an absolute path (a directory on disk; not a
    /// fetched config repo), so a command run elsewhere reads the same files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dir_resolved: Option<String>,
    pub state_dir: String,
    /// `apply`, or `dry-run` (plans only).
    pub mode: String,
    pub git_committed_only: bool,
    pub ready: bool,
    pub stopping: bool,
    /// With `--ha kubernetes`: the lease and this daemon's part in it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ha: Option<HaStatus>,
}

/// Emergency overrides of disruption policies, most recent last.
pub use crate::store::overrides::OverrideRecord as OverrideStatus;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusDoc {
    pub format_version: u32,
    pub daemon: DaemonInfo,
    pub config: ConfigStatus,
    pub reconcile: ReconcileStatus,
    /// Pools by state and their nodes, summed (in `/v1/status` answers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub totals: Option<Totals>,
    pub pools: Vec<PoolStatus>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub overrides: Vec<OverrideStatus>,
    /// Each FleetRollout's change, in short (`/v1/fleet` has the detail).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fleets: Vec<FleetSummary>,
    /// Each image channel in short (`/v1/images` has the detail): its
    /// image in force, a queued one, and why its source fails.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<ImageChannelSummary>,
    /// The config repo (`run --git-url`): the commit in force, the last
    /// fetch, and what was refused and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git: Option<GitStatus>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ImageChannelSummary {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_force: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queued: Option<String>,
    /// Why its source's last ask failed (the image in force stays).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The config repo a daemon fetches.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GitStatus {
    /// Without any user name.
    pub url: String,
    pub branch: String,
    pub path: String,
    /// `--git-verify`: only tips signed by a trusted key are applied
    /// (`ssh` or `gpg`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify: Option<String>,
    /// The commit applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_force: Option<Revision>,
    /// The branch tip at the last successful fetch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fetched: Option<Revision>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_fetch_at: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_fetch_at: Option<Timestamp>,
    /// Fetches failed in a row.
    #[serde(default)]
    pub failures: u32,
    /// Why the last fetch failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The tip not applied, and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<RefusedCommit>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RefusedCommit {
    pub commit: String,
    pub reason: String,
    pub at: Timestamp,
}

/// A FleetRollout's change in one line of status: where it is, what it
/// waits for, why it halted.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FleetSummary {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub change: Option<String>,
    /// `running`, `paused`, `halted`, `completed`.
    pub status: String,
    /// The stage in progress (the last one once every stage passed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stage: Option<String>,
    pub stage_number: usize,
    pub stages: usize,
    pub pools: usize,
    pub done: usize,
    pub rolling: usize,
    pub waiting: usize,
    pub failed: usize,
    /// What the change waits for, or why it halted or was paused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl FleetSummary {
    pub fn of(f: &crate::reconcile::fleet::FleetStatus) -> FleetSummary {
        use crate::fleet::ChangeStatus;
        let current = f
            .stages
            .iter()
            .position(|s| s.record.as_ref().is_none_or(|r| r.passed_at.is_none()));
        let sum =
            |k: fn(&crate::reconcile::fleet::StageStatus) -> usize| f.stages.iter().map(k).sum();
        let message = match f.change.as_ref().map(|c| &c.status) {
            Some(ChangeStatus::Halted { reason, .. }) => Some(format!("halted: {reason}")),
            Some(ChangeStatus::Paused { by, reason, .. }) => {
                Some(format!("paused by {by}: {reason}"))
            }
            _ => f.waiting.as_ref().map(|w| w.message.clone()),
        };
        FleetSummary {
            name: f.name.clone(),
            change: f.change.as_ref().map(|c| c.id.clone()),
            status: f
                .change
                .as_ref()
                .map_or("unknown", |c| c.status.as_str())
                .into(),
            stage: current
                .or(f.stages.len().checked_sub(1))
                .map(|i| f.stages[i].name.clone()),
            stage_number: current.map_or(f.stages.len(), |i| i + 1),
            stages: f.stages.len(),
            pools: sum(|s| s.pools),
            done: sum(|s| s.done),
            rolling: sum(|s| s.rolling),
            waiting: sum(|s| s.waiting),
            failed: sum(|s| s.failed),
            message,
            error: f.error.clone(),
        }
    }
}

/// All pools in numbers: pools by state, and their nodes as last seen.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Totals {
    pub pools: usize,
    pub by_state: BTreeMap<String, usize>,
    pub nodes: Counts,
}

impl Totals {
    pub fn of(pools: &[PoolStatus]) -> Totals {
        let mut t = Totals {
            pools: pools.len(),
            ..Totals::default()
        };
        for p in pools {
            *t.by_state.entry(p.state.as_str().to_string()).or_default() += 1;
            if let Some(r) = &p.rollout {
                let (n, c) = (&mut t.nodes, &r.counts);
                n.desired += c.desired;
                n.total += c.total;
                n.available += c.available;
                n.updated += c.updated;
                n.outdated += c.outdated;
                n.done += c.done;
                n.launching += c.launching;
                n.draining += c.draining;
            }
        }
        t
    }
}

impl StatusDoc {
    /// Everything but the pools (which a caller then picks).
    pub fn clone_without_pools(&self) -> StatusDoc {
        StatusDoc {
            format_version: self.format_version,
            daemon: self.daemon.clone(),
            config: self.config.clone(),
            reconcile: self.reconcile.clone(),
            totals: None,
            pools: Vec::new(),
            overrides: self.overrides.clone(),
            fleets: self.fleets.clone(),
            images: self.images.clone(),
            git: self.git.clone(),
        }
    }

    /// The systemd STATUS= line.
    pub fn summary(&self) -> String {
        let mut by_state: BTreeMap<PoolState, usize> = BTreeMap::new();
        for p in &self.pools {
            *by_state.entry(p.state).or_default() += 1;
        }
        let states: Vec<String> = by_state
            .iter()
            .map(|(s, n)| format!("{n} {}", s.as_str()))
            .collect();
        let config = match (&self.config.revision, self.config.valid) {
            (_, false) if self.config.last_load_at.is_some() => format!(
                "config INVALID ({} error(s)), last good in force",
                self.config.errors.len()
            ),
            (Some(r), _) => format!("config {}", r.short()),
            (None, _) => "config loaded".to_string(),
        };
        format!(
            "{}{} pools: {}; {config}",
            match (&self.daemon.ha, self.daemon.mode.as_str()) {
                (_, "dry-run") => "dry-run: ",
                (Some(h), _) if !h.leader => "standby: ",
                _ => "",
            },
            self.pools.len(),
            if states.is_empty() {
                "none".to_string()
            } else {
                states.join(", ")
            }
        )
    }
}

/// Shared, lock-protected status (short critical sections, never held across await).
pub struct Board {
    doc: RwLock<StatusDoc>,
    /// Bumped by every change, so the live feed publishes only after one.
    version: AtomicU64,
}

impl Board {
    pub fn new(daemon: DaemonInfo) -> Board {
        Board {
            doc: RwLock::new(StatusDoc {
                format_version: FORMAT_VERSION,
                daemon,
                config: ConfigStatus::default(),
                reconcile: ReconcileStatus::default(),
                totals: None,
                pools: Vec::new(),
                overrides: Vec::new(),
                fleets: Vec::new(),
                images: Vec::new(),
                git: None,
            }),
            version: AtomicU64::new(0),
        }
    }

    /// How many changes the board has seen.
    pub fn version(&self) -> u64 {
        self.version.load(Ordering::SeqCst)
    }

    pub fn snapshot(&self) -> StatusDoc {
        self.doc.read_locked().clone()
    }

    pub fn update<T>(&self, f: impl FnOnce(&mut StatusDoc) -> T) -> T {
        let out = f(&mut self.doc.write_locked());
        self.version.fetch_add(1, Ordering::SeqCst);
        out
    }

    /// Change one pool's entry (created on first sight).
    pub fn pool<T>(&self, name: &str, provider: &str, f: impl FnOnce(&mut PoolStatus) -> T) -> T {
        self.update(|doc| {
            let i = match doc.pools.binary_search_by(|p| p.name.as_str().cmp(name)) {
                Ok(i) => i,
                Err(i) => {
                    doc.pools.insert(
                        i,
                        PoolStatus {
                            name: name.to_string(),
                            provider: provider.to_string(),
                            state: PoolState::InSync,
                            message: String::new(),
                            revision: None,
                            pending: Vec::new(),
                            rollout: None,
                            blocked: None,
                            blocked_seconds: 0.0,
                            last_error: None,
                            planned_at: None,
                        },
                    );
                    i
                }
            };
            f(&mut doc.pools[i])
        })
    }

    /// Read the status in place (no copy of every pool).
    pub fn read<T>(&self, f: impl FnOnce(&StatusDoc) -> T) -> T {
        f(&self.doc.read_locked())
    }

    /// The systemd STATUS= line.
    pub fn summary(&self) -> String {
        self.read(StatusDoc::summary)
    }

    /// Drop a pool that is neither desired nor managed any more.
    pub fn remove_pool(&self, name: &str) {
        self.update(|doc| {
            if let Ok(i) = doc.pools.binary_search_by(|p| p.name.as_str().cmp(name)) {
                doc.pools.remove(i);
            }
        });
    }

    /// What the last observation of a pool found.
    pub fn observed(&self, pool: &str, counts: Counts, target: TemplateHash, now: Timestamp) {
        self.update(|doc| {
            let Ok(i) = doc.pools.binary_search_by(|p| p.name.as_str().cmp(pool)) else {
                return;
            };
            let p = &mut doc.pools[i];
            // In sync means the desired number of nodes available, not only
            // nothing to do: a pool of 6 with 0 available is not in sync.
            match p.state {
                PoolState::InSync if counts.available < counts.desired => {
                    p.state = PoolState::Unavailable;
                    p.message = format!(
                        "{} of {} node(s) available: nothing is due, but nodes are booting, unhealthy or missing",
                        counts.available, counts.desired
                    );
                }
                PoolState::Unavailable if counts.available >= counts.desired => {
                    p.state = PoolState::InSync;
                    p.message = "matches the desired state".into();
                }
                _ => {}
            }
            let last = p.rollout.take();
            p.rollout = Some(match last {
                // A new target is a new roll: the last one's phase is not its.
                Some(r) => RolloutProgress {
                    phase: r.phase.filter(|_| r.target == target.to_string()),
                    target: target.to_string(),
                    counts,
                    ..r
                },
                None => RolloutProgress {
                    target: target.to_string(),
                    counts,
                    last_event: "observed".into(),
                    last_event_at: now,
                    blocked_drains: BTreeMap::new(),
                    held_nodes: BTreeMap::new(),
                    phase: None,
                },
            });
        });
    }

    /// A rollout event: progress for the pool it concerns.
    pub fn record_event(&self, e: &Event) {
        self.update(|doc| {
            let Ok(i) = doc.pools.binary_search_by(|p| p.name.as_str().cmp(&e.pool)) else {
                return;
            };
            let p = &mut doc.pools[i];
            let (mut blocked, mut held) = p
                .rollout
                .as_ref()
                .map(|r| (r.blocked_drains.clone(), r.held_nodes.clone()))
                .unwrap_or_default();
            track_blocked(&mut blocked, e);
            track_held(&mut held, e);
            if let Some(c) = e.counts {
                let target = p
                    .rollout
                    .as_ref()
                    .map(|r| r.target.clone())
                    .unwrap_or_default();
                p.rollout = Some(RolloutProgress {
                    target,
                    counts: c,
                    last_event: e.event.to_string(),
                    last_event_at: e.ts,
                    blocked_drains: blocked,
                    held_nodes: held,
                    phase: e
                        .phase
                        .clone()
                        .or_else(|| p.rollout.as_ref().and_then(|r| r.phase.clone())),
                });
            } else if let Some(r) = &mut p.rollout {
                r.blocked_drains = blocked;
                r.held_nodes = held;
            }
            if e.event == EventKind::StepFailed {
                p.last_error = Some(LastError {
                    at: e.ts,
                    message: e.message.clone(),
                });
            }
        });
    }
}

/// Keep the refused drains current: a `drain_blocked` names who refuses the
/// node's drain now; the drain ending in any way (drained, forced,
/// quarantined, failed, given up by a rollback, the node gone) or the
/// rollout ending clears it.
fn track_blocked(blocked: &mut BTreeMap<String, String>, e: &Event) {
    match (e.event, &e.node) {
        (EventKind::DrainBlocked, Some(n)) => {
            blocked.insert(n.clone(), e.message.clone());
        }
        (
            EventKind::NodeDrained
            | EventKind::DrainForced
            | EventKind::NodeQuarantined
            | EventKind::NodeUncordoned
            | EventKind::NodeTerminated
            | EventKind::Degraded,
            Some(n),
        ) => {
            blocked.remove(n);
        }
        (
            EventKind::Completed
            | EventKind::RolloutCompleted
            | EventKind::RolloutStopped
            | EventKind::RollbackStarted,
            _,
        ) => blocked.clear(),
        _ => {}
    }
}

/// Keep the held nodes current: `node_held` names one and why; its hold
/// lifted, the node gone, or a new rollout (which finds the holds again)
/// clears it. A rollout completing with holds keeps them.
fn track_held(held: &mut BTreeMap<String, String>, e: &Event) {
    match (e.event, &e.node) {
        (EventKind::NodeHeld, Some(n)) => {
            held.insert(n.clone(), e.message.clone());
        }
        (EventKind::NodeHoldLifted | EventKind::NodeTerminated, Some(n)) => {
            held.remove(n);
        }
        (EventKind::RolloutStarted, _) => held.clear(),
        _ => {}
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub fn daemon_info() -> DaemonInfo {
        DaemonInfo {
            pid: 1,
            started_at: Timestamp::UNIX_EPOCH,
            dir: "pools".into(),
            dir_resolved: None,
            state_dir: ".poolwright".into(),
            mode: "apply".into(),
            git_committed_only: false,
            ready: true,
            stopping: false,
            ha: None,
        }
    }

    fn event(kind: EventKind, node: &str, message: &str) -> Event {
        Event::new(Timestamp::UNIX_EPOCH, "web", kind, message).node(Some(node.into()))
    }

    #[test]
    fn a_refused_drain_is_named_until_it_ends() {
        let mut b = BTreeMap::new();
        let pdb = "cannot evict pod default/web-1: PodDisruptionBudget default/web (disruptions allowed: 0)";
        track_blocked(&mut b, &event(EventKind::DrainBlocked, "n1", pdb));
        track_blocked(&mut b, &event(EventKind::DrainBlocked, "n2", "another"));
        assert_eq!(b.get("n1").map(String::as_str), Some(pdb));
        // Refreshed as it changes.
        track_blocked(&mut b, &event(EventKind::DrainBlocked, "n1", "now web-2"));
        assert_eq!(b["n1"], "now web-2");
        track_blocked(&mut b, &event(EventKind::NodeDrained, "n1", "drained"));
        assert_eq!(b.keys().collect::<Vec<_>>(), ["n2"]);
        track_blocked(&mut b, &event(EventKind::Completed, "", ""));
        assert!(b.is_empty());
    }
}
