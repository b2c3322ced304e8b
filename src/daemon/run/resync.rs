//! The periodic resync, spread over its interval: every tick queues the next
//! slice of pools in name order, so 10,000 pools are not one spike, and the
//! every pool is still looked at within `--resync`. Pure: the reconciler
//! calls it with the pools it knows and where the last slice ended.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;
use std::time::Duration;

/// A tick is never shorter than this (a small fleet is resynced a few pools
/// at a time, a large one in slices of many).
const MIN_TICK: Duration = Duration::from_secs(1);

/// How often a slice is taken, and how many pools it holds, so that `pools`
/// pools are all taken within `interval`.
pub fn pace(pools: usize, interval: Duration) -> (Duration, usize) {
    let interval = interval.max(MIN_TICK);
    let n = pools.max(1) as u128;
    let tick = Duration::from_nanos((interval.as_nanos() / n).min(u64::MAX as u128) as u64)
        .max(MIN_TICK)
        .min(interval);
    let ticks = (interval.as_nanos() / tick.as_nanos()).max(1);
    (tick, n.div_ceil(ticks) as usize)
}

/// How many distinct keys `a` and `b` hold together (a merge of the two
/// sorted key sets, without allocating).
pub fn union_len<A, B>(a: &BTreeMap<String, A>, b: &BTreeMap<String, B>) -> usize {
    let (mut x, mut y) = (a.keys().peekable(), b.keys().peekable());
    let mut n = 0;
    loop {
        match (x.peek(), y.peek()) {
            (Some(p), Some(q)) => {
                match p.cmp(q) {
                    std::cmp::Ordering::Less => {
                        x.next();
                    }
                    std::cmp::Ordering::Greater => {
                        y.next();
                    }
                    std::cmp::Ordering::Equal => {
                        x.next();
                        y.next();
                    }
                }
                n += 1;
            }
            (Some(_), None) => return n + x.count(),
            (None, _) => return n + y.count(),
        }
    }
}

/// The next `count` names after `after` among the keys of `a` and `b` (the
/// pools of the files and of the inventory), from the start once past the
/// end, and whether the slice went past the end. Costs O(count log n): the
/// fleet is never listed for a slice.
pub fn slice<A, B>(
    a: &BTreeMap<String, A>,
    b: &BTreeMap<String, B>,
    after: Option<&str>,
    count: usize,
) -> (Vec<String>, bool) {
    let from = |lower: Bound<&str>, upper: Bound<&str>, n: usize| -> Vec<String> {
        let mut names: BTreeSet<&String> = a
            .range::<str, _>((lower, upper))
            .map(|(k, _)| k)
            .take(n)
            .collect();
        names.extend(b.range::<str, _>((lower, upper)).map(|(k, _)| k).take(n));
        names.into_iter().take(n).cloned().collect()
    };
    let Some(after) = after else {
        return (from(Bound::Unbounded, Bound::Unbounded, count), false);
    };
    let mut out = from(Bound::Excluded(after), Bound::Unbounded, count);
    let wrapped = out.len() < count;
    if wrapped {
        // From the start again, up to where this slice began.
        let more = count - out.len();
        out.extend(from(Bound::Unbounded, Bound::Included(after), more));
    }
    (out, wrapped)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn ten_thousand_pools_in_five_minutes() {
        let (tick, per) = pace(10_000, Duration::from_secs(300));
        assert_eq!(tick, Duration::from_secs(1));
        assert_eq!(per, 34);
        let (tick, per) = pace(4, Duration::from_secs(300));
        assert_eq!((tick, per), (Duration::from_secs(75), 1));
    }

    #[test]
    fn slices_wrap_around() {
        // "b" in both maps (a pool of the files that is in the inventory).
        let files: BTreeMap<String, ()> = ["a", "b"].iter().map(|s| (s.to_string(), ())).collect();
        let inventory: BTreeMap<String, u8> = [("b".to_string(), 0), ("c".to_string(), 0)].into();
        let slice = |after, n| slice(&files, &inventory, after, n);
        assert_eq!(slice(None, 2), (vec!["a".into(), "b".into()], false));
        assert_eq!(slice(Some("b"), 2), (vec!["c".into(), "a".into()], true));
        // A name no longer there still places the cursor.
        assert_eq!(slice(Some("bb"), 1), (vec!["c".into()], false));
        assert_eq!(slice(Some("c"), 5).0.len(), 3);
        assert_eq!(union_len(&files, &inventory), 3);
    }

    proptest! {
        /// Slices taken at the pace cover every pool within the interval,
        /// each exactly once per cycle.
        #[test]
        fn every_pool_once_within_the_interval(pools in 1usize..5_000, secs in 1u64..3_600) {
            let interval = Duration::from_secs(secs);
            // Split between the files and the inventory, overlapping.
            let files: BTreeMap<String, ()> = (0..pools).filter(|i| i % 3 != 0).map(|i| (format!("p{i:05}"), ())).collect();
            let inventory: BTreeMap<String, ()> = (0..pools).filter(|i| i % 3 != 1).map(|i| (format!("p{i:05}"), ())).collect();
            let (tick, per) = pace(pools, interval);
            prop_assert!(tick >= MIN_TICK && tick <= interval.max(MIN_TICK));
            let ticks = (interval.max(MIN_TICK).as_nanos() / tick.as_nanos()) as usize;
            let mut seen = BTreeSet::new();
            let mut cursor: Option<String> = None;
            for _ in 0..ticks {
                let (got, _) = slice(&files, &inventory, cursor.as_deref(), per);
                if got.is_empty() { break; }
                cursor = got.last().cloned();
                for g in got {
                    if seen.len() < pools {
                        prop_assert!(seen.insert(g), "a pool twice in one cycle");
                    }
                }
            }
            prop_assert_eq!(seen.len(), pools);
        }
    }
}
