//! An index of a pool's nodes, kept between looks, that sorts out the quiet
//! ones (see [`Quiet`]): in a roll of a large pool almost every node is an
//! old one waiting its turn or a new one that has settled, and a look need
//! not visit them. The index is told what the provider observed (the whole
//! pool, or only what changed), and before each look works out again only
//! the nodes that may have changed class: those observed to change, those
//! not quiet, and the marked ones. So a look costs in proportion to the
//! nodes in flight, not to the size of the pool.
//!
//! Pure: no I/O and no clock; the instant is given.

use std::collections::{BTreeSet, VecDeque};
use std::sync::Arc;

use jiff::Timestamp;
use rustc_hash::FxHashMap;

use super::decide::{Quiet, Ready};
use super::order::{Place, place};
use super::state::RolloutState;
use crate::model::{Node, NodeState, TemplateHash};
use crate::spec::types::TakeDownOrder;
use crate::spec::values::Duration;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Class {
    /// Visited by every look.
    Listed,
    QuietOld,
    QuietNew,
}

#[derive(Clone, Debug)]
struct Slot {
    node: Node,
    class: Class,
}

/// What the classes were worked out against.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Basis {
    target: TemplateHash,
    min_ready: Duration,
    retire_before: Option<Timestamp>,
    at: Timestamp,
}

/// The nodes of one pool, in the order the provider lists them.
#[derive(Clone, Debug, Default)]
pub struct PoolIndex {
    /// In the provider's order; `None` where a node went (compacted once
    /// the gaps outnumber the nodes).
    slots: Vec<Option<Slot>>,
    by_id: FxHashMap<Arc<str>, usize>,
    /// Slots of the nodes every look visits, in order.
    listed: BTreeSet<usize>,
    /// The quiet old nodes in take-down order (`order`).
    quiet_old: BTreeSet<Place>,
    /// Under `zone` order, how many quiet old nodes each zone has.
    quiet_old_groups: FxHashMap<Arc<str>, u32>,
    /// The order `quiet_old` is kept in.
    order: TakeDownOrder,
    quiet_new: u32,
    /// The size the provider holds.
    size: u32,
    basis: Option<Basis>,
    /// Nodes observed to go, most recent last (at most [`DEPARTED`]).
    departed: Departed,
    /// Nodes listed again after they were observed to go, since the last
    /// [`PoolIndex::take_reappeared`].
    reappeared: Vec<Arc<str>>,
}

/// How many gone nodes an index remembers, to notice one listed again.
const DEPARTED: usize = 4096;

#[derive(Clone, Debug, Default)]
struct Departed {
    order: VecDeque<Arc<str>>,
    ids: rustc_hash::FxHashSet<Arc<str>>,
}

impl Departed {
    fn insert(&mut self, id: Arc<str>) {
        if self.ids.insert(id.clone()) {
            self.order.push_back(id);
            if self.order.len() > DEPARTED
                && let Some(first) = self.order.pop_front()
            {
                self.ids.remove(&first);
            }
        }
    }

    fn contains(&self, id: &str) -> bool {
        self.ids.contains(id)
    }
}

impl PoolIndex {
    /// An index of `nodes` (as the provider lists them), none sorted out yet.
    pub fn of(nodes: Vec<Node>, size: u32) -> PoolIndex {
        let mut index = PoolIndex {
            size,
            ..PoolIndex::default()
        };
        for node in nodes {
            index.put(node);
        }
        index
    }

    /// The whole pool as observed again. Nodes unchanged keep their class;
    /// if the provider lists the nodes in another order, the index starts
    /// over (a class is worked out again on the next look).
    pub fn replace(&mut self, nodes: Vec<Node>, size: u32) {
        let same_order = nodes.len() == self.by_id.len()
            && self
                .slots
                .iter()
                .flatten()
                .zip(&nodes)
                .all(|(s, n)| s.node.id == n.id);
        if !same_order {
            let now: rustc_hash::FxHashSet<&str> = nodes.iter().map(|n| &*n.id).collect();
            let mut departed = std::mem::take(&mut self.departed);
            for id in self.by_id.keys() {
                if !now.contains(&**id) {
                    departed.insert(id.clone());
                }
            }
            let mut reappeared = std::mem::take(&mut self.reappeared);
            reappeared.extend(
                nodes
                    .iter()
                    .filter(|n| departed.contains(&n.id) && !self.by_id.contains_key(&n.id))
                    .map(|n| n.id.clone()),
            );
            *self = PoolIndex::of(nodes, size);
            self.departed = departed;
            self.reappeared = reappeared;
            return;
        }
        self.size = size;
        let slots: Vec<usize> = (0..self.slots.len())
            .filter(|&i| self.slots[i].is_some())
            .collect();
        for (i, node) in slots.into_iter().zip(nodes) {
            if self.slots[i].as_ref().is_some_and(|s| s.node != node) {
                self.set(i, node);
            }
        }
    }

