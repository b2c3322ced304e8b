//! What an event reports: one name per kind of step, as written in the event
//! log (`"event": "drain_started"`) and in logs, and the event itself (the
//! pool, its counts, a message). The step function names its notes with
//! these too, so every event has one spelling, pinned by a test. The shell's
//! `EventSink` writes and shows them.

use serde::{Deserialize, Serialize};

use super::{NodeState, ObservedPool, TemplateHash};

macro_rules! event_kinds {
    ($($(#[$doc:meta])* $variant:ident = $name:literal,)*) => {
        /// The kind of an event.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        pub enum EventKind {
            $($(#[$doc])* #[serde(rename = $name)] $variant,)*
        }

        impl EventKind {
            pub const ALL: &[EventKind] = &[$(EventKind::$variant,)*];

            /// The name in the event log.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(EventKind::$variant => $name,)*
                }
            }
        }
    };
}

event_kinds! {
    // The rollout executor.
    RolloutStarted = "rollout_started",
    RolloutSettingsChanged = "rollout_settings_changed",
    NodeCreateRequested = "node_create_requested",
    NodeHealthy = "node_healthy",
    CanaryHealthy = "canary_healthy",
    DrainStarted = "drain_started",
    NodeCordoned = "node_cordoned",
    DrainBlocked = "drain_blocked",
    NodeHeld = "node_held",
    NodeHoldLifted = "node_hold_lifted",
    NodeDrained = "node_drained",
    DrainForced = "drain_forced",
    NodeQuarantined = "node_quarantined",
    NodeUncordoned = "node_uncordoned",
    TerminateRequested = "terminate_requested",
    ReimageRequested = "reimage_requested",
    NodeTerminated = "node_terminated",
    Checkpoint = "checkpoint",
    NodeFailed = "node_failed",
    Degraded = "degraded",
    RolloutStalled = "rollout_stalled",
    RollbackStarted = "rollback_started",
    SurgeRefused = "surge_refused",
    BlockedByPolicy = "blocked_by_policy",
    ResumedInWindow = "resumed_in_window",
    Completed = "completed",
    StepFailed = "step_failed",
    // A plan's steps, as apply runs them.
    PoolCreated = "pool_created",
    PoolDeleted = "pool_deleted",
    PoolForgotten = "pool_forgotten",
    PoolAdopted = "pool_adopted",
    BoundsSet = "bounds_set",
    PoolScaled = "pool_scaled",
    UpdatedInPlace = "updated_in_place",
    TemplateSet = "template_set",
    RolloutCompleted = "rollout_completed",
    RolloutWaiting = "rollout_waiting",
    RolloutStopped = "rollout_stopped",
    // A human's hand.
    RolloutPaused = "rollout_paused",
    RolloutResumed = "rollout_resumed",
    DisruptionPolicyOverridden = "disruption_policy_overridden",
    // A change across pools (`kind: FleetRollout`).
    FleetChangeStarted = "fleet_change_started",
    FleetStageStarted = "fleet_stage_started",
    FleetStageCompleted = "fleet_stage_completed",
    FleetStagePassed = "fleet_stage_passed",
    FleetPoolAdmitted = "fleet_pool_admitted",
    FleetPoolDone = "fleet_pool_done",
    FleetPoolFailed = "fleet_pool_failed",
    FleetPoolRolledBack = "fleet_pool_rolled_back",
    FleetGateChanged = "fleet_gate_changed",
    FleetHalted = "fleet_halted",
    FleetPaused = "fleet_paused",
    FleetResumed = "fleet_resumed",
    FleetCompleted = "fleet_completed",
    // The config repo (`run --git-url`).
    GitFetchFailed = "git_fetch_failed",
    CommitApplied = "commit_applied",
    CommitRefused = "commit_refused",
    // Images that follow a channel (`kind: ImageChannel`).
    ImageEligible = "image_eligible",
    ImageQueued = "image_queued",
    ImageSourceFailed = "image_source_failed",
    ImageSourceRecovered = "image_source_recovered",
    ImageRecalled = "image_recalled",
    ImageUnrecalled = "image_unrecalled",
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    pub desired: u32,
    pub total: u32,
    pub available: u32,
    pub updated: u32,
    pub outdated: u32,
    /// Updated and available: what a roll has finished.
    #[serde(default)]
    pub done: u32,
    /// Updated and not yet available (booting, or within `minReady`).
    #[serde(default)]
    pub launching: u32,
    /// Outdated and on their way out (cordoned, draining, terminating).
    #[serde(default)]
    pub draining: u32,
}

impl Counts {
    /// Count one live node: on the target template or not, available or
    /// not, and (an old one) on its way out or not.
    pub fn count(&mut self, updated: bool, available: bool, leaving: bool) {
        self.total += 1;
        self.available += u32::from(available);
        if updated {
            self.updated += 1;
            self.done += u32::from(available);
            self.launching += u32::from(!available);
        } else {
            self.outdated += 1;
            self.draining += u32::from(leaving);
        }
    }

    /// "4/6 done, 2 launching, 2 old draining": done of desired, and the
    /// nodes in flight apart (those that are not zero).
    pub fn progress(&self) -> String {
        let mut s = format!("{}/{} done", self.done.min(self.desired), self.desired);
        if self.launching > 0 {
            s.push_str(&format!(", {} launching", self.launching));
        }
        // Old nodes not yet on their way out: a pool is never "6/6 done"
        // with nothing more said while old nodes remain.
        let waiting = self.outdated.saturating_sub(self.draining);
        if waiting > 0 {
            s.push_str(&format!(", {waiting} old left"));
        }
        if self.draining > 0 {
            s.push_str(&format!(", {} old draining", self.draining));
        }
        s
    }
}

impl Counts {
    /// The counts of an observed pool against the template and size it
    /// should have (`size`: the desired size, not the provider's, which a
    /// roll's surge raises).
    pub fn of(pool: &ObservedPool, desired: TemplateHash, size: u32) -> Counts {
        let mut c = Counts {
            desired: size,
            ..Counts::default()
        };
        for n in pool.live_nodes() {
            let serving = n.state == NodeState::Healthy && !n.cordoned;
            c.count(n.template == desired, serving, n.cordoned);
        }
        c
    }
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Event {
    pub ts: jiff::Timestamp,
    pub pool: String,
    pub event: EventKind,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub counts: Option<Counts>,
    pub message: String,
    /// The desired state's git revision (`branch@sha`), stamped by the sink.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// Which daemon acted, under which term of the pool's lease (`run --ha`),
    /// stamped by the sink.
    #[serde(default, skip_serializing_if = "Option::is_none", flatten)]
    pub by: Option<Actor>,
    /// The change across pools it belongs to (`fleet_*` events, and a pool's
    /// events while a FleetRollout governs its roll).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fleet: Option<FleetRef>,
    /// When what it reports began, where that is before `ts`: a
    /// `node_healthy` is reported once the node has stayed healthy for
    /// `minReady`, and `since` is when it became healthy (what the pool's
    /// latency history measures a boot to).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<jiff::Timestamp>,
    /// The roll's phase after this event (the executor's events).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<super::phase::Phase>,
}

impl Event {
    /// An event of `pool` (empty for one of the whole desired state) with
    /// nothing more than its message; the sink stamps the rest.
    pub fn new(
        ts: jiff::Timestamp,
        pool: impl Into<String>,
        event: EventKind,
        message: impl Into<String>,
    ) -> Event {
        Event {
            ts,
            pool: pool.into(),
            event,
            node: None,
            counts: None,
            message: message.into(),
            revision: None,
            by: None,
            fleet: None,
            since: None,
            phase: None,
        }
    }

    /// The node it concerns.
    pub fn node(mut self, node: Option<String>) -> Event {
        self.node = node;
        self
    }

    /// The pool's counts after it.
    pub fn counts(mut self, counts: Option<Counts>) -> Event {
        self.counts = counts;
        self
    }

    /// The change across pools it belongs to.
    pub fn fleet(mut self, fleet: Option<FleetRef>) -> Event {
        self.fleet = fleet;
        self
    }

    /// When what it reports began.
    pub fn since(mut self, since: Option<jiff::Timestamp>) -> Event {
        self.since = since;
        self
    }

    /// The roll's phase after it.
    pub fn phase(mut self, phase: Option<super::phase::Phase>) -> Event {
        self.phase = phase;
        self
    }
}

/// A FleetRollout and one of its changes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FleetRef {
    pub name: String,
    pub change: String,
}

/// The daemon an event comes from and its term (the epoch of the lease of
/// the pool's shard, or of the leader lease), when it holds one.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Actor {
    pub daemon: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch: Option<i32>,
}

