//! Phase 4: count, after the marks of this call, what is available, updated
//! and in flight; report new nodes that became available; raise the peak of
//! availability, from which the floor ratchets up.

use super::{Decision, Inputs, Marked, Quiet, Ready};
use crate::model::EventKind;
use crate::model::Node;
use crate::rollout::state::Mark;

/// The counts the later phases decide from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Tally {
    /// Nodes that count against size + surge: those listed (or the
    /// provider's size, when larger), and with `countTerminating` the
    /// terminating ones.
    pub total: u32,
    pub available: u32,
    /// Nodes on the target template not on their way out.
    pub updated_live: u32,
    pub updated_available: u32,
    /// Updated nodes not available yet (booting, or not ready for minReady).
    pub pending_new: u32,
    pub in_drain: u32,
    pub in_termination: u32,
    pub quarantined: u32,
    /// Old nodes the rollout has not touched yet.
    pub outdated_unmarked: u32,
    /// Updated nodes beyond the size (a scale-down).
    pub surplus: u32,
    /// Nodes the provider lists (not terminating), quiet ones included.
    pub listed: u32,
    /// Old nodes held by do-not-disrupt, kept in service.
    pub held: u32,
    /// The new nodes the rollout converges on: the size less the held ones.
    pub want: u32,
}

impl Tally {
    /// One pass over the nodes, with no copy of a name unless a node is
    /// reported healthy: a step of a large pool costs a scan, nothing more.
    pub(super) fn of(
        d: &mut Decision,
        live: &[&Node],
        quiet: Option<&dyn Quiet>,
        inp: &Inputs,
    ) -> Tally {
        let s = &mut d.state;
        let now = inp.now;
        let target = s.target;
        let min_ready = s.settings.min_ready;
        let ready = Ready::at(target, min_ready, now);
        let marked = Marked::of(&s.marks);
        let (mut available, mut updated_live, mut updated_available, mut outdated_unmarked) =
            (0u32, 0u32, 0u32, 0u32);
        let mut held = 0u32;
        // New nodes available now and not reported yet, in the order observed.
        let mut fresh: Vec<&std::sync::Arc<str>> = Vec::new();
        for n in live {
            let mark = marked.get(&n.id);
            let is_available = mark.is_none() && ready.is(n);
            available += u32::from(is_available);
            if !s.keeps(n) {
                // A held node is not one the rollout may take: it stays, in
                // place of one of the `size` new nodes.
                if mark.is_none() && s.held.contains_key(&*n.id) {
                    held += 1;
                } else {
                    outdated_unmarked += u32::from(mark.is_none());
                }
                continue;
            }
            // A node on the target that the rollout is taking down, or that a
            // drain left out of service (quarantined, failed; carried over from a
            // rolled-back or superseded rollout), is not one of the `size` nodes:
            // another takes its place.
            updated_live += u32::from(matches!(
                mark,
                None | Some(Mark::Reimaging { .. } | Mark::Uncordoning)
            ));
            if is_available {
                updated_available += 1;
                if !s.healthy_seen.contains(&n.id) {
                    fresh.push(&n.id);
                }
            }
        }
        // Quiet nodes are available and unmarked; the new ones already seen.
        let (old, new) = quiet.map_or((0, 0), |q| (q.quiet_old(), q.quiet_new()));
        available += old + new;
        outdated_unmarked += old;
        updated_live += new;
        updated_available += new;
        let listed = (live.len() as u32).saturating_add(old).saturating_add(new);
        let count = |f: fn(&Mark) -> bool| s.marks.values().filter(|m| f(m)).count() as u32;
        // Terminating nodes are not live; with countTerminating they still
        // count against size + surge, until they are gone.
        let terminating = if s.settings.count_terminating {
            inp.nodes
                .iter()
                .filter(|n| n.state == crate::model::NodeState::Terminating)
                .count() as u32
        } else {
            0
        };
        let t = Tally {
            // A provider whose size still holds a terminating node (an ASG's
            // desired capacity) counts it once.
            total: inp.provider_size.max(listed.saturating_add(terminating)),
            available,
            updated_live,
            updated_available,
            pending_new: updated_live - updated_available.min(updated_live),
            in_drain: count(|m| matches!(m, Mark::Draining { .. })),
            in_termination: count(|m| {
                matches!(
                    m,
                    Mark::Terminating { .. } | Mark::Reimaging { .. } | Mark::Uncordoning
                )
            }),
            quarantined: count(|m| matches!(m, Mark::Quarantined)),
            outdated_unmarked,
            surplus: updated_live.saturating_sub(s.settings.size.saturating_sub(held)),
            listed,
            held,
            want: s.settings.size.saturating_sub(held),
        };
        let canary = s.settings.canary;
        for id in fresh {
            if s.healthy_seen.insert(id) {
                d.notes.push(super::note(
                    EventKind::NodeHealthy,
                    Some(id),
                    format!("healthy for {min_ready}"),
                ));
            }
        }
        if !s.canary_done && updated_available >= 1 {
            s.canary_done = true;
            if canary {
                d.notes.push(super::note(
                    EventKind::CanaryHealthy,
                    None,
                    format!("the first new node stayed healthy for {min_ready}"),
                ));
            }
        }
        let progress = (updated_available, s.removed);
        if progress != s.progress {
            s.progress = progress;
            s.last_progress_at = now;
            s.stall_reported = false;
        }
        // The floor only ratchets up: availability regained is not given away.
        s.peak_available = s.peak_available.max(available);
        t
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::super::fixtures::*;
    use super::*;
    use crate::model::NodeState;

    #[test]
    fn counts_and_the_peak() {
        let mut s = state(4, 1, 1);
        s.peak_available = 2;
        s.marks.insert(
            "o0".into(),
            Mark::Draining {
                since: t0(),
                blocked: None,
            },
        );
        let nodes = vec![
            healthy("o0", &old()),
            healthy("o1", &old()),
            healthy("o2", &old()),
            node("o3", &old(), NodeState::Pending),
            healthy("n1", &new()),
            node("n2", &new(), NodeState::Pending),
        ];
        let live: Vec<&Node> = nodes.iter().collect();
        let drains = BTreeMap::new();
        let inp = inputs(&nodes, &drains, t0());
        let mut d = Decision {
            state: s,
            actions: vec![],
            notes: vec![],
            waiting: None,
        };
        let t = Tally::of(&mut d, &live, None, &inp);
        assert_eq!(t.total, 6);
        assert_eq!(t.available, 3, "o1, o2, n1 (o0 drains, o3 and n2 boot)");
        assert_eq!(
            (t.updated_live, t.updated_available, t.pending_new),
            (2, 1, 1)
        );
        assert_eq!((t.in_drain, t.in_termination, t.quarantined), (1, 0, 0));
        assert_eq!(t.outdated_unmarked, 3, "o1, o2, o3");
        assert_eq!(
            d.state.peak_available, 3,
            "the peak rises with availability"
        );
        assert_eq!(d.notes[0].event, EventKind::NodeHealthy);
    }
}
