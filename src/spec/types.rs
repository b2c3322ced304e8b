//! The desired-state documents: `Provider`, `Cluster` and `NodePool`.
//!
//! These types are the contract. They derive both serde (what we read) and
//! schemars (what editors validate against), so `schemas/poolwright.schema.json`
//! cannot drift from the code: a test regenerates it and compares.

use std::collections::BTreeMap;
use std::path::PathBuf;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::located::At;
use super::values::{Age, Duration, IntOrPercent, Limit, Percent, TimeOfDay, Weekday};

pub const API_VERSION: &str = "poolwright/v1";

/// The only apiVersion this release reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub enum ApiVersion {
    #[serde(rename = "poolwright/v1")]
    V1,
}

macro_rules! kind_marker {
    ($name:ident, $text:literal) => {
        #[doc = concat!("The `kind: ", $text, "` marker.")]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
        pub enum $name {
            #[serde(rename = $text)]
            Kind,
        }
    };
}
kind_marker!(ProviderKind, "Provider");
kind_marker!(ClusterKind, "Cluster");
kind_marker!(NodePoolKind, "NodePool");
kind_marker!(DisruptionPolicyKind, "DisruptionPolicy");
kind_marker!(FleetRolloutKind, "FleetRollout");
kind_marker!(ImageChannelKind, "ImageChannel");

/// The kinds this release understands, in the order they are documented.
pub const KINDS: &[&str] = &[
    "Provider",
    "Cluster",
    "NodePool",
    "DisruptionPolicy",
    "FleetRollout",
    "ImageChannel",
];

#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Metadata {
    /// Unique among documents of the same kind. Lower-case letters, digits and `-`.
    #[schemars(
        length(min = 1, max = 63),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    )]
    pub name: At<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

// ---------------------------------------------------------------- Provider

/// How to reach a backend that owns node pools.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ProviderDoc {
    pub api_version: ApiVersion,
    pub kind: ProviderKind,
    pub metadata: Metadata,
    pub spec: At<ProviderSpec>,
}

/// `type` selects the backend; the other fields are that backend's settings.
#[derive(Clone, Debug, PartialEq, Serialize, JsonSchema)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum ProviderSpec {
    /// The embedded simulator: no cloud account needed.
    Sim(SimProvider),
    /// EC2 Auto Scaling groups.
    Aws(AwsProvider),
    /// An out-of-process plug-in speaking poolwright's HTTP protocol.
    Http(HttpProvider),
}

/// Read by hand rather than as serde's internally tagged enum: serde buffers
/// such an enum's fields before choosing the variant, which loses their
/// positions, and errors would all point at `spec:`. With `type` first (as
/// every example writes it) the backend's settings are read straight from the
/// document, positions kept; with `type` later, the settings are buffered and
/// errors point at the spec.
impl<'de> Deserialize<'de> for ProviderSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::{Error, MapAccess, Visitor, value::MapAccessDeserializer};

        const TYPES: &[&str] = &["sim", "aws", "http"];

        fn pick<'de, M: serde::Deserializer<'de>>(
            ty: &str,
            rest: M,
        ) -> Result<ProviderSpec, M::Error> {
            match ty {
                "sim" => SimProvider::deserialize(rest).map(ProviderSpec::Sim),
                "aws" => AwsProvider::deserialize(rest).map(ProviderSpec::Aws),
                "http" => HttpProvider::deserialize(rest).map(ProviderSpec::Http),
                other => Err(M::Error::unknown_variant(other, TYPES)),
            }
        }

        struct Spec;
        impl<'de> Visitor<'de> for Spec {
            type Value = ProviderSpec;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a provider spec: a mapping with `type` (sim, aws or http) and that backend's settings")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ProviderSpec, A::Error> {
                let Some(first) = map.next_key::<String>()? else {
                    return Err(A::Error::missing_field("type"));
                };
                if first == "type" {
                    let ty: String = map.next_value()?;
                    return pick(&ty, MapAccessDeserializer::new(map));
                }
                let mut fields = serde_json::Map::new();
                fields.insert(first, map.next_value()?);
                while let Some(k) = map.next_key::<String>()? {
                    let v = map.next_value()?;
                    if fields.insert(k.clone(), v).is_some() {
                        return Err(A::Error::custom(format!("duplicate key {k:?}")));
                    }
                }
                let Some(serde_json::Value::String(ty)) = fields.remove("type") else {
                    return Err(A::Error::missing_field("type"));
                };
                pick(&ty, serde_json::Value::Object(fields)).map_err(A::Error::custom)
            }
        }
        d.deserialize_map(Spec)
    }
}

impl ProviderSpec {
    pub fn type_name(&self) -> &'static str {
        match self {
            ProviderSpec::Sim(_) => "sim",
            ProviderSpec::Aws(_) => "aws",
            ProviderSpec::Http(_) => "http",
        }
    }
}

