//! Forecasts: how a planned roll will go, from the real rollout executor (the
//! same `decide`, the same policy gate and windows) run on a virtual clock
//! against a simulated copy of the observed pool, many times with different
//! draws of the latencies (Monte Carlo, seeded: the same seed gives the same
//! forecast).
//!
//! The executor looks at the pool every poll interval of its provider, as a
//! real apply does. Where nothing can change between two looks (the last
//! round acted on nothing, no node becomes running, healthy or gone, no
//! drain ends, no `minReady` or core timer expires) the clock skips to the
//! next look at which something can, so a forecast costs in proportion to
//! what happens, not to how long it takes. The core's own timers (bakes,
//! backoff, timeouts, windows: `rollout::decide::timers`) are looks of their
//! own, met at the first look of the poll grid at or after them, as a real
//! apply meets them.

use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};
use serde::Serialize;

use super::events::EventSink;
use super::executor::{Executor, Tick};
use crate::clock::{Clock, ManualClock};
use crate::model::latency::{LogSummary, PoolLatencies};
use crate::model::{NodeTemplate, ObservedPool};
use crate::provider::sim::Sim;
use crate::provider::{Provider, SimDrainer};
use crate::rollout::decide::{Marked, Quiet, Ready};
use crate::rollout::{Mark, Settings, Status};
use crate::spec::types::{Distribution, SimProvider};
use crate::spec::values::Duration;
use crate::store::Journal;

/// The longest the clock skips without a look: a safety net only (every
/// timer of the core is a look of its own).
const MAX_SKIP: SignedDuration = SignedDuration::from_secs(60);

/// A forecast stops a run that has not finished after this long.
const HORIZON: SignedDuration = SignedDuration::from_hours(30 * 24);

/// History is used for a kind of step once it has this many samples.
const MIN_SAMPLES: u64 = 5;

/// Most runs one forecast makes.
const MAX_RUNS: u32 = 10_000;

/// What is forecast: a roll of `pool` to `target` with `settings`.
pub struct Case<'a> {
    pub pool: &'a ObservedPool,
    pub target: &'a NodeTemplate,
    pub settings: &'a Settings,
    /// How often the executor looks (the provider's poll interval).
    pub poll: std::time::Duration,
}

/// The latency distributions a forecast draws from, and where they came from.
#[derive(Clone, Debug)]
pub struct Latencies {
    pub sim: SimProvider,
    /// The steps drawn from the pool's history: each run draws its own
    /// lognormal from what these samples allow (see [`Fitted::draw`]), so
    /// a forecast resting on a few samples carries their uncertainty.
    pub fitted: Fitted,
    /// Said in the output: `history (...)`, `simulator ...`, `defaults`.
    pub source: String,
    pub warnings: Vec<String>,
}

/// The history a forecast's steps are fitted to, per kind of step.
#[derive(Clone, Debug, Default)]
pub struct Fitted {
    pub boot: Option<LogSummary>,
    pub drain: Option<LogSummary>,
    pub terminate: Option<LogSummary>,
}

impl Fitted {
    /// One run's latencies: for each step fitted to history, a lognormal
    /// whose parameters are drawn from their posterior given the samples
    /// (the log-seconds' mean and variance, with the reference prior: the
    /// variance scaled by a chi-squared of n-1 degrees of freedom, the mean
    /// normal around the samples' mean with that variance over n). Few
    /// samples give a wide spread of runs; many give the fit itself.
    pub fn draw(&self, base: &SimProvider, seed: u64) -> SimProvider {
        use rand::{RngExt, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ 0x9e37_79b9_7f4a_7c15);
        let mut one = |s: &LogSummary| -> Distribution {
            let n = s.count.max(2) as f64;
            let var = s.sigma().powi(2);
            let chi: f64 = rand_distr::ChiSquared::new(n - 1.0)
                .map_or(n - 1.0, |d| rng.sample(d))
                .max(1e-9);
            let sigma2 = ((n - 1.0) * var / chi).min(25.0);
            let z: f64 = rng.sample(rand_distr::StandardNormal);
            let mu = s.mean_ln + z * (sigma2 / n).sqrt();
            Distribution::Lognormal {
                median: Duration(std::time::Duration::from_secs_f64(
                    mu.exp().clamp(0.001, 1e7),
                )),
                sigma: sigma2.sqrt().clamp(0.0, 5.0),
            }
        };
        let mut out = base.clone();
        if let Some(b) = &self.boot {
            out.boot_time = one(b);
        }
        if let Some(d) = &self.drain {
            out.drain_time = one(d);
        }
        if let Some(t) = &self.terminate {
            out.terminate_time = one(t);
        }
        out
    }

