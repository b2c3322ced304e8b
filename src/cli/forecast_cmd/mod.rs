//! `poolwright forecast` (and `plan --forecast`): for every pool the plan
//! would roll, how long the roll takes, when it finishes on the wall clock
//! (waits for maintenance windows included), the lowest availability and the
//! most nodes it reaches, what surge costs in node-hours and how likely it is
//! to hit `progressDeadline`; `--sweep` compares budgets, `--set` tries one
//! without editing files, `--svg` draws capacity over time.

use crate::spec::values::InvalidValue;
use std::fmt::Write as _;
use std::path::Path;

use jiff::Timestamp;

use super::snapshot::{Planned, Snapshot, load_and_plan};
use super::{Common, Output, exit};
use crate::plan;
use crate::reconcile::forecast::{self, Case, Forecast, Latencies};
use crate::rollout::{Budget, Settings};
use crate::spec::Config;
use crate::spec::types::ProviderSpec;
use crate::spec::values::IntOrPercent;
use crate::store::StateDir;
use crate::store::latency::LatencyStore;

mod queued;
mod svg;

/// How a forecast is asked for.
pub struct Request {
    pub runs: u32,
    pub seed: u64,
    pub sweep: bool,
    /// `POOL.rollout.maxSurge=V` / `POOL.rollout.maxUnavailable=V`.
    pub set: Vec<String>,
    pub svg: Option<std::path::PathBuf>,
    /// Only these pools (all rolled pools when empty).
    pub pools: Vec<String>,
    /// When the command stops forecasting, whatever it is doing (from
    /// `--time-limit`, counted from the start of the command).
    pub deadline: Option<std::time::Instant>,
}

/// One `--set`: a budget of one pool, as it would be written.
#[derive(Debug, PartialEq)]
struct SetBudget {
    pool: String,
    surge: Option<IntOrPercent>,
    unavailable: Option<IntOrPercent>,
}

fn parse_sets(sets: &[String], config: &Config) -> Result<Vec<SetBudget>, InvalidValue> {
    let mut out: Vec<SetBudget> = Vec::new();
    for s in sets {
        let (key, value) = s.split_once('=').ok_or_else(|| {
            InvalidValue(format!("--set {s:?}: expected POOL.rollout.maxSurge=VALUE"))
        })?;
        let (pool, field) = key.split_once('.').ok_or_else(|| {
            InvalidValue(format!(
                "--set {s:?}: expected POOL.rollout.maxSurge or POOL.rollout.maxUnavailable"
            ))
        })?;
        // A pool's name is a DNS label: anything else (`../../etc`, which
        // the first dot splits into "") is said as what it is.
        if !crate::spec::validate::is_dns_label(pool, 63) {
            let shown: String = key.chars().take(80).collect();
            return Err(InvalidValue(format!(
                "--set {s:?}: {shown:?} does not start with a pool name (lowercase letters, digits and '-', at most 63) followed by .rollout.maxSurge or .rollout.maxUnavailable"
            )));
        }
        if !config.pools.contains_key(pool) {
            return Err(InvalidValue(format!(
                "--set {s:?}: no pool named {pool:?} in the desired state"
            )));
        }
        let v = value.trim();
        let parsed = match v.parse::<i64>() {
            Ok(n) => IntOrPercent::Int(n),
            Err(_) => {
                IntOrPercent::parse(v).map_err(|e| InvalidValue(format!("--set {s:?}: {e}")))?
            }
        };
        let (n, pct) = match parsed {
            IntOrPercent::Int(n) => (n, false),
            IntOrPercent::Percent(p) => (p, true),
        };
        if n < 0 || (!pct && n > 100_000) || (pct && n > 100) {
            return Err(InvalidValue(format!(
                "--set {s:?}: must be 0 to 100000, or 0% to 100%"
            )));
        }
        let entry = match out.iter_mut().find(|b| b.pool == pool) {
            Some(e) => e,
            None => {
                out.push(SetBudget {
                    pool: pool.to_string(),
                    surge: None,
                    unavailable: None,
                });
                out.last_mut().expect("just pushed")
            }
        };
        match field {
            "rollout.maxSurge" => entry.surge = Some(parsed),
            "rollout.maxUnavailable" => entry.unavailable = Some(parsed),
            other => {
                return Err(InvalidValue(format!(
                    "--set {s:?}: {other:?} cannot be set; use rollout.maxSurge or rollout.maxUnavailable"
                )));
            }
        }
    }
    Ok(out)
}

