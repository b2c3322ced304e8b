//! `type: http`: pools behind an out-of-process plug-in that speaks the
//! published contract (`schemas/provider-plugin.openapi.yaml`, generated from
//! [`wire`]). The plug-in offers the same small primitives as every backend;
//! the shared executor does the rolling.
//!
//! Safety, as for AWS:
//! - Every mutating call carries an `Idempotency-Key` (the executor derives it
//!   from its journal), so retries and resumes act once; capacity calls are
//!   absolute.
//! - A call whose answer was lost (timeouts, 5xx after retries) is checked
//!   against a fresh describe before it counts as failed.
//! - The plug-in's answers are untrusted: typed, size-limited, and checked for
//!   what types cannot say (ids, duplicates, pools that were not asked for).
//!   A bad answer is an error naming the call and the field; nothing acts on it.

pub mod check;
pub mod openapi;
pub mod transport;
pub mod wire;

use crate::sync::RwLocked;
use std::collections::{BTreeSet, HashSet};
use std::path::Path;
use std::sync::RwLock;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use reqwest::{Method, Url};

use self::transport::{Call, Token, Transport};
use super::{Capabilities, ErrorKind, OpKey, Provider, ProviderError, Result};
use crate::model::{Bounds, InPlace, Node, NodeTemplate, ObservedPool, PoolSpec};
use crate::spec::types::HttpProvider;

/// Capabilities are asked again after this long (a plug-in may be upgraded).
const CAPABILITIES_TTL: Duration = Duration::from_secs(300);
const DEFAULT_POLL: Duration = Duration::from_secs(5);
const DEFAULT_ATTEMPTS: u32 = 5;
/// A call's bound, retries included (as the AWS provider's default).
const DEFAULT_OPERATION_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);
/// Largest pool size a plug-in may report (the documents' own limit).
pub const MAX_POOL_SIZE: u32 = 100_000;
/// Largest CA bundle or client certificate file.
const MAX_PEM_BYTES: u64 = 1024 * 1024;

pub struct Http {
    name: String,
    transport: Transport,
    /// `pollInterval` of the provider document, which wins over the plug-in's.
    poll_interval: Option<Duration>,
    caps: RwLock<Option<(Instant, wire::Capabilities)>>,
}

/// Why a plug-in's provider document, or a file it names (token, CA,
/// client certificate), cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BadSettings(pub String);

impl From<String> for BadSettings {
    fn from(why: String) -> BadSettings {
        BadSettings(why)
    }
}

/// How a plug-in's answer breaks the contract (what types cannot say).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
struct Breach(pub String);

impl From<String> for Breach {
    fn from(why: String) -> Breach {
        Breach(why)
    }
}

/// A settings path, relative to the provider document's directory.
fn resolve(base: &Path, p: &Path) -> std::path::PathBuf {
    base.join(crate::files::expand_home(p))
}

fn read_pem(what: &str, path: &Path) -> std::result::Result<Vec<u8>, BadSettings> {
    crate::files::read_regular(path, MAX_PEM_BYTES)
        .map_err(|e| BadSettings(format!("{what} {}: {e}", path.display())))
}

