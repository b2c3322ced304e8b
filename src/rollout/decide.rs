//! The rollout step function: a PURE function from (journal state, observed
//! nodes, drain progress, disruption gate, now) to the next actions.
//!
//! It is level-triggered, like a Kubernetes controller: every call recomputes from
//! what is observed, so repeating a call after a crash repeats no side effect
//! that already happened (a created node is counted, a terminating node is not
//! chosen again). It is pipelined: whenever a slot frees, the next step starts in
//! the same call; nothing waits for the slowest node of a batch.
//!
//! Bounds, at every instant (DESIGN.md "Rollout rules"):
//!   total nodes     <= size + surge
//!   available nodes >= floor = min(size - unavailable, available at start)

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};

use super::state::{Mark, RolloutState, Settings, Status};
pub use crate::model::DrainProgress;
use crate::model::{Node, NodeState, NodeTemplate, TemplateHash};
use crate::spec::types::{OnDrainTimeout, OnFailure};
use crate::spec::values::Duration;

pub struct Inputs<'a> {
    pub now: Timestamp,
    /// Every node the provider reports for the pool (terminating ones included).
    pub nodes: &'a [Node],
    /// The size the provider holds.
    pub provider_size: u32,
    pub drains: &'a BTreeMap<String, DrainProgress>,
    /// Disruptive steps may start now (disruption policy).
    pub gate_open: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Launch `count` nodes on the target template (raises the provider size).
    CreateNodes { count: u32 },
    /// Cordon and start draining an old node.
    Drain { node: String },
    /// Give up on a drain that timed out (`onTimeout: force`): delete its pods.
    ForceDrain { node: String },
    /// Terminate a node and lower the provider size by one.
    Terminate { node: String },
    /// Reimage a drained node onto the target template, in place.
    Reimage { node: String },
    /// Set the template new nodes launch with (rollback).
    SetTemplate { template: Box<NodeTemplate> },
    /// Return a cordoned node to service (its drain was cut short by a rollback).
    Uncordon { node: String },
}

/// Something worth an event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Note {
    pub event: &'static str,
    pub node: Option<String>,
    pub message: String,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    pub state: RolloutState,
    pub actions: Vec<Action>,
    pub notes: Vec<Note>,
    /// Why no new step could start, when that is the case.
    pub waiting: Option<String>,
}

fn after(t: Timestamp, d: Duration) -> Timestamp {
    let d = SignedDuration::try_from(d.as_std()).unwrap_or(SignedDuration::MAX);
    t.saturating_add(d).unwrap_or(Timestamp::MAX)
}

fn note(event: &'static str, node: Option<&str>, message: impl Into<String>) -> Note {
    Note {
        event,
        node: node.map(str::to_string),
        message: message.into(),
    }
}

/// Available: healthy, not cordoned, not being taken down, and, for a new node
/// (on the target template), healthy for `minReady`. An old node that is healthy
/// is serving: however recently it became healthy, it counts.
pub fn is_available(
    n: &Node,
    target: TemplateHash,
    marks: &BTreeMap<String, Mark>,
    min_ready: Duration,
    now: Timestamp,
) -> bool {
    n.state == NodeState::Healthy
        && !n.cordoned
        && !marks.contains_key(&n.id)
        && (n.template != target || n.healthy_since.is_some_and(|h| after(h, min_ready) <= now))
}

