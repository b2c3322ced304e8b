//! What `apply` prints while it works. On a terminal, a live bar per pool
//! (indicatif) under the lines of its steps and events. Elsewhere (a CI job's
//! log, a pipe), one timestamped line per event, and a heartbeat with each
//! pool's counts every 30 s, so a log never stays quiet for the minutes a drain
//! or a bake takes.

use crate::sync::Locked;
use std::collections::BTreeMap;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::model::{Counts, Event};

/// How often the heartbeat speaks when nothing else does.
const HEARTBEAT: Duration = Duration::from_secs(30);

/// What an apply prints its progress on: bars on a terminal, else a log.
pub enum View {
    Terminal(Bars),
    Log(Log),
}

impl View {
    /// Bars when stderr is a terminal and `bars` allows them (JSON lines on
    /// the same terminal would cut through them).
    pub fn for_stderr(bars: bool) -> View {
        use std::io::IsTerminal;
        if bars && std::io::stderr().is_terminal() {
            View::Terminal(Bars::start())
        } else {
            View::Log(Log::start(HEARTBEAT))
        }
    }

    /// What the event sink calls for every event.
    pub fn observer(&self) -> Box<dyn Fn(&Event) + Send + Sync + 'static> {
        match self {
            View::Terminal(bars) => Box::new(bars.observer()),
            View::Log(log) => Box::new(log.observer()),
        }
    }

    /// A step's own line.
    pub fn say(&self, line: &str) {
        match self {
            View::Terminal(bars) => bars.say(line),
            View::Log(log) => log.say(line),
        }
    }

    /// The bars, for lines printed above them.
    pub fn bars(&self) -> Option<Bars> {
        match self {
            View::Terminal(bars) => Some(bars.clone()),
            View::Log(_) => None,
        }
    }

    /// The run's end: bars stop where they stand, so what is printed next
    /// lands under them. The log's heartbeat ends when it is dropped.
    pub fn finish(&self) {
        if let View::Terminal(bars) = self {
            bars.stop();
        }
    }
}

/// A terminal's view of an apply: the lines of steps and events scroll, and
/// under them each pool keeps one bar (done of desired) whose message says
/// how far it is and what it waits for. The spinner turns while a roll
/// waits (a canary's minReady, a bake, a drain), so a wait never looks hung.
/// Clones share the bars.
#[derive(Clone)]
pub struct Bars {
    multi: MultiProgress,
    bars: Arc<Mutex<BTreeMap<String, ProgressBar>>>,
    /// How often a spinner turns (none in tests, whose screens must not move).
    tick: Option<Duration>,
}

impl Bars {
    /// Bars on stderr (indicatif draws nothing when it is not a terminal).
    pub fn start() -> Bars {
        Bars::on(
            ProgressDrawTarget::stderr(),
            Some(Duration::from_millis(250)),
        )
    }

    fn on(target: ProgressDrawTarget, tick: Option<Duration>) -> Bars {
        Bars {
            multi: MultiProgress::with_draw_target(target),
            bars: Arc::default(),
            tick,
        }
    }

    /// What the event sink calls for every event.
    pub fn observer(&self) -> impl Fn(&Event) + Send + Sync + 'static {
        let (multi, bars, tick) = (self.multi.clone(), self.bars.clone(), self.tick);
        move |e: &Event| {
            let _ = multi.println(event_line(e));
            // A roll's events (they carry its phase) move its pool's bar; a
            // plan step's (a pool created) has its counts in its line.
            let (Some(c), Some(_)) = (e.counts, &e.phase) else {
                return;
            };
            let mut bars = bars.locked();
            // A pool's first counts make its bar; a roll started after a
            // finished one (a staged apply's next stage) gets a bar of its
            // own, and what follows a roll's end (the plan step's line) keeps
            // the finished bar as it stands.
            let bar = match bars.get(&e.pool) {
                Some(bar) if !bar.is_finished() => bar.clone(),
                Some(_) if e.event != crate::model::EventKind::RolloutStarted => return,
                _ => {
                    let bar = multi.add(ProgressBar::new(u64::from(c.desired)));
                    bar.set_style(bar_style());
                    bar.set_prefix(e.pool.clone());
                    if let Some(every) = tick {
                        bar.enable_steady_tick(every);
                    }
                    bars.insert(e.pool.clone(), bar.clone());
                    bar
                }
            };
            drop(bars);
            bar.set_length(u64::from(c.desired));
            bar.set_position(u64::from(c.done.min(c.desired)));
            bar.set_message(bar_message(e, &c));
            if is_final(e) {
                bar.finish();
            }
        }
    }

    /// A step's own line (`nodepool.web: roll 6 outdated node(s)...`), above
    /// the bars.
    pub fn say(&self, line: &str) {
        let _ = self.multi.println(line);
    }

    /// Run `print` with the bars out of the way (they are drawn again under
    /// what it printed).
    pub fn suspend(&self, print: impl FnOnce()) {
        self.multi.suspend(print);
    }

    /// Every bar stops turning and stays as it stood (an interrupted or
    /// failed apply's too), not erased.
    pub fn stop(&self) {
        for bar in self.bars.locked().values() {
            if !bar.is_finished() {
                bar.abandon();
            }
        }
    }
}

impl Drop for View {
    fn drop(&mut self) {
        self.finish();
    }
}

fn bar_style() -> ProgressStyle {
    // A constant template: it cannot fail to parse.
    ProgressStyle::with_template("{spinner} {prefix:<12} [{bar:20}] {wide_msg}")
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ")
        .tick_chars("|/-\\ ")
}

