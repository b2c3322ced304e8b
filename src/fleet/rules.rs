//! A FleetRollout's settings, resolved once against its stage assignment:
//! what the decision and the verdicts read.

use std::collections::HashMap;
use std::time::Duration;

use crate::spec::staging::FleetStages;
use crate::spec::types::{FleetRolloutDoc, OnHalt};
use crate::spec::values::IntOrPercent;

/// How often a gate is evaluated when its document does not say.
const DEFAULT_GATE_INTERVAL: Duration = Duration::from_secs(15);
/// How long one gate query may take when its document does not say.
const DEFAULT_GATE_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Clone, Debug, PartialEq)]
pub struct Rules {
    pub fleet: String,
    pub stages: Vec<StageRules>,
    /// Most pools of a change rolling at once (`None`: no limit).
    pub max_concurrent_pools: Option<usize>,
    /// Failed pools that halt the change.
    pub failed_pools: usize,
    pub on_halt: OnHalt,
    pub gates: Vec<GateRules>,
    /// Each governed pool's stage.
    stage_of: HashMap<String, usize>,
    /// The rules of a recall's change, made once when first needed.
    recall: std::sync::OnceLock<Box<Rules>>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct StageRules {
    pub name: String,
    pub soak: Duration,
    /// In admission order.
    pub pools: Vec<String>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct GateRules {
    pub name: String,
    /// How long it must hold without a break.
    pub hold_for: Duration,
    pub interval: Duration,
    pub url: String,
    pub query: String,
    pub timeout: Duration,
}

impl Rules {
    pub fn of(doc: &FleetRolloutDoc, staging: &FleetStages) -> Rules {
        let spec = &doc.spec;
        let governed = staging.governed();
        let stages: Vec<StageRules> = staging
            .stages
            .iter()
            .map(|(name, pools)| StageRules {
                name: name.clone(),
                soak: spec
                    .stages
                    .iter()
                    .find(|s| s.name.as_str() == name)
                    .and_then(|s| s.soak.as_ref())
                    .map_or(Duration::ZERO, |d| d.value.as_std()),
                pools: pools.clone(),
            })
            .collect();
        let stage_of = stages
            .iter()
            .enumerate()
            .flat_map(|(i, s)| s.pools.iter().map(move |p| (p.clone(), i)))
            .collect();
        Rules {
            fleet: doc.metadata.name.value.clone(),
            max_concurrent_pools: spec.max_concurrent_pools.as_ref().map(|m| match m.value {
                IntOrPercent::Int(n) => n.max(1) as usize,
                // Of the governed pools, rounded down, at least one.
                IntOrPercent::Percent(p) => (p.clamp(0, 100) as usize * governed / 100).max(1),
            }),
            failed_pools: spec.halt.failed_pools.value.max(1) as usize,
            on_halt: spec.halt.on_halt,
            gates: spec
                .gates
                .iter()
                .map(|g| GateRules {
                    name: g.name.value.clone(),
                    hold_for: g
                        .hold_for
                        .as_ref()
                        .map_or(Duration::ZERO, |d| d.value.as_std()),
                    interval: g
                        .interval
                        .as_ref()
                        .map_or(DEFAULT_GATE_INTERVAL, |d| d.value.as_std()),
                    url: g.prometheus.url.value.clone(),
                    query: g.prometheus.query.value.clone(),
                    timeout: g
                        .prometheus
                        .timeout
                        .as_ref()
                        .map_or(DEFAULT_GATE_TIMEOUT, |d| d.value.as_std()),
                })
                .collect(),
            stages,
            stage_of,
            recall: std::sync::OnceLock::new(),
        }
    }

    /// The rules a change follows: its FleetRollout's, or for a recall
    /// (`recall IMAGE`), one stage of every pool in stage order, with no
    /// soak and no gate: a recall waits for nothing but `maxConcurrentPools`
    /// and each pool's own budget and policy.
    pub fn for_change(&self, change: &super::Change) -> &Rules {
        if change.recall.is_none() {
            return self;
        }
        self.recall.get_or_init(|| {
            let pools: Vec<String> = self.stages.iter().flat_map(|s| s.pools.clone()).collect();
            let stage_of = pools.iter().map(|p| (p.clone(), 0)).collect();
            Box::new(Rules {
                fleet: self.fleet.clone(),
                stages: vec![StageRules {
                    name: "recall".into(),
                    soak: Duration::ZERO,
                    pools,
                }],
                max_concurrent_pools: self.max_concurrent_pools,
                failed_pools: self.failed_pools,
                on_halt: self.on_halt,
                gates: Vec::new(),
                stage_of,
                recall: std::sync::OnceLock::new(),
            })
        })
    }

    /// The stage of a governed pool.
    pub fn stage_of(&self, pool: &str) -> Option<usize> {
        self.stage_of.get(pool).copied()
    }

    /// Every governed pool.
    pub fn governed(&self) -> usize {
        self.stage_of.len()
    }

    /// Rules built directly, for tests of the decision.
    #[cfg(test)]
    pub fn for_tests(
        fleet: &str,
        stages: Vec<StageRules>,
        max_concurrent_pools: Option<usize>,
        failed_pools: usize,
        on_halt: OnHalt,
        gates: Vec<GateRules>,
    ) -> Rules {
        let stage_of = stages
            .iter()
            .enumerate()
            .flat_map(|(i, s)| s.pools.iter().map(move |p| (p.clone(), i)))
            .collect();
        Rules {
            fleet: fleet.into(),
            stages,
            max_concurrent_pools,
            failed_pools,
            on_halt,
            gates,
            stage_of,
            recall: std::sync::OnceLock::new(),
        }
    }
}
