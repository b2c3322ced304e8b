//! Each pool's latency history (`STATE/latency/POOL.json`), a fixed-size
//! summary updated from the events of every rollout: what `forecast` draws
//! from before it falls back to the simulator's or the default distributions.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Mutex;

use jiff::Timestamp;

use super::atomic_write;
use crate::model::EventKind;
use crate::model::latency::PoolLatencies;
use crate::spec::validate::is_dns_label;

/// A summary is a few hundred bytes; anything larger is not one.
const FILE_LIMIT: u64 = 64 * 1024;

/// Steps begun and not yet ended are forgotten beyond this many (a daemon
/// that never sees the end of some steps must not grow).
const OPEN_LIMIT: usize = 100_000;

#[derive(Clone, Debug)]
pub struct LatencyStore {
    dir: PathBuf,
}

impl LatencyStore {
    pub fn new(state_root: &std::path::Path) -> LatencyStore {
        LatencyStore {
            dir: state_root.join("latency"),
        }
    }

    /// A file name only from a valid pool name.
    fn path(&self, pool: &str) -> Option<PathBuf> {
        is_dns_label(pool, 63).then(|| self.dir.join(format!("{pool}.json")))
    }

    /// The pool's history; none when there is none or it cannot be read
    /// (a forecast then says it fell back).
    pub fn load(&self, pool: &str) -> Option<PoolLatencies> {
        let bytes = crate::files::read_regular(&self.path(pool)?, FILE_LIMIT).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    fn save(&self, pool: &str, l: &PoolLatencies) {
        if let Some(p) = self.path(pool) {
            let bytes = serde_json::to_vec_pretty(l).expect("a summary serializes");
            // A record, not a control path: a full disk must not stop a rollout.
            if let Err(e) = atomic_write(&p, &bytes) {
                tracing::warn!(pool, "latency history not saved to {}: {e}", p.display());
            }
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Step {
    Boot,
    Drain,
    Terminate,
}

/// Watches events and adds each finished step's duration to its pool's
/// history (an observer of the event sink, in `apply` and the daemon).
pub struct LatencyRecorder {
    store: LatencyStore,
    open: Mutex<HashMap<(String, String, Step), Timestamp>>,
    pools: Mutex<HashMap<String, PoolLatencies>>,
}

impl LatencyRecorder {
    pub fn new(store: LatencyStore) -> LatencyRecorder {
        LatencyRecorder {
            store,
            open: Mutex::new(HashMap::new()),
            pools: Mutex::new(HashMap::new()),
        }
    }

    pub fn record(&self, e: &crate::reconcile::Event) {
        let Some(node) = &e.node else {
            return;
        };
        let (step, begins) = match e.event {
            EventKind::NodeCreateRequested => (Step::Boot, true),
            EventKind::NodeHealthy => (Step::Boot, false),
            EventKind::NodeCordoned => (Step::Drain, true),
            EventKind::NodeDrained => (Step::Drain, false),
            EventKind::TerminateRequested => (Step::Terminate, true),
            EventKind::NodeTerminated => (Step::Terminate, false),
            _ => return,
        };
        let key = (e.pool.clone(), node.clone(), step);
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        if begins {
            if open.len() < OPEN_LIMIT {
                open.insert(key, e.ts);
            }
            return;
        }
        let Some(began) = open.remove(&key) else {
            return;
        };
        drop(open);
        let seconds = e.ts.duration_since(began).as_secs_f64();
        let mut pools = self.pools.lock().unwrap_or_else(|p| p.into_inner());
        let l = pools
            .entry(e.pool.clone())
            .or_insert_with(|| self.store.load(&e.pool).unwrap_or_default());
        match step {
            Step::Boot => l.boot.add(seconds),
            Step::Drain => l.drain.add(seconds),
            Step::Terminate => l.terminate.add(seconds),
        }
        self.store.save(&e.pool, l);
    }
}
