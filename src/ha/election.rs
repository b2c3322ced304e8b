//! The election loops: one leader lease renewed every retry period, or
//! (`--shards S`) a lease per shard, member leases, and the takes and
//! give-backs that balance the shards between the live daemons. Each loop
//! publishes [`Leading`] (what this daemon may act on) and reports its role
//! and moves to an [`Observer`] (the daemon's status and metrics).

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use kube::config::KubeConfigOptions;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::lease::{Elector, IdentityGuard, LeaseSettings, Role};
use super::members::Membership;
use super::shards::{self, Moves, Shards, View};
use super::status::{HaStatus, ShardHolder, ShardsStatus};
use super::store::ClusterStore;
use crate::clock::Clock;
use crate::sync::Stop;

/// Where the election reports: its role (shown in status) and its moves
/// (counted in metrics).
pub trait Observer: Send + Sync + 'static {
    fn status(&self, status: HaStatus);
    /// This daemon now holds `held` shards (`--shards` only).
    fn holding(&self, held: usize);
    /// It took a shard, `after` its last holder's last renewal.
    fn took_shard(&self, after: jiff::SignedDuration);
    /// It gave a shard back.
    fn released_shard(&self);
}

#[derive(Clone, Debug)]
pub struct HaOptions {
    /// Kubeconfig of the cluster holding the Lease (default: in-cluster, then
    /// `$KUBECONFIG` / `~/.kube/config`).
    pub kubeconfig: Option<PathBuf>,
    pub context: Option<String>,
    /// Default: the kubeconfig context's namespace, or the pod's.
    pub namespace: Option<String>,
    pub lease: String,
    /// Default: `HOSTNAME-PID-RANDOM`, unique per process.
    pub identity: Option<String>,
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
    /// `--shards S`: S shard leases instead of one leader lease.
    pub shards: Option<u32>,
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
        if let Some(s) = self.shards {
            anyhow::ensure!(
                (1..=shards::MAX_SHARDS).contains(&s),
                "--shards {s}: use 1 to {}",
                shards::MAX_SHARDS
            );
        }
        Ok(())
    }
}

/// `HOSTNAME-PID-RANDOM`: the host and process for people to read, and a
/// random part because neither is unique on its own (pods on the host
/// network share the node's hostname, and each may be PID 1 of its container).
fn default_identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "poolwright".into());
    let random: String = std::fs::read_to_string("/proc/sys/kernel/random/uuid")
        .unwrap_or_else(|_| {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos());
            format!(
                "{:x}",
                nanos ^ u128::from(std::process::id()).rotate_left(64)
            )
        })
        .chars()
        .filter(char::is_ascii_hexdigit)
        .take(6)
        .collect();
    format!("{host}-{}-{random}", std::process::id())
}

/// What `--ha kubernetes` runs on: the election and the shared store.
pub struct Ha {
    pub election: Election,
    pub store: Arc<ClusterStore>,
    pub identity: String,
    /// `NAMESPACE/NAME` of the leader lease, or the shard leases' base name.
    pub lease: String,
}

pub enum Election {
    /// One leader lease: its holder acts on every pool. The member leases
    /// say whether sharded daemons run beside it (then it does not lead).
    Leader(Elector, Membership),
    /// One lease per shard; this daemon acts on the pools of those it holds.
    Sharded(ShardElection),
}

pub struct ShardElection {
    electors: Vec<Elector>,
    /// The single leader lease, only read: held by a daemon without
    /// `--shards`, it acts on every pool.
    single: Elector,
    membership: Membership,
    shards: Arc<Shards>,
    identity: String,
    retry_period: Duration,
    clock: Arc<dyn Clock>,
}

