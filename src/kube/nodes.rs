//! Node objects: matching a provider node to its Node, cordoning, and Ready as
//! the health gate of a pool with a cluster attached.

use std::collections::{BTreeMap, HashMap};

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node as KubeNode;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams};

use super::Cluster;
use crate::model::{NodeState, ObservedPool};
use crate::provider::ClusterError;

/// How a provider node id is found among Node objects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Matcher {
    /// `spec.providerID` is the id, or ends in `/ID` (`aws:///eu-west-1a/i-0abc`).
    ProviderId,
    /// The Node label of that name holds the id.
    Label(String),
}

impl Matcher {
    fn key_of(&self, node: &KubeNode) -> Option<String> {
        match self {
            Matcher::ProviderId => {
                let pid = node.spec.as_ref()?.provider_id.as_deref()?;
                Some(pid.rsplit('/').next().unwrap_or(pid).to_string())
            }
            Matcher::Label(label) => node.metadata.labels.as_ref()?.get(label).cloned(),
        }
    }
}

/// The well-known label of the zone a Node runs in.
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";

/// What poolwright needs of a Node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeView {
    pub name: String,
    pub ready_since: Option<Timestamp>,
    pub unschedulable: bool,
    /// `topology.kubernetes.io/zone`.
    pub zone: Option<String>,
    pub labels: BTreeMap<String, String>,
}

pub fn view(node: &KubeNode) -> NodeView {
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"));
    let ready_since = ready.filter(|c| c.status == "True").map(|c| {
        c.last_transition_time
            .as_ref()
            .map(|t| t.0)
            .unwrap_or(Timestamp::UNIX_EPOCH)
    });
    let mut labels = node.metadata.labels.clone().unwrap_or_default();
    // A Node annotated do-not-disrupt is held as one labelled so.
    if let Some(notes) = &node.metadata.annotations {
        for k in crate::model::hold::KEYS {
            if let Some(v) = notes.get(k) {
                labels.insert(k.to_string(), v.clone());
            }
        }
    }
    NodeView {
        name: node.metadata.name.clone().unwrap_or_default(),
        zone: labels.get(ZONE_LABEL).cloned(),
        labels,
        ready_since,
        unschedulable: node
            .spec
            .as_ref()
            .and_then(|s| s.unschedulable)
            .unwrap_or(false),
    }
}

impl Cluster {
    pub fn error(&self, call: String, source: kube::Error) -> ClusterError {
        ClusterError {
            call,
            cluster: self.name.clone(),
            source,
        }
    }

    /// Every Node, by provider node id (one list call).
    pub async fn nodes_by_id(&self) -> Result<HashMap<String, NodeView>, ClusterError> {
        let api: Api<KubeNode> = Api::all(self.client.clone());
        let matcher = self.matcher();
        let params = match &matcher {
            Matcher::Label(label) => ListParams::default().labels(label),
            Matcher::ProviderId => ListParams::default(),
        };
        let list = api
            .list(&params)
            .await
            .map_err(|e| self.error("list nodes".into(), e))?;
        let mut out = HashMap::new();
        for n in &list.items {
            let Some(key) = matcher.key_of(n) else {
                continue;
            };
            // A provider that names the providerID finds its Node by it exactly.
            if let Some(pid) = n.spec.as_ref().and_then(|s| s.provider_id.as_deref())
                && pid != key
            {
                out.insert(pid.to_string(), view(n));
            }
            out.insert(key, view(n));
        }
        Ok(out)
    }

    /// The Node of a provider node, if it has registered.
    pub async fn node_of(&self, id: &str) -> Result<Option<NodeView>, ClusterError> {
        Ok(self.nodes_by_id().await?.remove(id))
    }

