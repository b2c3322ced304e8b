//! The gates: a reading's record, and whether every gate holds (for its
//! `for`) before a stage starts or passes.

use jiff::Timestamp;

use super::{FleetNote, GateWait, after};
use crate::fleet::change::{Change, GATE_HISTORY, GateOutcome, Reading};
use crate::fleet::rules::Rules;
use crate::model::EventKind;

/// A gate read: its record follows (holding since when, the breaks); the
/// note when it starts or stops holding.
pub fn read_gate(
    change: &mut Change,
    gate: &str,
    outcome: GateOutcome,
    now: Timestamp,
) -> Option<FleetNote> {
    let rec = change.gates.entry(gate.to_string()).or_default();
    let held = rec.last.as_ref().map(|r| r.outcome.holds());
    let reading = Reading { at: now, outcome };
    let holds = reading.outcome.holds();
    if holds {
        rec.holding_since.get_or_insert(now);
    } else {
        rec.holding_since = None;
        rec.breaks.push(reading.clone());
        if rec.breaks.len() > GATE_HISTORY {
            rec.breaks.remove(0);
        }
    }
    let message = describe(&reading.outcome);
    rec.last = Some(reading);
    (held != Some(holds)).then(|| FleetNote {
        event: EventKind::FleetGateChanged,
        pool: None,
        message: format!("gate {gate} {message}"),
    })
}

/// A reading in words.
pub fn describe(outcome: &GateOutcome) -> String {
    match outcome {
        GateOutcome::Holds { value } => format!("holds ({value})"),
        GateOutcome::Breached { value } => format!("is breached ({value})"),
        GateOutcome::Unknown { error } => format!("cannot be evaluated: {error}"),
    }
}

/// Whether every gate holds and has held for its `for`: `Ok`, or what it
/// waits for and when that could be met.
pub(super) fn hold(
    change: &Change,
    rules: &Rules,
    now: Timestamp,
) -> Result<(), (GateWait, Option<Timestamp>)> {
    for g in &rules.gates {
        let rec = change.gates.get(&g.name);
        let Some(last) = rec.and_then(|r| r.last.as_ref()) else {
            return Err((
                GateWait::NotRead {
                    gate: g.name.clone(),
                },
                None,
            ));
        };
        if !last.outcome.holds() {
            return Err((
                GateWait::NotHolding {
                    gate: g.name.clone(),
                    reading: describe(&last.outcome),
                },
                None,
            ));
        }
        let since = rec.and_then(|r| r.holding_since).unwrap_or(now);
        let due = after(since, g.hold_for);
        if now < due {
            return Err((
                GateWait::HoldingFor {
                    gate: g.name.clone(),
                    held_seconds: now.duration_since(since).as_secs().max(0) as u64,
                    for_seconds: g.hold_for.as_secs(),
                },
                Some(due),
            ));
        }
    }
    Ok(())
}
