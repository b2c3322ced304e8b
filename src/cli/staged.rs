//! `apply` with a FleetRollout: the change runs stage by stage, as the
//! daemon runs it. Each turn observes and plans again, admits the governed
//! pools whose rolls may start (journaled before they start) and starts
//! them, and starts every other pool's steps; it then waits for a pool's
//! work to end, or for what the change waits for (a soak, a gate, read
//! meanwhile).
//! It ends when every change is complete, halts with the halt's reason, and
//! stops at a safe point on Ctrl-C: the fleet journal keeps the change's
//! place for the next `apply` or the daemon.

use crate::sync::Locked;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use super::apply_report::{Outcome, Report};
use super::exit;
use crate::clock::Clock;
use crate::fleet::ChangeStatus;
use crate::model::events::FleetRef;
use crate::model::{Event, TemplateHash};
use crate::plan::{self, Plan, PlanOptions, Step};
use crate::provider::Providers;
use crate::reconcile::fleet::{FleetDriver, Stepped};
use crate::reconcile::gates::GateReader;
use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;

use crate::reconcile::{ApplyContext, ApplyOutcome, apply_pool, observe};
use crate::store::{FleetJournal, Journal, StateDir};
use crate::sync::Stop;
use std::future::Future;

/// The longest wait between rounds (a soak of hours is waited in these).
const MAX_WAIT: Duration = Duration::from_secs(30);

/// The pools' work in flight, driven by every wait of the loop: the loop
/// and the pools share one task, and a pool's roll must not stall while the
/// loop observes or plans (12 pools rolled 2.5x slower when only the loop's
/// idle wait drove them).
struct InFlight<F> {
    running: FuturesUnordered<F>,
    ended: Vec<(String, ApplyOutcome)>,
}

impl<F: Future<Output = (String, ApplyOutcome)>> InFlight<F> {
    /// `fut` to its end, the pools' work moving meanwhile.
    async fn meanwhile<T>(&mut self, fut: impl Future<Output = T>) -> T {
        let mut fut = std::pin::pin!(fut);
        loop {
            tokio::select! {
                out = &mut fut => return out,
                Some(done) = self.running.next(), if !self.running.is_empty() => {
                    self.ended.push(done);
                }
            }
        }
    }
}

pub(super) struct Staged<'a> {
    pub rt: &'a tokio::runtime::Runtime,
    pub ctx: &'a ApplyContext<'a>,
    pub state: &'a StateDir,
    pub clock: &'a Arc<dyn Clock>,
    pub opts: PlanOptions,
    pub revision: Option<String>,
    pub report: Report,
    /// The pools that wait for a human, which apply does not act on: the
    /// outcome is not "complete" while there are any.
    pub waiting: &'a [String],
}

