//! What the planner knows of each FleetRollout: its rules, and its change
//! (the journaled one brought up to date with the desired state planned, or
//! the change that desired state would begin).

use std::collections::BTreeMap;
use std::sync::Arc;

use jiff::Timestamp;

use super::change::{Change, FleetState};
use super::decide::{Inputs, PoolFact, decide_change};
use super::rules::Rules;
use crate::model::{PoolSpec, TemplateHash};
use crate::spec::Config;

#[derive(Clone, Debug, PartialEq)]
pub struct FleetView {
    pub rules: Arc<Rules>,
    pub change: Arc<Change>,
    /// Not journaled yet: applying this desired state begins it.
    pub new: bool,
}

/// Each pool `fleet` governs, and the template its document asks for.
pub fn targets(config: &Config, fleet: &str) -> BTreeMap<String, TemplateHash> {
    config
        .staging
        .fleets
        .get(fleet)
        .into_iter()
        .flat_map(|s| s.stages.iter().flat_map(|(_, pools)| pools))
        .filter_map(|pool| {
            let e = config.pools.get(pool)?;
            Some((pool.clone(), PoolSpec::from_doc(&e.doc).template.hash()))
        })
        .collect()
}

/// Each FleetRollout's rules, resolved once per desired state.
pub fn rules(config: &Config) -> BTreeMap<String, Arc<Rules>> {
    config
        .fleets
        .iter()
        .map(|(name, e)| {
            let stages = config.staging.fleets.get(name).cloned().unwrap_or_default();
            (name.clone(), Arc::new(Rules::of(&e.doc, &stages)))
        })
        .collect()
}

/// The views a plan of `config` is made with, from the fleets' journals:
/// a journaled change whose pools want the same templates is the change in
/// force; otherwise this desired state begins change `id` (and its first
/// stage opens, if its gates allow, as it would when applied).
pub fn views(
    config: &Config,
    journals: &BTreeMap<String, FleetState>,
    id: &dyn Fn(&BTreeMap<String, TemplateHash>) -> String,
    now: Timestamp,
) -> BTreeMap<String, FleetView> {
    rules(config)
        .into_iter()
        .map(|(name, rules)| {
            let targets = targets(config, &name);
            let (state, new) = FleetState::after_load(
                journals.get(&name).cloned(),
                &name,
                id(&targets),
                targets,
                now,
            );
            let change = if new {
                decide_change(
                    &state.change,
                    &Inputs {
                        now,
                        rules: &rules,
                        facts: &|_| PoolFact::Rolls,
                    },
                )
                .change
            } else {
                state.change
            };
            (
                name,
                FleetView {
                    rules,
                    change: Arc::new(change),
                    new,
                },
            )
        })
        .collect()
}
