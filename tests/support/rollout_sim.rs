//! Runs one rollout on the simulator under a virtual clock, one simulated second
//! per step, checking the bounds at every instant it samples.
#![allow(dead_code)]

use std::sync::Arc;

use jiff::SignedDuration;
use poolwright::clock::{Clock, ManualClock};
use poolwright::model::Event;
use poolwright::model::OpKey;
use poolwright::model::{NodeState, NodeTemplate, ObservedPool, PoolSpec};
use poolwright::provider::Provider;
use poolwright::provider::SimDrainer;
use poolwright::provider::sim::Sim;
use poolwright::reconcile::EventSink;
use poolwright::reconcile::{Executor, Tick};
use poolwright::rollout::{Budget, Settings, Status};
use poolwright::spec::types::{Disruption, Distribution, OnDrainTimeout, OnFailure, SimProvider};
use poolwright::spec::values::Duration;
use poolwright::store::Journal;

pub fn template(image: &str) -> NodeTemplate {
    NodeTemplate {
        image: Some(image.into()),
        ..NodeTemplate::default()
    }
}

pub fn settings(size: u32, surge: u32, unavailable: u32) -> Settings {
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

pub fn sim_settings() -> SimProvider {
    SimProvider {
        boot_time: Distribution::Fixed(Duration::secs(30)),
        health_delay: Distribution::Fixed(Duration::secs(10)),
        drain_time: Distribution::Fixed(Duration::secs(20)),
        terminate_time: Distribution::Fixed(Duration::secs(5)),
        ..SimProvider::default()
    }
}

/// One sampled instant.
#[derive(Clone, Copy, Debug)]
pub struct Sample {
    pub t: i64,
    /// Nodes not terminating.
    pub total: u32,
    /// Every node listed, terminating ones included (what a cloud quota counts).
    pub listed: u32,
    /// Healthy, not cordoned (draining nodes are cordoned).
    pub available: u32,
    pub updated: u32,
}

pub struct Run {
    /// The availability floor the rollout began with.
    pub floor: u32,
    pub events: Vec<Event>,
    pub samples: Vec<Sample>,
    pub status: Status,
    pub final_pool: ObservedPool,
    pub seconds: i64,
    pub journal_dir: tempfile::TempDir,
}

impl Run {
    pub fn max_total(&self) -> u32 {
        self.samples.iter().map(|s| s.total).max().unwrap_or(0)
    }
    pub fn max_listed(&self) -> u32 {
        self.samples.iter().map(|s| s.listed).max().unwrap_or(0)
    }
    pub fn min_total(&self) -> u32 {
        self.samples.iter().map(|s| s.total).min().unwrap_or(0)
    }
    pub fn min_available(&self) -> u32 {
        self.samples.iter().map(|s| s.available).min().unwrap_or(0)
    }
    pub fn names(&self) -> Vec<&'static str> {
        self.events.iter().map(|e| e.event.as_str()).collect()
    }
    pub fn count(&self, event: &str) -> usize {
        self.events.iter().filter(|e| e.event == event).count()
    }
    pub fn first(&self, event: &str) -> Option<usize> {
        self.events.iter().position(|e| e.event == event)
    }
}

/// What the pool looks like now. Available as the executor counts it:
/// healthy and not cordoned, and, for a node on the rollout's current target,
/// healthy for `minReady`.
fn sample(
    rt: &tokio::runtime::Runtime,
    sim: &Sim,
    pool: &str,
    t: i64,
    target: &NodeTemplate,
    view: (poolwright::model::TemplateHash, Duration, jiff::Timestamp),
) -> (Sample, ObservedPool) {
    let (current, min_ready, now) = view;
    let p = rt
        .block_on(sim.describe_pools(&[pool.to_string()]))
        .unwrap()
        .remove(0);
    let live: Vec<_> = p.live_nodes().collect();
    let ready = |n: &poolwright::model::Node| {
        n.template != current
            || n.healthy_since.is_some_and(|h| {
                h.saturating_add(jiff::SignedDuration::try_from(min_ready.as_std()).unwrap())
                    .unwrap()
                    <= now
            })
    };
    let s = Sample {
        t,
        total: live.len() as u32,
        listed: p.nodes.len() as u32,
        available: live
            .iter()
            .filter(|n| n.state == NodeState::Healthy && !n.cordoned && ready(n))
            .count() as u32,
        updated: live.iter().filter(|n| n.template == target.hash()).count() as u32,
    };
    (s, p)
}

pub struct Scenario {
    pub size: u32,
    pub settings: Settings,
    pub sim: SimProvider,
    pub disruption: Disruption,
    pub max_seconds: i64,
    pub start: &'static str,
    /// Change the target at this second (superseding the rollout).
    pub supersede_at: Option<(i64, NodeTemplate)>,
    /// Seconds between creating the pool and starting the rollout.
    pub settle_seconds: i64,
    /// Launch the pool's nodes one a second (so launch order is id order)
    /// rather than all at once.
    pub stagger: bool,
    /// Nodes labelled `poolwright.io/do-not-disrupt: "true"` before the
    /// rollout starts.
    pub hold: Vec<String>,
}