    fn is_empty(&self) -> bool {
        self.boot.is_none() && self.drain.is_none() && self.terminate.is_none()
    }
}

fn lognormal(s: &LogSummary) -> Distribution {
    Distribution::Lognormal {
        median: Duration(std::time::Duration::from_secs_f64(
            s.median_seconds().clamp(0.001, 1e7),
        )),
        sigma: s.sigma().clamp(0.0, 5.0),
    }
}

/// A distribution as a simulator at `speed` runs it (in real seconds).
fn scaled(d: &Distribution, speed: f64) -> Distribution {
    let by = |x: &Duration| {
        Duration(std::time::Duration::from_secs_f64(
            (x.as_std().as_secs_f64() / speed).clamp(0.0, 1e9),
        ))
    };
    match d {
        Distribution::Fixed(x) => Distribution::Fixed(by(x)),
        Distribution::Uniform { min, max } => Distribution::Uniform {
            min: by(min),
            max: by(max),
        },
        Distribution::Lognormal { median, sigma } => Distribution::Lognormal {
            median: by(median),
            sigma: *sigma,
        },
    }
}

impl Latencies {
    /// The pool's own history where it has enough samples, else the
    /// simulator's declared distributions (for a pool on the simulator),
    /// else the defaults, with a warning that the forecast is uninformed.
    pub fn choose(history: Option<&PoolLatencies>, sim: Option<&SimProvider>) -> Latencies {
        let speed = sim
            .and_then(|s| s.speed.as_ref())
            .map_or(1.0, |s| s.value)
            .max(0.001);
        let base = sim.cloned().unwrap_or_default();
        let fallback = |d: &Distribution| scaled(d, if sim.is_some() { speed } else { 1.0 });
        let mut out = SimProvider {
            seed: 0,
            speed: None,
            boot_time: fallback(&base.boot_time),
            health_delay: fallback(&base.health_delay),
            drain_time: fallback(&base.drain_time),
            terminate_time: fallback(&base.terminate_time),
            // One pool is copied: a provider-wide quota does not apply.
            quota: None,
            failures: if sim.is_some() {
                base.failures.clone()
            } else {
                Default::default()
            },
            // New nodes land where the real provider would put them: in
            // the simulator's zones, with its labels (a copied node keeps
            // its own).
            zones: base.zones.clone(),
            node_labels: base.node_labels.clone(),
            images: Vec::new(),
        };
        let mut from_history = Vec::new();
        let mut fitted = Fitted::default();
        if let Some(h) = history {
            // A boot is observed as one span, from the create request to
            // healthy (never to the end of minReady, which the run waits
            // itself): it stands for boot and health delay together.
            if h.boot.count >= MIN_SAMPLES {
                out.boot_time = lognormal(&h.boot);
                out.health_delay = Distribution::Fixed(Duration::ZERO);
                fitted.boot = Some(h.boot);
                from_history.push(format!("boot n={}", h.boot.count));
            }
            if h.drain.count >= MIN_SAMPLES {
                out.drain_time = lognormal(&h.drain);
                fitted.drain = Some(h.drain);
                from_history.push(format!("drain n={}", h.drain.count));
            }
            if h.terminate.count >= MIN_SAMPLES {
                out.terminate_time = lognormal(&h.terminate);
                fitted.terminate = Some(h.terminate);
                from_history.push(format!("terminate n={}", h.terminate.count));
            }
        }
        let rest = if sim.is_some() {
            "the simulator's declared distributions"
        } else {
            "the defaults"
        };
        let mut warnings = Vec::new();
        let source = match (from_history.len(), sim.is_some()) {
            (3, _) => format!("the pool's history ({})", from_history.join(", ")),
            (0, true) => rest.to_string(),
            (0, false) => {
                warnings.push(format!(
                    "uninformed: the pool has fewer than {MIN_SAMPLES} past samples of each step \
                     and no simulator declares its latencies; the defaults (boot lognormal \
                     median 45s, health 10s, drain 20s, terminate 5s) were used"
                ));
                rest.to_string()
            }
            (_, _) => format!(
                "the pool's history ({}), else {rest}",
                from_history.join(", ")
            ),
        };
        Latencies {
            sim: out,
            fitted,
            source,
            warnings,
        }
    }
}