/// The embedded simulator. Latencies are drawn per node from the distributions
/// below (seeded, so a run is reproducible) and divided by `speed`.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SimProvider {
    /// Seed of every random choice the simulator makes; same seed, same run.
    #[serde(default)]
    pub seed: u64,
    /// Time multiplier: 10 runs simulated boots and drains ten times faster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.001, max = 1_000_000.0))]
    pub speed: Option<At<f64>>,
    /// From launch until the machine runs. Default lognormal, median 45s.
    #[serde(default = "SimProvider::default_boot_time")]
    pub boot_time: Distribution,
    /// From running until healthy. Default 10s.
    #[serde(default = "SimProvider::default_health_delay")]
    pub health_delay: Distribution,
    /// How long draining a node takes. Default 20s.
    #[serde(default = "SimProvider::default_drain_time")]
    pub drain_time: Distribution,
    /// How long terminating a node takes. Default 5s.
    #[serde(default = "SimProvider::default_terminate_time")]
    pub terminate_time: Distribution,
    /// Most live nodes across all pools of this provider; launches beyond it are
    /// refused as a quota error.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "super::values::unquoted_u32_opt"
    )]
    #[schemars(range(max = 10_000_000))]
    pub quota: Option<u32>,
    #[serde(default)]
    pub failures: SimFailures,
    /// Zones new nodes are placed in, in turn (as an Auto Scaling group
    /// balances them), for `rollout.order: zone`. Default none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub zones: Vec<String>,
    /// Labels new nodes carry, each taking the next of its values in turn:
    /// `{"poolwright.io/drain-priority": ["2", "1"]}`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_labels: BTreeMap<String, Vec<String>>,
    /// Images the simulator's catalogue holds from the start, as a vendor
    /// published them (`poolwright sim release` publishes more).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 1000))]
    pub images: Vec<SimImage>,
}

/// An image in the simulator's catalogue.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SimImage {
    #[schemars(length(min = 1, max = 1024))]
    pub image: String,
    /// When it was released: RFC 3339 (`2026-12-01T10:00:00Z`).
    pub released: At<String>,
}

impl SimProvider {
    fn default_boot_time() -> Distribution {
        Distribution::Lognormal {
            median: Duration::secs(45),
            sigma: 0.3,
        }
    }
    fn default_health_delay() -> Distribution {
        Distribution::Fixed(Duration::secs(10))
    }
    fn default_drain_time() -> Distribution {
        Distribution::Fixed(Duration::secs(20))
    }
    fn default_terminate_time() -> Distribution {
        Distribution::Fixed(Duration::secs(5))
    }
}

impl Default for SimProvider {
    fn default() -> Self {
        SimProvider {
            seed: 0,
            speed: None,
            boot_time: SimProvider::default_boot_time(),
            health_delay: SimProvider::default_health_delay(),
            drain_time: SimProvider::default_drain_time(),
            terminate_time: SimProvider::default_terminate_time(),
            quota: None,
            failures: SimFailures::default(),
            zones: Vec::new(),
            node_labels: BTreeMap::new(),
            images: Vec::new(),
        }
    }
}

/// A latency distribution: `{fixed: 30s}`, `{uniform: {min: 20s, max: 60s}}` or
/// `{lognormal: {median: 45s, sigma: 0.3}}`.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub enum Distribution {
    Fixed(Duration),
    Uniform { min: Duration, max: Duration },
    Lognormal { median: Duration, sigma: f64 },
}

/// Injected failures, each a probability between 0 and 1.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SimFailures {
    /// Share of new nodes that never become healthy.
    #[serde(default)]
    #[schemars(range(min = 0.0, max = 1.0))]
    pub never_healthy: f64,
    /// Share of API calls answered with a server error.
    #[serde(default)]
    #[schemars(range(min = 0.0, max = 1.0))]
    pub api_errors: f64,
    /// Share of API calls answered with throttling.
    #[serde(default)]
    #[schemars(range(min = 0.0, max = 1.0))]
    pub throttling: f64,
    /// Share of drains that never finish on their own (as if a
    /// PodDisruptionBudget allowed no disruption), so `drain.onTimeout` decides.
    #[serde(default)]
    #[schemars(range(min = 0.0, max = 1.0))]
    pub drain_blocked: f64,
    /// Images whose nodes never become healthy (a bad release), so that a
    /// demo or a test can roll a bad image to part of the fleet.
    #[serde(default, skip_serializing_if = "Vec::is_empty", alias = "brokenImages")]
    #[schemars(length(max = 256))]
    pub bad_images: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AwsProvider {
    /// AWS region; the standard chain (AWS_REGION, profile) when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// Named profile from the shared AWS config files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// Endpoint override (tests, VPC endpoints). Credentials never go in YAML.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint_url: Option<At<String>>,
    /// Role to assume on top of the base credentials.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub assume_role_arn: Option<At<String>>,
    /// Attempts per API call, including the first (SDK adaptive retry).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_attempts: Option<u32>,
    /// Upper bound for one API operation, retries included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation_timeout: Option<Duration>,
    /// How often a rollout looks at a group again (5s when omitted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub poll_interval: Option<Duration>,
}

