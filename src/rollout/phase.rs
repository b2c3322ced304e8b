//! Which phase a roll is in, from its state alone (pure, with the time
//! given): the headline of a pool while it rolls.

use jiff::Timestamp;

use crate::model::phase::{Phase, PhaseKind};
use crate::model::{Node, NodeState};
use crate::policy::{self, Gate};
use crate::rollout::state::{Mark, RolloutState, Status};

/// `nodes` are the pool's nodes as last observed: the canary's headline
/// names the first new node and when its `minReady` ends.
pub fn phase_of<'a>(
    s: &RolloutState,
    nodes: impl IntoIterator<Item = &'a Node>,
    now: Timestamp,
) -> Phase {
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
        let min_ready = s.settings.min_ready;
        // The new node closest to done: healthy longest, else launched first.
        let first = nodes
            .into_iter()
            .filter(|n| n.template == s.target && n.state != NodeState::Terminating)
            .min_by_key(|n| (n.healthy_since.is_none(), n.healthy_since, n.launched_at));
        let (text, until) = match first {
            Some(n) => match n.healthy_since {
                Some(h) => {
                    let ends = h
                        .checked_add(
                            jiff::SignedDuration::try_from(min_ready.as_std()).unwrap_or_default(),
                        )
                        .unwrap_or(h);
                    let left = ends.duration_since(now).max(jiff::SignedDuration::ZERO);
                    (
                        format!(
                            "canary: {} healthy, {}s of minReady {min_ready} left",
                            n.id,
                            left.as_secs()
                        ),
                        Some(ends),
                    )
                }
                None => (
                    format!("canary: {} booting, then healthy for {min_ready}", n.id),
                    None,
                ),
            },
            None => (
                format!("canary: launching the first new node, then healthy for {min_ready}"),
                None,
            ),
        };
        return phase(PhaseKind::Canary, text, until);
    }
    let text = match old_leaving(s) {
        Some(leaving) => format!("rolling: {leaving}"),
        None => "rolling".to_string(),
    };
    phase(PhaseKind::Rolling, text, None)
}

/// The old nodes the roll still waits on, draining or terminating (a node
/// being terminated is as much "not done" as one draining): `None` when
/// there are none.
pub fn old_leaving(s: &RolloutState) -> Option<String> {
    let (mut draining, mut terminating) = (0, 0);
    for m in s.marks.values() {
        match m {
            Mark::Draining { .. } => draining += 1,
            Mark::Terminating { .. } => terminating += 1,
            _ => {}
        }
    }
    match (draining, terminating) {
        (0, 0) => None,
        (d, 0) => Some(format!("{d} old node(s) draining")),
        (0, t) => Some(format!("{t} old node(s) terminating")),
        (d, t) => Some(format!(
            "{} old node(s) leaving: {d} draining, {t} terminating",
            d + t
        )),
    }
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
        let p = phase_of(&s, [], at(0));
        assert_eq!(p.kind, PhaseKind::Canary);
        assert!(p.text.contains("10s"), "{}", p.text);
        // The canary node is named: booting, then healthy with the
        // minReady left and its end as the phase's end.
        let mut canary = fixtures::node("web-7", &fixtures::new(), NodeState::Pending);
        let p = phase_of(
            &s,
            [&fixtures::healthy("web-1", &fixtures::old()), &canary],
            at(3),
        );
        assert_eq!(p.text, "canary: web-7 booting, then healthy for 10s");
        canary.healthy_since = Some(at(4));
        let p = phase_of(&s, [&canary], at(8));
        assert_eq!(p.text, "canary: web-7 healthy, 6s of minReady 10s left");
        assert_eq!(p.until, Some(at(14)));
        s.canary_done = true;
        assert_eq!(phase_of(&s, [], at(0)).kind, PhaseKind::Rolling);
        s.bake_until = Some(at(30));
        let p = phase_of(&s, [], at(5));
        assert_eq!((p.kind, p.until), (PhaseKind::Bake, Some(at(30))));
        assert_eq!(
            phase_of(&s, [], at(30)).kind,
            PhaseKind::Rolling,
            "a bake past its end"
        );
        s.status = Status::Paused {
            reason: "by alice: looking".into(),
        };
        assert_eq!(phase_of(&s, [], at(5)).kind, PhaseKind::Paused);
    }

    #[test]
    fn the_rolling_headline_counts_old_nodes_draining_and_terminating() {
        let mut s = fixtures::state(6, 2, 0);
        assert_eq!(phase_of(&s, [], at(0)).text, "rolling");
        s.marks.insert(
            "web-1".into(),
            Mark::Draining {
                since: at(0),
                blocked: None,
            },
        );
        assert_eq!(
            phase_of(&s, [], at(1)).text,
            "rolling: 1 old node(s) draining"
        );
        s.marks
            .insert("web-2".into(), Mark::Terminating { at: at(1) });
        assert_eq!(
            phase_of(&s, [], at(2)).text,
            "rolling: 2 old node(s) leaving: 1 draining, 1 terminating"
        );
        s.marks.remove("web-1");
        assert_eq!(
            phase_of(&s, [], at(2)).text,
            "rolling: 1 old node(s) terminating"
        );
    }
}
