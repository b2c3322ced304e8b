//! The reconcile loop: every trigger (a saved file, a commit, SIGHUP, the
//! periodic resync, a pool's worker finishing, a human's pause) leads to one
//! load-observe-plan round; pools with changes get a worker each, bounded in
//! number, one per pool. A new desired state for a pool whose worker is running
//! stops that worker at a safe point and starts a new one, whose executor
//! supersedes the journal's rollout.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use tokio::sync::{Semaphore, mpsc, oneshot};

mod projection;
mod reload;
mod workers;

use super::board::{BlockedStatus, Board, LastError, PoolState};
use super::decision::{self, PoolAction, PoolFacts};
use super::feed::Feed;
use super::metrics::{Metrics, ReconcileLabels};
use super::source::ConfigSource;
use crate::clock::Clock;
use crate::model::EventKind;
use crate::model::{NodeState, PoolSpec};
use crate::plan::render::{Revision, Source, Style, render_text};
use crate::plan::{self, Plan, PlanOptions, PoolPlan};
use crate::provider::Providers;
use crate::reconcile::apply::describe_step;
use crate::reconcile::{ApplyOutcome, EventSink, Stop, observe};
use crate::rollout::RolloutState;
use crate::spec::Config;
use crate::store::Journal;
use crate::store::{Inventory, InventoryStore, StateDir};

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
}

/// Where the journal and the inventory live.
pub struct Stores {
    pub journal: Journal,
    pub inventory_store: Arc<InventoryStore>,
    /// The inventory as read at start (empty when `shared`: read every round).
    pub inventory: Inventory,
    /// Shared with other daemons through the cluster (`--ha kubernetes`):
    /// this one acts only while it holds the lease.
    pub shared: bool,
}

/// The desired state in force: the last one that loaded cleanly.
struct InForce {
    config: Arc<Config>,
    providers: Arc<Providers>,
    revision: Option<Revision>,
}

/// The latest plan and what it was made from (`/v1/plan`, the web page).
pub struct Latest {
    pub json: serde_json::Value,
    pub plan: Plan,
    pub source: Source,
    pub config: Arc<Config>,
    /// Each provider's poll interval (what a forecast's executor looks at).
    pub polls: std::collections::BTreeMap<String, Duration>,
}

pub type LatestPlan = Arc<Mutex<Option<Arc<Latest>>>>;

