//! What a rollout remembers between steps (and across crashes): the journal's
//! content. Everything else is observed again each step.

use std::collections::BTreeMap;
use std::sync::Arc;

use rustc_hash::FxHashSet;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::model::{NodeTemplate, OpKey, TemplateHash};
use crate::rollout::Budget;
use crate::spec::types::{
    ChangeClass, Disruption, NodePoolDoc, OnDrainTimeout, OnFailure, Semantics, TakeDownOrder,
};
use crate::spec::values::Duration;

/// The rollout's settings, resolved once from the pool document for one size.
/// A plan's roll carries them, so `apply` and the daemon run the rollout as
/// planned, and the journal keeps them, so a resumed rollout knows what it
/// started with (and says what changed).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Settings {
    pub size: u32,
    pub budget: Budget,
    /// Whose rules resolved the budget (and, for AKS, what the policy holds).
    #[serde(default)]
    pub semantics: Semantics,
    pub min_ready: Duration,
    pub startup_timeout: Duration,
    pub drain_timeout: Duration,
    pub on_drain_timeout: OnDrainTimeout,
    /// Nodes launched before this instant are replaced even on the target
    /// template (`lifecycle.maxNodeAge`; the planner works it out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retire_before: Option<Timestamp>,
    /// With quarantine, the most nodes quarantined at once (`None`: no limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_blocked_nodes: Option<u32>,
    pub on_failure: OnFailure,
    pub max_failed_nodes: u32,
    pub canary: bool,
    /// Reimage drained nodes in place instead of terminating them.
    #[serde(default)]
    pub reimage: bool,
    /// (percent, bake time), increasing.
    pub checkpoints: Vec<(u32, Duration)>,
    pub progress_deadline: Option<Duration>,
    /// Replace in waves (`rollout.waves`): a new wave starts only when every
    /// replacement of the previous one has finished.
    #[serde(default, alias = "batchSynchronous")]
    pub waves: bool,
    /// Terminating nodes count against size + surge (`rollout.countTerminating`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub count_terminating: bool,
    /// The disruption rules in force (policy, windows, freeze, what they hold).
    #[serde(default)]
    pub disruption: Disruption,
    /// The order old nodes are taken down in.
    #[serde(default, skip_serializing_if = "is_oldest")]
    pub order: TakeDownOrder,
}

fn is_oldest(o: &TakeDownOrder) -> bool {
    *o == TakeDownOrder::Oldest
}

impl Settings {
    pub fn from_doc(doc: &NodePoolDoc, size: u32) -> Settings {
        let r = &doc.spec.rollout;
        Settings {
            size,
            budget: Budget::resolve(r, size),
            min_ready: r.health.min_ready,
            startup_timeout: r.health.startup_timeout,
            drain_timeout: r.drain.timeout,
            on_drain_timeout: r.drain.on_timeout,
            retire_before: None,
            max_blocked_nodes: r
                .drain
                .max_blocked_nodes
                .as_ref()
                .map(|v| super::budget::resolve_one(v.value, size, false)),
            on_failure: r.on_failure,
            max_failed_nodes: r.max_failed_nodes.value.clamp(1, u32::MAX as i64) as u32,
            canary: r.canary,
            reimage: r.reimage.value,
            checkpoints: r
                .checkpoints
                .iter()
                .map(|c| (c.at.value.0.clamp(0, 100) as u32, c.pause))
                .collect(),
            progress_deadline: r.progress_deadline.duration(),
            waves: r.waves,
            count_terminating: r.count_terminating,
            semantics: r.semantics(),
            disruption: doc.spec.disruption.clone(),
            order: r
                .order
                .as_ref()
                .map(|o| o.value.clone())
                .unwrap_or_default(),
        }
    }

    /// The change classes the disruption policy holds.
    pub fn held_classes(&self) -> Vec<ChangeClass> {
        self.disruption.applies_to(self.semantics)
    }

