//! Phase 1: the pools the change admitted follow what their plans say.

use super::{Decision, Inputs, PoolFact};
use crate::fleet::change::PoolRecord;
use crate::model::EventKind;

/// An admitted pool with nothing left to roll is done; one whose rollout
/// waits for a human failed. Returns how many slots that freed.
pub(super) fn follow(d: &mut Decision, inp: &Inputs) -> usize {
    let now = inp.now;
    let mut freed = 0;
    let admitted: Vec<(String, PoolRecord)> = d
        .change
        .pools
        .iter()
        .filter(|(_, r)| matches!(r, PoolRecord::Rolling { .. }))
        .map(|(p, r)| (p.clone(), r.clone()))
        .collect();
    for (pool, record) in admitted {
        let from = record.from();
        match (inp.facts)(&pool) {
            PoolFact::InSync => {
                d.change
                    .pools
                    .insert(pool.clone(), PoolRecord::Done { at: now, from });
                d.note(
                    EventKind::FleetPoolDone,
                    Some(&pool),
                    "rolled: every node runs the desired template",
                );
                freed += 1;
            }
            PoolFact::Failed(reason) | PoolFact::RolledBack(reason) => {
                d.change.pools.insert(
                    pool.clone(),
                    PoolRecord::Failed {
                        at: now,
                        reason: reason.clone(),
                        from,
                    },
                );
                d.note(EventKind::FleetPoolFailed, Some(&pool), reason);
                freed += 1;
            }
            _ => {}
        }
    }
    freed
}

/// A halted change: the pools it turned round are rolled back once their
/// plans say so.
pub(super) fn rolled_back(d: &mut Decision, inp: &Inputs) {
    let back: Vec<String> = d
        .change
        .pools
        .iter()
        .filter(|(p, r)| {
            !matches!(r, PoolRecord::RolledBack { .. })
                && matches!((inp.facts)(p), PoolFact::RolledBack(_))
        })
        .map(|(p, _)| p.clone())
        .collect();
    for pool in back {
        let from = d.change.pools[&pool].from();
        d.change
            .pools
            .insert(pool.clone(), PoolRecord::RolledBack { at: inp.now, from });
        d.note(
            EventKind::FleetPoolRolledBack,
            Some(&pool),
            "back on the template it had before the change",
        );
    }
}
