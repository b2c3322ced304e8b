//! Planning at fleet scale: 10,000 pools x 100 nodes (1,000,000 nodes) on the
//! simulator. Reports wall time per phase and peak RSS.
//!
//!     cargo bench --bench plan_scale [-- POOLS NODES]
//!
//! One pool in ten has a new image (so the planner computes rollouts), one in
//! ten a new label, one in ten a new size.

use std::sync::Arc;
use std::time::Instant;

use poolwright::clock::{Clock, ManualClock};
use poolwright::desired_dir::load_dir;
use poolwright::model::OpKey;
use poolwright::model::PoolSpec;
use poolwright::plan::{self, PlanOptions};
use poolwright::provider::Provider;
use poolwright::provider::sim::Sim;
use poolwright::spec::Limits;
use poolwright::spec::types::SimProvider;
use poolwright::store::{AppliedState, Inventory, InventoryEntry, Origin};

fn peak_rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let pools = args.first().copied().unwrap_or(10_000);
    let nodes = args.get(1).copied().unwrap_or(100);
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();

    // Desired state: 10 files of pools.
    let dir = tempfile::tempdir().unwrap();
    let per_file = 1000;
    std::fs::write(
        dir.path().join("providers.yaml"),
        "apiVersion: poolwright/v1\nkind: Provider\nmetadata: {name: sim}\nspec: {type: sim}\n",
    )
    .unwrap();
    for f in 0..pools.div_ceil(per_file) {
        let mut text = String::new();
        for i in f * per_file..((f + 1) * per_file).min(pools) {
            let image = if i % 10 == 0 { "img-2" } else { "img-1" };
            let size = if i % 10 == 1 { nodes + 2 } else { nodes };
            let tier = if i % 10 == 2 { "edge" } else { "core" };
            text.push_str(&format!(
                "---\napiVersion: poolwright/v1\nkind: NodePool\nmetadata: {{name: pool-{i:05}}}\nspec:\n  providerRef: sim\n  size: {size}\n  template: {{image: {image}, instanceType: m7i.large, labels: {{tier: {tier}}}}}\n  rollout: {{maxSurge: \"10%\", maxUnavailable: 0}}\n"
            ));
        }
        std::fs::write(dir.path().join(format!("pools-{f:02}.yaml")), text).unwrap();
    }

    let t = Instant::now();
    let report = load_dir(dir.path(), &Limits::default());
    let config = report.config.expect("the generated config is valid");
    let load = t.elapsed();

    // The fleet as it was before these files: every pool on img-1, tier core.
    let clock = Arc::new(ManualClock::new("2026-12-01T00:00:00Z".parse().unwrap()));
    let sim = Sim::open(
        "sim",
        &SimProvider::default(),
        None,
        clock.clone() as Arc<dyn Clock>,
    )
    .unwrap();
    let mut inventory = Inventory::default();
    let t = Instant::now();
    for entry in config.pools.values() {
        let mut spec = PoolSpec::from_doc(&entry.doc);
        spec.template.image = Some("img-1".into());
        spec.size = nodes as u32;
        spec.in_place.labels.insert("tier".into(), "core".into());
        rt.block_on(sim.create_pool(&spec, &OpKey::derive(&["test"])))
            .unwrap();
        inventory.pools.insert(
            spec.name.clone(),
            InventoryEntry {
                provider: "sim".into(),
                origin: Origin::Created,
                prevent_destroy: false,
                last_applied: Some(AppliedState {
                    size: spec.size,
                    template: spec.template.hash(),
                    in_place: spec.in_place.clone(),
                    autoscaling: None,
                }),
            },
        );
    }
    let setup = t.elapsed();
    let rss_before = peak_rss_mib();

    let t = Instant::now();
    let names: Vec<String> = config.pools.keys().cloned().collect();
    let observed_pools = rt.block_on(sim.describe_pools(&names)).unwrap();
    let observed = plan::Observed {
        pools: observed_pools
            .into_iter()
            .map(|p| (p.name.clone(), p))
            .collect(),
        ..Default::default()
    };
    let observe = t.elapsed();
    let node_count: usize = observed.pools.values().map(|p| p.nodes.len()).sum();

    let t = Instant::now();
    let opts = PlanOptions {
        prune: false,
        now: clock.now(),
        override_disruption: false,
    };
    let the_plan = plan::plan(&config, &observed, &inventory, &opts);
    let planning = t.elapsed();
    let summary = the_plan.summary();

    println!("plan_scale: {pools} pools x {nodes} nodes = {node_count} nodes observed");
    println!(
        "  load + validate {} documents: {:>8.3} s",
        config.pools.len() + 1,
        load.as_secs_f64()
    );
    println!(
        "  simulator setup (not measured):  {:>8.3} s",
        setup.as_secs_f64()
    );
    println!(
        "  observe (describe all pools):    {:>8.3} s",
        observe.as_secs_f64()
    );
    println!(
        "  plan (pure planner):             {:>8.3} s",
        planning.as_secs_f64()
    );
    println!(
        "  observe + plan:                  {:>8.3} s",
        (observe + planning).as_secs_f64()
    );
    println!(
        "  peak RSS: {:.0} MiB (after setup {:.0} MiB)",
        peak_rss_mib(),
        rss_before
    );
    println!(
        "  plan: {} to change, {} to roll ({} nodes)",
        summary.change, summary.roll, summary.roll_nodes
    );
    assert_eq!(summary.roll, pools.div_ceil(10));
}