/// An out-of-process plug-in speaking poolwright's provider protocol
/// (`schemas/provider-plugin.openapi.yaml`).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct HttpProvider {
    /// Base URL of the plug-in. `http://` is allowed only to a loopback
    /// address (127.0.0.1, ::1, localhost) unless `allowInsecure: true`.
    pub url: At<String>,
    /// File holding the bearer token, relative to this document's directory.
    /// Read again whenever it changes, so rotating it needs no restart.
    /// Tokens never go in YAML.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_file: Option<At<PathBuf>>,
    /// Environment variable holding the bearer token (instead of `tokenFile`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_env: Option<At<String>>,
    /// PEM bundle of the CA(s) that sign the plug-in's certificate; when set,
    /// only these are trusted for this plug-in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<At<PathBuf>>,
    /// PEM client certificate for mutual TLS (with `clientKey`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_cert: Option<At<PathBuf>>,
    /// PEM private key of `clientCert`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_key: Option<At<PathBuf>>,
    /// Bound on one request (connect, send, answer). Default 30s, at most 10m.
    #[serde(default = "HttpProvider::default_timeout")]
    pub timeout: At<Duration>,
    /// Attempts per call, the first included (429 and 5xx are retried with
    /// jittered backoff honouring Retry-After). Default 5, at most 20.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 20))]
    pub max_attempts: Option<At<u32>>,
    /// Bound on one call, its retries and their waits included: a plug-in
    /// that hangs fails the call after this, not after `timeout` times
    /// `maxAttempts`. Default 60s, or `timeout` when that is longer; 1s to
    /// 30m, and at least `timeout`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation_timeout: Option<At<Duration>>,
    /// How often a rollout looks at a pool again; the plug-in's own
    /// suggestion, else 5s, when omitted. 1s to 1h.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub poll_interval: Option<At<Duration>>,
    /// Static, non-secret headers sent with every request.
    #[serde(default, skip_serializing_if = "no_headers")]
    pub headers: At<BTreeMap<String, String>>,
    /// Allow plain `http://` to a non-loopback address: the token and every
    /// answer then cross the network unencrypted.
    #[serde(default)]
    pub allow_insecure: At<bool>,
}

fn no_headers(h: &At<BTreeMap<String, String>>) -> bool {
    h.is_empty()
}

impl HttpProvider {
    fn default_timeout() -> At<Duration> {
        At::bare(Duration::secs(30))
    }

    /// A plug-in at `url` with every other setting at its default.
    pub fn at(url: &str) -> HttpProvider {
        HttpProvider {
            url: At::bare(url.to_string()),
            token_file: None,
            token_env: None,
            ca_file: None,
            client_cert: None,
            client_key: None,
            timeout: HttpProvider::default_timeout(),
            max_attempts: None,
            operation_timeout: None,
            poll_interval: None,
            headers: At::default(),
            allow_insecure: At::bare(false),
        }
    }
}

// ---------------------------------------------------------------- Cluster

/// A Kubernetes API used to cordon, drain and watch the readiness of pool nodes.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ClusterDoc {
    pub api_version: ApiVersion,
    pub kind: ClusterKind,
    pub metadata: Metadata,
    pub spec: At<ClusterSpec>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ClusterSpec {
    /// Path of a kubeconfig file, relative to this document's file. When neither
    /// this nor `inCluster` is set, `$KUBECONFIG` or `~/.kube/config` is used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubeconfig: Option<At<PathBuf>>,
    /// Context inside the kubeconfig; its current context when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    /// Use the service account of the pod poolwright runs in.
    #[serde(default)]
    pub in_cluster: At<bool>,
    /// How a provider node is matched to its Kubernetes Node object.
    #[serde(default)]
    pub node_match: NodeMatch,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NodeMatch {
    #[serde(default)]
    pub by: NodeMatchBy,
    /// The Node label holding the provider's node id, when `by: label`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub enum NodeMatchBy {
    /// `spec.providerID` of the Node (e.g. `aws:///eu-west-1a/i-0abc`).
    #[default]
    #[serde(rename = "providerID")]
    ProviderId,
    /// A Node label holding the provider's node id.
    #[serde(rename = "label")]
    Label,
}

// ---------------------------------------------------------------- NodePool

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NodePoolDoc {
    pub api_version: ApiVersion,
    pub kind: NodePoolKind,
    pub metadata: Metadata,
    pub spec: At<NodePoolSpec>,
}

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NodePoolSpec {
    /// Name of the `Provider` document that owns this pool.
    pub provider_ref: At<String>,
    /// Name of a `Cluster` document; nodes are then cordoned, drained and gated on Ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_ref: Option<At<String>>,
    /// Fixed desired number of nodes. With `autoscaling`, the size used at creation.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "super::values::unquoted_int_opt"
    )]
    #[schemars(range(min = 0, max = 100_000))]
    pub size: Option<At<i64>>,
    /// Leave the current size to an autoscaler, within these bounds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoscaling: Option<At<Autoscaling>>,
    /// What every node of the pool should look like.
    pub template: Template,
    #[serde(default)]
    pub rollout: Rollout,
    #[serde(default)]
    pub disruption: Disruption,
    #[serde(default)]
    pub lifecycle: Lifecycle,
    /// Take over a pool that already exists at the provider but that poolwright
    /// did not create. Without it such a pool is reported and left alone.
    #[serde(default)]
    pub adopt: bool,
    /// AWS Auto Scaling group settings (provider `type: aws`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aws: Option<At<AwsPool>>,
}

#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Autoscaling {
    #[serde(deserialize_with = "super::values::unquoted_int")]
    #[schemars(range(min = 0, max = 100_000))]
    pub min: At<i64>,
    #[serde(deserialize_with = "super::values::unquoted_int")]
    #[schemars(range(min = 0, max = 100_000))]
    pub max: At<i64>,
}

