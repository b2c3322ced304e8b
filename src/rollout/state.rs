//! What a rollout remembers between steps (and across crashes): the journal's
//! content. Everything else is observed again each step.

use std::collections::{BTreeMap, BTreeSet};

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::model::{NodeTemplate, OpKey, TemplateHash};
use crate::rollout::Budget;
use crate::spec::types::{NodePoolDoc, OnDrainTimeout, OnFailure};
use crate::spec::values::Duration;

/// The rollout's settings, resolved from the pool document for one size.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Settings {
    pub size: u32,
    pub budget: Budget,
    pub min_ready: Duration,
    pub startup_timeout: Duration,
    pub drain_timeout: Duration,
    pub on_drain_timeout: OnDrainTimeout,
    pub on_failure: OnFailure,
    pub max_failed_nodes: u32,
    pub canary: bool,
    /// Reimage drained nodes in place instead of terminating them.
    #[serde(default)]
    pub reimage: bool,
    /// (percent, bake time), increasing.
    pub checkpoints: Vec<(u32, Duration)>,
    pub progress_deadline: Option<Duration>,
    /// Benchmark baseline only: wait for every in-flight replacement to finish
    /// before starting the next batch, as the managed services describe.
    #[serde(default)]
    pub batch_synchronous: bool,
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
            on_failure: r.on_failure,
            max_failed_nodes: r.max_failed_nodes.value.clamp(1, u32::MAX as i64) as u32,
            canary: r.canary,
            reimage: r.reimage.value,
            checkpoints: r
                .checkpoints
                .iter()
                .map(|c| (c.at.value.0.clamp(0, 100) as u32, c.pause))
                .collect(),
            progress_deadline: r.progress_deadline,
            batch_synchronous: false,
        }
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
    /// Fewest available nodes allowed: size - unavailable, or what was available
    /// when the rollout began if that was lower.
    pub floor: u32,
    pub status: Status,
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
    /// Old nodes removed so far (for progress and events).
    #[serde(default)]
    pub removed: u32,
    /// Disruptive steps were waiting for the disruption policy at the last step.
    #[serde(default)]
    pub blocked_by_policy: bool,
    /// New nodes already reported healthy (each is reported once).
    #[serde(default)]
    pub healthy_seen: BTreeSet<String>,
    /// Set while rolling back: the template that failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollback_of: Option<TemplateHash>,
    /// Create calls journaled so far in this rollout; each one's idempotency
    /// key is derived from its number.
    #[serde(default)]
    pub creates: u64,
    /// A create call journaled but not answered yet. After a crash it is sent
    /// again with the same key (to a provider that honours keys), so a launch
    /// the provider had already started is answered, not repeated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_create: Option<PendingCreate>,
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

    /// A node is reimaged onto a given template once.
    pub fn reimage_key(&self, node: &str) -> OpKey {
        OpKey::derive(&[&self.pool, "reimage", node, &self.target.to_string()])
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