    /// What changed since the last observation: nodes changed or new (a
    /// new one is listed after the others, as the provider lists it), and
    /// the ids of nodes gone.
    pub fn update(&mut self, changed: Vec<Node>, gone: &[Arc<str>], size: u32) {
        self.size = size;
        for id in gone {
            if let Some(i) = self.by_id.remove(id) {
                self.leave(i);
                self.slots[i] = None;
                self.departed.insert(id.clone());
            }
        }
        for node in changed {
            match self.by_id.get(&node.id) {
                Some(&i) => self.set(i, node),
                None => self.put(node),
            }
        }
        if self.slots.len() > 64 && self.slots.len() > 2 * self.by_id.len() {
            self.compact();
        }
    }

    /// Work out the classes against the rollout state `s` at `now`, as the
    /// next look at `s` will see them.
    pub fn classify(&mut self, s: &RolloutState, now: Timestamp) {
        let basis = Basis {
            target: s.target,
            min_ready: s.settings.min_ready,
            retire_before: s.settings.retire_before,
            at: now,
        };
        // Another order sorts the quiet old nodes anew: every node is
        // listed, then classified again below.
        if s.settings.order != self.order {
            self.reorder(s.settings.order.clone());
        }
        // A quiet node stays quiet as time goes on (`minReady`, once
        // served, stays served), unless the clock went back.
        let all = self.basis.is_none_or(|b| {
            (b.target, b.min_ready, b.retire_before)
                != (basis.target, basis.min_ready, basis.retire_before)
                || now < b.at
        });
        self.basis = Some(basis);
        let ready = Ready::at(s.target, s.settings.min_ready, now);
        let check: Vec<usize> = if all {
            (0..self.slots.len()).collect()
        } else {
            let mut check: Vec<usize> = self.listed.iter().copied().collect();
            check.extend(s.marks.keys().filter_map(|id| self.by_id.get(id.as_str())));
            // A node held since the last look (do-not-disrupt) leaves the
            // quiet set, as a marked one does.
            check.extend(s.held.keys().filter_map(|id| self.by_id.get(id.as_str())));
            check
        };
        for i in check {
            let Some(slot) = &self.slots[i] else { continue };
            let class = class_of(&slot.node, s, &ready);
            if class != slot.class {
                self.leave(i);
                self.enter(i, class);
            }
        }
    }

    /// The nodes a look visits (every node but the quiet ones), in order.
    pub fn listed(&self) -> Vec<Node> {
        self.listed
            .iter()
            .filter_map(|&i| self.slots[i].as_ref())
            .map(|s| s.node.clone())
            .collect()
    }

    /// The nodes a look visits, by reference.
    pub fn each_listed(&self) -> impl Iterator<Item = &Node> {
        self.listed
            .iter()
            .filter_map(|&i| self.slots[i].as_ref())
            .map(|s| &s.node)
    }

    pub fn get(&self, id: &str) -> Option<&Node> {
        self.by_id
            .get(id)
            .and_then(|&i| self.slots[i].as_ref())
            .map(|s| &s.node)
    }

