//! The embedded simulator (`type: sim`): the default provider, and the one the
//! demos, benchmarks and most tests run on.
//!
//! It behaves like an Auto Scaling group: it holds a size and fills it with nodes
//! on its current template. Every latency and failure of a node is drawn once, at
//! launch, from an RNG seeded by (seed, node serial), and stored as timestamps;
//! observing the fleet only compares them with the clock. So runs are
//! reproducible, observation never writes, and a virtual clock drives everything.
//!
//! The fleet persists as JSON under the state directory (`NAME.json`, replaced
//! atomically, with a log of the changes since in `NAME.log.jsonl` once the
//! fleet is large), so a `plan` after `apply` in another process sees what
//! was done.
//!
//! With `POOLWRIGHT_SIM_DIR` set, the fleet lives in that directory instead,
//! shared by every process pointing there (several daemons on one simulator,
//! as sharded daemons on one cloud account are): every call then takes the
//! fleet's file lock and reads the fleet again if another process changed it,
//! so no two processes act on different copies.

use crate::sync::Locked;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use jiff::{SignedDuration, Timestamp};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use super::{Capabilities, ErrorKind, OpKey, Provider, ProviderError, Result};
use crate::clock::Clock;
use crate::files::snapshot_log::{self, SnapshotLog};
use crate::model::{
    Bounds, InPlace, Node, NodeState, NodeTemplate, ObservedPool, PoolSpec, TemplateHash,
};
use crate::spec::types::{Distribution, SimProvider as SimSettings};

pub mod catalogue;
mod changes;

use changes::Watch;

const FORMAT: u32 = 1;

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Machines {
    format: u32,
    next_serial: u64,
    pools: BTreeMap<String, SimPool>,
    /// Mutations saved so far, and the last one: the audit line of a mutation
    /// is appended after its state is saved, so a process killed in between
    /// leaves it out, and the next open writes it (see `repair_audit`).
    #[serde(default)]
    audited: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    last_call: Option<(Timestamp, String)>,
    /// Where its snapshot and change log stand.
    #[serde(skip)]
    persisted: SnapshotLog,
    /// The files as this process last read or wrote them (shared fleets).
    #[serde(skip)]
    stamp: Option<Stamp>,
}

/// What changes when another process saves the fleet: the snapshot is
/// replaced (a new file) or the log grows.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Stamp {
    snapshot: (u64, i64, i64, u64),
    log: Option<(u64, u64)>,
}

fn stamp_of(path: &Path) -> Option<Stamp> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::symlink_metadata(path).ok()?;
    let log = std::fs::symlink_metadata(snapshot_log::log_path(path))
        .ok()
        .map(|l| (l.ino(), l.len()));
    Some(Stamp {
        snapshot: (m.ino(), m.mtime(), m.mtime_nsec(), m.len()),
        log,
    })
}

/// Read the fleet from its snapshot and log (the caller holds the lock).
fn read_machines(p: &Path) -> anyhow::Result<Machines> {
    let read = snapshot_log::read(p, 256 * 1024 * 1024, |line| {
        serde_json::from_slice::<Change<serde::de::IgnoredAny>>(line).is_ok()
    })
    .map_err(|e| anyhow::anyhow!("simulator state: {e}"))?;
    let bytes = read
        .snapshot
        .ok_or_else(|| anyhow::anyhow!("reading simulator state {}: it is gone", p.display()))?;
    let mut fleet: Machines = serde_json::from_slice(&bytes)
        .map_err(|e| anyhow::anyhow!("simulator state {} is corrupt: {e}", p.display()))?;
    for record in &read.records {
        let change: Change<SimPool> = serde_json::from_slice(record).map_err(|e| {
            anyhow::anyhow!("simulator change log of {} is corrupt: {e}", p.display())
        })?;
        fleet.apply(change);
    }
    fleet.persisted = read.state;
    anyhow::ensure!(
        fleet.format == FORMAT,
        "simulator state {} has format {}, this release reads {FORMAT}",
        p.display(),
        fleet.format
    );
    Ok(fleet)
}

/// One mutation in the change log: the pool it changed, whole (`None`:
/// deleted), and the fleet's counters after it.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Change<P> {
    pool: String,
    state: Option<P>,
    next_serial: u64,
    audited: u64,
    last_call: Option<(Timestamp, String)>,
}

