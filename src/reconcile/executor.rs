//! The rollout executor, the imperative half of the rollout core: observe the
//! pool, ask the pure step function (`rollout::decide`) what to do, write the
//! journal (intent) BEFORE acting, act through the provider and the drainer,
//! hand the outcomes back to the core, and report every step as an event.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::events::{Counts, Event, EventSink};
use super::retry::with_retry;
use super::stop::Stop;
use crate::clock::Clock;
use crate::model::{NodeTemplate, ObservedPool};
use crate::policy;
use crate::provider::{Drainer, ErrorKind, Provider};
use crate::rollout::decide::{Action, Inputs, Note, begin, decide, is_available};
use crate::rollout::state::PendingCreate;
use crate::rollout::{Mark, RolloutState, Settings, Status};
use crate::spec::types::Disruption;
use crate::store::Journal;

/// Everything a rollout acts through.
pub struct Executor<'a> {
    pub provider: Arc<dyn Provider>,
    pub drainer: Arc<dyn Drainer>,
    pub journal: &'a Journal,
    pub events: &'a EventSink,
    pub clock: &'a dyn Clock,
    pub disruption: Disruption,
    /// Emergency override of the disruption policy.
    pub override_policy: bool,
    /// When requested, `run` returns at the next safe point (between ticks).
    pub stop: Option<Stop>,
    pub state: RolloutState,
    /// What the journal holds, so unchanged state is not rewritten every round.
    saved: Option<RolloutState>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Tick {
    /// Still going; `waiting` says why no new step could start, if so.
    Continue {
        waiting: Option<String>,
    },
    Finished(Status),
}

