//! Which pools each `FleetRollout` governs, and in which of its stages each
//! rolls. Part of validating the desired state: a pool governed twice, two
//! stages claiming one pool, or a stage left empty are errors of the files.
//!
//! The rule, in order:
//! 1. A FleetRollout governs the pools whose `metadata.labels` match its
//!    selector (every pool without one).
//! 2. Each stage's selector claims the governed pools it matches.
//! 3. Stage by stage, a stage with a cumulative share (`pools: 25%`, rounded
//!    up; or a count) takes further unclaimed pools until the stages so far
//!    hold that share, in the order of FNV-1a (64 bits) of the pool names,
//!    ties by name. The order spreads a share over providers and accounts,
//!    and a pool added or removed moves no other pool's place in it.
//! 4. The last stage takes every governed pool left.
//!
//! Within a stage, pools are admitted in that same order.

use std::collections::{BTreeMap, HashMap};

use super::types::Selector;
use super::values::IntOrPercent;

/// FNV-1a, 64 bits, of a pool's name: the order further pools are taken in.
fn order_key(pool: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in pool.as_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// One stage's rule, as written.
#[derive(Clone, Copy, Debug)]
pub struct StageRule<'a> {
    pub selector: Option<&'a Selector>,
    pub share: Option<IntOrPercent>,
}

/// Why an assignment is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Problem {
    /// Two stages' selectors match the same pool (the pool stays in `first`).
    Overlap {
        pool: String,
        first: usize,
        second: usize,
    },
    /// A stage holds no pool.
    Empty { stage: usize, why: String },
}

/// A share resolved against `governed` pools: a count as written (at most
/// every pool), or a percentage rounded up.
fn resolve_share(share: IntOrPercent, governed: usize) -> usize {
    match share {
        IntOrPercent::Int(n) => (n.max(0) as usize).min(governed),
        IntOrPercent::Percent(p) => {
            let p = p.clamp(0, 100) as usize;
            (p * governed).div_ceil(100)
        }
    }
}

/// Assign `governed` pools (name, labels) to `stages`: each stage's pools,
/// in admission order, and every problem found. Deterministic: the same
/// pools and rules give the same stages, whatever order the pools come in.
pub fn assign(
    governed: &[(&str, &BTreeMap<String, String>)],
    stages: &[StageRule],
) -> (Vec<Vec<String>>, Vec<Problem>) {
    let mut problems = Vec::new();
    let n = governed.len();
    let mut out: Vec<Vec<String>> = vec![Vec::new(); stages.len()];
    if stages.is_empty() {
        return (out, problems);
    }
    let mut order: Vec<&(&str, &BTreeMap<String, String>)> = governed.iter().collect();
    order.sort_by_key(|(name, _)| (order_key(name), *name));
    order.dedup_by_key(|(name, _)| *name);
    let last = stages.len() - 1;
    // Selectors first: a pool a later stage claims is never taken by an
    // earlier stage's share.
    let mut claimed: HashMap<&str, usize> = HashMap::new();
    for (i, rule) in stages.iter().enumerate() {
        let Some(selector) = rule.selector else {
            continue;
        };
        for (name, labels) in &order {
            if !selector.matches(labels) {
                continue;
            }
            match claimed.get(name) {
                Some(&first) => problems.push(Problem::Overlap {
                    pool: name.to_string(),
                    first,
                    second: i,
                }),
                None => {
                    claimed.insert(name, i);
                }
            }
        }
    }
    for (name, _) in &order {
        if let Some(&i) = claimed.get(name) {
            out[i].push(name.to_string());
        }
    }
    let mut unclaimed = order
        .iter()
        .map(|(name, _)| *name)
        .filter(|name| !claimed.contains_key(name));
    let mut so_far = 0;
    for (i, rule) in stages.iter().enumerate() {
        if i == last {
            out[i].extend(unclaimed.by_ref().map(str::to_string));
            break;
        }
        so_far += out[i].len();
        if let Some(share) = rule.share {
            let target = resolve_share(share, n);
            while so_far < target {
                let Some(name) = unclaimed.next() else { break };
                out[i].push(name.to_string());
                so_far += 1;
            }
        }
    }
    // Within a stage, the admission order (selected and taken pools mixed).
    for pools in &mut out {
        pools.sort_by_key(|p| (order_key(p), p.clone()));
    }
    if n > 0 {
        let mut before = 0;
        for (i, rule) in stages.iter().enumerate() {
            if out[i].is_empty() {
                let why = match (rule.selector, rule.share) {
                    _ if i == last => {
                        "the stages before it already hold every governed pool".to_string()
                    }
                    (Some(_), None) => {
                        "its selector matches no governed pool that another stage has not".into()
                    }
                    (_, Some(share)) => format!(
                        "its cumulative share {share} is {} of {n} governed pool(s), which the stages before it already hold ({before})",
                        resolve_share(share, n)
                    ),
                    (None, None) => {
                        "it has neither a selector nor a share (pools), and it is not the last stage"
                            .into()
                    }
                };
                problems.push(Problem::Empty { stage: i, why });
            }
            before += out[i].len();
        }
    }
    (out, problems)
}

