//! A provider seen through a cluster: its observations carry Kubernetes Ready
//! and cordon state, so the executor gates new nodes on Ready. For the
//! simulator, this is also where its nodes register as Node objects (what a
//! kubelet does on a real machine), so the whole path runs without a cloud.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Node as KubeNode;
use kube::Api;
use kube::api::{DeleteParams, PostParams};

use super::nodes::{NodeView, overlay};
use super::{Cluster, ConnectError};
use crate::model::{Bounds, InPlace, NodeState, NodeTemplate, ObservedPool, PoolSpec};
use crate::provider::{Capabilities, ErrorKind, OpKey, Provider, ProviderError, Result};
use crate::spec::Config;
use crate::spec::types::ProviderSpec;

/// The label carrying a registered simulator node's id.
const SIM_NODE_LABEL: &str = "poolwright.io/node-id";

pub struct Attached {
    inner: Arc<dyn Provider>,
    cluster: Cluster,
    /// Register the provider's booted nodes as Node objects (the simulator).
    register: bool,
}

impl Attached {
    pub fn new(inner: Arc<dyn Provider>, cluster: Cluster, register: bool) -> Attached {
        Attached {
            inner,
            cluster,
            register,
        }
    }

    fn error(&self, call: &str, message: String) -> ProviderError {
        ProviderError::new(
            format!("{call} (cluster {})", self.cluster.name),
            ErrorKind::Unavailable,
            message,
        )
    }

    /// Create a Node for every booted simulator node that has none (kwok then
    /// plays its kubelet), and remove the Nodes of nodes that are gone.
    async fn register(
        &self,
        pools: &[ObservedPool],
        known: &HashMap<String, NodeView>,
    ) -> Result<()> {
        let api: Api<KubeNode> = Api::all(self.cluster.client.clone());
        for pool in pools {
            for n in &pool.nodes {
                let booted = matches!(n.state, NodeState::Healthy | NodeState::Unhealthy);
                if booted && !known.contains_key(&*n.id) {
                    // The simulator's zone and labels become the Node's, as
                    // a cloud's kubelet would label it.
                    let mut labels = serde_json::Map::new();
                    for (k, v) in &n.labels {
                        labels.insert(k.clone(), v.clone().into());
                    }
                    if let Some(z) = &n.zone {
                        labels.insert(super::nodes::ZONE_LABEL.into(), z.to_string().into());
                    }
                    labels.insert(SIM_NODE_LABEL.into(), n.id.to_string().into());
                    labels.insert("poolwright.io/pool".into(), pool.name.clone().into());
                    labels.insert("type".into(), "kwok".into());
                    let node: KubeNode = serde_json::from_value(serde_json::json!({
                        "metadata": {
                            "name": n.id,
                            "labels": labels,
                            "annotations": {"kwok.x-k8s.io/node": "fake"},
                        },
                        "spec": {"providerID": format!("sim://{}/{}", pool.name, n.id)},
                    }))
                    .expect("a Node literal");
                    match api.create(&PostParams::default(), &node).await {
                        Ok(_) => {}
                        Err(kube::Error::Api(s)) if s.code == 409 => {}
                        Err(e) => return Err(self.error("register node", e.to_string())),
                    }
                }
                if n.state == NodeState::Terminating && known.contains_key(&*n.id) {
                    self.deregister(&n.id).await?;
                }
            }
        }
        Ok(())
    }

    /// Lay the cluster's view over observed pools (registering simulator nodes first).
    pub async fn see(&self, pools: &mut [ObservedPool]) -> Result<()> {
        let mut known = self
            .cluster
            .nodes_by_id()
            .await
            .map_err(|e| self.error("list nodes", e.to_string()))?;
        if self.register {
            self.register(pools, &known).await?;
            known = self
                .cluster
                .nodes_by_id()
                .await
                .map_err(|e| self.error("list nodes", e.to_string()))?;
        }
        for pool in pools.iter_mut() {
            overlay(pool, &known);
        }
        Ok(())
    }