/// Start a rollout towards `target`, or supersede `prior` (a rollout towards an
/// older desired state): what it has in flight is carried over and finished.
pub fn begin(
    pool: &str,
    target: NodeTemplate,
    previous: Option<NodeTemplate>,
    settings: Settings,
    nodes: &[Node],
    prior: Option<&RolloutState>,
    now: Timestamp,
) -> RolloutState {
    let target_hash = target.hash();
    let carried: BTreeMap<String, Mark> = prior
        .map(|p| {
            p.marks
                .iter()
                .filter(|(_, m)| {
                    matches!(
                        m,
                        Mark::Draining { .. } | Mark::Terminating { .. } | Mark::Quarantined
                    )
                })
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        })
        .unwrap_or_default();
    let available = nodes
        .iter()
        .filter(|n| {
            n.state != NodeState::Terminating
                && is_available(n, target_hash, &carried, settings.min_ready, now)
        })
        .count() as u32;
    let floor = settings
        .size
        .saturating_sub(settings.budget.unavailable)
        .min(available);
    RolloutState {
        pool: pool.to_string(),
        target: target.hash(),
        target_template: target,
        previous,
        floor,
        status: Status::Running,
        marks: carried,
        failures: 0,
        canary_done: false,
        next_checkpoint: 0,
        bake_until: None,
        started_at: now,
        last_progress_at: now,
        progress: (0, 0),
        surge_refused_until: None,
        surge_backoff_secs: 0,
        removed: 0,
        blocked_by_policy: false,
        healthy_seen: Default::default(),
        rollback_of: None,
        creates: 0,
        pending_create: None,
        settings,
    }
}