/// One point of a capacity curve: seconds from the start, live nodes and
/// available nodes as the executor counts them.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Point {
    pub t: f64,
    pub total: u32,
    pub available: u32,
}

/// How one run went.
#[derive(Clone, Debug)]
pub struct RunOutcome {
    pub seconds: f64,
    pub status: Status,
    pub min_available: u32,
    pub max_total: u32,
    /// Node-seconds above the desired size (what surge costs).
    pub extra_node_seconds: f64,
    /// Held by the disruption policy until then (the first hold).
    pub held_until: Option<Timestamp>,
    /// The window closed after the roll had begun: the rest waited until
    /// the next opening (then).
    pub rest_waited_until: Option<Timestamp>,
    /// Seconds from the start to the roll's first step (a held roll's
    /// wait for its window).
    pub began_after: f64,
    /// Stopped at the horizon without finishing.
    pub unfinished: bool,
    pub curve: Vec<Point>,
    /// How many times the executor looked at the pool (what a run costs).
    pub looks: u32,
}

/// Run the executor once on a copy of the pool, drawing latencies with `seed`.
pub async fn run_once(
    case: &Case<'_>,
    latencies: &SimProvider,
    seed: u64,
    start: Timestamp,
) -> anyhow::Result<RunOutcome> {
    run(case, latencies, seed, start, Looks::InFlight, None)
        .await?
        .ok_or_else(|| anyhow::anyhow!("a run with no deadline was cut short"))
}

/// No run of a forecast finished within its time limit.
#[derive(Debug, thiserror::Error)]
#[error(
    "no run of {pool}'s roll finished within the time limit ({seconds:.0}s; the pool has {nodes} nodes): allow more time (--time-limit), or fewer runs"
)]
pub struct OutOfTime {
    pub pool: String,
    pub nodes: usize,
    pub seconds: f64,
}

/// What bounds a forecast's work (not only the waiting for it).
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// No run starts after this, and a run under way is given up at its next
    /// look: a run over a very large pool can take minutes on its own.
    pub deadline: Option<std::time::Instant>,
    /// Threads the runs share (at most 2).
    pub threads: u32,
}

impl Limits {
    /// Both cores, no deadline.
    pub fn none() -> Limits {
        Limits {
            deadline: None,
            threads: 2,
        }
    }

    fn passed(&self) -> bool {
        self.deadline
            .is_some_and(|d| std::time::Instant::now() >= d)
    }
}

/// How each look observes the pool and decides.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Looks {
    /// Told only what changed; the quiet nodes counted, not visited.
    InFlight,
    /// The whole pool described and every node visited, at every look: the
    /// reference the tests hold the first to (the same run, slower).
    #[cfg(test)]
    EveryNode,
}