    /// Every node, in the provider's order.
    pub fn nodes(&self) -> impl Iterator<Item = &Node> {
        self.slots.iter().flatten().map(|s| &s.node)
    }

    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }

    /// The size the provider holds.
    pub fn size(&self) -> u32 {
        self.size
    }

    /// Nodes listed again after the provider's answers had them gone (a
    /// describe that contradicts itself), since the last call.
    pub fn take_reappeared(&mut self) -> Vec<Arc<str>> {
        std::mem::take(&mut self.reappeared)
    }

    /// Append a node the index has not seen; it is listed until classified.
    fn put(&mut self, node: Node) {
        if let Some(&i) = self.by_id.get(&node.id) {
            self.set(i, node);
            return;
        }
        if self.departed.contains(&node.id) {
            self.reappeared.push(node.id.clone());
        }
        let i = self.slots.len();
        self.by_id.insert(node.id.clone(), i);
        self.slots.push(Some(Slot {
            node,
            class: Class::Listed,
        }));
        self.listed.insert(i);
    }

    /// A node observed to change: listed until classified again.
    fn set(&mut self, i: usize, node: Node) {
        self.leave(i);
        if let Some(slot) = &mut self.slots[i] {
            slot.node = node;
        }
        self.enter(i, Class::Listed);
    }

    fn leave(&mut self, i: usize) {
        let Some(slot) = &self.slots[i] else { return };
        match slot.class {
            Class::Listed => {
                self.listed.remove(&i);
            }
            Class::QuietOld => {
                let p = place(&self.order, &slot.node);
                if let Some(g) = &p.group
                    && let Some(k) = self.quiet_old_groups.get_mut(g)
                {
                    *k -= 1;
                    if *k == 0 {
                        self.quiet_old_groups.remove(g);
                    }
                }
                self.quiet_old.remove(&p);
            }
            Class::QuietNew => self.quiet_new -= 1,
        }
    }

    fn enter(&mut self, i: usize, class: Class) {
        let Some(slot) = &mut self.slots[i] else {
            return;
        };
        slot.class = class;
        match class {
            Class::Listed => {
                self.listed.insert(i);
            }
            Class::QuietOld => {
                let p = place(&self.order, &slot.node);
                if let Some(g) = &p.group {
                    *self.quiet_old_groups.entry(g.clone()).or_default() += 1;
                }
                self.quiet_old.insert(p);
            }
            Class::QuietNew => self.quiet_new += 1,
        }
    }

    /// Keep the quiet old nodes in another order: every node is listed
    /// until classified again.
    fn reorder(&mut self, order: TakeDownOrder) {
        for i in 0..self.slots.len() {
            if self.slots[i]
                .as_ref()
                .is_some_and(|s| s.class != Class::Listed)
            {
                self.leave(i);
                self.enter(i, Class::Listed);
            }
        }
        self.order = order;
        self.basis = None;
    }

    /// Close the gaps gone nodes left.
    fn compact(&mut self) {
        let slots = std::mem::take(&mut self.slots);
        self.slots = slots.into_iter().filter(Option::is_some).collect();
        self.by_id.clear();
        self.listed.clear();
        for (i, slot) in self.slots.iter().enumerate() {
            let slot = slot.as_ref().expect("kept above");
            self.by_id.insert(slot.node.id.clone(), i);
            if slot.class == Class::Listed {
                self.listed.insert(i);
            }
        }
    }
}

/// The class of a node against the state `s`, by the rules of [`Quiet`].
fn class_of(n: &Node, s: &RolloutState, ready: &Ready) -> Class {
    if n.state != NodeState::Healthy
        || n.cordoned
        || s.marks.contains_key(&*n.id)
        || s.held.contains_key(&*n.id)
        || (!n.labels.is_empty() && crate::model::hold::of_node(n).is_some())
    {
        return Class::Listed;
    }
    let old = !s.keeps(n);
    // Settled: `minReady` served (an old node with no instant has none to serve).
    // (`minReady` is the template's rule, as in `Ready`: a node past
    // maxNodeAge on the target serves it like any node on the target.)
    let settled = n
        .healthy_since
        .map_or(n.template != s.target, |h| ready.served(h));
    match (settled, old) {
        (false, _) => Class::Listed,
        (true, true) => Class::QuietOld,
        (true, false) if s.healthy_seen.contains(&n.id) => Class::QuietNew,
        (true, false) => Class::Listed,
    }
}

impl Quiet for PoolIndex {
    fn target(&self) -> Option<TemplateHash> {
        self.basis.map(|b| b.target)
    }

    fn quiet_old(&self) -> u32 {
        self.quiet_old.len() as u32
    }

    fn quiet_new(&self) -> u32 {
        self.quiet_new
    }

