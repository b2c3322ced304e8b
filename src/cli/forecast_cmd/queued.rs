//! `forecast` of a queued image: an image of a channel found while a change
//! of that channel is in flight waits for the change to end, then begins
//! its own change. It is forecast as that change: from the median end of
//! the changes it waits for, over the channel's pools as they will be then
//! (settled, each rolling every node to the queued image), stage by stage
//! through the FleetRollouts that govern them; a pool no FleetRollout
//! governs rolls as soon as the image comes in force.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use jiff::Timestamp;
use serde::Serialize;

use super::fleet::{FleetForecast, forecast_changes, settled};
use super::{Request, Snapshot, rolled_pools, run_one};
use crate::plan::{self, PlanOptions};
use crate::spec::Config;
use crate::store::StateDir;

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct QueuedForecast {
    pub channel: String,
    pub image: String,
    /// The change it begins: `channel NAME@IMAGE`.
    pub change: String,
    /// The FleetRollouts whose changes in flight it waits for.
    pub waits_for: Vec<String>,
    /// When those changes end (the median run of each; now when none).
    pub begins_p50: Timestamp,
    /// The channel's pools it rolls.
    pub pools_rolled: usize,
    /// When it has reached every pool of the channel, given that start.
    pub finish_p10: Timestamp,
    pub finish_p50: Timestamp,
    pub finish_p90: Timestamp,
}

pub(super) fn forecast_queued(
    config: &Config,
    snap: &Snapshot,
    state: &StateDir,
    req: &Request,
    in_flight: &[FleetForecast],
    now: Timestamp,
) -> anyhow::Result<(Vec<QueuedForecast>, String)> {
    let mut out = Vec::new();
    let mut text = String::new();
    let followers = crate::images::resolve::followers(config);
    let rules = crate::fleet::view::rules(config);
    for (channel, rec) in &snap.images.channels {
        let (Some(queued), Some(pools)) = (&rec.queued, followers.get(channel)) else {
            continue;
        };
        let governing: BTreeSet<&str> = rules
            .iter()
            .filter(|(_, r)| pools.iter().any(|p| r.stage_of(p).is_some()))
            .map(|(name, _)| name.as_str())
            .collect();
        let waits: Vec<&FleetForecast> = in_flight
            .iter()
            .filter(|f| !f.new && governing.contains(f.fleet.as_str()))
            .collect();
        let begins = waits.iter().map(|f| f.finish_p50).max().unwrap_or(now);
        // The desired state once the queued image is in force, and the
        // pools as they will be when it is.
        let mut images = snap.images.clone();
        if let Some(r) = images.channels.get_mut(channel) {
            r.in_force = Some(queued.clone());
            r.queued = None;
        }
        let mut next = config.clone();
        crate::images::resolve::resolve(&mut next, &images);
        let mut observed = snap.observed.clone();
        for p in observed.pools.values_mut() {
            *p = settled(p, begins);
        }
        let change = crate::images::record::change_id(channel, &queued.image);
        observed.fleets =
            crate::fleet::view::views(&next, &BTreeMap::new(), &|_| change.clone(), begins);
        let (fleets, _) = forecast_changes(&next, snap, &observed, state, req, begins)?;
        let mut finishes: Vec<[Timestamp; 3]> = fleets
            .iter()
            .filter(|f| governing.contains(f.fleet.as_str()))
            .map(|f| [f.finish_p10, f.finish_p50, f.finish_p90])
            .collect();
        let mut rolled: usize = fleets
            .iter()
            .filter(|f| governing.contains(f.fleet.as_str()))
            .map(|f| f.pools_rolled)
            .sum();
        // The channel's pools no FleetRollout governs roll at once.
        let free: Vec<String> = pools
            .iter()
            .filter(|p| rules.values().all(|r| r.stage_of(p).is_none()))
            .cloned()
            .collect();
        if !free.is_empty() {
            let mut alone = observed.clone();
            alone.fleets.clear();
            let opts = PlanOptions {
                prune: false,
                now: begins,
                override_disruption: false,
            };
            let planned = plan::plan(&next, &alone, &snap.inventory, &opts);
            for r in rolled_pools(&next, snap, &alone, &planned, state, &free) {
                let f = run_one(&r, &r.settings, req, begins)?;
                let after = |secs: f64| {
                    begins
                        .saturating_add(
                            jiff::SignedDuration::try_from_secs_f64(secs)
                                .unwrap_or(jiff::SignedDuration::MAX),
                        )
                        .unwrap_or(begins)
                };
                let d = f.duration_seconds;
                finishes.push([after(d.p10), f.finish.p50, f.finish.p90]);
                rolled += 1;
            }
        }
        let last = |i: usize| finishes.iter().map(|f| f[i]).max().unwrap_or(begins);
        let q = QueuedForecast {
            channel: channel.clone(),
            image: queued.image.clone(),
            change,
            waits_for: waits.iter().map(|f| f.fleet.clone()).collect(),
            begins_p50: begins,
            pools_rolled: rolled,
            finish_p10: last(0),
            finish_p50: last(1),
            finish_p90: last(2),
        };
        render(&q, &mut text);
        out.push(q);
    }
    Ok((out, text))
}

fn render(q: &QueuedForecast, out: &mut String) {
    if !out.is_empty() {
        out.push('\n');
    }
    let when = |t: Timestamp| t.strftime("%a %-d %b %H:%M UTC").to_string();
    let _ = writeln!(
        out,
        "channel {}: queued image {} (change {})",
        q.channel, q.image, q.change
    );
    if q.waits_for.is_empty() {
        let _ = writeln!(out, "  begins             now");
    } else {
        let _ = writeln!(
            out,
            "  begins             when the change in flight of {} ends: p50 {}",
            q.waits_for.join(", "),
            when(q.begins_p50)
        );
    }
    let _ = writeln!(
        out,
        "  every pool on it   p50 {}, p90 {} (p10 {}): {} pool(s) to roll",
        when(q.finish_p50),
        when(q.finish_p90),
        when(q.finish_p10),
        q.pools_rolled
    );
}
