//! Surge / unavailable budget resolution (DESIGN.md, "Rollout rules").

use serde::{Deserialize, Serialize};

use crate::spec::types::Rollout;
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

fn resolve_one(v: Option<IntOrPercent>, default: u32, size: u32, round_up: bool) -> u32 {
    match v {
        None => default,
        Some(IntOrPercent::Int(n)) => n.clamp(0, u32::MAX as i64) as u32,
        Some(IntOrPercent::Percent(p)) => {
            let scaled = size as u64 * p.max(0) as u64;
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
    /// Percentages resolve against the desired size: surge rounds up, unavailable
    /// rounds down; when both come to 0, unavailable becomes 1 so the rollout can
    /// move. Defaults: surge 1, unavailable 0.
    pub fn resolve(rollout: &Rollout, size: u32) -> Budget {
        let surge = resolve_one(rollout.max_surge.as_ref().map(|v| v.value), 1, size, true);
        let mut unavailable = resolve_one(
            rollout.max_unavailable.as_ref().map(|v| v.value),
            0,
            size,
            false,
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
        self.surge + self.unavailable
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
}
