//! The fleet driver: performs what `fleet::decide_change` returns for each
//! FleetRollout, journal first. It keeps each FleetRollout's change as last
//! written (or read, under `--ha`, where every daemon writes it with a
//! compare-and-swap), learns each governed pool's fact from its latest
//! plan, takes admissions, gate readings and an operator's pause or resume
//! as operations, and writes them together with the decision they lead to.
//! The daemon (and `apply`) asks it which pools to look at again, which
//! workers to stop, and which pools may start.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};

use crate::fleet::change::FleetState;
use crate::fleet::decide::{FleetWait, Inputs, read_gate};
use crate::fleet::rules::GateRules;
use crate::fleet::{
    ChangeStatus, FleetNote, FleetView, GateOutcome, PoolFact, PoolRecord, Rules, Verdict, admit,
    decide_change, verdict,
};
use crate::model::said::Said;
use crate::model::{EventKind, NodeTemplate, TemplateHash};
use crate::spec::Config;
use crate::store::fleet::{FleetJournal, FleetJournalError};

/// An operator's hand on a change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FleetControl {
    Pause,
    Resume,
}

/// What the caller does after a step.
#[derive(Debug, Default)]
pub struct Stepped {
    /// The instant the step decided at (its events carry it, as the
    /// journal does).
    pub at: Option<Timestamp>,
    /// `fleet_*` events to emit: the FleetRollout, its change, the note.
    pub notes: Vec<(String, String, FleetNote)>,
    /// Pools to plan again.
    pub wake: Vec<String>,
    /// Pools whose workers stop at their next safe point.
    pub stop: Vec<String>,
    /// Pools admitted in this step (their workers may start).
    pub admitted: Vec<String>,
    /// Pools refused in this step, and why.
    pub refused: Vec<(String, Verdict)>,
    /// Journals that could not be written (nothing was admitted for them).
    pub errors: Vec<String>,
    /// Pools whose failed or rolled-back rollouts an operator's resume of
    /// the change resumes too (as `rollout resume` would).
    pub resume: Vec<String>,
}

#[derive(Clone, Debug)]
enum Op {
    Admit {
        pool: String,
        from: NodeTemplate,
    },
    Reading {
        gate: String,
        outcome: GateOutcome,
    },
    Control {
        action: FleetControl,
        by: String,
        reason: String,
    },
}

struct Tracked {
    rules: Arc<Rules>,
    /// Each governed pool's desired template (a change is a pool wanting another).
    targets: BTreeMap<String, TemplateHash>,
    /// The change id this desired state would begin.
    id: String,
    state: Option<FleetState>,
    /// The change as last written or read, shared with the plans made from
    /// it (a change of 10,000 pools is not copied for every batch).
    shared: Option<Arc<crate::fleet::Change>>,
    ops: Vec<Op>,
    /// Something it decides on changed since it last decided.
    dirty: bool,
    waiting: Option<FleetWait>,
    next_due: Option<Timestamp>,
    /// When each gate is next read.
    gates_due: BTreeMap<String, Timestamp>,
    /// The last write or read that failed.
    error: Option<String>,
}

pub struct FleetDriver {
    journal: FleetJournal,
    fleets: BTreeMap<String, Tracked>,
    /// Each governed pool's FleetRollout.
    governor: HashMap<String, String>,
    /// Each governed pool's fact and when its plan was made.
    facts: HashMap<String, (PoolFact, Timestamp)>,
}

/// One FleetRollout as status shows it.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FleetStatus {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub change: Option<crate::fleet::Change>,
    /// The stage plan: pools per stage and where each stands.
    pub stages: Vec<StageStatus>,
    /// What the change waits for, and the sentence that says it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting: Option<Said<FleetWait>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<crate::fleet::change::Summary>,
}