pub fn decide(prev: &RolloutState, inp: &Inputs) -> Decision {
    let mut s = prev.clone();
    let set: Settings = s.settings.clone();
    let now = inp.now;
    let mut actions = Vec::new();
    let mut notes = Vec::new();

    // Marks of nodes that are gone are done with. A Terminating mark on a node
    // still running means the call never reached the provider (we crashed
    // between writing the intent and calling): take it up again.
    let observed_ids: std::collections::HashSet<&str> =
        inp.nodes.iter().map(|n| n.id.as_str()).collect();
    s.marks.retain(|id, _| observed_ids.contains(id.as_str()));
    for n in inp.nodes {
        if let Some(Mark::Terminating { .. }) = s.marks.get(&n.id)
            && n.state != NodeState::Terminating
        {
            actions.push(Action::Terminate { node: n.id.clone() });
        }
    }
    for n in inp.nodes {
        if let Some(Mark::Reimaging { .. }) = s.marks.get(&n.id) {
            if n.template == s.target {
                // Reimaged: from here on a new node like any other.
                s.marks.remove(&n.id);
            } else {
                actions.push(Action::Reimage { node: n.id.clone() });
            }
        }
    }
    let live: Vec<&Node> = inp
        .nodes
        .iter()
        .filter(|n| n.state != NodeState::Terminating)
        .collect();

    // 1. New nodes that did not become healthy within startupTimeout.
    let mut failed_now = Vec::new();
    for n in &live {
        if n.template == s.target
            && !s.marks.contains_key(&n.id)
            && n.state != NodeState::Healthy
            && now >= after(n.launched_at, set.startup_timeout)
        {
            failed_now.push(n.id.clone());
        }
    }
    for id in &failed_now {
        s.marks.insert(id.clone(), Mark::Terminating { at: now });
        s.failures += 1;
        actions.push(Action::Terminate { node: id.clone() });
        notes.push(note(
            "node_failed",
            Some(id),
            format!(
                "not healthy within startupTimeout {}; terminating it",
                set.startup_timeout
            ),
        ));
    }
    if !failed_now.is_empty() && !s.status.is_terminal() {
        if s.failures >= set.max_failed_nodes {
            s.status = Status::Degraded {
                reason: format!(
                    "circuit breaker: {} node(s) failed (maxFailedNodes {}); no further old node is taken down",
                    s.failures, set.max_failed_nodes
                ),
            };
            notes.push(note("degraded", None, "circuit breaker tripped"));
        } else if set.on_failure == OnFailure::Rollback
            && s.rollback_of.is_none()
            && s.previous.is_some()
        {
            let back = s.previous.take().expect("checked");
            s.rollback_of = Some(s.target);
            s.previous = Some(std::mem::replace(&mut s.target_template, back.clone()));
            s.target = back.hash();
            s.next_checkpoint = set.checkpoints.len();
            s.canary_done = true;
            actions.push(Action::SetTemplate {
                template: Box::new(back),
            });
            notes.push(note(
                "rollback_started",
                None,
                "a new node failed; returning the pool to the previous template",
            ));
            // Old nodes being drained are on the template the pool returns to:
            // their drain stops and they go back into service.
            for n in &live {
                if n.template == s.target
                    && matches!(s.marks.get(&n.id), Some(Mark::Draining { .. }))
                {
                    s.marks.remove(&n.id);
                    actions.push(Action::Uncordon { node: n.id.clone() });
                    notes.push(note(
                        "node_uncordoned",
                        Some(&n.id),
                        "rollback: its drain stops and it returns to service",
                    ));
                }
            }
        } else {
            s.status = Status::Degraded {
                reason: format!(
                    "node {} did not become healthy within {}; no further old node is taken down until `poolwright rollout resume {}`",
                    failed_now[0], set.startup_timeout, s.pool
                ),
            };
            notes.push(note("degraded", Some(&failed_now[0]), "a new node failed"));
        }
    }

    // 2. Drains in flight finish, whatever else is going on.
    let draining: Vec<(String, Timestamp, Option<String>)> = s
        .marks
        .iter()
        .filter_map(|(id, m)| match m {
            Mark::Draining { since, blocked } => Some((id.clone(), *since, blocked.clone())),
            _ => None,
        })
        .collect();
    for (id, since, was_blocked) in draining {
        let progress = inp
            .drains
            .get(&id)
            .cloned()
            .unwrap_or(DrainProgress::Running);
        if progress == DrainProgress::Done && set.reimage && set.budget.surge == 0 {
            s.marks.insert(id.clone(), Mark::Reimaging { at: now });
            actions.push(Action::Reimage { node: id.clone() });
            s.removed += 1;
            notes.push(note(
                "node_drained",
                Some(&id),
                "drained; reimaging in place",
            ));
        } else if progress == DrainProgress::Done {
            s.marks.insert(id.clone(), Mark::Terminating { at: now });
            actions.push(Action::Terminate { node: id.clone() });
            s.removed += 1;
            notes.push(note("node_drained", Some(&id), "drained; terminating"));
        } else if now >= after(since, set.drain_timeout) {
            let why = match &progress {
                DrainProgress::Blocked(r) => format!(": {r}"),
                _ => String::new(),
            };
            match set.on_drain_timeout {
                OnDrainTimeout::Fail => {
                    s.marks.insert(id.clone(), Mark::DrainFailed);
                    s.status = Status::Degraded {
                        reason: format!(
                            "drain of {id} timed out after {}{why}; the node stays cordoned",
                            set.drain_timeout
                        ),
                    };
                    notes.push(note("degraded", Some(&id), format!("drain timed out{why}")));
                }
                OnDrainTimeout::Force => {
                    s.marks.insert(id.clone(), Mark::Terminating { at: now });
                    actions.push(Action::ForceDrain { node: id.clone() });
                    actions.push(Action::Terminate { node: id.clone() });
                    s.removed += 1;
                    notes.push(note(
                        "drain_forced",
                        Some(&id),
                        format!("drain timed out{why}; remaining pods deleted"),
                    ));
                }
                OnDrainTimeout::Quarantine => {
                    s.marks.insert(id.clone(), Mark::Quarantined);
                    notes.push(note(
                        "node_quarantined",
                        Some(&id),
                        format!("drain timed out{why}; left cordoned, a new node takes its place"),
                    ));
                }
            }
        } else if let DrainProgress::Blocked(reason) = progress
            && was_blocked.as_deref() != Some(reason.as_str())
        {
            s.marks.insert(
                id.clone(),
                Mark::Draining {
                    since,
                    blocked: Some(reason.clone()),
                },
            );
            notes.push(note("drain_blocked", Some(&id), reason));
        }
    }

    // Counts after this call's marks.
    let target = s.target;
    let marked = |n: &Node| s.marks.get(&n.id);
    let total = inp.provider_size.max(live.len() as u32);
    let available = live
        .iter()
        .filter(|n| is_available(n, target, &s.marks, set.min_ready, now))
        .count() as u32;
    let updated_live = live
        .iter()
        .filter(|n| {
            n.template == target
                && !matches!(
                    marked(n),
                    Some(Mark::Terminating { .. } | Mark::Draining { .. })
                )
        })
        .count() as u32;
    let updated_available = live
        .iter()
        .filter(|n| n.template == target && is_available(n, target, &s.marks, set.min_ready, now))
        .count() as u32;
    let pending_new = updated_live - updated_available.min(updated_live);
    let in_drain = s
        .marks
        .values()
        .filter(|m| matches!(m, Mark::Draining { .. }))
        .count() as u32;
    let in_termination = s
        .marks
        .values()
        .filter(|m| matches!(m, Mark::Terminating { .. } | Mark::Reimaging { .. }))
        .count() as u32;

    s.healthy_seen
        .retain(|id| observed_ids.contains(id.as_str()));
    for n in live
        .iter()
        .filter(|n| n.template == target && is_available(n, target, &s.marks, set.min_ready, now))
    {
        if s.healthy_seen.insert(n.id.clone()) {
            notes.push(note(
                "node_healthy",
                Some(&n.id),
                format!("healthy for {}", set.min_ready),
            ));
        }
    }
    if !s.canary_done && updated_available >= 1 {
        s.canary_done = true;
        if set.canary {
            notes.push(note(
                "canary_healthy",
                None,
                format!("the first new node stayed healthy for {}", set.min_ready),
            ));
        }
    }
    let progress = (updated_available, s.removed);
    if progress != s.progress {
        s.progress = progress;
        s.last_progress_at = now;
    }

    // 3. Done?
    let outdated_unmarked: Vec<&Node> = live
        .iter()
        .copied()
        .filter(|n| n.template != target && marked(n).is_none())
        .collect();
    let surplus = updated_live.saturating_sub(set.size);
    if matches!(s.status, Status::Running)
        && outdated_unmarked.is_empty()
        && in_drain == 0
        && in_termination == 0
        && surplus == 0
        && updated_available >= set.size
        && actions.is_empty()
    {
        s.status = match s.rollback_of {
            Some(failed) => Status::RolledBack {
                failed,
                reason: "a new node failed; the pool is back on the previous template".into(),
            },
            None => Status::Completed,
        };
        notes.push(note(
            "completed",
            None,
            match s.rollback_of {
                Some(_) => "rolled back to the previous template",
                None => "every node runs the desired template",
            },
        ));
        return Decision {
            state: s,
            actions,
            notes,
            waiting: None,
        };
    }

    // 4. New steps, when nothing holds them.
    let has_work = !outdated_unmarked.is_empty() || surplus > 0 || updated_live < set.size;
    let baking = s.bake_until.is_some_and(|b| now < b);
    let mut waiting = match &s.status {
        Status::Running if !inp.gate_open && has_work => {
            Some("blocked by the disruption policy".to_string())
        }
        Status::Running if baking => Some(format!(
            "baking at a checkpoint until {}",
            s.bake_until.expect("baking")
        )),
        Status::Running => None,
        Status::Paused { reason } | Status::Degraded { reason } => Some(reason.clone()),
        Status::Completed | Status::RolledBack { .. } => None,
    };
    if has_work && matches!(s.status, Status::Running) {
        if !inp.gate_open && !s.blocked_by_policy {
            s.blocked_by_policy = true;
            notes.push(note(
                "blocked_by_policy",
                None,
                "disruptive steps wait for the disruption policy; steps in flight finish",
            ));
        } else if inp.gate_open && s.blocked_by_policy {
            s.blocked_by_policy = false;
            notes.push(note(
                "resumed_in_window",
                None,
                "the disruption policy allows disruptive steps again",
            ));
        }
    }
    let batch_busy =
        set.batch_synchronous && (pending_new > 0 || in_drain > 0 || in_termination > 0);
    if waiting.is_none() && has_work && !batch_busy {
        let canary_limit = set.canary && !s.canary_done;
        let refused = s.surge_refused_until.is_some_and(|t| now < t);
        let surge = if refused { 0 } else { set.budget.surge };
        if refused && set.budget.unavailable == 0 {
            waiting = Some(format!(
                "surge capacity refused by the provider; retrying at {} (maxUnavailable is 0, so no node can be taken down first)",
                s.surge_refused_until.expect("refused")
            ));
        }
        // Create what is missing, within size + surge.
        let room = (set.size + surge).saturating_sub(total);
        let mut create = set.size.saturating_sub(updated_live).min(room);
        if canary_limit {
            create = create.min(1u32.saturating_sub(pending_new + in_drain));
        }
        if create > 0 {
            actions.push(Action::CreateNodes { count: create });
        }
        // Take down old nodes (and surplus ones when scaling down), never below
        // the floor: unavailable ones first, since they cost no availability.
        let mut candidates: Vec<&Node> = outdated_unmarked.clone();
        if surplus > 0 {
            let mut extra: Vec<&Node> = live
                .iter()
                .copied()
                .filter(|n| n.template == target && marked(n).is_none())
                .collect();
            extra.sort_by_key(|n| {
                (
                    is_available(n, target, &s.marks, set.min_ready, now),
                    std::cmp::Reverse(n.launched_at),
                )
            });
            candidates.extend(extra.into_iter().take(surplus as usize));
        }
        candidates.sort_by_key(|n| {
            (
                is_available(n, target, &s.marks, set.min_ready, now),
                n.template == target,
                n.launched_at,
            )
        });
        let mut spare = available.saturating_sub(s.floor);
        let mut limit = if canary_limit {
            1u32.saturating_sub(in_drain)
        } else {
            u32::MAX
        };
        // A node still missing its replacement must not leave before total can
        // hold the replacement: with surge 0 that is what unavailable is for.
        for n in candidates {
            if limit == 0 {
                break;
            }
            let avail = is_available(n, target, &s.marks, set.min_ready, now);
            if avail {
                if spare == 0 {
                    continue;
                }
                spare -= 1;
            }
            limit -= 1;
            s.marks.insert(
                n.id.clone(),
                Mark::Draining {
                    since: now,
                    blocked: None,
                },
            );
            actions.push(Action::Drain { node: n.id.clone() });
            notes.push(note("drain_started", Some(&n.id), "cordoned; draining"));
        }
    }

    // Nothing can move and nothing is in flight: say why rather than wait forever.
    let quarantined = s
        .marks
        .values()
        .filter(|m| matches!(m, Mark::Quarantined))
        .count() as u32;
    if waiting.is_none()
        && has_work
        && actions.is_empty()
        && pending_new == 0
        && in_drain == 0
        && in_termination == 0
        && !batch_busy
        && quarantined > 0
    {
        s.status = Status::Degraded {
            reason: format!(
                "{quarantined} quarantined node(s) hold the surge capacity (maxSurge {}); \
                 deal with them (or raise maxSurge), then `poolwright rollout resume {}`",
                set.budget.surge, s.pool
            ),
        };
        notes.push(note(
            "degraded",
            None,
            "quarantined nodes hold all surge capacity",
        ));
    }

    // 5. Checkpoints: bake once the given share of the pool is updated.
    if let Some((pct, pause)) = set.checkpoints.get(s.next_checkpoint)
        && set.size > 0
        && updated_available * 100 >= pct * set.size
        && updated_available < set.size
    {
        s.bake_until = Some(after(now, *pause));
        s.next_checkpoint += 1;
        notes.push(note(
            "checkpoint",
            None,
            format!("{pct}% updated; baking for {pause}"),
        ));
    }

    // 6. Progress deadline (time spent waiting on policy or bake does not count).
    if let Some(deadline) = set.progress_deadline
        && matches!(s.status, Status::Running)
        && inp.gate_open
        && !baking
        && now >= after(s.last_progress_at, deadline)
    {
        s.status = Status::Degraded {
            reason: format!("no progress for {deadline} (progressDeadline)"),
        };
        notes.push(note(
            "degraded",
            None,
            format!("progress deadline of {deadline} passed"),
        ));
    }
    if !inp.gate_open || baking {
        s.last_progress_at = now;
    }

    Decision {
        state: s,
        actions,
        notes,
        waiting,
    }
}