async fn run(
    case: &Case<'_>,
    latencies: &SimProvider,
    seed: u64,
    start: Timestamp,
    looks: Looks,
    deadline: Option<std::time::Instant>,
) -> anyhow::Result<Option<RunOutcome>> {
    let clock = Arc::new(ManualClock::new(start));
    let settings = SimProvider {
        seed,
        ..latencies.clone()
    };
    let sim = Arc::new(Sim::open(
        "forecast",
        &settings,
        None,
        clock.clone() as Arc<dyn Clock>,
    )?);
    sim.copy_of(case.pool);
    let name = case.pool.name.clone();
    let journal = Journal::memory(None);
    let events = EventSink::none();
    let provider: Arc<dyn Provider> = sim.clone();
    let mut exec = Executor::start(
        &name,
        case.target.clone(),
        case.settings.clone(),
        provider,
        Arc::new(SimDrainer::new(sim.clone())),
        &journal,
        &events,
        clock.as_ref(),
    )
    .await?;
    match looks {
        Looks::InFlight => exec.observe_changes_with(sim.clone()),
        #[cfg(test)]
        Looks::EveryNode => exec.visit_every_node(),
    }
    let poll = SignedDuration::try_from(case.poll)
        .unwrap_or(SignedDuration::from_secs(1))
        .max(SignedDuration::from_millis(10));
    let size = case.settings.size;
    let mut out = RunOutcome {
        seconds: 0.0,
        status: Status::Running,
        min_available: u32::MAX,
        max_total: 0,
        extra_node_seconds: 0.0,
        held_until: None,
        rest_waited_until: None,
        began_after: 0.0,
        unfinished: false,
        curve: Vec::new(),
        looks: 0,
    };
    let mut begun = false;
    let mut last: Option<Point> = None;
    loop {
        if deadline.is_some_and(|d| std::time::Instant::now() >= d) {
            return Ok(None);
        }
        let before = sim.mutations();
        let tick = exec.tick().await?;
        out.looks += 1;
        let now = clock.now();
        let t = now.duration_since(start).as_secs_f64();
        // What the executor counts (live nodes, and those available by its
        // rule) and when a node's minReady ends, from its index of the pool
        // observed again after its calls: the quiet nodes (available, settled)
        // counted, only the others visited.
        exec.observe_now().await?;
        let (s, index) = (&exec.state, exec.index());
        let (quiet, visited): (u32, Box<dyn Iterator<Item = &crate::model::Node>>) = match looks {
            Looks::InFlight => (
                index.quiet_old() + index.quiet_new(),
                Box::new(index.each_listed()),
            ),
            #[cfg(test)]
            Looks::EveryNode => (0, Box::new(index.nodes())),
        };
        let (mut total, mut available) = (quiet, quiet);
        let mut ready_at: Option<Timestamp> = None;
        // The core's own rule (`is_available`), with its lookups made once.
        let marked = Marked::of(&s.marks);
        let ready = Ready::at(s.target, s.settings.min_ready, now);
        let count_terminating = s.settings.count_terminating;
        for n in visited {
            if n.state == crate::model::NodeState::Terminating {
                // What the bound counts: with countTerminating, these too.
                total += u32::from(count_terminating);
                continue;
            }
            total += 1;
            available += u32::from(!marked.contains(&n.id) && ready.is(n));
            if let Some(end) = n.healthy_since.and_then(|h| ready.ends(h)) {
                ready_at = Some(ready_at.map_or(end, |r| r.min(end)));
            }
        }
        let next_change = match looks {
            Looks::InFlight => sim.next_change(&name, now),
            #[cfg(test)]
            Looks::EveryNode => sim.next_change_of_any(&name, now),
        };
        let Some(next_change) = next_change else {
            anyhow::bail!("the simulated copy of {name} vanished");
        };
        if let Some(p) = last {
            out.extra_node_seconds += f64::from(p.total.saturating_sub(size)) * (t - p.t);
        }
        out.min_available = out.min_available.min(available);
        out.max_total = out.max_total.max(total);
        let point = Point {
            t,
            total,
            available,
        };
        if last.is_none_or(|p| (p.total, p.available) != (total, available)) {
            out.curve.push(point);
        }
        last = Some(point);
        let waiting = match tick {
            Tick::Finished(status) => {
                out.status = status;
                break;
            }
            Tick::Continue { waiting } => waiting,
        };
        out.status = exec.state.status.clone();
        let stopped = matches!(out.status, Status::Degraded { .. } | Status::Paused { .. });
        if stopped && !exec.in_flight() {
            break;
        }
        // The next look: the first at which something can have changed. A
        // round that acted changed what the next one sees: look at once.
        let acted = sim.mutations() != before;
        // The roll has begun once the policy no longer holds it (at once,
        // but for a roll held until its window opens; an override or a
        // change the policy does not cover is not held).
        let gate = crate::policy::gate(&s.settings.disruption, now);
        if !begun && !s.blocked_by_policy {
            begun = true;
            out.began_after = t;
        }
        let mut due = vec![now.saturating_add(MAX_SKIP).unwrap_or(now)];
        if acted {
            due.push(now);
        }
        due.extend(next_change);
        due.extend(ready_at);
        // The core's own timers (a bake's end, a timeout, a window): met at
        // the look they fire at, as a real apply meets them.
        let unsettled: Box<dyn Iterator<Item = &crate::model::Node>> = match looks {
            Looks::InFlight => Box::new(index.each_listed()),
            #[cfg(test)]
            Looks::EveryNode => Box::new(index.nodes()),
        };
        due.extend(crate::rollout::decide::timers::next(s, unsettled, now));
        for (id, mark) in &s.marks {
            if let Mark::Draining { since, .. } = mark {
                let (d, blocked) = sim.drain_profile(id);
                if !blocked && let Ok(end) = since.checked_add(d) {
                    due.push(end.max(now));
                }
            }
        }
        if waiting.is_some()
            && s.blocked_by_policy
            && let crate::policy::Gate::Closed { opens, .. } = gate
        {
            if !begun {
                out.held_until = out.held_until.or(opens);
            } else if out.rest_waited_until.is_none() {
                out.rest_waited_until = opens;
            }
            if !exec.in_flight() {
                match opens {
                    // Nothing moves until the window opens.
                    Some(o) => due = vec![o],
                    None => {
                        out.unfinished = true;
                        break;
                    }
                }
            }
        }
        let next = due.into_iter().min().unwrap_or(now).max(now);
        // On the grid of looks: start + k * poll, k > what has passed.
        let polls = (next.duration_since(start).as_secs_f64() / poll.as_secs_f64()).ceil();
        let at_least = (t / poll.as_secs_f64()).floor() + 1.0;
        let k = polls.max(at_least);
        let next = start
            .saturating_add(
                SignedDuration::try_from_secs_f64(k * poll.as_secs_f64())
                    .unwrap_or(SignedDuration::MAX),
            )
            .unwrap_or(now);
        if next.duration_since(start) > HORIZON {
            out.unfinished = true;
            break;
        }
        clock.set(next);
    }
    out.seconds = clock.now().duration_since(start).as_secs_f64();
    if out.min_available == u32::MAX {
        out.min_available = 0;
    }
    Ok(Some(out))
}

