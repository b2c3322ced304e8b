//! The vocabulary shared by providers, the planner and the rollout executor:
//! what a pool should be ([`PoolSpec`]), what a provider reports ([`ObservedPool`],
//! [`Node`]), and the template hash that tells an outdated node from an updated one.
//!
//! These are plain data (no positions, no provider SDK types), so they cross the
//! HTTP plug-in boundary as JSON unchanged.

pub mod events;
pub mod hold;
pub mod image;
pub mod inventory;
pub mod latency;
pub mod phase;
pub mod said;
mod template_field;

pub use template_field::{TemplateField, refusal as template_refusal};

/// A record (a rollout's or a fleet change's journal) that could not be
/// read, and why: its path and the error. Nothing is done for what it
/// records until it is repaired or removed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Unreadable(pub String);

impl From<String> for Unreadable {
    fn from(why: String) -> Unreadable {
        Unreadable(why)
    }
}

use std::collections::BTreeMap;
use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

// The spec's launch template reference and taint are plain data already.
use crate::spec::types::NodePoolDoc;
pub use crate::spec::types::{LaunchTemplateRef as LaunchTemplate, Taint};
pub use events::{Actor, Counts, Event, EventKind};

/// Identifies the disruptive part of a template. A node whose hash differs from
/// its pool's desired hash is outdated and must be replaced.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TemplateHash(pub u64);

impl fmt::Display for TemplateHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:012x}", self.0 >> 16)
    }
}

impl Serialize for TemplateHash {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&format_args!("{:016x}", self.0))
    }
}

/// On the wire: 16 lower-case hex digits.
impl JsonSchema for TemplateHash {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "TemplateHash".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "description": "Identifies the disruptive part of a node template: 16 lower-case hex digits. poolwright computes it; a plug-in stores it and stamps every node launched (or reimaged) on that template with it.",
            "pattern": "^[0-9a-f]{16}$"
        })
    }
}

impl<'de> Deserialize<'de> for TemplateHash {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        u64::from_str_radix(&text, 16)
            .map(TemplateHash)
            .map_err(|_| serde::de::Error::custom(format!("invalid template hash {text:?}")))
    }
}

/// Names one intended change to a backend. A call repeated with the same key
/// (a retry after a lost answer or a timeout, a resume after a crash) must act
/// once: the HTTP plug-in provider sends it as `Idempotency-Key`. Backends
/// without idempotency keys ignore it; their calls are absolute, or checked
/// against a fresh describe before a failure counts. Keys are derived from
/// what the journal records of the intent, so the same intent always yields
/// the same key.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct OpKey(String);

impl OpKey {
    /// A UUID (RFC 9562 version 8, from SHA-256 of the parts), so a plug-in
    /// can pass it on to platforms whose idempotency tokens must be UUIDs
    /// (Yandex Cloud's Idempotency-Key, Google Cloud's requestId).
    pub fn derive(parts: &[&str]) -> OpKey {
        use sha2::{Digest, Sha256};
        let mut h = Sha256::new();
        for p in parts {
            h.update((p.len() as u64).to_le_bytes());
            h.update(p.as_bytes());
        }
        let digest = h.finalize();
        let mut b = [0u8; 16];
        b.copy_from_slice(&digest[..16]);
        b[6] = (b[6] & 0x0f) | 0x80; // version 8
        b[8] = (b[8] & 0x3f) | 0x80; // the RFC 9562 variant
        let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
        OpKey(format!(
            "{}-{}-{}-{}-{}",
            &hex[0..8],
            &hex[8..12],
            &hex[12..16],
            &hex[16..20],
            &hex[20..32]
        ))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for OpKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The part of a node template that needs a node replaced (or reimaged) to change.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeTemplate {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launch_template: Option<LaunchTemplate>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub instance_types: Vec<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub plugin: BTreeMap<String, serde_json::Value>,
}

impl NodeTemplate {
    /// Stable across processes and releases: SHA-256 of the canonical JSON form.
    pub fn hash(&self) -> TemplateHash {
        let bytes = serde_json::to_vec(self).expect("a template serializes");
        let digest = Sha256::digest(&bytes);
        let mut first = [0u8; 8];
        first.copy_from_slice(&digest[..8]);
        TemplateHash(u64::from_be_bytes(first))
    }
}

/// Attributes applied to running nodes without replacing them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InPlace {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<Taint>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
}

/// Autoscaler bounds of a pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Bounds {
    pub min: u32,
    pub max: u32,
}

