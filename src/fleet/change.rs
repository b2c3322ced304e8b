//! What a change remembers across steps, crashes and daemons: the fleet
//! journal's content. Everything else (each pool's state) is observed again.

use std::collections::BTreeMap;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::model::{NodeTemplate, TemplateHash};

/// The format of a fleet journal this release reads and writes.
pub const FORMAT: u32 = 1;
/// Earlier changes kept in a fleet's journal (summaries).
const HISTORY: usize = 10;
/// Readings kept per gate (the last ones, and every breach).
pub const GATE_HISTORY: usize = 20;
/// Pauses, halts and resumes kept per change.
const LOG: usize = 50;

/// A FleetRollout's journal: its change in progress (or the last one) and a
/// short history of those before.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FleetState {
    pub format: u32,
    pub fleet: String,
    pub change: Change,
    /// Earlier changes, newest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<Summary>,
}

/// One change: a reload whose desired state rolls governed pools.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Change {
    /// The revision (`branch@sha`), or a digest of the governed pools'
    /// templates when the desired state has no revision.
    pub id: String,
    pub started_at: Timestamp,
    /// Each governed pool's desired template when the change began (a later
    /// load that differs for a pool is a new change).
    pub targets: BTreeMap<String, TemplateHash>,
    pub status: ChangeStatus,
    /// The stages started, in order.
    #[serde(default)]
    pub stages: Vec<StageRecord>,
    /// The pools this change admitted, and how each ended.
    #[serde(default)]
    pub pools: BTreeMap<String, PoolRecord>,
    /// The templates its pools had before it (`onHalt: rollback` returns
    /// them), by hash.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub templates: BTreeMap<TemplateHash, NodeTemplate>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub gates: BTreeMap<String, GateRecord>,
    /// Pauses, halts and resumes, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub log: Vec<LogEntry>,
    /// The image this change recalls (its id is `recall IMAGE`): it rolls
    /// every pool at once, with no soak and no gate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recall: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "camelCase")]
pub enum ChangeStatus {
    Running,
    /// An operator paused it (`poolwright fleet pause`).
    Paused {
        by: String,
        reason: String,
        at: Timestamp,
    },
    /// Failed pools or a breached gate stopped it fleet-wide.
    Halted {
        reason: String,
        /// The pools whose failure halted it.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pools: Vec<String>,
        at: Timestamp,
    },
    /// Every stage passed.
    Completed {
        at: Timestamp,
    },
}

impl ChangeStatus {
    pub fn as_str(&self) -> &'static str {
        match self {
            ChangeStatus::Running => "running",
            ChangeStatus::Paused { .. } => "paused",
            ChangeStatus::Halted { .. } => "halted",
            ChangeStatus::Completed { .. } => "completed",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StageRecord {
    pub name: String,
    pub started_at: Timestamp,
    /// Every pool of the stage done: its soak starts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<Timestamp>,
    /// Pools of the stage this change rolled (a stage that rolled none has
    /// nothing to soak).
    #[serde(default)]
    pub rolled: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub soak_until: Option<Timestamp>,
    /// Soaked, every gate held: the next stage may start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub passed_at: Option<Timestamp>,
}

/// A pool the change admitted (a pool with nothing to roll has no record).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "camelCase")]
pub enum PoolRecord {
    /// Holds a slot: rolling from `from`.
    Rolling {
        since: Timestamp,
        from: TemplateHash,
    },
    /// Rolled to its target.
    Done { at: Timestamp, from: TemplateHash },
    /// Degraded, rolled back by its own rollout, or its roll failed.
    Failed {
        at: Timestamp,
        reason: String,
        from: TemplateHash,
    },
    /// Returned to `from` because the change halted (`onHalt: rollback`).
    RolledBack { at: Timestamp, from: TemplateHash },
}

impl PoolRecord {
    pub fn from(&self) -> TemplateHash {
        match self {
            PoolRecord::Rolling { from, .. }
            | PoolRecord::Done { from, .. }
            | PoolRecord::Failed { from, .. }
            | PoolRecord::RolledBack { from, .. } => *from,
        }
    }

    pub fn as_str(&self) -> &'static str {
        match self {
            PoolRecord::Rolling { .. } => "rolling",
            PoolRecord::Done { .. } => "done",
            PoolRecord::Failed { .. } => "failed",
            PoolRecord::RolledBack { .. } => "rolled-back",
        }
    }
}

/// A gate's readings in this change.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GateRecord {
    /// Since when it has held without a break (`None`: it does not hold now).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holding_since: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last: Option<Reading>,
    /// Recent readings that did not hold, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub breaks: Vec<Reading>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Reading {
    pub at: Timestamp,
    #[serde(flatten)]
    pub outcome: GateOutcome,
}

