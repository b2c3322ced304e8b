//! What changed in a simulated pool since a reader last asked
//! ([`ReportsChanges`]): a forecast looks at a pool thousands of times per
//! run, and a look that copied every node of a large pool cost more than the
//! rest of the look.
//!
//! A node's state as observed changes only at its own instants (running,
//! healthy, gone) or when a call changes it. So the pool keeps a watch: the
//! nodes a call changed since the last answer, and the nodes with an instant
//! still to come, filed by that instant. An answer reports the nodes changed
//! by a call and those whose instant has come, as they are now (the gone
//! ones as gone), and files each again under its next instant; every other
//! node is as the reader last saw it, and is not looked at.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use jiff::Timestamp;
use rustc_hash::FxHashMap;

use super::{AuditLock, Sim, SimPool};
use crate::provider::{PoolChanges, ReportsChanges, Result};

#[derive(Debug)]
pub(super) struct Watch {
    /// The token of the last answer: only its holder gets changes (another
    /// reader, or one that lost its place, gets the whole pool).
    token: u64,
    /// The pool's nodes were in order when it began (new ones keep it).
    ordered: bool,
    /// The instant of the last answer.
    at: Timestamp,
    /// Nodes a call changed (or launched) since, in the pool's order.
    touched: BTreeSet<Watched>,
    /// Nodes with an instant still to come, by that instant...
    due: BTreeSet<(Timestamp, Watched)>,
    /// ...and the instant each is filed under.
    filed: FxHashMap<Arc<str>, Timestamp>,
}

impl Watch {
    fn file(&mut self, id: &Arc<str>, at: Option<Timestamp>) {
        if let Some(t) = self.filed.remove(id) {
            self.due.remove(&(t, Watched(id.clone())));
        }
        if let Some(t) = at {
            self.filed.insert(id.clone(), t);
            self.due.insert((t, Watched(id.clone())));
        }
    }
}

impl SimPool {
    /// Where the node of this id is: found by a binary search when the
    /// pool's ids are in order (see [`in_order`]), else one by one.
    pub(super) fn position(&self, id: &str) -> Option<usize> {
        self.sorted_position(id)
            .or_else(|| self.nodes.iter().position(|n| *n.id == *id))
    }

    /// Where the node of this id is, if the pool's ids are in order.
    fn sorted_position(&self, id: &str) -> Option<usize> {
        self.position_from(0, id)
    }

    /// Where the node of this id is, at `from` or after it, if the pool's
    /// ids are in order: a search that gallops from `from`, so nodes looked
    /// for in order, near each other (the few in flight), cost a few
    /// comparisons each.
    fn position_from(&self, from: usize, id: &str) -> Option<usize> {
        let rest = self.nodes.get(from..)?;
        let key = order(id);
        let mut bound = 1;
        while bound < rest.len() && order(&rest[bound].id) < key {
            bound *= 2;
        }
        let window = &rest[bound / 2..rest.len().min(bound + 1)];
        window
            .binary_search_by(|n| order(&n.id).cmp(&key))
            .ok()
            .map(|i| from + bound / 2 + i)
    }

    /// A call changed (or launched) the node at `i`: report it next time.
    pub(super) fn touch(&mut self, i: usize) {
        if let (Some(w), Some(n)) = (&mut self.watch, self.nodes.get(i)) {
            w.touched.insert(Watched(n.id.clone()));
        }
    }
}

/// The simulator names nodes `POOL-00042` with serials that only grow, and
/// keeps them in launch order: ordered by (length, name) they are in
/// serial order (a longer number is a larger one), so a node is found by a
/// binary search without reading its number.
fn order(id: &str) -> (usize, &str) {
    (id.len(), id)
}

/// A node id, ordered as the pool's nodes are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Watched(Arc<str>);

impl Ord for Watched {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        order(&self.0).cmp(&order(&other.0))
    }
}