impl Http {
    /// A client for the plug-in at `settings.url`; `base` is the directory of
    /// the provider's document (relative paths start there).
    pub fn new(
        name: &str,
        settings: &HttpProvider,
        base: &Path,
    ) -> std::result::Result<Http, BadSettings> {
        let mut url: Url = settings
            .url
            .parse()
            .map_err(|e| format!("url {:?}: {e}", settings.url.value))?;
        if !url.path().ends_with('/') {
            let path = format!("{}/", url.path());
            url.set_path(&path);
        }
        let timeout = settings.timeout.value.as_std();
        let mut builder = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout.min(Duration::from_secs(10)))
            .pool_idle_timeout(Duration::from_secs(60))
            .user_agent(concat!("poolwright/", env!("CARGO_PKG_VERSION")))
            // A proxy from the environment would see the bearer token.
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none());
        if let Some(ca) = &settings.ca_file {
            let pem = read_pem("caFile", &resolve(base, ca))?;
            let certs = reqwest::Certificate::from_pem_bundle(&pem)
                .map_err(|e| format!("caFile {}: {e}", ca.value.display()))?;
            if certs.is_empty() {
                return Err(format!("caFile {}: no certificate in it", ca.value.display()).into());
            }
            // The plug-in's CA, and only it: a private endpoint is not vouched
            // for by the public roots.
            builder = builder.tls_certs_only(certs);
        }
        if let (Some(cert), Some(key)) = (&settings.client_cert, &settings.client_key) {
            let mut pem = read_pem("clientCert", &resolve(base, cert))?;
            pem.push(b'\n');
            pem.extend(read_pem("clientKey", &resolve(base, key))?);
            let identity = reqwest::Identity::from_pem(&pem)
                .map_err(|e| format!("clientCert/clientKey: {e}"))?;
            builder = builder.identity(identity);
        }
        let http = builder
            .build()
            .map_err(|e| format!("building the HTTP client: {e}"))?;
        let token = match (&settings.token_file, &settings.token_env) {
            (Some(f), _) => Token::file(resolve(base, f)),
            (None, Some(env)) => Token::env(&env.value),
            (None, None) => Token::None,
        };
        let headers = transport::header_map(&settings.headers)?;
        Ok(Http {
            name: name.to_string(),
            transport: Transport::new(
                url,
                http,
                token,
                headers,
                settings
                    .max_attempts
                    .as_ref()
                    .map_or(DEFAULT_ATTEMPTS, |a| a.value),
                // By default at least one whole request: a plug-in given a
                // long `timeout` keeps it.
                settings.operation_timeout.as_ref().map_or(
                    DEFAULT_OPERATION_TIMEOUT.max(settings.timeout.value.as_std()),
                    |o| o.value.as_std(),
                ),
            ),
            poll_interval: settings.poll_interval.as_ref().map(|d| d.value.as_std()),
            caps: RwLock::new(None),
        })
    }

    fn base_url(&self) -> &Url {
        &self.transport.base
    }

    pub fn transport(&self) -> &Transport {
        &self.transport
    }

    /// The plug-in's capabilities, asked once and again after a while.
    async fn plugin_capabilities(&self) -> Result<wire::Capabilities> {
        if let Some((at, caps)) = self.caps.read_locked().as_ref()
            && at.elapsed() < CAPABILITIES_TTL
        {
            return Ok(caps.clone());
        }
        let call = Call::get("Capabilities".into(), vec!["v1", "capabilities"]);
        let caps: wire::Capabilities = self.transport.send(&call).await?;
        check_capabilities(&caps).map_err(|m| {
            ProviderError::new(
                "Capabilities",
                ErrorKind::Rejected,
                format!("{}: {m}", call.route(&self.transport.base)),
            )
        })?;
        *self.caps.write_locked() = Some((Instant::now(), caps.clone()));
        Ok(caps)
    }

    /// Refuse a template with fields the plug-in does not act on: it would
    /// ignore them, and the pool would silently differ from its document.
    async fn check_template(&self, call: &str, t: &NodeTemplate) -> Result<()> {
        let caps = self.plugin_capabilities().await?;
        let who = format!("plug-in {}", caps.name);
        match crate::model::template_refusal(&who, &caps.template_fields, t) {
            None => Ok(()),
            Some(why) => Err(ProviderError::new(
                call,
                ErrorKind::Rejected,
                format!("{why}. Nothing was sent"),
            )),
        }
    }

    /// A pool name as a URL path segment: only names of the desired state's
    /// format ever get there.
    fn pool_segment<'a>(&self, call: &str, pool: &'a str) -> Result<&'a str> {
        if crate::spec::validate::is_dns_label(pool, 63) {
            Ok(pool)
        } else {
            Err(ProviderError::new(
                call,
                ErrorKind::Rejected,
                format!("{pool:?} is not a valid pool name; nothing was sent"),
            ))
        }
    }

    async fn describe_one(&self, pool: &str) -> Result<Option<ObservedPool>> {
        Ok(self
            .describe_pools(&[pool.to_string()])
            .await?
            .into_iter()
            .next())
    }

    /// Send a mutating call. When its answer is lost (every attempt failed
    /// with a timeout or a server error), a fresh describe decides whether the
    /// change happened after all: `done` says so of the pool as observed.
    async fn mutate<T: serde::de::DeserializeOwned>(
        &self,
        call: Call<'_>,
        pool: &str,
        done: impl Fn(Option<&ObservedPool>) -> Option<T>,
    ) -> Result<T> {
        match self.transport.send::<T>(&call).await {
            Ok(v) => Ok(v),
            Err(e) if e.kind == ErrorKind::Unavailable => match self.describe_one(pool).await {
                Ok(observed) => match done(observed.as_ref()) {
                    Some(v) => {
                        tracing::info!(
                            call = %call.name,
                            "the answer was lost, but the pool shows the change was made: {e}"
                        );
                        Ok(v)
                    }
                    None => Err(e),
                },
                Err(_) => Err(e),
            },
            Err(e) => Err(e),
        }
    }
}

/// What types cannot say about capabilities.
fn check_capabilities(c: &wire::Capabilities) -> std::result::Result<(), Breach> {
    if c.protocol != wire::PROTOCOL {
        return Err(format!(
            "the plug-in speaks protocol {:?}; this poolwright speaks {:?}",
            c.protocol,
            wire::PROTOCOL
        )
        .into());
    }
    if !(1..=wire::MAX_DESCRIBE_BATCH).contains(&c.describe_batch_size) {
        return Err(format!(
            "describeBatchSize must be 1 to {}, got {}",
            wire::MAX_DESCRIBE_BATCH,
            c.describe_batch_size
        )
        .into());
    }
    if let Some(p) = c.poll_interval_seconds
        && !(1..=3600).contains(&p)
    {
        return Err(format!("pollIntervalSeconds must be 1 to 3600, got {p}").into());
    }
    Ok(())
}

