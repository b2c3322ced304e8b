//! Phase 3: drains in flight finish, whatever else is going on. A finished
//! drain leads to termination (or an in-place reimage); one past
//! `drain.timeout` to `onTimeout` (fail, force, quarantine); a blocked one is
//! reported once per reason.

use crate::model::EventKind;
use std::collections::BTreeMap;

use jiff::Timestamp;

use super::{Action, Decision, DrainProgress, after};
use crate::rollout::state::{Mark, Status};
use crate::spec::types::OnDrainTimeout;

pub(super) fn advance(
    d: &mut Decision,
    progress: &BTreeMap<String, DrainProgress>,
    now: Timestamp,
) {
    let set = d.state.settings.clone();
    let draining: Vec<(String, Timestamp, Option<String>)> = d
        .state
        .marks
        .iter()
        .filter_map(|(id, m)| match m {
            Mark::Draining { since, blocked } => Some((id.clone(), *since, blocked.clone())),
            _ => None,
        })
        .collect();
    for (id, since, was_blocked) in draining {
        let p = progress.get(&id).cloned().unwrap_or(DrainProgress::Running);
        let s = &mut d.state;
        if p == DrainProgress::Done && set.reimage && set.budget.surge == 0 {
            s.marks.insert(id.clone(), Mark::Reimaging { at: now });
            d.actions.push(Action::Reimage { node: id.clone() });
            s.removed += 1;
            d.notes.push(super::note(
                EventKind::NodeDrained,
                Some(&id),
                "drained; reimaging in place",
            ));
        } else if p == DrainProgress::Done {
            s.marks.insert(id.clone(), Mark::Terminating { at: now });
            d.actions.push(Action::Terminate { node: id.clone() });
            s.removed += 1;
            d.notes.push(super::note(
                EventKind::NodeDrained,
                Some(&id),
                "drained; terminating",
            ));
        } else if now >= after(since, set.drain_timeout) {
            let why = match &p {
                DrainProgress::Blocked(r) => format!(": {r}"),
                _ => String::new(),
            };
            match set.on_drain_timeout {
                OnDrainTimeout::Fail => {
                    s.marks.insert(id.clone(), Mark::DrainFailed);
                    s.status = Status::Degraded {
                        reason: format!(
                            "drain of {id} timed out after {}{why}; the node stays cordoned; \
                             `poolwright rollout resume {}` drains it again",
                            set.drain_timeout, s.pool
                        ),
                    };
                    d.notes.push(super::note(
                        EventKind::Degraded,
                        Some(&id),
                        format!("drain timed out{why}"),
                    ));
                }
                OnDrainTimeout::Force => {
                    s.marks.insert(id.clone(), Mark::Terminating { at: now });
                    d.actions.push(Action::ForceDrain { node: id.clone() });
                    d.actions.push(Action::Terminate { node: id.clone() });
                    s.removed += 1;
                    d.notes.push(super::note(
                        EventKind::DrainForced,
                        Some(&id),
                        format!("drain timed out{why}; remaining pods deleted"),
                    ));
                }
                OnDrainTimeout::Quarantine
                    if set.max_blocked_nodes.is_some_and(|most| {
                        s.marks
                            .values()
                            .filter(|m| **m == Mark::Quarantined)
                            .count() as u32
                            >= most
                    }) =>
                {
                    // Past maxBlockedNodes: stop, rather than quarantine more.
                    let most = set.max_blocked_nodes.expect("checked");
                    s.marks.insert(id.clone(), Mark::DrainFailed);
                    s.status = Status::Degraded {
                        reason: format!(
                            "drain of {id} timed out after {}{why}; {most} node(s) are already \
                             quarantined (drain.maxBlockedNodes {most}): the node stays cordoned \
                             and no more are quarantined",
                            set.drain_timeout
                        ),
                    };
                    d.notes.push(super::note(
                        EventKind::Degraded,
                        Some(&id),
                        format!("drain timed out{why}; drain.maxBlockedNodes ({most}) reached"),
                    ));
                }
                OnDrainTimeout::Quarantine => {
                    s.marks.insert(id.clone(), Mark::Quarantined);
                    d.notes.push(super::note(
                        EventKind::NodeQuarantined,
                        Some(&id),
                        format!("drain timed out{why}; left cordoned, a new node takes its place"),
                    ));
                }
            }
        } else if let DrainProgress::Blocked(reason) = p
            && was_blocked.as_deref() != Some(reason.as_str())
        {
            s.marks.insert(
                id.clone(),
                Mark::Draining {
                    since,
                    blocked: Some(reason.clone()),
                },
            );
            d.notes
                .push(super::note(EventKind::DrainBlocked, Some(&id), reason));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::*;

    fn run(on_timeout: OnDrainTimeout, p: DrainProgress, now: Timestamp) -> Decision {
        let mut s = state(3, 1, 0);
        s.settings.on_drain_timeout = on_timeout;
        s.marks.insert(
            "o0".into(),
            Mark::Draining {
                since: t0(),
                blocked: None,
            },
        );
        let mut d = Decision {
            state: s,
            actions: vec![],
            notes: vec![],
            waiting: None,
        };
        advance(&mut d, &[("o0".to_string(), p)].into(), now);
        d
    }

    #[test]
    fn each_way_a_drain_can_go() {
        use OnDrainTimeout::*;
        let pdb = DrainProgress::Blocked("PodDisruptionBudget default/web".into());
        // (onTimeout, progress, at, mark after, actions, event)
        type Row = (
            OnDrainTimeout,
            DrainProgress,
            i64,
            Mark,
            Vec<Action>,
            Option<EventKind>,
        );
        let table: Vec<Row> = vec![
            (
                Fail,
                DrainProgress::Done,
                5,
                Mark::Terminating { at: at(5) },
                vec![Action::Terminate { node: "o0".into() }],
                Some(EventKind::NodeDrained),
            ),
            (
                Fail,
                DrainProgress::Running,
                5,
                Mark::Draining {
                    since: t0(),
                    blocked: None,
                },
                vec![],
                None,
            ),
            (
                Fail,
                pdb.clone(),
                5,
                Mark::Draining {
                    since: t0(),
                    blocked: Some("PodDisruptionBudget default/web".into()),
                },
                vec![],
                Some(EventKind::DrainBlocked),
            ),
            (
                Fail,
                pdb.clone(),
                600,
                Mark::DrainFailed,
                vec![],
                Some(EventKind::Degraded),
            ),
            (
                Force,
                pdb.clone(),
                600,
                Mark::Terminating { at: at(600) },
                vec![
                    Action::ForceDrain { node: "o0".into() },
                    Action::Terminate { node: "o0".into() },
                ],
                Some(EventKind::DrainForced),
            ),
            (
                Quarantine,
                pdb,
                600,
                Mark::Quarantined,
                vec![],
                Some(EventKind::NodeQuarantined),
            ),
        ];
        for (on_timeout, p, secs, mark, actions, event) in table {
            let d = run(on_timeout, p.clone(), at(secs));
            assert_eq!(d.state.marks["o0"], mark, "{on_timeout:?} {p:?} at {secs}s");
            assert_eq!(d.actions, actions, "{on_timeout:?} {p:?} at {secs}s");
            assert_eq!(
                d.notes.first().map(|n| n.event),
                event,
                "{on_timeout:?} {p:?} at {secs}s"
            );
        }
    }
}
