//! The daemon's work queue: pools, not rounds of all pools, are the unit
//! of work (as controller-runtime's workqueue does for objects).
//!
//! A pool is queued at most once, under its provider, with why it was queued;
//! each provider's pools are taken first in, first out, so a pool queued over
//! and over cannot starve the others, and a provider that is slow to answer
//! holds up only its own pools. A pool can also be due later (a window opens,
//! a retry, nodes still booting): it joins the queue when that instant comes.
//! Pure: no clock, no I/O.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

use jiff::Timestamp;

/// What caused a reconcile (a label on the reconciles metric).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trigger {
    Startup,
    /// The watcher saw the desired state (or, in git mode, the repository) change.
    Files,
    /// SIGHUP.
    Reload,
    /// The periodic full resync.
    Resync,
    /// A pool's worker finished.
    PoolDone,
    /// A pause or resume changed a rollout.
    Control,
    /// This daemon took the leader lease, or lost it (`--ha kubernetes`).
    Leadership,
    /// Something became due (a window opening, a retry, nodes settling): plan
    /// again with the desired state in force.
    Wake,
}

impl Trigger {
    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::Startup => "startup",
            Trigger::Files => "files",
            Trigger::Reload => "reload",
            Trigger::Resync => "resync",
            Trigger::PoolDone => "pool-done",
            Trigger::Control => "control",
            Trigger::Leadership => "leadership",
            Trigger::Wake => "wake",
        }
    }

    fn reloads(self) -> bool {
        matches!(
            self,
            Trigger::Startup
                | Trigger::Files
                | Trigger::Reload
                | Trigger::Resync
                | Trigger::Leadership
        )
    }

    /// When several triggers are pending, the one that does the most wins.
    pub fn merge(self, other: Trigger) -> Trigger {
        if other.reloads() && !self.reloads() {
            other
        } else {
            self
        }
    }
}

#[derive(Debug, Default)]
pub struct WorkQueue {
    /// Each queued pool: its provider, and why it is queued.
    queued: HashMap<String, (String, Trigger)>,
    by_provider: BTreeMap<String, VecDeque<String>>,
    /// Pools due later, by instant; each pool once, at its earliest instant.
    due: BTreeMap<Timestamp, BTreeSet<String>>,
    due_at: HashMap<String, Timestamp>,
}

impl WorkQueue {
    /// Queue a pool of `provider` now. A pool already queued keeps its place
    /// (its reason becomes the stronger of the two). Returns whether it was added.
    pub fn add(&mut self, pool: &str, provider: &str, why: Trigger) -> bool {
        if let Some((_, reason)) = self.queued.get_mut(pool) {
            *reason = reason.merge(why);
            return false;
        }
        self.queued
            .insert(pool.to_string(), (provider.to_string(), why));
        self.by_provider
            .entry(provider.to_string())
            .or_default()
            .push_back(pool.to_string());
        true
    }

    /// Look at a pool again no later than `at` (an earlier instant wins).
    pub fn add_after(&mut self, pool: &str, at: Timestamp) {
        match self.due_at.get(pool) {
            Some(t) if *t <= at => return,
            Some(t) => {
                let t = *t;
                self.remove_due(pool, t);
            }
            None => {}
        }
        self.due_at.insert(pool.to_string(), at);
        self.due.entry(at).or_default().insert(pool.to_string());
    }

    fn remove_due(&mut self, pool: &str, at: Timestamp) {
        if let Some(set) = self.due.get_mut(&at) {
            set.remove(pool);
            if set.is_empty() {
                self.due.remove(&at);
            }
        }
        self.due_at.remove(pool);
    }

    /// The earliest instant a pool is due.
    pub fn next_due(&self) -> Option<Timestamp> {
        self.due.keys().next().copied()
    }

    /// Pools due by `now`, taken off the schedule (the caller queues them,
    /// under their provider as it is now).
    pub fn take_due(&mut self, now: Timestamp) -> Vec<String> {
        let later = self.due.split_off(
            &now.checked_add(jiff::SignedDuration::from_nanos(1))
                .unwrap_or(now),
        );
        let due = std::mem::replace(&mut self.due, later);
        let pools: Vec<String> = due.into_values().flatten().collect();
        for p in &pools {
            self.due_at.remove(p);
        }
        pools
    }