struct Worker {
    key: String,
    provider: String,
    stop: Stop,
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
    /// Whether this daemon may act: always, except a standby under `--ha`.
    leading: bool,
    /// The inventory must be read again before acting: under `--ha`, another
    /// daemon may have written it (a standby re-reads it every round; a new
    /// leader once, before its first step).
    inventory_stale: bool,
    /// Why a standby does not act, for pool messages.
    standby_note: String,
    in_force: Option<InForce>,
    /// HEAD when the desired state was last loaded (git mode).
    head: Option<String>,
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
    announced_blocked: std::collections::HashSet<String>,
    semaphore: Arc<Semaphore>,
    done_tx: mpsc::UnboundedSender<Done>,
    last_logged_plan: Option<String>,
    /// The latest plan, for `/v1/plan` and the web page.
    pub latest_plan: LatestPlan,
    /// Earliest instant something becomes due (a window opens, a retry).
    wake_at: Option<Timestamp>,
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
        stores: Stores,
    ) -> anyhow::Result<Reconciler> {
        Ok(Reconciler {
            semaphore: Arc::new(Semaphore::new(settings.parallelism.max(1))),
            settings,
            source,
            journal: Arc::new(stores.journal),
            inventory_store: stores.inventory_store,
            leading: !stores.shared,
            inventory_stale: stores.shared,
            standby_note: "waiting for the leader lease".into(),
            state,
            clock,
            board,
            metrics,
            events,
            feed,
            inventory: Arc::new(Mutex::new(stores.inventory)),
            in_force: None,
            head: None,
            workers: HashMap::new(),
            deferred: HashMap::new(),
            finished: HashMap::new(),
            blocked_since: HashMap::new(),
            announced_blocked: Default::default(),
            done_tx,
            last_logged_plan: None,
            latest_plan: Arc::new(Mutex::new(None)),
            wake_at: None,
        })
    }

    /// Under `--ha`: this daemon took the lease (it reads the inventory and
    /// journals the last leader left, then acts) or lost it (every worker stops
    /// at once; the fence has already refused their next step).
    pub fn set_leading(&mut self, leading: bool, note: String) {
        if self.leading && !leading {
            self.stop_all();
        }
        self.leading = leading;
        self.inventory_stale = true;
        self.standby_note = note;
    }

    pub fn busy_pools(&self) -> usize {
        self.workers.len()
    }

    pub fn wake_at(&self) -> Option<Timestamp> {
        self.wake_at
    }

    /// Whether a watcher event can change what is loaded: in git mode, only a
    /// new HEAD commit can.
    pub fn files_changed(&self) -> bool {
        match &self.source {
            ConfigSource::WorkTree { .. } => true,
            ConfigSource::GitHead { .. } => self.source.head() != self.head,
        }
    }

    /// One round: (re)load if the trigger calls for it, observe, plan, act.
    pub async fn reconcile(&mut self, trigger: Trigger, noticed_at: Timestamp) {
        let started = std::time::Instant::now();
        let now = self.clock.now();
        self.board.update(|d| {
            d.reconcile.count += 1;
            d.reconcile.last_trigger = Some(trigger.as_str().to_string());
            d.reconcile.last_triggered_at = Some(noticed_at);
            d.reconcile.last_started_at = Some(now);
        });
        self.metrics
            .reconciles
            .get_or_create(&ReconcileLabels {
                trigger: trigger.as_str().to_string(),
            })
            .inc();
        tracing::info!(trigger = trigger.as_str(), "reconcile started");
        if trigger.reloads() {
            self.reload().await;
        }
        let Some(in_force) = &self.in_force else {
            self.finish_round(started);
            return;
        };
        let config = in_force.config.clone();
        let providers = in_force.providers.clone();
        let revision = in_force.revision.clone();
        if self.inventory_stale && self.workers.is_empty() {
            match self.inventory_store.load().await {
                Ok(inv) => {
                    *self.inventory.lock().unwrap_or_else(|p| p.into_inner()) = inv;
                    self.inventory_stale = !self.leading;
                }
                Err(e) => {
                    self.round_failed(started, format!("{e:#}"));
                    return;
                }
            }
        }
        // Every rollout's journal: a pool with one is resumed, or waits for a human.
        let journals = match self.journal.all().await {
            Ok(j) => j,
            Err(e) => {
                self.round_failed(started, format!("{e:#}"));
                return;
            }
        };
        self.board.update(|d| d.reconcile.error = None);
        let inventory = self
            .inventory
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let mut observed = observe(&config, &inventory, &providers, self.clock.as_ref()).await;
        observed.rollouts = journals.clone();
        let now = self.clock.now();
        let plan = plan::plan(
            &config,
            &observed,
            &inventory,
            &PlanOptions {
                prune: self.settings.prune,
                now,
                override_disruption: false,
            },
        );
        let polls = config
            .providers
            .keys()
            .filter_map(|n| Some((n.clone(), providers.get(n)?.capabilities().poll_interval)))
            .collect();
        self.export_plan(&plan, revision.as_ref(), &config, polls);
        let overrides = crate::store::overrides::recent(&self.state.root, 20);
        self.board.update(|d| d.overrides = overrides);
        self.record_nodes(&observed);
        self.wake_at = None;
        // Nodes booting or going away: look again soon, so status follows them.
        if observed.pools.values().any(|p| {
            p.nodes
                .iter()
                .any(|n| matches!(n.state, NodeState::Pending | NodeState::Terminating))
        }) {
            self.wake_no_later_than(
                now.saturating_add(SignedDuration::from_secs(1))
                    .unwrap_or(now),
            );
        }
        for p in &plan.pools {
            let journal = journals.get(&p.pool).and_then(|j| j.as_ref().ok()).cloned();
            self.handle_pool(p, journal, &config, &providers, revision.as_ref(), now);
        }
        // The observation's last use: the page's copy takes it, not a clone.
        for (name, pool) in observed.pools {
            let target = config
                .pools
                .get(&name)
                .map(|e| PoolSpec::from_doc(&e.doc).template.hash())
                .unwrap_or_else(|| pool.template.hash());
            self.board.observed(
                &name,
                crate::reconcile::Counts::of(&pool, target),
                target,
                now,
            );
            self.feed.observed(Arc::new(pool), target);
        }
        let known: std::collections::BTreeSet<&str> =
            plan.pools.iter().map(|p| p.pool.as_str()).collect();
        self.board.retain_pools(|name| known.contains(name));
        self.finish_round(started);
    }

    /// The journals or the inventory could not be read: nothing is planned or
    /// done (a rollout might be in flight); say so, and try again soon.
    fn round_failed(&mut self, started: std::time::Instant, error: String) {
        let message = format!("{error}; nothing is planned or done until it can be read");
        tracing::error!("{message}");
        self.board.update(|d| d.reconcile.error = Some(message));
        let now = self.clock.now();
        self.wake_no_later_than(
            now.saturating_add(
                SignedDuration::try_from(self.settings.retry_after).unwrap_or_default(),
            )
            .unwrap_or(now),
        );
        self.finish_round(started);
    }

    fn finish_round(&mut self, started: std::time::Instant) {
        self.metrics
            .reconcile_seconds
            .observe(started.elapsed().as_secs_f64());
        let now = self.clock.now();
        self.board
            .update(|d| d.reconcile.last_finished_at = Some(now));
        self.record_pool_states();
    }

    /// Dry-run exports what it would do; every mode keeps the latest plan for `/v1/plan`.
    fn export_plan(
        &mut self,
        plan: &Plan,
        revision: Option<&Revision>,
        config: &Arc<Config>,
        polls: std::collections::BTreeMap<String, Duration>,
    ) {
        let source = Source {
            dir: self.source.dir().display().to_string(),
            revision: revision.cloned(),
        };
        let json = plan::render::render_json(plan, &source);
        *self.latest_plan.lock().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(Latest {
            json,
            plan: plan.clone(),
            source: source.clone(),
            config: config.clone(),
            polls,
        }));
        if self.settings.dry_run && plan.has_changes() {
            let text = render_text(plan, &source, Style { color: false });
            if self.last_logged_plan.as_deref() != Some(text.as_str()) {
                tracing::info!(dry_run = true, "would apply:\n{text}");
                self.last_logged_plan = Some(text);
            }
        }
    }

    fn wake_no_later_than(&mut self, t: Timestamp) {
        self.wake_at = Some(self.wake_at.map_or(t, |w| w.min(t)));
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
        // A rollout already under way reports its own block (the executor's event).
        let rolling = journal.is_some();
        if blocked_now && !rolling && !self.blocked_since.contains_key(&p.pool) {
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
            });
        }
        let blocked_seconds = self.track_blocked(&p.pool, blocked_now, now);
        if let Some(until) = p.blocked.as_ref().and_then(|b| b.until) {
            self.wake_no_later_than(until);
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
        });

        let worker = self.workers.get(&p.pool);
        let action = decision::decide(&PoolFacts {
            plan: p,
            journal: journal.as_ref().map(|r| &r.status),
            key: &key,
            worker: worker.map(|w| w.key.as_str()),
            may_act: self.leading && self.journal.may_act().is_ok(),
            standby_note: &self.standby_note,
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
            PoolAction::RetryAt(due) => self.wake_no_later_than(due),
            PoolAction::Spawn => {
                self.spawn_worker(p.clone(), key, config.clone(), providers.clone())
            }
        }
    }
}

pub(super) use super::decision::steps;
