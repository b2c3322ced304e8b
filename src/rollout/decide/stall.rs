//! Phase 7: a rollout that cannot move says so rather than wait forever:
//! quarantined nodes holding all the surge, or no progress for
//! `progressDeadline` (time held by the policy or a bake does not count).

use super::tally::Tally;
use super::{Decision, Inputs, after};
use crate::model::EventKind;
use crate::rollout::state::Status;

pub(super) fn check(d: &mut Decision, t: &Tally, g: &super::gates::Gates, inp: &Inputs) {
    let s = &mut d.state;
    let set = s.settings.clone();
    if d.waiting.is_none()
        && g.has_work
        && d.actions.is_empty()
        && t.pending_new == 0
        && t.in_drain == 0
        && t.in_termination == 0
        && !set.waves
        && t.quarantined > 0
    {
        s.status = Status::Degraded {
            reason: format!(
                "{} quarantined node(s) hold the surge capacity (maxSurge {}); \
                 deal with them (or raise maxSurge), then `poolwright rollout resume {}`",
                t.quarantined, set.budget.surge, s.pool
            ),
        };
        d.notes.push(super::note(
            EventKind::Degraded,
            None,
            "quarantined nodes hold all surge capacity",
        ));
    }
    if let Some(deadline) = set.progress_deadline
        && matches!(s.status, Status::Running)
        && !g.held
        && !g.baking
        && inp.now >= after(s.last_progress_at, deadline)
    {
        s.status = Status::Degraded {
            reason: format!("no progress for {deadline} (progressDeadline)"),
        };
        d.notes.push(super::note(
            EventKind::Degraded,
            None,
            format!("progress deadline of {deadline} passed"),
        ));
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::super::fixtures::*;
    use super::super::gates::Gates;
    use super::*;
    use crate::model::Node;

    #[test]
    fn the_progress_deadline_degrades_unless_held() {
        let mut s = state(4, 1, 0);
        s.settings.progress_deadline = Some(crate::spec::values::Duration::secs(60));
        let nodes: Vec<Node> = vec![];
        let drains = BTreeMap::new();
        let inp = inputs(&nodes, &drains, at(60));
        let t = Tally::default();
        let mut d = Decision {
            state: s.clone(),
            actions: vec![],
            notes: vec![],
            waiting: None,
        };
        check(
            &mut d,
            &t,
            &Gates {
                open: true,
                has_work: true,
                ..Gates::default()
            },
            &inp,
        );
        assert!(matches!(d.state.status, Status::Degraded { .. }));
        let mut d = Decision {
            state: s,
            actions: vec![],
            notes: vec![],
            waiting: None,
        };
        check(
            &mut d,
            &t,
            &Gates {
                held: true,
                has_work: true,
                ..Gates::default()
            },
            &inp,
        );
        assert_eq!(
            d.state.status,
            Status::Running,
            "held by the policy: not a stall"
        );
    }
}
