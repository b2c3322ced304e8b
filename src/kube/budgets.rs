//! The PDB pre-flight's read of a cluster: which PodDisruptionBudgets allow
//! no disruption now, and over which pods on which of a pool's nodes. Two
//! list calls at most: the budgets, and, only when one of them allows
//! nothing, the pods.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::Api;
use kube::api::ListParams;

use super::Cluster;
use super::drain::{must_move, selects};
use crate::model::{ObservedPool, PdbBlock};
use crate::provider::ClusterError;

/// By pool, by provider node id: the budgets that would block the node's
/// drain now.
pub type Blocking = BTreeMap<String, BTreeMap<String, Vec<PdbBlock>>>;

/// The budgets of `cluster` that allow no disruption over pods running on
/// the nodes of `pools`.
pub async fn blocking(
    cluster: &Cluster,
    pools: &[&ObservedPool],
) -> Result<Blocking, ClusterError> {
    let mut out: Blocking = pools
        .iter()
        .map(|p| (p.name.clone(), BTreeMap::new()))
        .collect();
    let budgets = Api::<PodDisruptionBudget>::all(cluster.client.clone())
        .list(&ListParams::default())
        .await
        .map_err(|e| cluster.error("list poddisruptionbudgets".into(), e))?;
    let stuck: Vec<&PodDisruptionBudget> = budgets
        .items
        .iter()
        .filter(|b| {
            b.status
                .as_ref()
                .and_then(|s| s.disruptions_allowed)
                .is_some_and(|n| n <= 0)
        })
        .collect();
    if stuck.is_empty() {
        return Ok(out);
    }
    // Node name -> (pool, provider node id).
    let known = cluster.nodes_by_id().await?;
    let mut ours: HashMap<String, (&str, &str)> = HashMap::new();
    for p in pools {
        for n in p.live_nodes() {
            if let Some(v) = known.get(n.cluster_key()).or_else(|| known.get(&*n.id)) {
                ours.insert(v.name.clone(), (p.name.as_str(), &*n.id));
            }
        }
    }
    let pods = Api::<Pod>::all(cluster.client.clone())
        .list(&ListParams::default())
        .await
        .map_err(|e| cluster.error("list pods".into(), e))?;
    for pod in pods.items.iter().filter(|p| must_move(p)) {
        let Some((pool, id)) = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_ref())
            .and_then(|n| ours.get(n))
        else {
            continue;
        };
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let labels = pod.metadata.labels.clone().unwrap_or_default();
        let pod_name = format!("{ns}/{}", pod.metadata.name.clone().unwrap_or_default());
        for b in &stuck {
            let selected = b.metadata.namespace.as_deref() == Some(ns.as_str())
                && b.spec
                    .as_ref()
                    .and_then(|s| s.selector.as_ref())
                    .is_some_and(|sel| selects(sel, &labels));
            if !selected {
                continue;
            }
            let on_node = out
                .entry(pool.to_string())
                .or_default()
                .entry(id.to_string())
                .or_default();
            let name = format!("{ns}/{}", b.metadata.name.clone().unwrap_or_default());
            match on_node.iter_mut().find(|x| x.pdb == name) {
                Some(x) => x.pods.push(pod_name.clone()),
                None => on_node.push(block_of(b, name, pod_name.clone())),
            }
        }
    }
    Ok(out)
}

fn block_of(b: &PodDisruptionBudget, name: String, pod: String) -> PdbBlock {
    let status = b.status.as_ref();
    let spec = b.spec.as_ref();
    let text = |v: &IntOrString| match v {
        IntOrString::Int(i) => i.to_string(),
        IntOrString::String(s) => s.clone(),
    };
    let rule = match (
        spec.and_then(|s| s.min_available.as_ref()),
        spec.and_then(|s| s.max_unavailable.as_ref()),
    ) {
        (Some(m), _) => format!("minAvailable {}", text(m)),
        (None, Some(m)) => format!("maxUnavailable {}", text(m)),
        (None, None) => "no minimum set".into(),
    };
    PdbBlock {
        pdb: name,
        allowed: status.and_then(|s| s.disruptions_allowed).unwrap_or(0),
        healthy: status.and_then(|s| s.current_healthy).unwrap_or(0),
        rule,
        pods: vec![pod],
    }
}
