//! Providers: the backends that own node pools. They expose small primitives
//! (describe, create n, terminate one, ...) and never roll nodes themselves: every
//! replacement goes through the one rollout executor.

pub mod aws;
pub mod drain;
pub mod http;
pub mod instrumented;
pub mod registry;
pub mod sim;

pub use drain::{ClusterError, DrainError, Drainer, NoDrain, SimDrainer};
pub use instrumented::CallObserver;
pub use registry::Providers;

use std::fmt;

use async_trait::async_trait;

pub use crate::model::OpKey;
use crate::model::{InPlace, NodeTemplate, ObservedPool, PoolSpec};

/// What a provider can do beyond the required primitives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Capabilities {
    /// Can reimage a node in place (terminate-before-create without a new machine).
    pub reimage: bool,
    /// Most pools one `describe_pools` call should be asked for.
    pub describe_batch: usize,
    /// How often a rollout should look at the pool again.
    pub poll_interval: std::time::Duration,
    /// Honours idempotency keys: a mutating call repeated with the same key
    /// acts once, so the executor may replay an intent it journaled but never
    /// saw answered (after a crash).
    pub idempotency_keys: bool,
    /// The template fields the provider acts on, when not all: a template
    /// that sets another is refused (a plug-in says which it acts on).
    pub acts_on: Option<Vec<crate::model::TemplateField>>,
}

/// A provider call that failed, with the call and the provider's answer, so the
/// message is actionable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderError {
    /// The provider call, e.g. `CreateNodes(web, 2)`.
    pub call: String,
    pub kind: ErrorKind,
    /// The provider's own words.
    pub message: String,
    /// The backend already retried this call by its own policy (the plug-in
    /// client's backoff): callers do not retry it again.
    pub retried: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The pool or node does not exist.
    NotFound,
    /// Capacity or quota refused; retrying soon will not help by itself.
    Quota,
    /// Rate limited; retry with backoff.
    Throttled,
    /// A server-side failure; retry with backoff.
    Unavailable,
    /// The request is wrong (bad template, permission); retrying will not help.
    Rejected,
    /// The provider does not offer this primitive.
    Unsupported,
}

impl ProviderError {
    pub fn new(call: impl Into<String>, kind: ErrorKind, message: impl Into<String>) -> Self {
        ProviderError {
            call: call.into(),
            kind,
            message: message.into(),
            retried: false,
        }
    }

    /// Worth retrying after a backoff.
    pub fn is_transient(&self) -> bool {
        matches!(self.kind, ErrorKind::Throttled | ErrorKind::Unavailable)
    }

    /// Worth retrying here: transient, and not already retried by the backend.
    pub fn should_retry(&self) -> bool {
        self.is_transient() && !self.retried
    }
}

impl fmt::Display for ProviderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.kind {
            ErrorKind::NotFound => "not found",
            ErrorKind::Quota => "quota or capacity refused",
            ErrorKind::Throttled => "throttled",
            ErrorKind::Unavailable => "service unavailable",
            ErrorKind::Rejected => "rejected",
            ErrorKind::Unsupported => "not supported by this provider",
        };
        write!(f, "{} failed: {kind}: {}", self.call, self.message)
    }
}

impl std::error::Error for ProviderError {}

pub type Result<T> = std::result::Result<T, ProviderError>;

/// What changed in a pool since a provider last said (see [`ReportsChanges`]).
#[derive(Clone, Debug)]
pub struct PoolChanges {
    /// What to pass back next time.
    pub token: u64,
    /// The size the provider holds.
    pub size: u32,
    /// `nodes` is the whole pool (the token given was not the last one
    /// handed out, or none was): start over from it.
    pub whole: bool,
    /// The nodes changed or new since the token (every node when `whole`),
    /// in the provider's order; a new one comes after those seen before.
    pub nodes: Vec<crate::model::Node>,
    /// The nodes gone since the token.
    pub gone: Vec<std::sync::Arc<str>>,
}

/// A provider that can say what changed in a pool since it last said, so
/// that a look at a pool of thousands of nodes copies only the few that
/// changed. The simulator does when it runs in memory (as a forecast runs
/// it); one reader at a time (a token is good once).
pub trait ReportsChanges: Send + Sync {
    /// `Ok(None)`: there is no such pool. A call to the provider, as a
    /// describe is (it may fail as one does).
    fn changes(&self, pool: &str, token: Option<u64>) -> Result<Option<PoolChanges>>;

