//! Draining a Node through the Eviction API. Each call to `progress` looks at
//! what is left on the node and asks to evict it; a 429 (a PodDisruptionBudget
//! allows no disruption now) is reported as Blocked with the budget's name, and
//! the executor decides when waiting has lasted long enough (`drain.timeout`,
//! then `onTimeout`). Calls are spaced by the executor's poll, so the loop,
//! its backoff and its deadline are poolwright's, not kube's.

use async_trait::async_trait;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::Api;
use kube::api::{DeleteParams, EvictParams, ListParams};

use super::Cluster;
use crate::model::DrainProgress;
use crate::provider::ClusterError;
use crate::provider::{DrainError, Drainer};

/// Mirror pods are the kubelet's static pods; evicting them does nothing.
const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

pub struct KubeDrainer {
    cluster: Cluster,
}

impl KubeDrainer {
    pub fn new(cluster: Cluster) -> KubeDrainer {
        KubeDrainer { cluster }
    }

    /// Pods a drain must move: not owned by a DaemonSet (it would come back),
    /// not a mirror pod, not already terminating, not finished.
    async fn pods_to_move(&self, node: &str) -> Result<Vec<Pod>, ClusterError> {
        let api: Api<Pod> = Api::all(self.cluster.client.clone());
        let list = api
            .list(&ListParams::default().fields(&format!("spec.nodeName={node}")))
            .await
            .map_err(|e| self.cluster.error(format!("list pods on node {node}"), e))?;
        Ok(list.items.into_iter().filter(must_move).collect())
    }

    /// The budgets that select a pod, by name, for the blocked message.
    async fn budgets_for(&self, pod: &Pod) -> String {
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let api: Api<PodDisruptionBudget> = Api::namespaced(self.cluster.client.clone(), &ns);
        let Ok(list) = api.list(&ListParams::default()).await else {
            return "a PodDisruptionBudget".into();
        };
        let labels = pod.metadata.labels.clone().unwrap_or_default();
        let names: Vec<String> = list
            .items
            .iter()
            .filter(|pdb| {
                pdb.spec
                    .as_ref()
                    .and_then(|s| s.selector.as_ref())
                    .is_some_and(|sel| selects(sel, &labels))
            })
            .map(|pdb| {
                let allowed = pdb
                    .status
                    .as_ref()
                    .and_then(|s| s.disruptions_allowed)
                    .unwrap_or(0);
                format!(
                    "PodDisruptionBudget {ns}/{} (disruptions allowed: {allowed})",
                    pdb.metadata.name.clone().unwrap_or_default()
                )
            })
            .collect();
        if names.is_empty() {
            "a PodDisruptionBudget".into()
        } else {
            names.join(", ")
        }
    }

    async fn node_name(&self, id: &str) -> Result<Option<String>, ClusterError> {
        Ok(self.cluster.node_of(id).await?.map(|n| n.name))
    }
}

pub fn must_move(pod: &Pod) -> bool {
    let meta = &pod.metadata;
    if meta.deletion_timestamp.is_some() {
        return false;
    }
    if meta
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(MIRROR_ANNOTATION))
    {
        return false;
    }
    if meta
        .owner_references
        .as_ref()
        .is_some_and(|o| o.iter().any(|r| r.kind == "DaemonSet"))
    {
        return false;
    }
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    !matches!(phase, Some("Succeeded") | Some("Failed"))
}

fn name_of(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or("default"),
        pod.metadata.name.as_deref().unwrap_or("?")
    )
}

#[async_trait]
impl Drainer for KubeDrainer {
    async fn cordon(&self, _pool: &str, node: &str) -> Result<(), DrainError> {
        Ok(self.cluster.set_unschedulable(node, true).await?)
    }

    async fn uncordon(&self, _pool: &str, node: &str) -> Result<(), DrainError> {
        Ok(self.cluster.set_unschedulable(node, false).await?)
    }

