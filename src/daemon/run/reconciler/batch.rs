//! One batch: the pools of one provider that were due together, observed in
//! batched calls (in a task of its own, so a slow provider holds up only its
//! own pools), then planned and acted on one pool at a time.

use crate::model::Unreadable;
use crate::sync::Locked;
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};
use tokio::sync::mpsc;

use crate::clock::Clock;
use crate::daemon::run::queue::Trigger;
use crate::daemon::run::reconciler::Reconciler;
use crate::daemon::views::metrics::ReconcileLabels;
use crate::model::{NodeState, PoolSpec};
use crate::plan::{self, Observed, PlanOptions};
use crate::provider::Providers;
use crate::reconcile::observe::observe_pools;
use crate::rollout::RolloutState;
use crate::spec::Config;
use crate::store::Journal;

/// While a pool's nodes boot or go away (and no worker of its own reports
/// them), it is looked at again this soon, so status follows them.
const SETTLING_LOOK: SignedDuration = SignedDuration::from_secs(1);
/// How often a pool with work to do that another daemon acts on (this one is
/// a standby, or the pool's shard is held elsewhere) is looked at again, so
/// this daemon's status follows that daemon's progress.
const FOLLOW_LOOK: SignedDuration = SignedDuration::from_secs(5);

#[derive(Clone)]
pub(super) struct ObservationRequest {
    pub provider: String,
    pub pools: Vec<String>,
    pub why: Trigger,
    /// The reconciler's change counter when the observation began.
    pub seq: u64,
    pub started_at: Timestamp,
}

/// What one provider said about a batch of its pools, and their journals.
pub struct Observation {
    request: ObservationRequest,
    observed: Observed,
    journals: Result<BTreeMap<String, Result<RolloutState, Unreadable>>, Unreadable>,
    took: std::time::Duration,
}

pub(super) fn spawn_observation(
    request: ObservationRequest,
    config: Arc<Config>,
    providers: Arc<Providers>,
    journal: Arc<Journal>,
    clock: Arc<dyn Clock>,
    tx: mpsc::UnboundedSender<Observation>,
) {
    let failed = request.clone();
    let observing = tokio::spawn(async move {
        let started = std::time::Instant::now();
        let observed = observe_pools(
            &config,
            &request.provider,
            &request.pools,
            &providers,
            clock.as_ref(),
        )
        .await;
        // Read after the pools were observed: a rollout journaled since is seen.
        let journals = journal
            .of(&request.pools)
            .await
            .map_err(|e| Unreadable(format!("{e:#}")));
        Observation {
            request,
            observed,
            journals,
            took: started.elapsed(),
        }
    });
    // An observation that panics still comes back (as a failure), or its
    // provider would never be asked again.
    tokio::spawn(async move {
        let o = match observing.await {
            Ok(o) => o,
            Err(e) => Observation {
                observed: Observed::default(),
                journals: Err(Unreadable(format!(
                    "observing {} pool(s) of provider {:?} failed: {e}",
                    failed.pools.len(),
                    failed.provider
                ))),
                request: failed,
                took: std::time::Duration::ZERO,
            },
        };
        let _ = tx.send(o);
    });
}

