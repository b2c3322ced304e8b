//! `forecast` of a change across pools: when the change reaches every pool a
//! FleetRollout governs. Each pool the change would roll is forecast on its
//! own (the real executor on a virtual clock, as for one pool); the change
//! is then laid out run by run (`fleet::forecast::schedule`): stage by
//! stage, within the slots, with each stage's gate wait and soak. A pool
//! with a maintenance window is forecast again from the time its stage is
//! expected to start, so the window it meets is the one it will meet.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use jiff::{SignedDuration, Timestamp};
use serde::Serialize;

use super::{Request, Rolled, Snapshot, human, rolled_pools, run_one};
use crate::fleet::forecast::{PoolRuns, schedule};
use crate::model::{NodeState, ObservedPool};
use crate::plan::{self, PlanOptions};
use crate::reconcile::forecast::{Forecast, Spread};
use crate::spec::Config;
use crate::spec::types::DisruptionPolicy;
use crate::store::StateDir;

/// Workers per provider the layout assumes: `poolwright run`'s default
/// `--parallelism`.
const WORKERS: usize = 8;

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FleetForecast {
    pub fleet: String,
    pub change: String,
    /// The change is not journaled yet: it begins when this desired state
    /// is applied.
    pub new: bool,
    pub runs: usize,
    /// Governed pools the change rolls.
    pub pools_rolled: usize,
    /// Until every governed pool is rolled (and the soaks are over).
    pub duration_seconds: Spread,
    pub finish_p10: Timestamp,
    pub finish_p50: Timestamp,
    pub finish_p90: Timestamp,
    pub stages: Vec<StageForecast>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct StageForecast {
    pub name: String,
    pub pools_rolled: usize,
    /// Seconds from now, in the median run (`None`: passed already).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_p50: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub end_p50: Option<f64>,
    pub soak_seconds: u64,
}

fn at(now: Timestamp, secs: f64) -> Timestamp {
    now.saturating_add(SignedDuration::try_from_secs_f64(secs).unwrap_or(SignedDuration::MAX))
        .unwrap_or(now)
}

pub(super) fn forecast_changes(
    config: &Config,
    snap: &Snapshot,
    observed: &crate::plan::Observed,
    state: &StateDir,
    req: &Request,
    now: Timestamp,
) -> anyhow::Result<(Vec<FleetForecast>, String)> {
    // Every roll the desired state asks for, held by its change or not.
    let mut free = observed.clone();
    let views = std::mem::take(&mut free.fleets);
    let opts = PlanOptions {
        prune: false,
        now,
        override_disruption: false,
    };
    let ungoverned = plan::plan(config, &free, &snap.inventory, &opts);
    let rolled = rolled_pools(config, snap, &free, &ungoverned, state, &[]);
    let mut out = Vec::new();
    let mut text = String::new();
    for (name, view) in &views {
        let rules = &view.rules;
        let change = (!view.new).then_some(view.change.as_ref());
        let mine: Vec<_> = rolled
            .iter()
            .filter(|r| rules.stage_of(&r.pool).is_some())
            .collect();
        // First pass: every pool from now.
        let mut forecasts: BTreeMap<String, Forecast> = BTreeMap::new();
        for r in &mine {
            forecasts.insert(r.pool.clone(), run_one(r, &r.settings, req, now)?);
        }
        let layout = |forecasts: &BTreeMap<String, Forecast>| {
            let pools: BTreeMap<&str, PoolRuns> = mine
                .iter()
                .filter_map(|r| {
                    Some((
                        r.pool.as_str(),
                        PoolRuns {
                            provider: config.pools.get(&r.pool)?.doc.spec.provider_ref.as_str(),
                            seconds: &forecasts.get(&r.pool)?.samples,
                        },
                    ))
                })
                .collect();
            let runs = forecasts
                .values()
                .map(|f| f.samples.len())
                .max()
                .unwrap_or(1)
                .max(1);
            (0..runs)
                .map(|i| schedule(rules, change, &pools, i, WORKERS, now))
                .collect::<Vec<_>>()
        };
        let mut runs = layout(&forecasts);
        // Second pass, for a pool whose stage starts later: from its stage's
        // expected start when it has a maintenance window (the window it
        // meets is the one it will meet), and with its booting nodes booted
        // and its leaving nodes gone when it is still settling (a pool just
        // created rolls its booting nodes at once, being unavailable anyway;
        // by its stage it is a pool of healthy nodes, rolled within its
        // budget: twice as long, in the case measured).
        let median = median_run(&runs);
        let mut again = false;
        for r in &mine {
            let windowed = r.settings.disruption.policy() != DisruptionPolicy::Allow;
            let settling = r
                .observed
                .nodes
                .iter()
                .any(|n| matches!(n.state, NodeState::Pending | NodeState::Terminating));
            let Some(stage) = rules.stage_of(&r.pool) else {
                continue;
            };
            let Some(Some((start, _))) = runs.get(median).map(|run| run.stages[stage]) else {
                continue;
            };
            if (windowed || settling) && start > 1.0 {
                let begins = at(now, start);
                let forecast = if settling {
                    let settled = Rolled {
                        observed: settled(&r.observed, begins),
                        ..(*r).clone()
                    };
                    run_one(&settled, &r.settings, req, begins)?
                } else {
                    run_one(r, &r.settings, req, begins)?
                };
                forecasts.insert(r.pool.clone(), forecast);
                again = true;
            }
        }
        if again {
            runs = layout(&forecasts);
        }
        let median = median_run(&runs);
        let duration = Spread::of(runs.iter().map(|r| r.seconds).collect());
        let mut warnings: Vec<String> = forecasts
            .values()
            .flat_map(|f| {
                f.warnings
                    .iter()
                    .map(move |w| format!("nodepool.{}: {w}", f.pool))
            })
            .collect();
        warnings.sort();
        warnings.dedup();
        let stages = rules
            .stages
            .iter()
            .enumerate()
            .map(|(i, s)| StageForecast {
                name: s.name.clone(),
                pools_rolled: s
                    .pools
                    .iter()
                    .filter(|p| forecasts.contains_key(*p))
                    .count(),
                start_p50: runs[median].stages[i].map(|(a, _)| a),
                end_p50: runs[median].stages[i].map(|(_, b)| b),
                soak_seconds: s.soak.as_secs(),
            })
            .collect::<Vec<_>>();
        let f = FleetForecast {
            fleet: name.clone(),
            change: view.change.id.clone(),
            new: view.new,
            runs: runs.len(),
            pools_rolled: forecasts.len(),
            duration_seconds: duration,
            finish_p10: at(now, duration.p10),
            finish_p50: at(now, duration.p50),
            finish_p90: at(now, duration.p90),
            stages,
            warnings,
        };
        render(&f, rules.max_concurrent_pools, &mut text);
        out.push(f);
    }
    Ok((out, text))
}

/// The pool as it will be once settled: its booting nodes healthy (since
/// `at`), its leaving nodes gone; a failing node stays failing.
pub(super) fn settled(pool: &ObservedPool, at: Timestamp) -> ObservedPool {
    let mut pool = pool.clone();
    pool.nodes.retain(|n| n.state != NodeState::Terminating);
    for n in &mut pool.nodes {
        if n.state == NodeState::Pending {
            n.state = NodeState::Healthy;
            n.healthy_since = Some(at);
        }
    }
    pool
}

/// The run whose duration is the median's.
fn median_run(runs: &[crate::fleet::forecast::Run]) -> usize {
    let mut order: Vec<usize> = (0..runs.len()).collect();
    order.sort_by(|a, b| runs[*a].seconds.total_cmp(&runs[*b].seconds));
    order.get(order.len() / 2).copied().unwrap_or(0)
}

fn render(f: &FleetForecast, max: Option<usize>, out: &mut String) {
    if !out.is_empty() {
        out.push('\n');
    }
    let when = |t: Timestamp| t.strftime("%a %-d %b %H:%M UTC").to_string();
    let _ = writeln!(
        out,
        "fleet rollout {}: change {}{}: {} pool(s) to roll in {} stage(s)",
        f.fleet,
        f.change,
        if f.new { " (begins when applied)" } else { "" },
        f.pools_rolled,
        f.stages.len()
    );
    let d = &f.duration_seconds;
    let _ = writeln!(
        out,
        "  every pool rolled  p50 {}, p90 {} (p10 {}): p50 {}, p90 {}",
        human(d.p50),
        human(d.p90),
        human(d.p10),
        when(f.finish_p50),
        when(f.finish_p90)
    );
    for s in &f.stages {
        match (s.start_p50, s.end_p50) {
            (Some(a), Some(b)) => {
                let _ = writeln!(
                    out,
                    "  stage {:<12} {} pool(s) to roll, starts +{}, rolled +{}{} (median run)",
                    s.name,
                    s.pools_rolled,
                    human(a),
                    human(b),
                    if s.soak_seconds > 0 && s.pools_rolled > 0 {
                        format!(", then soaks {}", human(s.soak_seconds as f64))
                    } else {
                        String::new()
                    }
                );
            }
            _ => {
                let _ = writeln!(out, "  stage {:<12} passed", s.name);
            }
        }
    }
    let _ = writeln!(
        out,
        "  from             {} runs of each pool's forecast; {}; {} workers per provider",
        f.runs,
        max.map_or("no limit on pools at once".to_string(), |m| format!(
            "at most {m} pool(s) at once"
        )),
        WORKERS
    );
    for w in &f.warnings {
        let _ = writeln!(out, "  warning: {w}");
    }
}