impl std::fmt::Display for EventKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<&str> for EventKind {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The event log's names are an interface: scripts and dashboards read
    /// them. This list pins every one; changing a name fails here first.
    #[test]
    fn event_names_are_pinned() {
        let names: Vec<&str> = EventKind::ALL.iter().map(|k| k.as_str()).collect();
        assert_eq!(
            names,
            [
                "rollout_started",
                "rollout_settings_changed",
                "node_create_requested",
                "node_healthy",
                "canary_healthy",
                "drain_started",
                "node_cordoned",
                "drain_blocked",
                "node_held",
                "node_hold_lifted",
                "node_drained",
                "drain_forced",
                "node_quarantined",
                "node_uncordoned",
                "terminate_requested",
                "reimage_requested",
                "node_terminated",
                "checkpoint",
                "node_failed",
                "degraded",
                "rollout_stalled",
                "rollback_started",
                "surge_refused",
                "blocked_by_policy",
                "resumed_in_window",
                "completed",
                "step_failed",
                "pool_created",
                "pool_deleted",
                "pool_forgotten",
                "pool_adopted",
                "bounds_set",
                "pool_scaled",
                "updated_in_place",
                "template_set",
                "rollout_completed",
                "rollout_waiting",
                "rollout_stopped",
                "rollout_paused",
                "rollout_resumed",
                "disruption_policy_overridden",
                "fleet_change_started",
                "fleet_stage_started",
                "fleet_stage_completed",
                "fleet_stage_passed",
                "fleet_pool_admitted",
                "fleet_pool_done",
                "fleet_pool_failed",
                "fleet_pool_rolled_back",
                "fleet_gate_changed",
                "fleet_halted",
                "fleet_paused",
                "fleet_resumed",
                "fleet_completed",
                "git_fetch_failed",
                "commit_applied",
                "commit_refused",
                "image_eligible",
                "image_queued",
                "image_source_failed",
                "image_source_recovered",
                "image_recalled",
                "image_unrecalled",
            ]
        );
        for k in EventKind::ALL {
            let json = serde_json::to_string(k).unwrap();
            assert_eq!(json, format!("\"{}\"", k.as_str()));
            assert_eq!(serde_json::from_str::<EventKind>(&json).unwrap(), *k);
        }
    }
}