/// The node template. Changing `image`, `instanceType`, `kubernetesVersion` or the
/// provider-specific template replaces nodes; labels, annotations, taints and tags
/// are applied in place.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Template {
    /// An image id (`ami-0abc…`, `img-2`), or `{channel: NAME}`: the newest
    /// eligible image of that `ImageChannel`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<ImageRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes_version: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<Taint>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    /// Launch template and instance types (provider `type: aws`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aws: Option<At<AwsTemplate>>,
    /// Free-form settings passed to an HTTP plug-in provider unchanged.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub plugin: BTreeMap<String, serde_json::Value>,
}

#[derive(
    Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize, Serialize, JsonSchema,
)]
#[serde(deny_unknown_fields)]
pub struct Taint {
    pub key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    pub effect: TaintEffect,
}

#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize, Serialize, JsonSchema,
)]
pub enum TaintEffect {
    NoSchedule,
    PreferNoSchedule,
    NoExecute,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AwsTemplate {
    pub launch_template: At<LaunchTemplateRef>,
    /// Instance-type overrides, in order of preference.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub instance_types: Vec<String>,
}

/// A launch template by name or id (exactly one), and a version (`$Latest`,
/// `$Default` or a number; `$Default` when omitted).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct LaunchTemplateRef {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AwsPool {
    /// Name of the Auto Scaling group; the pool's name when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_name: Option<String>,
    /// Subnets for a group poolwright creates.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subnets: Vec<String>,
    /// Availability zones for a group poolwright creates (when no subnets).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub availability_zones: Vec<String>,
}

// ---------------------------------------------------------------- Rollout

/// How outdated nodes are replaced. See docs/explanation/rollouts.md.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Rollout {
    /// Whose numbers the budget follows: `kubernetes` (default), or the
    /// rounding, defaults and limits OKE, AKS, GKE or Yandex document.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub semantics: Option<At<Semantics>>,
    /// Extra nodes allowed above the desired size (integer or "N%", rounded up). Default 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_surge: Option<At<IntOrPercent>>,
    /// Yandex's name for `maxSurge` (with `semantics: yandex`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_expansion: Option<At<IntOrPercent>>,
    /// Nodes allowed below the desired size (integer or "N%", rounded down). Default 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_unavailable: Option<At<IntOrPercent>>,
    #[serde(default)]
    pub drain: Drain,
    #[serde(default)]
    pub health: Health,
    /// Replace one node first and wait `health.minReady` before the rest.
    #[serde(default)]
    pub canary: bool,
    /// Reimage old nodes in place (drain, reimage, wait for health) instead of
    /// terminating them and creating new ones; needs `maxSurge: 0` and a provider
    /// that can reimage (the simulator can, Auto Scaling groups cannot).
    #[serde(default)]
    pub reimage: At<bool>,
    /// Pause at these completion percentages for a bake time.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checkpoints: Vec<At<Checkpoint>>,
    /// What a failed node leads to.
    #[serde(default)]
    pub on_failure: OnFailure,
    /// Stop the rollout after this many failed nodes (circuit breaker).
    #[serde(
        default = "Rollout::default_max_failed_nodes",
        deserialize_with = "super::values::unquoted_int"
    )]
    #[schemars(range(min = 1, max = 100_000))]
    pub max_failed_nodes: At<i64>,
    /// Turn the rollout Degraded when it makes no progress for this long
    /// (a `rollout_stalled` event comes at half of it). Default 30m; `none`
    /// waits forever, and must be written out.
    #[serde(default = "Rollout::default_progress_deadline")]
    pub progress_deadline: Limit,
    /// Replace in waves, as the managed services' surge upgrades do: a new
    /// wave starts only when every replacement of the previous one has
    /// finished. Slower than the default pipeline (a freed slot is reused at
    /// once), but each wave can be watched as a unit.
    #[serde(default)]
    pub waves: bool,
    /// Count nodes that are terminating against `size + maxSurge`, as a
    /// cloud quota does: a new node launches only once an old one is gone,
    /// not when it starts going. Default false: terminating nodes are not
    /// counted (they can no longer take work), as Kubernetes Deployments do.
    #[serde(default)]
    pub count_terminating: bool,
    /// The order in which old nodes are taken down: `oldest` (default),
    /// `newest`, `zone` (one zone at a time), or `{label: KEY}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub order: Option<At<TakeDownOrder>>,
}

/// The order in which a rollout takes old nodes down. Only the sequence
/// differs: every order takes the same nodes within the same budget.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum TakeDownOrder {
    /// Launched first, taken down first.
    #[default]
    Oldest,
    /// Launched last, taken down first.
    Newest,
    /// One zone at a time (the Node's `topology.kubernetes.io/zone`, else the
    /// provider's zone), the zone with the most outdated nodes first; oldest
    /// first within a zone. No node of the next zone is taken down until
    /// every old node of the current one has been drained.
    Zone,
    /// Ascending value of this node label (numbers as numbers), e.g.
    /// `poolwright.io/drain-priority`; nodes without it go last.
    Label(String),
}

