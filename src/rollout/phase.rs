//! Which phase a roll is in, from its state alone (pure, with the time
//! given): the headline of a pool while it rolls.

use jiff::Timestamp;

use crate::model::phase::{Phase, PhaseKind};
use crate::policy::{self, Gate};
use crate::rollout::state::{Mark, RolloutState, Status};

pub fn phase_of(s: &RolloutState, now: Timestamp) -> Phase {
    let phase = |kind, text: String, until| Phase { kind, text, until };
    match &s.status {
        Status::Paused { reason } => {
            return phase(PhaseKind::Paused, format!("paused: {reason}"), None);
        }
        Status::Degraded { reason } => {
            return phase(PhaseKind::Degraded, format!("degraded: {reason}"), None);
        }
        Status::Completed => return phase(PhaseKind::Completed, "completed".into(), None),
        Status::RolledBack { reason, .. } => {
            return phase(
                PhaseKind::RolledBack,
                format!("rolled back: {reason}"),
                None,
            );
        }
        Status::Running => {}
    }
    if s.blocked_by_policy
        && let Gate::Closed { opens, .. } = policy::gate(&s.settings.disruption, now)
    {
        return phase(
            PhaseKind::Held,
            "held by the disruption policy".into(),
            opens,
        );
    }
    if let Some(until) = s.bake_until.filter(|u| *u > now) {
        return phase(PhaseKind::Bake, "checkpoint bake".into(), Some(until));
    }
    if s.settings.canary && !s.canary_done {
        return phase(
            PhaseKind::Canary,
            format!(
                "canary: waiting for the first new node to stay healthy for {}",
                s.settings.min_ready
            ),
            None,
        );
    }
    let draining = s
        .marks
        .values()
        .filter(|m| matches!(m, Mark::Draining { .. }))
        .count();
    let text = if draining > 0 {
        format!("rolling: {draining} old node(s) draining")
    } else {
        "rolling".to_string()
    };
    phase(PhaseKind::Rolling, text, None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rollout::decide::fixtures::{self, at};
    use crate::spec::values::Duration;

    #[test]
    fn the_headline_names_the_canary_wait_the_bake_with_its_end_and_a_pause() {
        let mut s = fixtures::state(6, 2, 0);
        s.settings.canary = true;
        s.settings.min_ready = Duration::secs(10);
        let p = phase_of(&s, at(0));
        assert_eq!(p.kind, PhaseKind::Canary);
        assert!(p.text.contains("10s"), "{}", p.text);
        s.canary_done = true;
        assert_eq!(phase_of(&s, at(0)).kind, PhaseKind::Rolling);
        s.bake_until = Some(at(30));
        let p = phase_of(&s, at(5));
        assert_eq!((p.kind, p.until), (PhaseKind::Bake, Some(at(30))));
        assert_eq!(
            phase_of(&s, at(30)).kind,
            PhaseKind::Rolling,
            "a bake past its end"
        );
        s.status = Status::Paused {
            reason: "by alice: looking".into(),
        };
        assert_eq!(phase_of(&s, at(5)).kind, PhaseKind::Paused);
    }
}
