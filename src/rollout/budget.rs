//! Surge / unavailable budget resolution, by the rules of the pool's
//! `rollout.semantics` (the "Rollout semantics" table of docs/explanation/rollouts.md names each rule's
//! source).

use serde::{Deserialize, Serialize};

use crate::spec::types::{Rollout, Semantics};
use crate::spec::values::IntOrPercent;

/// A resolved budget for one pool size.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Budget {
    /// Nodes allowed above the desired size.
    pub surge: u32,
    /// Nodes allowed below the desired size.
    pub unavailable: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Strategy {
    /// surge > 0, unavailable = 0: capacity never drops.
    CreateBeforeTerminate,
    /// surge = 0: no extra capacity; free a slot, then fill it.
    TerminateBeforeCreate,
    /// both > 0: both at once, within the bounds.
    CreateAndTerminate,
}

impl Strategy {
    pub fn as_str(self) -> &'static str {
        match self {
            Strategy::CreateBeforeTerminate => "create-before-terminate",
            Strategy::TerminateBeforeCreate => "terminate-before-create",
            Strategy::CreateAndTerminate => "create-and-terminate",
        }
    }
}

/// A budget as written (or its default) for a pool of `size` nodes. The
/// result never exceeds the size plus the largest count validation allows, so
/// the bounds' arithmetic cannot overflow.
pub(crate) fn resolve_one(v: IntOrPercent, size: u32, round_up: bool) -> u32 {
    match v {
        IntOrPercent::Int(n) => n.clamp(0, u32::MAX as i64) as u32,
        IntOrPercent::Percent(p) => {
            let scaled = size as u64 * p.clamp(0, 100_000) as u64;
            let q = if round_up {
                scaled.div_ceil(100)
            } else {
                scaled / 100
            };
            q.min(u32::MAX as u64) as u32
        }
    }
}

impl Budget {
    /// Percentages resolve against the desired size. Under `kubernetes`
    /// (and GKE and Yandex, which take whole numbers) surge rounds up and
    /// unavailable down; OKE and AKS round both up. Defaults: surge 1 (AKS:
    /// 10%), unavailable 0 (OKE with reimage: 1). When both come to 0,
    /// unavailable becomes 1 so the rollout can move.
    pub fn resolve(rollout: &Rollout, size: u32) -> Budget {
        let semantics = rollout.semantics();
        let unavailable_rounds_up = matches!(semantics, Semantics::Oke | Semantics::Aks);
        let surge_default = match semantics {
            Semantics::Aks => IntOrPercent::Percent(10),
            _ => IntOrPercent::Int(1),
        };
        let unavailable_default = match semantics {
            Semantics::Oke if rollout.reimage.value => IntOrPercent::Int(1),
            _ => IntOrPercent::Int(0),
        };
        let surge = resolve_one(
            rollout.surge().map_or(surge_default, |v| v.value),
            size,
            true,
        );
        let mut unavailable = resolve_one(
            rollout
                .max_unavailable
                .as_ref()
                .map_or(unavailable_default, |v| v.value),
            size,
            unavailable_rounds_up,
        );
        if surge == 0 && unavailable == 0 {
            unavailable = 1;
        }
        Budget { surge, unavailable }
    }

    pub fn strategy(self) -> Strategy {
        match (self.surge, self.unavailable) {
            (0, _) => Strategy::TerminateBeforeCreate,
            (_, 0) => Strategy::CreateBeforeTerminate,
            _ => Strategy::CreateAndTerminate,
        }
    }

    /// Nodes replaced at once.
    pub fn concurrency(self) -> u32 {
        self.surge.saturating_add(self.unavailable)
    }