impl<'a> Executor<'a> {
    /// Start a rollout of `pool` towards `desired`, resuming the journal's
    /// rollout when it has the same target, superseding it otherwise.
    #[allow(clippy::too_many_arguments)]
    pub async fn start(
        pool: &str,
        desired: NodeTemplate,
        settings: Settings,
        provider: Arc<dyn Provider>,
        drainer: Arc<dyn Drainer>,
        journal: &'a Journal,
        events: &'a EventSink,
        clock: &'a dyn Clock,
        disruption: Disruption,
    ) -> Result<Executor<'a>, String> {
        let observed = observe(provider.as_ref(), pool, clock).await?;
        let prior = journal.load(pool).await.map_err(|e| format!("{e:#}"))?;
        let target = desired.hash();
        let now = clock.now();
        let state = match prior {
            Some(p) if p.target == target && !p.status.is_terminal() => {
                // The same rollout, interrupted: carry on with the current settings.
                let mut p = p;
                p.settings = settings;
                p
            }
            Some(RolloutState {
                status: Status::RolledBack { failed, .. },
                ..
            }) if failed == target => {
                return Err(format!(
                    "the last rollout of {pool} to template {target} failed and was rolled back; \
                     run `poolwright rollout resume {pool}` to try it again"
                ));
            }
            prior => {
                let previous = Some(observed.template.clone()).filter(|t| t.hash() != target);
                let superseded = prior.as_ref().filter(|p| !p.status.is_terminal());
                begin(
                    pool,
                    desired.clone(),
                    previous,
                    settings,
                    &observed.nodes,
                    superseded,
                    now,
                )
            }
        };
        let mut r = Executor {
            provider,
            drainer,
            journal,
            events,
            clock,
            disruption,
            override_policy: false,
            stop: None,
            state,
            saved: None,
        };
        if observed.template.hash() != r.state.target {
            let template = r.state.target_template.clone();
            let key = r.state.template_key(r.state.target);
            with_retry(r.clock, || r.provider.set_template(pool, &template, &key))
                .await
                .map_err(|e| format!("{pool}: {e}"))?;
        }
        r.save().await?;
        let budget = r.state.settings.budget;
        r.emit(
            "rollout_started",
            None,
            Some(&observed),
            format!(
                "to template {}: {}, surge {}, unavailable {}, floor {}",
                r.state.target,
                budget.strategy().as_str(),
                budget.surge,
                budget.unavailable,
                r.state.floor
            ),
        );
        Ok(r)
    }

    /// Make the journal hold the current state (fsync'd) if it does not already.
    async fn save(&mut self) -> Result<(), String> {
        if self.saved.as_ref() == Some(&self.state) {
            return Ok(());
        }
        self.journal
            .save(&self.state)
            .await
            .map_err(|e| format!("{e:#}"))?;
        self.saved = Some(self.state.clone());
        Ok(())
    }

    fn counts(&self, pool: &ObservedPool) -> Counts {
        let mut c = Counts::of(pool, self.state.target);
        c.desired = self.state.settings.size;
        let live = pool.live_nodes();
        c.available = live
            .filter(|n| {
                is_available(
                    n,
                    self.state.target,
                    &self.state.marks,
                    self.state.settings.min_ready,
                    self.clock.now(),
                )
            })
            .count() as u32;
        c
    }

    fn emit(
        &self,
        event: &'static str,
        node: Option<String>,
        pool: Option<&ObservedPool>,
        message: String,
    ) {
        self.events.emit(Event {
            ts: self.clock.now(),
            pool: self.state.pool.clone(),
            event,
            node,
            counts: pool.map(|p| self.counts(p)),
            message,
            revision: None,
        });
    }

    /// Something is still in flight (a drain, a termination).
    pub fn in_flight(&self) -> bool {
        self.state
            .marks
            .values()
            .any(|m| matches!(m, Mark::Draining { .. } | Mark::Terminating { .. }))
    }

    /// One round: observe, decide, journal, act.
    pub async fn tick(&mut self) -> Result<Tick, String> {
        let pool = self.state.pool.clone();
        self.replay_pending_create(&pool).await?;
        let observed = observe(self.provider.as_ref(), &pool, self.clock).await?;
        let now = self.clock.now();
        let mut drains = BTreeMap::new();
        for (id, mark) in &self.state.marks {
            if let Mark::Draining { since, .. } = mark {
                drains.insert(
                    id.clone(),
                    self.drainer
                        .progress(&pool, cluster_key(&observed, id), *since, now)
                        .await,
                );
            }
        }
        let gate_open = self.override_policy || policy::gate(&self.disruption, now).is_open();
        let before: Vec<String> = self.state.marks.keys().cloned().collect();
        let decision = decide(
            &self.state,
            &Inputs {
                now,
                nodes: &observed.nodes,
                provider_size: observed.size,
                drains: &drains,
                gate_open,
            },
        );
        // Intent first: the journal holds every mark before the calls are made.
        self.state = decision.state;
        self.save().await?;
        for id in before
            .iter()
            .filter(|id| !observed.nodes.iter().any(|n| &n.id == *id))
        {
            self.emit(
                "node_terminated",
                Some(id.clone()),
                Some(&observed),
                "gone".into(),
            );
        }
        for note in &decision.notes {
            self.note(note, &observed);
        }
        // The size the provider holds as this round's calls change it: a
        // create asks for an absolute size, after the terminations before it.
        let mut size = observed.size;
        for action in decision.actions {
            // Losing the leader lease stops new steps at once; the journal holds
            // the rest, for the daemon that takes over (as after a crash).
            if let Err(e) = self.journal.may_act() {
                return Err(format!("{pool}: {e}"));
            }
            self.act(&pool, action, &observed, &mut size).await;
        }
        self.save().await?;
        if self.state.status.is_terminal() {
            if self.state.status == Status::Completed {
                self.journal
                    .remove(&pool)
                    .await
                    .map_err(|e| format!("{e:#}"))?;
            }
            return Ok(Tick::Finished(self.state.status.clone()));
        }
        Ok(Tick::Continue {
            waiting: decision.waiting,
        })
    }

    /// A create journaled but never answered (the process died in between):
    /// a provider that honours idempotency keys gets it again with the same
    /// key, and answers it once whether or not it had acted; for the others
    /// the step function decides again from what is observed.
    async fn replay_pending_create(&mut self, pool: &str) -> Result<(), String> {
        let Some(pending) = self.state.pending_create else {
            return Ok(());
        };
        if self.provider.capabilities().idempotency_keys {
            self.journal.may_act().map_err(|e| format!("{pool}: {e}"))?;
            let key = self.state.create_key(pending.seq);
            let result = with_retry(self.clock, || {
                self.provider
                    .create_nodes(pool, pending.count, pending.size, &key)
            })
            .await;
            if let Ok(ids) = &result {
                for id in ids {
                    self.emit(
                        "node_create_requested",
                        Some(id.clone()),
                        None,
                        "the create journaled before a restart, answered under its idempotency key"
                            .into(),
                    );
                }
            }
            if let Err(e) = result
                && e.is_transient()
            {
                // Still unanswered: keep it, and try again next round.
                return Err(format!("{pool}: {e}"));
            }
        }
        self.state.pending_create = None;
        self.save().await
    }

    /// Journal a create (with its number, from which its key derives, and the
    /// absolute size it asks for), then call.
    async fn create(
        &mut self,
        pool: &str,
        count: u32,
        provider_size: &mut u32,
    ) -> Result<crate::provider::Result<Vec<String>>, String> {
        self.state.creates += 1;
        let seq = self.state.creates;
        let size = provider_size.saturating_add(count);
        self.state.pending_create = Some(PendingCreate { seq, count, size });
        self.save().await?;
        let key = self.state.create_key(seq);
        let result = with_retry(self.clock, || {
            self.provider.create_nodes(pool, count, size, &key)
        })
        .await;
        self.state.pending_create = None;
        if result.is_ok() {
            *provider_size = size;
        }
        Ok(result)
    }

    fn note(&self, note: &Note, observed: &ObservedPool) {
        self.emit(
            note.event,
            note.node.clone(),
            Some(observed),
            note.message.clone(),
        );
    }

    async fn act(&mut self, pool: &str, action: Action, observed: &ObservedPool, size: &mut u32) {
        let now = self.clock.now();
        match action {
            Action::CreateNodes { count } => {
                let mut result = match self.create(pool, count, size).await {
                    Ok(r) => r,
                    Err(e) => {
                        // The intent could not be journaled: nothing was called.
                        self.emit("step_failed", None, Some(observed), e);
                        return;
                    }
                };
                // All-or-nothing refusals: part of the surge may still fit.
                if count > 1 && matches!(&result, Err(e) if e.kind == ErrorKind::Quota) {
                    result = match self.create(pool, 1, size).await {
                        Ok(r) => r,
                        Err(e) => {
                            self.emit("step_failed", None, Some(observed), e);
                            return;
                        }
                    };
                }
                self.created(result, observed, now);
            }
            Action::Drain { node } => match self
                .drainer
                .cordon(pool, cluster_key(observed, &node))
                .await
            {
                Ok(()) => self.emit(
                    "node_cordoned",
                    Some(node),
                    Some(observed),
                    "cordoned; drain started".into(),
                ),
                Err(e) => {
                    // Not cordoned: it was never taken out of service; decide again next round.
                    self.state.marks.remove(&node);
                    self.emit(
                        "step_failed",
                        Some(node),
                        Some(observed),
                        format!("cordon failed: {e}"),
                    );
                }
            },
            Action::ForceDrain { node } => {
                if let Err(e) = self.drainer.force(pool, cluster_key(observed, &node)).await {
                    self.emit(
                        "step_failed",
                        Some(node),
                        Some(observed),
                        format!("force drain failed: {e}"),
                    );
                }
            }
            Action::Terminate { node } => {
                let key = self.state.terminate_key(&node);
                match with_retry(self.clock, || {
                    self.provider.terminate_node(pool, &node, true, &key)
                })
                .await
                {
                    Ok(()) => {
                        *size = size.saturating_sub(1);
                        self.emit(
                            "terminate_requested",
                            Some(node),
                            Some(observed),
                            "terminating".into(),
                        )
                    }
                    // Already gone: nothing to do; the mark clears when it is no longer observed.
                    Err(e) if e.kind == ErrorKind::NotFound => {}
                    Err(e) => self.emit("step_failed", Some(node), Some(observed), e.to_string()),
                }
            }
            Action::Reimage { node } => {
                let key = self.state.reimage_key(&node);
                match with_retry(self.clock, || self.provider.reimage_node(pool, &node, &key)).await
                {
                    Ok(()) => {
                        if let Err(e) = self
                            .drainer
                            .uncordon(pool, cluster_key(observed, &node))
                            .await
                        {
                            self.emit(
                                "step_failed",
                                Some(node.clone()),
                                Some(observed),
                                format!("uncordon after reimage failed: {e}"),
                            );
                        }
                        self.emit(
                            "reimage_requested",
                            Some(node),
                            Some(observed),
                            "reimaging onto the target template".into(),
                        );
                    }
                    Err(e) => self.emit("step_failed", Some(node), Some(observed), e.to_string()),
                }
            }
            Action::Uncordon { node } => {
                if let Err(e) = self
                    .drainer
                    .uncordon(pool, cluster_key(observed, &node))
                    .await
                {
                    self.emit(
                        "step_failed",
                        Some(node),
                        Some(observed),
                        format!("uncordon failed: {e}"),
                    );
                }
            }
            Action::SetTemplate { template } => {
                let key = self.state.template_key(template.hash());
                if let Err(e) = with_retry(self.clock, || {
                    self.provider.set_template(pool, &template, &key)
                })
                .await
                {
                    self.emit("step_failed", None, Some(observed), e.to_string());
                }
            }
        }
    }

    fn created(
        &mut self,
        result: crate::provider::Result<Vec<String>>,
        observed: &ObservedPool,
        now: jiff::Timestamp,
    ) {
        match result {
            Ok(ids) => {
                self.state.surge_backoff_secs = 0;
                self.state.surge_refused_until = None;
                for id in ids {
                    self.emit(
                        "node_create_requested",
                        Some(id),
                        Some(observed),
                        "launching on the target template".into(),
                    );
                }
            }
            Err(e) if e.kind == ErrorKind::Quota => {
                let secs = (self.state.surge_backoff_secs * 2).clamp(10, 300);
                self.state.surge_backoff_secs = secs;
                let until = now
                    .saturating_add(jiff::SignedDuration::from_secs(secs as i64))
                    .unwrap_or(now);
                self.state.surge_refused_until = Some(until);
                let plan = if self.state.settings.budget.unavailable > 0 {
                    "falling back to terminate-before-create"
                } else {
                    "stalled: maxUnavailable is 0"
                };
                self.emit(
                    "surge_refused",
                    None,
                    Some(observed),
                    format!("{e}; {plan}; retrying at {until}"),
                );
            }
            Err(e) => self.emit("step_failed", None, Some(observed), e.to_string()),
        }
    }

    /// Tick until the rollout ends, stops for a human, waits on the
    /// disruption policy with nothing in flight, or is asked to stop (then it
    /// returns `Running` at once: the journal already holds every step taken).
    pub async fn run(&mut self, poll: std::time::Duration) -> Result<Status, String> {
        loop {
            if self.stop.as_ref().is_some_and(Stop::is_requested) {
                return Ok(self.state.status.clone());
            }
            match self.tick().await? {
                Tick::Finished(status) => return Ok(status),
                Tick::Continue { waiting } => {
                    let stopped = matches!(
                        self.state.status,
                        Status::Degraded { .. } | Status::Paused { .. }
                    );
                    if (stopped || (waiting.is_some() && self.state.blocked_by_policy))
                        && !self.in_flight()
                    {
                        return Ok(self.state.status.clone());
                    }
                }
            }
            match &self.stop {
                Some(stop) => {
                    tokio::select! {
                        _ = self.clock.sleep(poll) => {}
                        _ = stop.requested() => {}
                    }
                }
                None => self.clock.sleep(poll).await,
            }
        }
    }
}

/// How the drainer knows a node: its provider id when the provider gives one
/// (what Kubernetes Nodes carry), else its id.
fn cluster_key<'a>(observed: &'a ObservedPool, id: &'a str) -> &'a str {
    observed
        .nodes
        .iter()
        .find(|n| n.id == id)
        .map_or(id, |n| n.cluster_key())
}

async fn observe(
    provider: &dyn Provider,
    pool: &str,
    clock: &dyn Clock,
) -> Result<ObservedPool, String> {
    let names = [pool.to_string()];
    let pools = with_retry(clock, || provider.describe_pools(&names))
        .await
        .map_err(|e| format!("{pool}: {e}"))?;
    pools.into_iter().next().ok_or_else(|| {
        format!(
            "{pool}: the pool no longer exists at provider {}",
            provider.name()
        )
    })
}
