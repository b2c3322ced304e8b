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

use crate::sync::Locked;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use jiff::Timestamp;
use tokio::sync::{mpsc, oneshot};

mod authority;
mod batch;
pub mod fleet;
pub mod images;
mod projection;
mod publish;
mod reload;
mod schedule;
mod workers;

pub use batch::Observation;
pub use projection::project_board;

use crate::clock::Clock;
use crate::daemon::run::decision::{self, PoolAction, PoolFacts};
use crate::daemon::run::queue::Trigger;
use crate::daemon::source::ConfigSource;
use crate::daemon::views::board::{BlockedStatus, Board, LastError, PoolState};
use crate::daemon::views::feed::Feed;
use crate::daemon::views::metrics::Metrics;
use crate::ha::Leading;
use crate::ha::shards::Shards;
use crate::model::EventKind;
use crate::plan::render::{Revision, Source};
use crate::plan::{self, Hold, Plan, PoolPlan};
use crate::provider::Providers;
use crate::reconcile::apply::describe_step;
use crate::reconcile::{ApplyOutcome, EventSink};
use crate::rollout::RolloutState;
use crate::spec::Config;
use crate::store::Journal;
use crate::store::{Inventory, InventoryStore, StateDir};
use authority::Authority;
use projection::Blocks;
use publish::Views;
use schedule::Schedule;
use workers::Workers;

/// The most pools one observation takes from a provider's queue: a batch
/// large enough that a fleet is observed in few calls, small enough that a
/// pool queued behind it (an edit) waits little.
const OBSERVE_MAX: usize = 1_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ControlAction {
    Pause,
    Resume,
}

/// What a control request is about. The name is as the caller wrote it:
/// untrusted until found in the desired state in force.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ControlTarget {
    Pool(String),
    /// A FleetRollout (or the id of its change).
    Fleet(String),
    /// A node image (`image recall` when `recall`, else `image unrecall`;
    /// the action is not read): any id, checked for its form only.
    Image {
        image: String,
        recall: bool,
    },
}

pub struct ControlRequest {
    pub target: ControlTarget,
    pub action: ControlAction,
    /// Who asked (socket peer uid, or token id), for the log and the event.
    pub who: String,
    pub reason: Option<String>,
    pub reply: oneshot::Sender<Result<String, ControlRefusal>>,
}

/// Why a control request was not carried out.
#[derive(Debug, PartialEq)]
pub enum ControlRefusal {
    /// Not a pool (or FleetRollout) of the loaded desired state (nothing
    /// was looked up on disk).
    Unknown(String),
    Refused(String),
}

/// A pool's worker ended.
pub struct Done {
    pub pool: String,
    pub key: String,
    pub outcome: ApplyOutcome,
    pub stopped: bool,
}