/// Percentiles by nearest rank over sorted values.
pub fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

#[derive(Clone, Copy, Debug, Serialize, PartialEq)]
pub struct Spread {
    pub p10: f64,
    pub p50: f64,
    pub p90: f64,
}

impl Spread {
    /// The p10, p50 and p90 of these values.
    pub fn of(mut v: Vec<f64>) -> Spread {
        v.sort_by(f64::total_cmp);
        Spread {
            p10: percentile(&v, 0.1),
            p50: percentile(&v, 0.5),
            p90: percentile(&v, 0.9),
        }
    }
}

/// A pool's forecast.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Forecast {
    pub pool: String,
    pub runs: u32,
    pub seed: u64,
    pub latency_source: String,
    pub warnings: Vec<String>,
    pub start: Timestamp,
    pub surge: u32,
    pub unavailable: u32,
    /// The bounds every run must keep: the floor is size - unavailable, or
    /// the availability at the start when lower (a pool still booting).
    pub floor: u32,
    pub max_total_bound: u32,
    pub duration_seconds: Spread,
    pub finish: FinishTimes,
    /// The first hold by the disruption policy (in the median run).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held_until: Option<Timestamp>,
    /// A held roll: how long it takes once its window opens.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rolling_seconds: Option<Spread>,
    /// Share of runs in which the window closed before the roll finished.
    pub window_risk: f64,
    /// In those runs, when the rest went on (the median of the next
    /// openings).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rest_waits_until: Option<Timestamp>,
    /// Lowest availability and most nodes over every run.
    pub min_available: u32,
    pub max_total: u32,
    pub extra_node_hours: Spread,
    /// Share of runs that stopped Degraded on `progressDeadline`.
    pub deadline_risk: f64,
    /// Share of runs that stopped otherwise without finishing (failures,
    /// a pause, the horizon).
    pub failed_risk: f64,
    /// The median run's capacity over time.
    pub capacity: Vec<Point>,
    /// Each run's duration in seconds, in run order (what a change across
    /// pools is laid out from).
    #[serde(skip)]
    pub samples: Vec<f64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct FinishTimes {
    pub p50: Timestamp,
    pub p90: Timestamp,
}

/// Run `runs` seeded runs on two threads and summarize them.
pub fn forecast(
    case: &Case<'_>,
    latencies: &Latencies,
    runs: u32,
    seed: u64,
    start: Timestamp,
) -> anyhow::Result<Forecast> {
    forecast_within(case, latencies, runs, seed, start, Limits::none())
}

