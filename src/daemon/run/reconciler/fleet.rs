//! The daemon's side of changes across pools: the fleet driver wired to the
//! loop. A governed pool with a roll to start asks for admission, and its
//! worker starts only once the admission is journaled; a failure seen in a
//! pool's events reaches the driver at once; gates are read off the loop;
//! what the driver decides comes back as events, pools to look at again and
//! workers to stop.

use crate::sync::Locked;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use tokio::sync::mpsc;

use crate::daemon::run::queue::Trigger;
use crate::daemon::run::reconciler::{ControlAction, ControlRefusal, Reconciler};
use crate::daemon::views::board::{FleetSummary, PoolState};
use crate::daemon::views::metrics::{FleetLabels, FleetPoolsLabels};
use crate::fleet::{ChangeStatus, GateOutcome, Verdict};
use crate::model::events::FleetRef;
use crate::model::{Event, EventKind};
use crate::plan::PoolPlan;
use crate::provider::Providers;
use crate::reconcile::fleet::{FleetControl, FleetDriver, FleetStatus, Stepped};
use crate::reconcile::gates::GateReader;
use crate::spec::Config;
use crate::store::FleetJournal;

/// A gate read off the loop.
pub struct GateRead {
    pub fleet: String,
    pub gate: String,
    pub outcome: GateOutcome,
}

/// What `/v1/fleet` and the page show.
pub type FleetStatuses = Arc<Mutex<Vec<FleetStatus>>>;

pub(super) struct Fleet {
    driver: FleetDriver,
    /// Pools whose workers wait for their admission to be journaled.
    waiting: HashMap<String, (PoolPlan, String, Arc<Config>, Arc<Providers>)>,
    gates: GateReader,
    gate_tx: mpsc::UnboundedSender<GateRead>,
    /// With `--ha`: every daemon writes the journals; each reads them again
    /// this often, so a halt another daemon wrote stops this one's pools.
    refresh_every: Option<Duration>,
    next_refresh: Option<Timestamp>,
    status: FleetStatuses,
    /// The status changed since it was last published, and when that was:
    /// it is published at most every `PUBLISH_EVERY` (a change of 10,000
    /// pools steps often; a halt still shows within a second).
    status_dirty: bool,
    published: Option<std::time::Instant>,
}

/// How often, at most, the fleets' status is assembled while they move.
const PUBLISH_EVERY: Duration = Duration::from_millis(250);

impl Fleet {
    pub fn new(
        journal: FleetJournal,
        gate_tx: mpsc::UnboundedSender<GateRead>,
        refresh_every: Option<Duration>,
    ) -> Fleet {
        Fleet {
            driver: FleetDriver::new(journal),
            waiting: HashMap::new(),
            gates: GateReader::new(),
            gate_tx,
            refresh_every,
            next_refresh: None,
            status: Arc::default(),
            status_dirty: false,
            published: None,
        }
    }

    /// When the fleets' status should next be assembled, if it changed.
    pub fn status_due(&self) -> Option<std::time::Instant> {
        self.status_dirty.then(|| {
            self.published
                .map_or_else(std::time::Instant::now, |t| t + PUBLISH_EVERY)
        })
    }

    /// What `/v1/fleet` and the page show.
    pub fn view(&self) -> FleetStatuses {
        self.status.clone()
    }

    /// The FleetRollout whose change governs the pool's roll, if one does.
    pub fn governs(&self, pool: &str) -> Option<&str> {
        self.driver.governs(pool)
    }

    /// What the pools' plans are given of each change (its stage, its
    /// slots, a halt).
    pub fn views(&self, now: Timestamp) -> BTreeMap<String, crate::fleet::FleetView> {
        self.driver.views(now)
    }

    /// What became of a governed pool (rolls, done, failed...).
    pub fn fact(&mut self, pool: &str, fact: crate::fleet::PoolFact, now: Timestamp) {
        self.driver.fact(pool, fact, now);
    }

    /// A governed pool's roll failed.
    pub fn failed(&mut self, pool: &str, reason: String, now: Timestamp) {
        self.driver.failed(pool, reason, now);
    }

    /// Admissions asked for and not yet journaled.
    pub fn pending(&self, now: Timestamp) -> bool {
        self.driver.pending(now)
    }

    /// The next instant something of the fleets is due.
    /// Whether the change governing `pool` is in flight (running or paused).
    pub fn in_flight(&self, pool: &str) -> bool {
        self.driver.in_flight(pool)
    }

    pub fn next_due(&self) -> Option<Timestamp> {
        [self.driver.next_due(), self.next_refresh]
            .into_iter()
            .flatten()
            .min()
    }
}

impl Reconciler {
    /// The change id of a desired state: its revision, or a digest.
    fn change_id(
        &mut self,
    ) -> impl Fn(&BTreeMap<String, crate::model::TemplateHash>) -> String + use<> {
        // A change an image brought is named by it (`channel NAME@IMAGE`,
        // `recall IMAGE`), whatever the revision.
        let revision = self.image_change_id().or_else(|| {
            self.in_force
                .as_ref()
                .and_then(|f| f.revision.as_ref())
                .map(|r| r.short())
        });
        move |targets| crate::fleet::change::change_id(revision.as_deref(), targets)
    }