pub struct ReconcileOptions {
    pub prune: bool,
    pub dry_run: bool,
    pub parallelism: usize,
    /// A pool whose worker just finished is not started again (same desired
    /// state) before this, so a pool that cannot converge does not spin.
    pub retry_after: Duration,
    /// Every pool is looked at again within this (`--resync`), a slice at a time.
    pub resync: Duration,
    /// With `--ha`, how often the fleet journals (which every daemon
    /// writes) are read again: the election's retry period.
    pub ha_retry: Option<Duration>,
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
    /// Each FleetRollout's change.
    pub fleet_journal: crate::store::FleetJournal,
    /// What the image channels remember.
    pub images: crate::store::images::ImageStore,
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
    /// Each FleetRollout's stage plan.
    pub fleets: Vec<crate::plan::fleet::FleetPlan>,
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
            fleets: self.fleets.clone(),
            images: crate::plan::channel::notes(&self.config),
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

/// The reconcile loop's state, in parts that each keep their own: when
/// pools are looked at (`schedule`), which pools this daemon may act on
/// (`authority`), the pools' workers (`workers`), the fleet-wide views
/// (`views`) and the policy blocks it announced (`blocks`).
pub struct Reconciler {
    settings: ReconcileOptions,
    source: ConfigSource,
    state: StateDir,
    clock: Arc<dyn Clock>,
    board: Arc<Board>,
    metrics: Arc<Metrics>,
    events: Arc<EventSink>,
    /// What the web page draws: each pool's nodes as last observed.
    feed: Arc<Feed>,
    journal: Arc<Journal>,
    inventory: Arc<Mutex<Inventory>>,
    inventory_store: Arc<InventoryStore>,
    /// The desired state in force, and what the last load read.
    in_force: Option<InForce>,
    /// HEAD when the desired state was last loaded (git mode).
    head: Option<String>,
    /// What each file parsed to at the last load (an edit re-parses its file only).
    parse_cache: Arc<Mutex<crate::spec::validate::ParseCache>>,
    schedule: Schedule,
    authority: Authority,
    workers: Workers,
    views: Views,
    blocks: Blocks,
    /// Changes across pools (FleetRollouts).
    fleet: fleet::Fleet,
    observed_tx: mpsc::UnboundedSender<Observation>,
    /// What previews of branches are planned against (`run --git-url`).
    previews: Option<crate::daemon::source::previews::PreviewFeed>,
    /// Image channels: their record, when each is asked next.
    images: images::Channels,
}

impl Reconciler {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        settings: ReconcileOptions,
        source: ConfigSource,
        state: StateDir,
        clock: Arc<dyn Clock>,
        board: Arc<Board>,
        metrics: Arc<Metrics>,
        events: Arc<EventSink>,
        feed: Arc<Feed>,
        done_tx: mpsc::UnboundedSender<Done>,
        observed_tx: mpsc::UnboundedSender<Observation>,
        gate_tx: mpsc::UnboundedSender<fleet::GateRead>,
        stores: Stores,
    ) -> anyhow::Result<Reconciler> {
        let now = clock.now();
        let ha_retry = settings.ha_retry;
        let schedule = Schedule::new(now, settings.resync);
        let end = schedule.resync_end(now);
        board.update(|d| d.reconcile.next_resync_at = Some(end));
        let images = images::Channels::open(
            stores.images,
            &state.root,
            ha_retry.unwrap_or(std::time::Duration::from_secs(2)),
        )?;
        Ok(Reconciler {
            images,
            schedule,
            workers: Workers::new(settings.parallelism, done_tx),
            settings,
            source,
            journal: Arc::new(stores.journal),
            inventory_store: stores.inventory_store,
            authority: Authority::new(stores.shards),
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
            views: Views::new(),
            blocks: Blocks::default(),
            fleet: fleet::Fleet::new(stores.fleet_journal, gate_tx, ha_retry),
            observed_tx,
            previews: None,
        })
    }

    /// Previews of branches (`run --git-url`) are planned against the
    /// desired state in force, told here, and read the rollout journals and
    /// the inventory this reconciler keeps.
    pub fn feed_previews(
        &mut self,
        feed: crate::daemon::source::previews::PreviewFeed,
    ) -> (Arc<Journal>, Arc<Mutex<Inventory>>) {
        self.previews = Some(feed);
        (self.journal.clone(), self.inventory.clone())
    }

    /// The rollout journals, for `/v1/pools/POOL/rollout`.
    pub fn journal(&self) -> Arc<Journal> {
        self.journal.clone()
    }

    /// The latest plan, for `/v1/plan` and the web page.
    pub fn latest_plan(&self) -> LatestPlan {
        self.views.latest()
    }

    /// Under `--ha`: this daemon took a lease (it reads the inventory and
    /// the journals the last holder left, then acts) or lost one (its
    /// workers stop at once: the fence already refuses their next step), or
    /// is handing a shard over (its workers stop at their next safe point).
    /// The pools whose shard changed hands are looked at again in their new
    /// role; returns the trigger that reloads everything when all did.
    pub fn set_leading(&mut self, now: Leading) -> Option<Trigger> {
        let handover = self.authority.set(now)?;
        let shards = self.authority.shards().cloned()?;
        let stopping: Vec<String> = self
            .workers
            .pools()
            .filter(|pool| handover.stop.contains(&shards.of(pool)))
            .cloned()
            .collect();
        for pool in &stopping {
            self.workers.stop(pool);
        }
        if !handover.gained.is_empty() {
            tracing::info!(shards = ?handover.gained, "took the lease: resuming from the journals in the cluster");
        }
        if !handover.lost.is_empty() {
            tracing::warn!(shards = ?handover.lost, "{}: not acting; workers stop before their next step", self.authority.note());
        }
        if handover.moved.is_empty() {
            return None;
        }
        // What was observed before this daemon's own role changed is not
        // acted on (another daemon's shard changing hands is only news).
        if handover.own {
            self.schedule.role_changed();
        }
        if !shards.is_sharded() {
            return Some(Trigger::Leadership);
        }
        for pool in self.known_pools() {
            if handover.moved.contains(&shards.of(&pool)) && !self.workers.runs(&pool) {
                self.enqueue(&pool, Trigger::Leadership);
            }
        }
        None
    }