/// The end of a pool's roll (or of this apply's part in it): its bar stops
/// turning.
fn is_final(e: &Event) -> bool {
    use crate::model::phase::PhaseKind::*;
    e.phase
        .as_ref()
        .is_some_and(|p| matches!(p.kind, Completed | RolledBack | Degraded | Paused))
}

/// A bar's message: what the roll does or waits for now (its phase and until
/// when, else the last event), then the counts. The phase leads: a narrow
/// terminal cuts the end of the line, and the bar already shows how far.
fn bar_message(e: &Event, c: &Counts) -> String {
    let now = match &e.phase {
        Some(ph) => match ph.until {
            Some(u) => format!("{} until {}", ph.text, u.strftime("%H:%M:%S UTC")),
            None => ph.text.clone(),
        },
        None => e.event.as_str().to_string(),
    };
    format!("{now} · {}, {} available", c.progress(), c.available)
}

/// An event's line above the bars (with its counts when no bar shows them).
fn event_line(e: &Event) -> String {
    format!(
        "  {:<12} {}{}: {}{}",
        e.pool,
        e.event,
        e.node.as_ref().map(|n| format!(" {n}")).unwrap_or_default(),
        e.message,
        match (e.counts, &e.phase) {
            (Some(c), None) => format!(" [{}, {} available]", c.progress(), c.available),
            _ => String::new(),
        }
    )
}

fn stamp(t: jiff::Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// A log's line for an event: when, which pool, what, and its progress.
fn log_line(e: &Event) -> String {
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
                    let mut last = spoke.locked();
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
                latest.locked().insert(e.pool.clone(), c);
            }
            *spoke.locked() = Instant::now();
            eprintln!("{}", log_line(e));
        }
    }

    /// A step's own line (`nodepool.web: roll 6 outdated node(s)...`).
    pub fn say(&self, line: &str) {
        *self.spoke.locked() = Instant::now();
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
    let latest = latest.locked();
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

    use crate::model::EventKind;
    use crate::model::phase::{Phase, PhaseKind};

    fn event(pool: &str, event: EventKind, node: Option<&str>, counts: Option<Counts>) -> Event {
        Event::new(
            "2026-12-04T10:00:00Z".parse().unwrap(),
            pool,
            event,
            "cordoned",
        )
        .node(node.map(Into::into))
        .counts(counts)
    }

    fn counts(desired: u32, done: u32, launching: u32, outdated: u32, draining: u32) -> Counts {
        Counts {
            desired,
            total: desired + launching,
            available: desired,
            updated: done + launching,
            outdated,
            done,
            launching,
            draining,
        }
    }

    #[test]
    fn the_terminal_shows_a_bar_per_pool_under_its_lines_with_what_it_waits_for() {
        let term = indicatif::InMemoryTerm::new(12, 120);
        let bars = Bars::on(ProgressDrawTarget::term_like(Box::new(term.clone())), None);
        let see = bars.observer();
        bars.say("nodepool.web: roll 6 outdated node(s)");
        let mut canary = event(
            "web",
            EventKind::NodeCreateRequested,
            Some("n1"),
            Some(counts(6, 0, 1, 6, 0)),
        );
        canary.message = "launched".into();
        canary.phase = Some(Phase {
            kind: PhaseKind::Canary,
            text: "canary: n1 stays healthy for minReady".into(),
            until: Some("2026-12-04T10:00:12Z".parse().unwrap()),
        });
        see(&canary);
        let mut drain = event(
            "api",
            EventKind::DrainStarted,
            Some("o1"),
            Some(counts(3, 1, 0, 2, 1)),
        );
        drain.phase = Some(Phase {
            kind: PhaseKind::Rolling,
            text: "1 old node(s) draining".into(),
            until: None,
        });
        see(&drain);
        let mut done = event(
            "api",
            EventKind::Completed,
            None,
            Some(counts(3, 3, 0, 0, 0)),
        );
        done.message = "every node runs the target template".into();
        done.phase = Some(Phase {
            kind: PhaseKind::Completed,
            text: "completed".into(),
            until: None,
        });
        see(&done);
        // A plan step's counts are in its line: no bar for them.
        let mut created = event(
            "db",
            EventKind::PoolCreated,
            None,
            Some(counts(2, 0, 2, 0, 0)),
        );
        created.message = "created with 2 node(s)".into();
        created.counts = created.counts.map(|c| Counts { available: 0, ..c });
        see(&created);
        bars.stop();
        // The lines scroll above; each pool's bar stays under them, its phase first.
        insta::assert_snapshot!(term.contents(), @r"
        nodepool.web: roll 6 outdated node(s)
          web          node_create_requested n1: launched
          api          drain_started o1: cordoned
          api          completed: every node runs the target template
          db           pool_created: created with 2 node(s) [0/2 done, 2 launching, 0 available]
          web          [                    ] canary: n1 stays healthy for minReady until 10:00:12 UTC · 0/6 done, 1 launching,
          api          [====================] completed · 3/3 done, 3 available
        ");
    }

    #[test]
    fn a_log_line_says_when_what_and_how_far() {
        let e = event(
            "web",
            EventKind::DrainStarted,
            Some("o1"),
            Some(Counts {
                desired: 6,
                total: 7,
                available: 6,
                updated: 2,
                outdated: 5,
                done: 1,
                launching: 1,
                draining: 1,
            }),
        );
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