    /// A desired state was loaded: the FleetRollouts' rules follow it, and
    /// each is stepped (a new change begins when its pools want new templates).
    pub(super) async fn fleet_loaded(&mut self) {
        let Some(config) = self.in_force.as_ref().map(|f| f.config.clone()) else {
            return;
        };
        let id = self.change_id();
        self.fleet.driver.load(&config, &id);
        if self.fleet.refresh_every.is_some() {
            self.fleet.next_refresh = Some(self.clock.now());
        }
        self.fleet_step().await;
    }

    /// Whether this daemon reads the gates: one daemon does (the one acting
    /// on every pool, or holding shard 0), the others read its readings.
    pub(super) fn reads_gates(&self) -> bool {
        self.authority.leads_all() || self.authority.leads_shard(0)
    }

    /// Anything of the fleets due now: a refresh of the journals (`--ha`),
    /// gates to read, a decision to make. Cheap when nothing is.
    pub async fn fleet_tick(&mut self) {
        if self.fleet.driver.is_empty() {
            return;
        }
        let now = self.clock.now();
        if let (Some(every), Some(at)) = (self.fleet.refresh_every, self.fleet.next_refresh)
            && at <= now
        {
            self.fleet.driver.refresh().await;
            self.fleet.next_refresh = now
                .saturating_add(SignedDuration::try_from(every).unwrap_or_default())
                .ok();
        }
        if self.reads_gates() {
            for (fleet, gate) in self.fleet.driver.due_gates(now) {
                let (reader, tx) = (self.fleet.gates.clone(), self.fleet.gate_tx.clone());
                tokio::spawn(async move {
                    let outcome = reader.read(&gate).await;
                    let _ = tx.send(GateRead {
                        fleet,
                        gate: gate.name.clone(),
                        outcome,
                    });
                });
            }
        }
        if self.fleet.driver.pending(self.clock.now()) {
            self.fleet_step().await;
        }
    }

    /// A gate was read.
    pub async fn gate_read(&mut self, read: GateRead) {
        self.fleet
            .driver
            .reading(&read.fleet, &read.gate, read.outcome);
        self.fleet_step().await;
    }

    /// A pool's event: a rollout that went Degraded or started to roll back
    /// is a failed pool of its change, known at once.
    pub async fn pool_event(&mut self, e: Event) {
        if !matches!(e.event, EventKind::Degraded | EventKind::RollbackStarted)
            || self.fleet.driver.governs(&e.pool).is_none()
        {
            return;
        }
        let reason = match e.event {
            EventKind::RollbackStarted => format!("rolling back: {}", e.message),
            _ => format!("Degraded: {}", e.message),
        };
        self.fleet.driver.failed(&e.pool, reason, e.ts);
        self.fleet_step().await;
    }

    /// A governed pool's plan is ready to start a roll: it waits for its
    /// admission, journaled at the end of the batch.
    pub(super) fn ask_admission(
        &mut self,
        p: PoolPlan,
        key: String,
        from: crate::model::NodeTemplate,
        config: Arc<Config>,
        providers: Arc<Providers>,
    ) {
        self.fleet.driver.request_admission(&p.pool, from);
        self.fleet
            .waiting
            .insert(p.pool.clone(), (p, key, config, providers));
    }

    /// Journal what the fleets decided, then act on it.
    pub(super) async fn fleet_step(&mut self) {
        let now = self.clock.now();
        let stepped = self.fleet.driver.step(now).await;
        let halted = stepped
            .notes
            .iter()
            .any(|(_, _, n)| n.event == EventKind::FleetHalted);
        self.fleet_act(stepped).await;
        self.fleet.status_dirty = true;
        // A halt is shown at once; anything else at the next publish.
        if halted {
            self.publish_fleets();
        }
    }

    /// Assemble the fleets' status if it changed and the last assembly is
    /// old enough.
    pub(super) fn publish_fleets_if_due(&mut self) {
        if self
            .fleet
            .status_due()
            .is_some_and(|due| std::time::Instant::now() >= due)
        {
            self.publish_fleets();
        }
    }

