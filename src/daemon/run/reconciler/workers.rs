//! Workers: one task per pool with changes, bounded in number per provider;
//! what happens when one ends; and a human's pause or resume, carried out
//! between a pool's steps.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use tokio::sync::{Semaphore, mpsc};

use crate::daemon::run::queue::Trigger;
use crate::daemon::run::reconciler::{
    ControlAction, ControlRefusal, ControlRequest, ControlTarget, Done, Reconciler, steps,
};
use crate::daemon::views::board::{LastError, PoolState};
use crate::model::EventKind;
use crate::plan::PoolPlan;
use crate::provider::Providers;
use crate::reconcile::control;
use crate::reconcile::{ApplyContext, ApplyOutcome, apply_pool};
use crate::spec::Config;
use crate::sync::Stop;

struct Worker {
    key: String,
    provider: String,
    stop: Stop,
}

/// The pools' workers, and what is remembered of those that ended.
pub(super) struct Workers {
    running: HashMap<String, Worker>,
    /// Pauses asked for while the pool's worker was running.
    deferred: HashMap<String, (ControlAction, String)>,
    /// When each pool's last worker ended, and for which desired state.
    finished: HashMap<String, (String, Timestamp)>,
    /// Workers at once, per provider: a provider whose calls hang holds up
    /// only its own pools.
    semaphores: HashMap<String, Arc<Semaphore>>,
    parallelism: usize,
    done_tx: mpsc::UnboundedSender<Done>,
}

impl Workers {
    pub fn new(parallelism: usize, done_tx: mpsc::UnboundedSender<Done>) -> Workers {
        Workers {
            running: HashMap::new(),
            deferred: HashMap::new(),
            finished: HashMap::new(),
            semaphores: HashMap::new(),
            parallelism: parallelism.max(1),
            done_tx,
        }
    }

    pub fn len(&self) -> usize {
        self.running.len()
    }

    pub fn is_empty(&self) -> bool {
        self.running.is_empty()
    }

    pub fn runs(&self, pool: &str) -> bool {
        self.running.contains_key(pool)
    }

    /// The work key the pool's running worker was given.
    pub fn key(&self, pool: &str) -> Option<&str> {
        self.running.get(pool).map(|w| w.key.as_str())
    }

    /// Pools with a running worker.
    pub fn pools(&self) -> impl Iterator<Item = &String> {
        self.running.keys()
    }

    /// Ask the pool's worker to stop at its next safe point; whether one
    /// runs and had not been asked already.
    pub fn stop(&self, pool: &str) -> bool {
        match self.running.get(pool) {
            Some(w) if !w.stop.is_requested() => {
                w.stop.request();
                true
            }
            _ => false,
        }
    }

    /// Ask every worker to stop at its next safe point.
    pub fn stop_all(&self) {
        for w in self.running.values() {
            w.stop.request();
        }
    }

    /// The key and end of the pool's last worker.
    pub fn last_finished(&self, pool: &str) -> Option<(&str, Timestamp)> {
        self.finished.get(pool).map(|(k, at)| (k.as_str(), *at))
    }

    /// A human's decision: the pool may act again at once.
    pub fn clear_finished(&mut self, pool: &str) {
        self.finished.remove(pool);
    }

    pub fn forget(&mut self, pool: &str) {
        self.finished.remove(pool);
    }
}