pub async fn connect(opts: &HaOptions, clock: Arc<dyn Clock>) -> anyhow::Result<Ha> {
    opts.check()?;
    let kube_options = KubeConfigOptions {
        context: opts.context.clone(),
        ..KubeConfigOptions::default()
    };
    let mut config = match &opts.kubeconfig {
        Some(path) => {
            let kubeconfig = crate::kube::read_kubeconfig(path)
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
    // Nor does the client resend a call by itself: a resent lease renewal that
    // had landed would come back as a conflict with this daemon's own write
    // (and look like another process under its identity), and a server's
    // Retry-After (up to 1000 s) would hold a round past the deadline. Every
    // caller here (the election rounds, the fenced journal writes) tries
    // again on its own beat.
    config.default_retry = false;
    let bound = opts.renew_deadline / 2;
    config.connect_timeout = Some(bound);
    config.read_timeout = Some(bound);
    config.write_timeout = Some(bound);
    let namespace = opts
        .namespace
        .clone()
        .unwrap_or_else(|| config.default_namespace.clone());
    let client = kube::Client::try_from(config).context("--ha: kubernetes client")?;
    let identity = opts.identity.clone().unwrap_or_else(default_identity);
    let guard = IdentityGuard::default();
    let settings = |name: String| LeaseSettings {
        namespace: namespace.clone(),
        name,
        identity: identity.clone(),
        guard: guard.clone(),
        duration: opts.lease_duration,
        renew_deadline: opts.renew_deadline,
        retry_period: opts.retry_period,
    };
    let lease = format!("{namespace}/{}", opts.lease);
    match opts.shards {
        None => {
            let elector = Elector::new(client.clone(), settings(opts.lease.clone()), clock.clone());
            let members = Membership::new(
                client.clone(),
                &namespace,
                &opts.lease,
                &identity,
                opts.lease_duration,
                0,
                clock,
            );
            let shards = Arc::new(Shards::single(elector.fence.clone()));
            let store = Arc::new(ClusterStore::new(client, &namespace, &opts.lease, shards));
            Ok(Ha {
                election: Election::Leader(elector, members),
                store,
                identity,
                lease,
            })
        }
        Some(count) => {
            let (client_for_single, clock_for_single) = (client.clone(), clock.clone());
            let clock_for_rounds = clock.clone();
            let shards = Arc::new(Shards::sharded(count));
            let electors = (0..shards.count())
                .map(|i| {
                    Elector::with_fence(
                        client.clone(),
                        settings(shards::shard_lease(&opts.lease, i)),
                        clock.clone(),
                        shards.fence(i).clone(),
                    )
                })
                .collect();
            let membership = Membership::new(
                client.clone(),
                &namespace,
                &opts.lease,
                &identity,
                opts.lease_duration,
                shards.count(),
                clock,
            );
            let store = Arc::new(ClusterStore::new(
                client,
                &namespace,
                &opts.lease,
                shards.clone(),
            ));
            Ok(Ha {
                election: Election::Sharded(ShardElection {
                    electors,
                    single: Elector::new(
                        client_for_single,
                        settings(opts.lease.clone()),
                        clock_for_single,
                    ),
                    membership,
                    shards,
                    identity: identity.clone(),
                    retry_period: opts.retry_period,
                    clock: clock_for_rounds,
                }),
                store,
                identity,
                lease,
            })
        }
    }
}

/// Which pools this daemon may act on, and a sentence for those it may not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leading {
    /// The shards it holds (without sharding, shard 0 while it leads).
    pub held: BTreeSet<u32>,
    /// Held shards being handed over: their workers stop at a safe point.
    pub releasing: BTreeSet<u32>,
    /// Each shard's holder as last read.
    pub holders: Vec<Option<String>>,
    /// Why it does not act (the leader lease is another's, or none is held).
    pub note: String,
}

impl Leading {
    pub fn waiting() -> Leading {
        Leading {
            held: BTreeSet::new(),
            releasing: BTreeSet::new(),
            holders: Vec::new(),
            note: "waiting for the leader lease".into(),
        }
    }

    pub fn leader(&self) -> bool {
        !self.held.is_empty()
    }
}

/// Run the election every retry period until `stop`: the board shows the
/// role, `leading` changes when this daemon takes or loses a lease (or a
/// holder changes). Returns the election, so the caller can release its
/// leases once nothing is in flight.
pub fn spawn(
    election: Election,
    observer: Arc<dyn Observer>,
    leading: watch::Sender<Leading>,
    stop: Stop,
) -> JoinHandle<Election> {
    match election {
        Election::Leader(e, m) => {
            let task = spawn_elector(e, m, observer, leading, stop);
            tokio::spawn(async move {
                let (e, m) = task.await.expect("the election task does not panic");
                Election::Leader(e, m)
            })
        }
        Election::Sharded(s) => {
            tokio::spawn(
                async move { Election::Sharded(run_shards(s, observer, leading, stop).await) },
            )
        }
    }
}

impl Election {
    /// Give every held lease back (on a clean stop, with nothing in flight).
    pub async fn release(&mut self) {
        match self {
            Election::Leader(e, _) => e.release().await,
            Election::Sharded(s) => {
                futures_util::future::join_all(s.electors.iter_mut().map(|e| e.release())).await;
                // A daemon stopped as another's twin shares its member lease
                // with that daemon, which is still running: it stays.
                if s.single.settings.guard.conflict().is_none() {
                    s.membership.leave().await;
                }
            }
        }
    }
}

fn spawn_elector(
    mut elector: Elector,
    mut members: Membership,
    observer: Arc<dyn Observer>,
    leading: watch::Sender<Leading>,
    stop: Stop,
) -> JoinHandle<(Elector, Membership)> {
    tokio::spawn(async move {
        let lease = format!("{}/{}", elector.settings.namespace, elector.settings.name);
        // Nothing is taken before the member leases were listed once.
        let mut sharded: Option<String> = Some("not listed yet".into());
        loop {
            // Sharded daemons on the same lease name act on their shards'
            // pools: while any is alive (as last listed) this one does not
            // take the lease (it keeps it if it already leads: they then take
            // no shard). Listed beside the round, so a slow list cannot make
            // the renewal late.
            let (listed, role) = futures_util::future::join(
                members.others(),
                elector.round_wanting(sharded.is_none()),
            )
            .await;
            let role = role.clone();
            sharded = match listed {
                Ok(o) if !o.is_empty() => Some(
                    o.into_iter()
                        .map(|m| m.identity)
                        .collect::<Vec<_>>()
                        .join(", "),
                ),
                _ => None,
            };
            let holder = role.holder(&elector.settings.identity).map(str::to_string);
            let described = match (&sharded, &role) {
                (Some(who), Role::Free) => format!(
                    "not taking the lease: daemons running with --shards ({who}) act on the pools"
                ),
                _ => role.describe(),
            };
            if let (Some(who), true) = (&sharded, role.is_leader()) {
                tracing::warn!(
                    "daemons running with --shards ({who}) share this lease name: they take no shard while this daemon leads; run every daemon with the same --shards"
                );
            }
            observer.status(HaStatus {
                lease: lease.clone(),
                identity: elector.settings.identity.clone(),
                leader: role.is_leader(),
                holder: holder.clone(),
                role: described.clone(),
                shards: None,
            });
            let now = Leading {
                held: if role.is_leader() {
                    BTreeSet::from([0])
                } else {
                    BTreeSet::new()
                },
                releasing: BTreeSet::new(),
                holders: vec![holder],
                note: match &role {
                    Role::Standby { holder, .. } => format!("standby: {holder} holds the lease"),
                    _ => described,
                },
            };
            send_if_changed(&leading, now);
            tokio::select! {
                _ = tokio::time::sleep(elector.settings.retry_period) => {}
                _ = stop.requested() => break,
            }
        }
        (elector, members)
    })
}

fn send_if_changed(leading: &watch::Sender<Leading>, now: Leading) {
    leading.send_if_modified(|cur| {
        let changed = *cur != now;
        if changed {
            *cur = now;
        }
        changed
    });
}

/// The sharded election's loop: renew membership, read the others, take or
/// give back shards, renew what is held.
async fn run_shards(
    mut s: ShardElection,
    observer: Arc<dyn Observer>,
    leading: watch::Sender<Leading>,
    stop: Stop,
) -> ShardElection {
    let count = s.shards.count();
    let mut members = BTreeSet::from([s.identity.clone()]);
    // Until the members have been listed once, this daemon cannot know
    // whether another runs with a different shard count: it takes nothing.
    let mut error: Option<String> = Some("the member leases have not been listed yet".into());
    // Rounds on a fixed beat (not a sleep after each round's work), so an
    // expiry due at a round is seen at that round, not a round's work later.
    let mut beat = tokio::time::interval(s.retry_period);
    beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        // A lease that expires before the next beat is looked at when it
        // expires: a take-over then waits for the lease duration after this
        // daemon saw the last renewal, not up to a beat more.
        let early = s.next_expiry().filter(|d| *d < s.retry_period);
        tokio::select! {
            _ = beat.tick() => {}
            _ = tokio::time::sleep(early.unwrap_or_default() + Duration::from_millis(5)), if early.is_some() => {}
            _ = stop.requested() => break,
        }
        // First every renewal at once, with the membership and the check of
        // the single leader lease beside them (no call waits on another);
        // then, knowing who is alive and who holds what, the takes.
        let ShardElection {
            electors,
            membership,
            single,
            ..
        } = &mut s;
        let guard = single.settings.guard.clone();
        let (listed, _, single_role) = futures_util::future::join3(
            async {
                // Stopped as another's twin, it no longer renews the member
                // lease they share: when the other stops, it expires, and the
                // shards of that identity go to the daemons left.
                if guard.conflict().is_none()
                    && let Err(e) = membership.renew().await
                {
                    tracing::warn!("--shards: renewing this daemon's membership: {e}");
                }
                membership.live().await
            },
            futures_util::future::join_all(electors.iter_mut().map(|e| e.round_wanting(false))),
            single.round_wanting(false),
        )
        .await;
        let single_role = single_role.clone();
        if single_role.is_leader() {
            // Left from a run of this identity without --shards: not ours now.
            s.single.release().await;
        }
        match listed {
            Ok(live) => {
                // Daemons that disagree on the shard count would put a pool in
                // two shards: none of them takes a shard until they agree.
                error = live
                    .iter()
                    .find(|m| m.shards.is_some_and(|c| c != count))
                    .map(|m| {
                        format!(
                            "daemon {} runs with --shards {}, this one with {count}: taking no shard until every daemon runs with the same count",
                            m.identity,
                            m.shards.unwrap_or_default()
                        )
                    });
                members = live.into_iter().map(|m| m.identity).collect();
            }
            // Not knowing who is alive, keep the last view: the leases
            // themselves still keep two daemons off one shard.
            Err(e) => tracing::warn!("--shards: {e}"),
        }
        // A daemon running without --shards acts on every pool while it
        // holds the single leader lease: no shard is taken beside it.
        if let Role::Standby { holder, .. } = &single_role {
            error = Some(format!(
                "daemon {holder} holds the single leader lease {} (it runs --ha without --shards and acts on every pool): taking no shard until it stops",
                s.single.settings.name
            ));
        }
        if let Some(why) = guard.conflict() {
            // Tripped by one shard's lease in this round, while the others
            // were renewed beside it: every term ends now, before any take
            // or give-back (the leases it seemed to hold are the twin's).
            for e in s.electors.iter_mut().chain([&mut s.single]) {
                e.stand_down();
            }
            error = Some(why.to_string());
        }
        let take = s.decide(&members, error.is_some()).take;
        if !take.is_empty() {
            let which: Vec<bool> = (0..count).map(|i| take.contains(&i)).collect();
            s.rounds_of(&which).await;
        }
        for e in s.electors.iter_mut() {
            if let Some(d) = e.take_handover() {
                observer.took_shard(d);
                tracing::info!(
                    lease = %e.settings.name,
                    "--shards: took the shard, {:.1}s after its last holder's last renewal",
                    d.as_secs_f64()
                );
            }
        }
        // Give back what is above this daemon's share, each shard once no
        // step of its pools is in flight (workers stop at their next safe point).
        let release = s.decide(&members, error.is_some()).release;
        let mut now_free = vec![false; count as usize];
        for i in 0..count {
            let giving = release.contains(&i) && s.electors[i as usize].role().is_leader();
            s.shards.set_releasing(i, giving);
            now_free[i as usize] = giving && s.shards.inflight(i) == 0;
        }
        futures_util::future::join_all(
            s.electors
                .iter_mut()
                .zip(&now_free)
                .filter(|(_, f)| **f)
                .map(|(e, _)| e.release()),
        )
        .await;
        for i in (0..count).filter(|i| now_free[*i as usize]) {
            s.shards.set_releasing(i, false);
            observer.released_shard();
        }
        s.publish(observer.as_ref(), &leading, &members, error.clone());
    }
    s
}