/// A node id becomes a URL path segment and a journal key: 1 to 253 printable
/// ASCII characters, no spaces or slashes, not `.` or `..`.
fn valid_node_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 253
        && id != "."
        && id != ".."
        && id.bytes().all(|b| b.is_ascii_graphic() && b != b'/')
}

/// Check a describe answer against the question and turn it into observations.
fn observations(
    asked: &[String],
    answer: wire::DescribeResponse,
) -> std::result::Result<Vec<ObservedPool>, Breach> {
    let asked: HashSet<&str> = asked.iter().map(String::as_str).collect();
    let mut seen_pools = BTreeSet::new();
    let mut seen_nodes = HashSet::new();
    let mut out = Vec::with_capacity(answer.pools.len());
    for (i, p) in answer.pools.into_iter().enumerate() {
        if !asked.contains(p.name.as_str()) {
            return Err(format!("pools[{i}].name: {:?} was not asked for", p.name).into());
        }
        if !seen_pools.insert(p.name.clone()) {
            return Err(format!("pools[{i}].name: {:?} appears twice", p.name).into());
        }
        if p.size > MAX_POOL_SIZE {
            return Err(format!(
                "pools[{i}].size: {} is above the limit of {MAX_POOL_SIZE}",
                p.size
            )
            .into());
        }
        if let Some(b) = p.bounds
            && (b.min > b.max || b.max > MAX_POOL_SIZE)
        {
            return Err(format!(
                "pools[{i}].bounds: [{}, {}] is not a valid range",
                b.min, b.max
            )
            .into());
        }
        let mut nodes = Vec::with_capacity(p.nodes.len());
        for (j, n) in p.nodes.into_iter().enumerate() {
            if !valid_node_id(&n.id) {
                return Err(format!(
                    "pools[{i}].nodes[{j}].id: {:?} is not a valid node id (1 to 253 printable ASCII characters, no spaces or '/')",
                    n.id
                ).into());
            }
            if !seen_nodes.insert(n.id.clone()) {
                return Err(
                    format!("pools[{i}].nodes[{j}].id: node {:?} appears twice", n.id).into(),
                );
            }
            if n.zone.as_ref().is_some_and(|z| z.len() > 253) {
                return Err(
                    format!("pools[{i}].nodes[{j}].zone: longer than 253 characters").into(),
                );
            }
            if n.labels.len() > 64
                || n.labels
                    .iter()
                    .any(|(k, v)| k.is_empty() || k.len() > 317 || v.len() > 1024)
            {
                return Err(format!(
                    "pools[{i}].nodes[{j}].labels: at most 64, keys 1 to 317 and values up to 1,024 characters"
                ).into());
            }
            nodes.push(Node {
                id: n.id.into(),
                template: n.template_hash,
                state: match n.state {
                    wire::NodeState::Pending => crate::model::NodeState::Pending,
                    wire::NodeState::Healthy => crate::model::NodeState::Healthy,
                    wire::NodeState::Unhealthy => crate::model::NodeState::Unhealthy,
                    wire::NodeState::Terminating => crate::model::NodeState::Terminating,
                },
                launched_at: n.launched_at,
                healthy_since: n.healthy_since,
                cordoned: n.cordoned,
                provider_id: n.provider_id,
                zone: n.zone.map(std::sync::Arc::from),
                labels: n.labels,
            });
        }
        out.push(ObservedPool {
            name: p.name,
            size: p.size,
            autoscaling: p.bounds,
            template: p.template,
            in_place: p.in_place,
            nodes,
        });
    }
    Ok(out)
}

#[async_trait]
impl Provider for Http {
    fn name(&self) -> &str {
        &self.name
    }

    fn capabilities(&self) -> Capabilities {
        let caps = self.caps.read_locked();
        let caps = caps.as_ref().map(|(_, c)| c);
        Capabilities {
            reimage: caps.is_some_and(|c| c.reimage),
            // The provider splits a describe by the plug-in's batch size itself.
            describe_batch: usize::MAX,
            poll_interval: self
                .poll_interval
                .or_else(|| {
                    caps.and_then(|c| c.poll_interval_seconds)
                        .map(|s| Duration::from_secs(u64::from(s)))
                })
                .unwrap_or(DEFAULT_POLL),
            idempotency_keys: true,
            acts_on: caps.map(|c| c.template_fields.clone()),
        }
    }

