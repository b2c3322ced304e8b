//! `apply` with a FleetRollout: the change runs stage by stage, as the
//! daemon runs it, in rounds. Each round observes and plans again, admits
//! the governed pools whose rolls may start (journaled before they start),
//! rolls them at once, and applies every other step; between rounds it
//! waits for what the change waits for (a soak, a gate), reading the gates.
//! It ends when every change is complete, halts with the halt's reason, and
//! stops at a safe point on Ctrl-C: the fleet journal keeps the change's
//! place for the next `apply` or the daemon.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use super::exit;
use crate::clock::Clock;
use crate::fleet::ChangeStatus;
use crate::model::events::FleetRef;
use crate::model::{Event, TemplateHash};
use crate::plan::{self, Plan, PlanOptions, Step};
use crate::provider::Providers;
use crate::reconcile::fleet::{FleetDriver, Stepped};
use crate::reconcile::gates::GateReader;
use crate::reconcile::{ApplyContext, ApplyOutcome, apply_plan, apply_pool, observe};
use crate::store::{FleetJournal, Journal, StateDir};

/// The longest wait between rounds (a soak of hours is waited in these).
const MAX_WAIT: Duration = Duration::from_secs(30);

pub(super) struct Staged<'a> {
    pub rt: &'a tokio::runtime::Runtime,
    pub ctx: &'a ApplyContext<'a>,
    pub state: &'a StateDir,
    pub clock: &'a Arc<dyn Clock>,
    pub opts: PlanOptions,
    pub revision: Option<String>,
}