impl Machines {
    fn apply(&mut self, c: Change<SimPool>) {
        match c.state {
            Some(p) => {
                self.pools.insert(c.pool, p);
            }
            None => {
                self.pools.remove(&c.pool);
            }
        }
        self.next_serial = c.next_serial;
        self.audited = c.audited;
        self.last_call = c.last_call;
    }
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SimPool {
    size: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    autoscaling: Option<Bounds>,
    template: NodeTemplate,
    template_hash: TemplateHash,
    #[serde(default)]
    in_place: InPlace,
    /// In launch order (the order of the serials in their ids).
    nodes: Vec<SimNode>,
    /// What changed since a reader last asked (see `changes`); kept in
    /// memory only: a pool read from the file starts without one.
    #[serde(skip)]
    watch: Option<Watch>,
    /// How many nodes are being terminated and the first instant one of
    /// them goes, when known (not for a pool read from the file): until
    /// then no node need be dropped, and the live ones are counted without
    /// a pass over the pool.
    #[serde(skip)]
    going: Option<(u32, Option<Timestamp>)>,
}

impl SimPool {
    /// Terminate the node at `i` (see [`Sim::terminate`]), keeping count.
    fn terminate(&mut self, sim: &Sim, i: usize, now: Timestamp) {
        let Some(n) = self.nodes.get_mut(i) else {
            return;
        };
        if n.gone_at.is_some() {
            return;
        }
        sim.terminate(n, now);
        if let (Some((count, first)), Some(g)) = (&mut self.going, n.gone_at) {
            *count += 1;
            *first = Some(first.map_or(g, |f| f.min(g)));
        }
        self.touch(i);
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SimNode {
    id: std::sync::Arc<str>,
    serial: u64,
    template: TemplateHash,
    launched_at: Timestamp,
    /// When it becomes healthy; `None` for a node drawn to never become healthy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    healthy_at: Option<Timestamp>,
    /// When the machine is running (after which a never-healthy node is Unhealthy).
    running_at: Timestamp,
    /// Set when termination was requested: the node disappears at this instant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    gone_at: Option<Timestamp>,
    #[serde(default)]
    cordoned: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    zone: Option<Arc<str>>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    labels: BTreeMap<String, String>,
}

impl SimNode {
    fn is_live(&self) -> bool {
        self.gone_at.is_none()
    }

    /// Its state and `healthy_since` as observed at `now`; `None` once gone.
    fn observed_at(&self, now: Timestamp) -> Option<(NodeState, Option<Timestamp>)> {
        let state = match self.gone_at {
            Some(g) if now >= g => return None,
            Some(_) => NodeState::Terminating,
            None => match self.healthy_at {
                Some(h) if now >= h => NodeState::Healthy,
                None if now >= self.running_at => NodeState::Unhealthy,
                _ => NodeState::Pending,
            },
        };
        let healthy_since = self
            .healthy_at
            .filter(|h| now >= *h && state == NodeState::Healthy);
        Some((state, healthy_since))
    }

    /// The first instant after `now` at which it changes as observed.
    fn changes_after(&self, now: Timestamp) -> Option<Timestamp> {
        // Becoming running shows only in a node drawn never to become
        // healthy (it turns Unhealthy); the others stay Pending until healthy.
        [
            self.healthy_at.is_none().then_some(self.running_at),
            self.healthy_at,
            self.gone_at,
        ]
        .into_iter()
        .flatten()
        .filter(|t| *t > now)
        .min()
    }

    fn view(&self, now: Timestamp) -> Option<Node> {
        let (state, healthy_since) = self.observed_at(now)?;
        Some(Node {
            id: self.id.clone(),
            template: self.template,
            state,
            launched_at: self.launched_at,
            healthy_since,
            cordoned: self.cordoned,
            provider_id: None,
            zone: self.zone.clone(),
            labels: self.labels.clone(),
        })
    }
}

/// Latencies of one node, drawn at launch.
struct Draw {
    boot: SignedDuration,
    health: SignedDuration,
    never_healthy: bool,
    terminate: SignedDuration,
    drain: SignedDuration,
    drain_blocked: bool,
}

pub struct Sim {
    name: String,
    settings: SimSettings,
    speed: f64,
    path: Option<PathBuf>,
    /// The fleet is shared with other processes (`POOLWRIGHT_SIM_DIR`).
    shared: bool,
    clock: Arc<dyn Clock>,
    fleet: Mutex<Machines>,
    calls: AtomicU64,
    /// The last token handed out by `changes`.
    tokens: AtomicU64,
    /// Drain profiles drawn so far, by serial (a draw is the same every time).
    drains: Mutex<rustc_hash::FxHashMap<u64, (SignedDuration, bool)>>,
}

impl Sim {
    /// Open the simulator `name`, persisting under `state_dir/sim/` (or only in
    /// memory when `state_dir` is `None`). A corrupt state file is an error, never
    /// silently replaced by an empty fleet.
    pub fn open(
        name: &str,
        settings: &SimSettings,
        state_dir: Option<&Path>,
        clock: Arc<dyn Clock>,
    ) -> anyhow::Result<Sim> {
        // A shared simulator (POOLWRIGHT_SIM_DIR) is for processes that persist.
        let shared = state_dir
            .and(std::env::var_os("POOLWRIGHT_SIM_DIR"))
            .filter(|d| !d.is_empty())
            .map(PathBuf::from);
        let path = match &shared {
            Some(dir) => Some(dir.join(format!("{name}.json"))),
            None => state_dir.map(|d| d.join("sim").join(format!("{name}.json"))),
        };
        let fleet = match &path {
            Some(p) if state_exists(p)? => {
                // Read the fleet and check the audit as one step against a
                // process saving and auditing a mutation (a `plan` beside a
                // running daemon must not see the save without its line).
                let _held = AuditLock::take(p);
                let mut fleet = read_machines(p)?;
                fleet.stamp = stamp_of(p);
                if let Some(last) = &fleet.last_call {
                    repair_audit(&p.with_extension("audit.jsonl"), fleet.audited, last);
                }
                fleet
            }
            _ => Machines {
                format: FORMAT,
                ..Machines::default()
            },
        };
        Ok(Sim {
            name: name.to_string(),
            speed: settings.speed.as_ref().map_or(1.0, |s| s.value),
            settings: settings.clone(),
            path,
            shared: shared.is_some(),
            clock,
            fleet: Mutex::new(fleet),
            calls: AtomicU64::new(0),
            tokens: AtomicU64::new(0),
            drains: Mutex::default(),
        })
    }

    /// The lock of a shared fleet (`None` when not shared). Without it,
    /// another process's change could be overwritten: the call fails.
    fn shared_lock(&self, take: fn(&Path) -> AuditLock, call: &str) -> Result<Option<AuditLock>> {
        let Some(path) = self.path.as_deref().filter(|_| self.shared) else {
            return Ok(None);
        };
        let held = take(path);
        if held.0.is_none() {
            return Err(ProviderError::new(
                call,
                ErrorKind::Unavailable,
                format!(
                    "cannot lock the shared simulator fleet {} (its .audit.lock beside it)",
                    path.display()
                ),
            ));
        }
        Ok(Some(held))
    }

    /// A shared fleet, as another process may have left it: read again if
    /// its files changed since this process last read or wrote them. The
    /// caller holds the file lock.
    fn refresh(&self, fleet: &mut Machines, call: &str) -> Result<()> {
        let Some(path) = self.path.as_deref().filter(|_| self.shared) else {
            return Ok(());
        };
        let now = stamp_of(path);
        if now.is_some() && now != fleet.stamp {
            *fleet = read_machines(path)
                .map_err(|e| ProviderError::new(call, ErrorKind::Unavailable, format!("{e:#}")))?;
            fleet.stamp = now;
        }
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Machines> {
        self.fleet.locked()
    }

    /// Persist a mutation of `pool`: one record in the change log, or the
    /// whole set of machines when it is small or the log has grown as large.
    fn save(&self, fleet: &mut Machines, pool: &str) -> Result<()> {
        let Some(path) = &self.path else {
            return Ok(());
        };
        let mut persisted = std::mem::take(&mut fleet.persisted);
        let record = serde_json::to_vec(&Change {
            pool: pool.to_string(),
            state: fleet.pools.get(pool),
            next_serial: fleet.next_serial,
            audited: fleet.audited,
            last_call: fleet.last_call.clone(),
        })
        .expect("a change serializes");
        let written = persisted.persist(path, &record, || {
            serde_json::to_vec(&*fleet).expect("the fleet serializes")
        });
        fleet.persisted = persisted;
        written.map_err(|e| {
            ProviderError::new(
                "SaveState",
                ErrorKind::Unavailable,
                format!("writing {}: {e}", path.display()),
            )
        })
    }

    /// Append the call to `NAME.audit.jsonl` beside the state: the provider's
    /// own record of what it was asked to do (who terminated what, and when).
    fn audit(&self, now: Timestamp, call: &str) {
        if let Some(path) = &self.path {
            append_audit(&path.with_extension("audit.jsonl"), now, call);
        }
    }

    fn scaled(&self, d: std::time::Duration) -> SignedDuration {
        let secs = d.as_secs_f64() / self.speed;
        SignedDuration::try_from_secs_f64(secs).unwrap_or(SignedDuration::MAX)
    }

    fn sample(&self, dist: &Distribution, rng: &mut ChaCha8Rng) -> SignedDuration {
        let d = match dist {
            Distribution::Fixed(d) => d.as_std(),
            Distribution::Uniform { min, max } => {
                let (lo, hi) = (min.as_std().as_secs_f64(), max.as_std().as_secs_f64());
                let u: f64 = rng.random();
                std::time::Duration::try_from_secs_f64(
                    (lo + (hi - lo).max(0.0) * u).clamp(0.0, 1e9),
                )
                .unwrap_or_default()
            }
            Distribution::Lognormal { median, sigma } => {
                let z: f64 = rng.sample(rand_distr::StandardNormal);
                let secs = median.as_std().as_secs_f64() * (sigma * z).exp();
                std::time::Duration::from_secs_f64(secs.clamp(0.0, 1e9))
            }
        };
        self.scaled(d)
    }

    /// The draws of node `serial`: fixed order, so a node's fate depends only on
    /// the seed and its serial, not on what else happened in the run.
    fn draw(&self, serial: u64) -> Draw {
        let mut rng = ChaCha8Rng::seed_from_u64(
            self.settings
                .seed
                .wrapping_mul(0x9E37_79B9_7F4A_7C15)
                .wrapping_add(serial),
        );
        let boot = self.sample(&self.settings.boot_time, &mut rng);
        let health = self.sample(&self.settings.health_delay, &mut rng);
        let never_healthy = rng.random::<f64>() < self.settings.failures.never_healthy;
        let terminate = self.sample(&self.settings.terminate_time, &mut rng);
        let drain = self.sample(&self.settings.drain_time, &mut rng);
        let drain_blocked = rng.random::<f64>() < self.settings.failures.drain_blocked;
        Draw {
            boot,
            health,
            never_healthy,
            terminate,
            drain,
            drain_blocked,
        }
    }

    fn serial_of(node_id: &str) -> u64 {
        node_id
            .rsplit('-')
            .next()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0)
    }

    /// How long draining this node takes in the simulation, and whether its
    /// drain is blocked (as by a PodDisruptionBudget that never allows it).
    /// Asked about every draining node at every look: drawn once per node.
    pub fn drain_profile(&self, node_id: &str) -> (SignedDuration, bool) {
        let serial = Self::serial_of(node_id);
        let mut drawn = self.drains.locked();
        if drawn.len() >= 100_000 {
            drawn.clear();
        }
        *drawn.entry(serial).or_insert_with(|| {
            let d = self.draw(serial);
            (d.drain, d.drain_blocked)
        })
    }

    /// Hold a copy of an observed pool (of any provider), for a forecast:
    /// the same size, template and nodes in the same states. What a node has
    /// still to do (boot, become healthy, go) is drawn from this simulator's
    /// distributions, from now; nodes launched later are this simulator's.
    pub fn copy_of(&self, pool: &ObservedPool) {
        let now = self.clock.now();
        let mut fleet = self.lock();
        let mut nodes = Vec::with_capacity(pool.nodes.len());
        for n in &pool.nodes {
            let serial = fleet.next_serial;
            fleet.next_serial += 1;
            let d = self.draw(serial);
            let later = |by: SignedDuration| now.saturating_add(by).unwrap_or(now);
            let (running_at, healthy_at, gone_at) = match n.state {
                NodeState::Healthy => (now, Some(n.healthy_since.unwrap_or(now).min(now)), None),
                NodeState::Pending => {
                    let running = later(d.boot);
                    (
                        running,
                        (!d.never_healthy)
                            .then(|| running.saturating_add(d.health).unwrap_or(running)),
                        None,
                    )
                }
                NodeState::Unhealthy => (now, None, None),
                NodeState::Terminating => (now, None, Some(later(d.terminate))),
            };
            nodes.push(SimNode {
                // Named as this simulator names nodes: its draws follow the name.
                id: format!("{}-{serial:05}", pool.name).into(),
                serial,
                template: n.template,
                launched_at: n.launched_at.min(now),
                running_at,
                healthy_at,
                gone_at,
                cordoned: n.cordoned,
                zone: n.zone.clone(),
                labels: n.labels.clone(),
            });
        }
        fleet.pools.insert(
            pool.name.clone(),
            SimPool {
                size: pool.size,
                autoscaling: pool.autoscaling,
                template: pool.template.clone(),
                template_hash: pool.template.hash(),
                in_place: InPlace::default(),
                nodes,
                watch: None,
                going: None,
            },
        );
    }

    /// How many mutations the simulator has made (a forecast looks again at
    /// once after a round that changed something).
    pub fn mutations(&self) -> u64 {
        self.lock().audited
    }

    /// The first instant after `now` at which a node of `pool` changes as
    /// observed by itself (becomes healthy or unhealthy, or goes), by a pass
    /// over every node; `None` if there is no such pool. A node gone (but
    /// not yet dropped) changes no more: an instant it would have had
    /// (becoming healthy) shows nowhere.
    pub fn next_change_of_any(&self, pool: &str, now: Timestamp) -> Option<Option<Timestamp>> {
        let fleet = self.lock();
        let p = fleet.pools.get(pool)?;
        Some(
            p.nodes
                .iter()
                .filter(|n| n.observed_at(now).is_some())
                .filter_map(|n| n.changes_after(now))
                .min(),
        )
    }

    /// Mark a node unschedulable (what cordoning does in Kubernetes).
    pub fn set_cordoned(&self, pool: &str, node: &str, cordoned: bool) -> Result<()> {
        let call = format!(
            "{}({pool}, {node})",
            if cordoned { "Cordon" } else { "Uncordon" }
        );
        self.edit_node(call, pool, node, |n| n.cordoned = cordoned)
    }

    /// Change one node of a pool in place (cordon, label), as one mutation.
    fn edit_node(
        &self,
        call: String,
        pool: &str,
        node: &str,
        edit: impl FnOnce(&mut SimNode),
    ) -> Result<()> {
        self.mutate(call, pool, |_, fleet, _, call| {
            let p = fleet.pools.get_mut(pool);
            let Some((p, i)) = p.and_then(|p| p.position(node).map(|i| (p, i))) else {
                return Err(ProviderError::new(
                    call,
                    ErrorKind::NotFound,
                    format!("node {node:?} is not in pool {pool:?}"),
                ));
            };
            edit(&mut p.nodes[i]);
            p.touch(i);
            Ok(())
        })
    }

    /// Injected API errors and throttling, deterministic per call number.
    fn inject(&self, call: &str) -> Result<()> {
        let f = &self.settings.failures;
        if f.api_errors <= 0.0 && f.throttling <= 0.0 {
            return Ok(());
        }
        let n = self.calls.fetch_add(1, Ordering::Relaxed);
        let mut rng =
            ChaCha8Rng::seed_from_u64(self.settings.seed ^ 0xC0FF_EE00 ^ n.rotate_left(17));
        let r: f64 = rng.random();
        if r < f.throttling {
            Err(ProviderError::new(
                call,
                ErrorKind::Throttled,
                "Rate exceeded (simulated)",
            ))
        } else if r < f.throttling + f.api_errors {
            Err(ProviderError::new(
                call,
                ErrorKind::Unavailable,
                "InternalFailure (simulated 500)",
            ))
        } else {
            Ok(())
        }
    }

    fn live_total(fleet: &Machines) -> u64 {
        fleet
            .pools
            .values()
            .map(|p| p.nodes.iter().filter(|n| n.is_live()).count() as u64)
            .sum()
    }

    fn check_quota(&self, fleet: &Machines, extra: u64, call: &str) -> Result<()> {
        if let Some(q) = self.settings.quota {
            let live = Self::live_total(fleet);
            if live + extra > q as u64 {
                return Err(ProviderError::new(
                    call,
                    ErrorKind::Quota,
                    format!(
                        "InsufficientCapacity: {extra} more node(s) would exceed the quota of {q} ({live} in use)"
                    ),
                ));
            }
        }
        Ok(())
    }

    fn launch(&self, fleet: &mut Machines, pool: &str, now: Timestamp) {
        let serial = fleet.next_serial;
        fleet.next_serial += 1;
        let d = self.draw(serial);
        let p = fleet
            .pools
            .get_mut(pool)
            .expect("launch into an existing pool");
        let running_at = now.saturating_add(d.boot).unwrap_or(now);
        let broken = is_broken(&self.settings, &p.template);
        p.nodes.push(SimNode {
            id: format!("{pool}-{serial:05}").into(),
            serial,
            template: p.template_hash,
            launched_at: now,
            running_at,
            healthy_at: (!d.never_healthy && !broken)
                .then(|| running_at.saturating_add(d.health).unwrap_or(running_at)),
            gone_at: None,
            cordoned: false,
            zone: self.zone_of(serial),
            labels: self.labels_of(serial),
        });
        p.touch(p.nodes.len() - 1);
    }

    /// The zone of the node with this serial: the settings' zones in turn.
    fn zone_of(&self, serial: u64) -> Option<Arc<str>> {
        let zones = &self.settings.zones;
        (!zones.is_empty())
            .then(|| Arc::from(zones[(serial % zones.len() as u64) as usize].as_str()))
    }

    /// The labels of the node with this serial: each label's values in turn.
    fn labels_of(&self, serial: u64) -> BTreeMap<String, String> {
        self.settings
            .node_labels
            .iter()
            .filter(|(_, values)| !values.is_empty())
            .map(|(k, values)| {
                (
                    k.clone(),
                    values[(serial % values.len() as u64) as usize].clone(),
                )
            })
            .collect()
    }

    /// Set (`Some`) or remove a label of a node, as an operator labelling
    /// its machine would (a hold, a priority).
    pub fn set_label(&self, pool: &str, node: &str, key: &str, value: Option<&str>) -> Result<()> {
        let call = format!("Label({pool}, {node}, {key})");
        self.edit_node(call, pool, node, |n| {
            match value {
                Some(v) => n.labels.insert(key.to_string(), v.to_string()),
                None => n.labels.remove(key),
            };
        })
    }

    fn terminate(&self, node: &mut SimNode, now: Timestamp) {
        if node.gone_at.is_none() {
            let d = self.draw(node.serial);
            node.gone_at = Some(now.saturating_add(d.terminate).unwrap_or(now));
        }
    }

    /// Drop nodes that are gone, then launch or retire nodes until the live count
    /// equals the size, like an Auto Scaling group. Retiring picks outdated nodes
    /// first, then the oldest.
    fn converge(&self, fleet: &mut Machines, pool: &str, now: Timestamp) {
        let Some(p) = fleet.pools.get_mut(pool) else {
            return;
        };
        let live = match p.going {
            Some((count, first)) if first.is_none_or(|f| now < f) => {
                (p.nodes.len() as u32).saturating_sub(count)
            }
            _ => {
                let (mut count, mut first) = (0u32, None::<Timestamp>);
                p.nodes.retain(|n| match n.gone_at {
                    Some(g) if now >= g => false,
                    Some(g) => {
                        count += 1;
                        first = Some(first.map_or(g, |f| f.min(g)));
                        true
                    }
                    None => true,
                });
                p.going = Some((count, first));
                (p.nodes.len() as u32).saturating_sub(count)
            }
        };
        let size = p.size;
        if live > size {
            let hash = p.template_hash;
            let mut victims: Vec<usize> = (0..p.nodes.len())
                .filter(|&i| p.nodes[i].is_live())
                .collect();
            victims.sort_by_key(|&i| (p.nodes[i].template == hash, p.nodes[i].serial));
            for &i in victims.iter().take((live - size) as usize) {
                p.terminate(self, i, now);
            }
        }
        for _ in live..size {
            self.launch(fleet, pool, now);
        }
    }

    fn not_found(call: &str, pool: &str) -> ProviderError {
        ProviderError::new(
            call,
            ErrorKind::NotFound,
            format!("pool {pool:?} does not exist"),
        )
    }

    /// Run one mutation under the lock, converge the pool and persist.
    fn mutate<T>(
        &self,
        call: String,
        pool: &str,
        f: impl FnOnce(&Self, &mut Machines, Timestamp, &str) -> Result<T>,
    ) -> Result<T> {
        self.inject(&call)?;
        let now = self.clock.now();
        let mut fleet = self.lock();
        // Shared, the lock is held across reading, changing and saving.
        let mut held = self.shared_lock(AuditLock::take, &call)?;
        self.refresh(&mut fleet, &call)?;
        let out = f(self, &mut fleet, now, &call)?;
        self.converge(&mut fleet, pool, now);
        fleet.audited += 1;
        fleet.last_call = Some((now, call.clone()));
        if held.is_none() {
            held = self.path.as_deref().map(AuditLock::take);
        }
        self.save(&mut fleet, pool)?;
        self.audit(now, &call);
        if self.shared {
            fleet.stamp = self.path.as_deref().and_then(stamp_of);
        }
        drop(held);
        Ok(out)
    }
}

/// Where a node that is not terminating is, or NotFound: terminating or
/// reimaging a node that is already going is refused, so nothing happens to
/// it twice.
fn live_node(p: &SimPool, node: &str, pool: &str, call: &str) -> Result<usize> {
    p.position(node)
        .filter(|&i| p.nodes[i].is_live())
        .ok_or_else(|| {
            ProviderError::new(
                call,
                ErrorKind::NotFound,
                format!("node {node:?} is not a live node of {pool:?}"),
            )
        })
}

/// Nodes of a broken image never become healthy (a bad release, for demos and tests).
fn is_broken(settings: &SimSettings, template: &NodeTemplate) -> bool {
    let images = &settings.failures.bad_images;
    template.image.as_ref().is_some_and(|i| images.contains(i))
}

#[async_trait]
impl Provider for Sim {
    fn name(&self) -> &str {
        &self.name
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            reimage: true,
            describe_batch: usize::MAX,
            // One simulated second, at least 10 ms of real time.
            // Bounded both ways, whatever the speed: a validated one is 0.001
            // to 10^6, and no float may reach a Duration it cannot hold.
            poll_interval: std::time::Duration::try_from_secs_f64(
                (1.0 / self.speed).clamp(0.01, 3600.0),
            )
            .unwrap_or(std::time::Duration::from_secs(1)),
            idempotency_keys: false,
            acts_on: None,
        }
    }

    async fn channel_images(
        &self,
        channel: &str,
        _source: &crate::spec::types::ChannelSource,
    ) -> Result<Vec<crate::model::image::Release>> {
        let call = format!("ChannelImages({channel})");
        self.inject(&call)?;
        let mut all = catalogue::seeded(&self.settings);
        if let Some(dir) = self.path.as_ref().and_then(|p| p.parent()) {
            let published = catalogue::read(&dir.join("images.json"))
                .map_err(|e| ProviderError::new(&call, ErrorKind::Unavailable, format!("{e:#}")))?;
            for r in published {
                all.retain(|x| x.image != r.image);
                all.push(r);
            }
        }
        Ok(all)
    }

    async fn describe_pools(&self, names: &[String]) -> Result<Vec<ObservedPool>> {
        self.inject("DescribePools")?;
        let now = self.clock.now();
        let mut fleet = self.lock();
        let _held = self.shared_lock(AuditLock::shared, "DescribePools")?;
        self.refresh(&mut fleet, "DescribePools")?;
        Ok(names
            .iter()
            .filter_map(|name| {
                let p = fleet.pools.get(name)?;
                Some(ObservedPool {
                    name: name.clone(),
                    size: p.size,
                    autoscaling: p.autoscaling,
                    template: p.template.clone(),
                    in_place: p.in_place.clone(),
                    nodes: {
                        // Sized once: a pool of thousands grows no vector.
                        let mut nodes = Vec::with_capacity(p.nodes.len());
                        nodes.extend(p.nodes.iter().filter_map(|n| n.view(now)));
                        nodes
                    },
                })
            })
            .collect())
    }

    async fn create_pool(&self, spec: &PoolSpec, _key: &OpKey) -> Result<()> {
        let call = format!("CreatePool({}, size {})", spec.name, spec.size);
        self.mutate(call, &spec.name, |sim, fleet, _, call| {
            if fleet.pools.contains_key(&spec.name) {
                return Err(ProviderError::new(
                    call,
                    ErrorKind::Rejected,
                    "AlreadyExists: a pool with this name exists",
                ));
            }
            sim.check_quota(fleet, spec.size as u64, call)?;
            fleet.pools.insert(
                spec.name.clone(),
                SimPool {
                    size: spec.size,
                    autoscaling: spec.autoscaling,
                    template_hash: spec.template.hash(),
                    template: spec.template.clone(),
                    in_place: spec.in_place.clone(),
                    nodes: Vec::new(),
                    watch: None,
                    going: None,
                },
            );
            Ok(())
        })
    }

    async fn delete_pool(&self, pool: &str, _key: &OpKey) -> Result<()> {
        let call = format!("DeletePool({pool})");
        self.mutate(call, pool, |_, fleet, _, call| {
            fleet
                .pools
                .remove(pool)
                .map(|_| ())
                .ok_or_else(|| Sim::not_found(call, pool))
        })
    }

    async fn set_size(&self, pool: &str, size: u32, _key: &OpKey) -> Result<()> {
        let call = format!("SetSize({pool}, {size})");
        self.mutate(call, pool, |sim, fleet, _, call| {
            let p = fleet
                .pools
                .get(pool)
                .ok_or_else(|| Sim::not_found(call, pool))?;
            let live = p.nodes.iter().filter(|n| n.is_live()).count() as u64;
            sim.check_quota(fleet, (size as u64).saturating_sub(live), call)?;
            fleet.pools.get_mut(pool).expect("checked").size = size;
            Ok(())
        })
    }

    async fn set_template(&self, pool: &str, template: &NodeTemplate, _key: &OpKey) -> Result<()> {
        let call = format!("SetTemplate({pool}, {})", template.hash());
        self.mutate(call, pool, |_, fleet, _, call| {
            let p = fleet
                .pools
                .get_mut(pool)
                .ok_or_else(|| Sim::not_found(call, pool))?;
            p.template = template.clone();
            p.template_hash = template.hash();
            Ok(())
        })
    }

    async fn create_nodes(
        &self,
        pool: &str,
        count: u32,
        _size: u32,
        _key: &OpKey,
    ) -> Result<Vec<String>> {
        let call = format!("CreateNodes({pool}, {count})");
        self.mutate(call, pool, |sim, fleet, now, call| {
            if !fleet.pools.contains_key(pool) {
                return Err(Sim::not_found(call, pool));
            }
            sim.check_quota(fleet, count as u64, call)?;
            let before = fleet.next_serial;
            for _ in 0..count {
                sim.launch(fleet, pool, now);
            }
            let p = fleet.pools.get_mut(pool).expect("checked");
            p.size += count;
            Ok(p.nodes
                .iter()
                .filter(|n| n.serial >= before)
                .map(|n| n.id.to_string())
                .collect())
        })
    }

    async fn terminate_node(
        &self,
        pool: &str,
        node: &str,
        decrement: bool,
        _key: &OpKey,
    ) -> Result<()> {
        let call = format!(
            "TerminateNode({pool}, {node}{})",
            if decrement { ", decrement" } else { "" }
        );
        self.mutate(call, pool, |sim, fleet, now, call| {
            let p = fleet
                .pools
                .get_mut(pool)
                .ok_or_else(|| Sim::not_found(call, pool))?;
            let i = live_node(p, node, pool, call)?;
            p.terminate(sim, i, now);
            if decrement {
                p.size = p.size.saturating_sub(1);
            }
            Ok(())
        })
    }

    async fn update_in_place(&self, pool: &str, attrs: &InPlace, _key: &OpKey) -> Result<()> {
        let call = format!("UpdateInPlace({pool})");
        self.mutate(call, pool, |_, fleet, _, call| {
            let p = fleet
                .pools
                .get_mut(pool)
                .ok_or_else(|| Sim::not_found(call, pool))?;
            p.in_place = attrs.clone();
            Ok(())
        })
    }

    async fn set_bounds(&self, pool: &str, bounds: Option<Bounds>, _key: &OpKey) -> Result<()> {
        let call = format!("SetBounds({pool})");
        self.mutate(call, pool, |_, fleet, _, call| {
            let p = fleet
                .pools
                .get_mut(pool)
                .ok_or_else(|| Sim::not_found(call, pool))?;
            p.autoscaling = bounds;
            if let Some(b) = bounds {
                p.size = b.clamp(p.size);
            }
            Ok(())
        })
    }

    async fn reimage_node(&self, pool: &str, node: &str, _key: &OpKey) -> Result<()> {
        let call = format!("ReimageNode({pool}, {node})");
        self.mutate(call, pool, |sim, fleet, now, call| {
            let serial = fleet.next_serial;
            fleet.next_serial += 1;
            let d = sim.draw(serial);
            let p = fleet
                .pools
                .get_mut(pool)
                .ok_or_else(|| Sim::not_found(call, pool))?;
            let hash = p.template_hash;
            let broken = is_broken(&sim.settings, &p.template);
            let i = live_node(p, node, pool, call)?;
            p.touch(i);
            let n = &mut p.nodes[i];
            // Same machine, new disk: boot and health start over on the new template.
            n.template = hash;
            n.serial = serial;
            n.launched_at = now;
            n.running_at = now.saturating_add(d.boot).unwrap_or(now);
            n.healthy_at = (!d.never_healthy && !broken).then(|| {
                n.running_at
                    .saturating_add(d.health)
                    .unwrap_or(n.running_at)
            });
            n.cordoned = false;
            Ok(())
        })
    }
}

/// An advisory lock (`flock`) on `NAME.audit.lock` beside the fleet file,
/// held across saving a mutation and auditing it, and across reading the
/// fleet and repairing the audit: the two never interleave between processes.
/// Best effort: without the lock file (a read-only directory) nothing is held.
struct AuditLock(Option<std::fs::File>);

impl AuditLock {
    fn take(fleet_file: &Path) -> AuditLock {
        AuditLock::take_as(fleet_file, libc::LOCK_EX)
    }

