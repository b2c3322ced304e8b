//! The daemon's durable state in the cluster, for `run --ha kubernetes`: each
//! pool's rollout journal and the inventory, one ConfigMap each, beside the
//! Lease, so whichever daemon holds the lease resumes where the last one stopped.
//!
//! Only the lease holder writes, and every write is fenced twice: the writer must
//! hold a current term ([`Fence`]), and the ConfigMap it replaces must not carry
//! a newer epoch than its own (a deposed leader's late write is refused). The
//! replace is a compare-and-swap on resourceVersion.
//!
//! With `--shards S` the fence is the pool's shard's ([`Shards`]): a journal
//! is written under its pool's shard lease, and the inventory is one ConfigMap
//! per shard (`LEASE-inventory-I`, the entries of that shard's pools), so
//! daemons holding different shards never write the same object.

use std::collections::BTreeMap;
use std::sync::Arc;

use anyhow::Context as _;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, ListParams, PostParams, Preconditions};

use super::shards::Shards;

const KEY: &str = "state.json";
const EPOCH: &str = "poolwright.io/leader-epoch";
/// Which Lease the epoch counts the terms of (epochs of two Leases do not compare).
const EPOCH_LEASE: &str = "poolwright.io/epoch-lease";
const WRITER: &str = "poolwright.io/written-by";
const LEASE_LABEL: &str = "poolwright.io/lease";
const JOURNAL_LABEL: &str = "poolwright.io/journal-of";
const INVENTORY_LABEL: &str = "poolwright.io/inventory-shard";

pub struct ClusterStore {
    api: Api<ConfigMap>,
    namespace: String,
    /// The Lease's name: every ConfigMap is named after it.
    lease: String,
    pub shards: Arc<Shards>,
}

impl ClusterStore {
    pub fn new(client: kube::Client, namespace: &str, lease: &str, shards: Arc<Shards>) -> Self {
        ClusterStore {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_string(),
            lease: lease.to_string(),
            shards,
        }
    }

    pub fn journal_name(&self, pool: &str) -> String {
        format!("{}-journal-{pool}", self.lease)
    }

    /// The inventory's ConfigMap without sharding.
    pub fn single_inventory_name(&self) -> String {
        format!("{}-inventory", self.lease)
    }

    /// The inventory's ConfigMap: one, or (sharded) one per shard.
    pub fn inventory_name(&self, shard: u32) -> String {
        if self.shards.is_sharded() {
            format!("{}-inventory-{shard}", self.lease)
        } else {
            format!("{}-inventory", self.lease)
        }
    }

    pub fn describe(&self, name: &str) -> String {
        format!("ConfigMap {}/{name}", self.namespace)
    }

    /// Whether this process may start a step on `pool` now (holds a current
    /// term of its shard, and is not handing the shard over).
    pub fn may_act(&self, pool: &str) -> Result<(), String> {
        self.shards.may_start(pool).map(|_| ())
    }

    pub async fn read(&self, name: &str) -> anyhow::Result<Option<String>> {
        let cm = self
            .api
            .get_opt(name)
            .await
            .with_context(|| format!("reading {}", self.describe(name)))?;
        Ok(cm.and_then(|c| c.data).and_then(|mut d| d.remove(KEY)))
    }

    /// Every pool's journal, by pool.
    pub async fn journals(&self) -> anyhow::Result<BTreeMap<String, String>> {
        let selector = format!("{LEASE_LABEL}={},{JOURNAL_LABEL}", self.lease);
        let list = self
            .api
            .list(&ListParams::default().labels(&selector))
            .await
            .with_context(|| {
                format!(
                    "listing the rollout journals (ConfigMaps {selector}) in {}",
                    self.namespace
                )
            })?;
        Ok(list
            .items
            .into_iter()
            .filter_map(|c| {
                let pool = c.metadata.labels.as_ref()?.get(JOURNAL_LABEL)?.clone();
                Some((pool, c.data?.remove(KEY)?))
            })
            .collect())
    }

    /// Every shard's inventory ConfigMap, by shard (sharded stores only).
    pub async fn inventories(&self) -> anyhow::Result<BTreeMap<u32, String>> {
        let selector = format!("{LEASE_LABEL}={},{INVENTORY_LABEL}", self.lease);
        let list = self
            .api
            .list(&ListParams::default().labels(&selector))
            .await
            .with_context(|| {
                format!(
                    "listing the inventory's shards (ConfigMaps {selector}) in {}",
                    self.namespace
                )
            })?;
        Ok(list
            .items
            .into_iter()
            .filter_map(|c| {
                let shard = c
                    .metadata
                    .labels
                    .as_ref()?
                    .get(INVENTORY_LABEL)?
                    .parse()
                    .ok()?;
                Some((shard, c.data?.remove(KEY)?))
            })
            .collect())
    }