impl Bounds {
    pub fn clamp(self, n: u32) -> u32 {
        n.clamp(self.min, self.max)
    }
}

/// Provider-specific settings of a pool that are not part of its template.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PoolPlacement {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_name: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subnets: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub availability_zones: Vec<String>,
}

/// What poolwright wants one provider pool to be.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PoolSpec {
    /// The pool's name: an RFC 1123 label.
    pub name: String,
    /// Nodes at creation.
    #[schemars(range(max = 100000))]
    pub size: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoscaling: Option<Bounds>,
    pub template: NodeTemplate,
    #[serde(default)]
    pub in_place: InPlace,
    #[serde(default)]
    pub placement: PoolPlacement,
}

impl PoolSpec {
    /// The provider-facing form of a validated pool document. `size` is the size
    /// at creation; planning decides the size to converge to.
    pub fn from_doc(doc: &NodePoolDoc) -> PoolSpec {
        let s = &doc.spec.value;
        let t = &s.template;
        let autoscaling = s.autoscaling.as_ref().map(|a| Bounds {
            min: a.min.value.clamp(0, u32::MAX as i64) as u32,
            max: a.max.value.clamp(0, u32::MAX as i64) as u32,
        });
        let size = match (&s.size, autoscaling) {
            (Some(n), _) => n.value.clamp(0, u32::MAX as i64) as u32,
            (None, Some(b)) => b.min,
            (None, None) => 0,
        };
        PoolSpec {
            name: doc.metadata.name.value.clone(),
            size,
            autoscaling,
            template: NodeTemplate {
                image: t
                    .image
                    .as_ref()
                    .and_then(crate::spec::types::ImageRef::id)
                    .map(str::to_string),
                instance_type: t.instance_type.clone(),
                kubernetes_version: t.kubernetes_version.clone(),
                launch_template: t.aws.as_ref().map(|a| a.launch_template.value.clone()),
                instance_types: t
                    .aws
                    .as_ref()
                    .map(|a| a.instance_types.clone())
                    .unwrap_or_default(),
                plugin: t.plugin.clone(),
            },
            in_place: InPlace {
                labels: t.labels.clone(),
                annotations: t.annotations.clone(),
                taints: t.taints.clone(),
                tags: t.tags.clone(),
            },
            placement: s
                .aws
                .as_ref()
                .map(|a| PoolPlacement {
                    group_name: a.group_name.clone(),
                    subnets: a.subnets.clone(),
                    availability_zones: a.availability_zones.clone(),
                })
                .unwrap_or_default(),
        }
    }
}

/// Where a node is in its life, as far as replacing it is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum NodeState {
    /// Requested or booting; not yet healthy.
    Pending,
    /// Healthy according to the provider.
    Healthy,
    /// Running but failing its health check (or never became healthy).
    Unhealthy,
    /// Being terminated; it no longer counts.
    Terminating,
}