    async fn fleet_act(&mut self, s: Stepped) {
        let at = s.at.unwrap_or_else(|| self.clock.now());
        for (fleet, change, note) in s.notes {
            if note.event == EventKind::FleetHalted {
                tracing::error!(fleet = %fleet, change = %change, "{}", note.message);
            }
            self.events.emit(
                Event::new(at, note.pool.unwrap_or_default(), note.event, note.message).fleet(
                    Some(FleetRef {
                        name: fleet,
                        change,
                    }),
                ),
            );
        }
        for pool in &s.stop {
            if self.workers.stop(pool) {
                tracing::warn!(pool = %pool, "its change across pools stopped: the roll stops at its next safe point");
            }
        }
        for pool in s.admitted {
            if let Some((p, key, config, providers)) = self.fleet.waiting.remove(&pool) {
                self.spawn_worker(p, key, config, providers);
            }
        }
        for (pool, verdict) in s.refused {
            if let Some((p, ..)) = self.fleet.waiting.remove(&pool) {
                let message = match verdict {
                    Verdict::Hold(h) => h.to_string(),
                    Verdict::RollBack { .. } => "its change halted: it rolls back".into(),
                    Verdict::Go => continue,
                };
                self.board.pool(&pool, &p.provider, |st| {
                    st.state = PoolState::Held;
                    st.message = message;
                });
            }
        }
        for pool in s.resume {
            let now = self.clock.now();
            match crate::reconcile::control::resume(&self.journal, &pool, now).await {
                Ok(m) => tracing::info!(pool = %pool, "{m} (the change across pools was resumed)"),
                Err(e) => tracing::debug!(pool = %pool, "nothing to resume: {e}"),
            }
            self.workers.clear_finished(&pool);
            self.schedule.touched(&pool);
        }
        for e in &s.errors {
            tracing::error!("{e}");
        }
        for pool in s.wake {
            if !self.workers.runs(&pool) {
                self.enqueue(&pool, Trigger::Wake);
            }
        }
    }

    /// An operator's pause or resume of a change across pools, named by its
    /// FleetRollout or its change's id (untrusted until found in force).
    pub(super) async fn control_fleet(
        &mut self,
        name: &str,
        action: ControlAction,
        who: &str,
        reason: Option<String>,
    ) -> Result<String, ControlRefusal> {
        let status = self.fleet.driver.status(self.clock.now());
        let Some(fleet) = status
            .iter()
            .find(|f| f.name == name || f.change.as_ref().is_some_and(|c| c.id == name))
            .map(|f| f.name.clone())
        else {
            let shown: String = name.chars().take(80).collect();
            tracing::warn!(who = %who, fleet = ?shown, "control request for an unknown fleet rollout refused");
            return Err(ControlRefusal::Unknown(format!(
                "no FleetRollout or change {shown:?} in the desired state in force"
            )));
        };
        if !self.authority.holds_any() {
            return Err(ControlRefusal::Refused(format!(
                "fleet rollout {fleet}: this daemon holds no lease ({}); ask a daemon that does",
                self.authority.note()
            )));
        }
        let why = reason.unwrap_or_else(|| "no reason given".into());
        tracing::info!(who = %who, fleet = %fleet, action = ?action, reason = %why, "control request");
        let control = match action {
            ControlAction::Pause => FleetControl::Pause,
            ControlAction::Resume => FleetControl::Resume,
        };
        self.fleet
            .driver
            .control(&fleet, control, who, &why)
            .map_err(|e| ControlRefusal::Refused(e.0))?;
        self.fleet_step().await;
        let status = self.fleet.driver.status(self.clock.now());
        let f = status
            .iter()
            .find(|f| f.name == fleet)
            .expect("found above");
        if let Some(e) = &f.error {
            return Err(ControlRefusal::Refused(e.clone()));
        }
        let c = f.change.as_ref();
        Ok(format!(
            "fleet rollout {fleet}: change {} is {}",
            c.map_or("(none)", |c| c.id.as_str()),
            c.map_or("unknown", |c| c.status.as_str())
        ))
    }

    /// The fleets as status shows them: the board's summary, the metrics,
    /// and the detail `/v1/fleet` serves.
    fn publish_fleets(&mut self) {
        self.fleet.status_dirty = false;
        self.fleet.published = Some(std::time::Instant::now());
        let status = self.fleet.driver.status(self.clock.now());
        let summaries: Vec<FleetSummary> = status.iter().map(FleetSummary::of).collect();
        let metrics = &self.metrics;
        for f in &status {
            let labels = FleetLabels {
                fleet: f.name.clone(),
            };
            let Some(c) = &f.change else { continue };
            let current = f
                .stages
                .iter()
                .position(|s| s.record.as_ref().is_none_or(|r| r.passed_at.is_none()))
                .unwrap_or(f.stages.len());
            metrics
                .fleet_change_stage
                .get_or_create(&labels)
                .set(current as i64);
            metrics
                .fleet_halted
                .get_or_create(&labels)
                .set(i64::from(matches!(c.status, ChangeStatus::Halted { .. })));
            let mut counts: BTreeMap<&str, i64> = BTreeMap::new();
            for s in &f.stages {
                for (_, cell) in &s.cells {
                    *counts.entry(cell.as_str()).or_default() += 1;
                }
            }
            for state in [
                "done",
                "in-sync",
                "rolling",
                "stopped",
                "waiting",
                "failed",
                "rolled-back",
                "paused",
                "error",
                "unknown",
            ] {
                metrics
                    .fleet_pools
                    .get_or_create(&FleetPoolsLabels {
                        fleet: f.name.clone(),
                        state: state.into(),
                    })
                    .set(counts.get(state).copied().unwrap_or(0));
            }
        }
        if self.board.read(|d| d.fleets != summaries) {
            self.board.update(|d| d.fleets = summaries);
        }
        *self.fleet.status.locked() = status;
    }
}