    /// Replace (or create) `name` with `body`, if this daemon still holds
    /// `of`'s lease (the pool's shard, or the inventory's) and no newer holder
    /// has written it.
    pub async fn write(&self, name: &str, of: Of<'_>, body: String) -> anyhow::Result<()> {
        let shard = match of {
            Of::Journal(pool) => self.shards.of(pool),
            Of::Inventory(shard) => shard,
        };
        let term = self.shards.may_write(shard).map_err(anyhow::Error::msg)?;
        let what = self.describe(name);
        let current = self
            .api
            .get_opt(name)
            .await
            .with_context(|| format!("reading {what} before writing it"))?;
        if let Some(epoch) = current.as_ref().and_then(|c| self.epoch_of(c, shard))
            && epoch > term.epoch
        {
            anyhow::bail!(
                "{what} was written by a newer leader (epoch {epoch}, this daemon's is {}): not overwriting it",
                term.epoch
            );
        }
        let mut labels = BTreeMap::from([(LEASE_LABEL.to_string(), self.lease.clone())]);
        match of {
            Of::Journal(pool) => {
                labels.insert(JOURNAL_LABEL.to_string(), pool.to_string());
            }
            Of::Inventory(shard) if self.shards.is_sharded() => {
                labels.insert(INVENTORY_LABEL.to_string(), shard.to_string());
            }
            Of::Inventory(_) => {}
        }
        let cm = ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                namespace: Some(self.namespace.clone()),
                labels: Some(labels),
                annotations: Some(BTreeMap::from([
                    (EPOCH.to_string(), term.epoch.to_string()),
                    (EPOCH_LEASE.to_string(), self.lease_of(shard)),
                    (WRITER.to_string(), term.identity.clone()),
                ])),
                resource_version: current
                    .as_ref()
                    .and_then(|c| c.metadata.resource_version.clone()),
                ..ObjectMeta::default()
            },
            data: Some(BTreeMap::from([(KEY.to_string(), body)])),
            ..ConfigMap::default()
        };
        let written = match current {
            None => self.api.create(&PostParams::default(), &cm).await,
            Some(_) => self.api.replace(name, &PostParams::default(), &cm).await,
        };
        written.map(|_| ()).map_err(|e| match e {
            kube::Error::Api(s) if s.code == 409 => anyhow::anyhow!(
                "{what} changed while this daemon was writing it (another writer?): {}",
                s.message
            ),
            e => anyhow::anyhow!("writing {what}: {e}"),
        })
    }

    /// Delete the journal of `pool` (fenced like [`write`](Self::write));
    /// already gone is fine.
    pub async fn delete_journal(&self, pool: &str) -> anyhow::Result<()> {
        let name = self.journal_name(pool);
        let name = name.as_str();
        let shard = self.shards.of(pool);
        let term = self.shards.may_write(shard).map_err(anyhow::Error::msg)?;
        let what = self.describe(name);
        let Some(current) = self
            .api
            .get_opt(name)
            .await
            .with_context(|| format!("reading {what} before deleting it"))?
        else {
            return Ok(());
        };
        if let Some(epoch) = self.epoch_of(&current, shard)
            && epoch > term.epoch
        {
            anyhow::bail!(
                "{what} was written by a newer leader (epoch {epoch}, this daemon's is {}): not deleting it",
                term.epoch
            );
        }
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                resource_version: current.metadata.resource_version.clone(),
                uid: current.metadata.uid.clone(),
            }),
            ..DeleteParams::default()
        };
        match self.api.delete(name, &params).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(anyhow::anyhow!("deleting {what}: {e}")),
        }
    }
}

/// Whose lease fences a write: the pool's shard for its journal, or the
/// inventory's shard.
#[derive(Clone, Copy, Debug)]
pub enum Of<'a> {
    Journal(&'a str),
    Inventory(u32),
}

impl ClusterStore {
    /// The Lease whose terms fence `shard`'s writes.
    fn lease_of(&self, shard: u32) -> String {
        if self.shards.is_sharded() {
            super::shards::shard_lease(&self.lease, shard)
        } else {
            self.lease.clone()
        }
    }

    /// The epoch a ConfigMap was written at, if it counts the same Lease's
    /// terms as `shard`'s (one written before the annotation existed was
    /// written under the single leader lease).
    fn epoch_of(&self, cm: &ConfigMap, shard: u32) -> Option<i32> {
        let annotations = cm.metadata.annotations.as_ref()?;
        let written_under = annotations
            .get(EPOCH_LEASE)
            .cloned()
            .unwrap_or_else(|| self.lease.clone());
        if written_under != self.lease_of(shard) {
            return None;
        }
        annotations.get(EPOCH)?.parse().ok()
    }
}
