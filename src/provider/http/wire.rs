//! The plug-in protocol, version 1: every request and answer body as Rust
//! types. `schemas/provider-plugin.openapi.yaml` is generated from these
//! (`poolwright plugin openapi`), and a test fails when the checked-in file
//! differs, so the published contract cannot drift from what poolwright sends
//! and accepts.
//!
//! Answers are untrusted input: unknown fields are ignored (a plug-in may say
//! more), but every field poolwright reads is typed, and the provider checks
//! what types cannot say (ids, duplicates, pools not asked for).

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::model::{Bounds, InPlace, NodeTemplate, PoolSpec, TemplateField, TemplateHash};

/// The protocol version a plug-in must declare in its capabilities.
pub const PROTOCOL: &str = "poolwright.io/plugin/v1";

/// Most pools one describe call may name (a plug-in may ask for fewer).
pub const MAX_DESCRIBE_BATCH: u32 = 1000;

/// `GET /v1/capabilities`: what the plug-in is and can do.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Capabilities {
    /// Must be `poolwright.io/plugin/v1`.
    pub protocol: String,
    /// The plug-in's name, for messages (e.g. `ec2-instances`).
    pub name: String,
    /// The plug-in's own version, for messages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Whether `POST /v1/pools/{pool}/nodes/{node}/reimage` works.
    #[serde(default)]
    pub reimage: bool,
    /// Most pool names one `POST /v1/describe` may carry (1 to 1000).
    #[schemars(range(min = 1, max = 1000))]
    pub describe_batch_size: u32,
    /// How often a rollout should look at a pool again, in seconds (1 to 3600;
    /// the provider document's `pollInterval` wins when set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 3600))]
    pub poll_interval_seconds: Option<u32>,
    /// The template fields the plug-in acts on. A pool whose template sets any
    /// other field is refused before anything is created or changed.
    pub template_fields: Vec<TemplateField>,
}

/// `POST /v1/describe`: many pools, one call.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DescribeRequest {
    /// Pool names (1 to `describeBatchSize`).
    pub pools: Vec<String>,
}

/// The answer to a describe: the pools that exist, in any order. A pool that
/// does not exist is absent (not an error); a pool that was not asked for must
/// not appear.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DescribeResponse {
    pub pools: Vec<PoolView>,
}

/// One pool as the plug-in sees it. Reads must reflect every mutation the
/// plug-in has answered 2xx to (read-your-writes): poolwright decides its
/// next step from this.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PoolView {
    pub name: String,
    /// The size the pool holds (its desired count), not the number of nodes.
    #[schemars(range(max = 100000))]
    pub size: u32,
    /// Autoscaler bounds, when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bounds: Option<Bounds>,
    /// The template new nodes launch with, exactly as poolwright last set it
    /// (stored and returned verbatim: poolwright compares its hash).
    pub template: NodeTemplate,
    /// Labels, annotations, taints and tags as last set.
    #[serde(default)]
    pub in_place: InPlace,
    /// Every node of the pool, terminating ones included; terminated ones absent.
    pub nodes: Vec<NodeView>,
}

/// One node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeView {
    /// Unique within the plug-in; 1 to 253 printable ASCII characters, no
    /// spaces or slashes (it becomes a URL path segment).
    pub id: String,
    /// The `templateHash` the node was launched (or reimaged) with.
    pub template_hash: TemplateHash,
    pub state: NodeState,
    /// RFC 3339.
    #[schemars(with = "String", extend("format" = "date-time"))]
    pub launched_at: jiff::Timestamp,
    /// Since when the node has been continuously healthy (RFC 3339), if it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>", extend("format" = "date-time"))]
    pub healthy_since: Option<jiff::Timestamp>,
    /// Marked unschedulable by the plug-in (poolwright cordons through the
    /// cluster, not through the plug-in).
    #[serde(default)]
    pub cordoned: bool,
    /// The Kubernetes `spec.providerID` of the node (e.g.
    /// `aws:///us-east-1a/i-0abc`), so pools with a `clusterRef` match their
    /// Node objects exactly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_id: Option<String>,
    /// The zone the node runs in (e.g. `us-east-1a`), for
    /// `rollout.order: zone`; at most 253 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub zone: Option<String>,
    /// The node's tags, for `rollout.order: {label: KEY}` and
    /// `poolwright.io/do-not-disrupt`: at most 64, keys up to 317 and values
    /// up to 1,024 characters.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
}

/// Where a node is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum NodeState {
    /// Requested or booting; not serving yet.
    Pending,
    /// Running and passing the plug-in's health check; it may take work.
    Healthy,
    /// Running but failing its health check (or never became healthy).
    Unhealthy,
    /// Being terminated; it no longer counts.
    Terminating,
}

/// `POST /v1/pools`: create a pool at `pool.size` nodes on `pool.template`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CreatePoolRequest {
    pub pool: PoolSpec,
    /// Stamp every node launched on `pool.template` with this hash.
    pub template_hash: TemplateHash,
}

/// `PUT /v1/pools/{pool}/size`: hold exactly `size` nodes (absolute). Growing
/// launches nodes on the current template; shrinking lets the plug-in choose.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SetSizeRequest {
    #[schemars(range(max = 100000))]
    pub size: u32,
}

/// `PUT /v1/pools/{pool}/template`: the template future nodes launch with.
/// Running nodes are not touched and keep their hash.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SetTemplateRequest {
    pub template: NodeTemplate,
    pub template_hash: TemplateHash,
}

