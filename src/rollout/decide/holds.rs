//! Phase 1b: which old nodes do-not-disrupt holds now. A node held by its
//! own label is seen here (the provider and the cluster report labels); a
//! node held by a pod was found by the cluster when the rollout came to take
//! it down (`Outcome::Held`), and the cluster is asked again on every look
//! (`Inputs::pod_holds`). A hold that is lifted makes the node an ordinary
//! old node again, taken in its turn. Held nodes are left out of the roll:
//! no surge is kept for them, and they stay available.

use super::{Decision, Inputs};
use crate::model::hold;
use crate::model::{EventKind, Node};

pub(super) fn update(d: &mut Decision, live: &[&Node], inp: &Inputs) {
    let s = &mut d.state;
    // Held by their own label: old nodes only (a node the rollout keeps
    // needs nothing done to it), and none the rollout has already begun on.
    for n in live {
        if s.keeps(n) || s.marks.contains_key(&*n.id) {
            continue;
        }
        if let Some(why) = hold::of_node(n)
            && s.held.get(&*n.id) != Some(&why)
        {
            s.held.insert(n.id.to_string(), why.clone());
            d.notes
                .push(super::note(EventKind::NodeHeld, Some(&n.id), why));
        }
    }
    if s.held.is_empty() {
        return;
    }
    // A held node is never quiet (the index lists it), so it is among the
    // nodes given whenever it is observed at all.
    let listed: rustc_hash::FxHashMap<&str, &Node> =
        inp.nodes.iter().map(|n| (&*n.id, n)).collect();
    let lifted: Vec<String> = s
        .held
        .keys()
        .filter(|id| {
            let Some(n) = listed.get(id.as_str()) else {
                // Gone: nothing left to hold.
                return true;
            };
            if n.state == crate::model::NodeState::Terminating || s.keeps(n) {
                // On its way out, or now on the target: no hold to keep.
                return true;
            }
            if hold::of_node(n).is_some() {
                return false;
            }
            // Held by a pod: the cluster's answer decides, when it gave one.
            inp.pod_holds
                .is_some_and(|p| matches!(p.get(id.as_str()), Some(None)))
        })
        .cloned()
        .collect();
    for id in lifted {
        s.held.remove(&id);
        d.notes.push(super::note(
            EventKind::NodeHoldLifted,
            Some(&id),
            "the hold is lifted: the node is replaced in its turn",
        ));
    }
    // A pod hold whose reason changed (another pod, another key).
    if let Some(p) = inp.pod_holds {
        for (id, why) in p.iter().filter_map(|(id, w)| Some((id, w.as_ref()?))) {
            if let Some(held) = s.held.get_mut(id)
                && held != why
                && listed
                    .get(id.as_str())
                    .is_some_and(|n| hold::of_node(n).is_none())
            {
                *held = why.clone();
            }
        }
    }
}