    /// The same, for a reader's own look between its calls (a forecast
    /// counting after each step): not counted as a call where calls are
    /// counted.
    fn changes_unmetered(&self, pool: &str, token: Option<u64>) -> Result<Option<PoolChanges>> {
        self.changes(pool, token)
    }
}

/// The primitives every backend offers. Calls are idempotent where the provider
/// allows it; the executor's journal makes the rest safe to resume.
#[async_trait]
pub trait Provider: Send + Sync {
    /// The provider document's name (for messages).
    fn name(&self) -> &str;

    fn capabilities(&self) -> Capabilities;

    /// Describe many pools in as few calls as the backend allows. Pools that do
    /// not exist are absent from the answer.
    async fn describe_pools(&self, names: &[String]) -> Result<Vec<ObservedPool>>;

    /// Create a pool at `spec.size`, tagged as managed by poolwright.
    async fn create_pool(&self, spec: &PoolSpec, key: &OpKey) -> Result<()>;

    /// Delete a pool and its nodes.
    async fn delete_pool(&self, pool: &str, key: &OpKey) -> Result<()>;

    /// Set the size the provider holds; growing launches nodes on the current
    /// template, shrinking lets the provider choose victims (prefer
    /// `terminate_node` when the choice matters).
    async fn set_size(&self, pool: &str, size: u32, key: &OpKey) -> Result<()>;

    /// Set the template future nodes launch with (does not touch running nodes).
    async fn set_template(&self, pool: &str, template: &NodeTemplate, key: &OpKey) -> Result<()>;

    /// Launch `count` more nodes on the current template, raising the size
    /// to `size` (the size observed plus `count`: absolute, so a backend may
    /// refuse when its size changed meanwhile, and a replay is the same
    /// request). Returns the new node ids, as far as the backend knows them.
    async fn create_nodes(
        &self,
        pool: &str,
        count: u32,
        size: u32,
        key: &OpKey,
    ) -> Result<Vec<String>>;

    /// Terminate one node. With `decrement`, the size drops by one too
    /// (otherwise the provider replaces it).
    async fn terminate_node(
        &self,
        pool: &str,
        node: &str,
        decrement: bool,
        key: &OpKey,
    ) -> Result<()>;

    /// Apply labels, annotations, taints and tags to the pool and its nodes.
    async fn update_in_place(&self, pool: &str, attrs: &InPlace, key: &OpKey) -> Result<()>;

    /// Set autoscaler bounds.
    async fn set_bounds(
        &self,
        pool: &str,
        bounds: Option<crate::model::Bounds>,
        key: &OpKey,
    ) -> Result<()>;

    /// Tell the provider which pools of the files it serves, so it can map a
    /// pool to its own resource (an Auto Scaling group name, say) and know each
    /// pool's home size and bounds. Called on every (re)load.
    fn bind_pools(&self, pools: &[PoolSpec]) {
        let _ = pools;
    }

    /// Mark an existing pool as managed by poolwright (`spec.adopt`).
    async fn adopt_pool(&self, pool: &str, key: &OpKey) -> Result<()> {
        let _ = (pool, key);
        Ok(())
    }

    /// The images a channel's source offers (`kind: ImageChannel`), each
    /// with its release time. One call per channel, whatever its pools.
    async fn channel_images(
        &self,
        channel: &str,
        source: &crate::spec::types::ChannelSource,
    ) -> Result<Vec<crate::model::image::Release>> {
        let _ = source;
        Err(ProviderError::new(
            format!("ChannelImages({channel})"),
            ErrorKind::Unsupported,
            format!("provider {} publishes no images", self.name()),
        ))
    }

    /// Reimage one node onto the current template (only with `capabilities().reimage`).
    async fn reimage_node(&self, pool: &str, node: &str, key: &OpKey) -> Result<()> {
        let _ = (node, key);
        Err(ProviderError::new(
            format!("ReimageNode({pool})"),
            ErrorKind::Unsupported,
            format!("provider {} cannot reimage nodes", self.name()),
        ))
    }
}