impl Scenario {
    pub fn new(size: u32, surge: u32, unavailable: u32) -> Scenario {
        Scenario {
            size,
            settings: settings(size, surge, unavailable),
            sim: sim_settings(),
            disruption: Disruption::default(),
            max_seconds: 4 * 3600,
            start: "2026-12-02T12:00:00Z",
            supersede_at: None,
            settle_seconds: 600,
            stagger: false,
            hold: Vec::new(),
        }
    }

    pub fn run(self) -> Run {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let clock = Arc::new(ManualClock::new(self.start.parse().unwrap()));
        let sim =
            Arc::new(Sim::open("sim", &self.sim, None, clock.clone() as Arc<dyn Clock>).unwrap());
        let old = template("img-1");
        let spec = PoolSpec {
            name: "web".into(),
            size: if self.stagger {
                self.size.min(1)
            } else {
                self.size
            },
            autoscaling: None,
            template: old.clone(),
            in_place: Default::default(),
            placement: Default::default(),
        };
        rt.block_on(sim.create_pool(&spec, &OpKey::derive(&["test"])))
            .unwrap();
        if self.stagger {
            for size in 2..=self.size {
                clock.advance(SignedDuration::from_secs(1));
                let key = OpKey::derive(&["stagger", &size.to_string()]);
                rt.block_on(sim.create_nodes("web", 1, size, &key)).unwrap();
            }
        }
        clock.advance(SignedDuration::from_secs(self.settle_seconds));
        for node in &self.hold {
            sim.set_label("web", node, "poolwright.io/do-not-disrupt", Some("true"))
                .unwrap();
        }

        let journal_dir = tempfile::tempdir().unwrap();
        let journal = Journal::new(journal_dir.path());
        let events = EventSink::in_memory();
        let mut target = template("img-2");
        let provider: Arc<dyn Provider> = sim.clone();
        let drainer = Arc::new(SimDrainer::new(sim.clone()));
        let start = |target: &NodeTemplate| {
            let mut settings = self.settings.clone();
            settings.disruption = self.disruption.clone();
            rt.block_on(Executor::start(
                "web",
                target.clone(),
                settings,
                provider.clone(),
                drainer.clone(),
                &journal,
                &events,
                clock.as_ref(),
            ))
            .unwrap()
        };
        let mut rollout = start(&target);
        let floor = rollout.state.floor();
        let mut samples = Vec::new();
        let mut status = Status::Running;
        let mut t = 0;
        while t < self.max_seconds {
            if let Some((at, next)) = &self.supersede_at
                && *at == t
            {
                target = next.clone();
                drop(rollout);
                rollout = start(&target);
            }
            let view = |r: &Executor| (r.state.target, r.state.settings.min_ready, clock.now());
            samples.push(sample(&rt, &sim, "web", t, &target, view(&rollout)).0);
            let mut step = 1;
            match rt.block_on(rollout.tick()).unwrap() {
                Tick::Finished(s) => {
                    status = s;
                    samples.push(sample(&rt, &sim, "web", t, &target, view(&rollout)).0);
                    break;
                }
                Tick::Continue { waiting } => {
                    status = rollout.state.status.clone();
                    let stopped = matches!(status, Status::Degraded { .. } | Status::Paused { .. });
                    if stopped && !rollout.in_flight() {
                        samples.push(sample(&rt, &sim, "web", t, &target, view(&rollout)).0);
                        break;
                    }
                    // Only waiting (policy, bake, refused surge): skip ahead a minute.
                    if waiting.is_some() && !rollout.in_flight() {
                        step = 60;
                    }
                }
            }
            samples.push(sample(&rt, &sim, "web", t, &target, view(&rollout)).0);
            clock.advance(SignedDuration::from_secs(step));
            t += step;
        }
        let view = (
            rollout.state.target,
            rollout.state.settings.min_ready,
            clock.now(),
        );
        let (_, final_pool) = sample(&rt, &sim, "web", t, &target, view);
        Run {
            floor,
            events: events.take(),
            samples,
            status,
            final_pool,
            seconds: t,
            journal_dir,
        }
    }
}

/// The rollout bounds (docs/ARCHITECTURE.md, "Rollout rules") at every sampled instant.
pub fn assert_bounds(run: &Run, size: u32, surge: u32, unavailable: u32) {
    for s in &run.samples {
        assert!(
            s.total <= size + surge,
            "t={}s: {} nodes > size {size} + surge {surge}",
            s.t,
            s.total
        );
        assert!(
            s.available >= size.saturating_sub(unavailable),
            "t={}s: {} available < size {size} - unavailable {unavailable}",
            s.t,
            s.available
        );
    }
}

/// The ratcheting floor, at every sampled instant: availability never drops
/// below min(size - unavailable, the highest availability seen before).
pub fn assert_bounds_ratchet(run: &Run, size: u32, unavailable: u32) {
    let mut peak = 0;
    for s in &run.samples {
        let floor = size.saturating_sub(unavailable).min(peak);
        assert!(
            s.available >= floor,
            "t={}s: {} available, below the floor {floor} (size {size} - unavailable {unavailable}, {peak} were available before)",
            s.t,
            s.available
        );
        peak = peak.max(s.available);
    }
}
