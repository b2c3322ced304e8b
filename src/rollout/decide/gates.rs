//! Phase 5: is the rollout done; and if not, what holds new steps. Gates are
//! evaluated BEFORE new steps start: a checkpoint reached in this call holds
//! from this call on (no step starts in the round that reaches it), and so
//! does the disruption policy, for the change classes it applies to.

use crate::model::EventKind;
use jiff::Timestamp;

use super::tally::Tally;
use super::{Decision, Inputs, Wait, after};
use crate::rollout::change;
use crate::rollout::state::Status;

/// What holds the rollout in this call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Gates {
    /// New steps may start.
    pub open: bool,
    /// The disruption policy holds this rollout's disruptive steps.
    pub held: bool,
    /// A checkpoint's bake is under way.
    pub baking: bool,
    /// Something is left to do.
    pub has_work: bool,
}

/// Every node runs the target, nothing is in flight: the rollout ends.
pub(super) fn completed(d: &mut Decision, t: &Tally) -> bool {
    let s = &mut d.state;
    let done = matches!(s.status, Status::Running)
        && t.outdated_unmarked == 0
        && t.in_drain == 0
        && t.in_termination == 0
        && t.surplus == 0
        && t.updated_available >= t.want
        && d.actions.is_empty();
    if !done {
        return false;
    }
    s.status = match s.rollback_of {
        Some(failed) => Status::RolledBack {
            failed,
            reason: s.rollback_reason.clone().unwrap_or_else(|| {
                "a new node failed; the pool is back on the previous template".into()
            }),
        },
        None => Status::Completed,
    };
    let message = match (s.rollback_of, s.held.is_empty()) {
        (Some(_), _) => "rolled back to the previous template".to_string(),
        (None, true) => "every node runs the desired template".to_string(),
        (None, false) => format!(
            "completed with holds: {}",
            crate::model::hold::describe(&s.held)
        ),
    };
    d.note(EventKind::Completed, None, message);
    true
}

