//! Rollout makespan on the simulator's virtual clock: 1,000 nodes with lognormal
//! boot times, at several budgets, against
//!   (a) the lower bound: outdated nodes / concurrency x mean replacement cycle, and
//!   (b) a batch-synchronous baseline: each batch waits for its slowest node
//!       before the next starts (as the managed services describe surge upgrades).
//!
//!     cargo bench --bench rollout_makespan [-- NODES]

use std::sync::Arc;

use jiff::SignedDuration;
use poolwright::clock::{Clock, ManualClock};
use poolwright::model::OpKey;
use poolwright::model::{NodeTemplate, PoolSpec};
use poolwright::provider::Provider;
use poolwright::provider::SimDrainer;
use poolwright::provider::sim::Sim;
use poolwright::reconcile::EventSink;
use poolwright::reconcile::{Executor, Tick};
use poolwright::rollout::{Budget, Settings};
use poolwright::spec::types::{Distribution, OnDrainTimeout, OnFailure, SimProvider};
use poolwright::spec::values::Duration;
use poolwright::store::Journal;

const BOOT_MEDIAN: f64 = 60.0;
const BOOT_SIGMA: f64 = 0.6;
const HEALTH: f64 = 10.0;
const MIN_READY: f64 = 30.0;
const DRAIN: f64 = 30.0;

fn template(image: &str) -> NodeTemplate {
    NodeTemplate {
        image: Some(image.into()),
        ..NodeTemplate::default()
    }
}

/// Seconds until every node runs the new template.
fn makespan(nodes: u32, surge: u32, unavailable: u32, batch: bool) -> i64 {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let clock = Arc::new(ManualClock::new("2026-12-01T00:00:00Z".parse().unwrap()));
    let sim_settings = SimProvider {
        seed: 11,
        boot_time: Distribution::Lognormal {
            median: Duration::secs(BOOT_MEDIAN as u64),
            sigma: BOOT_SIGMA,
        },
        health_delay: Distribution::Fixed(Duration::secs(HEALTH as u64)),
        drain_time: Distribution::Fixed(Duration::secs(DRAIN as u64)),
        terminate_time: Distribution::Fixed(Duration::secs(5)),
        ..SimProvider::default()
    };
    let sim =
        Arc::new(Sim::open("sim", &sim_settings, None, clock.clone() as Arc<dyn Clock>).unwrap());
    let spec = PoolSpec {
        name: "big".into(),
        size: nodes,
        autoscaling: None,
        template: template("img-1"),
        in_place: Default::default(),
        placement: Default::default(),
    };
    rt.block_on(sim.create_pool(&spec, &OpKey::derive(&["test"])))
        .unwrap();
    clock.advance(SignedDuration::from_secs(3600));
    let settings = Settings {
        size: nodes,
        budget: Budget { surge, unavailable },
        min_ready: Duration::secs(MIN_READY as u64),
        startup_timeout: Duration::secs(3600),
        drain_timeout: Duration::secs(3600),
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
        waves: batch,
        semantics: Default::default(),
        disruption: Default::default(),
        order: Default::default(),
    };
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::new(dir.path());
    let events = EventSink::none();
    let provider: Arc<dyn Provider> = sim.clone();
    let mut rollout = rt
        .block_on(Executor::start(
            "big",
            template("img-2"),
            settings,
            provider,
            Arc::new(SimDrainer::new(sim.clone())),
            &journal,
            &events,
            clock.as_ref(),
        ))
        .unwrap();
    let start = clock.now();
    loop {
        if let Tick::Finished(_) = rt.block_on(rollout.tick()).unwrap() {
            return clock.now().duration_since(start).as_secs();
        }
        clock.advance(SignedDuration::from_secs(1));
    }
}

fn main() {
    let nodes: u32 = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(1000);
    // Mean replacement cycle: boot (lognormal mean), health, minReady, drain.
    let boot_mean = BOOT_MEDIAN * (BOOT_SIGMA * BOOT_SIGMA / 2.0).exp();
    let cycle = boot_mean + HEALTH + MIN_READY + DRAIN;
    println!(
        "rollout_makespan: {nodes} nodes, boot lognormal(median {BOOT_MEDIAN}s, sigma {BOOT_SIGMA}) mean {boot_mean:.1}s, health {HEALTH}s, minReady {MIN_READY}s, drain {DRAIN}s; mean cycle {cycle:.1}s"
    );
    println!(
        "| surge | unavailable | pipelined | lower bound | pipelined / bound | batch-synchronous | batch / pipelined |"
    );
    println!("|---|---|---|---|---|---|---|");
    for (surge, unavailable) in [(10, 0), (50, 0), (0, 50), (25, 25), (100, 0)] {
        let concurrency = (surge + unavailable) as f64;
        let bound = (nodes as f64 / concurrency).ceil() * cycle;
        let pipelined = makespan(nodes, surge, unavailable, false);
        let batch = makespan(nodes, surge, unavailable, true);
        println!(
            "| {surge} | {unavailable} | {pipelined} s | {bound:.0} s | {:.3} | {batch} s | {:.2}x |",
            pipelined as f64 / bound,
            batch as f64 / pipelined as f64
        );
    }
}
