//! `run --ha kubernetes --shards S`: the pools are split into S shards, each a
//! Lease of its own, and every daemon holds a share of them.
//!
//! A pool belongs to shard `fnv1a64(name) mod S` ([`shard_of`]): FNV-1a, 64
//! bits, of the pool's name as bytes, so every daemon and every release agrees
//! without talking. [`Shards`] holds this daemon's right to act on each shard
//! (one [`Fence`] per shard Lease) and asks it before every step and every
//! write. [`rebalance`] is the pure rule that says which shards a daemon takes
//! or gives back, from the live members and who holds what.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use super::lease::{Fence, Term};
use crate::store::shared::Fenced;

/// Most shards a daemon accepts: each is a Lease renewed every retry period.
pub const MAX_SHARDS: u32 = 256;

/// FNV-1a, 64 bits.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The shard of `pool` among `count`: FNV-1a (64-bit) of the name, mod count.
pub fn shard_of(pool: &str, count: u32) -> u32 {
    (fnv1a64(pool.as_bytes()) % u64::from(count.max(1))) as u32
}

/// The Lease of shard `i` when leases are named after `lease`.
pub fn shard_lease(lease: &str, i: u32) -> String {
    format!("{lease}-shard-{i}")
}

/// This daemon's right to act, per shard. Without sharding there is one
/// shard, the leader lease, and every pool is in it.
#[derive(Debug)]
pub struct Shards {
    count: u32,
    sharded: bool,
    fences: Vec<Arc<Fence>>,
    /// Shards being handed over: no step starts on their pools, but steps in
    /// flight still write their journals (the term still holds).
    releasing: Vec<AtomicBool>,
    /// Workers running per shard: a shard is released once none is.
    inflight: Vec<AtomicUsize>,
}

impl Shards {
    /// One leader lease for every pool.
    pub fn single(fence: Arc<Fence>) -> Shards {
        Shards {
            count: 1,
            sharded: false,
            fences: vec![fence],
            releasing: vec![AtomicBool::new(false)],
            inflight: vec![AtomicUsize::new(0)],
        }
    }

    /// `count` shard leases, each with its own fence.
    pub fn sharded(count: u32) -> Shards {
        let count = count.clamp(1, MAX_SHARDS);
        Shards {
            count,
            sharded: true,
            fences: (0..count).map(|_| Arc::new(Fence::default())).collect(),
            releasing: (0..count).map(|_| AtomicBool::new(false)).collect(),
            inflight: (0..count).map(|_| AtomicUsize::new(0)).collect(),
        }
    }

    pub fn count(&self) -> u32 {
        self.count
    }

    pub fn is_sharded(&self) -> bool {
        self.sharded
    }

    /// The shard `pool` belongs to (0 without sharding).
    pub fn of(&self, pool: &str) -> u32 {
        if self.sharded {
            shard_of(pool, self.count)
        } else {
            0
        }
    }

    pub fn fence(&self, shard: u32) -> &Arc<Fence> {
        &self.fences[(shard.min(self.count - 1)) as usize]
    }

    /// The term under which this daemon may write state of `shard` (a step
    /// in flight finishes its journal even while the shard is handed over).
    pub fn may_write(&self, shard: u32) -> Result<Term, Fenced> {
        self.fence(shard)
            .check()
            .map_err(|e| self.explain(shard, e))
    }

    /// Whether a step may start on `pool`: its shard is held and not being
    /// handed over. Asked before every side effect.
    pub fn may_start(&self, pool: &str) -> Result<Term, Fenced> {
        let shard = self.of(pool);
        let term = self.may_write(shard)?;
        if self.releasing[shard as usize].load(Ordering::SeqCst) {
            return Err(Fenced(format!(
                "shard {shard} (pool {pool}) is being handed to another daemon: no step is started"
            )));
        }
        Ok(term)
    }

    fn explain(&self, shard: u32, Fenced(e): Fenced) -> Fenced {
        Fenced(if self.sharded {
            format!(
                "this daemon does not hold shard {shard} of {}: {e}",
                self.count
            )
        } else {
            e
        })
    }

