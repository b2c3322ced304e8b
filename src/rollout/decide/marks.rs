//! Phase 1: marks of nodes that are gone are done with; a `Terminating`,
//! `Reimaging` or `Uncordoning` mark on a node that does not show it yet
//! means the call never reached the provider (the process died between
//! journaling the intent and calling): take it up again.

use std::collections::HashSet;

use super::{Action, Decision};
use crate::model::{Node, NodeState};
use crate::rollout::state::Mark;

pub(super) fn reconcile(d: &mut Decision, nodes: &[Node]) {
    let observed: HashSet<&str> = nodes.iter().map(|n| n.id.as_str()).collect();
    let s = &mut d.state;
    s.marks.retain(|id, _| observed.contains(id.as_str()));
    s.healthy_seen.retain(|id| observed.contains(id.as_str()));
    for n in nodes {
        match s.marks.get(&n.id) {
            Some(Mark::Terminating { .. }) if n.state != NodeState::Terminating => {
                d.actions.push(Action::Terminate { node: n.id.clone() });
            }
            Some(Mark::Reimaging { .. }) if n.template == s.target => {
                // Reimaged: from here on a new node like any other.
                s.marks.remove(&n.id);
            }
            Some(Mark::Reimaging { .. }) => {
                d.actions.push(Action::Reimage { node: n.id.clone() });
            }
            Some(Mark::Uncordoning) if !n.cordoned => {
                s.marks.remove(&n.id);
            }
            Some(Mark::Uncordoning) => {
                d.actions.push(Action::Uncordon { node: n.id.clone() });
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::*;

    #[test]
    fn marks_are_forgotten_with_their_nodes_and_unsent_calls_taken_up() {
        let mut s = state(3, 1, 0);
        s.marks
            .insert("gone".into(), Mark::Terminating { at: t0() });
        s.marks.insert("o0".into(), Mark::Terminating { at: t0() });
        s.marks.insert("o1".into(), Mark::Reimaging { at: t0() });
        s.marks.insert("o2".into(), Mark::Reimaging { at: t0() });
        let mut reimaged = healthy("o2", &new());
        reimaged.state = NodeState::Pending;
        let nodes = vec![healthy("o0", &old()), healthy("o1", &old()), reimaged];
        let mut d = Decision {
            state: s,
            actions: vec![],
            notes: vec![],
            waiting: None,
        };
        reconcile(&mut d, &nodes);
        assert!(
            !d.state.marks.contains_key("gone"),
            "a gone node's mark is dropped"
        );
        assert!(
            !d.state.marks.contains_key("o2"),
            "a reimaged node is a new node"
        );
        assert_eq!(
            d.actions,
            vec![
                Action::Terminate { node: "o0".into() },
                Action::Reimage { node: "o1".into() },
            ]
        );
    }
}