/// As [`forecast`], within `limits`: past the deadline no run starts and
/// the run under way is given up, so a large pool gets a rougher forecast
/// in bounded time (and says how many runs it rests on), or none.
pub fn forecast_within(
    case: &Case<'_>,
    latencies: &Latencies,
    runs: u32,
    seed: u64,
    start: Timestamp,
    limits: Limits,
) -> anyhow::Result<Forecast> {
    let began = std::time::Instant::now();
    let runs = runs.clamp(1, MAX_RUNS);
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, limits.threads.clamp(1, 2) as usize) as u32;
    let results: Vec<anyhow::Result<Vec<(u32, RunOutcome)>>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|w| {
                scope.spawn(move || {
                    let rt = tokio::runtime::Builder::new_current_thread().build()?;
                    let mut mine = Vec::new();
                    for i in (w..runs).step_by(threads as usize) {
                        if limits.passed() {
                            break;
                        }
                        let s = seed.wrapping_mul(1_000_003).wrapping_add(u64::from(i));
                        let drawn;
                        let sim = if latencies.fitted.is_empty() {
                            &latencies.sim
                        } else {
                            drawn = latencies.fitted.draw(&latencies.sim, s);
                            &drawn
                        };
                        let run = run(case, sim, s, start, Looks::InFlight, limits.deadline);
                        match rt.block_on(run)? {
                            Some(outcome) => mine.push((i, outcome)),
                            None => break,
                        }
                    }
                    Ok(mine)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("a forecast thread panicked")))
            })
            .collect()
    });
    let mut all = Vec::with_capacity(runs as usize);
    for r in results {
        all.extend(r?);
    }
    all.sort_by_key(|(i, _)| *i);
    let outcomes: Vec<RunOutcome> = all.into_iter().map(|(_, o)| o).collect();
    let spent = began.elapsed().as_secs_f64();
    if outcomes.is_empty() {
        return Err(OutOfTime {
            pool: case.pool.name.clone(),
            nodes: case.pool.nodes.len(),
            seconds: spent,
        }
        .into());
    }
    let mut f = summarize(case, latencies, &outcomes, seed, start);
    if f.runs < runs {
        f.warnings.push(format!(
            "only {} of {runs} runs finished within the time limit (after {spent:.0}s): the percentiles are rougher, and depend on this machine's speed",
            f.runs,
        ));
    }
    Ok(f)
}

