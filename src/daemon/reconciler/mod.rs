//! The reconcile loop, one pool at a time. Every trigger queues the pools it
//! concerns (a saved file or a commit: the pools whose documents changed; a
//! worker ending, a pause: that pool; nodes booting, a window opening, a
//! retry: that pool, when due; the resync: the next slice of the fleet).
//! Each provider's queued pools are observed together in batched calls, one
//! observation in flight per provider, and planned one by one; pools with
//! changes get a worker each, bounded in number per provider. A new desired
//! state for a pool whose worker is running stops that worker at a safe point
//! and starts a new one, whose executor supersedes the journal's rollout.
//! The fleet-wide views (status, `/v1/plan`, the plan text) are assembled
//! from the pools' latest results, never recomputed for the fleet.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use jiff::{SignedDuration, Timestamp};
use tokio::sync::{Semaphore, mpsc, oneshot};

mod batch;
mod projection;
mod publish;
mod reload;
mod workers;

pub use batch::Observation;
pub use projection::project_board;

use super::board::{BlockedStatus, Board, LastError, Observing, PoolState};
use super::decision::{self, PoolAction, PoolFacts};
use super::feed::Feed;
use super::ha::Leading;
use super::metrics::Metrics;
use super::queue::WorkQueue;
use super::source::ConfigSource;
use crate::clock::Clock;
use crate::cluster::shards::Shards;
use crate::model::EventKind;
use crate::plan::render::{Revision, Source};
use crate::plan::{self, Plan, PoolPlan};
use crate::provider::Providers;
use crate::reconcile::apply::describe_step;
use crate::reconcile::{ApplyOutcome, EventSink, Stop};
use crate::rollout::RolloutState;
use crate::spec::Config;
use crate::store::Journal;
use crate::store::{Inventory, InventoryStore, StateDir};

/// The most pools one observation takes from a provider's queue: a batch
/// large enough that a fleet is observed in few calls, small enough that a
/// pool queued behind it (an edit) waits little.
const OBSERVE_MAX: usize = 1_000;

/// How often, at most, the fleet-wide views are assembled while pools change.
const PUBLISH_EVERY: Duration = Duration::from_millis(500);

/// The daemon says it is ready at the latest this long after its first load.
const READY_AFTER: Duration = Duration::from_secs(30);

/// What caused a reconcile (a label on the reconciles metric).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trigger {
    Startup,
    /// The watcher saw the desired state (or, in git mode, the repository) change.
    Files,
    /// SIGHUP.
    Reload,
    /// The periodic full resync.
    Resync,
    /// A pool's worker finished.
    PoolDone,
    /// A pause or resume changed a rollout.
    Control,
    /// This daemon took the leader lease, or lost it (`--ha kubernetes`).
    Leadership,
    /// Something became due (a window opening, a retry, nodes settling): plan
    /// again with the desired state in force.
    Wake,
}