    /// What differs from `before`, one phrase each ("maxSurge 1 -> 4").
    pub fn changes_from(&self, before: &Settings) -> Vec<String> {
        let mut out = Vec::new();
        let mut field = |name: &str, a: String, b: String| {
            if a != b {
                out.push(format!("{name} {a} -> {b}"));
            }
        };
        field("size", before.size.to_string(), self.size.to_string());
        field(
            "maxSurge",
            before.budget.surge.to_string(),
            self.budget.surge.to_string(),
        );
        field(
            "maxUnavailable",
            before.budget.unavailable.to_string(),
            self.budget.unavailable.to_string(),
        );
        field(
            "semantics",
            before.semantics.as_str().into(),
            self.semantics.as_str().into(),
        );
        field(
            "minReady",
            before.min_ready.to_string(),
            self.min_ready.to_string(),
        );
        field(
            "startupTimeout",
            before.startup_timeout.to_string(),
            self.startup_timeout.to_string(),
        );
        field(
            "drain.timeout",
            before.drain_timeout.to_string(),
            self.drain_timeout.to_string(),
        );
        field(
            "drain.onTimeout",
            format!("{:?}", before.on_drain_timeout).to_lowercase(),
            format!("{:?}", self.on_drain_timeout).to_lowercase(),
        );
        let blocked = |s: &Settings| s.max_blocked_nodes.map_or("none".into(), |n| n.to_string());
        field("drain.maxBlockedNodes", blocked(before), blocked(self));
        field(
            "onFailure",
            format!("{:?}", before.on_failure).to_lowercase(),
            format!("{:?}", self.on_failure).to_lowercase(),
        );
        field(
            "maxFailedNodes",
            before.max_failed_nodes.to_string(),
            self.max_failed_nodes.to_string(),
        );
        field("canary", before.canary.to_string(), self.canary.to_string());
        field(
            "reimage",
            before.reimage.to_string(),
            self.reimage.to_string(),
        );
        let cps = |s: &Settings| {
            s.checkpoints
                .iter()
                .map(|(p, d)| format!("{p}%/{d}"))
                .collect::<Vec<_>>()
                .join(",")
        };
        field(
            "checkpoints",
            format!("[{}]", cps(before)),
            format!("[{}]", cps(self)),
        );
        let deadline = |s: &Settings| s.progress_deadline.map_or("none".into(), |d| d.to_string());
        field("progressDeadline", deadline(before), deadline(self));
        field("waves", before.waves.to_string(), self.waves.to_string());
        field(
            "order",
            crate::rollout::order::describe(&before.order),
            crate::rollout::order::describe(&self.order),
        );
        if before.disruption != self.disruption {
            out.push("disruption policy changed".into());
        }
        out
    }
}

/// Where a rollout stands.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "camelCase")]
pub enum Status {
    Running,
    /// Stopped by a human (`rollout pause`); `rollout resume` continues.
    Paused {
        reason: String,
    },
    /// A node failed (or a drain timed out with `onTimeout: fail`, or the
    /// progress deadline passed): no further old node is taken down until
    /// `rollout resume`.
    Degraded {
        reason: String,
    },
    /// Every node runs the target template.
    Completed,
    /// Failed and returned to the previous template; the failed template is not
    /// retried until a human resumes or the desired state changes.
    RolledBack {
        failed: TemplateHash,
        reason: String,
    },
}

impl Status {
    pub fn is_terminal(&self) -> bool {
        matches!(self, Status::Completed | Status::RolledBack { .. })
    }
}

/// What the rollout did to one node (absent: nothing yet).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "mark", rename_all = "camelCase")]
pub enum Mark {
    /// Cordoned and draining since `since`.
    Draining {
        since: Timestamp,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        blocked: Option<String>,
    },
    /// Drain timed out with `onTimeout: fail`: left cordoned.
    DrainFailed,
    /// Drain timed out with `onTimeout: quarantine`: left cordoned, kept.
    Quarantined,
    /// Termination requested (intent written before the call).
    Terminating { at: Timestamp },
    /// Reimage requested (intent written before the call); cleared once the
    /// node reports the target template.
    Reimaging { at: Timestamp },
    /// Returning to service (a rollback cut its drain short); cleared once the
    /// node is seen uncordoned, the call made again until then.
    Uncordoning,
}