impl Staged<'_> {
    /// Run until every change is complete (`Ok(OK)`), one halts or is
    /// paused (`FAILED`), or the operator interrupts (`FAILED`).
    pub fn drive(&self, first: Plan) -> anyhow::Result<u8> {
        let mut total = ApplyOutcome::default();
        match self.rt.block_on(self.run(first, &mut total)) {
            Ok(code) => Ok(code),
            // Between steps (a journal, a plan, a gate's reader): what ran
            // is counted, and the outcome says stopped, not "nothing changed".
            Err(e) => {
                let e = format!("{e:#}");
                self.report.error(&e);
                let errors: Vec<String> = total.errors.iter().cloned().chain([e]).collect();
                self.end(
                    Outcome::Stopped,
                    total.steps_done,
                    &errors,
                    &format!("\nApply stopped: {} step(s) done.", total.steps_done),
                );
                Ok(exit::FAILED)
            }
        }
    }

    /// The outcome line, with the pools that wait for a human in it.
    fn end(&self, outcome: Outcome, steps_done: usize, errors: &[String], text: &str) {
        let errors: Vec<String> = errors.iter().chain(self.waiting).cloned().collect();
        let outcome = match outcome {
            Outcome::Complete if !self.waiting.is_empty() => Outcome::Stopped,
            o => o,
        };
        self.report.outcome(outcome, steps_done, &errors, text);
    }

    /// Pipelined, as the daemon is: a pool's work starts as soon as it may,
    /// and a slot a pool frees is taken at once, not at the end of a round.
    async fn run(&self, first: Plan, total: &mut ApplyOutcome) -> anyhow::Result<u8> {
        let config = self.ctx.config;
        let mut driver = FleetDriver::new(FleetJournal::new(self.state.fleet_dir()));
        let revision = self.revision.clone();
        driver.load(config, &|targets: &BTreeMap<String, TemplateHash>| {
            crate::fleet::change::change_id(revision.as_deref(), targets)
        });
        let mut run = Run {
            staged: self,
            driver,
            gates: GateReader::new(),
            plan: first,
            last_waiting: String::new(),
            work: InFlight {
                running: FuturesUnordered::new(),
                ended: Vec::new(),
            },
            busy: BTreeMap::new(),
        };
        let result = run.turns(total).await;
        if result.is_err() {
            run.wind_down(total).await;
        }
        result
    }

    fn finished(&self, total: &mut ApplyOutcome, out: ApplyOutcome) {
        total.steps_done += out.steps_done;
        for e in &out.errors {
            self.report.error(e);
        }
        total.failed |= out.failed;
        total.errors.extend(out.errors);
    }

    /// Print what the changes decided, and keep it with the events.
    fn report(&self, s: &Stepped) {
        for (fleet, change, note) in &s.notes {
            match &note.pool {
                Some(pool) => self.report.line(&format!(
                    "fleet rollout {fleet}: nodepool.{pool}: {}",
                    note.message
                )),
                None => self
                    .report
                    .line(&format!("fleet rollout {fleet}: {}", note.message)),
            }
            self.ctx.events.emit(
                Event::new(
                    s.at.unwrap_or_else(|| self.clock.now()),
                    note.pool.clone().unwrap_or_default(),
                    note.event,
                    note.message.clone(),
                )
                .fleet(Some(FleetRef {
                    name: fleet.clone(),
                    change: change.clone(),
                })),
            );
        }
    }

    /// Observe again and plan with the changes as they now stand.
    async fn replan(&self, driver: &FleetDriver) -> anyhow::Result<Plan> {
        let config = self.ctx.config;
        let inventory = self.ctx.inventory.locked().clone();
        let providers: &Providers = self.ctx.providers;
        let mut observed = observe(config, &inventory, providers, self.clock.as_ref()).await;
        observed.rollouts = Journal::new(self.state.journal_dir()).all().await?;
        observed.fleets = driver.views(self.clock.now());
        Ok(plan::plan(
            config,
            &observed,
            &inventory,
            &PlanOptions {
                now: self.clock.now(),
                ..self.opts
            },
        ))
    }

    /// The template a pool runs now, as its provider reports it.
    async fn observed_template(&self, pool: &str) -> Option<crate::model::NodeTemplate> {
        let provider = self
            .ctx
            .config
            .pools
            .get(pool)?
            .doc
            .spec
            .provider_ref
            .value
            .clone();
        let p = self.ctx.providers.get(&provider)?.clone();
        let names = [pool.to_string()];
        p.describe_pools(&names)
            .await
            .ok()?
            .into_iter()
            .next()
            .map(|o| o.template)
    }
}

/// A pool's work in flight: its steps (a roll, or the other steps of a
/// pool), and the pool it is for.
type Work<'a> = std::pin::Pin<Box<dyn Future<Output = (String, ApplyOutcome)> + 'a>>;

/// One `apply` of changes across pools, turn by turn: ask (each governed
/// pool's fact, and admission for the rolls that ask to start), step (the
/// driver journals and decides), start (what may start), end (when
/// everything has), wait (for a pool's work, something due, or Ctrl-C),
/// gather (what ended), plan again.
struct Run<'s, 'a> {
    staged: &'s Staged<'a>,
    driver: FleetDriver,
    gates: GateReader,
    plan: Plan,
    last_waiting: String,
    /// Each pool's work, with its own stop, so a halt stops the rolls of
    /// the change at their next safe point and nothing else.
    work: InFlight<Work<'a>>,
    busy: BTreeMap<String, Stop>,
}