impl ShardElection {
    /// How long until the first shard lease held by another daemon, or the
    /// first other member lease, expires (if its holder stops renewing).
    fn next_expiry(&self) -> Option<Duration> {
        let now = self.clock.now();
        self.electors
            .iter()
            .filter_map(|e| match e.role() {
                Role::Standby { expires_at, .. } => Some(*expires_at),
                _ => None,
            })
            .chain(self.membership.next_expiry())
            .filter(|at| *at > now)
            .min()
            .map(|at| Duration::try_from(at.duration_since(now)).unwrap_or_default())
    }

    fn holders(&self) -> Vec<Option<String>> {
        self.electors
            .iter()
            .map(|e| e.role().holder(&self.identity).map(str::to_string))
            .collect()
    }

    fn decide(&self, members: &BTreeSet<String>, halt: bool) -> Moves {
        let holders = self.holders();
        if halt {
            return Moves {
                take: Vec::new(),
                release: (0..self.shards.count())
                    .filter(|i| holders[*i as usize].as_deref() == Some(self.identity.as_str()))
                    .collect(),
            };
        }
        shards::rebalance(&View {
            me: &self.identity,
            members,
            holders: &holders,
        })
    }

    /// A round on the shards marked only.
    async fn rounds_of(&mut self, which: &[bool]) {
        futures_util::future::join_all(
            self.electors
                .iter_mut()
                .zip(which)
                .filter(|(_, w)| **w)
                .map(|(e, _)| e.round_wanting(true)),
        )
        .await;
    }

