//! The phase of a roll: what it is doing or waiting for now, and when that
//! ends, as a person reads it at the head of a pool ("checkpoint bake until
//! 21:04:30 UTC"). The core names it from its state; the status, the page
//! and `rollout status` show it as given.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

/// What kind of wait or work a roll is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PhaseKind {
    /// Replacing nodes within the budgets.
    Rolling,
    /// Waiting for the first new node to stay healthy for `minReady`.
    Canary,
    /// Baking at a checkpoint.
    Bake,
    /// The disruption policy holds the roll until its window opens.
    Held,
    /// Stopped by a person.
    Paused,
    /// Stopped by a failure; a person resumes it.
    Degraded,
    /// Every node runs the target template.
    Completed,
    /// Returned to the previous template.
    RolledBack,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Phase {
    pub kind: PhaseKind,
    /// One line: "checkpoint bake at 50%", "canary: the first new node
    /// stays healthy for 10s".
    pub text: String,
    /// When it ends, where that is known (a bake's end, a window's opening).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<Timestamp>,
}