#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StageStatus {
    pub name: String,
    pub pools: usize,
    pub done: usize,
    pub rolling: usize,
    pub waiting: usize,
    pub failed: usize,
    pub soak_seconds: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub record: Option<crate::fleet::StageRecord>,
    /// Each pool and where it stands (`done`, `rolling`, `waiting`,
    /// `failed`, `in-sync`, `unknown`, `rolled-back`).
    pub cells: Vec<(String, String)>,
}

/// Why a pause or resume of a change across pools did nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ControlRefused(pub String);

impl From<String> for ControlRefused {
    fn from(why: String) -> ControlRefused {
        ControlRefused(why)
    }
}

impl Tracked {
    fn set(&mut self, state: Option<FleetState>) {
        self.shared = state.as_ref().map(|s| Arc::new(s.change.clone()));
        self.state = state;
    }
}

impl FleetDriver {
    pub fn new(journal: FleetJournal) -> FleetDriver {
        FleetDriver {
            journal,
            fleets: BTreeMap::new(),
            governor: HashMap::new(),
            facts: HashMap::new(),
        }
    }

    /// Whether a change of the FleetRollout governing `pool` is in flight
    /// (running or paused: not completed, not halted, and not superseded).
    pub fn in_flight(&self, pool: &str) -> bool {
        self.governor
            .get(pool)
            .and_then(|f| self.fleets.get(f)?.state.as_ref())
            .is_some_and(|s| {
                matches!(
                    s.change.status,
                    ChangeStatus::Running | ChangeStatus::Paused { .. }
                )
            })
    }

    /// The FleetRollout governing `pool`, if one does.
    pub fn governs(&self, pool: &str) -> Option<&str> {
        self.governor.get(pool).map(String::as_str)
    }

    pub fn is_empty(&self) -> bool {
        self.fleets.is_empty()
    }

    /// A desired state was loaded: each FleetRollout's rules and targets.
    /// The journals are read when first needed (`step`); a FleetRollout no
    /// longer in the files is forgotten here (its journal stays, and a
    /// FleetRollout of that name added again takes it up).
    pub fn load(
        &mut self,
        config: &Config,
        id: &dyn Fn(&BTreeMap<String, TemplateHash>) -> String,
    ) {
        let rules = crate::fleet::view::rules(config);
        self.fleets.retain(|name, _| rules.contains_key(name));
        self.governor.clear();
        for (name, rules) in rules {
            let targets = crate::fleet::view::targets(config, &name);
            for pool in targets.keys() {
                self.governor.insert(pool.clone(), name.clone());
            }
            let id = id(&targets);
            match self.fleets.get_mut(&name) {
                Some(t) => {
                    t.rules = rules;
                    t.targets = targets;
                    t.id = id;
                    t.dirty = true;
                }
                None => {
                    self.fleets.insert(
                        name,
                        Tracked {
                            rules,
                            targets,
                            id,
                            state: None,
                            shared: None,
                            ops: Vec::new(),
                            dirty: true,
                            waiting: None,
                            next_due: None,
                            gates_due: BTreeMap::new(),
                            error: None,
                        },
                    );
                }
            }
        }
        self.facts
            .retain(|pool, _| self.governor.contains_key(pool));
    }

    /// What the planner is given of each FleetRollout (its change as last
    /// written; before any is, the change this desired state begins).
    pub fn views(&self, now: Timestamp) -> BTreeMap<String, FleetView> {
        self.fleets
            .iter()
            .map(|(name, t)| {
                if let Some(shared) = &t.shared {
                    return (
                        name.clone(),
                        FleetView {
                            rules: t.rules.clone(),
                            change: shared.clone(),
                            new: false,
                        },
                    );
                }
                let (change, new) = match &t.state {
                    Some(s) => (s.change.clone(), false),
                    None => {
                        let (s, _) = FleetState::after_load(
                            None,
                            name,
                            t.id.clone(),
                            t.targets.clone(),
                            now,
                        );
                        (s.change, true)
                    }
                };
                (
                    name.clone(),
                    FleetView {
                        rules: t.rules.clone(),
                        change: Arc::new(change),
                        new,
                    },
                )
            })
            .collect()
    }