/// Whose rules the budget follows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Semantics {
    /// Kubernetes Deployments: surge rounds up, unavailable down; defaults 1 and 0.
    #[default]
    Kubernetes,
    /// Oracle OKE: a percentage maxUnavailable rounds up; with reimage
    /// (boot-volume replacement) maxUnavailable defaults to 1 and cannot be 0.
    Oke,
    /// Azure AKS: percentages round up; maxSurge defaults to 10%; the
    /// disruption policy holds configuration changes only.
    Aks,
    /// Google GKE: integers only; maxSurge + maxUnavailable at most 20.
    Gke,
    /// Yandex Managed Kubernetes: integers 0 to 100, `maxExpansion` for
    /// maxSurge; with expansion 0, nodes are updated in place where the
    /// provider can reimage.
    Yandex,
}

impl Semantics {
    pub fn as_str(self) -> &'static str {
        match self {
            Semantics::Kubernetes => "kubernetes",
            Semantics::Oke => "oke",
            Semantics::Aks => "aks",
            Semantics::Gke => "gke",
            Semantics::Yandex => "yandex",
        }
    }
}

impl Rollout {
    pub fn semantics(&self) -> Semantics {
        self.semantics.as_ref().map(|s| s.value).unwrap_or_default()
    }

    /// `maxSurge`, or its Yandex name.
    pub fn surge(&self) -> Option<&At<IntOrPercent>> {
        self.max_surge.as_ref().or(self.max_expansion.as_ref())
    }

    fn default_max_failed_nodes() -> At<i64> {
        At::bare(3)
    }

    fn default_progress_deadline() -> Limit {
        Limit::After(Duration::secs(30 * 60))
    }
}

