//! The measured case of the forecast's speed, as a count rather than a
//! time: a forecast of a 1,000-node roll took 16–38 s for 200 runs because
//! every look of the executor handled every node of the pool (the
//! simulator copied them all out, the step function walked them all), so a
//! run cost looks × nodes. Now a look handles the nodes in flight: this
//! test rolls a 1,000-node pool through the real executor on the
//! simulator, as a forecast does, and counts what each look handles: the
//! nodes the simulator reports and the nodes the step function visits.
//! With every node handled at every look these counts are looks × 1,000
//! (3.6 million here); here they are a few thousand. BENCHMARKS.md has the
//! times.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use jiff::{SignedDuration, Timestamp};
use poolwright::clock::{Clock, ManualClock};
use poolwright::model::{Node, NodeState, ObservedPool};
use poolwright::provider::sim::Sim;
use poolwright::provider::{PoolChanges, ReportsChanges, SimDrainer};
use poolwright::reconcile::{EventSink, Executor, Tick};
use poolwright::rollout::Status;
use poolwright::spec::types::SimProvider;
use poolwright::store::Journal;

use crate::support::rollout_sim::{settings, template};
use crate::support::world::block_on;

const NODES: u32 = 1000;

/// What the simulator told the executor, counted.
struct Counted {
    sim: Arc<Sim>,
    answers: AtomicU64,
    reported: AtomicU64,
    whole: AtomicU64,
}

impl ReportsChanges for Counted {
    fn changes(
        &self,
        pool: &str,
        token: Option<u64>,
    ) -> poolwright::provider::Result<Option<PoolChanges>> {
        let told = self.sim.changes(pool, token)?;
        if let Some(c) = &told {
            self.answers.fetch_add(1, Ordering::Relaxed);
            self.reported
                .fetch_add((c.nodes.len() + c.gone.len()) as u64, Ordering::Relaxed);
            self.whole.fetch_add(u64::from(c.whole), Ordering::Relaxed);
        }
        Ok(told)
    }
}

#[test]
fn a_look_at_a_thousand_node_roll_handles_only_the_nodes_in_flight() {
    let start: Timestamp = "2026-12-02T12:00:00Z".parse().unwrap();
    let clock = Arc::new(ManualClock::new(start));
    let sim = Arc::new(
        Sim::open(
            "cost",
            &SimProvider::default(),
            None,
            clock.clone() as Arc<dyn Clock>,
        )
        .unwrap(),
    );
    let old = template("img-1");
    sim.copy_of(&ObservedPool {
        name: "big".into(),
        size: NODES,
        autoscaling: None,
        template: old.clone(),
        in_place: Default::default(),
        nodes: (0..NODES)
            .map(|i| Node {
                id: format!("big-{i:05}").into(),
                template: old.hash(),
                state: NodeState::Healthy,
                // In service for a day, as a pool before a roll is.
                launched_at: start - SignedDuration::from_hours(25),
                healthy_since: Some(start - SignedDuration::from_hours(24)),
                cordoned: false,
                provider_id: None,
                zone: None,
                labels: Default::default(),
            })
            .collect(),
    });
    let surge = 10;
    let settings = settings(NODES, surge, 0);
    let counted = Arc::new(Counted {
        sim: sim.clone(),
        answers: AtomicU64::new(0),
        reported: AtomicU64::new(0),
        whole: AtomicU64::new(0),
    });
    let journal = Journal::memory(None);
    let events = EventSink::none();
    let (looks, visited, most, replaced) = block_on(async {
        let mut exec = Executor::start(
            "big",
            template("img-2"),
            settings,
            sim.clone(),
            Arc::new(SimDrainer::new(sim.clone())),
            &journal,
            &events,
            clock.as_ref(),
        )
        .await
        .unwrap();
        exec.observe_changes_with(counted.clone());
        let (mut looks, mut visited, mut most) = (0u64, 0u64, 0usize);
        // An hour of the roll, a look every second (a fifth of the pool).
        for _ in 0..3600 {
            let tick = exec.tick().await.unwrap();
            let listed = exec.index().each_listed().count();
            looks += 1;
            visited += listed as u64;
            most = most.max(listed);
            assert!(
                matches!(tick, Tick::Continue { .. }),
                "{:?}",
                exec.state.status
            );
            clock.advance(SignedDuration::from_secs(1));
        }
        assert_eq!(exec.state.status, Status::Running);
        let replaced = u64::from(exec.state.progress.1);
        assert!(
            replaced >= 150,
            "old nodes replaced in the hour: {replaced}"
        );
        (looks, visited, most, replaced)
    });
    let answers = counted.answers.load(Ordering::Relaxed);
    let reported = counted.reported.load(Ordering::Relaxed);
    let whole = counted.whole.load(Ordering::Relaxed);
    eprintln!(
        "{looks} looks, {replaced} nodes replaced; the step visited {visited} nodes in all (at most {most} at once); the simulator reported {reported} in {answers} answers ({whole} whole)"
    );
    assert_eq!(answers, looks, "one answer per look");
    assert_eq!(whole, 1, "the whole pool once, at the first look");
    // What is in flight at surge 10: ten new nodes booting or serving
    // minReady, and the old nodes they replace draining or going.
    assert!(
        most <= 4 * surge as usize,
        "{most} nodes visited at one look"
    );
    // In all: the whole pool once, then a few reports per replacement (the
    // new node launched and healthy; the old one cordoned, going, gone),
    // not looks × nodes.
    assert!(
        reported <= NODES as u64 + 8 * replaced,
        "{reported} nodes reported over {looks} looks"
    );
    assert!(visited < looks * 4 * surge as u64);
}
