//! The rollout executor, the imperative half of the rollout core: observe the
//! pool, ask the pure step function (`rollout::decide`) what to do, write the
//! journal (intent) BEFORE acting, act through the provider and the drainer,
//! hand the outcomes back to the core, and report every step as an event.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::events::EventSink;
use super::retry::with_retry;
use crate::clock::Clock;
use crate::model::{Counts, Event};
use crate::model::{EventKind, NodeState, NodeTemplate, ObservedPool, TemplateHash};
use crate::plan::RollBack;
use crate::provider::{Drainer, ErrorKind, Provider, ProviderError, ReportsChanges};
use crate::rollout::decide::{
    Action, Inputs, Note, Outcome, Quiet, absorb, begin, begin_rollback, decide, is_available,
};
use crate::rollout::index::PoolIndex;
use crate::rollout::state::PendingCreate;
use crate::rollout::{Mark, RolloutState, Settings, Status};
use crate::store::Journal;
use crate::sync::Stop;

/// Why a rollout could not go on (what is in the journal stays: the next
/// run takes it up).
#[derive(Debug, thiserror::Error)]
pub enum ExecutorError {
    /// The provider could not be asked, or refused a call the rollout needs.
    #[error("{pool}: {source}")]
    Provider {
        pool: String,
        #[source]
        source: ProviderError,
    },
    #[error("{pool}: the pool no longer exists at provider {provider}")]
    Gone { pool: String, provider: String },
    /// The journal could not be read or written: nothing is done without it.
    #[error("{0:#}")]
    Journal(#[from] anyhow::Error),
    /// This process may not act (it lost the leader lease).
    #[error("{pool}: {reason}")]
    Fenced {
        pool: String,
        reason: crate::store::shared::Fenced,
    },
    #[error(
        "the last rollout of {pool} to template {target} failed and was rolled back; \
         run `poolwright rollout resume {pool}` to try it again"
    )]
    RolledBack { pool: String, target: TemplateHash },
}

/// Everything a rollout acts through.
pub struct Executor<'a> {
    pub provider: Arc<dyn Provider>,
    pub drainer: Arc<dyn Drainer>,
    pub journal: &'a Journal,
    pub events: &'a EventSink,
    pub clock: &'a dyn Clock,
    /// Emergency override of the disruption policy.
    pub override_policy: bool,
    /// When requested, `run` returns at the next safe point (between ticks).
    pub stop: Option<Stop>,
    pub state: RolloutState,
    /// What the journal holds, so unchanged state is not rewritten every round.
    saved: Option<RolloutState>,
    /// The pool as last observed, its quiet nodes sorted out.
    index: PoolIndex,
    /// Where to ask what changed, instead of describing the whole pool.
    changes: Option<(Arc<dyn ReportsChanges>, Option<u64>)>,
    /// Every look visits every node (no quiet set): the reference the
    /// differential tests hold the index to.
    every_node: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Tick {
    /// Still going; `waiting` says why no new step could start, if so.
    Continue {
        waiting: Option<crate::rollout::decide::Wait>,
    },
    Finished(Status),
}

