//! Planning: (desired, observed, inventory) -> [`Plan`], a pure function, plus
//! the plan's renderings (Terraform-style text and versioned JSON).
//!
//! The plan is data. `apply` executes its steps; `plan -out` saves it with the
//! digests of what it was computed from, so a stale plan is refused.

mod attributes;
pub mod channel;
mod digest;
pub mod fleet;
mod hold;
pub mod lifetime;
pub mod markdown;
mod planner;
pub mod render;

pub use attributes::{AttrChange, Value};
pub use channel::{age, age_span};
pub use digest::{config_digest, observed_digest, work_key};
pub use hold::{Hold, HumanWait};
pub use planner::{Observed, PlanOptions, plan, plan_one, target_size};

use serde::{Deserialize, Serialize};

use crate::model::{Bounds, InPlace, NodeTemplate, PoolSpec, TemplateHash};
use crate::rollout::{Budget, Settings, Strategy};
use crate::spec::types::{ChangeClass, Semantics};

/// Version of the JSON form `plan --output json` prints (2: a governed
/// pool's `fleet.held` is an object, its `kind` and its `message`).
pub const FORMAT_VERSION: u32 = 2;

/// Version of a saved plan (`plan -out`), which only the same release applies
/// (3: a governed pool's hold is typed).
pub const SAVED_FORMAT_VERSION: u32 = 3;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Plan {
    pub pools: Vec<PoolPlan>,
    /// Each FleetRollout's stage plan: which pools roll in which stage,
    /// what soak and which gates, and where its change stands.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fleets: Vec<fleet::FleetPlan>,
    /// What the image channels hold back (a newer image not eligible yet,
    /// one queued, a failing source), once per channel.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<String>,
}

/// The headline of a pool's plan, in Terraform's vocabulary.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Headline {
    NoOp,
    Create,
    Delete,
    /// Changed in place (size, bounds, labels, tags...).
    Update,
    /// Nodes replaced, create-before-terminate (`+/-`).
    RollCreateFirst,
    /// Nodes replaced, terminate-before-create (`-/+`).
    RollTerminateFirst,
    /// Nothing will be done, and the plan says why.
    LeftAlone,
    /// The pool could not be planned (provider unreachable).
    Error,
}

/// One step `apply` performs, in order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "step", rename_all = "camelCase")]
pub enum Step {
    CreatePool {
        spec: Box<PoolSpec>,
    },
    DeletePool,
    /// Drop a pool that no longer exists from the inventory.
    Forget,
    /// Start managing an existing pool.
    Adopt,
    SetBounds {
        to: Option<Bounds>,
    },
    /// Set the size. Growing launches nodes; shrinking goes through the
    /// rollout executor with `settings` (victims drained, the budget held).
    Scale {
        from: u32,
        to: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        settings: Option<Box<Settings>>,
    },
    UpdateInPlace {
        to: InPlace,
    },
    SetTemplate {
        to: NodeTemplate,
    },
    /// Replace outdated nodes through the rollout executor, converging on
    /// `size` nodes of `template`, with the resolved `settings` (budget,
    /// health, drain, canary, checkpoints, onFailure, the disruption rules):
    /// the executor sets the template and the size itself.
    Roll {
        outdated: u32,
        size: u32,
        template: Box<NodeTemplate>,
        settings: Box<Settings>,
        /// A roll back to the template the pool had before a change across
        /// pools that halted (`onHalt: rollback`): it ends rolled back, and
        /// the template it leaves is not tried again until a human resumes.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rollback: Option<Box<RollBack>>,
    },
}

/// Why a roll goes back, and from what.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RollBack {
    /// The template it leaves (the change's).
    pub failed: TemplateHash,
    pub reason: String,
}

fn is_oldest(o: &crate::spec::types::TakeDownOrder) -> bool {
    *o == crate::spec::types::TakeDownOrder::Oldest
}