    /// [size - unavailable, size + surge]
    pub fn bounds(self, size: u32) -> (u32, u32) {
        (
            size.saturating_sub(self.unavailable),
            size.saturating_add(self.surge),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::located::At;

    fn rollout(surge: Option<IntOrPercent>, unavailable: Option<IntOrPercent>) -> Rollout {
        Rollout {
            max_surge: surge.map(At::bare),
            max_unavailable: unavailable.map(At::bare),
            ..Rollout::default()
        }
    }

    #[test]
    fn percentages_round_surge_up_and_unavailable_down() {
        use IntOrPercent::*;
        let b = Budget::resolve(&rollout(Some(Percent(25)), Some(Percent(25))), 5);
        assert_eq!(
            b,
            Budget {
                surge: 2,
                unavailable: 1
            }
        );
        let b = Budget::resolve(&rollout(Some(Percent(0)), Some(Percent(10))), 5);
        assert_eq!(
            b,
            Budget {
                surge: 0,
                unavailable: 1
            },
            "both 0 makes unavailable 1"
        );
        let b = Budget::resolve(&rollout(None, None), 5);
        assert_eq!(
            b,
            Budget {
                surge: 1,
                unavailable: 0
            }
        );
        assert_eq!(b.strategy(), Strategy::CreateBeforeTerminate);
        assert_eq!(
            Budget {
                surge: 2,
                unavailable: 1
            }
            .bounds(5),
            (4, 7)
        );
    }

    fn with(semantics: Semantics, r: Rollout) -> Rollout {
        Rollout {
            semantics: Some(At::bare(semantics)),
            ..r
        }
    }

    /// One row per rule of the "Rollout semantics" table (docs/explanation/rollouts.md).
    #[test]
    fn each_services_rounding_and_defaults() {
        use IntOrPercent::*;
        let b = |s, surge, unavailable, size| {
            Budget::resolve(&with(s, rollout(surge, unavailable)), size)
        };
        let budget = |surge, unavailable| Budget { surge, unavailable };
        // A 10-node pool, 25%: 2.5 nodes.
        let pct = Some(Percent(25));
        assert_eq!(b(Semantics::Kubernetes, pct, pct, 10), budget(3, 2));
        assert_eq!(
            b(Semantics::Oke, pct, pct, 10),
            budget(3, 3),
            "OKE rounds unavailable up"
        );
        assert_eq!(
            b(Semantics::Aks, pct, pct, 10),
            budget(3, 3),
            "AKS rounds both up"
        );
        // Defaults.
        assert_eq!(b(Semantics::Kubernetes, None, None, 10), budget(1, 0));
        assert_eq!(
            b(Semantics::Oke, None, Some(Int(2)), 10),
            budget(1, 2),
            "only maxUnavailable: surge 1"
        );
        assert_eq!(
            b(Semantics::Aks, None, None, 10),
            budget(1, 0),
            "AKS surges 10%, rounded up"
        );
        assert_eq!(b(Semantics::Aks, None, None, 25), budget(3, 0));
        assert_eq!(b(Semantics::Gke, None, None, 10), budget(1, 0));
        // OKE with boot-volume replacement: unavailable defaults to 1.
        let oke_reimage = Rollout {
            reimage: At::bare(true),
            max_surge: Some(At::bare(Int(0))),
            ..with(Semantics::Oke, Rollout::default())
        };
        assert_eq!(Budget::resolve(&oke_reimage, 10), budget(0, 1));
        // Yandex names surge maxExpansion.
        let yandex = Rollout {
            max_expansion: Some(At::bare(Int(3))),
            ..with(Semantics::Yandex, Rollout::default())
        };
        assert_eq!(Budget::resolve(&yandex, 10), budget(3, 0));
    }

    #[test]
    fn extreme_numbers_never_overflow() {
        use IntOrPercent::*;
        for v in [Int(i64::MAX), Percent(i64::MAX), Int(u32::MAX as i64)] {
            let b = Budget::resolve(&rollout(Some(v), Some(v)), u32::MAX);
            let (lo, hi) = b.bounds(u32::MAX);
            assert!(lo <= hi);
            let _ = b.concurrency();
        }
    }

    proptest::proptest! {
        /// Every semantics rounds a percentage the way its table row says
        /// (exact integer arithmetic against the real quotient), and never
        /// resolves to a budget that cannot move.
        #[test]
        fn percentages_round_as_each_semantics_documents(
            size in 0u32..5000,
            surge in 0i64..=100,
            unavailable in 0i64..=100,
            which in 0usize..5,
        ) {
            let semantics = [Semantics::Kubernetes, Semantics::Oke, Semantics::Aks, Semantics::Gke, Semantics::Yandex][which];
            let r = with(semantics, rollout(Some(IntOrPercent::Percent(surge)), Some(IntOrPercent::Percent(unavailable))));
            let b = Budget::resolve(&r, size);
            let exact = |p: i64| (size as u64 * p as u64, 100u64);
            let (s_num, d) = exact(surge);
            proptest::prop_assert_eq!(b.surge as u64, s_num.div_ceil(d), "surge rounds up");
            let (u_num, d) = exact(unavailable);
            let up = matches!(semantics, Semantics::Oke | Semantics::Aks);
            let u = if up { u_num.div_ceil(d) } else { u_num / d };
            let u = if b.surge == 0 && u == 0 { 1 } else { u };
            proptest::prop_assert_eq!(b.unavailable as u64, u);
            proptest::prop_assert!(b.concurrency() >= 1);
        }
    }
}