/// The roll's settings with a budget as written (resolved the pool's way).
fn with_budget(
    settings: &Settings,
    config: &Config,
    pool: &str,
    surge: Option<IntOrPercent>,
    unavailable: Option<IntOrPercent>,
) -> Result<Settings, InvalidValue> {
    let Some(entry) = config.pools.get(pool) else {
        return Ok(settings.clone());
    };
    let mut rollout = entry.doc.spec.rollout.clone();
    if let Some(s) = surge {
        rollout.max_surge = Some(crate::spec::located::At::bare(s));
        rollout.max_expansion = None;
    }
    if let Some(u) = unavailable {
        rollout.max_unavailable = Some(crate::spec::located::At::bare(u));
    }
    let surge_zero = rollout
        .max_surge
        .as_ref()
        .is_some_and(|s| s.value.is_zero());
    let unavailable_zero = rollout
        .max_unavailable
        .as_ref()
        .is_none_or(|u| u.value.is_zero());
    if surge_zero && unavailable_zero {
        return Err(InvalidValue(format!(
            "{pool}: maxSurge and maxUnavailable cannot both be 0 (nothing could be replaced)"
        )));
    }
    Ok(Settings {
        budget: Budget::resolve(&rollout, settings.size),
        ..settings.clone()
    })
}

/// A rolled pool, ready to forecast.
#[derive(Clone)]
struct Rolled {
    pool: String,
    observed: crate::model::ObservedPool,
    target: crate::model::NodeTemplate,
    settings: Settings,
    poll: std::time::Duration,
    latencies: Latencies,
    timezone: Option<String>,
}

fn rolled_pools(
    config: &Config,
    snap: &Snapshot,
    observed: &plan::Observed,
    plan: &plan::Plan,
    state: &StateDir,
    only: &[String],
) -> Vec<Rolled> {
    let history = LatencyStore::new(&state.root);
    let mut out = Vec::new();
    for p in &plan.pools {
        if !only.is_empty() && !only.contains(&p.pool) {
            continue;
        }
        // The roll due now, or the one the disruption policy holds until
        // its window opens (forecast from the opening).
        let Some((template, settings)) = p.roll().map(|(t, s)| (t.clone(), s.clone())) else {
            continue;
        };
        let Some(observed) = observed.pools.get(&p.pool) else {
            continue;
        };
        let sim = config
            .providers
            .get(&p.provider)
            .and_then(|e| match &e.doc.spec.value {
                ProviderSpec::Sim(s) => Some(s),
                _ => None,
            });
        let poll = snap
            .providers
            .get(&p.provider)
            .map_or(std::time::Duration::from_secs(1), |pr| {
                pr.capabilities().poll_interval
            });
        let timezone = settings
            .disruption
            .windows
            .first()
            .map(|w| w.value.timezone.value.clone());
        out.push(Rolled {
            pool: p.pool.clone(),
            observed: observed.clone(),
            target: template,
            latencies: Latencies::choose(history.load(&p.pool).as_ref(), sim),
            settings,
            poll,
            timezone,
        });
    }
    out
}

fn run_one(
    r: &Rolled,
    settings: &Settings,
    req: &Request,
    start: Timestamp,
) -> anyhow::Result<Forecast> {
    let case = Case {
        pool: &r.observed,
        target: &r.target,
        settings,
        poll: r.poll,
    };
    forecast::forecast_within(
        &case,
        &r.latencies,
        req.runs,
        req.seed,
        start,
        forecast::Limits {
            deadline: req.deadline,
            threads: 2,
        },
    )
}

/// One row of a sweep.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct SweepRow {
    pub label: String,
    pub forecast: Forecast,
}

/// The budgets a sweep compares: GKE's three presets, the pool's own, and a
/// few around it (each at most the pool's size).
fn sweep_budgets(own: Budget, size: u32) -> Vec<(String, u32, u32)> {
    let cap = |n: u32| n.min(size.max(1));
    let mut rows = vec![
        ("own".to_string(), own.surge, own.unavailable),
        ("GKE default".to_string(), 1, 0),
        ("GKE no extra cost".to_string(), 0, 1),
        ("GKE fast".to_string(), cap(20), 0),
        (
            "double surge".to_string(),
            cap(own.surge.max(1) * 2),
            own.unavailable,
        ),
        ("half surge".to_string(), own.surge / 2, own.unavailable),
        (
            "one more unavailable".to_string(),
            own.surge,
            cap(own.unavailable + 1),
        ),
    ];
    let mut seen = std::collections::BTreeSet::new();
    rows.retain(|(_, s, u)| (*s > 0 || *u > 0) && seen.insert((*s, *u)));
    rows
}

