//! Draining nodes before they are taken down, beside the providers: the
//! Kubernetes drainer (Eviction API, PodDisruptionBudgets) implements this
//! trait, the simulator has its own, and a pool without a cluster has nothing
//! to drain. The executor reports each drain's progress to the step function
//! as data (`DrainProgress`).

use crate::sync::Locked;
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use jiff::Timestamp;

use super::sim::Sim;
use crate::model::DrainProgress;

/// A Kubernetes call that failed: what was asked, of which cluster, and the
/// API server's answer. (Here, beside the `Drainer` whose errors carry it:
/// the Kubernetes drainer implements that trait.)
#[derive(Debug, thiserror::Error)]
#[error("{call} in cluster {cluster}: {source}")]
pub struct ClusterError {
    /// `list nodes`, `cordon node web-3`, `delete pod default/web-1`...
    pub call: String,
    pub cluster: String,
    #[source]
    pub source: kube::Error,
}

/// A cordon, an uncordon or a forced drain that failed.
#[derive(Debug, thiserror::Error)]
pub enum DrainError {
    /// The Kubernetes API refused or could not be reached.
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    /// The simulator refused (its node is gone).
    #[error(transparent)]
    Provider(#[from] super::ProviderError),
}

#[async_trait]
pub trait Drainer: Send + Sync {
    /// Mark the node unschedulable.
    async fn cordon(&self, pool: &str, node: &str) -> Result<(), DrainError>;
    /// Make it schedulable again (rollback, in-place completion).
    async fn uncordon(&self, pool: &str, node: &str) -> Result<(), DrainError>;
    /// Continue draining a node (idempotent) and say how it is going.
    async fn progress(
        &self,
        pool: &str,
        node: &str,
        since: Timestamp,
        now: Timestamp,
    ) -> DrainProgress;
    /// Stop waiting: delete what is left on the node.
    async fn force(&self, pool: &str, node: &str) -> Result<(), DrainError>;
    /// Why a workload holds the node now (a running pod annotated
    /// do-not-disrupt), if one does. Without workloads, nothing holds.
    async fn hold(&self, _pool: &str, _node: &str) -> Result<Option<String>, DrainError> {
        Ok(None)
    }
}

/// For pools without a cluster and a provider without workloads to move:
/// nothing to drain.
pub struct NoDrain;

#[async_trait]
impl Drainer for NoDrain {
    async fn cordon(&self, _: &str, _: &str) -> Result<(), DrainError> {
        Ok(())
    }
    async fn uncordon(&self, _: &str, _: &str) -> Result<(), DrainError> {
        Ok(())
    }
    async fn progress(&self, _: &str, _: &str, _: Timestamp, _: Timestamp) -> DrainProgress {
        DrainProgress::Done
    }
    async fn force(&self, _: &str, _: &str) -> Result<(), DrainError> {
        Ok(())
    }
}

/// The simulator's drainer: cordoning sets the node's flag in the simulated
/// fleet; a drain takes the node's drawn drain time, or never ends on its own
/// for nodes drawn as PDB-blocked.
pub struct SimDrainer {
    sim: Arc<Sim>,
    forced: Mutex<BTreeSet<String>>,
}

impl SimDrainer {
    pub fn new(sim: Arc<Sim>) -> Self {
        SimDrainer {
            sim,
            forced: Mutex::new(BTreeSet::new()),
        }
    }
}

#[async_trait]
impl Drainer for SimDrainer {
    async fn cordon(&self, pool: &str, node: &str) -> Result<(), DrainError> {
        Ok(self.sim.set_cordoned(pool, node, true)?)
    }
    async fn uncordon(&self, pool: &str, node: &str) -> Result<(), DrainError> {
        Ok(self.sim.set_cordoned(pool, node, false)?)
    }
    async fn progress(
        &self,
        _: &str,
        node: &str,
        since: Timestamp,
        now: Timestamp,
    ) -> DrainProgress {
        if self.forced.locked().contains(node) {
            return DrainProgress::Done;
        }
        let (time, blocked) = self.sim.drain_profile(node);
        if blocked {
            DrainProgress::Blocked(
                "cannot evict pod app-0: PodDisruptionBudget app allows 0 disruptions (simulated)"
                    .into(),
            )
        } else if now >= since.saturating_add(time).unwrap_or(Timestamp::MAX) {
            DrainProgress::Done
        } else {
            DrainProgress::Running
        }
    }
    async fn force(&self, _: &str, node: &str) -> Result<(), DrainError> {
        self.forced.locked().insert(node.to_string());
        Ok(())
    }
}