    fn first_old(&self, k: usize, group: Option<&str>) -> Vec<&Node> {
        let Some(g) = group else {
            return self
                .quiet_old
                .iter()
                .take(k)
                .filter_map(|p| self.get(&p.id))
                .collect();
        };
        // A zone's places are consecutive (the group compares first).
        let first = Place {
            group: Some(Arc::from(g)),
            value: super::order::Value::Unordered,
            launched: i128::MIN,
            id: Arc::from(""),
        };
        self.quiet_old
            .range(first..)
            .take_while(|p| p.group.as_deref() == Some(g))
            .take(k)
            .filter_map(|p| self.get(&p.id))
            .collect()
    }

    fn quiet_old_by_group(&self) -> Vec<(Arc<str>, u32)> {
        self.quiet_old_groups
            .iter()
            .map(|(g, k)| (g.clone(), *k))
            .collect()
    }

    fn contains(&self, id: &str) -> bool {
        self.by_id.contains_key(id)
    }

    fn all(&self) -> Vec<Node> {
        self.nodes().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;
    use crate::model::NodeTemplate;
    use crate::rollout::decide::fixtures::*;
    use crate::rollout::decide::{DrainProgress, Inputs, decide};
    use crate::rollout::state::Mark;
    use crate::spec::types::OnFailure;

    /// One node as generated: (on the target, state, cordoned, launched,
    /// healthy since (seconds before now; `None`: not reported), mark).
    type Drawn = (bool, u8, bool, i64, Option<i64>, u8);

    fn node_strategy() -> impl Strategy<Value = Drawn> {
        // Mostly healthy, unmarked, in-service nodes, as a pool mid-roll
        // has: enough quiet ones that a step takes several of them.
        (
            any::<bool>(),
            prop::sample::select(vec![0u8, 0, 0, 0, 0, 1, 2, 3]),
            prop::bool::weighted(0.1),
            0i64..3,
            prop::option::weighted(0.9, 0i64..40),
            0u8..20,
        )
    }

    fn build(i: usize, d: &Drawn, now: Timestamp) -> Node {
        let (on_target, st, cordoned, launched, since, _) = *d;
        let template: NodeTemplate = if on_target { new() } else { old() };
        let state = [
            NodeState::Healthy,
            NodeState::Pending,
            NodeState::Unhealthy,
            NodeState::Terminating,
        ][st as usize];
        let mut n = node(&format!("n{i:02}"), &template, state);
        // Zones and a label for every order to sort by (some nodes lack them).
        n.zone = (i % 4 != 3).then(|| Arc::from(["a", "b", "c"][i % 3]));
        if i % 5 != 4 {
            n.labels
                .insert("prio".into(), ["2", "10", "web", "1"][i % 4].into());
        }
        n.cordoned = cordoned;
        n.launched_at = at(launched);
        n.healthy_since = since.map(|s| now.checked_sub(SignedDuration::from_secs(s)).unwrap());
        n
    }

    fn mark(kind: u8, now: Timestamp) -> Option<Mark> {
        Some(match kind {
            0 => Mark::Draining {
                since: now,
                blocked: None,
            },
            1 => Mark::Terminating { at: now },
            2 => Mark::Quarantined,
            3 => Mark::Reimaging { at: now },
            4 => Mark::Uncordoning,
            5 => Mark::DrainFailed,
            _ => return None,
        })
    }

    use jiff::SignedDuration;

    /// What a step decides from every node, and from the index's listed
    /// nodes and quiet counts, is the same decision.
    fn same_decision(s: &RolloutState, nodes: &[Node], index: &PoolIndex, now: Timestamp) {
        let drains: BTreeMap<String, DrainProgress> = s
            .marks
            .iter()
            .filter(|(_, m)| matches!(m, Mark::Draining { .. }))
            .enumerate()
            .map(|(i, (id, _))| {
                let p = [DrainProgress::Done, DrainProgress::Running][i % 2].clone();
                (id.clone(), p)
            })
            .collect();
        let every = Inputs {
            provider_size: index.size(),
            ..inputs(nodes, &drains, now)
        };
        let listed = index.listed();
        let quick = Inputs {
            nodes: &listed,
            quiet: Some(index),
            ..every
        };
        assert_eq!(decide(s, &quick), decide(s, &every));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(400))]