impl Reconciler {
    pub(super) fn spawn_worker(
        &mut self,
        p: PoolPlan,
        key: String,
        config: Arc<Config>,
        providers: Arc<Providers>,
    ) {
        let stop = Stop::new();
        self.authority.worker(&p.pool, true);
        self.workers.running.insert(
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
        self.schedule.touched(&p.pool);
        let parallelism = self.workers.parallelism;
        let semaphore = self
            .workers
            .semaphores
            .entry(p.provider.clone())
            .or_insert_with(|| Arc::new(Semaphore::new(parallelism)))
            .clone();
        let journal = self.journal.clone();
        let inventory = self.inventory.clone();
        let inventory_store = self.inventory_store.clone();
        let events = self.events.clone();
        let clock = self.clock.clone();
        let done = self.workers.done_tx.clone();
        // A worker that ends without reporting (a panic) still leaves its
        // shard: else the shard could never be handed over.
        let guard = InFlight(
            self.authority
                .shards()
                .cloned()
                .map(|s| (s, p.pool.clone())),
        );
        tokio::spawn(async move {
            let mut guard = guard;
            // A worker still waiting for its turn when asked to stop (its
            // shard handed over, a pause) has done nothing: it ends at once.
            let permit = tokio::select! {
                p = semaphore.acquire_owned() => p.ok(),
                _ = stop.requested() => None,
            };
            if permit.is_none() && !stop.is_requested() {
                return;
            }
            let _permit = permit;
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
            // Reported: `finished` counts it out, after any deferred pause.
            guard.0 = None;
            let _ = done.send(Done {
                pool: p.pool.clone(),
                key,
                outcome,
                stopped: stop.is_requested(),
            });
        });
    }

    /// A worker ended: record how, carry out a pause that waited for it, and
    /// queue the pool (at once, or after the retry pause when it failed).
    pub async fn finished(&mut self, done: Done) {
        self.schedule.touched(&done.pool);
        let worker = self.workers.running.remove(&done.pool);
        let had_worker = worker.is_some();
        let provider = worker.map(|w| w.provider).unwrap_or_default();
        let now = self.clock.now();
        self.workers
            .finished
            .insert(done.pool.clone(), (done.key.clone(), now));
        if let Some((action, who)) = self.workers.deferred.remove(&done.pool) {
            let result = self.control_now(&done.pool, action, &who).await;
            match result {
                Ok(m) => tracing::info!(pool = %done.pool, "{m}"),
                Err(m) => tracing::warn!(pool = %done.pool, "{m}"),
            }
        }
        // Only now is nothing of the pool in flight (a pause that waited for
        // the worker is written): its shard may be handed over.
        if had_worker {
            self.authority.worker(&done.pool, false);
        }
        // A governed pool's roll that failed is a failed pool of its change.
        if done.outcome.failed
            && let Some(e) = done.outcome.errors.first()
            && self.fleet.governs(&done.pool).is_some()
        {
            self.fleet.failed(&done.pool, e.clone(), now);
            self.fleet_step().await;
        }
        match done.outcome.errors.first() {
            Some(e) => {
                tracing::error!(pool = %done.pool, "{e}");
                let retry = self.settings.retry_after;
                self.board.pool(&done.pool, &provider, |s| {
                    s.state = PoolState::Error;
                    s.message =
                        format!("retrying after {}s or on the next change", retry.as_secs());
                    s.last_error = Some(LastError {
                        at: now,
                        message: e.clone(),
                    });
                });
                // Retry after the pause, not in a tight loop.
                self.look_again_after(&done.pool, retry);
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
                self.enqueue(&done.pool, Trigger::PoolDone);
            }
        }
    }

    /// A human's pause or resume, through `/v1/pools/NAME/pause|resume`; the
    /// pool is planned again when it changed its rollout.
    pub async fn control(&mut self, req: ControlRequest) {
        let ControlRequest {
            target,
            action,
            who,
            reason,
            reply,
        } = req;
        let pool = match target {
            ControlTarget::Pool(pool) => pool,
            ControlTarget::Image { image, recall } => {
                let why = reason.unwrap_or_default();
                let answer = self.image_control(&image, recall, &who, &why).await;
                let answer = match answer {
                    Ok((message, changed)) => {
                        if changed {
                            // The channels' new images in force: loaded
                            // again at once (a recall waits for nothing).
                            self.reload(Trigger::Files).await;
                        }
                        Ok(message)
                    }
                    Err(e) => Err(ControlRefusal::Refused(e)),
                };
                let _ = reply.send(answer);
                return;
            }
            ControlTarget::Fleet(fleet) => {
                let answer = self.control_fleet(&fleet, action, &who, reason).await;
                let _ = reply.send(answer);
                return;
            }
        };
        // The name comes from a URL: it must be a pool of the desired state in
        // force before it names anything (a journal file, a worker).
        let known = self
            .in_force
            .as_ref()
            .is_some_and(|f| f.config.pools.contains_key(&pool));
        if !known {
            let shown: String = pool.chars().take(80).collect();
            tracing::warn!(who = %who, pool = ?shown, action = ?action, "control request for an unknown pool refused");
            let _ = reply.send(Err(ControlRefusal::Unknown(format!(
                "no pool named {shown:?} in the desired state in force"
            ))));
            return;
        }
        let why = reason.as_deref().unwrap_or("no reason given");
        tracing::info!(who = %who, pool = %pool, action = ?action, reason = %why, "control request");
        let who = format!("{who}: {why}");
        if let Some(reason) = (!self.authority.leads(&pool))
            .then(|| self.authority.standby_note(&pool))
            .or_else(|| self.journal.may_act(&pool).err().map(|f| f.0))
        {
            let _ = reply.send(Err(ControlRefusal::Refused(format!(
                "nodepool.{pool}: this daemon does not act on it ({reason}); ask the daemon that does"
            ))));
            return;
        }
        if let Some(w) = self.workers.running.get(&pool) {
            let answer = match action {
                ControlAction::Pause => {
                    w.stop.request();
                    self.workers.deferred.insert(pool.clone(), (action, who));
                    Ok(format!(
                        "nodepool.{pool}: pausing: steps in flight finish, then the rollout stops"
                    ))
                }
                ControlAction::Resume => Err(ControlRefusal::Refused(format!(
                    "nodepool.{pool}: its rollout is running; nothing to resume"
                ))),
            };
            let _ = reply.send(answer);
            return;
        }
        let answer = self.control_now(&pool, action, &who).await;
        let changed = answer.is_ok();
        let _ = reply.send(answer.map_err(|e| ControlRefusal::Refused(e.to_string())));
        if changed {
            self.enqueue(&pool, Trigger::Control);
        }
    }

    pub(super) async fn control_now(
        &mut self,
        pool: &str,
        action: ControlAction,
        who: &str,
    ) -> Result<String, crate::reconcile::control::ControlError> {
        let now = self.clock.now();
        let result = match action {
            ControlAction::Pause => control::pause(&self.journal, pool, who, now).await,
            ControlAction::Resume => control::resume(&self.journal, pool, now).await,
        };
        if let Ok(message) = &result {
            // A human's decision: the pool may act again at once, and a look
            // begun before it does not count.
            self.workers.clear_finished(pool);
            self.schedule.touched(pool);
            self.events.emit(crate::model::Event::new(
                now,
                pool.to_string(),
                match action {
                    ControlAction::Pause => EventKind::RolloutPaused,
                    ControlAction::Resume => EventKind::RolloutResumed,
                },
                format!("{message} (by {who})"),
            ));
        }
        result
    }

    /// Ask every worker to stop at its next safe point.
    pub fn stop_all(&self) {
        self.workers.stop_all();
    }

    /// Look at a pool again `after` from now at the latest.
    pub(super) fn look_again_after(&mut self, pool: &str, after: Duration) {
        let now = self.clock.now();
        let at = now
            .saturating_add(jiff::SignedDuration::try_from(after).unwrap_or_default())
            .unwrap_or(now);
        self.schedule.add_after(pool, at);
    }
}

/// Counts a worker out of its shard if it ends without reporting.
struct InFlight(Option<(Arc<crate::ha::shards::Shards>, String)>);

impl Drop for InFlight {
    fn drop(&mut self) {
        if let Some((shards, pool)) = &self.0 {
            shards.worker(pool, false);
        }
    }
}
