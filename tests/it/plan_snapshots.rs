//! What reviewers read: the plan text for every kind of action, pinned with insta.

use crate::support::world as common;

use common::{PROVIDER, World, block_on, pool};
use poolwright::clock::Clock;
use poolwright::model::OpKey;
use poolwright::provider::Provider;
use poolwright::provider::sim::Sim;
use poolwright::spec::types::SimProvider;

fn world_with_web(extra: &str) -> World {
    let w = World::new();
    w.write("providers.yaml", PROVIDER);
    w.write("web.yaml", &pool("web", 3, "img-1", extra));
    w
}

#[test]
fn create() {
    let w = World::new();
    w.write("providers.yaml", PROVIDER);
    w.write(
        "web.yaml",
        &pool("web", 3, "img-1", "").replace(
            "instanceType: m7i.large}",
            "instanceType: m7i.large, labels: {team: web}, tags: {cost-center: \"42\"}}",
        ),
    );
    w.write(
        "batch.yaml",
        &pool("batch", 2, "img-1", "  autoscaling: {min: 1, max: 5}\n"),
    );
    insta::assert_snapshot!(w.text(&w.plan()));
}

#[test]
fn no_changes_after_apply() {
    let w = world_with_web("");
    assert!(w.apply().is_ok());
    insta::assert_snapshot!(w.text(&w.plan()));
}

#[test]
fn update_in_place_and_scale() {
    let w = world_with_web("");
    assert!(w.apply().is_ok());
    w.write(
        "web.yaml",
        &pool("web", 5, "img-1", "  template:\n    image: img-1\n    instanceType: m7i.large\n    labels: {team: web}\n    tags: {owner: sre}\n").replace("  template: {image: img-1, instanceType: m7i.large}\n", ""),
    );
    insta::assert_snapshot!(w.text(&w.plan()));
}

#[test]
fn roll_create_before_terminate() {
    let w = world_with_web("  rollout: {maxSurge: 2, maxUnavailable: 0}\n");
    assert!(w.apply().is_ok());
    w.write(
        "web.yaml",
        &pool(
            "web",
            3,
            "img-2",
            "  rollout: {maxSurge: 2, maxUnavailable: 0}\n",
        ),
    );
    insta::assert_snapshot!(w.text(&w.plan()));
}

#[test]
fn roll_terminate_before_create() {
    let w = world_with_web("  rollout: {maxSurge: 0, maxUnavailable: 1}\n");
    assert!(w.apply().is_ok());
    w.write(
        "web.yaml",
        &pool(
            "web",
            3,
            "img-2",
            "  rollout: {maxSurge: 0, maxUnavailable: 1}\n",
        ),
    );
    insta::assert_snapshot!(w.text(&w.plan()));
}

#[test]
fn roll_blocked_by_a_freeze() {
    let w = world_with_web("  disruption: {policy: Block}\n");
    assert!(w.apply().is_ok());
    w.write(
        "web.yaml",
        &pool("web", 3, "img-2", "  disruption: {policy: Block}\n"),
    );
    insta::assert_snapshot!(w.text(&w.plan()));
}

#[test]
fn roll_blocked_outside_the_maintenance_window() {
    let window = "  disruption:\n    policy: AllowDuringMaintenanceWindow\n    windows: [{days: [Sat, Sun], start: \"02:00\", duration: 4h, timezone: Europe/Berlin}]\n";
    let w = world_with_web(window);
    assert!(w.apply().is_ok());
    w.write("web.yaml", &pool("web", 2, "img-2", window));
    // Wednesday noon UTC: blocked until Saturday 02:00 Berlin; the scale-down waits too.
    insta::assert_snapshot!(w.text(&w.plan()));
}

#[test]
fn delete_with_prune_and_left_alone_without() {
    let mut w = world_with_web("");
    w.write("old.yaml", &pool("old", 2, "img-1", ""));
    assert!(w.apply().is_ok());
    w.remove("old.yaml");
    let without = w.text(&w.plan());
    w.prune = true;
    let with = w.text(&w.plan());
    insta::assert_snapshot!(format!(
        "--- without --prune\n{without}\n--- with --prune\n{with}"
    ));
}

#[test]
fn protected_and_foreign_pools_are_left_alone() {
    let mut w = world_with_web("  lifecycle: {preventDestroy: true}\n");
    assert!(w.apply().is_ok());
    // A pool that exists at the provider but that poolwright did not create.
    let config = w.config();
    let settings = SimProvider::default();
    let sim = Sim::open(
        "sim",
        &settings,
        Some(w.state.path()),
        w.clock.clone() as std::sync::Arc<dyn Clock>,
    )
    .unwrap();
    let spec = poolwright::model::PoolSpec::from_doc(&config.pools["web"].doc);
    block_on(sim.create_pool(
        &poolwright::model::PoolSpec {
            name: "legacy".into(),
            ..spec
        },
        &OpKey::derive(&["test"]),
    ))
    .unwrap();
    w.write("legacy.yaml", &pool("legacy", 3, "img-1", ""));
    w.remove("web.yaml");
    w.prune = true;
    insta::assert_snapshot!(w.text(&w.plan()));
}

#[test]
fn drift_is_reported_and_reverted() {
    let w = world_with_web("");
    assert!(w.apply().is_ok());
    let sim = Sim::open(
        "sim",
        &SimProvider::default(),
        Some(w.state.path()),
        w.clock.clone() as std::sync::Arc<dyn Clock>,
    )
    .unwrap();
    block_on(sim.set_size("web", 5, &OpKey::derive(&["test"]))).unwrap();
    insta::assert_snapshot!(w.text(&w.plan()));
}

#[test]
fn ignored_drift_is_reported_and_left() {
    let w = world_with_web("  lifecycle: {ignoreChanges: [size]}\n");
    assert!(w.apply().is_ok());
    let sim = Sim::open(
        "sim",
        &SimProvider::default(),
        Some(w.state.path()),
        w.clock.clone() as std::sync::Arc<dyn Clock>,
    )
    .unwrap();
    block_on(sim.set_size("web", 5, &OpKey::derive(&["test"]))).unwrap();
    insta::assert_snapshot!(w.text(&w.plan()));
}

#[test]
fn unreachable_provider_is_an_error() {
    let w = World::new();
    w.write("providers.yaml", "apiVersion: poolwright/v1\nkind: Provider\nmetadata: {name: sim}\nspec: {type: http, url: \"http://127.0.0.1:9\"}\n");
    w.write("web.yaml", &pool("web", 3, "img-1", ""));
    insta::assert_snapshot!(w.text(&w.plan()));
}