    pub fn set_releasing(&self, shard: u32, releasing: bool) {
        if let Some(r) = self.releasing.get(shard as usize) {
            r.store(releasing, Ordering::SeqCst);
        }
    }

    pub fn is_releasing(&self, shard: u32) -> bool {
        self.releasing
            .get(shard as usize)
            .is_some_and(|r| r.load(Ordering::SeqCst))
    }

    /// A worker of `pool` started (`+1`) or ended (`-1`).
    pub fn worker(&self, pool: &str, started: bool) {
        let n = &self.inflight[self.of(pool) as usize];
        if started {
            n.fetch_add(1, Ordering::SeqCst);
        } else {
            let _ = n.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |v| v.checked_sub(1));
        }
    }

    pub fn inflight(&self, shard: u32) -> usize {
        self.inflight
            .get(shard as usize)
            .map_or(0, |n| n.load(Ordering::SeqCst))
    }
}

/// What one daemon knows when it rebalances.
#[derive(Clone, Debug)]
pub struct View<'a> {
    pub me: &'a str,
    /// The live daemons (their member leases renewed), this one included.
    pub members: &'a BTreeSet<String>,
    /// Each shard's live holder, `None` when it is free (released or expired).
    pub holders: &'a [Option<String>],
}

/// What to do with the shard leases this round.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Moves {
    /// Free shards to try to take.
    pub take: Vec<u32>,
    /// Held shards to give back, at a safe point.
    pub release: Vec<u32>,
}

/// How many shards each member should hold: `S / n` each, and one more for
/// `S mod n` of them, given to those holding the most already (ties by name),
/// so nothing moves that need not.
pub fn targets(
    count: u32,
    members: &BTreeSet<String>,
    holders: &[Option<String>],
) -> BTreeMap<String, u32> {
    let n = members.len().max(1) as u32;
    let (base, extra) = (count / n, count % n);
    let mut held: BTreeMap<&str, u32> = members.iter().map(|m| (m.as_str(), 0)).collect();
    for h in holders.iter().flatten() {
        if let Some(c) = held.get_mut(h.as_str()) {
            *c += 1;
        }
    }
    let mut order: Vec<(&str, u32)> = held.into_iter().collect();
    order.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    order
        .into_iter()
        .enumerate()
        .map(|(rank, (m, _))| (m.to_string(), base + u32::from((rank as u32) < extra)))
        .collect()
}

