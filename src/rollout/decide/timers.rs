//! The core's own timers: the instants after `now` at which a step would be
//! decided differently with nothing observed changing. A bake ends, a
//! refused surge may be tried again, a drain or a startup times out, a new
//! node's `minReady` ends, the progress deadline passes (or half of it, when
//! the stall is reported), a window opens or closes. Whoever skips time
//! between looks (the forecast's virtual clock) must stop at each of them,
//! or a 30 s bake is met a whole skip late.

use jiff::Timestamp;

use super::after;
use crate::model::{Node, NodeState};
use crate::policy::{self, Gate};
use crate::rollout::state::{Mark, RolloutState, Status};

/// The first instant after `now` at which a core timer of the rollout
/// fires. `unsettled` are the nodes that may carry one (new nodes not yet
/// healthy or within `minReady`); settled available nodes carry none.
pub fn next<'a>(
    s: &RolloutState,
    unsettled: impl IntoIterator<Item = &'a Node>,
    now: Timestamp,
) -> Option<Timestamp> {
    let set = &s.settings;
    let mut due: Vec<Timestamp> = Vec::new();
    due.extend(s.bake_until);
    due.extend(s.surge_refused_until);
    due.extend(s.unlisted_since.map(|u| after(u, set.startup_timeout)));
    for mark in s.marks.values() {
        if let Mark::Draining { since, .. } = mark {
            due.push(after(*since, set.drain_timeout));
        }
    }
    for n in unsettled {
        if n.template != s.target || n.state == NodeState::Terminating {
            continue;
        }
        match n.healthy_since {
            Some(h) => due.push(after(h, set.min_ready)),
            None => due.push(after(n.launched_at, set.startup_timeout)),
        }
    }
    if matches!(s.status, Status::Running)
        && let Some(deadline) = set.progress_deadline
    {
        let half = crate::spec::values::Duration(deadline.as_std() / 2);
        if !s.stall_reported {
            due.push(after(s.last_progress_at, half));
        }
        due.push(after(s.last_progress_at, deadline));
    }
    match policy::gate(&set.disruption, now) {
        Gate::Open { closes } => due.extend(closes),
        Gate::Closed { opens, .. } => due.extend(opens),
    }
    due.into_iter().filter(|t| *t > now).min()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rollout::decide::fixtures;
    use crate::rollout::decide::fixtures::at;
    use crate::spec::values::Duration;

    #[test]
    fn every_timer_of_the_core_is_an_instant_to_look_at() {
        let (old, new) = (fixtures::old(), fixtures::new());
        let mut s = fixtures::state(4, 1, 0);
        s.settings.min_ready = Duration::secs(10);
        s.settings.drain_timeout = Duration::secs(300);
        s.settings.progress_deadline = Some(Duration::secs(1800));
        // Only the progress deadline's half runs at the start.
        assert_eq!(next(&s, [], at(0)), Some(at(900)));
        s.stall_reported = true;
        assert_eq!(next(&s, [], at(0)), Some(at(1800)));
        // A 45 s bake: met at its end, not at the next whole minute.
        s.bake_until = Some(at(45));
        assert_eq!(next(&s, [], at(0)), Some(at(45)));
        assert_eq!(
            next(&s, [], at(45)),
            Some(at(1800)),
            "a past timer is not due"
        );
        s.bake_until = None;
        s.surge_refused_until = Some(at(7));
        assert_eq!(next(&s, [], at(0)), Some(at(7)));
        s.surge_refused_until = None;
        s.marks.insert(
            "o1".into(),
            Mark::Draining {
                since: at(100),
                blocked: Some("pdb".into()),
            },
        );
        assert_eq!(next(&s, [], at(200)), Some(at(400)));
        s.marks.clear();
        // A new node booting times out at its startup limit; a healthy one
        // becomes available at the end of minReady; an old one has no timer.
        let mut n = fixtures::node("n1", &new, NodeState::Pending);
        n.launched_at = at(5);
        n.healthy_since = None;
        assert_eq!(next(&s, [&n], at(10)), Some(at(605)));
        n.state = NodeState::Healthy;
        n.healthy_since = Some(at(20));
        assert_eq!(next(&s, [&n], at(21)), Some(at(30)));
        let o = fixtures::node("o1", &old, NodeState::Pending);
        assert_eq!(next(&s, [&o], at(21)), Some(at(1800)));
    }
}