impl Run<'_, '_> {
    async fn turns(&mut self, total: &mut ApplyOutcome) -> anyhow::Result<u8> {
        let s = self.staged;
        loop {
            let now = s.clock.now();
            if !s.ctx.stop.is_requested() {
                self.ask(now).await?;
            }
            let stepped = self.work.meanwhile(self.driver.step(now)).await;
            s.report(&stepped);
            if let Some(e) = stepped.errors.first() {
                anyhow::bail!("{e}; nothing more is started");
            }
            for pool in &stepped.stop {
                if let Some(stop) = self.busy.get(pool) {
                    stop.request();
                }
            }
            let started = !s.ctx.stop.is_requested() && self.start(&stepped.admitted);
            let status = self.driver.status(s.clock.now());
            if let Some(code) = self.end(&status, started, total) {
                return Ok(code);
            }
            if !started && stepped.wake.is_empty() && self.work.ended.is_empty() {
                self.wait(&status).await;
            }
            for (pool, out) in self.work.ended.drain(..) {
                self.busy.remove(&pool);
                s.finished(total, out);
            }
            self.plan = self.work.meanwhile(s.replan(&self.driver)).await?;
        }
    }

    /// What each governed pool's plan says, and which rolls ask to start.
    async fn ask(&mut self, now: jiff::Timestamp) -> anyhow::Result<()> {
        let s = self.staged;
        let journals = self.work.meanwhile(s.ctx.journal.all()).await?;
        let pools: Vec<plan::PoolPlan> = self
            .plan
            .pools
            .iter()
            .filter(|p| !self.busy.contains_key(&p.pool) && self.driver.governs(&p.pool).is_some())
            .cloned()
            .collect();
        for p in pools {
            let journal = journals.get(&p.pool).and_then(|j| j.as_ref().ok());
            self.driver
                .fact(&p.pool, plan::fleet::fact_of(&p, journal, false), now);
            if !p
                .steps
                .iter()
                .any(|s| matches!(s, Step::Roll { rollback: None, .. }))
            {
                continue;
            }
            let from = match journal
                .filter(|j| !j.status.is_terminal())
                .and_then(|j| j.previous.clone())
            {
                Some(t) => Some(t),
                None => self.work.meanwhile(s.observed_template(&p.pool)).await,
            };
            if let Some(from) = from {
                self.driver.request_admission(&p.pool, from);
            }
        }
        Ok(())
    }

    /// Start what may start: a governed pool's roll once admitted, every
    /// other step at once. True when something started.
    fn start(&mut self, admitted: &[String]) -> bool {
        let admitted: BTreeSet<&str> = admitted.iter().map(String::as_str).collect();
        let mut started = false;
        for p in &self.plan.pools {
            if !p.has_changes() || self.busy.contains_key(&p.pool) {
                continue;
            }
            let governed_roll = self.driver.governs(&p.pool).is_some()
                && p.steps
                    .iter()
                    .any(|s| matches!(s, Step::Roll { rollback: None, .. }));
            let mut steps = p.clone();
            if governed_roll && !admitted.contains(p.pool.as_str()) {
                steps.steps.retain(|s| !matches!(s, Step::Roll { .. }));
                if !steps.has_changes() {
                    continue;
                }
            }
            let stop = Stop::new();
            self.busy.insert(p.pool.clone(), stop.clone());
            let base = *self.staged.ctx;
            self.work.running.push(Box::pin(async move {
                let ctx = ApplyContext {
                    stop: &stop,
                    ..base
                };
                let out = apply_pool(&steps, &ctx).await;
                (steps.pool, out)
            }));
            started = true;
        }
        started
    }

