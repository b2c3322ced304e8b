//! A home for durable state that several daemons share (`run --ha
//! kubernetes`: ConfigMaps beside the Lease). The trait is here, beside the
//! journal and the inventory that keep their state in it; `ha::store`
//! implements it, fenced by the leases.

use std::collections::BTreeMap;

use async_trait::async_trait;

/// One record of the shared state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Record<'a> {
    /// A pool's rollout journal.
    Journal(&'a str),
    /// The inventory (sharded: the entries of one shard's pools).
    Inventory(u32),
    /// The inventory as daemons without `--shards` keep it (a sharded
    /// daemon reads it only to refuse a layout it would misread).
    SingleInventory,
    /// A fleet rollout's change in progress (every daemon reads and writes it).
    Fleet(&'a str),
    /// What the image channels remember (every daemon reads it; the one
    /// asking the sources, and any that takes a recall, writes it).
    Images,
}

/// Why this process may not act now: it holds no current term of the lease
/// that fences the pool or record (lost, not yet taken, or being handed
/// over). The text says which, for the operator.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Fenced(pub String);

/// Why a shared write did not happen.
#[derive(Debug, thiserror::Error)]
pub enum SharedError {
    /// This daemon holds no current term for it (fenced).
    #[error("{0}")]
    Fenced(Fenced),
    #[error("{0:#}")]
    Other(#[from] anyhow::Error),
}

/// A compare-and-swap change: given the record as it is (if it exists),
/// the body to write instead, or `None` to leave it.
pub type Change<'a> = dyn FnMut(Option<&str>) -> anyhow::Result<Option<String>> + Send + 'a;

#[async_trait]
pub trait SharedHome: Send + Sync {
    /// How many shards the pools are split into, when they are.
    fn shard_count(&self) -> Option<u32>;
    /// The shard of `pool` (0 without sharding).
    fn shard_of(&self, pool: &str) -> u32;
    /// Whether this process may start a step on `pool` now.
    fn may_act(&self, pool: &str) -> Result<(), Fenced>;
    /// The record as people know it (`ConfigMap NAMESPACE/NAME`).
    fn describe(&self, record: Record<'_>) -> String;
    async fn read(&self, record: Record<'_>) -> anyhow::Result<Option<String>>;
    /// Replace (or create) the record, fenced by the lease of its pool or shard.
    async fn write(&self, record: Record<'_>, body: String) -> anyhow::Result<()>;
    /// Delete the record (fenced like `write`); already gone is fine.
    async fn delete(&self, record: Record<'_>) -> anyhow::Result<()>;
    /// Every pool's journal, by pool.
    async fn journals(&self) -> anyhow::Result<BTreeMap<String, String>>;
    /// Every shard's part of the inventory, by shard (sharded only).
    async fn inventories(&self) -> anyhow::Result<BTreeMap<u32, String>>;
    /// Change a record every daemon writes (a fleet change): read, change,
    /// and write only if nobody wrote it in between, trying again with what
    /// they wrote otherwise. The writer must hold a current term of some
    /// lease. Returns the body in force afterwards.
    async fn update(
        &self,
        record: Record<'_>,
        change: &mut Change<'_>,
    ) -> Result<Option<String>, SharedError>;
}
