//! Properties of planning over random fleets: the plan is a deterministic
//! function of its inputs, and applying it to the simulator converges.

use crate::support::world as common;

use std::collections::BTreeMap;

use common::{PROVIDER, World};
use poolwright::plan::{Headline, Step};
use proptest::prelude::*;

#[derive(Clone, Debug)]
struct PoolGen {
    size: u32,
    autoscaling: Option<(u32, u32)>,
    labels: BTreeMap<String, String>,
    tags: BTreeMap<String, String>,
    ignore_size: bool,
    protected: bool,
    /// The node image's number: a change replaces nodes (a roll).
    image: u8,
}

fn pool_gen() -> impl Strategy<Value = PoolGen> {
    (
        0u32..8,
        proptest::option::of((0u32..3, 3u32..10)),
        proptest::collection::btree_map("[a-c]", "[x-z]{1,2}", 0..3),
        proptest::collection::btree_map("[a-c]", "[0-9]{1,2}", 0..2),
        any::<bool>(),
        proptest::bool::weighted(0.2),
        1u8..3,
    )
        .prop_map(
            |(size, autoscaling, labels, tags, ignore_size, protected, image)| PoolGen {
                size: autoscaling.map_or(size, |(lo, hi)| size.clamp(lo, hi)),
                autoscaling,
                labels,
                tags,
                ignore_size,
                protected,
                image,
            },
        )
}

fn fleet_gen() -> impl Strategy<Value = BTreeMap<String, PoolGen>> {
    proptest::collection::btree_map("p[0-7]", pool_gen(), 0..5)
}

fn yaml(name: &str, p: &PoolGen) -> String {
    let map = |m: &BTreeMap<String, String>| {
        let items: Vec<String> = m.iter().map(|(k, v)| format!("{k}: \"{v}\"")).collect();
        format!("{{{}}}", items.join(", "))
    };
    let mut s = format!(
        "apiVersion: poolwright/v1\nkind: NodePool\nmetadata: {{name: {name}}}\nspec:\n  providerRef: sim\n  size: {}\n  template: {{image: img-{}, labels: {}, tags: {}}}\n",
        p.size,
        p.image,
        map(&p.labels),
        map(&p.tags)
    );
    if let Some((lo, hi)) = p.autoscaling {
        s.push_str(&format!("  autoscaling: {{min: {lo}, max: {hi}}}\n"));
    }
    s.push_str(&format!(
        "  lifecycle: {{preventDestroy: {}, ignoreChanges: [{}]}}\n",
        p.protected,
        if p.ignore_size { "size" } else { "" }
    ));
    s
}