/// New nodes already reported healthy. Every step asks it about every
/// available new node it visits, and every step copies the state (the
/// executor keeps the journaled copy; the step function makes the next): so
/// it is hashed, and shared between copies until one of them changes it. A
/// change copies only a small set of recent ids; those join the large set
/// (copied once) when they number about its square root, so a roll of a
/// pool of thousands of nodes, which adds every new node in turn, copies
/// about `n * sqrt(n)` ids in all rather than `n * n / 2`. It holds ids as
/// shared strings (a step inserts the observed id itself), so a copy copies
/// no name. Journaled as a sorted list.
#[derive(Clone, Debug, Default)]
pub struct SeenNodes {
    settled: Arc<FxHashSet<Arc<str>>>,
    /// Disjoint from `settled`.
    recent: Arc<FxHashSet<Arc<str>>>,
}

impl SeenNodes {
    fn of(ids: impl IntoIterator<Item = Arc<str>>) -> SeenNodes {
        SeenNodes {
            settled: Arc::new(ids.into_iter().collect()),
            recent: Arc::default(),
        }
    }

    pub fn contains(&self, id: &str) -> bool {
        self.recent.contains(id) || self.settled.contains(id)
    }

    pub fn len(&self) -> usize {
        self.settled.len() + self.recent.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn iter(&self) -> impl Iterator<Item = &Arc<str>> {
        self.settled.iter().chain(self.recent.iter())
    }

    /// Whether `id` is new to the set (what another state shares is
    /// copied first).
    pub fn insert(&mut self, id: &Arc<str>) -> bool {
        if self.contains(id) {
            return false;
        }
        let recent = Arc::make_mut(&mut self.recent);
        recent.insert(id.clone());
        if recent.len() > self.settled.len().isqrt().max(16) {
            let recent = std::mem::take(recent);
            Arc::make_mut(&mut self.settled).extend(recent);
        }
        true
    }

    /// Keep only the ids `keep` says to (copying only what loses one).
    pub fn retain(&mut self, keep: impl Fn(&str) -> bool) {
        for set in [&mut self.settled, &mut self.recent] {
            if !set.iter().all(|id| keep(id)) {
                Arc::make_mut(set).retain(|id| keep(id));
            }
        }
    }

    pub fn sorted(&self) -> Vec<&str> {
        let mut ids: Vec<&str> = self.iter().map(|id| &**id).collect();
        ids.sort_unstable();
        ids
    }
}

impl PartialEq for SeenNodes {
    fn eq(&self, other: &Self) -> bool {
        (Arc::ptr_eq(&self.settled, &other.settled) && Arc::ptr_eq(&self.recent, &other.recent))
            || (self.len() == other.len() && self.iter().all(|id| other.contains(id)))
    }
}

impl Eq for SeenNodes {}

#[cfg(test)]
impl<const N: usize> From<[&str; N]> for SeenNodes {
    fn from(ids: [&str; N]) -> Self {
        SeenNodes::of(ids.iter().map(|&id| Arc::from(id)))
    }
}

impl Serialize for SeenNodes {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.sorted().serialize(s)
    }
}

impl<'de> Deserialize<'de> for SeenNodes {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let ids = Vec::<String>::deserialize(d)?;
        Ok(SeenNodes::of(ids.into_iter().map(Arc::from)))
    }
}