impl PartialOrd for Watched {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// Whether the pool's nodes are in that order (a fleet written by an older
/// version may not be: its pool is then answered whole every time).
fn in_order(p: &SimPool) -> bool {
    p.nodes
        .windows(2)
        .all(|w| order(&w[0].id) < order(&w[1].id))
}

impl Sim {
    fn changes_of(&self, pool: &str, token: Option<u64>) -> Result<Option<PoolChanges>> {
        let now = self.clock.now();
        let mut fleet = self.lock();
        let _held = self.shared_lock(AuditLock::shared, "DescribePools")?;
        self.refresh(&mut fleet, "DescribePools")?;
        let next = self.tokens.fetch_add(1, Ordering::Relaxed) + 1;
        let Some(p) = fleet.pools.get_mut(pool) else {
            return Ok(None);
        };
        let watch = p
            .watch
            .take()
            .filter(|w| token == Some(w.token) && w.ordered && now >= w.at);
        let Some(mut w) = watch else {
            // The whole pool, every node with an instant to come filed.
            let mut w = Watch {
                token: next,
                ordered: in_order(p),
                at: now,
                touched: BTreeSet::new(),
                due: BTreeSet::new(),
                filed: FxHashMap::default(),
            };
            let mut nodes = Vec::with_capacity(p.nodes.len());
            for n in &p.nodes {
                if let Some(v) = n.view(now) {
                    w.file(&n.id, n.changes_after(now));
                    nodes.push(v);
                }
            }
            let size = p.size;
            p.watch = Some(w);
            return Ok(Some(PoolChanges {
                token: next,
                size,
                whole: true,
                nodes,
                gone: Vec::new(),
            }));
        };
        // What to report: the nodes changed by a call, and those whose
        // instant has come; in the pool's order (a node launched since
        // comes last), each searched for after the one before.
        let mut report = std::mem::take(&mut w.touched);
        while let Some((t, _)) = w.due.first()
            && *t <= now
        {
            let (_, id) = w.due.pop_first().expect("just seen");
            w.filed.remove(&id.0);
            report.insert(id);
        }
        let (mut nodes, mut gone) = (Vec::with_capacity(report.len()), Vec::new());
        let mut from = 0;
        for Watched(id) in report {
            let found = p.position_from(from, &id);
            let view = found.and_then(|i| p.nodes[i].view(now));
            if let Some(i) = found {
                from = i + 1;
                w.file(&id, p.nodes[i].changes_after(now));
            }
            match view {
                Some(v) => nodes.push(v),
                None => {
                    w.file(&id, None);
                    gone.push(id);
                }
            }
        }
        w.token = next;
        w.at = now;
        let size = p.size;
        p.watch = Some(w);
        Ok(Some(PoolChanges {
            token: next,
            size,
            whole: false,
            nodes,
            gone,
        }))
    }

    /// The first instant after `now` at which a node of `pool` changes as
    /// observed by itself (what [`Sim::next_change_of_any`] says): the first filed
    /// in the watch, right after an answer at `now` with no call since, else
    /// worked out over every node. `None` if there is no such pool.
    pub fn next_change(&self, pool: &str, now: Timestamp) -> Option<Option<Timestamp>> {
        let fleet = self.lock();
        let p = fleet.pools.get(pool)?;
        if let Some(w) = &p.watch
            && w.ordered
            && w.at == now
            && w.touched.is_empty()
        {
            return Some(w.due.first().map(|(t, _)| *t));
        }
        drop(fleet);
        self.next_change_of_any(pool, now)
    }
}

impl ReportsChanges for Sim {
    /// A describe (injected failures and all, as `DescribePools`).
    fn changes(&self, pool: &str, token: Option<u64>) -> Result<Option<PoolChanges>> {
        self.inject("DescribePools")?;
        self.changes_of(pool, token)
    }