    async fn describe_pools(&self, names: &[String]) -> Result<Vec<ObservedPool>> {
        if names.is_empty() {
            return Ok(Vec::new());
        }
        let caps = self.plugin_capabilities().await?;
        let mut out = Vec::with_capacity(names.len());
        for chunk in names.chunks(caps.describe_batch_size as usize) {
            for n in chunk {
                self.pool_segment("Describe", n)?;
            }
            let name = format!("Describe({} pools)", chunk.len());
            let call = Call::query(
                name.clone(),
                vec!["v1", "describe"],
                &wire::DescribeRequest {
                    pools: chunk.to_vec(),
                },
            );
            let answer: wire::DescribeResponse = self.transport.send(&call).await?;
            let pools = observations(chunk, answer).map_err(|m| {
                ProviderError::new(
                    name.clone(),
                    ErrorKind::Rejected,
                    format!(
                        "{}: the plug-in's answer is invalid at {m}; nothing was done with it",
                        call.route(&self.transport.base)
                    ),
                )
            })?;
            out.extend(pools);
        }
        Ok(out)
    }

    async fn create_pool(&self, spec: &PoolSpec, key: &OpKey) -> Result<()> {
        let name = format!("CreatePool({})", spec.name);
        self.pool_segment(&name, &spec.name)?;
        self.check_template(&name, &spec.template).await?;
        let body = wire::CreatePoolRequest {
            pool: spec.clone(),
            template_hash: spec.template.hash(),
        };
        let call = Call::mutate(name, Method::POST, vec!["v1", "pools"], Some(&body), key);
        self.mutate::<serde::de::IgnoredAny>(call, &spec.name, |o| o.map(|_| serde::de::IgnoredAny))
            .await
            .map(|_| ())
    }

    async fn delete_pool(&self, pool: &str, key: &OpKey) -> Result<()> {
        let name = format!("DeletePool({pool})");
        let seg = self.pool_segment(&name, pool)?;
        let call = Call::mutate(
            name,
            Method::DELETE,
            vec!["v1", "pools", seg],
            None::<&()>,
            key,
        );
        self.mutate::<serde::de::IgnoredAny>(call, pool, |o| {
            o.is_none().then_some(serde::de::IgnoredAny)
        })
        .await
        .map(|_| ())
    }

    async fn set_size(&self, pool: &str, size: u32, key: &OpKey) -> Result<()> {
        let name = format!("SetSize({pool}, {size})");
        let seg = self.pool_segment(&name, pool)?;
        let call = Call::mutate(
            name,
            Method::PUT,
            vec!["v1", "pools", seg, "size"],
            Some(&wire::SetSizeRequest { size }),
            key,
        );
        self.mutate::<serde::de::IgnoredAny>(call, pool, |o| {
            o.filter(|p| p.size == size).map(|_| serde::de::IgnoredAny)
        })
        .await
        .map(|_| ())
    }

    async fn set_template(&self, pool: &str, template: &NodeTemplate, key: &OpKey) -> Result<()> {
        let hash = template.hash();
        let name = format!("SetTemplate({pool}, {hash})");
        let seg = self.pool_segment(&name, pool)?;
        self.check_template(&name, template).await?;
        let call = Call::mutate(
            name,
            Method::PUT,
            vec!["v1", "pools", seg, "template"],
            Some(&wire::SetTemplateRequest {
                template: template.clone(),
                template_hash: hash,
            }),
            key,
        );
        self.mutate::<serde::de::IgnoredAny>(call, pool, |o| {
            o.filter(|p| p.template.hash() == hash)
                .map(|_| serde::de::IgnoredAny)
        })
        .await
        .map(|_| ())
    }

    async fn create_nodes(
        &self,
        pool: &str,
        count: u32,
        size: u32,
        key: &OpKey,
    ) -> Result<Vec<String>> {
        let name = format!("CreateNodes({pool}, {count})");
        let seg = self.pool_segment(&name, pool)?;
        let call = Call::mutate(
            name.clone(),
            Method::POST,
            vec!["v1", "pools", seg, "nodes"],
            Some(&wire::CreateNodesRequest { count, size }),
            key,
        );
        let route = call.route(&self.transport.base);
        let answer: wire::CreateNodesResponse = self
            .mutate(call, pool, |o| {
                o.filter(|p| p.size >= size)
                    .map(|_| wire::CreateNodesResponse { nodes: Vec::new() })
            })
            .await?;
        if let Some(bad) = answer.nodes.iter().find(|id| !valid_node_id(id)) {
            return Err(ProviderError::new(
                name,
                ErrorKind::Rejected,
                format!(
                    "{route}: the plug-in's answer is invalid at nodes: {bad:?} is not a valid node id"
                ),
            ));
        }
        Ok(answer.nodes)
    }