fn human(secs: f64) -> String {
    let s = secs.round().max(0.0) as u64;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m {:02}s", s / 60, s % 60),
        3600..86400 => format!("{}h {:02}m", s / 3600, (s % 3600) / 60),
        _ => format!("{}d {:02}h", s / 86400, (s % 86400) / 3600),
    }
}

fn local(t: Timestamp, tz: Option<&str>) -> String {
    local_as(t, tz, "%a %-d %b %H:%M %Z")
}

fn local_as(t: Timestamp, tz: Option<&str>, format: &str) -> String {
    let zone = tz
        .and_then(|z| jiff::tz::TimeZone::get(z).ok())
        .unwrap_or(jiff::tz::TimeZone::UTC);
    t.to_zoned(zone).strftime(format).to_string()
}

fn render(f: &Forecast, tz: Option<&str>, out: &mut String) {
    let _ = writeln!(
        out,
        "nodepool.{}: surge {}, unavailable {} (floor {}, max total {})",
        f.pool, f.surge, f.unavailable, f.floor, f.max_total_bound
    );
    let d = &f.duration_seconds;
    // A short roll's finish times differ by seconds.
    let finish = |t| {
        if d.p90 < 600.0 {
            local_as(t, tz, "%a %-d %b %H:%M:%S %Z")
        } else {
            local(t, tz)
        }
    };
    let _ = writeln!(
        out,
        "  duration      p50 {}, p90 {} (p10 {}){}",
        human(d.p50),
        human(d.p90),
        human(d.p10),
        if f.held_until.is_some() {
            ", from now"
        } else {
            ""
        }
    );
    let _ = writeln!(
        out,
        "  finishes      p50 {}, p90 {}",
        finish(f.finish.p50),
        finish(f.finish.p90)
    );
    if let Some(h) = f.held_until {
        let rolling = f
            .rolling_seconds
            .map(|r| {
                format!(
                    "; from then it takes p50 {}, p90 {}",
                    human(r.p50),
                    human(r.p90)
                )
            })
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "  held          until {} by the disruption policy{rolling}",
            local(h, tz)
        );
    }
    if f.window_risk > 0.0 {
        let rest = f
            .rest_waits_until
            .map(|t| format!(" and the rest waits until {}", local(t, tz)))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "  window        {:.0}% chance the window closes first{rest}",
            f.window_risk * 100.0
        );
    }
    let ok = |good: bool| if good { "" } else { "  OUTSIDE THE BOUNDS" };
    let _ = writeln!(
        out,
        "  capacity      at least {} available (floor {}), at most {} nodes (bound {}){}",
        f.min_available,
        f.floor,
        f.max_total,
        f.max_total_bound,
        ok(f.min_available >= f.floor && f.max_total <= f.max_total_bound)
    );
    let _ = writeln!(
        out,
        "  surge cost    {:.2} extra node-hours p50, {:.2} p90",
        f.extra_node_hours.p50, f.extra_node_hours.p90
    );
    let _ = writeln!(
        out,
        "  risk          {:.0}% of runs hit progressDeadline, {:.0}% stopped otherwise",
        f.deadline_risk * 100.0,
        f.failed_risk * 100.0
    );
    let _ = writeln!(
        out,
        "  from          {} runs, seed {}, latencies from {}",
        f.runs, f.seed, f.latency_source
    );
    for w in &f.warnings {
        let _ = writeln!(out, "  warning: {w}");
    }
}

fn render_sweep(pool: &str, rows: &[SweepRow], out: &mut String) {
    let _ = writeln!(out, "\nnodepool.{pool}: budget trade-offs");
    let _ = writeln!(
        out,
        "  {:<22} {:>5} {:>5} {:>11} {:>11} {:>13} {:>13}",
        "budget", "surge", "unav", "p50", "p90", "extra node-h", "min available"
    );
    for r in rows {
        let f = &r.forecast;
        let _ = writeln!(
            out,
            "  {:<22} {:>5} {:>5} {:>11} {:>11} {:>13.2} {:>13}",
            r.label,
            f.surge,
            f.unavailable,
            human(f.duration_seconds.p50),
            human(f.duration_seconds.p90),
            f.extra_node_hours.p50,
            f.min_available
        );
    }
}