impl Default for Rollout {
    fn default() -> Self {
        Rollout {
            semantics: None,
            max_surge: None,
            max_expansion: None,
            max_unavailable: None,
            drain: Drain::default(),
            health: Health::default(),
            canary: false,
            reimage: At::bare(false),
            checkpoints: Vec::new(),
            on_failure: OnFailure::default(),
            max_failed_nodes: Rollout::default_max_failed_nodes(),
            progress_deadline: Rollout::default_progress_deadline(),
            waves: false,
            count_terminating: false,
            order: None,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Drain {
    /// How long evictions may take before `onTimeout` applies. Default 30m.
    #[serde(default = "Drain::default_timeout")]
    pub timeout: Duration,
    #[serde(default)]
    pub on_timeout: OnDrainTimeout,
    /// With `onTimeout: quarantine`, the most nodes left quarantined at once
    /// (integer, or "N%" of the size rounded down); the next timeout past it
    /// turns the pool Degraded instead. Default: no limit but the surge.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_blocked_nodes: Option<At<IntOrPercent>>,
    /// What a plan does when a PodDisruptionBudget would block a drain of
    /// the roll (pools with a `clusterRef`): `warn` (default) says so;
    /// `refuse` does not start the roll.
    #[serde(default)]
    pub preflight: Preflight,
}

/// See [`Drain::preflight`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Preflight {
    #[default]
    Warn,
    Refuse,
}

impl Drain {
    fn default_timeout() -> Duration {
        Duration::secs(30 * 60)
    }
}

impl Default for Drain {
    fn default() -> Self {
        Drain {
            timeout: Drain::default_timeout(),
            on_timeout: OnDrainTimeout::default(),
            max_blocked_nodes: None,
            preflight: Preflight::default(),
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum OnDrainTimeout {
    /// Stop: the pool becomes Degraded and the node stays cordoned.
    #[default]
    Fail,
    /// Delete the remaining pods (recorded as an event) and carry on.
    Force,
    /// Leave the node cordoned, keep a surge node in its place, carry on.
    Quarantine,
}

#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Health {
    /// A new node not healthy within this time is a failure. Default 10m.
    #[serde(default = "Health::default_startup_timeout")]
    pub startup_timeout: Duration,
    /// How long a node must stay healthy before it counts as available. Default 30s.
    #[serde(default = "Health::default_min_ready")]
    pub min_ready: Duration,
}

impl Health {
    fn default_startup_timeout() -> Duration {
        Duration::secs(10 * 60)
    }
    fn default_min_ready() -> Duration {
        Duration::secs(30)
    }
}

impl Default for Health {
    fn default() -> Self {
        Health {
            startup_timeout: Health::default_startup_timeout(),
            min_ready: Health::default_min_ready(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Checkpoint {
    /// Completion percentage at which to pause, e.g. "50%".
    pub at: At<Percent>,
    /// How long to bake before continuing.
    pub pause: Duration,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum OnFailure {
    /// Wait for `poolwright rollout resume POOL`.
    #[default]
    Pause,
    /// Return the pool to the previous template through the same engine.
    Rollback,
}

// ---------------------------------------------------------------- Disruption

/// A named disruption schedule that many pools share through
/// `disruption.policyRef`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct DisruptionPolicyDoc {
    pub api_version: ApiVersion,
    pub kind: DisruptionPolicyKind,
    pub metadata: Metadata,
    pub spec: At<DisruptionRules>,
}

/// The rules of a shared `DisruptionPolicy` document.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct DisruptionRules {
    /// Allow (default), Block or AllowDuringMaintenanceWindow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<At<DisruptionPolicy>>,
    /// Windows; at least one is required with `AllowDuringMaintenanceWindow`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub windows: Vec<At<Window>>,
    /// With `Block`: the freeze ends at this instant (RFC 3339, e.g.
    /// 2027-01-04T08:00:00Z); from then on disruptive steps are allowed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<At<String>>,
    /// Which disruptive changes the policy holds (default: all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applies_to: Option<At<Vec<ChangeClass>>>,
}

/// When disruptive steps (drain, terminate, reimage, scale-down) may start.
/// After validation, a pool's `disruption` holds the resolved rules: the
/// referenced `DisruptionPolicy`, overridden field by field by the pool's own.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Disruption {
    /// Name of a shared `DisruptionPolicy` document.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_ref: Option<At<String>>,
    /// Allow (default), Block or AllowDuringMaintenanceWindow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<At<DisruptionPolicy>>,
    /// Windows; at least one is required with `AllowDuringMaintenanceWindow`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub windows: Vec<At<Window>>,
    /// With `Block`: the freeze ends at this instant (RFC 3339); from then on
    /// disruptive steps are allowed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<At<String>>,
    /// Which disruptive changes the policy holds: `config`, `image`,
    /// `kubernetesVersion`, `repair` (replacing failed nodes, rollback).
    /// Default: all of them (under `rollout.semantics: aks`, `[config]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applies_to: Option<At<Vec<ChangeClass>>>,
}

/// What kind of change a disruptive step makes, for `disruption.appliesTo`.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize, Serialize, JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub enum ChangeClass {
    /// A template change other than the next two (instance type, launch
    /// template, plug-in settings), and a scale-down.
    Config,
    /// The node image.
    Image,
    /// The Kubernetes version.
    KubernetesVersion,
    /// Replacing failed nodes, and a rollback.
    Repair,
}

impl ChangeClass {
    pub const ALL: [ChangeClass; 4] = [
        ChangeClass::Config,
        ChangeClass::Image,
        ChangeClass::KubernetesVersion,
        ChangeClass::Repair,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ChangeClass::Config => "config",
            ChangeClass::Image => "image",
            ChangeClass::KubernetesVersion => "kubernetesVersion",
            ChangeClass::Repair => "repair",
        }
    }
}

impl Disruption {
    pub fn policy(&self) -> DisruptionPolicy {
        self.policy.as_ref().map(|p| p.value).unwrap_or_default()
    }

    /// The end of a `Block` freeze (validated as RFC 3339).
    pub fn until(&self) -> Option<jiff::Timestamp> {
        self.until.as_ref().and_then(|u| u.value.parse().ok())
    }

    /// The change classes the policy holds, under `semantics` when the pool
    /// does not say.
    pub fn applies_to(&self, semantics: Semantics) -> Vec<ChangeClass> {
        match (&self.applies_to, semantics) {
            (Some(list), _) => list.value.clone(),
            (None, Semantics::Aks) => vec![ChangeClass::Config],
            (None, _) => ChangeClass::ALL.to_vec(),
        }
    }

    /// These rules, each field the pool leaves unset taken from `shared`.
    pub fn resolved_with(&self, shared: &DisruptionRules) -> Disruption {
        Disruption {
            applies_to: self
                .applies_to
                .clone()
                .or_else(|| shared.applies_to.clone()),
            policy_ref: self.policy_ref.clone(),
            policy: self.policy.clone().or_else(|| shared.policy.clone()),
            windows: if self.windows.is_empty() {
                shared.windows.clone()
            } else {
                self.windows.clone()
            },
            until: self.until.clone().or_else(|| shared.until.clone()),
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub enum DisruptionPolicy {
    /// Disruptive steps may start at any time.
    #[default]
    Allow,
    /// No disruptive step starts (a freeze).
    Block,
    /// Disruptive steps start only inside a window; one in flight finishes.
    AllowDuringMaintenanceWindow,
}

#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Window {
    /// Days on which the window opens; every day when omitted (not with `cron`).
    #[serde(default = "Window::every_day")]
    pub days: At<Vec<Weekday>>,
    /// Local opening time, HH:MM (or use `cron`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<At<TimeOfDay>>,
    /// Opening times as a five-field cron expression (minute hour day-of-month
    /// month day-of-week) in `timezone`, e.g. "0 22 * * 1-5"; instead of `days` and `start`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cron: Option<At<String>>,
    /// How long the window stays open (more than 0, at most 7 days).
    pub duration: At<Duration>,
    /// IANA time zone of `start`, e.g. Europe/Berlin. Default UTC.
    #[serde(default = "Window::utc")]
    pub timezone: At<String>,
}

impl Window {
    fn every_day() -> At<Vec<Weekday>> {
        At::bare(Weekday::ALL.to_vec())
    }
    fn utc() -> At<String> {
        At::bare("UTC".to_string())
    }
}

// ---------------------------------------------------------------- FleetRollout

/// A change across pools, staged: which pools it governs, in which stages
/// they roll, how many at once, when the whole change halts, and which
/// metrics must hold between stages.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct FleetRolloutDoc {
    pub api_version: ApiVersion,
    pub kind: FleetRolloutKind,
    pub metadata: Metadata,
    pub spec: At<FleetRolloutSpec>,
}

#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct FleetRolloutSpec {
    /// The pools it governs, by their `metadata.labels`; every pool when
    /// omitted. A pool is governed by at most one FleetRollout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<At<Selector>>,
    /// Most pools of one change rolling at once, across every provider: a
    /// count, or a percentage of the governed pools (rounded down, at least
    /// 1). No limit when omitted (each provider's `--parallelism` still holds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrent_pools: Option<At<IntOrPercent>>,
    /// In order. A stage's pools are its selector's, or enough further pools
    /// to reach its cumulative share; the last stage takes the rest.
    pub stages: At<Vec<At<Stage>>>,
    #[serde(default)]
    pub halt: Halt,
    /// Metrics that must hold during every soak and before each stage starts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gates: Vec<At<Gate>>,
}

/// Pools by label: every `matchLabels` pair must be among the pool's
/// `metadata.labels`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Selector {
    #[serde(default)]
    pub match_labels: BTreeMap<String, String>,
}

impl Selector {
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.match_labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Stage {
    /// Unique within the FleetRollout. Lower-case letters, digits and `-`.
    #[schemars(
        length(min = 1, max = 63),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    )]
    pub name: At<String>,
    /// The pools of this stage, by label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<At<Selector>>,
    /// The share of the governed pools rolled once this stage is done,
    /// counting earlier stages (like an Auto Scaling group's checkpoints): a
    /// count, or a percentage rounded up. Further pools are taken in the
    /// order of a hash of their names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pools: Option<At<IntOrPercent>>,
    /// How long the stage's pools run on the new template, with every gate
    /// holding, before the next stage starts. None when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub soak: Option<At<Duration>>,
}

/// When a change stops fleet-wide.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Halt {
    /// Pools of one change that fail, degrade or roll back before it halts.
    #[serde(default = "Halt::one")]
    #[schemars(range(min = 1, max = 100_000))]
    pub failed_pools: At<i64>,
    /// What the change's pools do when it halts.
    #[serde(default)]
    pub on_halt: OnHalt,
}

impl Halt {
    fn one() -> At<i64> {
        At::bare(1)
    }
}

impl Default for Halt {
    fn default() -> Self {
        Halt {
            failed_pools: Halt::one(),
            on_halt: OnHalt::Hold,
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum OnHalt {
    /// Pools not started never start; pools in flight stop at their next
    /// safe point; nothing is undone.
    #[default]
    Hold,
    /// As `hold`, and every pool the change rolled (or was rolling) goes back
    /// to the template it had, through its rollout budget.
    Rollback,
}

/// A condition on a metric that must hold.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Gate {
    /// Unique within the FleetRollout. Lower-case letters, digits and `-`.
    #[schemars(
        length(min = 1, max = 63),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    )]
    pub name: At<String>,
    pub prometheus: At<PrometheusGate>,
    /// How long it must hold without a break (default 0s: one reading).
    #[serde(default, rename = "for", skip_serializing_if = "Option::is_none")]
    pub hold_for: Option<At<Duration>>,
    /// How often it is evaluated (default 15s; 1s to 10m).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<At<Duration>>,
}

/// A PromQL query against a Prometheus HTTP API (`/api/v1/query`). It holds
/// when the result is a non-empty vector (or a non-zero scalar): write the
/// condition into the query, e.g. `sum(rate(errors[5m])) < 1`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PrometheusGate {
    /// The server's base URL, http or https, e.g. http://prometheus:9090.
    #[schemars(length(min = 1, max = 2048))]
    pub url: At<String>,
    #[schemars(length(min = 1, max = 8192))]
    pub query: At<String>,
    /// How long one query may take (default 10s; at most 60s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<At<Duration>>,
}

