//! The Kubernetes node side of a pool with a `clusterRef`: finding a provider
//! node's Node object, cordoning, draining through the Eviction API
//! (PDB-aware), and Ready as the health gate. kube-rs with rustls on
//! aws-lc-rs, the same TLS stack the AWS SDK uses. (The daemon's leases and
//! its state in ConfigMaps are `ha`'s.)

pub mod attach;
pub mod budgets;
pub mod drain;
pub mod nodes;

use std::path::Path;

use anyhow::Context as _;
use kube::config::{KubeConfigOptions, Kubeconfig};

use crate::spec::types::{ClusterSpec, NodeMatch, NodeMatchBy};

pub use drain::KubeDrainer;

/// Connecting to a cluster failed (its document, its kubeconfig, its context).
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("cluster {0:?} is not in the desired state")]
    Unknown(String),
    #[error("cluster {cluster:?}: {source:#}")]
    Config {
        cluster: String,
        #[source]
        source: anyhow::Error,
    },
}

/// A connection to one cluster.
#[derive(Clone)]
pub struct Cluster {
    pub name: String,
    /// Reads, cordons, deletions: kube's default retry on 429/503/504 is fine.
    pub client: kube::Client,
    /// Evictions: no built-in retry, because a 429 from a PodDisruptionBudget is
    /// an answer the drain loop waits on, with its own backoff and deadline.
    pub evictions: kube::Client,
    pub node_match: NodeMatch,
}

impl Cluster {
    /// Connect as the `Cluster` document says: a kubeconfig (relative to the
    /// document's directory; a leading `~` is the home directory) and context, the pod's service account, or
    /// `$KUBECONFIG` / `~/.kube/config`.
    pub async fn connect(name: &str, spec: &ClusterSpec, base: &Path) -> anyhow::Result<Cluster> {
        let config = if spec.in_cluster.value {
            kube::Config::incluster().context("in-cluster service account")?
        } else {
            let options = KubeConfigOptions {
                context: spec.context.clone(),
                ..KubeConfigOptions::default()
            };
            let kubeconfig = match &spec.kubeconfig {
                Some(p) => {
                    let path = base.join(crate::files::expand_home(&p.value));
                    read_kubeconfig(&path)
                        .with_context(|| format!("reading kubeconfig {}", path.display()))?
                }
                None => {
                    let config = Kubeconfig::read()
                        .map_err(|e| unquoted("$KUBECONFIG or ~/.kube/config", e))
                        .context("reading $KUBECONFIG or ~/.kube/config")?;
                    remember_credentials(&config);
                    config
                }
            };
            kube::Config::from_custom_kubeconfig(kubeconfig, &options)
                .await
                .context("kubeconfig")?
        };
        let client = kube::Client::try_from(config.clone()).context("kubernetes client")?;
        let mut no_retry = config;
        no_retry.default_retry = false;
        let evictions = kube::Client::try_from(no_retry).context("kubernetes client")?;
        Ok(Cluster {
            name: name.to_string(),
            client,
            evictions,
            node_match: spec.node_match.clone(),
        })
    }

    /// How a provider node id is found among Node objects.
    fn matcher(&self) -> nodes::Matcher {
        match self.node_match.by {
            NodeMatchBy::ProviderId => nodes::Matcher::ProviderId,
            NodeMatchBy::Label => nodes::Matcher::Label(
                self.node_match
                    .label
                    .clone()
                    .unwrap_or_else(|| "poolwright.io/node-id".into()),
            ),
        }
    }
}

/// The largest kubeconfig (or file it names) read.
const KUBECONFIG_LIMIT: u64 = 4 * 1024 * 1024;

/// Read a kubeconfig a user named: it and every file it names (certificate
/// authority, client certificate and key, token file) must be regular files
/// of bounded size, so a FIFO or a device cannot block `plan` forever.
pub fn read_kubeconfig(path: &Path) -> anyhow::Result<Kubeconfig> {
    crate::files::read_regular(path, KUBECONFIG_LIMIT)
        .map_err(|e| anyhow::anyhow!("{} {e}", path.display()))?;
    let config =
        Kubeconfig::read_from(path).map_err(|e| unquoted(&path.display().to_string(), e))?;
    remember_credentials(&config);
    let named = config
        .clusters
        .iter()
        .filter_map(|c| c.cluster.as_ref()?.certificate_authority.clone())
        .chain(config.auth_infos.iter().flat_map(|a| {
            a.auth_info
                .as_ref()
                .map(|i| {
                    [&i.client_certificate, &i.client_key, &i.token_file]
                        .into_iter()
                        .flatten()
                        .cloned()
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default()
        }));
    for file in named {
        crate::files::read_regular(Path::new(&file), KUBECONFIG_LIMIT)
            .map_err(|e| anyhow::anyhow!("{file} (named in the kubeconfig) {e}"))?;
    }
    // The token files it names are secrets too (kube reads them again).
    for file in config
        .auth_infos
        .iter()
        .filter_map(|a| a.auth_info.as_ref()?.token_file.as_deref())
    {
        if let Ok(text) = crate::files::read_regular_text(Path::new(file), KUBECONFIG_LIMIT) {
            crate::secrets::remember(&text);
        }
    }
    Ok(config)
}

/// Remember a kubeconfig's secrets (tokens, passwords, client keys), so
/// that nothing served ever carries them.
fn remember_credentials(config: &Kubeconfig) {
    use secrecy::ExposeSecret;
    for info in config
        .auth_infos
        .iter()
        .filter_map(|a| a.auth_info.as_ref())
    {
        for secret in [&info.token, &info.password, &info.client_key_data]
            .into_iter()
            .flatten()
        {
            crate::secrets::remember(secret.expose_secret());
        }
    }
}

/// A kubeconfig that could not be read, said without quoting it: the
/// parser's own message shows the lines around the error, and a kubeconfig's
/// lines hold its credentials. The file, the line and column and the kind
/// of problem are enough to find it.
fn unquoted(file: &str, e: kube::config::KubeconfigError) -> anyhow::Error {
    match e {
        kube::config::KubeconfigError::Parse(parse) => {
            let at = parse
                .location()
                .map(|l| format!(":{}:{}", l.line(), l.column()))
                .unwrap_or_default();
            anyhow::anyhow!(
                "{file}{at}: not a valid kubeconfig: {} (the file's content is not shown: it holds credentials)",
                problem_kind(&parse.without_snippet().to_string())
            )
        }
        other => anyhow::anyhow!(crate::secrets::redact(&other.to_string()).into_owned()),
    }
}

/// The kind of a parse problem, from the parser's message with every quoted
/// part and position left out.
fn problem_kind(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut quote: Option<char> = None;
    for c in message.chars() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if matches!(c, '"' | '`' | '\'') => {
                quote = Some(c);
                out.push('…');
            }
            None => out.push(c),
        }
    }
    let out = out.split(" at line ").next().unwrap_or(&out);
    let out = out.trim_start_matches("error: ");
    let out = match out.split_once(": ") {
        // "line 9 column 1: while parsing..." leads with the place.
        Some((place, rest)) if place.starts_with("line ") => rest,
        _ => out,
    };
    crate::secrets::redact(out.trim()).into_owned()
}