/// What one evaluation of a gate said.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "result", rename_all = "camelCase")]
pub enum GateOutcome {
    /// The query returned a result: the condition holds.
    Holds { value: String },
    /// The query returned nothing (or zero): the condition is breached.
    Breached { value: String },
    /// It could not be evaluated (unreachable, a bad query, a timeout): it
    /// does not hold, and this says why.
    Unknown { error: String },
}

impl GateOutcome {
    pub fn holds(&self) -> bool {
        matches!(self, GateOutcome::Holds { .. })
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LogEntry {
    pub at: Timestamp,
    /// `paused`, `resumed`, `halted`.
    pub what: String,
    pub message: String,
}

/// An earlier change, in short.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    pub id: String,
    pub started_at: Timestamp,
    pub ended_at: Timestamp,
    /// `completed`, `halted`, `paused` or `running` when it was superseded.
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub superseded_by: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub pools_rolled: usize,
    pub pools_failed: usize,
}

impl Change {
    pub fn new(id: String, targets: BTreeMap<String, TemplateHash>, now: Timestamp) -> Change {
        Change {
            started_at: now,
            targets,
            status: ChangeStatus::Running,
            stages: Vec::new(),
            pools: BTreeMap::new(),
            templates: BTreeMap::new(),
            gates: BTreeMap::new(),
            log: Vec::new(),
            recall: id.strip_prefix("recall ").map(str::to_string),
            id,
        }
    }

    /// Pools holding a slot.
    pub fn rolling(&self) -> usize {
        self.pools
            .values()
            .filter(|r| matches!(r, PoolRecord::Rolling { .. }))
            .count()
    }

    /// Pools that failed in this change.
    pub fn failed(&self) -> Vec<(&str, &str)> {
        self.pools
            .iter()
            .filter_map(|(p, r)| match r {
                PoolRecord::Failed { reason, .. } => Some((p.as_str(), reason.as_str())),
                _ => None,
            })
            .collect()
    }

    pub fn record(&self, stage: &str) -> Option<&StageRecord> {
        self.stages.iter().find(|s| s.name == stage)
    }

    pub fn record_mut(&mut self, stage: &str) -> Option<&mut StageRecord> {
        self.stages.iter_mut().find(|s| s.name == stage)
    }

    pub fn passed(&self, stage: &str) -> bool {
        self.record(stage).is_some_and(|s| s.passed_at.is_some())
    }

    pub fn is_halted(&self) -> bool {
        matches!(self.status, ChangeStatus::Halted { .. })
    }

    pub fn log(&mut self, at: Timestamp, what: &str, message: String) {
        self.log.push(LogEntry {
            at,
            what: what.into(),
            message,
        });
        if self.log.len() > LOG {
            self.log.remove(0);
        }
    }

    fn summary(&self, ended_at: Timestamp, superseded_by: Option<String>) -> Summary {
        Summary {
            id: self.id.clone(),
            started_at: self.started_at,
            ended_at,
            status: self.status.as_str().into(),
            superseded_by,
            reason: match &self.status {
                ChangeStatus::Halted { reason, .. } => Some(reason.clone()),
                ChangeStatus::Paused { reason, .. } => Some(reason.clone()),
                _ => None,
            },
            pools_rolled: self
                .pools
                .values()
                .filter(|r| matches!(r, PoolRecord::Done { .. }))
                .count(),
            pools_failed: self.failed().len(),
        }
    }
}

/// A digest of the governed pools' templates: the id of a change whose
/// desired state has no revision.
/// The id of the change a desired state begins: its revision
/// (`main@1a2b3c4`); with the targets' digest beside it when the work tree
/// was dirty (two edits on one commit are two changes, never one id twice);
/// or the digest alone.
pub fn change_id(revision: Option<&str>, targets: &BTreeMap<String, TemplateHash>) -> String {
    match revision {
        Some(r) if r.ends_with("(dirty)") => format!("{r} {}", digest_id(targets)),
        Some(r) => r.to_string(),
        None => digest_id(targets),
    }
}

pub fn digest_id(targets: &BTreeMap<String, TemplateHash>) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    for (pool, t) in targets {
        h.update(pool.as_bytes());
        h.update([0]);
        h.update(t.0.to_be_bytes());
    }
    let d = h.finalize();
    format!(
        "sha256:{}",
        d.iter()
            .take(6)
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    )
}