    /// The same, not counted as a call: a forecast's own look between two
    /// of the executor's must not move the injected failures along.
    fn changes_unmetered(&self, pool: &str, token: Option<u64>) -> Result<Option<PoolChanges>> {
        self.changes_of(pool, token)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use jiff::SignedDuration;
    use proptest::prelude::*;

    use super::*;
    use crate::clock::{Clock, ManualClock};
    use crate::model::{NodeTemplate, OpKey, PoolSpec};
    use crate::provider::Provider;
    use crate::rollout::PoolIndex;
    use crate::spec::types::SimProvider;

    fn template(image: &str) -> NodeTemplate {
        NodeTemplate {
            image: Some(image.into()),
            ..NodeTemplate::default()
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        /// Whatever calls are made and however time moves, a reader that
        /// keeps what it was told holds exactly what a whole describe gives
        /// (the nodes, their states, their order, the size), and the next
        /// instant a node changes by itself is the one a pass over every
        /// node finds; a token another reader made stale gets the whole pool.
        #[test]
        fn a_reader_told_only_what_changed_holds_what_a_describe_gives(
            ops in prop::collection::vec((0u8..9, 0usize..64, 0u64..50), 1..80),
            never_healthy in prop::sample::select(vec![0.0, 0.3]),
        ) {
            let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
            let clock = Arc::new(ManualClock::new("2026-12-02T12:00:00Z".parse().unwrap()));
            let mut settings = SimProvider::default();
            settings.failures.never_healthy = never_healthy;
            let sim = Sim::open("t", &settings, None, clock.clone() as Arc<dyn Clock>).unwrap();
            let key = OpKey::derive(&["test"]);
            let spec = PoolSpec {
                name: "web".into(),
                size: 4,
                autoscaling: None,
                template: template("img-1"),
                in_place: Default::default(),
                placement: Default::default(),
            };
            rt.block_on(sim.create_pool(&spec, &key)).unwrap();
            let (mut index, mut token) = (PoolIndex::default(), None);
            for (op, pick, n) in ops {
                let live: Vec<String> = rt
                    .block_on(sim.describe_pools(&["web".into()]))
                    .unwrap()[0]
                    .live_nodes()
                    .map(|n| n.id.to_string())
                    .collect();
                let some = live.get(pick % live.len().max(1)).cloned();
                // Calls may be refused (a node going, say): what matters is
                // what the reader is told afterwards.
                let _ = match (op, some) {
                    (0 | 1, _) => {
                        clock.advance(SignedDuration::from_secs(n as i64));
                        Ok(())
                    }
                    (2, _) => rt.block_on(sim.create_nodes("web", 1 + n as u32 % 3, 0, &key)).map(|_| ()),
                    (3, Some(id)) => rt.block_on(sim.terminate_node("web", &id, n % 2 == 0, &key)),
                    (4, Some(id)) => sim.set_cordoned("web", &id, n % 2 == 0),
                    (5, Some(id)) => rt.block_on(sim.reimage_node("web", &id, &key)),
                    (6, _) => rt.block_on(sim.set_size("web", n as u32 % 8, &key)),
                    (7, _) => rt.block_on(sim.set_template("web", &template(&format!("img-{n}")), &key)),
                    // Another reader asks: this one's token goes stale.
                    (8, _) if n % 5 == 0 => sim.changes("web", None).map(|_| ()),
                    _ => Ok(()),
                };
                if op == 8 && n % 5 == 0 {
                    let told = sim.changes("web", token).unwrap().unwrap();
                    prop_assert!(told.whole, "a stale token gets the whole pool");
                    index.replace(told.nodes, told.size);
                    token = Some(told.token);
                }
                if pick % 3 == 0 {
                    continue;
                }
                let told = sim.changes("web", token).unwrap().unwrap();
                token = Some(told.token);
                if told.whole {
                    index.replace(told.nodes, told.size);
                } else {
                    index.update(told.nodes, &told.gone, told.size);
                }
                let now = clock.now();
                let described = rt.block_on(sim.describe_pools(&["web".into()])).unwrap().remove(0);
                let held: Vec<_> = index.nodes().cloned().collect();
                prop_assert_eq!(&held, &described.nodes);
                prop_assert_eq!(index.size(), described.size);
                let every = sim.next_change_of_any("web", now).unwrap();
                prop_assert_eq!(sim.next_change("web", now).unwrap(), every);
            }
        }
    }
}