/// The stage assignment of every FleetRollout of a valid desired state.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Staging {
    /// Each FleetRollout's stages, by name.
    pub fleets: BTreeMap<String, FleetStages>,
    /// The FleetRollout and stage index of each governed pool.
    pub of_pool: BTreeMap<String, (String, usize)>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FleetStages {
    /// Each stage's name and pools, in admission order.
    pub stages: Vec<(String, Vec<String>)>,
}

impl FleetStages {
    pub fn governed(&self) -> usize {
        self.stages.iter().map(|(_, p)| p.len()).sum()
    }

    pub fn index_of(&self, stage: &str) -> Option<usize> {
        self.stages.iter().position(|(name, _)| name == stage)
    }
}

impl Staging {
    /// The FleetRollout governing `pool` and its stage, if one does.
    pub fn of(&self, pool: &str) -> Option<(&str, usize)> {
        self.of_pool.get(pool).map(|(f, i)| (f.as_str(), *i))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn selector(k: &str, v: &str) -> Selector {
        Selector {
            match_labels: labels(&[(k, v)]),
        }
    }

    #[test]
    fn canary_by_label_then_a_share_then_the_rest() {
        let canary = labels(&[("ring", "canary")]);
        let none = labels(&[]);
        let names: Vec<String> = (0..40).map(|i| format!("pool-{i:02}")).collect();
        let mut pools: Vec<(&str, &BTreeMap<String, String>)> =
            names.iter().map(|n| (n.as_str(), &none)).collect();
        pools[7].1 = &canary;
        let sel = selector("ring", "canary");
        let rules = [
            StageRule {
                selector: Some(&sel),
                share: None,
            },
            StageRule {
                selector: None,
                share: Some(IntOrPercent::Percent(25)),
            },
            StageRule {
                selector: None,
                share: None,
            },
        ];
        let (stages, problems) = assign(&pools, &rules);
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(stages[0], ["pool-07"]);
        assert_eq!(stages[1].len(), 9, "25% of 40 is 10 with the canary");
        assert_eq!(stages[2].len(), 30);
    }

    #[test]
    fn overlaps_and_empty_stages_are_problems() {
        let both = labels(&[("a", "1"), ("b", "1")]);
        let pools = [("p1", &both), ("p2", &both)];
        let (sa, sb) = (selector("a", "1"), selector("b", "1"));
        let rules = [
            StageRule {
                selector: Some(&sa),
                share: None,
            },
            StageRule {
                selector: Some(&sb),
                share: None,
            },
            StageRule {
                selector: None,
                share: None,
            },
        ];
        let (_, problems) = assign(&pools, &rules);
        assert!(problems.contains(&Problem::Overlap {
            pool: "p1".into(),
            first: 0,
            second: 1
        }));
        assert!(
            problems
                .iter()
                .any(|p| matches!(p, Problem::Empty { stage: 1, .. }))
        );
        assert!(
            problems
                .iter()
                .any(|p| matches!(p, Problem::Empty { stage: 2, .. }))
        );
    }

    fn rule_strategy() -> impl Strategy<Value = (Option<u8>, Option<(bool, u8)>)> {
        (
            proptest::option::of(0u8..4),
            proptest::option::of((any::<bool>(), 0u8..=100)),
        )
    }

    proptest! {
        /// Deterministic whatever the order the pools come in; every governed
        /// pool in exactly one stage; after each stage with a share, the
        /// stages so far hold at least that share, and no more than it plus
        /// what selectors claimed.
        #[test]
        fn every_pool_in_exactly_one_stage_and_shares_honoured(
            pool_labels in proptest::collection::vec(0u8..4, 0..60),
            rules in proptest::collection::vec(rule_strategy(), 1..5),
            seed in any::<u64>(),
        ) {
            let names: Vec<String> = (0..pool_labels.len()).map(|i| format!("p{i}")).collect();
            let label_sets: Vec<BTreeMap<String, String>> = pool_labels
                .iter()
                .map(|l| labels(&[("ring", &l.to_string())]))
                .collect();
            let selectors: Vec<Selector> = (0..4).map(|i| selector("ring", &i.to_string())).collect();
            let stage_rules: Vec<StageRule> = rules
                .iter()
                .map(|(sel, share)| StageRule {
                    selector: sel.map(|i| &selectors[i as usize]),
                    share: share.map(|(pct, n)| if pct {
                        IntOrPercent::Percent(i64::from(n))
                    } else {
                        IntOrPercent::Int(i64::from(n))
                    }),
                })
                .collect();
            let pools: Vec<(&str, &BTreeMap<String, String>)> = names
                .iter()
                .zip(&label_sets)
                .map(|(n, l)| (n.as_str(), l))
                .collect();
            let (stages, problems) = assign(&pools, &stage_rules);
            // Deterministic under any order of the input.
            let mut shuffled = pools.clone();
            let mut s = seed;
            for i in (1..shuffled.len()).rev() {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                shuffled.swap(i, (s >> 33) as usize % (i + 1));
            }
            let (again, again_problems) = assign(&shuffled, &stage_rules);
            prop_assert_eq!(&stages, &again);
            prop_assert_eq!(problems.len(), again_problems.len());
            // Every pool once.
            let mut seen: Vec<&String> = stages.iter().flatten().collect();
            seen.sort();
            let mut all: Vec<&String> = names.iter().collect();
            all.sort();
            prop_assert_eq!(seen, all);
            // Shares: after stage i (not the last), at least the share.
            let n = names.len();
            let mut so_far = 0;
            for (i, rule) in stage_rules.iter().enumerate() {
                so_far += stages[i].len();
                if i + 1 == stage_rules.len() {
                    break;
                }
                if let Some(share) = rule.share {
                    let want = resolve_share(share, n);
                    // Short only when every pool left is claimed by a later selector.
                    let claimed_later: usize = stages[i + 1..]
                        .iter()
                        .zip(&stage_rules[i + 1..])
                        .filter(|(_, r)| r.selector.is_some())
                        .map(|(p, _)| p.len())
                        .sum();
                    prop_assert!(
                        so_far >= want || so_far + claimed_later >= n,
                        "stage {i}: {so_far} pools so far, share {share} is {want} of {n}"
                    );
                }
            }
            // A problem is reported for each empty stage when there are pools.
            for (i, pools) in stages.iter().enumerate() {
                if pools.is_empty() && n > 0 {
                    let reported = problems.iter().any(|p| matches!(p, Problem::Empty { stage, .. } if *stage == i));
                    prop_assert!(reported, "stage {i} empty and not reported");
                }
            }
        }
    }
}