impl<'a> Executor<'a> {
    /// Start a rollout of `pool` towards `desired`, resuming the journal's
    /// rollout when it has the same target (with the settings given now: a
    /// change of them reaches the rollout here, and is reported), superseding
    /// it otherwise.
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
    ) -> Result<Executor<'a>, ExecutorError> {
        Executor::open(
            pool, desired, None, settings, provider, drainer, journal, events, clock,
        )
        .await
    }

    /// Start (or resume) a rollout of `pool` back to `back`, leaving the
    /// template `rollback.failed` (a change across pools halted with
    /// `onHalt: rollback`): it ends `RolledBack`.
    #[allow(clippy::too_many_arguments)]
    pub async fn start_rollback(
        pool: &str,
        back: NodeTemplate,
        rollback: &RollBack,
        settings: Settings,
        provider: Arc<dyn Provider>,
        drainer: Arc<dyn Drainer>,
        journal: &'a Journal,
        events: &'a EventSink,
        clock: &'a dyn Clock,
    ) -> Result<Executor<'a>, ExecutorError> {
        Executor::open(
            pool,
            back,
            Some(rollback),
            settings,
            provider,
            drainer,
            journal,
            events,
            clock,
        )
        .await
    }

    #[allow(clippy::too_many_arguments)]
    async fn open(
        pool: &str,
        desired: NodeTemplate,
        rollback: Option<&RollBack>,
        settings: Settings,
        provider: Arc<dyn Provider>,
        drainer: Arc<dyn Drainer>,
        journal: &'a Journal,
        events: &'a EventSink,
        clock: &'a dyn Clock,
    ) -> Result<Executor<'a>, ExecutorError> {
        let observed = observe(provider.as_ref(), pool, clock).await?;
        let prior = journal.load(pool).await?;
        let target = desired.hash();
        let now = clock.now();
        let mut changed = Vec::new();
        let resumed = matches!(&prior, Some(p) if p.target == target && !p.status.is_terminal());
        let state = match prior {
            Some(p) if p.target == target && !p.status.is_terminal() => {
                // The same rollout, interrupted: carry on with the settings in force.
                let mut p = p;
                changed = settings.changes_from(&p.settings);
                p.settings = settings;
                p
            }
            Some(RolloutState {
                status: Status::RolledBack { failed, .. },
                ..
            }) if failed == target && rollback.is_none() => {
                return Err(ExecutorError::RolledBack {
                    pool: pool.to_string(),
                    target,
                });
            }
            prior => {
                let superseded = prior.as_ref().filter(|p| !p.status.is_terminal());
                match rollback {
                    None => begin(
                        pool,
                        desired.clone(),
                        observed.template.clone(),
                        settings,
                        &observed.nodes,
                        superseded,
                        now,
                    ),
                    Some(rb) => begin_rollback(
                        pool,
                        desired.clone(),
                        observed.template.clone(),
                        rb.failed,
                        rb.reason.clone(),
                        settings,
                        &observed.nodes,
                        superseded,
                        now,
                    ),
                }
            }
        };
        let mut r = Executor {
            provider,
            drainer,
            journal,
            events,
            clock,
            override_policy: false,
            stop: None,
            state,
            saved: None,
            index: PoolIndex::default(),
            changes: None,
            every_node: false,
        };
        // Journal first: a crash before the template call resumes this
        // rollout (and still knows the template to roll back to), where the
        // other order would find the target in place and forget the previous.
        r.save().await?;
        if observed.template.hash() != r.state.target {
            let template = r.state.target_template.clone();
            let key = r.state.template_key(r.state.target);
            with_retry(r.clock, || r.provider.set_template(pool, &template, &key))
                .await
                .map_err(|source| ExecutorError::Provider {
                    pool: pool.to_string(),
                    source,
                })?;
        }
        r.index = PoolIndex::of(observed.nodes, observed.size);
        if !changed.is_empty() {
            r.emit(
                EventKind::RolloutSettingsChanged,
                None,
                true,
                format!(
                    "{}; steps in flight finish, the next ones follow the new settings",
                    changed.join(", ")
                ),
            );
        }
        let budget = r.state.settings.budget;
        r.emit(
            EventKind::RolloutStarted,
            None,
            true,
            format!(
                "{}{}to template {}: {} ({} semantics), surge {}, unavailable {}, floor {}",
                if resumed {
                    "resumed from the journal: "
                } else {
                    ""
                },
                match &r.state.rollback_reason {
                    Some(why) => format!("rolling back ({why}) "),
                    None => String::new(),
                },
                r.state.target,
                budget.strategy().as_str(),
                r.state.settings.semantics.as_str(),
                budget.surge,
                budget.unavailable,
                r.state.floor()
            ),
        );
        Ok(r)
    }

    /// Make the journal hold the current state (fsync'd) if it does not already.
    async fn save(&mut self) -> Result<(), ExecutorError> {
        if self.saved.as_ref() == Some(&self.state) {
            return Ok(());
        }
        self.journal.save(&self.state).await?;
        self.saved = Some(self.state.clone());
        Ok(())
    }

    /// Ask `changes` what changed in the pool at each look, instead of
    /// describing the whole pool (a provider that can say).
    pub fn observe_changes_with(&mut self, changes: Arc<dyn ReportsChanges>) {
        self.changes = Some((changes, None));
    }

    /// Visit every node at every look, as a step did before the index (a
    /// reference for tests: slower on a large pool, the same decisions).
    pub fn visit_every_node(&mut self) {
        self.every_node = true;
    }

    /// The pool as the last look observed it.
    pub fn index(&self) -> &PoolIndex {
        &self.index
    }

    /// Observe the pool now and sort out its quiet nodes against the
    /// current state (what the next look would see).
    pub async fn observe_now(&mut self) -> Result<&PoolIndex, ExecutorError> {
        let pool = self.state.pool.clone();
        self.look(&pool, false).await?;
        self.index.classify(&self.state, self.clock.now());
        Ok(&self.index)
    }

    /// Bring the index up to date: what changed, from a provider that can
    /// say, else the whole pool described again. A look that is not one of
    /// the rollout's own (`metered` false) is asked of a provider that
    /// reports changes as one it does not count as a call.
    async fn look(&mut self, pool: &str, metered: bool) -> Result<(), ExecutorError> {
        let failed = |source| ExecutorError::Provider {
            pool: pool.to_string(),
            source,
        };
        let Some((reports, token)) = &self.changes else {
            let observed = observe(self.provider.as_ref(), pool, self.clock).await?;
            self.index.replace(observed.nodes, observed.size);
            return Ok(());
        };
        let (reports, token) = (reports.clone(), *token);
        let ask = || async {
            if metered {
                reports.changes(pool, token)
            } else {
                reports.changes_unmetered(pool, token)
            }
        };
        let changes = with_retry(self.clock, ask)
            .await
            .map_err(failed)?
            .ok_or_else(|| ExecutorError::Gone {
                pool: pool.to_string(),
                provider: self.provider.name().to_string(),
            })?;
        self.changes = Some((reports, Some(changes.token)));
        if changes.whole {
            self.index.replace(changes.nodes, changes.size);
        } else {
            self.index
                .update(changes.nodes, &changes.gone, changes.size);
        }
        Ok(())
    }

    /// The pool's counts as last observed, for an event.
    fn counts(&self) -> Counts {
        let (target, now) = (self.state.target, self.clock.now());
        let mut c = Counts {
            desired: self.state.settings.size,
            ..Counts::default()
        };
        for n in self
            .index
            .nodes()
            .filter(|n| n.state != NodeState::Terminating)
        {
            let available = is_available(
                n,
                target,
                &self.state.marks,
                self.state.settings.min_ready,
                now,
            );
            // On its way out: draining, terminating, reimaging (not one
            // quarantined or going back into service).
            let leaving = matches!(
                self.state.marks.get(&*n.id),
                Some(Mark::Draining { .. } | Mark::Terminating { .. } | Mark::Reimaging { .. })
            );
            c.count(n.template == target, available, leaving);
        }
        c
    }

    /// How the drainer knows a node: its provider id when the provider
    /// gives one (what Kubernetes Nodes carry), else its id.
    fn cluster_key(&self, id: &str) -> String {
        self.index
            .get(id)
            .map_or(id, |n| n.cluster_key())
            .to_string()
    }

    /// Report an event, with the pool's counts when `counted`.
    fn emit(&self, event: EventKind, node: Option<String>, counted: bool, message: String) {
        self.emit_since(event, node, counted, message, None);
    }

    /// As [`Self::emit`], saying when what it reports began.
    fn emit_since(
        &self,
        event: EventKind,
        node: Option<String>,
        counted: bool,
        message: String,
        since: Option<jiff::Timestamp>,
    ) {
        if self.events.is_silent() {
            return;
        }
        self.events.emit(
            Event::new(self.clock.now(), self.state.pool.clone(), event, message)
                .node(node)
                .counts(counted.then(|| self.counts()))
                .since(since)
                .phase(counted.then(|| {
                    crate::rollout::phase::phase_of(
                        &self.state,
                        self.index.nodes(),
                        self.clock.now(),
                    )
                })),
        );
    }

    /// Something is still in flight (a drain, a termination, a reimage, an
    /// uncordon): a pause or a degraded pool waits for it before returning.
    pub fn in_flight(&self) -> bool {
        self.state.marks.values().any(|m| {
            matches!(
                m,
                Mark::Draining { .. }
                    | Mark::Terminating { .. }
                    | Mark::Reimaging { .. }
                    | Mark::Uncordoning
            )
        })
    }

    /// One round: observe, decide, journal, act.
    pub async fn tick(&mut self) -> Result<Tick, ExecutorError> {
        let pool = self.state.pool.clone();
        self.replay_pending_create(&pool).await?;
        self.look(&pool, true).await?;
        let now = self.clock.now();
        self.index.classify(&self.state, now);
        let mut drains = BTreeMap::new();
        for (id, mark) in &self.state.marks {
            if let Mark::Draining { since, .. } = mark {
                // How the drainer knows a node: its provider id when the
                // provider gives one (what Kubernetes Nodes carry), else its id.
                let key = self.index.get(id).map_or(id.as_str(), |n| n.cluster_key());
                drains.insert(
                    id.clone(),
                    self.drainer.progress(&pool, key, *since, now).await,
                );
            }
        }
        // Marks of nodes no longer observed: their nodes are gone.
        let gone: Vec<String> = self
            .state
            .marks
            .keys()
            .filter(|id| self.index.get(id).is_none())
            .cloned()
            .collect();
        let reappeared = self.index.take_reappeared();
        let mut pod_holds = self.pod_holds(&pool).await;
        // A node the step would drain that a workload holds (do-not-disrupt)
        // is found before anything is journaled or cordoned: the step is
        // decided again with it held. Each round holds at least one node
        // more (the answers found are kept for the next round), so this ends.
        let mut base = self.state.clone();
        let mut held_notes = Vec::new();
        let decision = loop {
            self.index.classify(&base, now);
            // Only the nodes in flight are listed; the quiet ones are counted.
            let (listed, quiet) = if self.every_node {
                (self.index.all(), None)
            } else {
                (self.index.listed(), Some(&self.index as &dyn Quiet))
            };
            let d = decide(
                &base,
                &Inputs {
                    now,
                    nodes: &listed,
                    provider_size: self.index.size(),
                    drains: &drains,
                    override_policy: self.override_policy,
                    quiet,
                    reappeared: &reappeared,
                    pod_holds: Some(&pod_holds),
                },
            );
            let held = self.held_now(&pool, &d.actions).await;
            if held.is_empty() {
                break d;
            }
            for o in &held {
                if let Outcome::Held { node, reason } = o {
                    pod_holds.insert(node.clone(), Some(reason.clone()));
                }
            }
            held_notes.extend(absorb(&mut base, &held, now));
        };
        // Intent first: the journal holds every mark before the calls are made.
        self.state = decision.state;
        self.save().await?;
        for id in gone {
            self.emit(EventKind::NodeTerminated, Some(id), true, "gone".into());
        }
        for note in held_notes.iter().chain(&decision.notes) {
            self.note(note);
        }
        // The size the provider holds as this round's calls change it: a
        // create asks for an absolute size, after the terminations before it.
        let mut size = self.index.size();
        let mut outcomes = Vec::new();
        for action in decision.actions {
            // Losing the leader lease stops new steps at once; the journal holds
            // the rest, for the daemon that takes over (as after a crash).
            if let Err(reason) = self.journal.may_act(&pool) {
                return Err(ExecutorError::Fenced { pool, reason });
            }
            if let Some(o) = self.act(&pool, action, &mut size).await {
                outcomes.push(o);
            }
        }
        // What the calls came to goes back to the core, which decides what
        // follows (backoff, a narrower surge, a node back in service).
        for note in absorb(&mut self.state, &outcomes, self.clock.now()) {
            self.note(&note);
        }
        self.save().await?;
        if self.state.status.is_terminal() {
            if self.state.status == Status::Completed {
                self.journal.remove(&pool).await?;
            }
            return Ok(Tick::Finished(self.state.status.clone()));
        }
        Ok(Tick::Continue {
            waiting: decision.waiting,
        })
    }

    /// The nodes the state holds, asked about again: why a pod still holds
    /// each, or `None` if none does. A node the cluster did not answer for is
    /// left out (its hold stands).
    async fn pod_holds(&self, pool: &str) -> BTreeMap<String, Option<String>> {
        let mut out = BTreeMap::new();
        for id in self.state.held.keys() {
            if let Ok(answer) = self.drainer.hold(pool, &self.cluster_key(id)).await {
                out.insert(id.clone(), answer);
            }
        }
        out
    }

    /// Of the nodes these actions would drain, the ones a workload holds now.
    /// A node the cluster cannot answer for is not taken to be held: its
    /// cordon or drain fails in its turn and says why.
    async fn held_now(&self, pool: &str, actions: &[Action]) -> Vec<Outcome> {
        let mut out = Vec::new();
        for a in actions {
            if let Action::Drain { node } = a
                && let Ok(Some(reason)) = self.drainer.hold(pool, &self.cluster_key(node)).await
            {
                out.push(Outcome::Held {
                    node: node.clone(),
                    reason,
                });
            }
        }
        out
    }

    /// A create journaled but never answered (the process died in between):
    /// a provider that honours idempotency keys gets it again with the same
    /// key, and answers it once whether or not it had acted; for the others
    /// the step function decides again from what is observed.
    async fn replay_pending_create(&mut self, pool: &str) -> Result<(), ExecutorError> {
        let Some(pending) = self.state.pending_create else {
            return Ok(());
        };
        if self.provider.capabilities().idempotency_keys {
            self.journal
                .may_act(pool)
                .map_err(|reason| ExecutorError::Fenced {
                    pool: pool.to_string(),
                    reason,
                })?;
            let key = self.state.create_key(pending.seq);
            let result = with_retry(self.clock, || {
                self.provider
                    .create_nodes(pool, pending.count, pending.size, &key)
            })
            .await;
            if let Ok(ids) = &result {
                for id in ids {
                    self.emit(
                        EventKind::NodeCreateRequested,
                        Some(id.clone()),
                        false,
                        "the create journaled before a restart, answered under its idempotency key"
                            .into(),
                    );
                }
            }
            if let Err(e) = result
                && e.is_transient()
            {
                // Still unanswered: keep it, and try again next round.
                return Err(ExecutorError::Provider {
                    pool: pool.to_string(),
                    source: e,
                });
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
    ) -> Result<crate::provider::Result<Vec<String>>, ExecutorError> {
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

    fn note(&self, note: &Note) {
        // A node is reported healthy once it has stayed so for minReady:
        // the event says when it became healthy.
        let since = match (note.event, &note.node) {
            (EventKind::NodeHealthy, Some(id)) => self.index.get(id).and_then(|n| n.healthy_since),
            _ => None,
        };
        self.emit_since(
            note.event,
            note.node.clone(),
            true,
            note.message.clone(),
            since,
        );
    }

    /// Perform one action; what became of it, when the core must know.
    async fn act(&mut self, pool: &str, action: Action, size: &mut u32) -> Option<Outcome> {
        match action {
            Action::CreateNodes { count } => {
                let result = match self.create(pool, count, size).await {
                    Ok(r) => r,
                    // The intent could not be journaled: nothing was called.
                    Err(e) => {
                        return Some(Outcome::CreateFailed {
                            message: e.to_string(),
                        });
                    }
                };
                match result {
                    Ok(ids) => {
                        for id in ids {
                            self.emit(
                                EventKind::NodeCreateRequested,
                                Some(id),
                                true,
                                "launching on the target template".into(),
                            );
                        }
                        Some(Outcome::Created { requested: count })
                    }
                    Err(e) if e.kind == ErrorKind::Quota => Some(Outcome::CreateRefused {
                        requested: count,
                        message: e.to_string(),
                    }),
                    Err(e) => Some(Outcome::CreateFailed {
                        message: e.to_string(),
                    }),
                }
            }
            Action::Drain { node } => {
                let key = self.cluster_key(&node);
                match self.drainer.cordon(pool, &key).await {
                    Ok(()) => {
                        self.emit(
                            EventKind::NodeCordoned,
                            Some(node),
                            true,
                            "cordoned; drain started".into(),
                        );
                        None
                    }
                    Err(e) => Some(Outcome::CordonFailed {
                        node,
                        message: e.to_string(),
                    }),
                }
            }
            Action::ForceDrain { node } => self
                .drainer
                .force(pool, &self.cluster_key(&node))
                .await
                .err()
                .map(|e| Outcome::CallFailed {
                    node: Some(node),
                    message: format!("force drain failed: {e}"),
                }),
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
                            EventKind::TerminateRequested,
                            Some(node),
                            true,
                            "terminating".into(),
                        );
                        None
                    }
                    // Already gone: nothing to do; the mark clears when it is no longer observed.
                    Err(e) if e.kind == ErrorKind::NotFound => None,
                    Err(e) => Some(Outcome::CallFailed {
                        node: Some(node),
                        message: e.to_string(),
                    }),
                }
            }
            Action::Reimage { node } => {
                let key = self.state.reimage_key(&node);
                match with_retry(self.clock, || self.provider.reimage_node(pool, &node, &key)).await
                {
                    Ok(()) => {
                        let key = self.cluster_key(&node);
                        let uncordoned = self.drainer.uncordon(pool, &key).await;
                        self.emit(
                            EventKind::ReimageRequested,
                            Some(node.clone()),
                            true,
                            "reimaging onto the target template".into(),
                        );
                        uncordoned.err().map(|e| Outcome::CallFailed {
                            node: Some(node),
                            message: format!("uncordon after reimage failed: {e}"),
                        })
                    }
                    Err(e) => Some(Outcome::CallFailed {
                        node: Some(node),
                        message: e.to_string(),
                    }),
                }
            }
            Action::Uncordon { node } => self
                .drainer
                .uncordon(pool, &self.cluster_key(&node))
                .await
                .err()
                .map(|e| Outcome::CallFailed {
                    node: Some(node),
                    message: format!("uncordon failed: {e}"),
                }),
            Action::SetTemplate { template } => {
                let key = self.state.template_key(template.hash());
                with_retry(self.clock, || {
                    self.provider.set_template(pool, &template, &key)
                })
                .await
                .err()
                .map(|e| Outcome::CallFailed {
                    node: None,
                    message: e.to_string(),
                })
            }
        }
    }

    /// Tick until the rollout ends, stops for a human, waits on the
    /// disruption policy with nothing in flight, or is asked to stop (then it
    /// returns `Running` at once: the journal already holds every step taken).
    pub async fn run(&mut self, poll: std::time::Duration) -> Result<Status, ExecutorError> {
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

async fn observe(
    provider: &dyn Provider,
    pool: &str,
    clock: &dyn Clock,
) -> Result<ObservedPool, ExecutorError> {
    let names = [pool.to_string()];
    let pools = with_retry(clock, || provider.describe_pools(&names))
        .await
        .map_err(|source| ExecutorError::Provider {
            pool: pool.to_string(),
            source,
        })?;
    pools.into_iter().next().ok_or_else(|| ExecutorError::Gone {
        pool: pool.to_string(),
        provider: provider.name().to_string(),
    })
}