        /// The index's quiet set is sound: over random pools, states and
        /// settings (marks of every kind, seen and unseen new nodes, nodes
        /// still serving minReady, cordoned and terminating ones, a
        /// rollback on failure, more new nodes than the size, canaries and
        /// waves), a step over the listed nodes and the quiet counts decides
        /// exactly what a step over every node does; and so it stays over
        /// several steps in a row, with nodes changing between them, as the
        /// index works out again only what may have changed.
        #[test]
        fn a_step_over_the_index_decides_what_a_step_over_every_node_does(
            drawn in prop::collection::vec(node_strategy(), 0..40),
            size in 0u32..30,
            // Often the size the new nodes are near (a roll near its end).
            near in prop::option::of(-2i64..3),
            // The size the provider holds, which may lag what it runs.
            held in prop::option::of(0u32..40),
            surge in 0u32..4,
            unavailable in 0u32..6,
            min_ready in prop::sample::select(vec![0u64, 10, 30]),
            peak in 0u32..20,
            seen_every in 1usize..4,
            canary in any::<bool>(),
            waves in prop::bool::weighted(0.2),
            rollback in any::<bool>(),
            order in 0usize..4,
            retire in prop::option::weighted(0.3, 0i64..3),
            steps in prop::collection::vec((0i64..25, prop::collection::vec((0usize..40, 0u8..4), 0..4)), 1..5),
        ) {
            let mut now = at(100);
            let mut nodes: Vec<Node> = drawn.iter().enumerate().map(|(i, d)| build(i, d, now)).collect();
            let new_nodes = drawn.iter().filter(|d| d.0).count() as i64;
            let size = near.map_or(size, |d| (new_nodes + d).max(0) as u32);
            let mut s = state(size, surge, unavailable);
            s.peak_available = peak;
            s.settings.min_ready = Duration::secs(min_ready);
            s.settings.canary = canary;
            s.settings.waves = waves;
            s.settings.startup_timeout = Duration::secs(90);
            s.settings.order = [
                TakeDownOrder::Oldest,
                TakeDownOrder::Newest,
                TakeDownOrder::Zone,
                TakeDownOrder::Label("prio".into()),
            ][order].clone();
            // Nodes launched before this are old even on the target
            // (lifecycle.maxNodeAge).
            s.settings.retire_before = retire.map(at);
            if rollback {
                s.settings.on_failure = OnFailure::Rollback;
            }
            for (i, d) in drawn.iter().enumerate() {
                if let Some(m) = mark(d.5, now) {
                    s.marks.insert(nodes[i].id.to_string(), m);
                } else if i % 7 == 3 {
                    // Held by do-not-disrupt, by its label or by a pod.
                    if i % 2 == 0 {
                        nodes[i].labels.insert("poolwright.io/do-not-disrupt".into(), "true".into());
                    } else {
                        s.held.insert(nodes[i].id.to_string(), "a pod holds it".into());
                    }
                }
                if nodes[i].template == s.target && i % seen_every == 0 {
                    s.healthy_seen.insert(&nodes[i].id);
                }
            }
            // A mark and a seen node that are gone.
            s.marks.insert("gone".into(), Mark::Terminating { at: now });
            let size_held = held.unwrap_or(nodes.len() as u32);
            let mut index = PoolIndex::of(nodes.clone(), size_held);
            for (later, changes) in steps {
                index.classify(&s, now);
                same_decision(&s, &nodes, &index, now);
                // The next look: the state decided, time on, some nodes
                // changed as a provider would report them.
                let listed = index.listed();
                let drains = BTreeMap::new();
                let d = decide(&s, &Inputs { nodes: &listed, quiet: Some(&index), ..inputs(&nodes, &drains, now) });
                s = d.state;
                // A workload holds one more node (do-not-disrupt, found by
                // the cluster): it must leave the quiet set.
                if let Some(n) = changes.first().and_then(|(i, _)| nodes.get(*i))
                    && !s.marks.contains_key(&*n.id)
                {
                    s.held.insert(n.id.to_string(), "a pod holds it".into());
                }
                now = now.checked_add(SignedDuration::from_secs(later)).unwrap();
                let mut changed = Vec::new();
                for (i, st) in changes {
                    if let Some(n) = nodes.get_mut(i) {
                        n.state = [NodeState::Healthy, NodeState::Pending, NodeState::Unhealthy, NodeState::Terminating][st as usize];
                        n.healthy_since = (n.state == NodeState::Healthy).then_some(now);
                        changed.push(n.clone());
                    }
                }
                index.update(changed, &[], size_held);
            }
            index.classify(&s, now);
            same_decision(&s, &nodes, &index, now);
        }