    /// Held by readers of a shared fleet: they exclude writers, not each other.
    fn shared(fleet_file: &Path) -> AuditLock {
        AuditLock::take_as(fleet_file, libc::LOCK_SH)
    }

    fn take_as(fleet_file: &Path, how: libc::c_int) -> AuditLock {
        use std::os::unix::fs::OpenOptionsExt;
        use std::os::unix::io::AsRawFd;
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(fleet_file.with_extension("audit.lock"))
            .ok()
            .filter(|f| f.metadata().is_ok_and(|m| m.is_file()));
        if let Some(f) = &file {
            // SAFETY: flock on a descriptor this struct owns.
            if unsafe { libc::flock(f.as_raw_fd(), how) } != 0 {
                return AuditLock(None);
            }
        }
        AuditLock(file)
    }
}

impl Drop for AuditLock {
    fn drop(&mut self) {
        use std::os::unix::io::AsRawFd;
        if let Some(f) = &self.0 {
            // SAFETY: as above; closing would release it too.
            unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_UN) };
        }
    }
}

/// Whether the fleet file is there to be read. Only a path that does not
/// exist at all is a new, empty fleet: a dangling link, a `sim` that is not a
/// directory, or anything unreadable is an error (an empty fleet would plan
/// every existing pool as new, and the inventory would forget them).
fn state_exists(path: &Path) -> anyhow::Result<bool> {
    if let Some(dir) = path.parent()
        && std::fs::symlink_metadata(dir).is_ok()
        && !dir.is_dir()
    {
        anyhow::bail!(
            "simulator state directory {} is not a directory (or a link to none)",
            dir.display()
        );
    }
    match std::fs::symlink_metadata(path) {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => anyhow::bail!("reading simulator state {}: {e}", path.display()),
    }
}