// ---------------------------------------------------------------- Lifecycle

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Lifecycle {
    /// Never delete this pool, whatever the files say.
    #[serde(default)]
    pub prevent_destroy: bool,
    /// Attributes whose drift from the files is left alone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ignore_changes: Vec<IgnoredAttribute>,
    /// Replace nodes older than this (`30d`) through the rollout executor,
    /// under the pool's budget and its disruption policy (as a `repair`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_node_age: Option<Age>,
}

#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize, Serialize, JsonSchema,
)]
pub enum IgnoredAttribute {
    #[serde(rename = "size")]
    Size,
    #[serde(rename = "template.image")]
    Image,
    #[serde(rename = "template.instanceType")]
    InstanceType,
    #[serde(rename = "template.kubernetesVersion")]
    KubernetesVersion,
    #[serde(rename = "template.labels")]
    Labels,
    #[serde(rename = "template.annotations")]
    Annotations,
    #[serde(rename = "template.taints")]
    Taints,
    #[serde(rename = "template.tags")]
    Tags,
}

// ---------------------------------------------------------------- ImageChannel

/// Where a pool's image comes from: a data source in Terraform's sense. A
/// pool says `template: {image: {channel: NAME}}`; the channel says where
/// images are published and which of them are eligible.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ImageChannelDoc {
    pub api_version: ApiVersion,
    pub kind: ImageChannelKind,
    pub metadata: Metadata,
    pub spec: At<ImageChannelSpec>,
}

#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ImageChannelSpec {
    pub source: At<ChannelSource>,
    /// An image younger than this is not eligible yet: `3d`, `36h`
    /// (default 0s; at most 365d).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_release_age: Option<At<super::values::ReleaseAge>>,
    /// Images never picked (at most 1,000).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 1000))]
    pub deny: Vec<String>,
    /// How often the daemon asks the source (default 10m; 10s to 1d).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<At<Duration>>,
}

