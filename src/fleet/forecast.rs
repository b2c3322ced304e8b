//! When a change reaches every governed pool: the stages of a change laid
//! out in time, one run at a time, from each pool's own forecast. Pure: the
//! per-pool durations come from the rollout forecasts (the real executor on
//! a virtual clock); this only schedules them the way the change admits
//! pools: stage by stage, in admission order, within the slots
//! (`maxConcurrentPools`, and each provider's workers), each stage waiting
//! for its gates' `for`, then its soak when it rolled a pool.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;

use super::change::{Change, ChangeStatus, PoolRecord};
use super::rules::Rules;
use super::verdict::current_stage;

/// What one pool's roll takes in each run, in seconds (`runs` values; a
/// pool with nothing to roll has none).
pub struct PoolRuns<'a> {
    pub provider: &'a str,
    pub seconds: &'a [f64],
}

/// One run of the change.
#[derive(Clone, Debug, PartialEq)]
pub struct Run {
    /// Seconds from now until every governed pool is rolled (and the last
    /// stage's soak, if any, is over).
    pub seconds: f64,
    /// Each stage's start and end (its pools rolled), in seconds from now;
    /// `None` for a stage already passed.
    pub stages: Vec<Option<(f64, f64)>>,
}

/// Lay out run `run` of the change. `workers` bounds the rolls at once per
/// provider (`poolwright run --parallelism`). A change already under way
/// starts from where it is: passed stages are skipped, a soak in progress
/// waits only what is left of it.
pub fn schedule(
    rules: &Rules,
    change: Option<&Change>,
    pools: &BTreeMap<&str, PoolRuns<'_>>,
    run: usize,
    workers: usize,
    now: Timestamp,
) -> Run {
    let gate_wait = rules
        .gates
        .iter()
        .map(|g| g.hold_for)
        .max()
        .unwrap_or(Duration::ZERO)
        .as_secs_f64();
    let first = change.map_or(0, |c| current_stage(c, rules));
    let mut t = 0.0f64;
    let mut stages = vec![None; rules.stages.len()];
    for (i, stage) in rules.stages.iter().enumerate().skip(first) {
        let record = change.and_then(|c| c.record(&stage.name));
        // A stage that has not started waits for its gates to have held
        // for their `for`; a soak under way waits what is left of it.
        if let Some(soak_until) = record.and_then(|r| r.completed_at.and(r.soak_until)) {
            let left = soak_until.duration_since(now).as_secs_f64().max(0.0);
            stages[i] = Some((0.0, 0.0));
            t = t.max(left);
            continue;
        }
        if record.is_none() {
            t += gate_wait;
        }
        let start = t;
        // Admission order; pools already done in this change take nothing.
        let mut slots: Vec<f64> = Vec::new();
        let mut per_provider: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
        let mut end = start;
        let mut rolled = 0;
        for pool in &stage.pools {
            let done =
                change.is_some_and(|c| matches!(c.pools.get(pool), Some(PoolRecord::Done { .. })));
            let Some(p) = pools.get(pool.as_str()).filter(|_| !done) else {
                continue;
            };
            let Some(d) = p.seconds.get(run % p.seconds.len().max(1)).copied() else {
                continue;
            };
            rolled += 1;
            // The earliest a slot of the change and a worker of the provider
            // are both free.
            let mut at = start;
            if let Some(max) = rules.max_concurrent_pools
                && slots.len() >= max
            {
                slots.sort_by(f64::total_cmp);
                at = at.max(slots.remove(0));
            }
            let busy = per_provider.entry(p.provider).or_default();
            if busy.len() >= workers.max(1) {
                busy.sort_by(f64::total_cmp);
                at = at.max(busy.remove(0));
            }
            let finish = at + d;
            slots.push(finish);
            busy.push(finish);
            end = end.max(finish);
        }
        stages[i] = Some((start, end));
        t = end;
        if rolled > 0 {
            t += stage.soak.as_secs_f64();
        }
    }
    if change.is_some_and(|c| matches!(c.status, ChangeStatus::Completed { .. })) {
        t = 0.0;
    }
    Run { seconds: t, stages }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::rules::StageRules;
    use crate::spec::types::OnHalt;

    #[test]
    fn stages_in_order_within_the_slots_with_their_soaks() {
        let rules = Rules::for_tests(
            "rings",
            vec![
                StageRules {
                    name: "canary".into(),
                    soak: Duration::from_secs(600),
                    pools: vec!["a".into()],
                },
                StageRules {
                    name: "rest".into(),
                    soak: Duration::ZERO,
                    pools: vec!["b".into(), "c".into(), "d".into()],
                },
            ],
            Some(2),
            1,
            OnHalt::Hold,
            Vec::new(),
        );
        let secs = [100.0];
        let pools: BTreeMap<&str, PoolRuns> = ["a", "b", "c", "d"]
            .into_iter()
            .map(|p| {
                (
                    p,
                    PoolRuns {
                        provider: "sim",
                        seconds: &secs,
                    },
                )
            })
            .collect();
        let now = Timestamp::UNIX_EPOCH;
        let run = schedule(&rules, None, &pools, 0, 8, now);
        // canary 0..100, soak to 700; rest: b, c at 700..800, d 800..900.
        assert_eq!(run.stages, vec![Some((0.0, 100.0)), Some((700.0, 900.0))]);
        assert_eq!(run.seconds, 900.0);
        // One worker per provider: one at a time.
        let run = schedule(&rules, None, &pools, 0, 1, now);
        assert_eq!(run.seconds, 100.0 + 600.0 + 300.0);
    }
}