/// One node as a provider reports it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Node {
    /// Shared, not copied: a pool of thousands of nodes is observed every
    /// step of a rollout (and thousands of times by a forecast).
    pub id: std::sync::Arc<str>,
    /// Hash of the template the node was launched with (a tag set at launch).
    pub template: TemplateHash,
    pub state: NodeState,
    pub launched_at: jiff::Timestamp,
    /// Since when the node has been continuously healthy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub healthy_since: Option<jiff::Timestamp>,
    /// Unschedulable (cordoned) in Kubernetes, or marked so by the provider.
    #[serde(default)]
    pub cordoned: bool,
    /// The Kubernetes `spec.providerID` the provider gives the node, when it
    /// says: a pool with a cluster matches its Node objects by it exactly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_id: Option<String>,
    /// Where the node runs: its Node's `topology.kubernetes.io/zone` when a
    /// cluster is attached, else the provider's zone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<std::sync::Arc<str>>,
    /// Its labels: the Kubernetes Node's when a cluster is attached, laid
    /// over the provider's node tags (what `rollout.order: {label: KEY}`
    /// reads).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
}

impl Node {
    /// How the node is found among Kubernetes Nodes (and named to a drainer):
    /// its provider id when the provider gives one, else its id.
    pub fn cluster_key(&self) -> &str {
        self.provider_id.as_deref().unwrap_or(&self.id)
    }
}

/// A PodDisruptionBudget that allows no disruption now, over pods running on
/// a node: draining the node would block (the plan's pre-flight).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PdbBlock {
    /// NAMESPACE/NAME.
    pub pdb: String,
    /// `status.disruptionsAllowed`.
    pub allowed: i32,
    /// `status.currentHealthy`.
    pub healthy: i32,
    /// What it asks: `minAvailable 6`, `maxUnavailable 0`.
    pub rule: String,
    /// The pods it covers on the node (NAMESPACE/NAME).
    pub pods: Vec<String>,
}

/// How a drain is going, as the drainer reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DrainProgress {
    Done,
    Running,
    /// Evictions refused, e.g. by a PodDisruptionBudget (named in the reason).
    Blocked(String),
}

/// One pool as a provider reports it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObservedPool {
    pub name: String,
    /// The size the provider currently holds (desired capacity), not the node count.
    pub size: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoscaling: Option<Bounds>,
    /// The template new nodes are launched with.
    pub template: NodeTemplate,
    #[serde(default)]
    pub in_place: InPlace,
    pub nodes: Vec<Node>,
}

impl ObservedPool {
    /// Nodes that are not on their way out.
    pub fn live_nodes(&self) -> impl Iterator<Item = &Node> {
        self.nodes
            .iter()
            .filter(|n| n.state != NodeState::Terminating)
    }

    pub fn outdated(&self, desired: TemplateHash) -> usize {
        self.live_nodes().filter(|n| n.template != desired).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn op_keys_are_stable_version_8_uuids() {
        let k = OpKey::derive(&["web", "terminate", "i-1"]);
        assert_eq!(k, OpKey::derive(&["web", "terminate", "i-1"]));
        assert_ne!(k, OpKey::derive(&["web", "terminate", "i-2"]));
        // Parts are length-prefixed: no two splits of the same text collide.
        assert_ne!(OpKey::derive(&["ab", "c"]), OpKey::derive(&["a", "bc"]));
        let s = k.as_str();
        assert_eq!(s.len(), 36);
        assert_eq!(&s[14..15], "8", "{s}");
        assert!(matches!(&s[19..20], "8" | "9" | "a" | "b"), "{s}");
    }

    #[test]
    fn template_hash_is_stable_and_sensitive() {
        let a = NodeTemplate {
            image: Some("img-1".into()),
            ..NodeTemplate::default()
        };
        let mut b = a.clone();
        assert_eq!(a.hash(), b.hash());
        b.image = Some("img-2".into());
        assert_ne!(a.hash(), b.hash());
        // Pinned: SHA-256 of {"image":"img-1"}. If this changes, every node of
        // every user would suddenly look outdated.
        assert_eq!(a.hash().to_string(), "d805bb993d9c");
        assert_eq!(
            serde_json::to_string(&a.hash()).unwrap(),
            "\"d805bb993d9c9312\""
        );
        let json = serde_json::to_string(&a.hash()).unwrap();
        assert_eq!(
            serde_json::from_str::<TemplateHash>(&json).unwrap(),
            a.hash()
        );
    }
}
