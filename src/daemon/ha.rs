//! `poolwright run --ha kubernetes`: several daemons, one acting. The leader
//! holds a coordination.k8s.io Lease ([`crate::cluster::lease`]); the rollout
//! journals and the inventory live in ConfigMaps beside it
//! ([`crate::cluster::store`]), so the daemon that takes the lease over resumes
//! where the last leader stopped.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use kube::config::KubeConfigOptions;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::board::{Board, HaStatus};
use crate::clock::Clock;
use crate::cluster::lease::{Elector, LeaseSettings, Role};
use crate::cluster::store::ClusterStore;
use crate::reconcile::Stop;

#[derive(Clone, Debug)]
pub struct HaOptions {
    /// Kubeconfig of the cluster holding the Lease (default: in-cluster, then
    /// `$KUBECONFIG` / `~/.kube/config`).
    pub kubeconfig: Option<PathBuf>,
    pub context: Option<String>,
    /// Default: the kubeconfig context's namespace, or the pod's.
    pub namespace: Option<String>,
    pub lease: String,
    /// Default: `HOSTNAME-PID`, unique per process.
    pub identity: Option<String>,
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

impl HaOptions {
    /// The holder must give up before anyone may take over, and renew more
    /// than once within its deadline.
    pub fn check(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.renew_deadline < self.lease_duration,
            "--ha-renew-deadline ({:?}) must be shorter than --ha-lease-duration ({:?}): the leader must stop acting before a standby may take over",
            self.renew_deadline,
            self.lease_duration
        );
        anyhow::ensure!(
            self.retry_period * 2 <= self.renew_deadline,
            "--ha-retry-period ({:?}) must be at most half of --ha-renew-deadline ({:?}), so one failed renewal does not depose the leader",
            self.retry_period,
            self.renew_deadline
        );
        anyhow::ensure!(
            self.lease_duration >= Duration::from_secs(1),
            "--ha-lease-duration must be at least 1s"
        );
        Ok(())
    }
}

fn default_identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "poolwright".into());
    format!("{host}-{}", std::process::id())
}

/// What `--ha kubernetes` runs on: the elector and the shared store.
pub struct Ha {
    pub elector: Elector,
    pub store: Arc<ClusterStore>,
}

pub async fn connect(opts: &HaOptions, clock: Arc<dyn Clock>) -> anyhow::Result<Ha> {
    opts.check()?;
    let kube_options = KubeConfigOptions {
        context: opts.context.clone(),
        ..KubeConfigOptions::default()
    };
    let mut config = match &opts.kubeconfig {
        Some(path) => {
            let kubeconfig = crate::cluster::read_kubeconfig(path)
                .with_context(|| format!("--ha: reading kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &kube_options)
                .await
                .context("--ha: kubeconfig")?
        }
        None if opts.context.is_some() => kube::Config::from_kubeconfig(&kube_options)
            .await
            .context("--ha: $KUBECONFIG or ~/.kube/config")?,
        None => kube::Config::infer()
            .await
            .context("--ha: no in-cluster service account, $KUBECONFIG or ~/.kube/config")?,
    };
    // A hung call must not outlive the renew deadline: the election decides on time.
    let bound = opts.renew_deadline / 2;
    config.connect_timeout = Some(bound);
    config.read_timeout = Some(bound);
    config.write_timeout = Some(bound);
    let namespace = opts
        .namespace
        .clone()
        .unwrap_or_else(|| config.default_namespace.clone());
    let client = kube::Client::try_from(config).context("--ha: kubernetes client")?;
    let settings = LeaseSettings {
        namespace: namespace.clone(),
        name: opts.lease.clone(),
        identity: opts.identity.clone().unwrap_or_else(default_identity),
        duration: opts.lease_duration,
        renew_deadline: opts.renew_deadline,
        retry_period: opts.retry_period,
    };
    let elector = Elector::new(client.clone(), settings, clock);
    let store = Arc::new(ClusterStore::new(
        client,
        &namespace,
        &opts.lease,
        elector.fence.clone(),
    ));
    Ok(Ha { elector, store })
}

/// Whether this daemon leads, and a sentence for pool messages when it does not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leading {
    pub leader: bool,
    pub holder: Option<String>,
    pub note: String,
}

/// Run election rounds every retry period until `stop`; the board shows the
/// role, `leading` changes when this daemon takes or loses the lease (or the
/// holder changes). Returns the elector, so the caller can release the lease
/// once nothing is in flight.
pub fn spawn_elector(
    mut elector: Elector,
    board: Arc<Board>,
    leading: watch::Sender<Leading>,
    stop: Stop,
) -> JoinHandle<Elector> {
    tokio::spawn(async move {
        let lease = format!("{}/{}", elector.settings.namespace, elector.settings.name);
        loop {
            let role = elector.round().await.clone();
            let holder = match &role {
                Role::Leader { .. } => Some(elector.settings.identity.clone()),
                Role::Standby { holder, .. } => Some(holder.clone()),
                Role::Candidate { .. } => None,
            };
            board.update(|d| {
                d.daemon.ha = Some(HaStatus {
                    lease: lease.clone(),
                    identity: elector.settings.identity.clone(),
                    leader: role.is_leader(),
                    holder: holder.clone(),
                    role: role.describe(),
                })
            });
            let now = Leading {
                leader: role.is_leader(),
                holder,
                note: match &role {
                    Role::Standby { holder, .. } => format!("standby: {holder} holds the lease"),
                    r => r.describe(),
                },
            };
            leading.send_if_modified(|cur| {
                let changed = cur.leader != now.leader || cur.holder != now.holder;
                if changed {
                    *cur = now;
                }
                changed
            });
            tokio::select! {
                _ = tokio::time::sleep(elector.settings.retry_period) => {}
                _ = stop.requested() => break,
            }
        }
        elector
    })
}
