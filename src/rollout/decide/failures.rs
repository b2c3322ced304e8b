//! Phase 2: new nodes that did not become healthy within `startupTimeout`
//! are terminated and counted; then the circuit breaker, a rollback
//! (`onFailure: rollback`), or Degraded (`onFailure: pause`).

use crate::model::EventKind;
use jiff::Timestamp;

use super::{Action, Decision, after};
use crate::model::{Node, NodeState};
use crate::rollout::state::{Mark, Status};
use crate::spec::types::OnFailure;

pub(super) fn startup(d: &mut Decision, live: &[&Node], now: Timestamp) {
    let s = &mut d.state;
    let set = s.settings.clone();
    let failed: Vec<String> = live
        .iter()
        .filter(|n| {
            s.keeps(n)
                && n.state != NodeState::Healthy
                && now >= after(n.launched_at, set.startup_timeout)
                && !s.marks.contains_key(&*n.id)
        })
        .map(|n| n.id.to_string())
        .collect();
    for id in &failed {
        s.marks.insert(id.clone(), Mark::Terminating { at: now });
        s.failures += 1;
        d.actions.push(Action::Terminate { node: id.clone() });
        d.notes.push(super::note(
            EventKind::NodeFailed,
            Some(id),
            format!(
                "not healthy within startupTimeout {}; terminating it",
                set.startup_timeout
            ),
        ));
    }
    if failed.is_empty() || s.status.is_terminal() {
        return;
    }
    if s.failures >= set.max_failed_nodes {
        s.status = Status::Degraded {
            reason: format!(
                "circuit breaker: {} node(s) failed (maxFailedNodes {}); no further old node is taken down",
                s.failures, set.max_failed_nodes
            ),
        };
        d.notes.push(super::note(
            EventKind::Degraded,
            None,
            format!(
                "circuit breaker tripped: {} new node(s) failed (maxFailedNodes {}), the last {} not healthy within startupTimeout {}",
                s.failures, set.max_failed_nodes, failed[0], set.startup_timeout
            ),
        ));
    } else if set.on_failure == OnFailure::Rollback
        && s.rollback_of.is_none()
        && let Some(back) = s.previous.take()
    {
        s.rollback_of = Some(s.target);
        s.previous = Some(std::mem::replace(&mut s.target_template, back.clone()));
        s.target = back.hash();
        s.next_checkpoint = set.checkpoints.len();
        s.canary_done = true;
        d.actions.push(Action::SetTemplate {
            template: Box::new(back),
        });
        d.notes.push(super::note(
            EventKind::RollbackStarted,
            None,
            format!(
                "new node {} was not healthy within startupTimeout {}; returning the pool to the previous template",
                failed[0], set.startup_timeout
            ),
        ));
        // Old nodes being drained are on the template the pool returns to:
        // their drain stops and they go back into service.
        for n in live {
            if n.template == s.target && matches!(s.marks.get(&*n.id), Some(Mark::Draining { .. }))
            {
                // Journaled until seen uncordoned: a crash before the call
                // must not leave it cordoned and forgotten.
                s.marks.insert(n.id.to_string(), Mark::Uncordoning);
                d.actions.push(Action::Uncordon {
                    node: n.id.to_string(),
                });
                d.notes.push(super::note(
                    EventKind::NodeUncordoned,
                    Some(&n.id),
                    "rollback: its drain stops and it returns to service",
                ));
            }
        }
    } else {
        s.status = Status::Degraded {
            reason: format!(
                "node {} did not become healthy within {}; no further old node is taken down until `poolwright rollout resume {}`",
                failed[0], set.startup_timeout, s.pool
            ),
        };
        d.notes.push(super::note(
            EventKind::Degraded,
            Some(&failed[0]),
            format!(
                "new node {} was not healthy within startupTimeout {}",
                failed[0], set.startup_timeout
            ),
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::*;

    fn run(s: crate::rollout::RolloutState, nodes: &[Node], now: Timestamp) -> Decision {
        let mut d = Decision {
            state: s,
            actions: vec![],
            notes: vec![],
            waiting: None,
        };
        let live: Vec<&Node> = nodes.iter().collect();
        startup(&mut d, &live, now);
        d
    }

    #[test]
    fn a_new_node_late_past_startup_timeout_fails_and_degrades() {
        let nodes = vec![node("n1", &new(), NodeState::Pending)];
        let d = run(state(3, 1, 0), &nodes, at(599));
        assert!(d.actions.is_empty(), "not yet: the timeout is 10m");
        let d = run(state(3, 1, 0), &nodes, at(600));
        assert_eq!(d.actions, vec![Action::Terminate { node: "n1".into() }]);
        assert!(matches!(d.state.status, Status::Degraded { .. }));
        assert_eq!(d.state.failures, 1);
    }

    #[test]
    fn on_failure_rollback_turns_the_target_back_and_uncordons_draining_old_nodes() {
        let mut s = state(3, 1, 0);
        s.settings.on_failure = OnFailure::Rollback;
        s.marks.insert(
            "o0".into(),
            Mark::Draining {
                since: t0(),
                blocked: None,
            },
        );
        let nodes = vec![
            healthy("o0", &old()),
            node("n1", &new(), NodeState::Unhealthy),
        ];
        let d = run(s, &nodes, at(600));
        assert_eq!(d.state.target, old().hash());
        assert_eq!(d.state.rollback_of, Some(new().hash()));
        assert_eq!(d.state.status, Status::Running);
        assert!(d.actions.contains(&Action::Uncordon { node: "o0".into() }));
        assert!(matches!(d.actions[1], Action::SetTemplate { .. }));
    }

    #[test]
    fn the_circuit_breaker_trips_at_max_failed_nodes() {
        let mut s = state(3, 1, 0);
        s.failures = 2;
        let nodes = vec![node("n1", &new(), NodeState::Pending)];
        let d = run(s, &nodes, at(600));
        assert!(
            matches!(&d.state.status, Status::Degraded { reason } if reason.starts_with("circuit breaker"))
        );
    }
}