/// The journal of one pool's rollout.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RolloutState {
    pub pool: String,
    pub target: TemplateHash,
    pub target_template: NodeTemplate,
    /// The template before this rollout (rollback goes back to it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous: Option<NodeTemplate>,
    pub settings: Settings,
    /// The most nodes seen available at once in this rollout. The floor is
    /// min(size - unavailable, this): it only ratchets up, so a pool that
    /// began degraded never loses the availability it regains.
    #[serde(default, alias = "floor")]
    pub peak_available: u32,
    /// What kind of change this rollout makes (for `disruption.appliesTo`).
    #[serde(default = "all_classes")]
    pub classes: Vec<ChangeClass>,
    pub status: Status,
    /// When the status last changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_since: Option<Timestamp>,
    pub marks: BTreeMap<String, Mark>,
    pub failures: u32,
    pub canary_done: bool,
    pub next_checkpoint: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bake_until: Option<Timestamp>,
    pub started_at: Timestamp,
    pub last_progress_at: Timestamp,
    /// (updated and available, old nodes removed): progress is any change.
    pub progress: (u32, u32),
    /// Surge refused by the provider: creating waits until then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub surge_refused_until: Option<Timestamp>,
    #[serde(default)]
    pub surge_backoff_secs: u64,
    /// A create of several nodes was refused: the next tries one node (part
    /// of a surge may still fit) before backing off.
    #[serde(default)]
    pub surge_narrowed: bool,
    /// Old nodes removed so far (for progress and events).
    #[serde(default)]
    pub removed: u32,
    /// Disruptive steps were waiting for the disruption policy at the last step.
    #[serde(default)]
    pub blocked_by_policy: bool,
    /// New nodes already reported healthy (each is reported once).
    #[serde(default)]
    pub healthy_seen: SeenNodes,
    /// Set while rolling back: the template that failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollback_of: Option<TemplateHash>,
    /// Why it rolls back, when something outside the pool asked (a change
    /// across pools that halted); a failed node's rollback says so itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollback_reason: Option<String>,
    /// Create calls journaled so far in this rollout; each one's idempotency
    /// key is derived from its number.
    #[serde(default)]
    pub creates: u64,
    /// A create call journaled but not answered yet. After a crash it is sent
    /// again with the same key (to a provider that honours keys), so a launch
    /// the provider had already started is answered, not repeated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_create: Option<PendingCreate>,
    /// Since when the provider has reported a size larger than the nodes it
    /// lists (a create not yet visible; past `startupTimeout`, a describe
    /// that contradicts itself).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unlisted_since: Option<Timestamp>,
    /// Old nodes held by do-not-disrupt (on the node, or on a pod running
    /// on it), and why: never taken down while held; the rollout completes
    /// around them.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub held: BTreeMap<String, String>,
    /// Under `rollout.order: zone`, the zone begun last: it is finished
    /// before another starts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    /// `rollout_stalled` was reported for the stretch without progress
    /// that began at `last_progress_at` (once per stretch).
    #[serde(default)]
    pub stall_reported: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingCreate {
    pub seq: u64,
    pub count: u32,
    /// The size the pool is to hold afterwards (part of the request, so a
    /// replay is the same request).
    #[serde(default)]
    pub size: u32,
}

fn all_classes() -> Vec<ChangeClass> {
    ChangeClass::ALL.to_vec()
}

impl RolloutState {
    /// Fewest available nodes allowed now.
    pub fn floor(&self) -> u32 {
        self.settings
            .size
            .saturating_sub(self.settings.budget.unavailable)
            .min(self.peak_available)
    }

    /// The change classes of the disruptive steps the rollout takes now: a
    /// rollback (or a failed node's replacement) is a repair.
    pub fn current_classes(&self) -> Vec<ChangeClass> {
        if self.rollback_of.is_some() {
            vec![ChangeClass::Repair]
        } else {
            self.classes.clone()
        }
    }

    /// Whether the rollout keeps this node: on the target template, and not
    /// launched before `retire_before` (past `lifecycle.maxNodeAge`). Every
    /// other node is old: taken down and replaced.
    #[inline]
    pub fn keeps(&self, n: &crate::model::Node) -> bool {
        n.template == self.target
            && self
                .settings
                .retire_before
                .is_none_or(|b| n.launched_at >= b)
    }
}

/// Idempotency keys of the rollout's intents. Each is derived from what the
/// journal holds, so a retry or a resume of the same intent repeats its key.
impl RolloutState {
    /// The `seq`-th create call of this rollout.
    pub fn create_key(&self, seq: u64) -> OpKey {
        OpKey::derive(&[
            &self.pool,
            &self.started_at.to_string(),
            "create",
            &seq.to_string(),
        ])
    }