/// Everything `forecast` found, for `-o json`.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct Report {
    format_version: u32,
    forecasts: Vec<Forecast>,
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    sweeps: std::collections::BTreeMap<String, Vec<SweepRow>>,
    /// Each change across pools: when it reaches every governed pool.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    fleets: Vec<fleet::FleetForecast>,
    /// Each image queued behind a change in flight: when it reaches every
    /// pool of its channel.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    queued: Vec<queued::QueuedForecast>,
}

mod fleet;

/// Forecast the rolls of `plan`; text goes to `out`.
fn forecast_plan(
    config: &Config,
    snap: &Snapshot,
    plan: &plan::Plan,
    state: &StateDir,
    req: &Request,
    now: Timestamp,
) -> anyhow::Result<(Report, String)> {
    let sets = parse_sets(&req.set, config).map_err(|e| anyhow::anyhow!(e))?;
    let rolled = rolled_pools(config, snap, &snap.observed, plan, state, &req.pools);
    let mut report = Report {
        format_version: 1,
        forecasts: Vec::new(),
        sweeps: Default::default(),
        fleets: Vec::new(),
        queued: Vec::new(),
    };
    let mut text = String::new();
    if rolled.is_empty() {
        text.push_str("No roll planned: nothing to forecast.\n");
    }
    let mut curves = Vec::new();
    for (done, r) in rolled.iter().enumerate() {
        let set = sets.iter().find(|s| s.pool == r.pool);
        let settings = match set {
            Some(s) => with_budget(&r.settings, config, &r.pool, s.surge, s.unavailable)
                .map_err(|e| anyhow::anyhow!("--set: {e}"))?,
            None => r.settings.clone(),
        };
        let f = match run_one(r, &settings, req, now) {
            Ok(f) => f,
            // The time limit bounds the whole command: the pools not
            // reached are said, and what was forecast is kept.
            Err(e) if e.is::<forecast::OutOfTime>() => {
                let _ = writeln!(
                    text,
                    "\nThe time limit ended the forecast after {done} of {} pools ({e}).",
                    rolled.len()
                );
                break;
            }
            Err(e) => return Err(e),
        };
        if !text.is_empty() {
            text.push('\n');
        }
        if set.is_some() {
            let _ = writeln!(text, "(what-if: --set)");
        }
        render(&f, r.timezone.as_deref(), &mut text);
        let mut lines = vec![(
            format!("surge {} / unavailable {}", f.surge, f.unavailable),
            f.capacity.clone(),
        )];
        if req.sweep {
            let mut rows = Vec::new();
            let budgets = sweep_budgets(settings.budget, settings.size);
            let asked = budgets.len();
            for (label, s, u) in budgets {
                let st = with_budget(
                    &settings,
                    config,
                    &r.pool,
                    Some(IntOrPercent::Int(i64::from(s))),
                    Some(IntOrPercent::Int(i64::from(u))),
                )
                .map_err(|e| anyhow::anyhow!(e))?;
                match run_one(r, &st, req, now) {
                    Ok(f) => rows.push(SweepRow { label, forecast: f }),
                    // The time limit bounds the whole sweep: the budgets
                    // not reached are said, not waited for.
                    Err(e) if e.is::<forecast::OutOfTime>() => break,
                    Err(e) => return Err(e),
                }
            }
            render_sweep(&r.pool, &rows, &mut text);
            if rows.len() < asked {
                let _ = writeln!(
                    text,
                    "  (the time limit ended the sweep after {} of {asked} budgets: allow more with --time-limit)",
                    rows.len()
                );
            }
            lines = rows
                .iter()
                .map(|row| {
                    (
                        format!(
                            "{} ({} / {})",
                            row.label, row.forecast.surge, row.forecast.unavailable
                        ),
                        row.forecast.capacity.clone(),
                    )
                })
                .collect();
            report.sweeps.insert(r.pool.clone(), rows);
        }
        curves.push((f.clone(), settings.disruption.clone(), lines));
        report.forecasts.push(f);
    }
    if req.pools.is_empty() && req.set.is_empty() {
        across_pools(config, snap, state, req, now, &mut report, &mut text)?;
    }
    if let Some(path) = &req.svg {
        let drawing = svg::draw(&curves)?;
        std::fs::write(path, drawing)
            .map_err(|e| anyhow::anyhow!("writing {}: {e}", path.display()))?;
        let _ = writeln!(text, "\nCapacity over time written to {}", path.display());
    }
    Ok((report, text))
}