    /// A governed pool was planned at `at`: what its plan says.
    pub fn fact(&mut self, pool: &str, fact: PoolFact, at: Timestamp) {
        let Some(fleet) = self.governor.get(pool) else {
            return;
        };
        let changed = self.facts.get(pool).is_none_or(|(f, _)| *f != fact);
        self.facts.insert(pool.to_string(), (fact, at));
        if changed && let Some(t) = self.fleets.get_mut(fleet) {
            t.dirty = true;
        }
    }

    /// A governed pool failed (its rollout went Degraded or started to roll
    /// back): known now, before its next plan says so.
    pub fn failed(&mut self, pool: &str, reason: String, at: Timestamp) {
        self.fact(pool, PoolFact::Failed(reason), at);
    }

    /// The pool's roll may start once the next step admits it.
    pub fn request_admission(&mut self, pool: &str, from: NodeTemplate) {
        if let Some(t) = self.governor.get(pool).and_then(|f| self.fleets.get_mut(f)) {
            t.ops.push(Op::Admit {
                pool: pool.to_string(),
                from,
            });
        }
    }

    /// What the change says of `pool`'s roll now (as last written).
    pub fn verdict(&self, pool: &str) -> Verdict {
        let Some(t) = self.governor.get(pool).and_then(|f| self.fleets.get(f)) else {
            return Verdict::Go;
        };
        match &t.state {
            Some(s) => verdict(&s.change, &t.rules, pool),
            None => Verdict::Hold(crate::fleet::StageWait::Stage {
                fleet: t.rules.fleet.clone(),
                change: t.id.clone(),
                stage: String::new(),
                current: String::new(),
                waits: "its journal has not been read yet".into(),
            }),
        }
    }

    /// A gate was read.
    pub fn reading(&mut self, fleet: &str, gate: &str, outcome: GateOutcome) {
        if let Some(t) = self.fleets.get_mut(fleet) {
            t.ops.push(Op::Reading {
                gate: gate.to_string(),
                outcome,
            });
        }
    }

    /// The gates due to be read now (each FleetRollout's, while its change runs).
    pub fn due_gates(&mut self, now: Timestamp) -> Vec<(String, GateRules)> {
        let mut out = Vec::new();
        for (name, t) in &mut self.fleets {
            let Some(change) = t
                .state
                .as_ref()
                .map(|s| &s.change)
                .filter(|c| matches!(c.status, ChangeStatus::Running))
            else {
                continue;
            };
            for g in &t.rules.for_change(change).gates {
                let due = t.gates_due.get(&g.name).copied().unwrap_or(now);
                if due <= now {
                    let next = now
                        .saturating_add(
                            jiff::SignedDuration::try_from(g.interval).unwrap_or_default(),
                        )
                        .unwrap_or(now);
                    t.gates_due.insert(g.name.clone(), next);
                    out.push((name.clone(), g.clone()));
                }
            }
        }
        out
    }

    /// The next instant time alone changes something: a soak ends, a gate's
    /// `for` is met, a gate is due to be read.
    pub fn next_due(&self) -> Option<Timestamp> {
        self.fleets
            .values()
            .filter(|t| {
                t.state
                    .as_ref()
                    .is_some_and(|s| matches!(s.change.status, ChangeStatus::Running))
            })
            .flat_map(|t| t.next_due.into_iter().chain(t.gates_due.values().copied()))
            .min()
    }

    /// Whether a step has something to do.
    pub fn pending(&self, now: Timestamp) -> bool {
        self.fleets.values().any(|t| {
            t.state.is_none()
                || t.dirty
                || !t.ops.is_empty()
                || t.next_due.is_some_and(|d| d <= now)
        })
    }

    /// An operator's pause or resume of the change of `fleet`; the answer
    /// for them.
    pub fn control(
        &mut self,
        fleet: &str,
        action: FleetControl,
        by: &str,
        reason: &str,
    ) -> Result<(), ControlRefused> {
        let Some(t) = self.fleets.get_mut(fleet) else {
            return Err(
                format!("no FleetRollout named {fleet:?} in the desired state in force").into(),
            );
        };
        t.ops.push(Op::Control {
            action,
            by: by.to_string(),
            reason: reason.to_string(),
        });
        Ok(())
    }

