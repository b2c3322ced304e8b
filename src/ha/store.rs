//! The daemon's durable state in the cluster, for `run --ha kubernetes`: each
//! pool's rollout journal, the inventory and each fleet rollout's change, one
//! ConfigMap each, beside the Lease, so whichever daemon holds the lease
//! resumes where the last one stopped. It is the journal's and the
//! inventory's [`SharedHome`].
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
//!
//! A fleet change (`LEASE-fleet-NAME`) is the one object every daemon
//! writes: each write is a compare-and-swap on resourceVersion by a daemon
//! holding a current term of some lease, tried again on a conflict with what
//! the other writer left. The image channels' record (`LEASE-images`) is
//! written the same way.

use std::collections::BTreeMap;
use std::sync::Arc;

use anyhow::Context as _;
use async_trait::async_trait;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, ListParams, PostParams, Preconditions};

use super::shards::Shards;
use crate::store::shared::Fenced;
use crate::store::shared::{Change, Record, SharedError, SharedHome};

const KEY: &str = "state.json";
const EPOCH: &str = "poolwright.io/leader-epoch";
/// Which Lease the epoch counts the terms of (epochs of two Leases do not compare).
const EPOCH_LEASE: &str = "poolwright.io/epoch-lease";
const WRITER: &str = "poolwright.io/written-by";
const LEASE_LABEL: &str = "poolwright.io/lease";
const JOURNAL_LABEL: &str = "poolwright.io/journal-of";
const INVENTORY_LABEL: &str = "poolwright.io/inventory-shard";
const FLEET_LABEL: &str = "poolwright.io/fleet";
/// A compare-and-swap that keeps losing to other writers gives up after this many tries.
const UPDATE_TRIES: usize = 16;

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

    /// The ConfigMap holding `record`.
    pub fn name(&self, record: Record<'_>) -> String {
        match record {
            Record::Journal(pool) => format!("{}-journal-{pool}", self.lease),
            Record::Inventory(shard) if self.shards.is_sharded() => {
                format!("{}-inventory-{shard}", self.lease)
            }
            Record::Inventory(_) | Record::SingleInventory => format!("{}-inventory", self.lease),
            Record::Fleet(name) => format!("{}-fleet-{name}", self.lease),
            Record::Images => format!("{}-images", self.lease),
        }
    }

    fn describe_name(&self, name: &str) -> String {
        format!("ConfigMap {}/{name}", self.namespace)
    }

    /// The shard whose lease fences a write of `record` (`None`: a record
    /// every daemon writes, fenced by any current term).
    fn fenced_by(&self, record: Record<'_>) -> Option<u32> {
        match record {
            Record::Journal(pool) => Some(self.shards.of(pool)),
            Record::Inventory(shard) => Some(shard),
            Record::SingleInventory => Some(0),
            Record::Fleet(_) | Record::Images => None,
        }
    }

    fn labels(&self, record: Record<'_>) -> BTreeMap<String, String> {
        let mut labels = BTreeMap::from([(LEASE_LABEL.to_string(), self.lease.clone())]);
        match record {
            Record::Journal(pool) => {
                labels.insert(JOURNAL_LABEL.to_string(), pool.to_string());
            }
            Record::Inventory(shard) if self.shards.is_sharded() => {
                labels.insert(INVENTORY_LABEL.to_string(), shard.to_string());
            }
            Record::Inventory(_) | Record::SingleInventory => {}
            Record::Fleet(name) => {
                labels.insert(FLEET_LABEL.to_string(), name.to_string());
            }
            Record::Images => {}
        }
        labels
    }

    async fn list(&self, label: &str) -> anyhow::Result<Vec<(String, String)>> {
        let selector = format!("{LEASE_LABEL}={},{label}", self.lease);
        let list = self
            .api
            .list(&ListParams::default().labels(&selector))
            .await
            .with_context(|| format!("listing ConfigMaps {selector} in {}", self.namespace))?;
        Ok(list
            .items
            .into_iter()
            .filter_map(|c| {
                let value = c.metadata.labels.as_ref()?.get(label)?.clone();
                Some((value, c.data?.remove(KEY)?))
            })
            .collect())
    }
}

#[async_trait]
impl SharedHome for ClusterStore {
    fn shard_count(&self) -> Option<u32> {
        self.shards.is_sharded().then(|| self.shards.count())
    }

    fn shard_of(&self, pool: &str) -> u32 {
        self.shards.of(pool)
    }

    /// Whether this process may start a step on `pool` now (holds a current
    /// term of its shard, and is not handing the shard over).
    fn may_act(&self, pool: &str) -> Result<(), Fenced> {
        self.shards.may_start(pool).map(|_| ())
    }