    async fn terminate_node(
        &self,
        pool: &str,
        node: &str,
        decrement: bool,
        key: &OpKey,
    ) -> Result<()> {
        let name = format!("TerminateNode({pool}, {node})");
        let seg = self.pool_segment(&name, pool)?;
        if !valid_node_id(node) {
            return Err(ProviderError::new(
                name,
                ErrorKind::Rejected,
                format!("{node:?} is not a valid node id; nothing was sent"),
            ));
        }
        let call = Call::mutate(
            name,
            Method::POST,
            vec!["v1", "pools", seg, "nodes", node, "terminate"],
            Some(&wire::TerminateNodeRequest { decrement }),
            key,
        );
        self.mutate::<serde::de::IgnoredAny>(call, pool, |o| {
            let gone = o.is_none_or(|p| {
                p.nodes
                    .iter()
                    .find(|n| *n.id == *node)
                    .is_none_or(|n| n.state == crate::model::NodeState::Terminating)
            });
            gone.then_some(serde::de::IgnoredAny)
        })
        .await
        .map(|_| ())
    }

    async fn update_in_place(&self, pool: &str, attrs: &InPlace, key: &OpKey) -> Result<()> {
        let name = format!("UpdateInPlace({pool})");
        let seg = self.pool_segment(&name, pool)?;
        let call = Call::mutate(
            name,
            Method::PUT,
            vec!["v1", "pools", seg, "attributes"],
            Some(attrs),
            key,
        );
        self.mutate::<serde::de::IgnoredAny>(call, pool, |o| {
            o.filter(|p| &p.in_place == attrs)
                .map(|_| serde::de::IgnoredAny)
        })
        .await
        .map(|_| ())
    }

    async fn set_bounds(&self, pool: &str, bounds: Option<Bounds>, key: &OpKey) -> Result<()> {
        let name = format!("SetBounds({pool})");
        let seg = self.pool_segment(&name, pool)?;
        let call = Call::mutate(
            name,
            Method::PUT,
            vec!["v1", "pools", seg, "bounds"],
            Some(&wire::SetBoundsRequest { bounds }),
            key,
        );
        self.mutate::<serde::de::IgnoredAny>(call, pool, |o| {
            o.filter(|p| p.autoscaling == bounds)
                .map(|_| serde::de::IgnoredAny)
        })
        .await
        .map(|_| ())
    }

    async fn adopt_pool(&self, pool: &str, key: &OpKey) -> Result<()> {
        let name = format!("AdoptPool({pool})");
        let seg = self.pool_segment(&name, pool)?;
        let call = Call::mutate(
            name,
            Method::POST,
            vec!["v1", "pools", seg, "adopt"],
            Some(&wire::AdoptPoolRequest {}),
            key,
        );
        self.transport
            .send::<serde::de::IgnoredAny>(&call)
            .await
            .map(|_| ())
    }

    async fn channel_images(
        &self,
        channel: &str,
        _source: &crate::spec::types::ChannelSource,
    ) -> Result<Vec<crate::model::image::Release>> {
        let name = format!("ChannelImages({channel})");
        let segment = self.pool_segment(&name, channel)?;
        let call = Call::get(name.clone(), vec!["v1", "channels", segment, "images"]);
        let answer: wire::ChannelImages = self.transport.send(&call).await?;
        answer
            .images
            .into_iter()
            .map(|i| {
                let released = i.released.parse().map_err(|e| {
                    ProviderError::new(
                        &name,
                        ErrorKind::Rejected,
                        format!(
                            "{}: image {:?} has released {:?}, not an RFC 3339 time: {e}",
                            call.route(&self.transport.base),
                            i.image,
                            i.released
                        ),
                    )
                })?;
                Ok(crate::model::image::Release {
                    image: i.image,
                    released,
                })
            })
            .collect()
    }