/// The changes across pools: each FleetRollout's change, laid out from the
/// forecasts of every pool it would roll (its held pools too), then each
/// image queued behind a change in flight.
fn across_pools(
    config: &Config,
    snap: &Snapshot,
    state: &StateDir,
    req: &Request,
    now: Timestamp,
    report: &mut Report,
    text: &mut String,
) -> anyhow::Result<()> {
    if !config.fleets.is_empty() {
        let (fleets, section) =
            fleet::forecast_changes(config, snap, &snap.observed, state, req, now)?;
        if !fleets.is_empty() {
            append_section(text, &section);
        }
        report.fleets = fleets;
    }
    let (queued, section) = queued::forecast_queued(config, snap, state, req, &report.fleets, now)?;
    if !queued.is_empty() {
        append_section(text, &section);
    }
    report.queued = queued;
    Ok(())
}

/// `section` after what `text` says, in place of "nothing to forecast".
fn append_section(text: &mut String, section: &str) {
    if text.starts_with("No roll planned") {
        text.clear();
    }
    if !text.is_empty() {
        text.push('\n');
    }
    text.push_str(section);
}

pub(super) fn forecast(
    dir: &Path,
    common: &Common,
    output: Output,
    req: &Request,
) -> anyhow::Result<u8> {
    let Some(Planned {
        clock,
        state,
        snap,
        plan,
    }) = load_and_plan(dir, common)?
    else {
        return Ok(exit::FAILED);
    };
    // A pool that is not in the desired state is a typo, not "nothing to forecast".
    let unknown: Vec<&String> = req
        .pools
        .iter()
        .filter(|p| !snap.config.pools.contains_key(p.as_str()))
        .collect();
    if !unknown.is_empty() {
        let names = || snap.config.pools.keys().map(String::as_str);
        for p in unknown {
            let hint = match crate::spec::diag::did_you_mean(p, names()) {
                close if !close.is_empty() => close,
                _ if snap.config.pools.len() <= 10 => format!(
                    " (its pools: {})",
                    crate::spec::diag::one_of(&names().collect::<Vec<_>>())
                ),
                _ => String::new(),
            };
            eprintln!(
                "error: --pool {p:?}: no pool of that name in {}{hint}",
                dir.display()
            );
        }
        return Ok(exit::FAILED);
    }
    let now = clock.now();
    let (report, text) = match forecast_plan(&snap.config, &snap, &plan, &state, req, now) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e:#}");
            return Ok(exit::FAILED);
        }
    };
    match output {
        Output::Text => print!("{text}"),
        Output::Json => println!("{}", serde_json::to_string_pretty(&report)?),
    }
    Ok(exit::OK)
}

/// `plan --forecast`: the forecast after the plan's text.
pub(super) fn after_plan(
    snap: &Snapshot,
    plan: &plan::Plan,
    state: &StateDir,
    now: Timestamp,
) -> anyhow::Result<String> {
    let req = Request {
        runs: 200,
        seed: 1,
        sweep: false,
        set: Vec::new(),
        svg: None,
        pools: Vec::new(),
        deadline: Some(std::time::Instant::now() + std::time::Duration::from_secs(60)),
    };
    let (_, text) = forecast_plan(&snap.config, snap, plan, state, &req, now)?;
    Ok(format!(
        "\nForecast (200 seeded runs of the rollout executor on a simulated copy of each pool):\n\n{text}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sweep_rows_are_distinct_and_never_both_zero() {
        let rows = sweep_budgets(
            Budget {
                surge: 1,
                unavailable: 0,
            },
            6,
        );
        let pairs: Vec<(u32, u32)> = rows.iter().map(|(_, s, u)| (*s, *u)).collect();
        assert_eq!(pairs, vec![(1, 0), (0, 1), (6, 0), (2, 0), (1, 1)]);
        assert_eq!(human(59.0), "59s");
        assert_eq!(human(61.0), "1m 01s");
        assert_eq!(human(3700.0), "1h 01m");
    }

    /// The red team's case: `--set ../../etc...` said `no pool named ""`.
    #[test]
    fn a_set_that_names_no_pool_says_what_it_expected() {
        let config = Config::default();
        let err = parse_sets(&["../../etc/passwd.rollout.maxSurge=1".into()], &config)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("does not start with a pool name") && !err.contains("no pool named \"\""),
            "{err}"
        );
        let err = parse_sets(&["web.rollout.maxSurge=1".into()], &config)
            .unwrap_err()
            .to_string();
        assert!(err.contains("no pool named \"web\""), "{err}");
    }
}
