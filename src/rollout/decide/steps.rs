//! Phase 6: new steps, when nothing holds them. Create what is missing,
//! within size + surge; take old nodes down (and surplus ones when scaling
//! down), never below the floor: unavailable ones first, since they cost no
//! availability.

use crate::model::EventKind;
use jiff::Timestamp;

use std::collections::BTreeMap;
use std::sync::Arc;

use super::tally::Tally;
use super::{Action, Decision, Marked, Quiet, Ready};
use crate::model::Node;
use crate::rollout::order::{Place, current_group, place};
use crate::rollout::state::{Mark, RolloutState};
use crate::spec::types::TakeDownOrder;

pub(super) fn start(
    d: &mut Decision,
    t: &Tally,
    live: &[&Node],
    quiet: Option<&dyn Quiet>,
    now: Timestamp,
) {
    let s = &mut d.state;
    let (size, budget, min_ready) = (s.settings.size, s.settings.budget, s.settings.min_ready);
    // In waves, a new wave starts only once the last one has finished.
    if s.settings.waves && (t.pending_new > 0 || t.in_drain > 0 || t.in_termination > 0) {
        return;
    }
    let target = s.target;
    let canary_limit = s.settings.canary && !s.canary_done;
    let refused = s.surge_refused_until.is_some_and(|u| now < u);
    let surge = if refused { 0 } else { budget.surge };
    if refused
        && budget.unavailable == 0
        && let Some(retry_at) = s.surge_refused_until
    {
        d.waiting = Some(super::Wait::SurgeRefused { retry_at });
    }
    let room = size.saturating_add(surge).saturating_sub(t.total);
    // New nodes for every old one but the held ones (no surge is kept
    // for a node that stays).
    let mut create = t.want.saturating_sub(t.updated_live).min(room);
    if s.surge_narrowed {
        create = create.min(1);
    }
    if canary_limit {
        create = create.min(1u32.saturating_sub(t.pending_new + t.in_drain));
    }
    if create > 0 {
        d.actions.push(Action::CreateNodes { count: create });
    }
    // Every candidate is unmarked: available is ready.
    let ready = Ready::at(target, min_ready, now);
    let marked = Marked::of(&s.marks);
    // The tally's `outdated_unmarked`, by its own rule: looking each node up
    // in that list made a step O(nodes²) (a 1,000-node roll spent half its
    // time here).
    // Kept: on the target and not past `lifecycle.maxNodeAge` (the rule of
    // `RolloutState::keeps`, with the state borrowed once).
    let retire = s.settings.retire_before;
    let keeps = |n: &Node| n.template == target && retire.is_none_or(|b| n.launched_at >= b);
    let outdated = live
        .iter()
        .copied()
        .filter(|n| !keeps(n) && !marked.contains(&n.id) && !s.held.contains_key(&*n.id));
    let mut extra: Vec<&Node> = Vec::new();
    if t.surplus > 0 {
        extra = live
            .iter()
            .copied()
            .filter(|n| keeps(n) && !marked.contains(&n.id))
            .collect();
        extra.sort_by_key(|n| (ready.is(n), std::cmp::Reverse(n.launched_at)));
        extra.truncate(t.surplus as usize);
    }
    // Taken down in the order (available, on the target, place): unavailable
    // ones first (they cost no availability), then available ones while the
    // floor leaves room, each in `rollout.order` (the rule is
    // `order::place`; the id settles ties, so the order does not depend on
    // the order the provider lists nodes in). The quiet old nodes
    // (available, unmarked, kept in this order by the caller) need not be
    // visited: only as many of them as can be taken are asked for. Of the
    // available ones only as many are ordered as can be taken (usually none
    // or one of a thousand), and none is kept when the floor leaves no room.
    // Under `zone` order only the current zone's old nodes are candidates.
    let order = &s.settings.order.clone();
    let outdated: Vec<&Node> = outdated.collect();
    let group = zone_now(s, order, live, &outdated, quiet);
    s.zone = group.as_deref().map(str::to_string);
    let in_group = |n: &Node| group.is_none() || place(order, n).group == group;
    type Key = (bool, bool, Place);
    type Picks<'n> = Vec<(Key, &'n Node)>;
    let spare = t.available.saturating_sub(s.floor());
    let (mut down, mut up): (Picks, Picks) = (Vec::new(), Vec::new());
    let candidates = outdated.into_iter().filter(|n| in_group(n)).chain(extra);
    for n in candidates {
        let key = (ready.is(n), keeps(n), place(order, n));
        if !key.0 {
            down.push((key, n));
        } else if spare > 0 {
            up.push((key, n));
        }
    }
    let mut limit = if canary_limit {
        1u32.saturating_sub(t.in_drain)
    } else {
        u32::MAX
    };
    let take_down = down.len().min(limit as usize);
    limit -= take_down as u32;
    if let Some(q) = quiet
        && spare > 0
    {
        let most = limit.min(spare).min(q.quiet_old()) as usize;
        up.extend(
            q.first_old(most, group.as_deref())
                .into_iter()
                .map(|n| ((true, false, place(order, n)), n)),
        );
    }
    let take_up = up.len().min(limit.min(spare) as usize);
    down.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    down.truncate(take_down);
    if take_up > 0 && take_up < up.len() {
        up.select_nth_unstable_by(take_up - 1, |a, b| a.0.cmp(&b.0));
    }
    up.truncate(take_up);
    up.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    for (_, n) in down.into_iter().chain(up) {
        let id = n.id.to_string();
        s.marks.insert(
            id.clone(),
            Mark::Draining {
                since: now,
                blocked: None,
            },
        );
        d.actions.push(Action::Drain { node: id.clone() });
        d.notes.push(super::note(
            EventKind::DrainStarted,
            Some(&id),
            "cordoned; draining",
        ));
    }
}

