//! Each pool's latency history (`STATE/latency/POOL.json`), a fixed-size
//! summary updated from the events of every rollout: what `forecast` draws
//! from before it falls back to the simulator's or the default distributions.

use crate::sync::Locked;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Mutex;

use jiff::Timestamp;

use crate::files::atomic_write;
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
enum Span {
    Boot,
    Drain,
    Terminate,
}

/// A pool's history is written at most this often (the rest at `flush`):
/// an event is on the rollout's path, and a write is an fsync.
const SAVE_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

struct Held {
    latencies: PoolLatencies,
    /// When it was last written; `None` while nothing new awaits a write.
    saved: Option<std::time::Instant>,
    dirty: bool,
}

/// Watches events and adds each finished step's duration to its pool's
/// history (an observer of the event sink, in `apply` and the daemon).
pub struct LatencyRecorder {
    store: LatencyStore,
    open: Mutex<HashMap<(String, String, Span), Timestamp>>,
    pools: Mutex<HashMap<String, Held>>,
}

impl LatencyRecorder {
    pub fn new(store: LatencyStore) -> LatencyRecorder {
        LatencyRecorder {
            store,
            open: Mutex::new(HashMap::new()),
            pools: Mutex::new(HashMap::new()),
        }
    }

    pub fn record(&self, e: &crate::model::Event) {
        let Some(node) = &e.node else {
            return;
        };
        let (step, begins) = match e.event {
            EventKind::NodeCreateRequested => (Span::Boot, true),
            EventKind::NodeHealthy => (Span::Boot, false),
            EventKind::NodeCordoned => (Span::Drain, true),
            EventKind::NodeDrained => (Span::Drain, false),
            EventKind::TerminateRequested => (Span::Terminate, true),
            EventKind::NodeTerminated => (Span::Terminate, false),
            _ => return,
        };
        let key = (e.pool.clone(), node.clone(), step);
        let mut open = self.open.locked();
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
        // A boot ends when the node became healthy, not when its minReady
        // ended: the forecast waits minReady itself.
        let ended = e.since.filter(|s| *s >= began).unwrap_or(e.ts);
        let seconds = ended.duration_since(began).as_secs_f64();
        let mut pools = self.pools.locked();
        let held = pools.entry(e.pool.clone()).or_insert_with(|| Held {
            latencies: self.store.load(&e.pool).unwrap_or_default(),
            saved: None,
            dirty: false,
        });
        let l = &mut held.latencies;
        match step {
            Span::Boot => l.boot.add(seconds),
            Span::Drain => l.drain.add(seconds),
            Span::Terminate => l.terminate.add(seconds),
        }
        held.dirty = true;
        if held.saved.is_none_or(|t| t.elapsed() >= SAVE_EVERY) {
            self.store.save(&e.pool, &held.latencies);
            held.saved = Some(std::time::Instant::now());
            held.dirty = false;
        }
    }

    /// Write every history with samples not yet written (at the end of an
    /// apply, when the daemon stops).
    pub fn flush(&self) {
        let mut pools = self.pools.locked();
        for (pool, held) in pools.iter_mut().filter(|(_, h)| h.dirty) {
            self.store.save(pool, &held.latencies);
            held.saved = Some(std::time::Instant::now());
            held.dirty = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Event;

    fn event(kind: EventKind, node: &str, secs: i64) -> Event {
        Event::new(
            Timestamp::from_second(1_800_000_000 + secs).unwrap(),
            "web",
            kind,
            String::new(),
        )
        .node(Some(node.into()))
    }

    /// The measured case: rolls with minReady 10s were forecast 1m13s
    /// from history for 42 s of real roll, since a boot was measured to
    /// the end of minReady and the forecast waited minReady again.
    #[test]
    fn a_boot_ends_when_the_node_became_healthy_not_when_min_ready_ended() {
        let dir = tempfile::tempdir().unwrap();
        let r = LatencyRecorder::new(LatencyStore::new(dir.path()));
        r.record(&event(EventKind::NodeCreateRequested, "web-1", 0));
        let mut healthy = event(EventKind::NodeHealthy, "web-1", 40);
        healthy.since = Some(Timestamp::from_second(1_800_000_000 + 30).unwrap());
        r.record(&healthy);
        r.flush();
        let l = LatencyStore::new(dir.path()).load("web").unwrap();
        assert_eq!(l.boot.count, 1);
        assert!((l.boot.median_seconds() - 30.0).abs() < 1e-9);
    }

    #[test]
    fn finished_steps_become_the_pools_history_and_survive_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let r = LatencyRecorder::new(LatencyStore::new(dir.path()));
        for (i, boot) in [40, 50, 60].into_iter().enumerate() {
            let n = format!("web-{i}");
            r.record(&event(EventKind::NodeCreateRequested, &n, 0));
            r.record(&event(EventKind::NodeHealthy, &n, boot));
            r.record(&event(EventKind::TerminateRequested, &n, 100));
            r.record(&event(EventKind::NodeTerminated, &n, 105));
        }
        // An end without its start, and a step of another node, count for nothing.
        r.record(&event(EventKind::NodeDrained, "web-9", 10));
        r.flush();
        let l = LatencyStore::new(dir.path()).load("web").unwrap();
        assert_eq!((l.boot.count, l.terminate.count, l.drain.count), (3, 3, 0));
        assert!((l.boot.median_seconds() - (40f64 * 50.0 * 60.0).cbrt()).abs() < 1e-6);
        assert_eq!(l.terminate.max_seconds, 5.0);
        // A new recorder (a restart) goes on from what was written.
        let again = LatencyRecorder::new(LatencyStore::new(dir.path()));
        again.record(&event(EventKind::NodeCreateRequested, "web-5", 0));
        again.record(&event(EventKind::NodeHealthy, "web-5", 45));
        again.flush();
        assert_eq!(
            LatencyStore::new(dir.path())
                .load("web")
                .unwrap()
                .boot
                .count,
            4
        );
        // Only a pool name becomes a file name.
        assert!(LatencyStore::new(dir.path()).load("../etc").is_none());
    }
}