    /// Set or clear `spec.unschedulable`. A node that never registered has
    /// nothing scheduled on it: there is nothing to cordon.
    pub async fn set_unschedulable(&self, id: &str, on: bool) -> Result<(), ClusterError> {
        let Some(node) = self.node_of(id).await? else {
            return Ok(());
        };
        let api: Api<KubeNode> = Api::all(self.client.clone());
        let patch = serde_json::json!({"spec": {"unschedulable": on}});
        api.patch(&node.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map(|_| ())
            .map_err(|e| {
                let action = if on { "cordon" } else { "uncordon" };
                self.error(format!("{action} node {}", node.name), e)
            })
    }
}

/// Kubernetes' word on health, laid over the provider's: a node is healthy
/// only when the provider says so AND its Node is Ready and schedulable, since
/// the later of the two; a node not registered yet is still pending.
pub fn overlay(pool: &mut ObservedPool, nodes: &HashMap<String, NodeView>) {
    for n in &mut pool.nodes {
        if n.state == NodeState::Terminating {
            continue;
        }
        let Some(k) = nodes.get(n.cluster_key()).or_else(|| nodes.get(&*n.id)) else {
            if n.state == NodeState::Healthy {
                n.state = NodeState::Pending;
                n.healthy_since = None;
            }
            continue;
        };
        n.cordoned = k.unschedulable;
        // The Node's word on where it runs and how it is labelled wins over
        // the provider's.
        if let Some(z) = &k.zone {
            n.zone = Some(std::sync::Arc::from(z.as_str()));
        }
        for (key, v) in &k.labels {
            n.labels.insert(key.clone(), v.clone());
        }
        match (n.state, k.ready_since) {
            (NodeState::Healthy, Some(ready)) => {
                n.healthy_since = n.healthy_since.map(|h| h.max(ready)).or(Some(ready));
            }
            (NodeState::Healthy, None) => {
                n.state = NodeState::Pending;
                n.healthy_since = None;
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{InPlace, Node, NodeTemplate, TemplateHash};

    fn node(id: &str, state: NodeState) -> Node {
        Node {
            id: id.into(),
            template: TemplateHash(1),
            state,
            launched_at: Timestamp::UNIX_EPOCH,
            healthy_since: Some(Timestamp::from_second(10).unwrap()),
            cordoned: false,
            provider_id: None,
            zone: None,
            labels: Default::default(),
        }
    }

    #[test]
    fn ready_is_required_and_counts_from_the_later_moment() {
        let mut pool = ObservedPool {
            name: "web".into(),
            size: 3,
            autoscaling: None,
            template: NodeTemplate::default(),
            in_place: InPlace::default(),
            nodes: vec![
                node("a", NodeState::Healthy),
                node("b", NodeState::Healthy),
                node("c", NodeState::Healthy),
            ],
        };
        let k = |ready: Option<i64>, unschedulable| NodeView {
            name: "n".into(),
            ready_since: ready.map(|s| Timestamp::from_second(s).unwrap()),
            unschedulable,
            zone: Some("k8s-zone".into()),
            labels: [("prio".to_string(), "1".to_string())].into(),
        };
        let nodes = HashMap::from([
            ("a".to_string(), k(Some(20), false)),
            ("b".to_string(), k(None, false)),
        ]);
        overlay(&mut pool, &nodes);
        assert_eq!(pool.nodes[0].state, NodeState::Healthy);
        assert_eq!(
            pool.nodes[0].healthy_since,
            Some(Timestamp::from_second(20).unwrap())
        );
        assert_eq!(pool.nodes[1].state, NodeState::Pending, "not Ready");
        assert_eq!(pool.nodes[2].state, NodeState::Pending, "not registered");
        // The Node's zone and labels are the node's.
        assert_eq!(pool.nodes[0].zone.as_deref(), Some("k8s-zone"));
        assert_eq!(pool.nodes[0].labels["prio"], "1");
        assert_eq!(pool.nodes[2].zone, None);
    }

    #[test]
    fn provider_ids_match_on_their_last_segment() {
        let n = KubeNode {
            spec: Some(k8s_openapi::api::core::v1::NodeSpec {
                provider_id: Some("aws:///us-east-1a/i-0abc".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(Matcher::ProviderId.key_of(&n).as_deref(), Some("i-0abc"));
    }
}
