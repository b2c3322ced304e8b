//! The reconcile loop: every trigger (a saved file, a commit, SIGHUP, the
//! periodic resync, a pool's worker finishing, a human's pause) leads to one
//! load-observe-plan round; pools with changes get a worker each, bounded in
//! number, one per pool. A new desired state for a pool whose worker is running
//! stops that worker at a safe point and starts a new one, whose executor
//! supersedes the journal's rollout.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use tokio::sync::{Semaphore, mpsc, oneshot};

use super::board::{BlockedStatus, Board, LastError, PoolState};
use super::metrics::{
    BlockedLabels, Metrics, PoolLabels, PoolStateLabels, ReconcileLabels, RolloutLabels,
    StateLabels,
};
use super::source::ConfigSource;
use crate::clock::Clock;
use crate::model::EventKind;
use crate::model::{NodeState, PoolSpec};
use crate::plan::render::{Revision, Source, Style, render_text};
use crate::plan::{self, Headline, Plan, PlanOptions, PoolPlan};
use crate::provider::{CallObserver, Providers};
use crate::reconcile::apply::describe_step;
use crate::reconcile::control;
use crate::reconcile::{ApplyContext, ApplyOutcome, EventSink, Stop, apply_pool, observe};
use crate::rollout::{RolloutState, Status};
use crate::spec::{Config, Limits};
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
    /// The periodic full resync, or a wake-up (a window opening, a retry due).
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
    pub pool: String,
    pub action: ControlAction,
    pub who: String,
    pub reply: oneshot::Sender<Result<String, String>>,
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
    /// The latest plan, for `/v1/plan`.
    pub latest_plan: Arc<Mutex<Option<serde_json::Value>>>,
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
        self.export_plan(&plan, revision.as_ref());
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
        for (name, pool) in &observed.pools {
            let target = config
                .pools
                .get(name)
                .map(|e| PoolSpec::from_doc(&e.doc).template.hash())
                .unwrap_or_else(|| pool.template.hash());
            self.board.observed(
                name,
                crate::reconcile::Counts::of(pool, target),
                target,
                now,
            );
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

    async fn reload(&mut self) {
        let source = self.source.clone();
        let loaded = match tokio::task::spawn_blocking(move || {
            let head = source.head();
            (source.load(&Limits::default()), head)
        })
        .await
        {
            Ok(l) => l,
            Err(e) => {
                tracing::error!("loading the desired state panicked: {e}");
                return;
            }
        };
        let (loaded, head) = loaded;
        self.head = head;
        let now = self.clock.now();
        for d in &loaded.report.diagnostics {
            // file:line:col for every problem, as `poolwright validate` prints it.
            if d.is_error() {
                tracing::error!("{d}");
            } else {
                tracing::warn!("{d}");
            }
        }
        let Some(config) = loaded.report.config else {
            let errors: Vec<String> = loaded.report.errors().map(|d| d.to_string()).collect();
            self.metrics.config_load_errors.inc();
            self.metrics.config_valid.set(0);
            tracing::error!(
                errors = errors.len(),
                "the desired state in {} is invalid; nothing changes: {}",
                self.source.dir().display(),
                if self.in_force.is_some() {
                    "the last good desired state stays in force"
                } else {
                    "no desired state is in force yet"
                }
            );
            self.board.update(|d| {
                d.config.valid = false;
                d.config.errors = errors;
                d.config.last_load_at = Some(now);
                d.config.rejected_revision = loaded.revision.clone();
            });
            return;
        };
        self.metrics.config_valid.set(1);
        let changed = self
            .in_force
            .as_ref()
            .is_none_or(|f| *f.config != config || f.revision != loaded.revision);
        let observer: Arc<dyn CallObserver> = self.metrics.clone();
        let providers_changed = self
            .in_force
            .as_ref()
            .is_none_or(|f| f.config.providers != config.providers);
        let providers = if providers_changed {
            Arc::new(Providers::rebuild(
                &config,
                &self.state.root,
                self.clock.clone(),
                Some(observer),
                self.in_force.as_ref().map(|f| f.providers.as_ref()),
            ))
        } else {
            self.in_force
                .as_ref()
                .map(|f| f.providers.clone())
                .unwrap_or_else(|| {
                    Arc::new(Providers::rebuild(
                        &config,
                        &self.state.root,
                        self.clock.clone(),
                        Some(observer),
                        None,
                    ))
                })
        };
        for (name, e) in &providers.failed {
            tracing::error!(provider = %name, "provider unavailable: {e}");
        }
        self.events
            .set_revision(loaded.revision.as_ref().map(Revision::short));
        if changed {
            tracing::info!(
                revision = loaded
                    .revision
                    .as_ref()
                    .map(Revision::short)
                    .unwrap_or_default(),
                pools = config.pools.len(),
                "desired state loaded"
            );
        }
        let revision = loaded.revision.clone();
        self.board.update(|d| {
            d.config.valid = true;
            d.config.errors.clear();
            d.config.last_load_at = Some(now);
            d.config.rejected_revision = None;
            if changed {
                d.config.revision = revision.clone();
                d.config.in_force_since = Some(now);
            }
        });
        self.in_force = Some(InForce {
            config: Arc::new(config),
            providers,
            revision,
        });
    }

    /// Dry-run exports what it would do; every mode keeps the latest plan for `/v1/plan`.
    fn export_plan(&mut self, plan: &Plan, revision: Option<&Revision>) {
        let source = Source {
            dir: self.source.dir().display().to_string(),
            revision: revision.cloned(),
        };
        let json = plan::render::render_json(plan, &source);
        *self.latest_plan.lock().unwrap_or_else(|p| p.into_inner()) = Some(json);
        if self.settings.dry_run && plan.has_changes() {
            let text = render_text(plan, &source, Style { color: false });
            if self.last_logged_plan.as_deref() != Some(text.as_str()) {
                tracing::info!(dry_run = true, "would apply:\n{text}");
                self.last_logged_plan = Some(text);
            }
        }
    }

    fn record_nodes(&self, observed: &plan::Observed) {
        self.metrics.nodes.clear();
        for (name, pool) in &observed.pools {
            let mut by_state: BTreeMap<&str, i64> = [
                ("pending", 0),
                ("healthy", 0),
                ("unhealthy", 0),
                ("terminating", 0),
            ]
            .into();
            for n in &pool.nodes {
                let s = match n.state {
                    NodeState::Pending => "pending",
                    NodeState::Healthy => "healthy",
                    NodeState::Unhealthy => "unhealthy",
                    NodeState::Terminating => "terminating",
                };
                *by_state.entry(s).or_default() += 1;
            }
            for (state, n) in by_state {
                self.metrics
                    .nodes
                    .get_or_create(&PoolStateLabels {
                        pool: name.clone(),
                        state: state.to_string(),
                    })
                    .set(n);
            }
        }
    }

    fn record_pool_states(&self) {
        let doc = self.board.snapshot();
        self.metrics.pools.clear();
        for s in PoolState::ALL {
            let n = doc.pools.iter().filter(|p| p.state == s).count();
            self.metrics
                .pools
                .get_or_create(&StateLabels {
                    state: s.as_str().to_string(),
                })
                .set(n as i64);
        }
        self.metrics.blocked.clear();
        self.metrics.next_window_start.clear();
        for p in &doc.pools {
            if let Some(b) = &p.blocked {
                self.metrics
                    .blocked
                    .get_or_create(&BlockedLabels {
                        pool: p.name.clone(),
                        reason: b.reason.clone(),
                    })
                    .set(1);
                if let Some(until) = b.until {
                    self.metrics
                        .next_window_start
                        .get_or_create(&PoolLabels {
                            pool: p.name.clone(),
                        })
                        .set(until.as_second());
                }
            }
            if let Some(r) = &p.rollout {
                for (kind, n) in [
                    ("desired", r.counts.desired),
                    ("total", r.counts.total),
                    ("available", r.counts.available),
                    ("updated", r.counts.updated),
                    ("outdated", r.counts.outdated),
                ] {
                    self.metrics
                        .rollout_nodes
                        .get_or_create(&RolloutLabels {
                            pool: p.name.clone(),
                            nodes: kind.to_string(),
                        })
                        .set(n as i64);
                }
            }
        }
    }

    fn wake_no_later_than(&mut self, t: Timestamp) {
        self.wake_at = Some(self.wake_at.map_or(t, |w| w.min(t)));
    }

    /// Account the time a pool has been blocked by its policy, and whether it still is.
    fn track_blocked(&mut self, pool: &str, blocked_now: bool, now: Timestamp) -> f64 {
        let labels = PoolLabels {
            pool: pool.to_string(),
        };
        if let Some(since) = self.blocked_since.get(pool).copied() {
            let secs = now.duration_since(since).as_secs_f64().max(0.0);
            self.metrics
                .blocked_seconds
                .get_or_create(&labels)
                .inc_by(secs);
            if blocked_now {
                self.blocked_since.insert(pool.to_string(), now);
            } else {
                self.blocked_since.remove(pool);
                if !self.announced_blocked.remove(pool) {
                    return self.metrics.blocked_seconds.get_or_create(&labels).get();
                }
                self.events.emit(crate::reconcile::Event {
                    ts: now,
                    pool: pool.to_string(),
                    event: EventKind::ResumedInWindow,
                    node: None,
                    counts: None,
                    message: "the disruption policy allows disruptive steps again".into(),
                    revision: None,
                });
            }
        } else if blocked_now {
            self.blocked_since.insert(pool.to_string(), now);
        }
        self.metrics.blocked_seconds.get_or_create(&labels).get()
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

        if let Some(w) = self.workers.get(&p.pool) {
            if w.key != key && !w.stop.is_requested() {
                tracing::info!(pool = %p.pool, "the desired state changed: stopping the current work at a safe point to supersede it");
                w.stop.request();
                board.pool(&p.pool, &p.provider, |s| {
                    s.message =
                        "superseding: the current rollout stops at its next safe point".into();
                });
            }
            return;
        }
        let set = |state: PoolState, message: String| {
            board.pool(&p.pool, &p.provider, |s| {
                s.state = state;
                s.message = message;
            })
        };
        // A rollout waiting for a human is shown as such and left alone.
        if let Some(r) = &journal {
            match &r.status {
                Status::Paused { reason } => {
                    set(
                        PoolState::Paused,
                        format!(
                            "rollout paused ({reason}); `poolwright rollout resume {}` continues it",
                            p.pool
                        ),
                    );
                    return;
                }
                Status::Degraded { reason } => {
                    set(
                        PoolState::Degraded,
                        format!(
                            "rollout Degraded: {reason}; `poolwright rollout resume {}` after looking into it",
                            p.pool
                        ),
                    );
                    return;
                }
                Status::RolledBack { reason, failed } if r.target == *failed && p.has_changes() => {
                    set(
                        PoolState::Degraded,
                        format!(
                            "rolled back ({reason}); `poolwright rollout resume {}` allows the template again",
                            p.pool
                        ),
                    );
                    return;
                }
                _ => {}
            }
        }
        match p.headline {
            Headline::Error => {
                set(PoolState::Error, p.reason.clone());
                board.pool(&p.pool, &p.provider, |s| {
                    s.last_error = Some(LastError {
                        at: now,
                        message: p.reason.clone(),
                    })
                });
                return;
            }
            Headline::LeftAlone => {
                set(PoolState::LeftAlone, p.reason.clone());
                return;
            }
            _ => {}
        }
        if !p.has_changes() {
            match &p.blocked {
                Some(b) => set(
                    PoolState::Blocked,
                    match b.until {
                        Some(u) => format!("{} until {u}", b.reason),
                        None => b.reason.clone(),
                    },
                ),
                None => set(PoolState::InSync, "matches the desired state".into()),
            }
            return;
        }
        if !self.leading || self.journal.may_act().is_err() {
            set(
                PoolState::Pending,
                format!("{}; the leader would {}", self.standby_note, steps(p)),
            );
            return;
        }
        if self.settings.dry_run {
            set(PoolState::Pending, format!("dry-run: would {}", steps(p)));
            return;
        }
        if let Some((last_key, at)) = self.finished.get(&p.pool)
            && *last_key == key
        {
            let due = at
                .saturating_add(
                    SignedDuration::try_from(self.settings.retry_after).unwrap_or_default(),
                )
                .unwrap_or(*at);
            if now < due {
                self.wake_no_later_than(due);
                return;
            }
        }
        self.spawn_worker(p.clone(), key, config.clone(), providers.clone());
    }

    fn spawn_worker(
        &mut self,
        p: PoolPlan,
        key: String,
        config: Arc<Config>,
        providers: Arc<Providers>,
    ) {
        let stop = Stop::new();
        self.workers.insert(
            p.pool.clone(),
            Worker {
                key: key.clone(),
                provider: p.provider.clone(),
                stop: stop.clone(),
            },
        );
        self.board.pool(&p.pool, &p.provider, |s| {
            s.state = PoolState::Applying;
            s.message = steps(&p);
        });
        let semaphore = self.semaphore.clone();
        let journal = self.journal.clone();
        let inventory = self.inventory.clone();
        let inventory_store = self.inventory_store.clone();
        let events = self.events.clone();
        let clock = self.clock.clone();
        let done = self.done_tx.clone();
        tokio::spawn(async move {
            let Ok(_permit) = semaphore.acquire_owned().await else {
                return;
            };
            let progress = |line: &str| tracing::info!("{line}");
            let outcome = if stop.is_requested() {
                ApplyOutcome::default()
            } else {
                let ctx = ApplyContext {
                    config: &config,
                    journal: &journal,
                    override_policy: false,
                    providers: &providers,
                    inventory: &inventory,
                    inventory_store: &inventory_store,
                    events: &events,
                    clock: clock.as_ref(),
                    progress: &progress,
                    stop: &stop,
                };
                apply_pool(&p, &ctx).await
            };
            let _ = done.send(Done {
                pool: p.pool.clone(),
                key,
                outcome,
                stopped: stop.is_requested(),
            });
        });
    }

    /// A worker ended: record how, and carry out a pause that waited for it.
    /// Returns whether the pool should be planned again at once.
    pub async fn finished(&mut self, done: Done) -> bool {
        let provider = self
            .workers
            .remove(&done.pool)
            .map(|w| w.provider)
            .unwrap_or_default();
        let now = self.clock.now();
        self.finished
            .insert(done.pool.clone(), (done.key.clone(), now));
        if let Some((action, who)) = self.deferred.remove(&done.pool) {
            let result = self.control_now(&done.pool, action, &who).await;
            match result {
                Ok(m) => tracing::info!(pool = %done.pool, "{m}"),
                Err(m) => tracing::warn!(pool = %done.pool, "{m}"),
            }
        }
        match done.outcome.errors.first() {
            Some(e) => {
                tracing::error!(pool = %done.pool, "{e}");
                self.board.pool(&done.pool, &provider, |s| {
                    s.state = PoolState::Error;
                    s.message = format!(
                        "retrying after {}s or on the next change",
                        self.settings.retry_after.as_secs()
                    );
                    s.last_error = Some(LastError {
                        at: now,
                        message: e.clone(),
                    });
                });
                // Retry after the pause, not in a tight loop.
                self.wake_no_later_than(
                    now.saturating_add(
                        SignedDuration::try_from(self.settings.retry_after).unwrap_or_default(),
                    )
                    .unwrap_or(now),
                );
                false
            }
            None => {
                self.board.pool(&done.pool, &provider, |s| {
                    if s.state == PoolState::Applying {
                        s.message = if done.stopped {
                            "stopped at a safe point".into()
                        } else {
                            "applied".into()
                        };
                    }
                });
                true
            }
        }
    }

    /// A human's pause or resume, through `/v1/pools/NAME/pause|resume`.
    /// Returns whether the pools should be planned again.
    pub async fn control(&mut self, req: ControlRequest) -> bool {
        let ControlRequest {
            pool,
            action,
            who,
            reply,
        } = req;
        if !self.leading {
            let _ = reply.send(Err(format!(
                "nodepool.{pool}: this daemon is a standby ({}); ask the leader",
                self.standby_note
            )));
            return false;
        }
        if let Some(w) = self.workers.get(&pool) {
            let answer = match action {
                ControlAction::Pause => {
                    w.stop.request();
                    self.deferred.insert(pool.clone(), (action, who));
                    Ok(format!(
                        "nodepool.{pool}: pausing: steps in flight finish, then the rollout stops"
                    ))
                }
                ControlAction::Resume => Err(format!(
                    "nodepool.{pool}: its rollout is running; nothing to resume"
                )),
            };
            let _ = reply.send(answer);
            return false;
        }
        let answer = self.control_now(&pool, action, &who).await;
        let changed = answer.is_ok();
        let _ = reply.send(answer);
        changed
    }

    async fn control_now(
        &mut self,
        pool: &str,
        action: ControlAction,
        who: &str,
    ) -> Result<String, String> {
        let now = self.clock.now();
        let result = match action {
            ControlAction::Pause => control::pause(&self.journal, pool, who, now).await,
            ControlAction::Resume => control::resume(&self.journal, pool, now).await,
        };
        if let Ok(message) = &result {
            // A human's decision: the pool may act again at once.
            self.finished.remove(pool);
            self.events.emit(crate::reconcile::Event {
                ts: now,
                pool: pool.to_string(),
                event: match action {
                    ControlAction::Pause => EventKind::RolloutPaused,
                    ControlAction::Resume => EventKind::RolloutResumed,
                },
                node: None,
                counts: None,
                message: format!("{message} (by {who})"),
                revision: None,
            });
        }
        result
    }

    /// Ask every worker to stop at its next safe point.
    pub fn stop_all(&self) {
        for w in self.workers.values() {
            w.stop.request();
        }
    }
}

/// A pool's due steps, in one line.
fn steps(p: &PoolPlan) -> String {
    p.steps
        .iter()
        .map(describe_step)
        .collect::<Vec<_>>()
        .join(", then ")
}