    async fn reimage_node(&self, pool: &str, node: &str, key: &OpKey) -> Result<()> {
        let name = format!("ReimageNode({pool}, {node})");
        let seg = self.pool_segment(&name, pool)?;
        let caps = self.plugin_capabilities().await?;
        if !caps.reimage {
            return Err(ProviderError::new(
                name,
                ErrorKind::Unsupported,
                format!(
                    "plug-in {} does not reimage nodes (capabilities: reimage false)",
                    caps.name
                ),
            ));
        }
        if !valid_node_id(node) {
            return Err(ProviderError::new(
                name,
                ErrorKind::Rejected,
                format!("{node:?} is not a valid node id; nothing was sent"),
            ));
        }
        let current = self.describe_one(pool).await?.ok_or_else(|| {
            ProviderError::new(
                name.clone(),
                ErrorKind::NotFound,
                format!("pool {pool} does not exist at plug-in {}", self.name),
            )
        })?;
        let target = current.template.hash();
        let call = Call::mutate(
            name,
            Method::POST,
            vec!["v1", "pools", seg, "nodes", node, "reimage"],
            Some(&wire::ReimageNodeRequest {
                template_hash: target,
            }),
            key,
        );
        self.mutate::<serde::de::IgnoredAny>(call, pool, |o| {
            o.and_then(|p| p.nodes.iter().find(|n| *n.id == *node))
                .filter(|n| n.template == target)
                .map(|_| serde::de::IgnoredAny)
        })
        .await
        .map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::TemplateHash;

    fn node(id: &str) -> wire::NodeView {
        wire::NodeView {
            id: id.into(),
            template_hash: TemplateHash(1),
            state: wire::NodeState::Healthy,
            launched_at: jiff::Timestamp::UNIX_EPOCH,
            healthy_since: None,
            cordoned: false,
            provider_id: Some(format!("aws:///zone/{id}")),
            zone: None,
            labels: Default::default(),
        }
    }

    fn pool(name: &str, nodes: Vec<wire::NodeView>) -> wire::PoolView {
        wire::PoolView {
            name: name.into(),
            size: nodes.len() as u32,
            bounds: None,
            template: NodeTemplate::default(),
            in_place: InPlace::default(),
            nodes,
        }
    }

    #[test]
    fn describe_answers_are_checked_for_what_types_cannot_say() {
        let asked = vec!["web".to_string(), "api".to_string()];
        let ok = observations(
            &asked,
            wire::DescribeResponse {
                pools: vec![pool("web", vec![node("i-1"), node("i-2")])],
            },
        )
        .unwrap();
        assert_eq!(
            ok[0].nodes[1].provider_id.as_deref(),
            Some("aws:///zone/i-2")
        );
        let cases = [
            (
                vec![pool("db", vec![])],
                "pools[0].name: \"db\" was not asked for",
            ),
            (
                vec![pool("web", vec![]), pool("web", vec![])],
                "pools[1].name: \"web\" appears twice",
            ),
            (
                vec![pool("web", vec![node("i-1"), node("i-1")])],
                "pools[0].nodes[1].id: node \"i-1\" appears twice",
            ),
            (
                vec![
                    pool("web", vec![node("i-1")]),
                    pool("api", vec![node("i-1")]),
                ],
                "pools[1].nodes[0].id: node \"i-1\" appears twice",
            ),
            (
                vec![pool("web", vec![node("../etc")])],
                "pools[0].nodes[0].id: \"../etc\" is not a valid node id",
            ),
        ];
        for (pools, expected) in cases {
            let e = observations(&asked, wire::DescribeResponse { pools }).unwrap_err();
            assert!(e.0.starts_with(expected), "{e}");
        }
        let mut big = pool("web", vec![]);
        big.size = MAX_POOL_SIZE + 1;
        let e = observations(&asked, wire::DescribeResponse { pools: vec![big] }).unwrap_err();
        assert!(e.0.contains("above the limit"), "{e}");
    }

    #[test]
    fn node_ids_that_could_escape_a_path_are_refused() {
        for bad in ["", ".", "..", "a/b", "a b", "a\u{7f}", &"x".repeat(254)] {
            assert!(!valid_node_id(bad), "{bad:?}");
        }
        for good in ["i-0abc", "ocid1.instance.oc1..aaaa", "vm:7", "node_1"] {
            assert!(valid_node_id(good), "{good:?}");
        }
    }
}

/// The client against hostile and faulty answers: a plug-in is untrusted
/// input. These servers are adversaries written for each case, not stand-ins
/// for a plug-in (the integration tests run the reference plug-in).
#[cfg(test)]
mod hostile {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    use axum::Router;
    use axum::http::{HeaderMap, StatusCode};
    use axum::response::{IntoResponse, Response};
    use axum::routing::{get, post};

    use super::*;

    const CAPS: &str = r#"{"protocol":"poolwright.io/plugin/v1","name":"hostile","describeBatchSize":2,"templateFields":["image"]}"#;

    async fn serve(app: Router) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        url
    }

    fn client(url: &str) -> Http {
        let mut s = HttpProvider::at(url);
        s.max_attempts = Some(crate::spec::located::At::bare(3));
        Http::new("hostile", &s, Path::new(".")).unwrap()
    }

    fn caps() -> Router {
        Router::new().route("/v1/capabilities", get(|| async { json(CAPS) }))
    }

    fn json(body: &'static str) -> Response {
        ([("content-type", "application/json")], body).into_response()
    }

    fn problem(status: StatusCode, kind: &'static str, detail: &'static str) -> Response {
        (
            status,
            [("content-type", "application/problem+json")],
            format!(
                r#"{{"type":"{kind}","title":"t","status":{},"detail":"{detail}"}}"#,
                status.as_u16()
            ),
        )
            .into_response()
    }

    async fn describe_error(body: &'static str) -> ProviderError {
        let app = caps().route("/v1/describe", post(move || async move { json(body) }));
        let url = serve(app).await;
        client(&url)
            .describe_pools(&["web".into()])
            .await
            .unwrap_err()
    }