    fn publish(
        &self,
        observer: &dyn Observer,
        leading: &watch::Sender<Leading>,
        members: &BTreeSet<String>,
        error: Option<String>,
    ) {
        let holders = self.holders();
        let held: BTreeSet<u32> = (0..self.shards.count())
            .filter(|i| self.electors[*i as usize].role().is_leader())
            .collect();
        let releasing: BTreeSet<u32> = held
            .iter()
            .copied()
            .filter(|i| self.shards.is_releasing(*i))
            .collect();
        observer.holding(held.len());
        let base = self.electors[0]
            .settings
            .name
            .trim_end_matches("-shard-0")
            .to_string();
        let namespace = self.electors[0].settings.namespace.clone();
        let role = match (&error, held.len()) {
            (Some(e), _) => e.clone(),
            (None, 0) => format!("holds none of {} shards", self.shards.count()),
            (None, n) => format!(
                "holds {n} of {} shards: {}",
                self.shards.count(),
                held.iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        observer.status(HaStatus {
            lease: format!("{namespace}/{base}-shard-*"),
            identity: self.identity.clone(),
            leader: !held.is_empty(),
            holder: None,
            role: role.clone(),
            shards: Some(ShardsStatus {
                count: self.shards.count(),
                hash: "fnv1a64(pool name) mod count".into(),
                held: held.iter().copied().collect(),
                members: members.iter().cloned().collect(),
                shards: self
                    .electors
                    .iter()
                    .enumerate()
                    .map(|(i, e)| ShardHolder {
                        shard: i as u32,
                        lease: e.settings.name.clone(),
                        holder: holders[i].clone(),
                        releasing: releasing.contains(&(i as u32)),
                    })
                    .collect(),
                error: error.clone(),
            }),
        });
        send_if_changed(
            leading,
            Leading {
                held,
                releasing,
                holders,
                note: error.unwrap_or_else(|| "its shard is held by another daemon".into()),
            },
        );
    }
}