/// The sticky rule: keep what you hold up to your target; above it, give
/// back the highest-numbered; below it, take the lowest-numbered free ones.
/// Shards held by someone else (live or not yet expired) are never taken.
pub fn rebalance(view: &View) -> Moves {
    let count = view.holders.len() as u32;
    let mut members = view.members.clone();
    members.insert(view.me.to_string());
    let target = targets(count, &members, view.holders)
        .get(view.me)
        .copied()
        .unwrap_or(0) as usize;
    let mine: Vec<u32> = (0..count)
        .filter(|i| view.holders[*i as usize].as_deref() == Some(view.me))
        .collect();
    let mut moves = Moves::default();
    if mine.len() > target {
        moves.release = mine[target..].to_vec();
    } else {
        moves.take = (0..count)
            .filter(|i| view.holders[*i as usize].is_none())
            .take(target - mine.len())
            .collect();
    }
    moves
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("d{i}")).collect()
    }

    /// Every member rebalances in turn against the shared truth (a release
    /// frees at once, a take wins the free lease) until nothing moves.
    fn settle(members: &BTreeSet<String>, holders: &mut [Option<String>]) -> usize {
        for round in 0..50 {
            let mut moved = false;
            for me in members {
                let m = rebalance(&View {
                    me,
                    members,
                    holders,
                });
                for i in m.release {
                    assert_eq!(holders[i as usize].as_deref(), Some(me.as_str()));
                    holders[i as usize] = None;
                    moved = true;
                }
                for i in m.take {
                    assert!(holders[i as usize].is_none(), "took a held shard");
                    holders[i as usize] = Some(me.clone());
                    moved = true;
                }
            }
            if !moved {
                return round;
            }
        }
        panic!("did not settle: {holders:?}");
    }

    fn balanced(count: u32, members: &BTreeSet<String>, holders: &[Option<String>]) {
        assert!(
            holders
                .iter()
                .all(|h| h.as_ref().is_some_and(|h| members.contains(h))),
            "{holders:?}"
        );
        let n = members.len() as u32;
        for m in members {
            let c = holders
                .iter()
                .filter(|h| h.as_deref() == Some(m.as_str()))
                .count() as u32;
            assert!(
                c == count / n || c == count.div_ceil(n),
                "{m} holds {c} of {count} with {n} members: {holders:?}"
            );
        }
    }

    #[test]
    fn the_hash_is_stable_and_documented() {
        // FNV-1a 64 of "web" is 0x5ea0e11948721ef1 (any FNV tool says so),
        // so "web" is in shard 0x...f1 mod S: the worked example of docs/how-to/ha.md.
        assert_eq!(shard_of("", 16), (0xcbf2_9ce4_8422_2325u64 % 16) as u32);
        assert_eq!(
            shard_of("web", u32::MAX),
            (0x5ea0_e119_4872_1ef1u64 % u64::from(u32::MAX)) as u32
        );
        assert_eq!(shard_of("web", 8), 1);
        let spread: BTreeSet<u32> = (0..200)
            .map(|i| shard_of(&format!("pool-{i}"), 8))
            .collect();
        assert_eq!(spread.len(), 8, "200 pools reach every one of 8 shards");
    }

    #[test]
    fn three_daemons_share_eight_shards_and_a_fourth_takes_two() {
        let mut members: BTreeSet<String> = names(3).into_iter().collect();
        let mut holders = vec![None; 8];
        settle(&members, &mut holders);
        balanced(8, &members, &holders);
        let before = holders.clone();
        members.insert("d3".into());
        settle(&members, &mut holders);
        balanced(8, &members, &holders);
        let moved = before.iter().zip(&holders).filter(|(a, b)| a != b).count();
        assert_eq!(moved, 2, "{before:?} -> {holders:?}");
    }

    proptest! {
        /// From any holdings (including shards held by daemons that are
        /// gone), every shard ends held by a live member, each holding S/n
        /// or one more.
        #[test]
        fn assignments_settle_balanced_within_one(
            count in 1u32..40,
            n in 1usize..8,
            start in proptest::collection::vec(proptest::option::of(0usize..10), 40),
        ) {
            let members: BTreeSet<String> = names(n).into_iter().collect();
            // A holder that is not a live member has expired: free.
            let mut holders: Vec<Option<String>> = (0..count as usize)
                .map(|i| start[i].filter(|h| *h < n).map(|h| format!("d{h}")))
                .collect();
            settle(&members, &mut holders);
            balanced(count, &members, &holders);
        }

        /// A daemon joining takes only its share, from the others (no shard
        /// moves between the daemons already there); a daemon leaving moves
        /// only its own shards.
        #[test]
        fn moves_on_join_and_leave_are_minimal(count in 1u32..40, n in 1usize..8, leaving in 0usize..8) {
            let mut members: BTreeSet<String> = names(n).into_iter().collect();
            let mut holders = vec![None; count as usize];
            settle(&members, &mut holders);
            let before = holders.clone();
            members.insert("new".into());
            settle(&members, &mut holders);
            balanced(count, &members, &holders);
            for (a, b) in before.iter().zip(&holders) {
                prop_assert!(a == b || b.as_deref() == Some("new"), "a shard moved between old members");
            }
            let gone = format!("d{}", leaving % n);
            let before = holders.clone();
            members.remove(&gone);
            for h in holders.iter_mut() {
                if h.as_deref() == Some(gone.as_str()) {
                    *h = None;
                }
            }
            settle(&members, &mut holders);
            balanced(count, &members, &holders);
            for (a, b) in before.iter().zip(&holders) {
                prop_assert!(a == b || a.as_deref() == Some(gone.as_str()), "a shard moved that {} did not hold", gone);
            }
        }
    }
}
