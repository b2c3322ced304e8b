//! Phase 1: marks of nodes that are gone are done with; a `Terminating`,
//! `Reimaging` or `Uncordoning` mark on a node that does not show it yet
//! means the call never reached the provider (the process died between
//! journaling the intent and calling): take it up again.

use super::{Action, Decision, Marked, Quiet};
use crate::model::{Node, NodeState};
use crate::rollout::state::Mark;

pub(super) fn reconcile(d: &mut Decision, nodes: &[Node], quiet: Option<&dyn Quiet>) {
    let s = &mut d.state;
    // Forget marks and reports of nodes no longer observed. They are the few
    // nodes in flight (and the new ones reported) of a pool of maybe
    // thousands: count first, and only when one may be missing build the set.
    // (Counting is exact because a pool's node ids are unique: a plug-in's
    // answer that repeats one is refused.) The same pass keeps the marked
    // nodes, in the order observed, for what follows. Reports are of nodes on
    // the target, so only those are looked up; should one be of another
    // template (after a rollback), the set is built and nothing observed is
    // forgotten.
    let marked = Marked::of(&s.marks);
    let mut in_flight: Vec<&Node> = Vec::new();
    let mut seen = 0;
    for n in nodes {
        if marked.contains(&n.id) {
            in_flight.push(n);
        }
        seen += usize::from(s.keeps(n) && s.healthy_seen.contains(&n.id));
    }
    // Quiet nodes are unmarked, and the new ones among them all seen.
    seen += quiet.map_or(0, |q| q.quiet_new() as usize);
    // Each set is searched for the gone only when one of its own is gone
    // (an old node going is no reason to read every new one).
    let (marks_gone, seen_gone) = (in_flight.len() < s.marks.len(), seen < s.healthy_seen.len());
    if marks_gone || seen_gone {
        let listed: rustc_hash::FxHashSet<&str> = nodes.iter().map(|n| &*n.id).collect();
        let observed = |id: &str| listed.contains(id) || quiet.is_some_and(|q| q.contains(id));
        if marks_gone {
            s.marks.retain(|id, _| observed(id));
        }
        if seen_gone {
            s.healthy_seen.retain(observed);
        }
    }
    for n in in_flight {
        match s.marks.get(&*n.id) {
            Some(Mark::Terminating { .. }) if n.state != NodeState::Terminating => {
                d.actions.push(Action::Terminate {
                    node: n.id.to_string(),
                });
            }
            Some(Mark::Reimaging { .. }) if s.keeps(n) => {
                // Reimaged: from here on a new node like any other.
                s.marks.remove(&*n.id);
            }
            Some(Mark::Reimaging { .. }) if n.state == NodeState::Pending => {
                // Rebuilding: the call reached the plug-in, which may report
                // the old hash until the node is done.
            }
            Some(Mark::Reimaging { .. }) => {
                d.actions.push(Action::Reimage {
                    node: n.id.to_string(),
                });
            }
            Some(Mark::Uncordoning) if !n.cordoned => {
                s.marks.remove(&*n.id);
            }
            Some(Mark::Uncordoning) => {
                d.actions.push(Action::Uncordon {
                    node: n.id.to_string(),
                });
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
        s.marks.insert("o3".into(), Mark::Reimaging { at: t0() });
        let mut reimaged = healthy("o2", &new());
        reimaged.state = NodeState::Pending;
        // Rebuilding, still on the old hash (one reading of the contract):
        // the call is not sent again.
        let mut rebuilding = healthy("o3", &old());
        rebuilding.state = NodeState::Pending;
        let nodes = vec![
            healthy("o0", &old()),
            healthy("o1", &old()),
            reimaged,
            rebuilding,
        ];
        let mut d = Decision {
            state: s,
            actions: vec![],
            notes: vec![],
            waiting: None,
        };
        reconcile(&mut d, &nodes, None);
        assert!(
            !d.state.marks.contains_key("gone"),
            "a gone node's mark is dropped"
        );
        assert!(
            !d.state.marks.contains_key("o2"),
            "a reimaged node is a new node"
        );
        assert!(d.state.marks.contains_key("o3"), "still reimaging");
        assert_eq!(
            d.actions,
            vec![
                Action::Terminate { node: "o0".into() },
                Action::Reimage { node: "o1".into() },
            ]
        );
    }
}