    /// Up to `max` pools of `provider`, first queued first, with the strongest
    /// reason among them.
    pub fn take(&mut self, provider: &str, max: usize) -> (Vec<String>, Option<Trigger>) {
        let Some(q) = self.by_provider.get_mut(provider) else {
            return (Vec::new(), None);
        };
        let n = max.min(q.len());
        let pools: Vec<String> = q.drain(..n).collect();
        if q.is_empty() {
            self.by_provider.remove(provider);
        }
        let mut why: Option<Trigger> = None;
        for p in &pools {
            if let Some((_, reason)) = self.queued.remove(p) {
                why = Some(why.map_or(reason, |w| w.merge(reason)));
            }
        }
        (pools, why)
    }

    /// Providers with pools waiting.
    pub fn providers(&self) -> Vec<String> {
        self.by_provider.keys().cloned().collect()
    }

    /// Drop a pool from the queue and the schedule (it is no longer known).
    pub fn forget(&mut self, pool: &str) {
        if let Some((provider, _)) = self.queued.remove(pool)
            && let Some(q) = self.by_provider.get_mut(&provider)
        {
            q.retain(|p| p != pool);
            if q.is_empty() {
                self.by_provider.remove(&provider);
            }
        }
        if let Some(t) = self.due_at.get(pool).copied() {
            self.remove_due(pool, t);
        }
    }

    /// Pools waiting now.
    pub fn len(&self) -> usize {
        self.queued.len()
    }

    pub fn is_empty(&self) -> bool {
        self.queued.is_empty()
    }

    /// Pools scheduled for later.
    pub fn scheduled(&self) -> usize {
        self.due_at.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).unwrap()
    }

    #[test]
    fn a_pool_is_queued_once_and_keeps_its_place() {
        let mut q = WorkQueue::default();
        assert!(q.add("a", "sim", Trigger::Resync));
        assert!(q.add("b", "sim", Trigger::PoolDone));
        assert!(!q.add("a", "sim", Trigger::Files));
        let (pools, why) = q.take("sim", 10);
        assert_eq!(pools, ["a", "b"]);
        // Files (a reload) is the stronger reason.
        assert_eq!(why, Some(Trigger::Resync.merge(Trigger::Files)));
        assert!(q.is_empty());
    }

    #[test]
    fn due_pools_come_at_their_earliest_instant() {
        let mut q = WorkQueue::default();
        q.add_after("a", t(10));
        q.add_after("a", t(5));
        q.add_after("a", t(20));
        q.add_after("b", t(7));
        assert_eq!(q.next_due(), Some(t(5)));
        assert!(q.take_due(t(4)).is_empty());
        assert_eq!(q.take_due(t(5)), ["a"]);
        assert_eq!(q.next_due(), Some(t(7)));
        assert_eq!(q.take_due(t(100)), ["b"]);
        assert_eq!(q.scheduled(), 0);
    }

    #[test]
    fn a_forgotten_pool_leaves_queue_and_schedule() {
        let mut q = WorkQueue::default();
        q.add("a", "sim", Trigger::Files);
        q.add_after("a", t(1));
        q.forget("a");
        assert!(q.is_empty());
        assert_eq!(q.scheduled(), 0);
        assert!(q.providers().is_empty());
    }

    #[derive(Clone, Debug)]
    enum Op {
        Add(u8),
        Take(u8, u8),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0u8..20).prop_map(Op::Add),
            (0u8..3, 1u8..6).prop_map(|(v, n)| Op::Take(v, n)),
        ]
    }

    proptest! {
        /// Whatever is added and taken: a pool is never queued twice, takes
        /// come out in the order pools were first queued, and nothing is lost.
        #[test]
        fn at_most_once_and_first_in_first_out(ops in prop::collection::vec(op(), 1..200)) {
            let mut q = WorkQueue::default();
            // The model: per provider, the pools in queue order.
            let mut model: BTreeMap<String, Vec<String>> = BTreeMap::new();
            for op in ops {
                match op {
                    Op::Add(p) => {
                        // A pool belongs to one provider (pool p to provider p % 3).
                        let (pool, provider) = (format!("p{p}"), format!("v{}", p % 3));
                        let fresh = !model.values().any(|q| q.contains(&pool));
                        prop_assert_eq!(q.add(&pool, &provider, Trigger::Resync), fresh);
                        if fresh {
                            model.entry(provider).or_default().push(pool);
                        }
                    }
                    Op::Take(v, n) => {
                        let provider = format!("v{v}");
                        let (got, _) = q.take(&provider, n as usize);
                        let m = model.entry(provider).or_default();
                        let want: Vec<String> = m.drain(..(n as usize).min(m.len())).collect();
                        prop_assert_eq!(got, want);
                    }
                }
                let queued: usize = model.values().map(Vec::len).sum();
                prop_assert_eq!(q.len(), queued);
            }
        }
    }
}