    #[tokio::test]
    async fn malformed_or_mistyped_answers_name_the_call_and_the_field() {
        let e = describe_error("{not json").await;
        assert_eq!(e.kind, ErrorKind::Rejected);
        assert!(e.to_string().starts_with("Describe(1 pools) failed: rejected: POST /v1/describe: the plug-in's answer is invalid"), "{e}");
        let e = describe_error(r#"{"pools":[{"name":"web","size":"3","template":{},"nodes":[]}]}"#)
            .await;
        assert!(e.message.contains("at pools[0].size"), "{e}");
        let e = describe_error(r#"{"pools":[{"name":"web","size":1,"template":{},"nodes":[{"id":"n1","templateHash":"0000000000000001","state":"booting","launchedAt":"2026-12-01T00:00:00Z"}]}]}"#).await;
        assert!(e.message.contains("at pools[0].nodes[0].state"), "{e}");
        assert!(e.message.contains("booting"), "{e}");
        let e =
            describe_error(r#"{"pools":[{"name":"db","size":1,"template":{},"nodes":[]}]}"#).await;
        assert!(
            e.message
                .contains("pools[0].name: \"db\" was not asked for"),
            "{e}"
        );
        let e = describe_error(r#"{"pools":[{"name":"web","size":1,"template":{},"nodes":[{"id":"n1","templateHash":"0000000000000001","state":"healthy","launchedAt":"2026-12-01T00:00:00Z"},{"id":"n1","templateHash":"0000000000000001","state":"healthy","launchedAt":"2026-12-01T00:00:00Z"}]}]}"#).await;
        assert!(e.message.contains("node \"n1\" appears twice"), "{e}");
    }

    /// A describe that never answers: with `timeout: 1s` and 5 attempts the
    /// retries alone would take 5 s and more; `operationTimeout` ends it.
    #[tokio::test]
    async fn a_hanging_plugin_fails_the_call_at_the_operation_timeout() {
        let app = caps().route(
            "/v1/describe",
            post(|| async {
                tokio::time::sleep(std::time::Duration::from_secs(3600)).await;
                json("{}")
            }),
        );
        let url = serve(app).await;
        let mut s = HttpProvider::at(&url);
        s.timeout = crate::spec::located::At::bare(crate::spec::values::Duration::secs(1));
        s.max_attempts = Some(crate::spec::located::At::bare(5));
        s.operation_timeout = Some(crate::spec::located::At::bare(
            crate::spec::values::Duration(std::time::Duration::from_millis(1500)),
        ));
        let http = Http::new("hanging", &s, Path::new(".")).unwrap();
        let started = std::time::Instant::now();
        let e = http.describe_pools(&["web".into()]).await.unwrap_err();
        let took = started.elapsed();
        assert!(
            took >= std::time::Duration::from_millis(1400)
                && took < std::time::Duration::from_secs(3),
            "took {took:?}: {e}"
        );
        assert!(e.message.contains("operationTimeout"), "{e}");
        assert_eq!(e.kind, ErrorKind::Unavailable);
    }

    #[tokio::test]
    async fn an_answer_over_the_size_limit_is_refused_unread() {
        let app = caps().route(
            "/v1/describe",
            post(|| async {
                (
                    [("content-type", "application/json")],
                    vec![b' '; MAX_BODY + 1],
                )
            }),
        );
        let url = serve(app).await;
        let e = client(&url)
            .describe_pools(&["web".into()])
            .await
            .unwrap_err();
        assert!(
            e.message
                .contains("larger than the limit of 16777216 bytes"),
            "{e}"
        );
    }
    const MAX_BODY: usize = transport::MAX_BODY_BYTES;

    #[tokio::test]
    async fn problems_map_to_kinds_and_messages_quote_the_plugin() {
        let app = caps()
            .route(
                "/v1/pools/web/size",
                axum::routing::put(|| async {
                    problem(
                        StatusCode::FORBIDDEN,
                        "urn:poolwright:problem:quota-exceeded",
                        "only 3 vCPUs left",
                    )
                }),
            )
            .route(
                "/v1/pools/gone/size",
                axum::routing::put(|| async {
                    problem(StatusCode::NOT_FOUND, "not-found", "no pool gone")
                }),
            );
        let url = serve(app).await;
        let http = client(&url);
        let e = http
            .set_size("web", 9, &OpKey::derive(&["k"]))
            .await
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::Quota);
        assert_eq!(
            e.to_string(),
            "SetSize(web, 9) failed: quota or capacity refused: PUT /v1/pools/web/size answered 403 quota-exceeded: only 3 vCPUs left"
        );
        let e = http
            .set_size("gone", 1, &OpKey::derive(&["k"]))
            .await
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::NotFound);
    }

    #[tokio::test]
    async fn throttling_is_retried_after_retry_after_with_the_same_key_and_400_is_not() {
        let seen = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let calls = Arc::new(AtomicU32::new(0));
        let app = caps()
            .route(
                "/v1/pools/web/size",
                axum::routing::put({
                    let seen = seen.clone();
                    let calls = calls.clone();
                    move |h: HeaderMap| async move {
                        seen.lock()
                            .unwrap()
                            .push(h["idempotency-key"].to_str().unwrap().to_string());
                        if calls.fetch_add(1, Ordering::SeqCst) == 0 {
                            let mut r =
                                problem(StatusCode::TOO_MANY_REQUESTS, "throttled", "slow down");
                            r.headers_mut().insert("retry-after", "1".parse().unwrap());
                            r
                        } else {
                            json("{}")
                        }
                    }
                }),
            )
            .route(
                "/v1/pools/bad/size",
                axum::routing::put({
                    let calls = calls.clone();
                    move || async move {
                        calls.fetch_add(100, Ordering::SeqCst);
                        problem(StatusCode::BAD_REQUEST, "invalid", "size must be even")
                    }
                }),
            );
        let url = serve(app).await;
        let http = client(&url);
        let started = std::time::Instant::now();
        http.set_size("web", 4, &OpKey::derive(&["size-4"]))
            .await
            .unwrap();
        assert!(
            started.elapsed() >= Duration::from_secs(1),
            "Retry-After honoured"
        );
        let keys = seen.lock().unwrap().clone();
        assert_eq!(keys.len(), 2);
        assert_eq!(keys[0], keys[1], "a retry repeats the key");
        assert_eq!(keys[0], OpKey::derive(&["size-4"]).as_str());
        let before = calls.load(Ordering::SeqCst);
        let e = http
            .set_size("bad", 2, &OpKey::derive(&["k"]))
            .await
            .unwrap_err();
        assert_eq!(
            calls.load(Ordering::SeqCst) - before,
            100,
            "a 400 is sent once"
        );
        assert_eq!(e.kind, ErrorKind::Rejected);
        assert!(
            e.message
                .ends_with("answered 400 invalid: size must be even"),
            "{e}"
        );
    }

    #[tokio::test]
    async fn a_lost_answer_is_checked_against_a_fresh_describe() {
        let app = caps()
            .route(
                "/v1/pools/web/size",
                axum::routing::put(|| async {
                    problem(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "unavailable",
                        "the answer was lost",
                    )
                }),
            )
            .route(
                "/v1/describe",
                post(|| async {
                    json(r#"{"pools":[{"name":"web","size":4,"template":{},"nodes":[]}]}"#)
                }),
            );
        let url = serve(app).await;
        let http = client(&url);
        // The pool holds 4: the change was made, whatever the answer said.
        http.set_size("web", 4, &OpKey::derive(&["k"]))
            .await
            .unwrap();
        // It does not hold 5: the failure stands, and is not retried again by the executor.
        let e = http
            .set_size("web", 5, &OpKey::derive(&["k2"]))
            .await
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::Unavailable);
        assert!(e.retried && !e.should_retry(), "{e:?}");
    }

    #[tokio::test]
    async fn the_bearer_token_comes_from_its_file_and_follows_rotation() {
        let dir = tempfile::tempdir().unwrap();
        let token = dir.path().join("token");
        std::fs::write(&token, "one\n").unwrap();
        let seen = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let app = Router::new().route(
            "/v1/capabilities",
            get({
                let seen = seen.clone();
                move |h: HeaderMap| async move {
                    seen.lock()
                        .unwrap()
                        .push(h["authorization"].to_str().unwrap().to_string());
                    json(CAPS)
                }
            }),
        );
        let url = serve(app).await;
        let mut s = HttpProvider::at(&url);
        s.token_file = Some(crate::spec::located::At::bare(token.clone()));
        s.headers.value.insert("X-Team".into(), "platform".into());
        let http = Http::new("p", &s, Path::new("/")).unwrap();
        http.plugin_capabilities().await.unwrap();
        std::fs::write(&token, "two-rotated\n").unwrap();
        *http.caps.write().unwrap() = None;
        http.plugin_capabilities().await.unwrap();
        assert_eq!(*seen.lock().unwrap(), ["Bearer one", "Bearer two-rotated"]);
    }

    #[tokio::test]
    async fn template_fields_the_plugin_does_not_act_on_are_refused_before_sending() {
        let url = serve(caps()).await;
        let t = NodeTemplate {
            image: Some("img".into()),
            instance_type: Some("m7i.large".into()),
            ..NodeTemplate::default()
        };
        let e = client(&url)
            .set_template("web", &t, &OpKey::derive(&["k"]))
            .await
            .unwrap_err();
        assert_eq!(
            e.message,
            "plug-in hostile does not act on template field(s) instanceType; it acts on: image. Nothing was sent"
        );
    }
}