impl Reconciler {
    /// An observation came back: plan each of its pools and act on the plan.
    pub async fn observed(&mut self, o: Observation) {
        let Observation {
            request,
            mut observed,
            journals,
            took,
        } = o;
        let started = std::time::Instant::now();
        self.schedule.observed(&request.provider);
        let Some(in_force) = &self.in_force else {
            return;
        };
        let config = in_force.config.clone();
        let providers = in_force.providers.clone();
        let revision = in_force.revision.clone();
        self.board.update(|d| {
            d.reconcile.count += 1;
            d.reconcile.last_trigger = Some(request.why.as_str().to_string());
            d.reconcile.last_triggered_at = Some(request.started_at);
            d.reconcile.last_started_at = Some(request.started_at);
        });
        // A pool something happened to since the observation began (a worker
        // started or ended, a pause, its document changed, this daemon took
        // or lost the lease) is not planned from it: it is queued again (a
        // running worker's end queues it anyway).
        let seq = request.seq;
        let mut pools = Vec::with_capacity(request.pools.len());
        for p in request.pools {
            let stale = self.schedule.stale(&p, seq);
            if !stale && self.provider_of(&p).as_deref() == Some(request.provider.as_str()) {
                pools.push(p);
            } else if !self.workers.runs(&p) {
                self.enqueue(&p, request.why);
            }
        }
        let sharded = self.authority.is_sharded();
        if self.authority.inventory_stale() && (self.workers.is_empty() || sharded) {
            match self.inventory_store.load().await {
                Ok(inv) => {
                    let mut held = self.inventory.locked();
                    // A running worker's entry is newer than what was read
                    // (it writes its own): keep it.
                    let keep: Vec<(String, Option<_>)> = self
                        .workers
                        .pools()
                        .map(|p| (p.clone(), held.pools.get(p).cloned()))
                        .collect();
                    *held = inv;
                    for (pool, entry) in keep {
                        match entry {
                            Some(e) => held.pools.insert(pool, e),
                            None => held.pools.remove(&pool),
                        };
                    }
                    drop(held);
                    self.authority.inventory_read();
                }
                Err(e) => return self.batch_failed(&pools, format!("{e:#}"), started),
            }
        }
        // Every rollout's journal: a pool with one is resumed, or waits for a human.
        let journals = match journals {
            Ok(j) => j,
            Err(e) => return self.batch_failed(&pools, e.0, started),
        };
        self.board.update(|d| d.reconcile.error = None);
        let wanted: HashSet<&str> = pools.iter().map(String::as_str).collect();
        observed.rollouts = journals
            .into_iter()
            .filter(|(name, _)| wanted.contains(name.as_str()))
            .collect();
        let now = self.clock.now();
        // Each FleetRollout's change as journaled: a governed pool's roll
        // is planned as its change says (held, or turned round).
        observed.fleets = self.fleet.views(now);
        if let Some(previews) = &self.previews {
            previews.set_fleets(&observed.fleets);
        }
        let opts = PlanOptions {
            prune: self.settings.prune,
            now,
            override_disruption: false,
        };
        let planned: Vec<(String, Option<plan::PoolPlan>)> = {
            let inventory = self.inventory.locked();
            pools
                .iter()
                .map(|name| {
                    (
                        name.clone(),
                        plan::plan_one(&config, &observed, &inventory, &opts, name),
                    )
                })
                .collect()
        };
        let count = planned.len() as u64;
        self.board.update(|d| d.reconcile.pools_planned += count);
        self.metrics
            .reconciles
            .get_or_create(&ReconcileLabels {
                trigger: request.why.as_str().to_string(),
            })
            .inc_by(count);
        // The fleet's plan first (at once when nothing else is due), then
        // each pool's status and action: a status never runs ahead of `/v1/plan`
        // on a quiet daemon.
        for (name, p) in &planned {
            if let Some(p) = p {
                self.views.record(name, p);
            }
        }
        self.publish();
        for (name, p) in planned {
            let Some(p) = p else {
                self.forget_pool(&name);
                continue;
            };
            self.schedule.looked_at(&name);
            let journal = observed
                .rollouts
                .get(&name)
                .and_then(|j| j.as_ref().ok())
                .cloned();
            let follow = journal.is_some() || p.has_changes();
            // The template a governed pool rolls from (a roll back returns
            // it): the journal's when a roll to this target is under way
            // (the provider already reports the new one), else the observed.
            let from = journal
                .as_ref()
                .filter(|j| !j.status.is_terminal())
                .and_then(|j| j.previous.clone())
                .or_else(|| observed.pools.get(&name).map(|o| o.template.clone()));
            if self.fleet.governs(&name).is_some() {
                let fact =
                    crate::plan::fleet::fact_of(&p, journal.as_ref(), self.workers.runs(&name));
                self.fleet.fact(&name, fact, now);
            }
            self.handle_pool(
                &p,
                journal,
                from,
                &config,
                &providers,
                revision.as_ref(),
                now,
            );
            if follow && !self.authority.leads(&name) {
                self.look_again_at(&name, now.saturating_add(FOLLOW_LOOK).unwrap_or(now));
            }
            if let Some(pool) = observed.pools.remove(&name) {
                // Nodes booting or going away, with no worker to report them.
                if !self.workers.runs(&name)
                    && pool
                        .nodes
                        .iter()
                        .any(|n| matches!(n.state, NodeState::Pending | NodeState::Terminating))
                {
                    self.look_again_at(&name, now.saturating_add(SETTLING_LOOK).unwrap_or(now));
                }
                crate::daemon::run::reconciler::projection::record_nodes(
                    &self.metrics,
                    &name,
                    &pool,
                );
                let spec = config
                    .pools
                    .get(&name)
                    .map(|e| (PoolSpec::from_doc(&e.doc), &e.doc));
                let target = spec
                    .as_ref()
                    .map_or_else(|| pool.template.hash(), |(s, _)| s.template.hash());
                // Counted against the size the pool converges on, never the
                // provider's size with a roll's surge in it.
                let size = p.target_size().unwrap_or_else(|| {
                    spec.as_ref().map_or(pool.size, |(s, doc)| {
                        crate::plan::target_size(s, doc, pool.size)
                    })
                });
                // As observed: a healthy node in service is available (the
                // executor's events, during a roll, also wait its minReady).
                let counts = crate::model::Counts::of(&pool, target, size);
                self.board.observed(&name, counts, target, now);
                // The observation's last use: the page's copy takes it.
                self.feed.observed(Arc::new(pool), target);
            }
        }
        // The admissions asked for in this batch, journaled together; their
        // workers start once they are.
        if self.fleet.pending(now) {
            self.fleet_step().await;
        }
        self.finish_batch(started, took);
    }

    /// The journals or the inventory could not be read: nothing is planned or
    /// done for these pools (a rollout might be in flight); say so, and try
    /// them again after the retry pause.
    fn batch_failed(&mut self, pools: &[String], error: String, started: std::time::Instant) {
        let message = format!("{error}; nothing is planned or done until it can be read");
        tracing::error!("{message}");
        self.board.update(|d| d.reconcile.error = Some(message));
        for pool in pools {
            self.look_again_after(pool, self.settings.retry_after);
        }
        self.finish_batch(started, std::time::Duration::ZERO);
    }

    fn finish_batch(&mut self, started: std::time::Instant, observing: std::time::Duration) {
        self.metrics
            .reconcile_seconds
            .observe((started.elapsed() + observing).as_secs_f64());
        let now = self.clock.now();
        self.board
            .update(|d| d.reconcile.last_finished_at = Some(now));
    }
}
