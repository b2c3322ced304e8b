//! What `apply` prints while it works. On a terminal, one line per step with
//! the pool's progress. Elsewhere (a CI job's log, a pipe), one timestamped
//! line per event, and a heartbeat with each pool's counts every 30 s, so a
//! log never stays quiet for the minutes a drain or a bake takes.

use std::collections::BTreeMap;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::model::{Counts, Event};

/// How often the heartbeat speaks when nothing else does.
pub const HEARTBEAT: Duration = Duration::from_secs(30);

/// A terminal's line for an event.
pub fn terminal_line(e: &Event) {
    match e.counts {
        Some(c) => eprintln!(
            "  {:<12} {}, {} available, {} nodes  {}{}",
            e.pool,
            c.progress(),
            c.available,
            c.total,
            e.event,
            e.node.as_ref().map(|n| format!(" {n}")).unwrap_or_default()
        ),
        None => eprintln!("  {:<12} {}: {}", e.pool, e.event, e.message),
    }
}

fn stamp(t: jiff::Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// A log's line for an event: when, which pool, what, and its progress.
pub fn log_line(e: &Event) -> String {
    format!(
        "{} nodepool.{}: {}{}: {}{}",
        stamp(e.ts),
        e.pool,
        e.event,
        e.node.as_ref().map(|n| format!(" {n}")).unwrap_or_default(),
        e.message,
        e.counts
            .map(|c| format!(" [{}, {} available]", c.progress(), c.available))
            .unwrap_or_default()
    )
}

/// The log of an apply run without a terminal: its lines as events come,
/// and the heartbeat thread, which ends when this is dropped.
pub struct Log {
    latest: Arc<Mutex<BTreeMap<String, Counts>>>,
    spoke: Arc<Mutex<Instant>>,
    stop: Option<mpsc::Sender<()>>,
    heartbeat: Option<std::thread::JoinHandle<()>>,
}

impl Log {
    pub fn start(every: Duration) -> Log {
        let latest: Arc<Mutex<BTreeMap<String, Counts>>> = Arc::default();
        let spoke = Arc::new(Mutex::new(Instant::now()));
        let started = Instant::now();
        let (stop, stopped) = mpsc::channel::<()>();
        let heartbeat = {
            let (latest, spoke) = (latest.clone(), spoke.clone());
            std::thread::spawn(move || {
                while let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(every) {
                    let mut last = spoke.lock().unwrap_or_else(|p| p.into_inner());
                    // Only when the log has been quiet for a whole period.
                    if last.elapsed() < every {
                        continue;
                    }
                    *last = Instant::now();
                    drop(last);
                    eprintln!("{}", heartbeat_line(&latest, started.elapsed()));
                }
            })
        };
        Log {
            latest,
            spoke,
            stop: Some(stop),
            heartbeat: Some(heartbeat),
        }
    }

    /// What the event sink calls for every event.
    pub fn observer(&self) -> impl Fn(&Event) + Send + Sync + 'static {
        let (latest, spoke) = (self.latest.clone(), self.spoke.clone());
        move |e: &Event| {
            if let Some(c) = e.counts {
                latest
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(e.pool.clone(), c);
            }
            *spoke.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
            eprintln!("{}", log_line(e));
        }
    }

    /// A step's own line (`nodepool.web: roll 6 outdated node(s)...`).
    pub fn say(&self, line: &str) {
        *self.spoke.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
        eprintln!("{} {line}", stamp(jiff::Timestamp::now()));
    }
}

impl Drop for Log {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(h) = self.heartbeat.take() {
            let _ = h.join();
        }
    }
}

fn heartbeat_line(latest: &Mutex<BTreeMap<String, Counts>>, elapsed: Duration) -> String {
    let latest = latest.lock().unwrap_or_else(|p| p.into_inner());
    let pools: Vec<String> = latest
        .iter()
        .map(|(pool, c)| format!("nodepool.{pool} {}", c.progress()))
        .collect();
    format!(
        "{} still applying after {:#}: {}",
        stamp(jiff::Timestamp::now()),
        jiff::SignedDuration::from_secs(elapsed.as_secs() as i64),
        if pools.is_empty() {
            "no progress reported yet".to_string()
        } else {
            pools.join("; ")
        }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_line_says_when_what_and_how_far() {
        let e = Event {
            ts: "2026-12-04T10:00:00Z".parse().unwrap(),
            pool: "web".into(),
            event: crate::model::EventKind::DrainStarted,
            node: Some("o1".into()),
            counts: Some(Counts {
                desired: 6,
                total: 7,
                available: 6,
                updated: 2,
                outdated: 5,
                done: 1,
                launching: 1,
                draining: 1,
            }),
            message: "cordoned".into(),
            revision: None,
            by: None,
            fleet: None,
            since: None,
            phase: None,
        };
        assert_eq!(
            log_line(&e),
            "2026-12-04T10:00:00Z nodepool.web: drain_started o1: cordoned \
             [1/6 done, 1 launching, 4 old left, 1 old draining, 6 available]"
        );
        let latest = Mutex::new(BTreeMap::from([("web".to_string(), e.counts.unwrap())]));
        let line = heartbeat_line(&latest, Duration::from_secs(90));
        assert!(
            line.ends_with("still applying after 1m 30s: nodepool.web 1/6 done, 1 launching, 4 old left, 1 old draining"),
            "{line}"
        );
    }
}