impl Staged<'_> {
    /// Run rounds until every change is complete (`Ok(OK)`), one halts or is
    /// paused (`FAILED`), or the operator interrupts (`FAILED`).
    pub fn drive(&self, first: Plan) -> anyhow::Result<u8> {
        let config = self.ctx.config;
        let mut driver = FleetDriver::new(FleetJournal::new(self.state.fleet_dir()));
        let revision = self.revision.clone();
        driver.load(config, &|targets: &BTreeMap<String, TemplateHash>| {
            revision
                .clone()
                .unwrap_or_else(|| crate::fleet::change::digest_id(targets))
        });
        let gates = GateReader::new();
        let mut plan = first;
        let mut total = ApplyOutcome::default();
        let mut last_waiting = String::new();
        loop {
            if self.ctx.stop.is_requested() {
                println!(
                    "\nApply interrupted: {} step(s) done; the change across pools keeps its place: run apply again, or let `poolwright run` continue it.",
                    total.steps_done
                );
                return Ok(exit::FAILED);
            }
            let now = self.clock.now();
            // What each governed pool's plan says, and which rolls ask to start.
            let journals = self.rt.block_on(self.ctx.journal.all())?;
            for p in &plan.pools {
                if driver.governs(&p.pool).is_none() {
                    continue;
                }
                let journal = journals.get(&p.pool).and_then(|j| j.as_ref().ok());
                driver.fact(&p.pool, plan::fleet::fact_of(p, journal, false), now);
                if p.steps
                    .iter()
                    .any(|s| matches!(s, Step::Roll { rollback: None, .. }))
                    && let Some(from) = journal
                        .filter(|j| !j.status.is_terminal())
                        .and_then(|j| j.previous.clone())
                        .or_else(|| self.observed_template(&p.pool))
                {
                    driver.request_admission(&p.pool, from);
                }
            }
            let stepped = self.rt.block_on(driver.step(now));
            self.report(&stepped);
            if let Some(e) = stepped.errors.first() {
                anyhow::bail!("{e}; nothing more is started");
            }
            let admitted: BTreeSet<&str> = stepped.admitted.iter().map(String::as_str).collect();
            // This round's work: every pool's steps, a governed pool's roll
            // only once admitted.
            let (mut rolls, mut others) = (Vec::new(), Vec::new());
            for p in plan.pools.iter().filter(|p| p.has_changes()) {
                let governed_roll = driver.governs(&p.pool).is_some()
                    && p.steps
                        .iter()
                        .any(|s| matches!(s, Step::Roll { rollback: None, .. }));
                if !governed_roll {
                    others.push(p.clone());
                } else if admitted.contains(p.pool.as_str()) {
                    rolls.push(p.clone());
                } else {
                    let mut held = p.clone();
                    held.steps.retain(|s| !matches!(s, Step::Roll { .. }));
                    if held.has_changes() {
                        others.push(held);
                    }
                }
            }
            let worked = !rolls.is_empty() || !others.is_empty();
            let round = self.rt.block_on(async {
                let mut out = apply_plan(
                    &Plan {
                        pools: others,
                        fleets: Vec::new(),
                    },
                    self.ctx,
                )
                .await;
                // Admitted rolls at once: they took their slots together.
                for o in
                    futures_util::future::join_all(rolls.iter().map(|p| apply_pool(p, self.ctx)))
                        .await
                {
                    out.steps_done += o.steps_done;
                    out.errors.extend(o.errors);
                }
                out
            });
            total.steps_done += round.steps_done;
            for e in &round.errors {
                eprintln!("error: {e}");
            }
            total.errors.extend(round.errors);
            // Where the changes stand.
            let status = driver.status(self.clock.now());
            let mut halted = Vec::new();
            let mut running = false;
            for f in &status {
                match f.change.as_ref().map(|c| &c.status) {
                    Some(ChangeStatus::Halted { reason, .. }) => {
                        halted.push(format!("fleet rollout {}: halted: {reason}", f.name))
                    }
                    Some(ChangeStatus::Paused { by, reason, .. }) => halted.push(format!(
                        "fleet rollout {}: paused by {by}: {reason}",
                        f.name
                    )),
                    Some(ChangeStatus::Running) | None => running = true,
                    Some(ChangeStatus::Completed { .. }) => {}
                }
            }
            if !halted.is_empty() && rolls.is_empty() {
                for h in &halted {
                    eprintln!("error: {h}");
                }
                println!(
                    "\nApply stopped: {} step(s) done; a change across pools stopped (see above). `poolwright fleet resume NAME --reason ...` (with the daemon) or a new desired state continues.",
                    total.steps_done
                );
                return Ok(exit::FAILED);
            }
            if !running && !worked {
                return Ok(if total.errors.is_empty() {
                    println!(
                        "\nApply complete: {} step(s) done; every change across pools is complete.",
                        total.steps_done
                    );
                    exit::OK
                } else {
                    exit::FAILED
                });
            }
            if !worked && stepped.wake.is_empty() {
                // Nothing could start, and no stage opened nor slot freed:
                // wait for what the change waits for, reading the gates.
                let waiting: Vec<String> = status
                    .iter()
                    .filter_map(|f| {
                        f.waiting
                            .as_ref()
                            .map(|w| format!("fleet rollout {}: {w}", f.name))
                    })
                    .collect();
                let line = waiting.join("; ");
                if line != last_waiting {
                    println!("waiting: {line}");
                    last_waiting = line;
                }
                self.wait(&mut driver, &gates);
            }
            plan = self.replan(&driver)?;
        }
    }

    /// Print what the changes decided, and keep it with the events.
    fn report(&self, s: &Stepped) {
        for (fleet, change, note) in &s.notes {
            match &note.pool {
                Some(pool) => println!("fleet rollout {fleet}: nodepool.{pool}: {}", note.message),
                None => println!("fleet rollout {fleet}: {}", note.message),
            }
            self.ctx.events.emit(Event {
                ts: s.at.unwrap_or_else(|| self.clock.now()),
                pool: note.pool.clone().unwrap_or_default(),
                event: note.event,
                node: None,
                counts: None,
                message: note.message.clone(),
                revision: None,
                by: None,
                fleet: Some(FleetRef {
                    name: fleet.clone(),
                    change: change.clone(),
                }),
            });
        }
    }

    /// Sleep until the next thing due (at most `MAX_WAIT`), reading the gates due.
    fn wait(&self, driver: &mut FleetDriver, gates: &GateReader) {
        let now = self.clock.now();
        for (fleet, gate) in driver.due_gates(now) {
            let outcome = self.rt.block_on(gates.read(&gate));
            driver.reading(&fleet, &gate.name, outcome);
        }
        let due = driver
            .next_due()
            .map(|t| Duration::try_from(t.duration_since(now)).unwrap_or_default())
            .unwrap_or(MAX_WAIT)
            .clamp(Duration::from_millis(200), MAX_WAIT);
        let stop = self.ctx.stop.clone();
        self.rt.block_on(async {
            tokio::select! {
                _ = tokio::time::sleep(due) => {}
                _ = stop.requested() => {}
            }
        });
    }

    /// Observe again and plan with the changes as they now stand.
    fn replan(&self, driver: &FleetDriver) -> anyhow::Result<Plan> {
        let config = self.ctx.config;
        let inventory = self
            .ctx
            .inventory
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let providers: &Providers = self.ctx.providers;
        let mut observed =
            self.rt
                .block_on(observe(config, &inventory, providers, self.clock.as_ref()));
        observed.rollouts = self
            .rt
            .block_on(Journal::new(self.state.journal_dir()).all())?;
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
    fn observed_template(&self, pool: &str) -> Option<crate::model::NodeTemplate> {
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
        self.rt
            .block_on(p.describe_pools(&names))
            .ok()?
            .into_iter()
            .next()
            .map(|o| o.template)
    }
}