fn summarize(
    case: &Case<'_>,
    latencies: &Latencies,
    outcomes: &[RunOutcome],
    seed: u64,
    start: Timestamp,
) -> Forecast {
    let n = outcomes.len().max(1) as f64;
    let durations = Spread::of(outcomes.iter().map(|o| o.seconds).collect());
    let at = |secs: f64| {
        start
            .saturating_add(SignedDuration::try_from_secs_f64(secs).unwrap_or(SignedDuration::MAX))
            .unwrap_or(start)
    };
    // The median run: the one whose duration is the median's.
    let median = outcomes
        .iter()
        .min_by(|a, b| {
            (a.seconds - durations.p50)
                .abs()
                .total_cmp(&(b.seconds - durations.p50).abs())
        })
        .cloned();
    let deadline = outcomes
        .iter()
        .filter(|o| matches!(&o.status, Status::Degraded { reason } if reason.contains("progressDeadline")))
        .count();
    let failed = outcomes
        .iter()
        .filter(|o| o.status != Status::Completed)
        .count()
        - deadline;
    let s = case.settings;
    Forecast {
        pool: case.pool.name.clone(),
        runs: outcomes.len() as u32,
        seed,
        latency_source: latencies.source.clone(),
        warnings: latencies.warnings.clone(),
        start,
        surge: s.budget.surge,
        unavailable: s.budget.unavailable,
        // The executor's floor: size - unavailable, or what was available
        // at the start when that is less (it only ratchets up from there).
        floor: outcomes
            .iter()
            .filter_map(|o| o.curve.first().map(|p| p.available))
            .min()
            .unwrap_or(u32::MAX)
            .min(s.size.saturating_sub(s.budget.unavailable)),
        max_total_bound: s.size.saturating_add(s.budget.surge),
        finish: FinishTimes {
            p50: at(durations.p50),
            p90: at(durations.p90),
        },
        duration_seconds: durations,
        held_until: median.as_ref().and_then(|m| m.held_until),
        rolling_seconds: outcomes.iter().any(|o| o.held_until.is_some()).then(|| {
            Spread::of(
                outcomes
                    .iter()
                    .map(|o| (o.seconds - o.began_after).max(0.0))
                    .collect(),
            )
        }),
        window_risk: outcomes
            .iter()
            .filter(|o| o.rest_waited_until.is_some())
            .count() as f64
            / n,
        rest_waits_until: {
            let mut v: Vec<Timestamp> = outcomes
                .iter()
                .filter_map(|o| o.rest_waited_until)
                .collect();
            v.sort();
            v.get(v.len() / 2).copied()
        },
        min_available: outcomes.iter().map(|o| o.min_available).min().unwrap_or(0),
        max_total: outcomes.iter().map(|o| o.max_total).max().unwrap_or(0),
        extra_node_hours: Spread::of(
            outcomes
                .iter()
                .map(|o| o.extra_node_seconds / 3600.0)
                .collect(),
        ),
        deadline_risk: deadline as f64 / n,
        failed_risk: failed as f64 / n,
        capacity: median.map(|m| m.curve).unwrap_or_default(),
        samples: outcomes.iter().map(|o| o.seconds).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run over a large pool takes minutes on its own: the deadline ends
    /// the work under way, not only the starting of runs (a page request
    /// or `--time-limit` once left a run going for minutes after it).
    #[test]
    fn the_deadline_gives_up_the_run_under_way() {
        use crate::model::{Node, NodeState};
        use crate::rollout::decide::fixtures;
        let start = fixtures::t0();
        let (old, new) = (fixtures::old(), fixtures::new());
        let pool = ObservedPool {
            name: "big".into(),
            size: 20_000,
            autoscaling: None,
            template: old.clone(),
            in_place: Default::default(),
            nodes: (0..20_000)
                .map(|i| Node {
                    id: format!("big-{i:05}").into(),
                    template: old.hash(),
                    state: NodeState::Healthy,
                    launched_at: start,
                    healthy_since: Some(start),
                    cordoned: false,
                    provider_id: None,
                    zone: None,
                    labels: Default::default(),
                })
                .collect(),
        };
        let settings = fixtures::settings(20_000, 1, 0);
        let case = Case {
            pool: &pool,
            target: &new,
            settings: &settings,
            poll: std::time::Duration::from_secs(1),
        };
        let latencies = Latencies::choose(None, Some(&SimProvider::default()));
        let began = std::time::Instant::now();
        let limits = Limits {
            deadline: Some(began + std::time::Duration::from_millis(500)),
            threads: 1,
        };
        let e = forecast_within(&case, &latencies, 50, 1, start, limits).unwrap_err();
        let took = began.elapsed();
        assert!(e.is::<OutOfTime>(), "{e:#}");
        assert!(e.to_string().contains("20000 nodes"), "{e}");
        // Given up at the next look, not after the roll's 20,000 replacements.
        assert!(took < std::time::Duration::from_secs(5), "took {took:?}");
    }

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<f64> = (1..=10).map(f64::from).collect();
        assert_eq!(percentile(&v, 0.1), 1.0);
        assert_eq!(percentile(&v, 0.5), 5.0);
        assert_eq!(percentile(&v, 0.9), 9.0);
        assert_eq!(percentile(&[], 0.5), 0.0);
    }

    /// A forecast told only what changed, counting the quiet nodes, runs
    /// exactly as one that describes the whole pool and visits every node
    /// at every look: the same durations, the same curve, the same number
    /// of looks, over budgets, a canary, waves, minReady, a scale down and
    /// a scale up, nodes that never become healthy (with a rollback) and
    /// drains a PodDisruptionBudget blocks.
    #[test]
    fn told_only_what_changed_a_run_is_the_run_that_visits_every_node() {
        use crate::model::{Node, NodeState};
        use crate::rollout::decide::fixtures;
        use crate::spec::types::OnFailure;
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let start = fixtures::t0();
        let nodes = |n: u32, template: &NodeTemplate| -> Vec<Node> {
            (0..n)
                .map(|i| Node {
                    id: format!("web-{i:05}").into(),
                    template: template.hash(),
                    state: if i % 9 == 4 {
                        NodeState::Pending
                    } else {
                        NodeState::Healthy
                    },
                    launched_at: start,
                    healthy_since: (i % 9 != 4).then_some(start),
                    cordoned: false,
                    provider_id: None,
                    zone: None,
                    labels: Default::default(),
                })
                .collect()
        };
        let (old, new) = (fixtures::old(), fixtures::new());
        // (size, surge, unavailable, minReady, canary, waves, rollback,
        // nodes, failing): failing nodes never become healthy, or have
        // their drain blocked, now and then.
        let cases = [
            (30, 1, 0, 0, false, false, false, 30, false),
            (30, 3, 0, 10, false, false, false, 30, false),
            (30, 0, 2, 0, true, false, false, 30, false),
            (30, 2, 2, 30, false, true, false, 30, false),
            (20, 2, 1, 10, false, false, false, 30, false),
            (36, 4, 0, 10, true, false, false, 30, false),
            (30, 3, 1, 10, false, false, true, 30, true),
            (30, 1, 1, 0, false, false, false, 30, true),
        ];
        let mut statuses = std::collections::BTreeSet::new();
        for (k, (size, surge, unavailable, min_ready, canary, waves, rollback, n, failing)) in
            cases.into_iter().enumerate()
        {
            let mut latencies = SimProvider::default();
            if failing {
                latencies.failures.never_healthy = 0.03;
                latencies.failures.drain_blocked = 0.01;
            }
            let pool = ObservedPool {
                name: "web".into(),
                size: n,
                autoscaling: None,
                template: old.clone(),
                in_place: Default::default(),
                nodes: nodes(n, &old),
            };
            let mut settings = fixtures::settings(size, surge, unavailable);
            settings.min_ready = Duration::secs(min_ready);
            settings.canary = canary;
            settings.waves = waves;
            settings.max_failed_nodes = 4;
            settings.drain_timeout = Duration::secs(300);
            if rollback {
                settings.on_failure = OnFailure::Rollback;
            }
            let case = Case {
                pool: &pool,
                target: &new,
                settings: &settings,
                poll: std::time::Duration::from_secs(1),
            };
            for seed in 0..5 {
                let seed = seed + 10 * k as u64;
                let quick = rt
                    .block_on(run(&case, &latencies, seed, start, Looks::InFlight, None))
                    .unwrap()
                    .unwrap();
                let every = rt
                    .block_on(run(&case, &latencies, seed, start, Looks::EveryNode, None))
                    .unwrap()
                    .unwrap();
                let key = |o: &RunOutcome| {
                    format!(
                        "{} {:?} {} {} {} {:?} {} {} {:?}",
                        o.seconds,
                        o.status,
                        o.min_available,
                        o.max_total,
                        o.extra_node_seconds,
                        o.held_until,
                        o.unfinished,
                        o.looks,
                        o.curve
                    )
                };
                assert_eq!(key(&quick), key(&every), "case {k}, seed {seed}");
                statuses.insert(
                    format!("{:?}", quick.status)
                        .chars()
                        .take(8)
                        .collect::<String>(),
                );
            }
        }
        // Runs that finished, and runs a failure stopped.
        assert_eq!(statuses.len(), 2, "{statuses:?}");
    }

    #[test]
    fn history_wins_where_it_has_enough_samples() {
        let mut h = PoolLatencies::default();
        for x in [40.0, 50.0, 60.0, 70.0, 80.0] {
            h.boot.add(x);
        }
        let l = Latencies::choose(Some(&h), None);
        assert!(l.source.contains("boot n=5"), "{}", l.source);
        assert!(l.source.contains("else the defaults"), "{}", l.source);
        assert!(l.warnings.is_empty());
        let none = Latencies::choose(None, None);
        assert!(none.warnings[0].contains("uninformed"));
        let sim = SimProvider {
            speed: Some(crate::spec::located::At::bare(10.0)),
            drain_time: Distribution::Fixed(Duration::secs(20)),
            ..SimProvider::default()
        };
        let l = Latencies::choose(None, Some(&sim));
        assert_eq!(l.sim.drain_time, Distribution::Fixed(Duration::secs(2)));
        assert_eq!(l.source, "the simulator's declared distributions");
    }
}
