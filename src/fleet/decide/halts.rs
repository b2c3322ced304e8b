//! Phase 2: the halt rules, `halt.failedPools` and the gates.

use jiff::Timestamp;

use super::{Decision, FleetWait};
use crate::fleet::change::{ChangeStatus, GateOutcome, PoolRecord};
use crate::fleet::rules::Rules;
use crate::model::EventKind;

/// Halt the change when `halt.failedPools` pools failed, or when a gate
/// is breached while the change has rolled or is rolling a pool. True when
/// it halted.
pub(super) fn halt_if_due(d: &mut Decision, rules: &Rules, now: Timestamp) -> bool {
    let failed = d.change.failed();
    if failed.len() >= rules.failed_pools {
        let pools: Vec<String> = failed.iter().map(|(p, _)| p.to_string()).collect();
        let reason = format!(
            "{} pool(s) failed (halt.failedPools {}): {}",
            failed.len(),
            rules.failed_pools,
            failed
                .iter()
                .map(|(p, r)| format!("{p}: {r}"))
                .collect::<Vec<_>>()
                .join("; ")
        );
        halt(d, rules, reason, pools, now);
        return true;
    }
    let exposed = d
        .change
        .pools
        .values()
        .any(|r| matches!(r, PoolRecord::Rolling { .. } | PoolRecord::Done { .. }));
    if !exposed {
        return false;
    }
    for g in &rules.gates {
        if let Some(GateOutcome::Breached { value }) = d
            .change
            .gates
            .get(&g.name)
            .and_then(|r| r.last.as_ref())
            .map(|r| &r.outcome)
        {
            let reason = format!("gate {} breached ({value}): {}", g.name, g.query);
            halt(d, rules, reason, Vec::new(), now);
            return true;
        }
    }
    false
}

fn halt(d: &mut Decision, rules: &Rules, reason: String, pools: Vec<String>, now: Timestamp) {
    d.change.status = ChangeStatus::Halted {
        reason: reason.clone(),
        pools: pools.clone(),
        at: now,
    };
    d.change.log(now, "halted", reason.clone());
    d.stop = d
        .change
        .pools
        .iter()
        .filter(|(_, r)| matches!(r, PoolRecord::Rolling { .. }))
        .map(|(p, _)| p.clone())
        .collect();
    // Every governed pool is planned again: those in flight stop (or roll
    // back), and every held pool says why it now waits.
    d.wake = rules
        .stages
        .iter()
        .flat_map(|s| s.pools.iter().cloned())
        .collect();
    d.note(
        EventKind::FleetHalted,
        pools.first().map(String::as_str),
        reason,
    );
    d.waiting = Some(FleetWait::Halted);
}
