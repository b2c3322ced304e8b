//! The stage and halt decision: a pure function of the change as
//! journaled, what is known of each governed pool now, the gates' readings
//! and the time. Level-triggered, like `rollout::decide`: called again with
//! the same inputs it decides the same, so a restart repeats nothing.
//!
//! In order, one phase file each:
//! 1. [`admitted`]: an admitted pool whose latest plan has nothing left to
//!    roll is done; one whose rollout waits for a human (Degraded, rolled
//!    back) failed. A halted change's turned-round pools are rolled back
//!    once their plans say so.
//! 2. [`halts`]: `halt.failedPools` failed pools halt the change; so does a
//!    gate that is breached while the change has rolled or is rolling a pool.
//! 3. [`stages`]: the stage in progress starts once every gate holds (for
//!    its `for`); it completes when each of its pools is done (rolled, or
//!    nothing to roll); its soak runs from then if it rolled a pool; it
//!    passes when the soak is over and every gate has held for its `for`.
//!    A stage that passes lets the next start in the same call.
//! 4. Every stage passed: the change is complete.
//!
//! What the change waits for is a [`FleetWait`], said in one `Display`.

mod admitted;
mod gates;
mod halts;
mod stages;
mod wait;

use jiff::{SignedDuration, Timestamp};

use super::change::{Change, ChangeStatus};
use super::rules::Rules;
use crate::model::EventKind;

pub use gates::{describe, read_gate};
pub use wait::{FleetWait, GateWait, StageTally};

/// What is known of a governed pool now: from its latest plan made since
/// the change began, and whether its worker runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PoolFact {
    /// Not planned since the change began.
    Unknown,
    /// Its nodes run its desired template, and nothing is in flight.
    InSync,
    /// It has nodes to roll, or a roll under way.
    Rolls,
    /// Its rollout waits for a human after a failure (Degraded).
    Failed(String),
    /// Its rollout ended rolled back (its own `onFailure: rollback`, or the
    /// halt's `onHalt: rollback`).
    RolledBack(String),
    /// A human paused its rollout (not a failure; it holds its stage).
    Paused(String),
    /// It could not be planned (its provider did not answer...).
    Error(String),
}

/// Everything the decision reads besides the change itself.
pub struct Inputs<'a> {
    pub now: Timestamp,
    pub rules: &'a Rules,
    /// Each governed pool's fact.
    pub facts: &'a dyn Fn(&str) -> PoolFact,
}

/// Something to report, as a `fleet_*` event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FleetNote {
    pub event: EventKind,
    pub pool: Option<String>,
    pub message: String,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    pub change: Change,
    pub notes: Vec<FleetNote>,
    /// Pools to plan again: their stage opened, a slot was freed, or the
    /// change halted (their roll is held, or rolls back).
    pub wake: Vec<String>,
    /// Pools whose workers stop at their next safe point (the change halted
    /// or was paused).
    pub stop: Vec<String>,
    /// What the change waits for (`None`: nothing, or done).
    pub waiting: Option<FleetWait>,
    /// When time alone changes something (a soak ends, a gate's `for` is met).
    pub next_due: Option<Timestamp>,
}

impl Decision {
    fn note(&mut self, event: EventKind, pool: Option<&str>, message: impl Into<String>) {
        self.notes.push(FleetNote {
            event,
            pool: pool.map(str::to_string),
            message: message.into(),
        });
    }

    /// The change waits for `why`, until `due` when time alone ends it.
    fn wait(mut self, why: FleetWait, due: Option<Timestamp>) -> Decision {
        self.waiting = Some(why);
        self.next_due = due;
        self
    }
}

fn after(t: Timestamp, d: std::time::Duration) -> Timestamp {
    t.saturating_add(SignedDuration::try_from(d).unwrap_or(SignedDuration::MAX))
        .unwrap_or(Timestamp::MAX)
}

fn when(t: Timestamp) -> String {
    t.strftime("%Y-%m-%d %H:%M:%S UTC").to_string()
}

pub fn decide_change(prev: &Change, inp: &Inputs) -> Decision {
    let rules = inp.rules.for_change(prev);
    let mut d = Decision {
        change: prev.clone(),
        notes: Vec::new(),
        wake: Vec::new(),
        stop: Vec::new(),
        waiting: None,
        next_due: None,
    };
    match d.change.status {
        ChangeStatus::Halted { .. } => {
            admitted::rolled_back(&mut d, inp);
            return d;
        }
        ChangeStatus::Running => {}
        ChangeStatus::Paused { .. } | ChangeStatus::Completed { .. } => return d,
    }
    let freed = admitted::follow(&mut d, inp);
    if halts::halt_if_due(&mut d, rules, inp.now) {
        return d;
    }
    stages::advance(d, rules, inp, freed)
}

#[cfg(test)]
mod tests;
