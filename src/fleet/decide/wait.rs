//! What a change waits for, typed, and said in one `Display`.

use std::fmt;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

/// Why the change in flight does not move now.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(
    tag = "kind",
    rename_all = "camelCase",
    rename_all_fields = "camelCase"
)]
pub enum FleetWait {
    /// The change halted (a person resumes it).
    Halted,
    /// A stage waits for its gates before it starts.
    ToStart { stage: String, gate: GateWait },
    /// A stage's pools are rolling, waiting for a slot, or held.
    Rolling { stage: String, tally: StageTally },
    /// A stage rolled and soaks.
    Soaking { stage: String, until: Timestamp },
    /// A stage soaked and waits for its gates before it passes.
    Gates { stage: String, gate: GateWait },
}

/// The gate a stage waits for, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(
    tag = "state",
    rename_all = "camelCase",
    rename_all_fields = "camelCase"
)]
pub enum GateWait {
    /// Not evaluated yet.
    NotRead { gate: String },
    /// Breached, or it cannot be evaluated (`reading` says which).
    NotHolding { gate: String, reading: String },
    /// Holding, not yet for its `for`.
    HoldingFor {
        gate: String,
        held_seconds: u64,
        for_seconds: u64,
    },
}

/// A stage's pools, counted by where each stands.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StageTally {
    pub total: usize,
    pub done: usize,
    /// Pools this stage rolled (done by a roll, not in sync already).
    pub rolled: u32,
    pub rolling: usize,
    /// Pools waiting for a slot, in admission order.
    pub waiting: Vec<String>,
    pub unknown: usize,
    pub failed: Vec<String>,
    /// `POOL (why)`: paused by a person, or not planned.
    pub held: Vec<String>,
}

impl StageTally {
    /// Every pool of the stage is done (rolled, or nothing to roll).
    pub fn complete(&self) -> bool {
        self.rolling == 0
            && self.waiting.is_empty()
            && self.unknown == 0
            && self.failed.is_empty()
            && self.held.is_empty()
    }
}

fn when(t: &Timestamp) -> String {
    t.strftime("%Y-%m-%d %H:%M:%S UTC").to_string()
}

impl fmt::Display for FleetWait {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FleetWait::Halted => write!(f, "halted"),
            FleetWait::ToStart { stage, gate } => {
                write!(f, "stage {stage} waits to start: {gate}")
            }
            FleetWait::Rolling { stage, tally } => write!(f, "stage {stage}: {tally}"),
            FleetWait::Soaking { stage, until } => {
                write!(f, "stage {stage} soaks until {}", when(until))
            }
            FleetWait::Gates { stage, gate } => {
                write!(f, "stage {stage} soaked; waits for {gate}")
            }
        }
    }
}

impl fmt::Display for GateWait {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GateWait::NotRead { gate } => write!(f, "gate {gate} has not been evaluated yet"),
            GateWait::NotHolding { gate, reading } => write!(f, "gate {gate} {reading}"),
            GateWait::HoldingFor {
                gate,
                held_seconds,
                for_seconds,
            } => write!(
                f,
                "gate {gate} has held {held_seconds}s of its {for_seconds}s"
            ),
        }
    }
}

impl fmt::Display for StageTally {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = vec![format!("{}/{} pools done", self.done, self.total)];
        if self.rolling > 0 {
            parts.push(format!("{} rolling", self.rolling));
        }
        if !self.waiting.is_empty() {
            parts.push(format!("{} waiting for a slot", self.waiting.len()));
        }
        if self.unknown > 0 {
            parts.push(format!("{} not looked at yet", self.unknown));
        }
        let list = |names: &[String]| {
            let shown: Vec<&str> = names.iter().take(3).map(String::as_str).collect();
            match names.len() - shown.len() {
                0 => shown.join(", "),
                n => format!("{} and {n} more", shown.join(", ")),
            }
        };
        if !self.failed.is_empty() {
            parts.push(format!("failed: {}", list(&self.failed)));
        }
        if !self.held.is_empty() {
            parts.push(format!("held: {}", list(&self.held)));
        }
        write!(f, "{}", parts.join(", "))
    }
}
