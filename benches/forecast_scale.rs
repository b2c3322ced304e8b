//! How long a forecast takes: RUNS seeded runs of the rollout executor on a
//! simulated copy of a pool of NODES healthy nodes, all outdated, at the
//! default budget (surge 1, unavailable 0) and at surge 10 (the scale the
//! issue's figure is for), on this machine's cores (at most two threads).
//!
//!     cargo bench --bench forecast_scale [-- NODES RUNS]
//!
//! Besides the time it prints each forecast's figures (p10/p50/p90
//! duration, lowest availability, most nodes, extra node-hours) and the looks
//! one run makes: a change that only makes forecasts faster must leave the
//! figures exactly as they were.

use std::time::Instant;

use poolwright::model::{Node, NodeState, NodeTemplate, ObservedPool, TemplateHash};
use poolwright::reconcile::forecast::{Case, Latencies, forecast, run_once};
use poolwright::rollout::{Budget, Settings};
use poolwright::spec::types::{Disruption, OnDrainTimeout, OnFailure};
use poolwright::spec::values::Duration;

fn template(image: &str) -> NodeTemplate {
    NodeTemplate {
        image: Some(image.into()),
        ..NodeTemplate::default()
    }
}

fn settings(size: u32, surge: u32, unavailable: u32) -> Settings {
    Settings {
        size,
        budget: Budget { surge, unavailable },
        min_ready: Duration::secs(10),
        startup_timeout: Duration::secs(600),
        drain_timeout: Duration::secs(600),
        on_drain_timeout: OnDrainTimeout::Fail,
        max_blocked_nodes: None,
        retire_before: None,
        on_failure: OnFailure::Pause,
        max_failed_nodes: 3,
        canary: false,
        reimage: false,
        checkpoints: Vec::new(),
        progress_deadline: None,
        count_terminating: false,
        waves: false,
        semantics: Default::default(),
        disruption: Disruption::default(),
        order: Default::default(),
    }
}

fn pool(nodes: u32, old: TemplateHash, start: jiff::Timestamp) -> ObservedPool {
    ObservedPool {
        name: "big".into(),
        size: nodes,
        autoscaling: None,
        template: template("img-1"),
        in_place: Default::default(),
        nodes: (0..nodes)
            .map(|i| Node {
                id: format!("big-{i:05}").into(),
                template: old,
                state: NodeState::Healthy,
                launched_at: start,
                healthy_since: Some(start),
                cordoned: false,
                provider_id: None,
                zone: None,
                labels: Default::default(),
            })
            .collect(),
    }
}

fn main() {
    let args: Vec<u32> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let nodes = args.first().copied().unwrap_or(1000);
    let runs = args.get(1).copied().unwrap_or(200);
    let start: jiff::Timestamp = "2026-12-02T12:00:00Z".parse().unwrap();
    let observed = pool(nodes, template("img-1").hash(), start);
    let target = template("img-2");
    let latencies = Latencies::choose(None, Some(&Default::default()));
    println!("forecast of {nodes} nodes x {runs} runs (simulator default latencies)");
    println!(
        "| surge | unavailable | p50 duration | wall time | per run | looks per run | per look |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|");
    let mut figures = Vec::new();
    for (surge, unavailable) in [(1, 0), (10, 0), (50, 0)] {
        let s = settings(nodes, surge, unavailable);
        let case = Case {
            pool: &observed,
            target: &target,
            settings: &s,
            poll: std::time::Duration::from_secs(1),
        };
        let t = Instant::now();
        let f = forecast(&case, &latencies, runs, 1, start).unwrap();
        let wall = t.elapsed();
        let looks = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(run_once(&case, &latencies.sim, 1, start))
            .unwrap()
            .looks;
        let per_run = wall.as_secs_f64() / f64::from(f.runs);
        println!(
            "| {surge} | {unavailable} | {:.0} s | {:.2} s | {:.1} ms | {looks} | {:.1} µs |",
            f.duration_seconds.p50,
            wall.as_secs_f64(),
            per_run * 1000.0,
            // Two threads share the runs.
            per_run * 2.0 * 1e6 / f64::from(looks.max(1)),
        );
        figures.push(format!(
            "{surge}/{unavailable}: duration {:?}, min available {}, max total {}, extra node-hours {:?}",
            f.duration_seconds, f.min_available, f.max_total, f.extra_node_hours
        ));
    }
    println!();
    for f in figures {
        println!("{f}");
    }
}