/// Under `zone` order, the zone whose old nodes may be taken down now (see
/// [`current_group`]); `None` under the other orders.
fn zone_now(
    s: &RolloutState,
    order: &TakeDownOrder,
    live: &[&Node],
    outdated: &[&Node],
    quiet: Option<&dyn Quiet>,
) -> Option<Arc<str>> {
    if *order != TakeDownOrder::Zone {
        return None;
    }
    let group = |n: &Node| place(order, n).group.expect("zone order groups every node");
    let in_flight: Vec<Arc<str>> = live
        .iter()
        .filter(|n| {
            !s.keeps(n)
                && matches!(
                    s.marks.get(&*n.id),
                    Some(Mark::Draining { .. } | Mark::Terminating { .. } | Mark::Reimaging { .. })
                )
        })
        .map(|n| group(n))
        .collect();
    let mut counts: BTreeMap<Arc<str>, u32> = BTreeMap::new();
    for n in outdated {
        *counts.entry(group(n)).or_default() += 1;
    }
    for (g, k) in quiet.map(|q| q.quiet_old_by_group()).unwrap_or_default() {
        *counts.entry(g).or_default() += k;
    }
    current_group(order, s.zone.as_deref(), &in_flight, &counts)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::super::fixtures::*;
    use super::super::tally::Tally;
    use super::*;
    use crate::model::NodeState;
    use crate::rollout::decide::is_available;

    /// (size, surge, unavailable, old healthy, old booting, peak) ->
    /// (nodes created, nodes taken down).
    #[test]
    fn creates_and_take_downs_within_the_budget_and_the_ratcheting_floor() {
        let table = [
            // create-before-terminate: 2 surge nodes, nothing taken down yet.
            ((6, 2, 0, 6, 0, 6), (2, 0)),
            // terminate-before-create: 2 below size.
            ((6, 0, 2, 6, 0, 6), (0, 2)),
            // Both at once.
            ((6, 1, 1, 6, 0, 6), (1, 1)),
            // A pool that begins degraded (4 of 10 up) replaces its booting
            // old nodes first, at no cost, and takes no available one away.
            ((10, 0, 2, 4, 6, 4), (0, 6)),
            // It regained 8 at some point (peak 8): the floor is 8, not 4;
            // with 8 up again, still nothing available is taken.
            ((10, 0, 2, 8, 2, 8), (0, 2)),
            // 9 up with the floor at 8: one may go.
            ((10, 0, 2, 9, 1, 9), (0, 2)),
        ];
        for ((size, surge, unavailable, up, booting, peak), want) in table {
            let mut s = state(size, surge, unavailable);
            s.peak_available = peak;
            let mut nodes: Vec<Node> = (0..up).map(|i| healthy(&format!("u{i}"), &old())).collect();
            nodes.extend((0..booting).map(|i| node(&format!("b{i}"), &old(), NodeState::Pending)));
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
            start(&mut d, &t, &live, None, t0());
            let created: u32 = d
                .actions
                .iter()
                .map(|a| match a {
                    Action::CreateNodes { count } => *count,
                    _ => 0,
                })
                .sum();
            let taken = d
                .actions
                .iter()
                .filter(|a| matches!(a, Action::Drain { .. }))
                .count() as u32;
            assert_eq!(
                (created, taken),
                want,
                "size {size} surge {surge} unavailable {unavailable} up {up} booting {booting} peak {peak}"
            );
            // Never an available node below the floor.
            let floor = size.saturating_sub(unavailable).min(d.state.peak_available);
            let still_up = up
                - d.actions
                    .iter()
                    .filter(|a| matches!(a, Action::Drain { node } if node.starts_with('u')))
                    .count() as u32;
            assert!(still_up >= floor, "{still_up} < floor {floor}");
        }
    }

    #[test]
    fn a_narrowed_surge_tries_one_node_and_a_canary_goes_alone() {
        let mut s = state(6, 3, 0);
        s.surge_narrowed = true;
        let nodes: Vec<Node> = (0..6).map(|i| healthy(&format!("o{i}"), &old())).collect();
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
        start(&mut d, &t, &live, None, t0());
        assert_eq!(d.actions, vec![Action::CreateNodes { count: 1 }]);

        let mut s = state(6, 3, 3);
        s.settings.canary = true;
        let mut d = Decision {
            state: s,
            actions: vec![],
            notes: vec![],
            waiting: None,
        };
        let t = Tally::of(&mut d, &live, None, &inp);
        start(&mut d, &t, &live, None, t0());
        let drains = d
            .actions
            .iter()
            .filter(|a| matches!(a, Action::Drain { .. }))
            .count();
        assert_eq!(
            (d.actions[0].clone(), drains),
            (Action::CreateNodes { count: 1 }, 1)
        );
    }

    /// The take-down order as it was before the selection was made partial:
    /// every candidate sorted (stably) by (available, on the target,
    /// launched), then taken while the canary limit and the floor allow.
    fn taken_by_full_sort(d: &Decision, t: &Tally, live: &[&Node], now: Timestamp) -> Vec<String> {
        let s = &d.state;
        let available = |n: &Node| is_available(n, s.target, &s.marks, s.settings.min_ready, now);
        let mut candidates: Vec<&Node> = live
            .iter()
            .copied()
            .filter(|n| n.template != s.target && !s.marks.contains_key(&*n.id))
            .collect();
        if t.surplus > 0 {
            let mut extra: Vec<&Node> = live
                .iter()
                .copied()
                .filter(|n| n.template == s.target && !s.marks.contains_key(&*n.id))
                .collect();
            extra.sort_by_key(|n| (available(n), std::cmp::Reverse(n.launched_at)));
            candidates.extend(extra.into_iter().take(t.surplus as usize));
        }
        candidates.sort_by_key(|n| {
            (
                available(n),
                n.template == s.target,
                n.launched_at,
                n.id.clone(),
            )
        });
        let mut spare = t.available.saturating_sub(s.floor());
        let mut limit = if s.settings.canary && !s.canary_done {
            1u32.saturating_sub(t.in_drain)
        } else {
            u32::MAX
        };
        let mut out = Vec::new();
        for n in candidates {
            if limit == 0 {
                break;
            }
            if available(n) {
                if spare == 0 {
                    continue;
                }
                spare -= 1;
            }
            limit -= 1;
            out.push(n.id.to_string());
        }
        out
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(512))]

        /// Ordering only the candidates that can be taken picks exactly the
        /// nodes, in exactly the order, that sorting them all did: ties in
        /// launch time included, old and new nodes, booting and marked ones,
        /// any budget, floor, canary and scale-down.
        #[test]
        fn the_partial_selection_takes_what_a_full_sort_took(
            kinds in proptest::collection::vec((0u8..2, 0u8..3, 0i64..4, 0u8..8), 0..80),
            size in 0u32..30,
            surge in 0u32..4,
            unavailable in 0u32..8,
            peak in 0u32..40,
            canary in proptest::bool::ANY,
        ) {
            let mut s = state(size, surge, unavailable);
            s.settings.canary = canary;
            s.peak_available = peak;
            let nodes: Vec<Node> = kinds
                .iter()
                .enumerate()
                .map(|(i, &(template, st, launched, marked))| {
                    let t = if template == 0 { old() } else { new() };
                    let state = [NodeState::Healthy, NodeState::Pending, NodeState::Unhealthy][st as usize];
                    let mut n = node(&format!("n{i}"), &t, state);
                    n.launched_at = at(launched);
                    if marked == 0 {
                        s.marks.insert(n.id.to_string(), Mark::Quarantined);
                    }
                    n
                })
                .collect();
            let live: Vec<&Node> = nodes.iter().collect();
            let drains = BTreeMap::new();
            let now = at(3600);
            let inp = inputs(&nodes, &drains, now);
            let mut d = Decision { state: s, actions: vec![], notes: vec![], waiting: None };
            let t = Tally::of(&mut d, &live, None, &inp);
            let want = taken_by_full_sort(&d, &t, &live, now);
            start(&mut d, &t, &live, None, now);
            let got: Vec<String> = d
                .actions
                .iter()
                .filter_map(|a| match a {
                    Action::Drain { node } => Some(node.clone()),
                    _ => None,
                })
                .collect();
            proptest::prop_assert_eq!(got, want);
        }
    }
}