    /// A node is terminated once in its life (a carried-over or replayed
    /// terminate, with its decrement, must not count twice).
    pub fn terminate_key(&self, node: &str) -> OpKey {
        OpKey::derive(&[&self.pool, "terminate", node])
    }

    /// A node is reimaged onto a given template once per rollout: a later
    /// rollout to the same template (tried again after a rollback put the
    /// node back) is a new intent with a new key, so the plug-in rebuilds it
    /// rather than replaying the first answer.
    pub fn reimage_key(&self, node: &str) -> OpKey {
        OpKey::derive(&[
            &self.pool,
            &self.started_at.to_string(),
            "reimage",
            node,
            &self.target.to_string(),
        ])
    }

    /// Setting the pool's template to this rollout's target (or, on a
    /// rollback, back to the previous one).
    pub fn template_key(&self, template: TemplateHash) -> OpKey {
        OpKey::derive(&[
            &self.pool,
            &self.started_at.to_string(),
            "set-template",
            &template.to_string(),
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::SeenNodes;
    use crate::rollout::decide::fixtures::{at, state};

    #[test]
    fn seen_nodes_are_journaled_as_a_sorted_list_and_shared_until_changed() {
        let mut a = SeenNodes::from(["web-3", "web-1", "web-2"]);
        let json = serde_json::to_string(&a).unwrap();
        assert_eq!(
            json, r#"["web-1","web-2","web-3"]"#,
            "the form a BTreeSet had"
        );
        let back: SeenNodes = serde_json::from_str(&json).unwrap();
        assert_eq!(back, a);
        let b = a.clone();
        let shares = |a: &SeenNodes, b: &SeenNodes| {
            std::sync::Arc::ptr_eq(&a.settled, &b.settled)
                && std::sync::Arc::ptr_eq(&a.recent, &b.recent)
        };
        assert!(shares(&a, &b), "a copy shares the set");
        assert!(
            !a.insert(&std::sync::Arc::from("web-2")),
            "already there: no copy made"
        );
        assert!(shares(&a, &b));
        assert!(a.insert(&std::sync::Arc::from("web-4")));
        assert_eq!((a.len(), b.len()), (4, 3), "the copy is unchanged");
        a.retain(|id| id != "web-1");
        assert_eq!(a.sorted(), ["web-2", "web-3", "web-4"]);
    }

    /// A roll adds every new node in turn while the journaled copy shares
    /// the set: the large part is copied about sqrt(n) times, not n times,
    /// and the set is the same set however its ids are split.
    #[test]
    fn seen_nodes_copy_the_large_set_rarely_as_nodes_are_added() {
        let mut seen = SeenNodes::default();
        let mut copies = 0;
        let mut kept = seen.clone();
        for i in 0..1000 {
            let before = std::sync::Arc::as_ptr(&seen.settled);
            assert!(seen.insert(&std::sync::Arc::from(format!("web-{i}"))));
            copies += usize::from(std::sync::Arc::as_ptr(&seen.settled) != before);
            assert_eq!(kept.len(), i, "the shared copy is unchanged");
            kept = seen.clone();
        }
        assert!(copies <= 80, "{copies} copies of the large set");
        let all = SeenNodes::of((0..1000).map(|i| std::sync::Arc::from(format!("web-{i}"))));
        assert_eq!(seen, all);
        assert!(seen.contains("web-999") && seen.contains("web-0") && !seen.contains("web-1000"));
        let mut fewer = all.clone();
        fewer.retain(|id| id != "web-999");
        assert_ne!(seen, fewer);
    }

    #[test]
    fn a_reimage_key_repeats_within_a_rollout_and_not_across_rollouts() {
        let first = state(3, 0, 1);
        assert_eq!(first.reimage_key("o1"), first.reimage_key("o1"));
        assert_ne!(first.reimage_key("o1"), first.reimage_key("o2"));
        // The same target tried again later (after a rollback) is a new intent.
        let mut again = first.clone();
        again.started_at = at(3600);
        assert_ne!(first.reimage_key("o1"), again.reimage_key("o1"));
        // A node is terminated once in its life, whichever rollout asks.
        assert_eq!(first.terminate_key("o1"), again.terminate_key("o1"));
    }
}