    async fn progress(&self, _: &str, node: &str, _: Timestamp, _: Timestamp) -> DrainProgress {
        let name = match self.node_name(node).await {
            Ok(Some(n)) => n,
            // Never registered (or already gone): nothing runs there.
            Ok(None) => return DrainProgress::Done,
            Err(e) => return DrainProgress::Blocked(e.to_string()),
        };
        let pods = match self.pods_to_move(&name).await {
            Ok(p) => p,
            Err(e) => return DrainProgress::Blocked(e.to_string()),
        };
        if pods.is_empty() {
            return DrainProgress::Done;
        }
        let mut blocked = Vec::new();
        for pod in &pods {
            let ns = pod.metadata.namespace.clone().unwrap_or_default();
            let api: Api<Pod> = Api::namespaced(self.cluster.evictions.clone(), &ns);
            // The pod's own grace period (None lets the API server use it).
            let params = EvictParams {
                delete_options: Some(DeleteParams::default()),
                ..EvictParams::default()
            };
            let pod_name = pod.metadata.name.clone().unwrap_or_default();
            match api.evict(&pod_name, &params).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(kube::Error::Api(s)) if s.code == 429 => {
                    blocked.push(format!(
                        "cannot evict pod {}: {}",
                        name_of(pod),
                        self.budgets_for(pod).await
                    ));
                }
                Err(e) => blocked.push(format!("evict pod {}: {e}", name_of(pod))),
            }
        }
        if blocked.is_empty() {
            DrainProgress::Running
        } else {
            DrainProgress::Blocked(blocked.join("; "))
        }
    }

    async fn hold(&self, _: &str, node: &str) -> Result<Option<String>, DrainError> {
        let Some(name) = self.node_name(node).await? else {
            return Ok(None);
        };
        Ok(self.pods_to_move(&name).await?.iter().find_map(|pod| {
            let notes = pod.metadata.annotations.as_ref()?;
            crate::model::hold::KEYS.iter().find_map(|k| {
                notes
                    .get(*k)
                    .filter(|v| crate::model::hold::holds(v))
                    .map(|_| format!("pod {} carries {k}: \"true\"", name_of(pod)))
            })
        }))
    }

    async fn force(&self, _: &str, node: &str) -> Result<(), DrainError> {
        let Some(name) = self.node_name(node).await? else {
            return Ok(());
        };
        for pod in self.pods_to_move(&name).await? {
            let ns = pod.metadata.namespace.clone().unwrap_or_default();
            let api: Api<Pod> = Api::namespaced(self.cluster.client.clone(), &ns);
            let pod_name = pod.metadata.name.clone().unwrap_or_default();
            match api.delete(&pod_name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => {
                    return Err(self
                        .cluster
                        .error(format!("delete pod {}", name_of(&pod)), e)
                        .into());
                }
            }
        }
        Ok(())
    }
}

/// Whether a label selector (`matchLabels` and `matchExpressions`, as
/// Kubernetes evaluates them) selects a pod with `labels`. An empty selector
/// selects everything, as a PodDisruptionBudget's does.
pub fn selects(
    sel: &k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector,
    labels: &std::collections::BTreeMap<String, String>,
) -> bool {
    let by_labels = sel
        .match_labels
        .as_ref()
        .is_none_or(|m| m.iter().all(|(k, v)| labels.get(k) == Some(v)));
    let by_expressions = sel.match_expressions.as_ref().is_none_or(|exprs| {
        exprs.iter().all(|e| {
            let values = e.values.as_deref().unwrap_or_default();
            let value = labels.get(&e.key);
            match e.operator.as_str() {
                "In" => value.is_some_and(|v| values.contains(v)),
                "NotIn" => value.is_none_or(|v| !values.contains(v)),
                "Exists" => value.is_some(),
                "DoesNotExist" => value.is_none(),
                // An operator this release does not know selects nothing,
                // so a budget is never claimed for a pod it may not cover.
                _ => false,
            }
        })
    });
    by_labels && by_expressions
}

#[cfg(test)]
mod selector_tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

    use super::selects;

    #[test]
    fn match_labels_and_match_expressions_select_as_kubernetes_does() {
        let labels = [
            ("app".to_string(), "web".to_string()),
            ("tier".to_string(), "edge".to_string()),
        ]
        .into();
        let sel =
            |json: serde_json::Value| -> LabelSelector { serde_json::from_value(json).unwrap() };
        let cases = [
            (serde_json::json!({}), true),
            (serde_json::json!({"matchLabels": {"app": "web"}}), true),
            (serde_json::json!({"matchLabels": {"app": "api"}}), false),
            (
                serde_json::json!({"matchExpressions": [{"key": "app", "operator": "In", "values": ["web", "api"]}]}),
                true,
            ),
            (
                serde_json::json!({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["web"]}]}),
                false,
            ),
            (
                serde_json::json!({"matchExpressions": [{"key": "tier", "operator": "Exists"}]}),
                true,
            ),
            (
                serde_json::json!({"matchExpressions": [{"key": "zone", "operator": "DoesNotExist"}]}),
                true,
            ),
            (
                serde_json::json!({"matchLabels": {"app": "web"}, "matchExpressions": [{"key": "tier", "operator": "In", "values": ["db"]}]}),
                false,
            ),
        ];
        for (json, want) in cases {
            assert_eq!(selects(&sel(json.clone()), &labels), want, "{json}");
        }
    }
}