    /// Read the journals again (under `--ha`, other daemons write them).
    pub async fn refresh(&mut self) {
        for (name, t) in &mut self.fleets {
            match self.journal.load(name).await {
                Ok(state) => {
                    if state != t.state {
                        t.set(state);
                        t.dirty = true;
                    }
                    t.error = None;
                }
                Err(e) => t.error = Some(format!("{e:#}")),
            }
        }
    }

    /// Write what happened (admissions, readings, an operator's hand), and
    /// the decision it leads to, for every FleetRollout that needs it.
    /// Journal first: what the caller does next (start workers, stop them,
    /// look at pools again) follows only what was written.
    pub async fn step(&mut self, now: Timestamp) -> Stepped {
        let mut out = Stepped {
            at: Some(now),
            ..Stepped::default()
        };
        let facts = &self.facts;
        for (name, t) in &mut self.fleets {
            let due = t.next_due.is_some_and(|d| d <= now);
            if t.state.is_some() && !t.dirty && t.ops.is_empty() && !due {
                continue;
            }
            let ops = std::mem::take(&mut t.ops);
            let input = TurnInput {
                fleet: name,
                id: &t.id,
                targets: &t.targets,
                rules: &t.rules,
                ops: &ops,
                facts,
                now,
            };
            // The turn is computed against the journal as it is (under
            // `--ha`, again with what another daemon wrote in between):
            // only the last one, the one written, is acted on.
            let mut turned = Turn::default();
            let result = self
                .journal
                .update(name, |current| {
                    let (write, turn) = turn(current, &input);
                    turned = turn;
                    write
                })
                .await;
            match result {
                Ok(state) => written(t, state, turned, name, &mut out),
                // A daemon holding no lease (a standby) writes nothing: it
                // follows the change as the others journal it.
                Err(FleetJournalError::Fenced(why)) => {
                    let state = self.journal.load(name).await;
                    fenced(t, state, ops, name, &why.0, &mut out);
                }
                Err(e) => not_written(t, &e, ops, name, now, &mut out),
            }
        }
        out
    }

    /// Each FleetRollout as status shows it.
    pub fn status(&self, now: Timestamp) -> Vec<FleetStatus> {
        self.fleets
            .iter()
            .map(|(name, t)| {
                let change = t.state.as_ref().map(|s| &s.change);
                let rules = change.map_or(&*t.rules, |c| t.rules.for_change(c));
                let stages = rules
                    .stages
                    .iter()
                    .map(|s| {
                        let mut st = StageStatus {
                            name: s.name.clone(),
                            pools: s.pools.len(),
                            done: 0,
                            rolling: 0,
                            waiting: 0,
                            failed: 0,
                            soak_seconds: s.soak.as_secs(),
                            record: change.and_then(|c| c.record(&s.name).cloned()),
                            cells: Vec::with_capacity(s.pools.len()),
                        };
                        for pool in &s.pools {
                            let record = change.and_then(|c| c.pools.get(pool));
                            let fact = match (self.facts.get(pool), change) {
                                (Some((f, at)), Some(c)) if *at >= c.started_at => f.clone(),
                                _ => PoolFact::Unknown,
                            };
                            let stopped = change.is_some_and(|c| {
                                matches!(
                                    c.status,
                                    ChangeStatus::Halted { .. } | ChangeStatus::Paused { .. }
                                )
                            });
                            let cell = match (record, &fact) {
                                (Some(PoolRecord::Done { .. }), _) => "done",
                                // Halted or paused mid-roll: stopped at a safe point.
                                (Some(PoolRecord::Rolling { .. }), PoolFact::Rolls) if stopped => {
                                    "stopped"
                                }
                                (Some(PoolRecord::Rolling { .. }), _) => "rolling",
                                (Some(PoolRecord::RolledBack { .. }), _) => "rolled-back",
                                (Some(PoolRecord::Failed { .. }), _)
                                | (_, PoolFact::Failed(_) | PoolFact::RolledBack(_)) => "failed",
                                (None, PoolFact::InSync) => "in-sync",
                                (None, PoolFact::Rolls) => "waiting",
                                (None, PoolFact::Paused(_)) => "paused",
                                (None, PoolFact::Error(_)) => "error",
                                (None, PoolFact::Unknown) => "unknown",
                            };
                            match cell {
                                "done" | "in-sync" => st.done += 1,
                                "rolling" => st.rolling += 1,
                                "failed" => st.failed += 1,
                                "waiting" => st.waiting += 1,
                                _ => {}
                            }
                            st.cells.push((pool.clone(), cell.to_string()));
                        }
                        st
                    })
                    .collect();
                let _ = now;
                FleetStatus {
                    name: name.clone(),
                    change: change.cloned(),
                    stages,
                    waiting: t.waiting.clone().map(Said::new),
                    error: t.error.clone(),
                    history: t
                        .state
                        .as_ref()
                        .map(|s| s.history.clone())
                        .unwrap_or_default(),
                }
            })
            .collect()
    }
}

