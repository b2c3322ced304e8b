//! A halted change's roll back is built like any roll: the same settings,
//! with the planner's in-place reimage rule (Yandex `maxExpansion: 0` on a
//! provider that reimages) and `lifecycle.maxNodeAge`'s cutoff, so a roll
//! back replaces nodes the way the roll it undoes did.
//!
//! The measured case: the roll back built its own settings, so a Yandex
//! pool that rolled forward by reimaging in place rolled back by terminating
//! nodes, and a pool with nodes past maxNodeAge lost its cutoff.

use std::collections::BTreeMap;
use std::sync::Arc;

use jiff::SignedDuration;
use poolwright::clock::Clock;
use poolwright::fleet::{Change, ChangeStatus, FleetView, PoolRecord, Rules};
use poolwright::model::OpKey;
use poolwright::plan::{self, Step};
use poolwright::rollout::Settings;

use crate::support::world::{PROVIDER, World, block_on, pool};

const RINGS: &str = "apiVersion: poolwright/v1\nkind: FleetRollout\nmetadata: {name: rings}\nspec:\n  stages:\n    - {name: all}\n  halt: {failedPools: 1, onHalt: rollback}\n";

/// How far the change to img-2 got before it halted.
enum Got {
    /// Every node rolled to img-2.
    Rolled,
    /// Only the template was set: the nodes are still on img-1.
    TemplateSet,
}

/// `web` applied on img-1 with `extra`; the change to img-2 got as far as
/// `got`; the plan made `days` later with the FleetRollout's change halted
/// after `web` was admitted: the settings of the roll back to img-1.
fn roll_back_settings(extra: &str, got: Got, days: i64) -> Box<Settings> {
    let w = World::new();
    w.write("providers.yaml", PROVIDER);
    w.write("rings.yaml", RINGS);
    w.write("web.yaml", &pool("web", 3, "img-1", extra));
    let done = w.apply();
    assert!(done.errors.is_empty(), "{:?}", done.errors);
    let before = w.observed(&w.config()).pools["web"].template.clone();
    w.write("web.yaml", &pool("web", 3, "img-2", extra));
    match got {
        Got::Rolled => {
            let done = w.apply();
            assert!(done.errors.is_empty(), "{:?}", done.errors);
        }
        Got::TemplateSet => {
            let config = w.config();
            let providers = w.providers(&config);
            let mut to = before.clone();
            to.image = Some("img-2".into());
            block_on(providers.get("sim").unwrap().set_template(
                "web",
                &to,
                &OpKey::derive(&["test"]),
            ))
            .unwrap();
        }
    }
    w.clock.advance(SignedDuration::from_hours(days * 24));

    let config = w.config();
    let mut observed = w.observed(&config);
    let now = w.clock.now();
    let rules = poolwright::fleet::view::rules(&config)["rings"].clone();
    let targets = poolwright::fleet::view::targets(&config, "rings");
    let mut change = Change::new("main@bad".into(), targets, now);
    change.templates.insert(before.hash(), before.clone());
    change.pools.insert(
        "web".into(),
        PoolRecord::Rolling {
            since: now,
            from: before.hash(),
        },
    );
    change.status = ChangeStatus::Halted {
        reason: "1 pool(s) failed: web".into(),
        pools: vec!["web".into()],
        at: now,
    };
    observed.fleets = BTreeMap::from([(
        "rings".to_string(),
        FleetView {
            rules: Arc::<Rules>::clone(&rules),
            change: Arc::new(change),
            new: false,
        },
    )]);
    let plan = plan::plan(&config, &observed, &w.inventory(), &w.options());
    let text = w.text(&plan);
    let web = &plan.pools[0];
    assert!(web.fleet.as_ref().is_some_and(|f| f.rollback), "{text}");
    web.steps
        .iter()
        .find_map(|s| match s {
            Step::Roll {
                settings,
                rollback: Some(_),
                template,
                ..
            } => {
                assert_eq!(template.hash(), before.hash(), "{text}");
                Some(settings.clone())
            }
            _ => None,
        })
        .unwrap_or_else(|| panic!("a roll back: {text}"))
}

#[test]
fn rolling_back_a_yandex_pool_without_expansion_reimages_in_place_like_its_roll() {
    let settings = roll_back_settings(
        "  rollout: {semantics: yandex, maxExpansion: 0, maxUnavailable: 1}\n",
        Got::Rolled,
        0,
    );
    assert!(
        settings.reimage,
        "the roll forward reimages in place, and so does the roll back: {settings:#?}"
    );
}

#[test]
fn rolling_back_a_pool_with_nodes_past_max_node_age_keeps_the_cutoff() {
    // Its nodes are still on img-1, past maxNodeAge: the roll back replaces
    // them as the planner's roll would, by their age.
    let settings = roll_back_settings(
        "  lifecycle: {maxNodeAge: 30d}\n  rollout: {maxSurge: 1, maxUnavailable: 0}\n",
        Got::TemplateSet,
        31,
    );
    assert!(
        settings.retire_before.is_some(),
        "nodes past maxNodeAge are due in the roll back too: {settings:#?}"
    );
}