impl Step {
    /// Disruptive steps are subject to the disruption policy.
    fn is_disruptive(&self) -> bool {
        matches!(self, Step::Roll { .. } | Step::DeletePool)
            || matches!(self, Step::Scale { from, to, .. } if to < from)
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RolloutPlan {
    pub outdated: u32,
    pub size: u32,
    pub strategy: Strategy,
    pub budget: Budget,
    /// [size - unavailable, size + surge]
    pub bounds: (u32, u32),
    /// outdated / (surge + unavailable), rounded up.
    pub estimated_waves: u32,
    pub from_templates: Vec<TemplateHash>,
    pub to_template: TemplateHash,
    /// Whose rules resolved the budget.
    #[serde(default)]
    pub semantics: Semantics,
    /// What kind of change the roll makes (for `disruption.appliesTo`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub classes: Vec<ChangeClass>,
    /// Old nodes are reimaged in place rather than replaced.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reimage: bool,
    /// The order old nodes are taken down in (`rollout.order`).
    #[serde(default, skip_serializing_if = "is_oldest")]
    pub order: crate::spec::types::TakeDownOrder,
    /// Replaced in waves rather than pipelined.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub waves: bool,
}

/// Something changed outside poolwright since it last applied.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Drift {
    pub attribute: String,
    pub last_applied: String,
    pub observed: String,
    /// Whether the plan reverts it (false when ignoreChanges covers it).
    pub reverted: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolPlan {
    pub pool: String,
    pub provider: String,
    /// The `Cluster` its nodes are cordoned, drained and gated on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
    pub headline: Headline,
    /// Why, in one sentence.
    pub reason: String,
    pub attributes: Vec<AttrChange>,
    /// Steps `apply` will run now (disruptive steps are omitted while held
    /// by a policy, the pre-flight or a FleetRollout).
    pub steps: Vec<Step>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<RolloutPlan>,
    /// Why its roll does not run now: a disruption policy or the PDB
    /// pre-flight holds it (the other changes proceed), or its rollout waits
    /// for a human (nothing is done to the pool until `rollout resume`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold: Option<Hold>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub drift: Vec<Drift>,
    /// Protected by lifecycle.preventDestroy (recorded in the inventory on apply).
    #[serde(default)]
    pub prevent_destroy: bool,
    /// The disruption policy would hold this pool's disruptive steps, but an
    /// emergency override lets them start: what the policy says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_overridden: Option<String>,
    /// Things a reviewer should know that change nothing (a budget another
    /// service would refuse, a policy that does not hold this change).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// The FleetRollout that governs its roll: its stage, and why the roll
    /// waits when it does (the roll is then not a step).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fleet: Option<fleet::PoolFleet>,
    /// The PDB pre-flight of a roll of a pool with a cluster: the budgets
    /// that would block a drain, or why the cluster could not be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preflight: Option<Preflight>,
    /// The roll the disruption policy holds until its window opens (not a
    /// step now): what a forecast of the held roll plays from the opening.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deferred: Option<Box<Step>>,
}

/// What the PDB pre-flight found.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "result")]
pub enum Preflight {
    /// Read: the budgets that allow no disruption over pods on the nodes
    /// the roll drains (none: nothing will block now).
    Checked { blocking: Vec<PdbFinding> },
    /// The cluster could not be read: nothing is claimed either way.
    Unreachable { cluster: String, error: String },
}

/// One blocking budget, the nodes whose drain it blocks, and what the pool's
/// `drain.onTimeout` does then.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PdbFinding {
    #[serde(flatten)]
    pub block: crate::model::PdbBlock,
    pub nodes: Vec<String>,
    pub consequence: String,
}

impl PoolPlan {
    pub fn has_changes(&self) -> bool {
        !self.steps.is_empty()
    }

    /// The size the plan brings the pool to, when a step sets one (a roll,
    /// a scale, a creation): what progress is counted against, never the
    /// provider's size with a roll's surge in it.
    pub fn target_size(&self) -> Option<u32> {
        self.steps.iter().find_map(|s| match s {
            Step::Roll { size, .. } => Some(*size),
            Step::Scale { to, .. } => Some(*to),
            Step::CreatePool { spec, .. } => Some(spec.size),
            _ => None,
        })
    }

    /// Its roll is held by a disruption policy or the pre-flight.
    pub fn blocked(&self) -> Option<&Hold> {
        self.hold.as_ref().filter(|h| h.blocks())
    }

    /// Its rollout waits for a human.
    pub fn waiting(&self) -> Option<&Hold> {
        self.hold.as_ref().filter(|h| h.for_a_human())
    }

    /// The roll planned: a step now, or held by the disruption policy
    /// until its window opens (not one held with no opening in sight).
    pub fn roll(&self) -> Option<(&NodeTemplate, &Settings)> {
        let opens = self.blocked().is_some_and(|b| b.until().is_some());
        self.steps
            .iter()
            .chain(self.deferred.as_deref().filter(|_| opens))
            .find_map(|s| match s {
                Step::Roll {
                    template, settings, ..
                } => Some((template.as_ref(), settings.as_ref())),
                _ => None,
            })
    }
}

/// Footer counts: `Plan: N to add, N to change, N to destroy, N to roll (M nodes).`
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    pub add: usize,
    pub change: usize,
    pub destroy: usize,
    pub roll: usize,
    pub roll_nodes: u64,
    pub blocked: usize,
    /// Pools whose roll the PDB pre-flight refuses (`drain.preflight: refuse`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub refused: usize,
    /// Pools whose rollout waits for a human.
    #[serde(default)]
    pub waiting: usize,
    /// Pools whose roll waits for its FleetRollout (a later stage, a slot,
    /// a halt).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub held: usize,
    pub errors: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl Plan {
    pub fn summary(&self) -> Summary {
        let mut s = Summary::default();
        for p in &self.pools {
            for step in &p.steps {
                match step {
                    Step::CreatePool { .. } => s.add += 1,
                    Step::DeletePool => s.destroy += 1,
                    Step::Roll { outdated, .. } => {
                        s.roll += 1;
                        s.roll_nodes += *outdated as u64;
                    }
                    _ => {}
                }
            }
            if p.steps.iter().any(|st| {
                matches!(
                    st,
                    Step::SetBounds { .. }
                        | Step::Scale { .. }
                        | Step::UpdateInPlace { .. }
                        | Step::Adopt
                        | Step::SetTemplate { .. }
                )
            }) {
                s.change += 1;
            }
            match &p.hold {
                Some(h) if h.is_preflight() => s.refused += 1,
                Some(h) if h.for_a_human() => s.waiting += 1,
                Some(_) => s.blocked += 1,
                None => {}
            }
            if p.fleet.as_ref().is_some_and(|f| f.held.is_some()) {
                s.held += 1;
            }
            if p.headline == Headline::Error {
                s.errors += 1;
            }
        }
        s
    }

    pub fn has_changes(&self) -> bool {
        self.pools.iter().any(PoolPlan::has_changes)
    }

    /// The desired state is not reached: steps to run, or steps held (by a
    /// policy or for a human). What `--detailed-exitcode` reports as 2.
    pub fn differs(&self) -> bool {
        self.pools.iter().any(|p| {
            p.has_changes()
                || p.hold.is_some()
                || p.fleet.as_ref().is_some_and(|f| f.held.is_some())
        })
    }
}