/// Exactly one source of images.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub enum ChannelSource {
    /// An SSM parameter holding an AMI id, or the newest AMI matching a name.
    Aws(AwsImageSource),
    /// An HTTP plug-in's `GET /v1/channels/{name}/images`.
    Http(ProviderImageSource),
    /// The simulator's catalogue (`poolwright sim release`).
    Sim(ProviderImageSource),
}

impl ChannelSource {
    /// The provider asked, and the type it must be.
    pub fn provider(&self) -> (&At<String>, &'static str) {
        match self {
            ChannelSource::Aws(a) => (&a.provider, "aws"),
            ChannelSource::Http(h) => (&h.provider, "http"),
            ChannelSource::Sim(s) => (&s.provider, "sim"),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ProviderImageSource {
    /// The `Provider` document asked for images.
    pub provider: At<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AwsImageSource {
    /// The `Provider` (type aws) whose credentials and region are used.
    pub provider: At<String>,
    /// An SSM parameter whose value is an AMI id (EKS publishes
    /// `/aws/service/eks/optimized-ami/...`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 2048))]
    pub ssm_parameter: Option<At<String>>,
    /// The newest AMI (by creation date) of these owners matching a name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub images: Option<At<AwsImageFilter>>,
}

#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AwsImageFilter {
    #[schemars(length(min = 1, max = 20))]
    pub owners: Vec<String>,
    /// A name pattern (`*` matches anything), as EC2's `name` filter takes.
    #[schemars(length(min = 1, max = 256))]
    pub name: String,
}

/// A pool's image: written as an id, or as `{channel: NAME}`. A channel's
/// image is resolved when a plan is made ([`ResolvedImage`]), from what the
/// channel's source last said; the files never hold it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ImageRef {
    Id(String),
    Channel {
        channel: At<String>,
        /// `None` until resolved; an error when the channel has no image
        /// in force (its source never answered), saying why.
        resolved: Option<Result<ResolvedImage, String>>,
    },
}

/// The image a channel gives a pool, and what a plan says of it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResolvedImage {
    pub image: String,
    pub released: jiff::Timestamp,
    /// A newer image, not eligible until `next_eligible_at`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_eligible_at: Option<jiff::Timestamp>,
    /// An eligible image waiting for the change in flight to end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queued: Option<String>,
    /// The image is in force because this one was recalled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recall_of: Option<String>,
    /// Why the source's last answer did not count, if it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_error: Option<String>,
}

impl ImageRef {
    /// The image id in force: as written, or as the channel resolved it.
    pub fn id(&self) -> Option<&str> {
        match self {
            ImageRef::Id(s) => Some(s),
            ImageRef::Channel { resolved, .. } => {
                Some(resolved.as_ref()?.as_ref().ok()?.image.as_str())
            }
        }
    }

    pub fn channel(&self) -> Option<&At<String>> {
        match self {
            ImageRef::Channel { channel, .. } => Some(channel),
            ImageRef::Id(_) => None,
        }
    }
}

impl<'de> Deserialize<'de> for ImageRef {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::{Error, MapAccess, Visitor};
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ImageRef;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an image id, or {channel: NAME} naming an ImageChannel")
            }
            fn visit_str<E: Error>(self, v: &str) -> Result<ImageRef, E> {
                Ok(ImageRef::Id(v.to_string()))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ImageRef, A::Error> {
                let mut channel = None;
                while let Some(key) = map.next_key::<String>()? {
                    if key != "channel" {
                        return Err(A::Error::unknown_field(&key, &["channel"]));
                    }
                    if channel.is_some() {
                        return Err(A::Error::duplicate_field("channel"));
                    }
                    channel = Some(map.next_value::<At<String>>()?);
                }
                let channel = channel.ok_or_else(|| A::Error::missing_field("channel"))?;
                Ok(ImageRef::Channel {
                    channel,
                    resolved: None,
                })
            }
        }
        d.deserialize_any(V)
    }
}

impl Serialize for ImageRef {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        match self {
            ImageRef::Id(id) => s.serialize_str(id),
            ImageRef::Channel { channel, .. } => {
                let mut m = s.serialize_map(Some(1))?;
                m.serialize_entry("channel", &channel.value)?;
                m.end()
            }
        }
    }
}

impl JsonSchema for ImageRef {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "ImageRef".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "An image id, or {channel: NAME}: the newest eligible image of that ImageChannel.",
            "anyOf": [
                {"type": "string", "minLength": 1, "maxLength": 1024},
                {
                    "type": "object",
                    "additionalProperties": false,
                    "required": ["channel"],
                    "properties": {"channel": {"type": "string", "minLength": 1, "maxLength": 63}}
                }
            ]
        })
    }
}

// ---------------------------------------------------------------- Schema root

/// Any one document of the desired-state format (used for the JSON Schema only;
/// loading dispatches on `kind` first, so errors can name the kind).
#[derive(JsonSchema)]
#[serde(untagged)]
#[allow(dead_code, clippy::large_enum_variant)]
pub enum AnyDocument {
    Provider(ProviderDoc),
    Cluster(ClusterDoc),
    NodePool(NodePoolDoc),
    DisruptionPolicy(DisruptionPolicyDoc),
    FleetRollout(FleetRolloutDoc),
    ImageChannel(ImageChannelDoc),
}