    /// The exit code once nothing runs and nothing more will: interrupted,
    /// a change halted or paused, errors, or every change complete.
    fn end(
        &self,
        status: &[crate::reconcile::fleet::FleetStatus],
        started: bool,
        total: &ApplyOutcome,
    ) -> Option<u8> {
        let s = self.staged;
        if !self.work.running.is_empty() || !self.work.ended.is_empty() {
            return None;
        }
        let mut halted = Vec::new();
        let mut moving = false;
        for f in status {
            match f.change.as_ref().map(|c| &c.status) {
                Some(ChangeStatus::Halted { reason, .. }) => {
                    halted.push(format!("fleet rollout {}: halted: {reason}", f.name))
                }
                Some(ChangeStatus::Paused { by, reason, .. }) => halted.push(format!(
                    "fleet rollout {}: paused by {by}: {reason}",
                    f.name
                )),
                Some(ChangeStatus::Running) | None => moving = true,
                Some(ChangeStatus::Completed { .. }) => {}
            }
        }
        let done = total.steps_done;
        if s.ctx.stop.is_requested() {
            s.end(
                Outcome::Interrupted,
                done,
                &total.errors,
                &format!(
                    "\nApply interrupted: {done} step(s) done; the change across pools keeps its place: run apply again, or let `poolwright run` continue it."
                ),
            );
            return Some(exit::FAILED);
        }
        if !halted.is_empty() {
            for h in &halted {
                s.report.error(h);
            }
            let errors: Vec<String> = total.errors.iter().chain(&halted).cloned().collect();
            s.end(
                Outcome::Stopped,
                done,
                &errors,
                &format!(
                    "\nApply stopped: {done} step(s) done; a change across pools stopped (see above). `poolwright fleet resume NAME --reason ...` or a new desired state continues it."
                ),
            );
            return Some(exit::FAILED);
        }
        if moving || started {
            return None;
        }
        if !total.errors.is_empty() {
            s.end(
                Outcome::Stopped,
                done,
                &total.errors,
                &format!(
                    "\nApply stopped: {done} step(s) done, {} error(s) (see above).",
                    total.errors.len()
                ),
            );
            return Some(exit::FAILED);
        }
        s.end(
            Outcome::Complete,
            done,
            &[],
            &format!(
                "\nApply complete: {done} step(s) done; every change across pools is complete."
            ),
        );
        Some(exit::OK)
    }

    /// Say what the changes wait for (when it changed), read the gates due,
    /// then wait until a pool's work ends, something falls due, or Ctrl-C.
    async fn wait(&mut self, status: &[crate::reconcile::fleet::FleetStatus]) {
        let s = self.staged;
        let waiting: Vec<String> = status
            .iter()
            .filter_map(|f| {
                f.waiting
                    .as_ref()
                    .map(|w| format!("fleet rollout {}: {}", f.name, w.message))
            })
            .collect();
        let line = waiting.join("; ");
        if !line.is_empty() && line != self.last_waiting {
            s.report.line(&format!("waiting: {line}"));
            self.last_waiting = line;
        }
        for (fleet, gate) in self.driver.due_gates(s.clock.now()) {
            let outcome = self.work.meanwhile(self.gates.read(&gate)).await;
            self.driver.reading(&fleet, &gate.name, outcome);
        }
        let due = self
            .driver
            .next_due()
            .map(|t| Duration::try_from(t.duration_since(s.clock.now())).unwrap_or_default())
            .unwrap_or(MAX_WAIT)
            .clamp(Duration::from_millis(100), MAX_WAIT);
        let stop = s.ctx.stop.clone();
        tokio::select! {
            Some(done) = self.work.running.next(), if !self.work.running.is_empty() => {
                self.work.ended.push(done);
            }
            _ = tokio::time::sleep(due) => {}
            _ = stop.requested(), if !stop.is_requested() => {
                for s in self.busy.values() {
                    s.request();
                }
            }
        }
    }

    /// Leaving on an error: dropping the work would cut each roll off
    /// mid-call, its finished steps uncounted; the rolls stop at their next
    /// safe point instead (the journal resumes them), and what ended is
    /// counted.
    async fn wind_down(&mut self, total: &mut ApplyOutcome) {
        for stop in self.busy.values() {
            stop.request();
        }
        for (_, out) in self.work.ended.drain(..) {
            self.staged.finished(total, out);
        }
        while let Some((_, out)) = self.work.running.next().await {
            self.staged.finished(total, out);
        }
    }
}