/// What one FleetRollout's turn reads.
struct TurnInput<'a> {
    fleet: &'a str,
    /// The change id this desired state would begin.
    id: &'a str,
    targets: &'a BTreeMap<String, TemplateHash>,
    rules: &'a Rules,
    ops: &'a [Op],
    facts: &'a HashMap<String, (PoolFact, Timestamp)>,
    now: Timestamp,
}

/// What one FleetRollout's turn decided, acted on once it is written.
#[derive(Default)]
struct Turn {
    notes: Vec<FleetNote>,
    wake: Vec<String>,
    stop: Vec<String>,
    admitted: Vec<String>,
    refused: Vec<(String, Verdict)>,
    resume: Vec<String>,
    waiting: Option<FleetWait>,
    next_due: Option<Timestamp>,
    began: bool,
}

/// One turn against the journal as it is: a change begins when the
/// targets ask for one; the operations are applied (readings, an
/// operator's hand); the change is decided; admissions are taken against
/// it. Returns what to write (`None`: nothing changed) and what follows.
fn turn(current: Option<FleetState>, inp: &TurnInput) -> (Option<FleetState>, Turn) {
    let before = current.clone();
    let mut out = Turn::default();
    let mut state = begin(current, inp, &mut out);
    apply_ops(&mut state.change, inp, &mut out);
    let fact = |pool: &str| match inp.facts.get(pool) {
        Some((f, at)) if *at >= state.change.started_at => f.clone(),
        _ => PoolFact::Unknown,
    };
    let decide = |change: &crate::fleet::Change| {
        decide_change(
            change,
            &Inputs {
                now: inp.now,
                rules: inp.rules,
                facts: &fact,
            },
        )
    };
    let d = decide(&state.change);
    out.notes.extend(d.notes);
    out.wake.extend(d.wake);
    out.stop.extend(d.stop);
    out.waiting = d.waiting;
    out.next_due = d.next_due;
    let mut change = d.change;
    if admit_all(&mut change, inp, &mut out) {
        // What it waits for now, with the admitted pools rolling.
        let again = decide(&change);
        out.waiting = again.waiting;
        out.next_due = again.next_due;
    }
    state.change = change;
    ((before.as_ref() != Some(&state)).then_some(state), out)
}

/// The fleet's state after this load: the change in force, or a new one
/// (every governed pool is looked at again in it).
fn begin(current: Option<FleetState>, inp: &TurnInput, out: &mut Turn) -> FleetState {
    let (state, new) = FleetState::after_load(
        current,
        inp.fleet,
        inp.id.to_string(),
        inp.targets.clone(),
        inp.now,
    );
    out.began = new;
    if new {
        let superseded = state.history.first().filter(|h| h.superseded_by.is_some());
        out.notes.push(FleetNote {
            event: EventKind::FleetChangeStarted,
            pool: None,
            message: format!(
                "change {} over {} governed pool(s){}",
                state.change.id,
                inp.targets.len(),
                superseded
                    .map(|h| format!("; supersedes change {}", h.id))
                    .unwrap_or_default()
            ),
        });
        out.wake.extend(inp.targets.keys().cloned());
    }
    state
}