    async fn deregister(&self, id: &str) -> Result<()> {
        let Some(node) = self
            .cluster
            .node_of(id)
            .await
            .map_err(|e| self.error("find node", e.to_string()))?
        else {
            return Ok(());
        };
        let api: Api<KubeNode> = Api::all(self.cluster.client.clone());
        match api.delete(&node.name, &DeleteParams::default()).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(self.error("delete node", e.to_string())),
        }
    }
}

impl Attached {
    pub fn cluster(&self) -> &Cluster {
        &self.cluster
    }
}

/// Connect the cluster a pool names and put its provider behind it. The
/// simulator's nodes have no kubelet: they register as Node objects here.
pub async fn connect(
    config: &Config,
    provider_name: &str,
    cluster_name: &str,
    provider: Arc<dyn Provider>,
) -> std::result::Result<Attached, ConnectError> {
    let entry = config
        .clusters
        .get(cluster_name)
        .ok_or_else(|| ConnectError::Unknown(cluster_name.to_string()))?;
    let base = std::path::Path::new(&entry.file)
        .parent()
        .unwrap_or(std::path::Path::new("."));
    let cluster = Cluster::connect(cluster_name, &entry.doc.spec.value, base)
        .await
        .map_err(|source| ConnectError::Config {
            cluster: cluster_name.to_string(),
            source,
        })?;
    let register = config
        .providers
        .get(provider_name)
        .is_some_and(|e| matches!(e.doc.spec.value, ProviderSpec::Sim(_)));
    Ok(Attached::new(provider, cluster, register))
}

#[async_trait]
impl Provider for Attached {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    fn bind_pools(&self, pools: &[PoolSpec]) {
        self.inner.bind_pools(pools)
    }

    async fn describe_pools(&self, names: &[String]) -> Result<Vec<ObservedPool>> {
        let mut pools = self.inner.describe_pools(names).await?;
        self.see(&mut pools).await?;
        Ok(pools)
    }

    async fn create_pool(&self, spec: &PoolSpec, key: &OpKey) -> Result<()> {
        self.inner.create_pool(spec, key).await
    }

    async fn delete_pool(&self, pool: &str, key: &OpKey) -> Result<()> {
        self.inner.delete_pool(pool, key).await
    }

    async fn adopt_pool(&self, pool: &str, key: &OpKey) -> Result<()> {
        self.inner.adopt_pool(pool, key).await
    }

    async fn set_size(&self, pool: &str, size: u32, key: &OpKey) -> Result<()> {
        self.inner.set_size(pool, size, key).await
    }

    async fn set_template(&self, pool: &str, template: &NodeTemplate, key: &OpKey) -> Result<()> {
        self.inner.set_template(pool, template, key).await
    }

    async fn create_nodes(
        &self,
        pool: &str,
        count: u32,
        size: u32,
        key: &OpKey,
    ) -> Result<Vec<String>> {
        self.inner.create_nodes(pool, count, size, key).await
    }

    async fn terminate_node(
        &self,
        pool: &str,
        node: &str,
        decrement: bool,
        key: &OpKey,
    ) -> Result<()> {
        self.inner
            .terminate_node(pool, node, decrement, key)
            .await?;
        if self.register {
            self.deregister(node).await?;
        }
        Ok(())
    }

    async fn update_in_place(&self, pool: &str, attrs: &InPlace, key: &OpKey) -> Result<()> {
        self.inner.update_in_place(pool, attrs, key).await
    }

    async fn set_bounds(&self, pool: &str, bounds: Option<Bounds>, key: &OpKey) -> Result<()> {
        self.inner.set_bounds(pool, bounds, key).await
    }

    async fn reimage_node(&self, pool: &str, node: &str, key: &OpKey) -> Result<()> {
        self.inner.reimage_node(pool, node, key).await
    }
}