/// `POST /v1/pools/{pool}/nodes`: launch `count` nodes on the current
/// template, so that the pool holds `size` (absolute: what poolwright observed
/// plus `count`). A plug-in may answer 409 `conflict` when its size is not
/// `size - count` (someone else changed it since poolwright looked).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CreateNodesRequest {
    #[schemars(range(min = 1, max = 100000))]
    pub count: u32,
    #[schemars(range(min = 1, max = 100000))]
    pub size: u32,
}

/// The nodes launched.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CreateNodesResponse {
    /// Their ids, as far as known when answering. A platform that assigns
    /// ids later (a resized node group) may answer fewer or none: the nodes
    /// then appear in describe, which is what poolwright counts.
    pub nodes: Vec<String>,
}

/// `POST /v1/pools/{pool}/nodes/{node}/terminate`: terminate that node and no
/// other. With `decrement` the pool's size drops by one; without, the plug-in
/// launches a replacement on the current template.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TerminateNodeRequest {
    pub decrement: bool,
}

/// `POST /v1/pools/{pool}/nodes/{node}/reimage`: rebuild the node in place
/// onto the pool's current template (only with `reimage: true`). The node
/// keeps its id and reports `templateHash` once done.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReimageNodeRequest {
    pub template_hash: TemplateHash,
}

/// `PUT /v1/pools/{pool}/bounds`: autoscaler bounds, or none.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SetBoundsRequest {
    pub bounds: Option<Bounds>,
}

/// `POST /v1/pools/{pool}/adopt`: the empty object `{}` today. A plug-in
/// ignores fields it does not know, so later versions may add some.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct AdoptPoolRequest {}

/// `GET /v1/channels/{channel}/images`: the images a channel offers, each
/// with its release time (newest or oldest first: poolwright sorts).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ChannelImages {
    #[schemars(length(max = 10000))]
    pub images: Vec<ChannelImage>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ChannelImage {
    /// The image id, as pools' `template.image` carries it.
    #[schemars(length(min = 1, max = 1024))]
    pub image: String,
    /// When it was released (RFC 3339, UTC).
    pub released: String,
}

/// An empty JSON object: the answer of calls that return nothing else.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Ack {}

/// RFC 9457 problem details (`application/problem+json`), the body of every
/// 4xx and 5xx answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Problem {
    /// `urn:poolwright:problem:TYPE`, TYPE one of `quota-exceeded` (403),
    /// `not-found` (404), `conflict` (409), `throttled` (429), `invalid`
    /// (400 or 422), `unavailable` (503), `unauthorized` (401) and
    /// `unsupported` (501). A bare TYPE, or any URI ending in `/TYPE`, is
    /// accepted too.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// What went wrong, for a human (poolwright quotes it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
    /// Anything else the plug-in wants to say.
    #[serde(flatten)]
    #[schemars(skip)]
    pub extensions: BTreeMap<String, serde_json::Value>,
}

/// The machine-readable problem types of the contract.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProblemType {
    QuotaExceeded,
    NotFound,
    Conflict,
    Throttled,
    Invalid,
    Unavailable,
    /// 401: no token, or not the right one.
    Unauthorized,
    /// 501: the plug-in does not offer this call.
    Unsupported,
}

impl ProblemType {
    pub const ALL: [ProblemType; 8] = [
        ProblemType::QuotaExceeded,
        ProblemType::NotFound,
        ProblemType::Conflict,
        ProblemType::Throttled,
        ProblemType::Invalid,
        ProblemType::Unavailable,
        ProblemType::Unauthorized,
        ProblemType::Unsupported,
    ];

    pub fn slug(self) -> &'static str {
        match self {
            ProblemType::QuotaExceeded => "quota-exceeded",
            ProblemType::NotFound => "not-found",
            ProblemType::Conflict => "conflict",
            ProblemType::Throttled => "throttled",
            ProblemType::Invalid => "invalid",
            ProblemType::Unavailable => "unavailable",
            ProblemType::Unauthorized => "unauthorized",
            ProblemType::Unsupported => "unsupported",
        }
    }

    /// `urn:poolwright:problem:quota-exceeded`, `quota-exceeded`, or any URI
    /// whose last segment is the type.
    pub fn parse(text: &str) -> Option<ProblemType> {
        let slug = text.rsplit([':', '/']).next().unwrap_or(text);
        ProblemType::ALL.into_iter().find(|t| t.slug() == slug)
    }

    pub fn uri(self) -> String {
        format!("urn:poolwright:problem:{}", self.slug())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn problem_types_parse_in_every_documented_spelling() {
        for t in ProblemType::ALL {
            assert_eq!(ProblemType::parse(&t.uri()), Some(t));
            assert_eq!(ProblemType::parse(t.slug()), Some(t));
            assert_eq!(
                ProblemType::parse(&format!("https://plugins.example/problems/{}", t.slug())),
                Some(t)
            );
        }
        assert_eq!(ProblemType::parse("about:blank"), None);
    }

    #[test]
    fn template_fields_name_what_a_template_sets() {
        let t = NodeTemplate {
            image: Some("img".into()),
            plugin: [("zone".to_string(), serde_json::json!("a"))].into(),
            ..NodeTemplate::default()
        };
        assert_eq!(
            TemplateField::set_in(&t),
            vec![TemplateField::Image, TemplateField::Plugin]
        );
        for f in TemplateField::ALL {
            let json = serde_json::to_string(&f).unwrap();
            assert_eq!(json, format!("\"{}\"", f.as_str()));
        }
    }
}