    pub fn busy_pools(&self) -> usize {
        self.workers.len()
    }

    /// Whether a watcher event can change what is loaded: in git mode, only a
    /// new HEAD commit can; from a remote, only a new commit in force.
    pub fn files_changed(&self) -> bool {
        match &self.source {
            ConfigSource::WorkTree { .. } => true,
            ConfigSource::GitHead { .. } | ConfigSource::Remote(_) => {
                self.source.head() != self.head
            }
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
        names.extend(self.inventory.locked().pools.keys().cloned());
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
            .locked()
            .pools
            .get(pool)
            .map(|e| e.provider.clone())
    }

    /// Queue a pool to be observed and planned. A pool no longer known is
    /// forgotten instead.
    fn enqueue(&mut self, pool: &str, why: Trigger) {
        match self.provider_of(pool) {
            Some(provider) => self.schedule.add(pool, &provider, why),
            None => self.forget_pool(pool),
        }
    }

    /// Queue every known pool (startup, SIGHUP, a change of leadership), and
    /// every pool planned before: one that is no longer known is forgotten.
    fn enqueue_all(&mut self, why: Trigger) {
        let mut pools = self.known_pools();
        pools.extend(self.views.pools().cloned());
        for pool in pools {
            self.enqueue(&pool, why);
        }
    }

    /// Look at a pool again at `at` at the latest.
    fn look_again_at(&mut self, pool: &str, at: Timestamp) {
        self.schedule.add_after(pool, at);
    }

    /// A pool neither in the files nor in the inventory: nothing of it is kept.
    fn forget_pool(&mut self, pool: &str) {
        self.schedule.forget(pool);
        self.views.remove(pool);
        self.board.remove_pool(pool);
        self.feed.forget(pool);
        self.metrics.forget_pool(pool);
        self.workers.forget(pool);
        self.blocks.forget(pool);
    }

    /// The next instant something is due: a pool's look, a resync slice, or
    /// something of a change across pools (a soak's end, a gate to read).
    pub fn next_due(&self) -> Option<Timestamp> {
        [
            self.schedule.next_due(self.in_force.is_some()),
            self.fleet.next_due(),
            self.images_due(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// What `/v1/fleet` and the page show of the changes across pools.
    pub fn fleet_view(&self) -> fleet::FleetStatuses {
        self.fleet.view()
    }

    /// Queue what is due by now: pools whose look came due, and the resync's
    /// next slice. Returns whether a resync cycle ended (the desired state is
    /// then loaded again, as a resync always did).
    pub fn promote_due(&mut self) -> bool {
        let now = self.clock.now();
        for pool in self.schedule.take_due(now) {
            self.enqueue(&pool, Trigger::Wake);
        }
        let Some(in_force) = &self.in_force else {
            return false;
        };
        let slice = {
            let inventory = self.inventory.locked();
            self.schedule
                .resync_slice(now, &in_force.config.pools, &inventory.pools)
        };
        let Some(slice) = slice else {
            return false;
        };
        for pool in &slice.pools {
            self.enqueue(pool, Trigger::Resync);
        }
        if let Some(end) = slice.cycle_ended {
            self.board
                .update(|d| d.reconcile.next_resync_at = Some(end));
        }
        slice.cycle_ended.is_some()
    }

    /// Start an observation for every provider with pools queued and none in
    /// flight.
    pub fn dispatch(&mut self) {
        let Some(in_force) = &self.in_force else {
            return;
        };
        let (config, providers) = (in_force.config.clone(), in_force.providers.clone());
        for provider in self.schedule.ready_providers() {
            let (pools, why) = self.schedule.take(&provider, OBSERVE_MAX);
            let Some(why) = why else { continue };
            let now = self.clock.now();
            self.schedule.observing(&provider, pools.len(), now);
            batch::spawn_observation(
                batch::ObservationRequest {
                    provider,
                    pools,
                    why,
                    seq: self.schedule.seq(),
                    started_at: now,
                },
                config.clone(),
                providers.clone(),
                self.journal.clone(),
                self.clock.clone(),
                self.observed_tx.clone(),
            );
        }
        let (counts, observing) = self.schedule.view();
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
        self.schedule.check_first_pass();
    }

    /// Every pool loaded at start has been looked at once (or the desired
    /// state did not load): the daemon is up and saying what it knows.
    pub fn first_pass_done(&self) -> bool {
        self.schedule.first_pass_done()
    }

    /// When the views should next be assembled; `None` while nothing changed.
    pub fn publish_due(&self) -> Option<std::time::Instant> {
        let fleets = self
            .fleet
            .status_due()
            .map(|t| t.max(std::time::Instant::now()));
        [self.views.due(self.schedule.is_idle()), fleets]
            .into_iter()
            .flatten()
            .min()
    }

    /// Assemble the views if something changed and the last assembly is old enough.
    pub fn publish(&mut self) {
        self.publish_fleets_if_due();
        if let Some(in_force) = &self.in_force {
            let published = self.views.publish(
                self.schedule.is_idle(),
                self.source.dir(),
                in_force,
                self.settings.dry_run,
            );
            // Each channel's pools, and the image each runs, follow the plans.
            if published && !in_force.config.channels.is_empty() {
                self.images_publish();
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn handle_pool(
        &mut self,
        p: &PoolPlan,
        journal: Option<RolloutState>,
        from: Option<crate::model::NodeTemplate>,
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
        let blocked_now = p.blocked().is_some();
        // A rollout already under way reports its own block (the executor's
        // event); a pool another daemon acts on is that daemon's to announce.
        let rolling = journal.is_some();
        if blocked_now && !rolling && self.authority.leads(&p.pool) && !self.blocks.known(&p.pool) {
            self.blocks.announced(&p.pool);
            let b = p.blocked().expect("checked");
            self.events.emit(crate::model::Event::new(
                now,
                p.pool.clone(),
                EventKind::BlockedByPolicy,
                b.with_next_window(),
            ));
        }
        let blocked_seconds =
            self.blocks
                .track(&self.metrics, &self.events, &p.pool, blocked_now, now);
        if let Some(until) = p.blocked().and_then(Hold::until) {
            self.look_again_at(&p.pool, until);
        }
        let board = self.board.clone();
        board.pool(&p.pool, &p.provider, |s| {
            s.revision = rev.clone();
            s.blocked_seconds = blocked_seconds;
            s.blocked = p.blocked().map(|b| BlockedStatus {
                reason: b.to_string(),
                until: b.until(),
                timezone: b.timezone().map(str::to_string),
                since: s.blocked.as_ref().map_or(now, |old| old.since),
            });
            s.pending = p.steps.iter().map(describe_step).collect();
            s.planned_at = Some(now);
        });

        let action = decision::choose_action(&PoolFacts {
            plan: p,
            journal: journal.as_ref().map(|r| &r.status),
            key: &key,
            worker: self.workers.key(&p.pool),
            may_act: self.authority.leads(&p.pool) && self.journal.may_act(&p.pool).is_ok(),
            standby_note: &self.authority.standby_note(&p.pool),
            dry_run: self.settings.dry_run,
            last_finished: self.workers.last_finished(&p.pool),
            retry_after: self.settings.retry_after,
            now,
        });
        match action {
            PoolAction::Busy => {}
            PoolAction::Supersede => {
                if self.workers.stop(&p.pool) {
                    tracing::info!(pool = %p.pool, "the desired state changed: stopping the current work at a safe point to supersede it");
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
            // A roll a FleetRollout governs starts once its admission (a
            // concurrency slot in its change) is journaled, at the end of
            // the batch; a roll back, or other steps, start at once.
            PoolAction::Spawn => match (self.fleet.governs(&p.pool), from) {
                (Some(_), Some(from))
                    if p.steps
                        .iter()
                        .any(|s| matches!(s, crate::plan::Step::Roll { rollback: None, .. })) =>
                {
                    self.ask_admission(p.clone(), key, from, config.clone(), providers.clone())
                }
                _ => self.spawn_worker(p.clone(), key, config.clone(), providers.clone()),
            },
        }
    }
}

pub(in crate::daemon) use crate::daemon::run::decision::steps;