fn write_fleet(w: &World, fleet: &BTreeMap<String, PoolGen>) {
    for entry in std::fs::read_dir(w.dir.path()).unwrap() {
        std::fs::remove_file(entry.unwrap().path()).unwrap();
    }
    w.write("providers.yaml", PROVIDER);
    for (name, p) in fleet {
        w.write(&format!("{name}.yaml"), &yaml(name, p));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn planning_is_deterministic(first in fleet_gen(), second in fleet_gen(), prune in any::<bool>()) {
        let mut w = World::new();
        w.prune = prune;
        write_fleet(&w, &first);
        prop_assert!(w.apply().is_ok());
        write_fleet(&w, &second);
        let a = w.plan();
        let b = w.plan();
        prop_assert_eq!(&a, &b);
        prop_assert_eq!(w.text(&a), w.text(&b));
        // A roll carries the template and the size itself: a separate
        // template or scale step beside it would act outside the executor.
        for p in &a.pools {
            if p.steps.iter().any(|s| matches!(s, Step::Roll { .. })) {
                prop_assert!(
                    !p.steps.iter().any(|s| matches!(s, Step::SetTemplate { .. } | Step::Scale { .. })),
                    "pool {}: {:?}", p.pool, p.steps
                );
            }
        }
    }

    #[test]
    fn applying_a_plan_converges(first in fleet_gen(), second in fleet_gen(), prune in any::<bool>()) {
        // One image: a roll waits out real health times, which this property
        // does not need (the rollout properties cover rolls).
        let one_image = |f: &BTreeMap<String, PoolGen>| -> BTreeMap<String, PoolGen> {
            f.iter().map(|(k, p)| (k.clone(), PoolGen { image: 1, ..p.clone() })).collect()
        };
        let (first, second) = (one_image(&first), one_image(&second));
        let mut w = World::new();
        w.prune = prune;
        for fleet in [&first, &second] {
            write_fleet(&w, fleet);
            let outcome = w.apply();
            prop_assert!(outcome.is_ok(), "{:?}", outcome.errors);
            let again = w.plan();
            prop_assert!(!again.has_changes(), "second plan not empty:\n{}", w.text(&again));
        }
        // What the files say is what the provider holds.
        let config = w.config();
        let observed = w.observed(&config);
        for (name, p) in &second {
            let o = &observed.pools[name];
            if p.autoscaling.is_none() && !p.ignore_size {
                prop_assert_eq!(o.size, p.size);
            }
            prop_assert_eq!(&o.in_place.labels, &p.labels);
        }
        // Pools only in the first fleet are gone exactly when pruning was on and
        // they were not protected.
        for (name, p) in first.iter().filter(|(n, _)| !second.contains_key(*n)) {
            let kept = observed.pools.contains_key(name) || {
                let plan = w.plan();
                plan.pools.iter().any(|pp| &pp.pool == name && pp.headline == Headline::LeftAlone)
            };
            prop_assert_eq!(kept, !prune || p.protected, "pool {}", name);
        }
        for p in w.plan().pools {
            prop_assert!(!p.steps.iter().any(|s| matches!(s, Step::DeletePool)));
        }
    }
}

/// A running rollout is superseded (and so takes new settings at its next
/// step) exactly when its planned work changes: every resolved setting a user
/// can edit mid-rollout changes the worker's key, lowering maxUnavailable
/// during an incident included; the progress of the roll itself does not.
#[test]
fn every_rollout_setting_edited_mid_rollout_changes_the_work_key() {
    let w = World::new();
    w.write("providers.yaml", PROVIDER);
    let base = "  rollout:\n    maxSurge: 1\n    maxUnavailable: 1\n";
    w.write("web.yaml", &common::pool("web", 4, "img-1", base));
    w.apply();
    let key = |extra: &str| {
        w.write("web.yaml", &common::pool("web", 4, "img-2", extra));
        let plan = w.plan();
        let p = plan.pools.iter().find(|p| p.pool == "web").unwrap();
        assert!(p.rollout.is_some(), "a roll is planned");
        poolwright::plan::work_key(p)
    };
    let before = key(base);
    assert_eq!(before, key(base), "the same desired state, the same work");
    for edited in [
        "  rollout:\n    maxSurge: 1\n    maxUnavailable: 0\n",
        "  rollout:\n    maxSurge: 4\n    maxUnavailable: 1\n",
        "  rollout:\n    maxSurge: 1\n    maxUnavailable: 1\n    drain: {timeout: 5m}\n",
        "  rollout:\n    maxSurge: 1\n    maxUnavailable: 1\n    drain: {onTimeout: force}\n",
        "  rollout:\n    maxSurge: 1\n    maxUnavailable: 1\n    health: {minReady: 2m}\n",
        "  rollout:\n    maxSurge: 1\n    maxUnavailable: 1\n    health: {startupTimeout: 20m}\n",
        "  rollout:\n    maxSurge: 1\n    maxUnavailable: 1\n    canary: true\n",
        "  rollout:\n    maxSurge: 1\n    maxUnavailable: 1\n    checkpoints: [{at: 50%, pause: 1m}]\n",
        "  rollout:\n    maxSurge: 1\n    maxUnavailable: 1\n    onFailure: rollback\n",
        "  rollout:\n    maxSurge: 1\n    maxUnavailable: 1\n    maxFailedNodes: 1\n",
        "  rollout:\n    maxSurge: 1\n    maxUnavailable: 1\n    progressDeadline: 1h\n",
        "  rollout:\n    maxSurge: 1\n    maxUnavailable: 1\n  disruption:\n    policy: Block\n",
    ] {
        assert_ne!(
            before,
            key(edited),
            "an edit that must reach the rollout:\n{edited}"
        );
    }
}