fn append_audit(path: &Path, now: Timestamp, call: &str) {
    let line = serde_json::json!({"ts": now, "call": call}).to_string() + "\n";
    // The audit is a record, not state: failing to write it must not fail the
    // call. It rotates by size like the events file.
    if let Ok(mut log) = crate::files::AppendLog::open(path, crate::files::Rotation::default()) {
        let _ = log.append(line.as_bytes());
    }
}

/// A process killed between saving a mutation and auditing it leaves the
/// audit one line short: every mutation is saved and audited under the fleet
/// lock, so only the last saved one can be missing, and the state names it.
/// The audit's last line (in the current file, or the newest rotated one when
/// the current is empty) says whether it is.
fn repair_audit(path: &Path, audited: u64, last: &(Timestamp, String)) {
    if audited == 0 {
        return;
    }
    let last_line = |p: &Path| -> Option<(Timestamp, String)> {
        let bytes =
            crate::files::read_regular(p, crate::files::Rotation::default().max_bytes + 4096)
                .ok()?;
        let text = String::from_utf8_lossy(&bytes);
        let line = text.lines().rev().find(|l| !l.trim().is_empty())?;
        let v: serde_json::Value = serde_json::from_str(line).ok()?;
        Some((
            v["ts"].as_str()?.parse().ok()?,
            v["call"].as_str()?.to_string(),
        ))
    };
    let seen = last_line(path).or_else(|| last_line(&crate::files::AppendLog::rotated(path, 1)));
    if seen.as_ref() != Some(last) {
        append_audit(path, last.0, &last.1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kill_between_save_and_audit_is_repaired_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sim.audit.jsonl");
        let now: Timestamp = "2026-12-01T00:00:00Z".parse().unwrap();
        append_audit(&path, now, "CreatePool(web, size 2)");
        let last = (now, "TerminateNode(web, web-00001)".to_string());
        // Two mutations saved, one audited: the last is written back.
        repair_audit(&path, 2, &last);
        repair_audit(&path, 2, &last);
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 2, "{text}");
        assert!(
            text.lines()
                .nth(1)
                .unwrap()
                .contains("TerminateNode(web, web-00001)")
        );
        // Nothing missing: nothing written.
        repair_audit(&path, 2, &last);
        assert_eq!(std::fs::read_to_string(&path).unwrap().lines().count(), 2);
    }
}