impl Trigger {
    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::Startup => "startup",
            Trigger::Files => "files",
            Trigger::Reload => "reload",
            Trigger::Resync => "resync",
            Trigger::PoolDone => "pool-done",
            Trigger::Control => "control",
            Trigger::Leadership => "leadership",
            Trigger::Wake => "wake",
        }
    }

    fn reloads(self) -> bool {
        matches!(
            self,
            Trigger::Startup
                | Trigger::Files
                | Trigger::Reload
                | Trigger::Resync
                | Trigger::Leadership
        )
    }

    /// When several triggers are pending, the one that does the most wins.
    pub fn merge(self, other: Trigger) -> Trigger {
        if other.reloads() && !self.reloads() {
            other
        } else {
            self
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ControlAction {
    Pause,
    Resume,
}

pub struct ControlRequest {
    /// As the caller wrote it: untrusted until found in the desired state.
    pub pool: String,
    pub action: ControlAction,
    /// Who asked (socket peer uid, or token id), for the log and the event.
    pub who: String,
    pub reason: Option<String>,
    pub reply: oneshot::Sender<Result<String, ControlRefusal>>,
}

/// Why a control request was not carried out.
#[derive(Debug, PartialEq)]
pub enum ControlRefusal {
    /// Not a pool of the loaded desired state (nothing was looked up on disk).
    UnknownPool(String),
    Refused(String),
}

/// A pool's worker ended.
pub struct Done {
    pub pool: String,
    pub key: String,
    pub outcome: ApplyOutcome,
    pub stopped: bool,
}

pub struct Settings {
    pub prune: bool,
    pub dry_run: bool,
    pub parallelism: usize,
    /// A pool whose worker just finished is not started again (same desired
    /// state) before this, so a pool that cannot converge does not spin.
    pub retry_after: Duration,
    /// Every pool is looked at again within this (`--resync`), a slice at a time.
    pub resync: Duration,
}

/// Where the journal and the inventory live.
pub struct Stores {
    pub journal: Journal,
    pub inventory_store: Arc<InventoryStore>,
    /// The inventory as read at start (empty under `--ha`: read before acting).
    pub inventory: Inventory,
    /// Under `--ha kubernetes`, the leases whose terms let this daemon act
    /// (one leader lease, or a lease per shard): state is shared with other
    /// daemons through the cluster.
    pub shards: Option<Arc<Shards>>,
}

/// The desired state in force: the last one that loaded cleanly.
struct InForce {
    config: Arc<Config>,
    providers: Arc<Providers>,
    revision: Option<Revision>,
}

/// The latest plan and what it was made from (`/v1/plan`, the web page),
/// assembled from each pool's latest plan (shared, not copied).
pub struct Latest {
    /// Each pool's plan, by name.
    pub pools: Vec<Arc<PoolPlan>>,
    pub source: Source,
    pub config: Arc<Config>,
    /// Each provider's poll interval (what a forecast's executor looks at).
    pub polls: BTreeMap<String, Duration>,
    json: OnceLock<serde_json::Value>,
}

impl Latest {
    /// The plan as `plan -o json` prints it (rendered on first use).
    pub fn json(&self) -> &serde_json::Value {
        self.json
            .get_or_init(|| plan::render::render_json(&self.plan(), &self.source))
    }

    /// The fleet's plan (a copy of every pool's).
    pub fn plan(&self) -> Plan {
        Plan {
            pools: self.pools.iter().map(|p| PoolPlan::clone(p)).collect(),
        }
    }

    /// One pool's plan.
    pub fn pool(&self, name: &str) -> Option<&PoolPlan> {
        self.pools
            .binary_search_by(|p| p.pool.as_str().cmp(name))
            .ok()
            .map(|i| self.pools[i].as_ref())
    }
}

pub type LatestPlan = Arc<Mutex<Option<Arc<Latest>>>>;

struct Worker {
    key: String,
    provider: String,
    stop: Stop,
}

/// Where the resync stands: the last pool it queued, and when the next slice is due.
struct ResyncState {
    interval: Duration,
    cursor: Option<String>,
    next: Timestamp,
    /// When the current cycle started (the fleet is looked at by `started + interval`).
    started: Timestamp,
}

pub struct Reconciler {
    pub settings: Settings,
    pub source: ConfigSource,
    pub state: StateDir,
    pub clock: Arc<dyn Clock>,
    pub board: Arc<Board>,
    pub metrics: Arc<Metrics>,
    pub events: Arc<EventSink>,
    /// What the web page draws: each pool's nodes as last observed.
    pub feed: Arc<Feed>,
    journal: Arc<Journal>,
    inventory: Arc<Mutex<Inventory>>,
    inventory_store: Arc<InventoryStore>,
    /// Under `--ha`: the leases, and which of them this daemon holds. Without
    /// `--ha` it acts on every pool.
    shards: Option<Arc<Shards>>,
    authority: Leading,
    /// The inventory must be read again before acting: under `--ha`, another
    /// daemon may have written it (a standby, or a daemon holding some shards,
    /// re-reads it every batch; a new leader once, before its first step).
    inventory_stale: bool,
    in_force: Option<InForce>,
    /// HEAD when the desired state was last loaded (git mode).
    head: Option<String>,
    /// What each file parsed to at the last load (an edit re-parses its file only).
    parse_cache: Arc<Mutex<crate::spec::validate::ParseCache>>,
    workers: HashMap<String, Worker>,
    /// Pauses asked for while the pool's worker was running.
    deferred: HashMap<String, (ControlAction, String)>,
    /// When each pool's last worker ended, and for which desired state.
    finished: HashMap<String, (String, Timestamp)>,
    /// Since when each pool has been blocked by its disruption policy.
    blocked_since: HashMap<String, Timestamp>,
    /// Pools whose block this daemon announced itself (no rollout under way
    /// to announce it): only these get the daemon's `resumed_in_window`; the
    /// executor reports its own, so each reopening is told once.
    announced_blocked: HashSet<String>,
    /// Workers at once, per provider: a provider whose calls hang holds up
    /// only its own pools.
    semaphores: HashMap<String, Arc<Semaphore>>,
    done_tx: mpsc::UnboundedSender<Done>,
    /// Pools waiting to be observed and planned, and pools due later.
    queue: WorkQueue,
    /// Providers with an observation in flight (one each): how many pools, since when.
    observing: BTreeMap<String, (usize, Timestamp)>,
    observed_tx: mpsc::UnboundedSender<Observation>,
    /// Counts what happened to pools (a worker started or ended, a pause): an
    /// observation begun before a pool's last change is not acted on.
    seq: u64,
    pool_seq: HashMap<String, u64>,
    /// `seq` when this daemon last took or lost the lease: observations begun
    /// before it are stale for every pool.
    role_seq: u64,
    /// Each pool's latest plan: the fleet's plan is assembled from these.
    plans: BTreeMap<String, Arc<PoolPlan>>,
    /// The plans changed since they were last assembled.
    plans_dirty: bool,
    last_published: Option<Instant>,
    last_logged_plan: Option<String>,
    /// The latest plan, for `/v1/plan` and the web page.
    pub latest_plan: LatestPlan,
    resync: ResyncState,
    /// The pools loaded at start not yet planned once, and when that load
    /// was: the daemon says it is ready when they all were, or after
    /// `READY_AFTER` (a provider that does not answer must not keep it
    /// from starting).
    startup_pending: Option<(HashSet<String>, Instant)>,
    first_pass_done: bool,
}

impl Reconciler {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        settings: Settings,
        source: ConfigSource,
        state: StateDir,
        clock: Arc<dyn Clock>,
        board: Arc<Board>,
        metrics: Arc<Metrics>,
        events: Arc<EventSink>,
        feed: Arc<Feed>,
        done_tx: mpsc::UnboundedSender<Done>,
        observed_tx: mpsc::UnboundedSender<Observation>,
        stores: Stores,
    ) -> anyhow::Result<Reconciler> {
        let now = clock.now();
        let end = now
            .saturating_add(SignedDuration::try_from(settings.resync).unwrap_or_default())
            .unwrap_or(now);
        board.update(|d| d.reconcile.next_resync_at = Some(end));
        Ok(Reconciler {
            resync: ResyncState {
                interval: settings.resync,
                cursor: None,
                next: now,
                started: now,
            },
            settings,
            source,
            journal: Arc::new(stores.journal),
            inventory_store: stores.inventory_store,
            inventory_stale: stores.shards.is_some(),
            shards: stores.shards,
            authority: Leading::waiting(),
            state,
            clock,
            board,
            metrics,
            events,
            feed,
            inventory: Arc::new(Mutex::new(stores.inventory)),
            in_force: None,
            head: None,
            parse_cache: Default::default(),
            workers: HashMap::new(),
            deferred: HashMap::new(),
            finished: HashMap::new(),
            blocked_since: HashMap::new(),
            announced_blocked: Default::default(),
            semaphores: HashMap::new(),
            done_tx,
            queue: WorkQueue::default(),
            observing: BTreeMap::new(),
            observed_tx,
            seq: 0,
            pool_seq: HashMap::new(),
            role_seq: 0,
            plans: BTreeMap::new(),
            plans_dirty: false,
            last_published: None,
            last_logged_plan: None,
            latest_plan: Arc::new(Mutex::new(None)),
            startup_pending: None,
            first_pass_done: false,
        })
    }

    /// Under `--ha`: this daemon took a lease (it reads the inventory and
    /// the journals the last holder left, then acts) or lost one (its
    /// workers stop at once: the fence already refuses their next step), or
    /// is handing a shard over (its workers stop at their next safe point).
    /// The pools whose shard changed hands are looked at again in their new
    /// role; returns the trigger that reloads everything when all did.
    pub fn set_leading(&mut self, now: Leading) -> Option<Trigger> {
        let old = std::mem::replace(&mut self.authority, now);
        let shards = self.shards.clone()?;
        let now = &self.authority;
        let lost: BTreeSet<u32> = old.held.difference(&now.held).copied().collect();
        let gained: BTreeSet<u32> = now.held.difference(&old.held).copied().collect();
        for (pool, w) in &self.workers {
            let shard = shards.of(pool);
            if lost.contains(&shard) || now.releasing.contains(&shard) {
                w.stop.request();
            }
        }
        let moved: BTreeSet<u32> = (0..shards.count())
            .filter(|i| {
                lost.contains(i)
                    || gained.contains(i)
                    || old.holders.get(*i as usize) != now.holders.get(*i as usize)
                    || old.releasing.contains(i) != now.releasing.contains(i)
            })
            .collect();
        if !gained.is_empty() {
            tracing::info!(shards = ?gained, "took the lease: resuming from the journals in the cluster");
        }
        if !lost.is_empty() {
            tracing::warn!(shards = ?lost, "{}: not acting; workers stop before their next step", now.note);
        }
        if moved.is_empty() {
            return None;
        }
        // What was observed before this daemon's own role changed is not
        // acted on (another daemon's shard changing hands is only news).
        if !lost.is_empty() || !gained.is_empty() || old.releasing != now.releasing {
            self.inventory_stale = true;
            self.seq += 1;
            self.role_seq = self.seq;
        }
        if !shards.is_sharded() {
            return Some(Trigger::Leadership);
        }
        for pool in self.known_pools() {
            if moved.contains(&shards.of(&pool)) && !self.workers.contains_key(&pool) {
                self.enqueue(&pool, Trigger::Leadership);
            }
        }
        None
    }

    /// Whether this daemon may act on `pool`: always without `--ha`; with
    /// it, while it holds the pool's lease.
    fn leads(&self, pool: &str) -> bool {
        match &self.shards {
            None => true,
            Some(s) => self.authority.held.contains(&s.of(pool)),
        }
    }

    /// Whether it acts on every pool (no `--ha`, or the leader lease held).
    fn leads_all(&self) -> bool {
        match &self.shards {
            None => true,
            Some(s) => !s.is_sharded() && self.authority.leader(),
        }
    }

    /// Why this daemon does not act on `pool`, for its message.
    fn standby_note(&self, pool: &str) -> String {
        let Some(shards) = self.shards.as_ref().filter(|s| s.is_sharded()) else {
            return self.authority.note.clone();
        };
        let shard = shards.of(pool);
        match self
            .authority
            .holders
            .get(shard as usize)
            .cloned()
            .flatten()
        {
            _ if self.authority.releasing.contains(&shard) => format!(
                "shard {shard} is being handed to another daemon: steps in flight finish, none starts"
            ),
            Some(holder) => format!(
                "shard {shard}'s leader is daemon {holder} (`poolwright status` there shows its progress)"
            ),
            None => format!(
                "shard {shard} is held by no daemon yet: {}",
                self.authority.note
            ),
        }
    }

    pub fn busy_pools(&self) -> usize {
        self.workers.len()
    }

    /// Whether a watcher event can change what is loaded: in git mode, only a
    /// new HEAD commit can.
    pub fn files_changed(&self) -> bool {
        match &self.source {
            ConfigSource::WorkTree { .. } => true,
            ConfigSource::GitHead { .. } => self.source.head() != self.head,
        }
    }

    /// Every pool this daemon knows: those of the desired state in force and
    /// those of the inventory.
    fn known_pools(&self) -> BTreeSet<String> {
        let mut names: BTreeSet<String> = self
            .in_force
            .as_ref()
            .map(|f| f.config.pools.keys().cloned().collect())
            .unwrap_or_default();
        names.extend(
            self.inventory
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .pools
                .keys()
                .cloned(),
        );
        names
    }

    /// The provider a pool is observed through: its document's, else the
    /// inventory's. `None`: the pool is not known any more.
    fn provider_of(&self, pool: &str) -> Option<String> {
        if let Some(e) = self
            .in_force
            .as_ref()
            .and_then(|f| f.config.pools.get(pool))
        {
            return Some(e.doc.spec.provider_ref.value.clone());
        }
        self.inventory
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pools
            .get(pool)
            .map(|e| e.provider.clone())
    }

    /// Queue a pool to be observed and planned. A pool no longer known is
    /// forgotten instead.
    pub fn enqueue(&mut self, pool: &str, why: Trigger) {
        match self.provider_of(pool) {
            Some(provider) => {
                self.queue.add(pool, &provider, why);
            }
            None => self.forget_pool(pool),
        }
    }

    /// Queue every known pool (startup, SIGHUP, a change of leadership).
    /// Queue every known pool (startup, SIGHUP, a change of leadership), and
    /// every pool planned before: one that is no longer known is forgotten.
    pub fn enqueue_all(&mut self, why: Trigger) {
        let mut pools = self.known_pools();
        pools.extend(self.plans.keys().cloned());
        for pool in pools {
            self.enqueue(&pool, why);
        }
    }

    /// Look at a pool again at `at` at the latest.
    fn look_again_at(&mut self, pool: &str, at: Timestamp) {
        self.queue.add_after(pool, at);
    }

    fn look_again_after(&mut self, pool: &str, after: Duration) {
        let now = self.clock.now();
        let at = now
            .saturating_add(SignedDuration::try_from(after).unwrap_or_default())
            .unwrap_or(now);
        self.look_again_at(pool, at);
    }

    /// Something happened to a pool (a worker started or ended, a pause):
    /// observations begun before it are stale for this pool.
    fn touched(&mut self, pool: &str) {
        self.seq += 1;
        self.pool_seq.insert(pool.to_string(), self.seq);
    }

    /// A pool neither in the files nor in the inventory: nothing of it is kept.
    fn forget_pool(&mut self, pool: &str) {
        self.looked_at(pool);
        self.queue.forget(pool);
        if self.plans.remove(pool).is_some() {
            self.plans_dirty = true;
        }
        self.board.remove_pool(pool);
        self.feed.forget(pool);
        self.metrics.forget_pool(pool);
        self.finished.remove(pool);
        self.blocked_since.remove(pool);
        self.announced_blocked.remove(pool);
        self.pool_seq.remove(pool);
    }

    /// The next instant something is due: a pool's look, or a resync slice.
    pub fn next_due(&self) -> Option<Timestamp> {
        let resync = self.in_force.as_ref().map(|_| self.resync.next);
        match (self.queue.next_due(), resync) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Queue what is due by now: pools whose look came due, and the resync's
    /// next slice. Returns whether a resync cycle ended (the desired state is
    /// then loaded again, as a resync always did).
    pub fn promote_due(&mut self) -> bool {
        let now = self.clock.now();
        for pool in self.queue.take_due(now) {
            self.enqueue(&pool, Trigger::Wake);
        }
        if self.in_force.is_none() || now < self.resync.next {
            return false;
        }
        let slice = {
            let config = &self.in_force.as_ref().expect("checked").config;
            let inventory = self.inventory.lock().unwrap_or_else(|p| p.into_inner());
            let known = super::resync::union_len(&config.pools, &inventory.pools);
            let (tick, per) = super::resync::pace(known, self.resync.interval);
            let tick = SignedDuration::try_from(tick).unwrap_or_default();
            self.resync.next = now.saturating_add(tick).unwrap_or(now);
            super::resync::slice(
                &config.pools,
                &inventory.pools,
                self.resync.cursor.as_deref(),
                per,
            )
            .0
        };
        if let Some(last) = slice.last() {
            self.resync.cursor = Some(last.clone());
        }
        for pool in &slice {
            self.enqueue(pool, Trigger::Resync);
        }
        // Once per interval the desired state is read again too, in case a
        // change was missed.
        let interval = SignedDuration::try_from(self.resync.interval).unwrap_or_default();
        let cycle_end = self.resync.started.saturating_add(interval).unwrap_or(now);
        let reload = now >= cycle_end;
        if reload {
            self.resync.started = now;
            let end = now.saturating_add(interval).unwrap_or(now);
            self.board
                .update(|d| d.reconcile.next_resync_at = Some(end));
        }
        reload
    }

    /// Start an observation for every provider with pools queued and none in
    /// flight.
    pub fn dispatch(&mut self) {
        let Some(in_force) = &self.in_force else {
            return;
        };
        let (config, providers) = (in_force.config.clone(), in_force.providers.clone());
        for provider in self.queue.providers() {
            if self.observing.contains_key(&provider) {
                continue;
            }
            let (pools, why) = self.queue.take(&provider, OBSERVE_MAX);
            let Some(why) = why else { continue };
            self.observing
                .insert(provider.clone(), (pools.len(), self.clock.now()));
            batch::spawn_observation(
                batch::ObservationRequest {
                    provider,
                    pools,
                    why,
                    seq: self.seq,
                    started_at: self.clock.now(),
                },
                config.clone(),
                providers.clone(),
                self.journal.clone(),
                self.clock.clone(),
                self.observed_tx.clone(),
            );
        }
        let counts = (self.queue.len(), self.queue.scheduled());
        let observing: Vec<Observing> = self
            .observing
            .iter()
            .map(|(provider, (pools, since))| Observing {
                provider: provider.clone(),
                pools: *pools,
                since: *since,
            })
            .collect();
        let same = self.board.read(|d| {
            (d.reconcile.queued, d.reconcile.scheduled) == counts
                && d.reconcile.observing == observing
        });
        if !same {
            self.board.update(|d| {
                (d.reconcile.queued, d.reconcile.scheduled) = counts;
                d.reconcile.observing = observing;
            });
        }
        if !self.first_pass_done
            && let Some((pending, since)) = &self.startup_pending
        {
            if pending.is_empty() {
                self.first_pass_done = true;
            } else if since.elapsed() >= READY_AFTER {
                tracing::warn!(
                    pools = pending.len(),
                    "ready before every pool was looked at once: their providers have not answered in {}s",
                    READY_AFTER.as_secs()
                );
                self.first_pass_done = true;
            }
        }
    }

    /// A pool was planned (or forgotten): it no longer holds up readiness.
    fn looked_at(&mut self, pool: &str) {
        if let Some((pending, _)) = &mut self.startup_pending {
            pending.remove(pool);
        }
    }

    /// Every pool loaded at start has been looked at once (or the desired
    /// state did not load): the daemon is up and saying what it knows.
    pub fn first_pass_done(&self) -> bool {
        self.first_pass_done
    }

    fn handle_pool(
        &mut self,
        p: &PoolPlan,
        journal: Option<RolloutState>,
        config: &Arc<Config>,
        providers: &Arc<Providers>,
        revision: Option<&Revision>,
        now: Timestamp,
    ) {
        // What the worker is asked to do: the pool's planned work, settings
        // included, without what merely moves while it works. A change of it
        // (a new template, a new budget, a lowered maxUnavailable) stops the
        // running worker at its next safe point and starts one that carries on
        // with the new plan.
        let key = plan::work_key(p);
        let rev = revision.map(Revision::short);
        let blocked_now = p.blocked.is_some();
        // A rollout already under way reports its own block (the executor's
        // event); a pool another daemon acts on is that daemon's to announce.
        let rolling = journal.is_some();
        if blocked_now
            && !rolling
            && self.leads(&p.pool)
            && !self.blocked_since.contains_key(&p.pool)
        {
            self.announced_blocked.insert(p.pool.clone());
            let b = p.blocked.as_ref().expect("checked");
            self.events.emit(crate::reconcile::Event {
                ts: now,
                pool: p.pool.clone(),
                event: EventKind::BlockedByPolicy,
                node: None,
                counts: None,
                message: match b.until {
                    Some(u) => format!("{}; next window opens {u}", b.reason),
                    None => b.reason.clone(),
                },
                revision: None,
                by: None,
            });
        }
        let blocked_seconds = self.track_blocked(&p.pool, blocked_now, now);
        if let Some(until) = p.blocked.as_ref().and_then(|b| b.until) {
            self.look_again_at(&p.pool, until);
        }
        let board = self.board.clone();
        board.pool(&p.pool, &p.provider, |s| {
            s.revision = rev.clone();
            s.blocked_seconds = blocked_seconds;
            s.blocked = p.blocked.as_ref().map(|b| BlockedStatus {
                reason: b.reason.clone(),
                until: b.until,
                timezone: b.timezone.clone(),
                since: s.blocked.as_ref().map_or(now, |old| old.since),
            });
            s.pending = p.steps.iter().map(describe_step).collect();
            s.planned_at = Some(now);
        });

        let worker = self.workers.get(&p.pool);
        let action = decision::decide(&PoolFacts {
            plan: p,
            journal: journal.as_ref().map(|r| &r.status),
            key: &key,
            worker: worker.map(|w| w.key.as_str()),
            may_act: self.leads(&p.pool) && self.journal.may_act(&p.pool).is_ok(),
            standby_note: &self.standby_note(&p.pool),
            dry_run: self.settings.dry_run,
            last_finished: self.finished.get(&p.pool).map(|(k, at)| (k.as_str(), *at)),
            retry_after: self.settings.retry_after,
            now,
        });
        match action {
            PoolAction::Busy => {}
            PoolAction::Supersede => {
                if let Some(w) = worker
                    && !w.stop.is_requested()
                {
                    tracing::info!(pool = %p.pool, "the desired state changed: stopping the current work at a safe point to supersede it");
                    w.stop.request();
                    board.pool(&p.pool, &p.provider, |s| {
                        s.message =
                            "superseding: the current work stops at its next safe point".into();
                    });
                }
            }
            PoolAction::Show(state, message) => board.pool(&p.pool, &p.provider, |s| {
                s.state = state;
                s.message = message;
            }),
            PoolAction::Error(message) => board.pool(&p.pool, &p.provider, |s| {
                s.state = PoolState::Error;
                s.message = message.clone();
                s.last_error = Some(LastError { at: now, message });
            }),
            PoolAction::RetryAt(due) => self.look_again_at(&p.pool, due),
            PoolAction::Spawn => {
                self.spawn_worker(p.clone(), key, config.clone(), providers.clone())
            }
        }
    }
}

pub(super) use super::decision::steps;