        /// Told what changed (nodes changed, new, gone) in any order of
        /// events, the index holds exactly the pool a whole describe gives,
        /// in the provider's order, and every node is either listed or
        /// quiet, never both, however often it compacts.
        #[test]
        fn told_what_changed_the_index_holds_the_pool(
            ops in prop::collection::vec((0u8..3, 0usize..200, any::<bool>()), 0..400),
        ) {
            let mut pool: Vec<Node> = (0..20).map(|i| healthy(&format!("p-{i:05}"), &old())).collect();
            let mut next = 20;
            let mut index = PoolIndex::of(pool.clone(), 20);
            let s = state(20, 1, 0);
            for (k, (op, pick, healthy_now)) in ops.into_iter().enumerate() {
                let (mut changed, mut gone) = (Vec::new(), Vec::new());
                match op {
                    0 if !pool.is_empty() => {
                        let len = pool.len();
                        let n = &mut pool[pick % len];
                        n.state = if healthy_now { NodeState::Healthy } else { NodeState::Pending };
                        changed.push(n.clone());
                    }
                    1 if !pool.is_empty() => {
                        let len = pool.len();
                        gone.push(pool.remove(pick % len).id);
                    }
                    _ => {
                        let n = healthy(&format!("p-{next:05}"), &new());
                        next += 1;
                        pool.push(n.clone());
                        changed.push(n);
                    }
                }
                index.update(changed, &gone, pool.len() as u32);
                if k % 3 == 0 {
                    index.classify(&s, at(k as i64));
                }
                let held: Vec<Node> = index.nodes().cloned().collect();
                prop_assert_eq!(&held, &pool);
                let quiet = index.quiet_old() + index.quiet_new();
                prop_assert_eq!(index.listed().len() + quiet as usize, pool.len());
                prop_assert!(index.each_listed().all(|n| index.get(&n.id).is_some()));
            }
        }
    }

    /// A roll of a large pool lists only what is in flight: the untouched
    /// old nodes and the settled new ones are counted, not visited.
    #[test]
    fn a_large_pool_mid_roll_lists_only_the_nodes_in_flight() {
        let now = at(3600);
        let mut nodes: Vec<Node> = (0..1000)
            .map(|i| healthy(&format!("o{i:04}"), &old()))
            .collect();
        let mut s = state(1000, 2, 0);
        for i in 0..300 {
            let n = healthy(&format!("n{i:04}"), &new());
            s.healthy_seen.insert(&n.id);
            nodes.push(n);
        }
        nodes.push(node("n0300", &new(), NodeState::Pending));
        s.marks.insert(
            "o0000".into(),
            Mark::Draining {
                since: now,
                blocked: None,
            },
        );
        let mut index = PoolIndex::of(nodes, 1301);
        index.classify(&s, now);
        let listed: Vec<String> = index.each_listed().map(|n| n.id.to_string()).collect();
        assert_eq!(listed, ["o0000", "n0300"]);
        assert_eq!((index.quiet_old(), index.quiet_new()), (999, 300));
    }

    #[test]
    fn a_node_listed_again_after_it_went_is_reported_once() {
        let a = healthy("a", &old());
        let b = healthy("b", &old());
        // Whole answers: b missing from one, then back.
        let mut index = PoolIndex::of(vec![a.clone(), b.clone()], 2);
        index.replace(vec![a.clone()], 2);
        assert!(index.take_reappeared().is_empty());
        index.replace(vec![a.clone(), b.clone()], 2);
        assert_eq!(index.take_reappeared(), vec![Arc::from("b")]);
        assert!(index.take_reappeared().is_empty(), "reported once");
        // Changes: b reported gone, then changed.
        index.update(Vec::new(), &[Arc::from("b")], 1);
        index.update(vec![b.clone()], &[], 2);
        assert_eq!(index.take_reappeared(), vec![Arc::from("b")]);
        // A new node is not one listed again.
        index.update(vec![healthy("c", &new())], &[], 3);
        assert!(index.take_reappeared().is_empty());
    }
}