    fn describe(&self, record: Record<'_>) -> String {
        self.describe_name(&self.name(record))
    }

    async fn read(&self, record: Record<'_>) -> anyhow::Result<Option<String>> {
        let name = self.name(record);
        let cm = self
            .api
            .get_opt(&name)
            .await
            .with_context(|| format!("reading {}", self.describe_name(&name)))?;
        Ok(cm.and_then(|c| c.data).and_then(|mut d| d.remove(KEY)))
    }

    async fn journals(&self) -> anyhow::Result<BTreeMap<String, String>> {
        Ok(self
            .list(JOURNAL_LABEL)
            .await
            .context("the rollout journals")?
            .into_iter()
            .collect())
    }

    async fn inventories(&self) -> anyhow::Result<BTreeMap<u32, String>> {
        Ok(self
            .list(INVENTORY_LABEL)
            .await
            .context("the inventory's shards")?
            .into_iter()
            .filter_map(|(shard, body)| Some((shard.parse().ok()?, body)))
            .collect())
    }

    /// Replace (or create) the record, if this daemon still holds the lease
    /// of its pool's shard (or the inventory's) and no newer holder has
    /// written it.
    async fn write(&self, record: Record<'_>, body: String) -> anyhow::Result<()> {
        let name = self.name(record);
        let shard = self.fenced_by(record).unwrap_or(0);
        let term = self.shards.may_write(shard).map_err(anyhow::Error::msg)?;
        let what = self.describe_name(&name);
        let current = self
            .api
            .get_opt(&name)
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
        let cm = ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(self.namespace.clone()),
                labels: Some(self.labels(record)),
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
            Some(_) => self.api.replace(&name, &PostParams::default(), &cm).await,
        };
        written.map(|_| ()).map_err(|e| match e {
            kube::Error::Api(s) if s.code == 409 => anyhow::anyhow!(
                "{what} changed while this daemon was writing it (another writer?): {}",
                s.message
            ),
            e => anyhow::anyhow!("writing {what}: {e}"),
        })
    }

    async fn delete(&self, record: Record<'_>) -> anyhow::Result<()> {
        let name = self.name(record);
        let shard = self.fenced_by(record).unwrap_or(0);
        let term = self.shards.may_write(shard).map_err(anyhow::Error::msg)?;
        let what = self.describe_name(&name);
        let Some(current) = self
            .api
            .get_opt(&name)
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
        match self.api.delete(&name, &params).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(anyhow::anyhow!("deleting {what}: {e}")),
        }
    }

    async fn update(
        &self,
        record: Record<'_>,
        change: &mut Change<'_>,
    ) -> Result<Option<String>, SharedError> {
        let name = self.name(record);
        let what = self.describe_name(&name);
        for _ in 0..UPDATE_TRIES {
            let identity = self.any_term().map_err(SharedError::Fenced)?;
            let current = self
                .api
                .get_opt(&name)
                .await
                .with_context(|| format!("reading {what}"))?;
            let body = current
                .as_ref()
                .and_then(|c| c.data.as_ref())
                .and_then(|d| d.get(KEY))
                .cloned();
            let Some(next) = change(body.as_deref())? else {
                return Ok(body);
            };
            let cm = ConfigMap {
                metadata: ObjectMeta {
                    name: Some(name.clone()),
                    namespace: Some(self.namespace.clone()),
                    labels: Some(self.labels(record)),
                    annotations: Some(BTreeMap::from([(WRITER.to_string(), identity)])),
                    resource_version: current
                        .as_ref()
                        .and_then(|c| c.metadata.resource_version.clone()),
                    ..ObjectMeta::default()
                },
                data: Some(BTreeMap::from([(KEY.to_string(), next.clone())])),
                ..ConfigMap::default()
            };
            let written = match current {
                None => self.api.create(&PostParams::default(), &cm).await,
                Some(_) => self.api.replace(&name, &PostParams::default(), &cm).await,
            };
            match written {
                Ok(_) => return Ok(Some(next)),
                // Another daemon wrote it in between: change what it left.
                Err(kube::Error::Api(s)) if s.code == 409 => continue,
                Err(e) => return Err(anyhow::anyhow!("writing {what}: {e}").into()),
            }
        }
        Err(anyhow::anyhow!(
            "{what} kept changing under this daemon's writes ({UPDATE_TRIES} tries); trying again later"
        )
        .into())
    }
}

impl ClusterStore {
    /// The identity under which this daemon holds a current term of some
    /// lease: a record every daemon writes needs one.
    fn any_term(&self) -> Result<String, Fenced> {
        let mut last = None;
        for shard in 0..self.shards.count() {
            match self.shards.may_write(shard) {
                Ok(term) => return Ok(term.identity),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| Fenced("this daemon holds no lease".into())))
    }

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