/// The gates' readings and an operator's hand, in the order they came.
fn apply_ops(change: &mut crate::fleet::Change, inp: &TurnInput, out: &mut Turn) {
    for op in inp.ops {
        match op {
            Op::Reading { gate, outcome } => {
                out.notes
                    .extend(read_gate(change, gate, outcome.clone(), inp.now));
            }
            Op::Control { action, by, reason } => {
                out.wake.extend(
                    inp.rules
                        .stages
                        .iter()
                        .flat_map(|s| s.pools.iter().cloned()),
                );
                let e = control(change, action, by, reason, inp.now);
                out.notes.extend(e.notes);
                out.wake.extend(e.wake);
                out.stop.extend(e.stop);
                out.resume.extend(e.resume);
            }
            Op::Admit { .. } => {}
        }
    }
}

/// Admissions last, against the change as decided now. True when a pool
/// was admitted.
fn admit_all(change: &mut crate::fleet::Change, inp: &TurnInput, out: &mut Turn) -> bool {
    for op in inp.ops {
        let Op::Admit { pool, from } = op else {
            continue;
        };
        let already = matches!(change.pools.get(pool), Some(PoolRecord::Rolling { .. }));
        match admit(change, inp.rules, pool, from, inp.now) {
            // Admitted before (a restart, a worker stopped and started
            // again): it keeps its slot.
            Ok(()) if already => out.admitted.push(pool.clone()),
            Ok(()) => {
                out.notes.push(FleetNote {
                    event: EventKind::FleetPoolAdmitted,
                    pool: Some(pool.clone()),
                    message: format!(
                        "may roll: {} of {} slot(s) taken",
                        change.rolling(),
                        inp.rules
                            .max_concurrent_pools
                            .map_or("unlimited".into(), |m| m.to_string())
                    ),
                });
                out.admitted.push(pool.clone());
            }
            Err(v) => out.refused.push((pool.clone(), v)),
        }
    }
    !out.admitted.is_empty()
}

/// The turn was written (or there was nothing to write): it is acted on.
fn written(t: &mut Tracked, state: Option<FleetState>, turn: Turn, name: &str, out: &mut Stepped) {
    t.set(state);
    t.dirty = false;
    t.error = None;
    t.waiting = turn.waiting;
    t.next_due = turn.next_due;
    if turn.began {
        t.gates_due.clear();
    }
    let change_id = t
        .state
        .as_ref()
        .map_or_else(String::new, |s| s.change.id.clone());
    out.notes.extend(
        turn.notes
            .into_iter()
            .map(|n| (name.to_string(), change_id.clone(), n)),
    );
    out.wake.extend(turn.wake);
    out.stop.extend(turn.stop);
    out.admitted.extend(turn.admitted);
    out.refused.extend(turn.refused);
    out.resume.extend(turn.resume);
}

/// This daemon holds no lease: it follows the journal as the others write
/// it; admissions wait, an operator's hand is tried again.
fn fenced(
    t: &mut Tracked,
    state: anyhow::Result<Option<FleetState>>,
    ops: Vec<Op>,
    name: &str,
    why: &str,
    out: &mut Stepped,
) {
    if let Ok(state) = state {
        t.set(state);
    }
    t.dirty = false;
    t.error = None;
    for op in ops {
        match op {
            Op::Admit { pool, .. } => out.refused.push((
                pool,
                Verdict::Hold(crate::fleet::StageWait::Paused {
                    fleet: name.to_string(),
                    change: t.id.clone(),
                    by: "this daemon's role".into(),
                    reason: why.to_string(),
                }),
            )),
            control @ Op::Control { .. } => t.ops.push(control),
            // A reading is stale by the next one.
            Op::Reading { .. } => {}
        }
    }
}