pub(super) fn evaluate(d: &mut Decision, t: &Tally, inp: &Inputs) -> Gates {
    let now: Timestamp = inp.now;
    let s = &mut d.state;
    let set = s.settings.clone();
    let has_work = t.outdated_unmarked > 0 || t.surplus > 0 || t.updated_live < t.want;
    let held_by =
        match change::policy_hold(&set.disruption, set.semantics, &s.current_classes(), now) {
            change::PolicyHold::Held { reason, .. } if !inp.override_policy => Some(reason),
            _ => None,
        };
    let held = held_by.is_some();
    let running = matches!(s.status, Status::Running);
    if has_work && running {
        if held && !s.blocked_by_policy {
            s.blocked_by_policy = true;
            d.notes.push(super::note(
                EventKind::BlockedByPolicy,
                None,
                "disruptive steps wait for the disruption policy; steps in flight finish",
            ));
        } else if !held && s.blocked_by_policy {
            s.blocked_by_policy = false;
            d.notes.push(super::note(
                EventKind::ResumedInWindow,
                None,
                "the disruption policy allows disruptive steps again",
            ));
        }
    }
    // A checkpoint reached now starts its bake before any new step can.
    let s = &mut d.state;
    if running
        && let Some((pct, pause)) = set.checkpoints.get(s.next_checkpoint).copied()
        && set.size > 0
        && u64::from(t.updated_available) * 100 >= u64::from(pct) * u64::from(set.size)
        && t.updated_available < set.size
    {
        s.bake_until = Some(after(now, pause));
        s.next_checkpoint += 1;
        d.notes.push(super::note(
            EventKind::Checkpoint,
            None,
            format!("{pct}% updated; baking for {pause}"),
        ));
    }
    let s = &mut d.state;
    let baking = s.bake_until.is_some_and(|b| now < b);
    d.waiting = match &s.status {
        Status::Running if has_work && let Some(reason) = &held_by => Some(Wait::Policy {
            reason: reason.clone(),
        }),
        Status::Running if baking => s.bake_until.map(|until| Wait::Bake { until }),
        Status::Paused { reason } | Status::Degraded { reason } => Some(Wait::Human {
            reason: reason.clone(),
        }),
        _ => None,
    };
    // Waiting for the policy or a bake is not a lack of progress.
    if held || baking {
        s.last_progress_at = now;
        s.stall_reported = false;
    }
    Gates {
        open: d.waiting.is_none() && has_work,
        held,
        baking,
        has_work,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::super::fixtures::*;
    use super::super::tally::Tally;
    use super::*;
    use crate::model::{Node, NodeTemplate};
    use crate::spec::located::At;
    use crate::spec::types::{ChangeClass, Disruption, DisruptionPolicy};

    fn evaluate_with(
        s: crate::rollout::RolloutState,
        t: &Tally,
        now: Timestamp,
    ) -> (Decision, Gates) {
        let mut d = Decision {
            state: s,
            actions: vec![],
            notes: vec![],
            waiting: None,
        };
        let nodes: Vec<Node> = vec![];
        let drains = BTreeMap::new();
        let g = evaluate(&mut d, t, &inputs(&nodes, &drains, now));
        (d, g)
    }

    fn work() -> Tally {
        Tally {
            outdated_unmarked: 1,
            ..Tally::default()
        }
    }

    #[test]
    fn a_checkpoint_reached_now_holds_this_round() {
        let mut s = state(4, 1, 0);
        s.settings.checkpoints = vec![(50, crate::spec::values::Duration::secs(30))];
        let t = Tally {
            updated_available: 2,
            updated_live: 2,
            ..work()
        };
        let (d, g) = evaluate_with(s, &t, t0());
        assert!(!g.open && g.baking, "{g:?}");
        assert_eq!(d.state.bake_until, Some(at(30)));
        assert_eq!(d.notes[0].event, EventKind::Checkpoint);
        assert!(matches!(d.waiting, Some(Wait::Bake { .. })));
        assert!(
            d.waiting
                .unwrap()
                .to_string()
                .starts_with("baking at a checkpoint")
        );
    }

    #[test]
    fn the_policy_holds_only_the_classes_it_applies_to() {
        let freeze = Disruption {
            policy: Some(At::bare(DisruptionPolicy::Block)),
            ..Disruption::default()
        };
        // An image change under a freeze that applies to everything: held.
        let mut s = state(4, 1, 0);
        s.settings.disruption = freeze.clone();
        let (d, g) = evaluate_with(s, &work(), t0());
        assert!(g.held && !g.open);
        assert_eq!(d.notes[0].event, EventKind::BlockedByPolicy);
        assert_eq!(
            d.waiting.map(|w| w.to_string()).as_deref(),
            Some("blocked by the disruption policy Block")
        );
        // The same freeze applying to config changes only: not held.
        let mut s = state(4, 1, 0);
        s.settings.disruption = Disruption {
            applies_to: Some(At::bare(vec![ChangeClass::Config])),
            ..freeze
        };
        let (_, g) = evaluate_with(s, &work(), t0());
        assert!(!g.held && g.open);
    }

    #[test]
    fn a_roll_superseded_mid_way_keeps_the_classes_of_its_old_nodes() {
        // An image roll under way; an instance type edit supersedes it once
        // the template is set: the rest still changes the image.
        let prior = state(4, 1, 0);
        let labelled = NodeTemplate {
            instance_type: Some("m7.large".into()),
            ..new()
        };
        let nodes: Vec<Node> = (0..4).map(|i| healthy(&format!("o{i}"), &old())).collect();
        let s = crate::rollout::begin(
            "web",
            labelled,
            new(),
            settings(4, 1, 0),
            &nodes,
            Some(&prior),
            t0(),
        );
        assert_eq!(s.classes, vec![ChangeClass::Config, ChangeClass::Image]);
    }

    #[test]
    fn a_human_stop_holds_and_says_why() {
        let mut s = state(4, 1, 0);
        s.status = Status::Paused {
            reason: "paused by ops".into(),
        };
        let (d, g) = evaluate_with(s, &work(), t0());
        assert!(!g.open);
        assert_eq!(
            d.waiting,
            Some(Wait::Human {
                reason: "paused by ops".into()
            })
        );
    }
}