/// Whether `targets` is a new change after `prior`'s: some pool of both
/// wants another template. A pool new to the fleet (or newly governed) is
/// not a change by itself: it is created, or rolls in the change in force.
fn is_new_change(
    prior: &BTreeMap<String, TemplateHash>,
    targets: &BTreeMap<String, TemplateHash>,
) -> bool {
    targets
        .iter()
        .any(|(pool, t)| prior.get(pool).is_some_and(|old| old != t))
}

impl FleetState {
    /// The fleet's state after a load whose governed pools want `targets`:
    /// the change in force with its targets brought up to date, or (when a
    /// pool of both wants another template, or there was none) a new change
    /// `id`, the one before going to the history. The bool says whether a
    /// new change began.
    pub fn after_load(
        prior: Option<FleetState>,
        fleet: &str,
        id: String,
        targets: BTreeMap<String, TemplateHash>,
        now: Timestamp,
    ) -> (FleetState, bool) {
        match prior {
            Some(mut s) if !is_new_change(&s.change.targets, &targets) => {
                s.change.targets = targets;
                (s, false)
            }
            Some(s) => {
                let superseded = s.change.summary(
                    now,
                    (!matches!(s.change.status, ChangeStatus::Completed { .. }))
                        .then(|| id.clone()),
                );
                let mut history = s.history;
                history.insert(0, superseded);
                history.truncate(HISTORY);
                (
                    FleetState {
                        format: FORMAT,
                        fleet: fleet.to_string(),
                        change: Change::new(id, targets, now),
                        history,
                    },
                    true,
                )
            }
            None => (
                FleetState {
                    format: FORMAT,
                    fleet: fleet.to_string(),
                    change: Change::new(id, targets, now),
                    history: Vec::new(),
                },
                true,
            ),
        }
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_dirty_tree_names_each_change_apart() {
        let one: BTreeMap<String, TemplateHash> = [("web".to_string(), TemplateHash(1))].into();
        let two: BTreeMap<String, TemplateHash> = [("web".to_string(), TemplateHash(2))].into();
        let dirty = Some("main@c48ba28 (dirty)");
        assert_ne!(change_id(dirty, &one), change_id(dirty, &two));
        assert!(change_id(dirty, &one).starts_with("main@c48ba28 (dirty) sha256:"));
        let clean = Some("main@c48ba28");
        assert_eq!(change_id(clean, &one), "main@c48ba28");
        assert_eq!(change_id(clean, &two), "main@c48ba28");
        assert!(change_id(None, &one).starts_with("sha256:"));
    }

    use super::*;

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).unwrap()
    }

    fn targets(pairs: &[(&str, u64)]) -> BTreeMap<String, TemplateHash> {
        pairs
            .iter()
            .map(|(p, t)| (p.to_string(), TemplateHash(*t)))
            .collect()
    }

    #[test]
    fn a_change_is_a_pool_of_both_loads_wanting_another_template() {
        let (first, new) =
            FleetState::after_load(None, "rings", "a".into(), targets(&[("web", 1)]), at(0));
        assert!(new, "the first load begins a change");
        // A pool added, or a pool removed: the same change.
        let (s, new) = FleetState::after_load(
            Some(first),
            "rings",
            "b".into(),
            targets(&[("web", 1), ("api", 7)]),
            at(1),
        );
        assert!(!new);
        assert_eq!(s.change.id, "a");
        assert_eq!(s.change.targets.len(), 2, "targets brought up to date");
        // web wants another template: a new change, the last one in history.
        let (s, new) = FleetState::after_load(
            Some(s),
            "rings",
            "c".into(),
            targets(&[("web", 2), ("api", 7)]),
            at(2),
        );
        assert!(new);
        assert_eq!(s.change.id, "c");
        assert_eq!(s.history[0].id, "a");
        assert_eq!(s.history[0].superseded_by.as_deref(), Some("c"));
    }

    #[test]
    fn the_journal_is_compact_json_and_reads_back() {
        let (mut s, _) = FleetState::after_load(
            None,
            "rings",
            "main@abc".into(),
            targets(&[("web", 1)]),
            at(0),
        );
        s.change.pools.insert(
            "web".into(),
            PoolRecord::Rolling {
                since: at(1),
                from: TemplateHash(9),
            },
        );
        let json = serde_json::to_string(&s).unwrap();
        assert!(json.contains(r#""web":{"state":"rolling""#), "{json}");
        let back: FleetState = serde_json::from_str(&json).unwrap();
        assert_eq!(back, s);
        assert_eq!(
            digest_id(&s.change.targets),
            digest_id(&targets(&[("web", 1)]))
        );
        assert_ne!(
            digest_id(&targets(&[("web", 1)])),
            digest_id(&targets(&[("web", 2)]))
        );
    }
}
