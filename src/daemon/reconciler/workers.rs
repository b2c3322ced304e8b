//! Workers: one task per pool with changes, bounded in number; what happens
//! when one ends; and a human's pause or resume, carried out between a
//! pool's steps.

use std::sync::Arc;

use super::{ControlAction, ControlRefusal, ControlRequest, Done, Reconciler, Worker, steps};
use crate::daemon::board::{LastError, PoolState};
use crate::model::EventKind;
use crate::plan::PoolPlan;
use crate::provider::Providers;
use crate::reconcile::control;
use crate::reconcile::{ApplyContext, ApplyOutcome, Stop, apply_pool};
use crate::spec::Config;

impl Reconciler {
    pub(super) fn spawn_worker(
        &mut self,
        p: PoolPlan,
        key: String,
        config: Arc<Config>,
        providers: Arc<Providers>,
    ) {
        let stop = Stop::new();
        if let Some(shards) = &self.shards {
            shards.worker(&p.pool, true);
        }
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
        self.touched(&p.pool);
        let parallelism = self.settings.parallelism.max(1);
        let semaphore = self
            .semaphores
            .entry(p.provider.clone())
            .or_insert_with(|| Arc::new(tokio::sync::Semaphore::new(parallelism)))
            .clone();
        let journal = self.journal.clone();
        let inventory = self.inventory.clone();
        let inventory_store = self.inventory_store.clone();
        let events = self.events.clone();
        let clock = self.clock.clone();
        let done = self.done_tx.clone();
        // A worker that ends without reporting (a panic) still leaves its
        // shard: else the shard could never be handed over.
        let guard = InFlight(self.shards.clone().map(|s| (s, p.pool.clone())));
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
        self.touched(&done.pool);
        let worker = self.workers.remove(&done.pool);
        let had_worker = worker.is_some();
        let provider = worker.map(|w| w.provider).unwrap_or_default();
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
        // Only now is nothing of the pool in flight (a pause that waited for
        // the worker is written): its shard may be handed over.
        if had_worker && let Some(shards) = &self.shards {
            shards.worker(&done.pool, false);
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
                self.look_again_after(&done.pool, self.settings.retry_after);
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
                self.enqueue(&done.pool, super::Trigger::PoolDone);
            }
        }
    }

    /// A human's pause or resume, through `/v1/pools/NAME/pause|resume`; the
    /// pool is planned again when it changed its rollout.
    pub async fn control(&mut self, req: ControlRequest) {
        let ControlRequest {
            pool,
            action,
            who,
            reason,
            reply,
        } = req;
        // The name comes from a URL: it must be a pool of the desired state in
        // force before it names anything (a journal file, a worker).
        let known = self
            .in_force
            .as_ref()
            .is_some_and(|f| f.config.pools.contains_key(&pool));
        if !known {
            let shown: String = pool.chars().take(80).collect();
            tracing::warn!(who = %who, pool = ?shown, action = ?action, "control request for an unknown pool refused");
            let _ = reply.send(Err(ControlRefusal::UnknownPool(format!(
                "no pool named {shown:?} in the desired state in force"
            ))));
            return;
        }
        let why = reason.as_deref().unwrap_or("no reason given");
        tracing::info!(who = %who, pool = %pool, action = ?action, reason = %why, "control request");
        let who = format!("{who}: {why}");
        if let Some(reason) = (!self.leads(&pool))
            .then(|| self.standby_note(&pool))
            .or_else(|| self.journal.may_act(&pool).err())
        {
            let _ = reply.send(Err(ControlRefusal::Refused(format!(
                "nodepool.{pool}: this daemon does not act on it ({reason}); ask the daemon that does"
            ))));
            return;
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
                ControlAction::Resume => Err(ControlRefusal::Refused(format!(
                    "nodepool.{pool}: its rollout is running; nothing to resume"
                ))),
            };
            let _ = reply.send(answer);
            return;
        }
        let answer = self.control_now(&pool, action, &who).await;
        let changed = answer.is_ok();
        let _ = reply.send(answer.map_err(ControlRefusal::Refused));
        if changed {
            self.enqueue(&pool, super::Trigger::Control);
        }
    }

    pub(super) async fn control_now(
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
            // A human's decision: the pool may act again at once, and a look
            // begun before it does not count.
            self.finished.remove(pool);
            self.touched(pool);
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
                by: None,
            });
        }
        result.map_err(|e| e.to_string())
    }

    /// Ask every worker to stop at its next safe point.
    pub fn stop_all(&self) {
        for w in self.workers.values() {
            w.stop.request();
        }
    }
}

/// Counts a worker out of its shard if it ends without reporting.
struct InFlight(Option<(Arc<crate::cluster::shards::Shards>, String)>);

impl Drop for InFlight {
    fn drop(&mut self) {
        if let Some((shards, pool)) = &self.0 {
            shards.worker(pool, false);
        }
    }
}