/// The journal could not be written: nothing was admitted, and what was
/// asked is asked again at the next step, a little later.
fn not_written(
    t: &mut Tracked,
    e: &FleetJournalError,
    ops: Vec<Op>,
    name: &str,
    now: Timestamp,
    out: &mut Stepped,
) {
    let why = match e {
        FleetJournalError::Fenced(w) => format!("not written ({w})"),
        FleetJournalError::Other(e) => format!("{e:#}"),
    };
    let message = format!("fleet rollout {name}: journal: {why}");
    t.error = Some(message.clone());
    t.next_due = now.saturating_add(SignedDuration::from_secs(5)).ok();
    for op in ops {
        if let Op::Admit { pool, .. } = &op {
            out.refused.push((
                pool.clone(),
                Verdict::Hold(crate::fleet::StageWait::Halted {
                    fleet: name.to_string(),
                    change: t.id.clone(),
                    reason: message.clone(),
                }),
            ));
        } else {
            t.ops.push(op);
        }
    }
    out.errors.push(message);
}

/// An operator's pause or resume of a change, edited in its journal
/// directly (no daemon runs): the pools whose rollouts the resume resumes
/// too. `None` when the change was not in a state to take it.
pub fn control_journaled(
    change: &mut crate::fleet::Change,
    action: &FleetControl,
    by: &str,
    reason: &str,
    now: Timestamp,
) -> Option<Vec<String>> {
    let before = change.status.clone();
    let e = control(change, action, by, reason, now);
    (change.status != before).then_some(e.resume)
}

/// What an operator's hand on a change leads to.
#[derive(Default)]
struct Effects {
    notes: Vec<FleetNote>,
    wake: Vec<String>,
    stop: Vec<String>,
    /// Pools whose failed or rolled-back rollouts a resume resumes too.
    resume: Vec<String>,
}

/// An operator's pause or resume, on the change as journaled.
fn control(
    change: &mut crate::fleet::Change,
    action: &FleetControl,
    by: &str,
    reason: &str,
    now: Timestamp,
) -> Effects {
    let mut e = Effects::default();
    match action {
        FleetControl::Pause => {
            if !matches!(change.status, ChangeStatus::Running) {
                return e;
            }
            change.status = ChangeStatus::Paused {
                by: by.to_string(),
                reason: reason.to_string(),
                at: now,
            };
            change.log(now, "paused", format!("by {by}: {reason}"));
            e.stop.extend(
                change
                    .pools
                    .iter()
                    .filter(|(_, r)| matches!(r, PoolRecord::Rolling { .. }))
                    .map(|(p, _)| p.clone()),
            );
            e.wake.extend(change.pools.keys().cloned());
            e.notes.push(FleetNote {
                event: EventKind::FleetPaused,
                pool: None,
                message: format!("paused by {by}: {reason}"),
            });
        }
        FleetControl::Resume => {
            if matches!(
                change.status,
                ChangeStatus::Running | ChangeStatus::Completed { .. }
            ) {
                return e;
            }
            // The failures a human looked into no longer count; pools the
            // halt rolled back may roll forward again.
            let cleared: Vec<String> = change
                .pools
                .iter()
                .filter(|(_, r)| {
                    matches!(r, PoolRecord::Failed { .. } | PoolRecord::RolledBack { .. })
                })
                .map(|(p, _)| p.clone())
                .collect();
            for p in &cleared {
                change.pools.remove(p);
            }
            change.status = ChangeStatus::Running;
            change.log(now, "resumed", format!("by {by}: {reason}"));
            e.wake.extend(change.pools.keys().cloned());
            e.wake.extend(cleared.iter().cloned());
            e.resume.extend(cleared);
            e.notes.push(FleetNote {
                event: EventKind::FleetResumed,
                pool: None,
                message: format!("resumed by {by}: {reason}"),
            });
        }
    }
    e
}
