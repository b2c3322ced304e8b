//! Phase 7: a rollout that cannot move says so rather than wait without a
//! word: quarantined nodes holding all the surge; a provider that reports
//! more nodes than it lists for longer than a launch may take; half the
//! progress deadline gone (`rollout_stalled`, naming what it waits for);
//! the whole of it (Degraded). Time held by the policy or a bake does not
//! count, nor does a drain still within its own `drain.timeout`.

use jiff::Timestamp;

use super::tally::Tally;
use super::{Decision, Inputs, after};
use crate::model::EventKind;
use crate::rollout::state::{Mark, Status};
use crate::spec::values::Duration;

pub(super) fn check(d: &mut Decision, t: &Tally, g: &super::gates::Gates, inp: &Inputs) {
    quarantine(d, t, g);
    unlisted(d, t, inp);
    deadline(d, t, g, inp);
}

fn quarantine(d: &mut Decision, t: &Tally, g: &super::gates::Gates) {
    let s = &mut d.state;
    let set = &s.settings;
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
}

/// A node listed again after the provider's answers had it gone: what was
/// counted removed was not. Or the provider holds a size larger than the
/// nodes it lists. Right after a
/// create that is a launch not yet visible; for longer than a new node may
/// take to become healthy (`health.startupTimeout`), the nodes asked for
/// never appeared: a describe that contradicts itself, or launches failing
/// at the provider. Either way the rollout stops and says which.
fn unlisted(d: &mut Decision, t: &Tally, inp: &Inputs) {
    let s = &mut d.state;
    if let Some(id) = inp.reappeared.first()
        && matches!(s.status, Status::Running)
    {
        let reason = format!(
            "the provider's describe contradicts itself: node {id} was missing from its answer \
             (so counted gone) and is listed again{}",
            match inp.reappeared.len() {
                1 => String::new(),
                n => format!(", with {} other node(s)", n - 1),
            }
        );
        s.status = Status::Degraded {
            reason: reason.clone(),
        };
        d.notes
            .push(super::note(EventKind::Degraded, Some(id), reason));
        return;
    }
    if inp.provider_size <= t.listed {
        s.unlisted_since = None;
        return;
    }
    let since = *s.unlisted_since.get_or_insert(inp.now);
    let limit = s.settings.startup_timeout;
    if !matches!(s.status, Status::Running) || inp.now < after(since, limit) {
        return;
    }
    let reason = format!(
        "the provider's describe contradicts itself: it answered size {} but listed {} node(s), \
         for longer than health.startupTimeout ({limit}); the missing node(s) never appeared \
         (a provider that omits nodes, or launches failing on its side)",
        inp.provider_size, t.listed
    );
    s.status = Status::Degraded {
        reason: reason.clone(),
    };
    d.notes.push(super::note(EventKind::Degraded, None, reason));
}

/// Whether the time since the last progress counts against the deadline:
/// not while the policy holds the rollout or a bake runs, nor while a
/// drain is still within `drain.timeout` (its own timer decides).
fn counting(d: &Decision, g: &super::gates::Gates, now: Timestamp) -> bool {
    let set = &d.state.settings;
    !g.held
        && !g.baking
        && !d.state.marks.values().any(
            |m| matches!(m, Mark::Draining { since, .. } if now < after(*since, set.drain_timeout)),
        )
}

fn deadline(d: &mut Decision, t: &Tally, g: &super::gates::Gates, inp: &Inputs) {
    let Some(deadline) = d.state.settings.progress_deadline else {
        return;
    };
    if !matches!(d.state.status, Status::Running) || g.held || g.baking {
        return;
    }
    let since = d.state.last_progress_at;
    let half = Duration(deadline.as_std() / 2);
    if !d.state.stall_reported && inp.now >= after(since, half) {
        d.state.stall_reported = true;
        let message = format!(
            "no progress for {half} (half of progressDeadline {deadline}): waiting for {}",
            waits_for(d, t, inp)
        );
        d.notes
            .push(super::note(EventKind::RolloutStalled, None, message));
    }
    if counting(d, g, inp.now) && inp.now >= after(since, deadline) {
        let what = waits_for(d, t, inp);
        let s = &mut d.state;
        s.status = Status::Degraded {
            reason: format!("no progress for {deadline} (progressDeadline), waiting for {what}"),
        };
        d.notes.push(super::note(
            EventKind::Degraded,
            None,
            format!("progress deadline of {deadline} passed, waiting for {what}"),
        ));
    }
}

/// What a rollout that does not move waits for, most specific first.
pub(super) fn waits_for(d: &Decision, t: &Tally, inp: &Inputs) -> String {
    let s = &d.state;
    let named = |f: fn(&Mark) -> Option<String>| -> Vec<String> {
        s.marks
            .iter()
            .filter_map(|(id, m)| f(m).map(|why| format!("{id}{why}")))
            .take(3)
            .collect()
    };
    let mut parts = Vec::new();
    if inp.provider_size > t.listed {
        parts.push(format!(
            "{} node(s) the provider counts in its size {} but does not list",
            inp.provider_size - t.listed,
            inp.provider_size
        ));
    }
    let drains = named(|m| match m {
        Mark::Draining { blocked, .. } => Some(
            blocked
                .as_ref()
                .map_or(String::new(), |b| format!(" ({b})")),
        ),
        _ => None,
    });
    if !drains.is_empty() {
        parts.push(format!("the drain of {}", drains.join(", ")));
    }
    if t.pending_new > 0 {
        parts.push(format!(
            "{} new node(s) to become available (launching, or within minReady {})",
            t.pending_new, s.settings.min_ready
        ));
    }
    let leaving = named(|m| match m {
        Mark::Terminating { .. } => Some(" to terminate".into()),
        Mark::Reimaging { .. } => Some(" to come back reimaged".into()),
        Mark::Uncordoning => Some(" to be uncordoned".into()),
        _ => None,
    });
    if !leaving.is_empty() {
        parts.push(leaving.join(", "));
    }
    if let Some(w) = &d.waiting {
        parts.push(w.to_string());
    }
    if parts.is_empty() {
        parts.push("a step that could not start (nothing is in flight)".into());
    }
    parts.join("; ")
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::super::fixtures::*;
    use super::super::gates::Gates;
    use super::*;
    use crate::model::Node;
    use crate::rollout::state::RolloutState;

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

    /// Decide at `secs` over `nodes`, with the provider holding `size`.
    fn look(s: &RolloutState, nodes: &[Node], size: u32, secs: i64) -> super::super::Decision {
        let drains = BTreeMap::new();
        let mut inp = inputs(nodes, &drains, at(secs));
        inp.provider_size = size;
        super::super::decide(s, &inp)
    }

    fn reasons(d: &super::super::Decision, kind: EventKind) -> Vec<String> {
        d.notes
            .iter()
            .filter(|n| n.event == kind)
            .map(|n| n.message.clone())
            .collect()
    }

    #[test]
    fn a_size_larger_than_the_nodes_listed_past_the_startup_timeout_is_an_error() {
        // The measured case: a describe listing 2 fewer nodes than its size.
        let mut s = state(4, 1, 0);
        let nodes: Vec<Node> = (0..2).map(|i| healthy(&format!("o{i}"), &old())).collect();
        let d = look(&s, &nodes, 4, 0);
        assert_eq!(d.state.status, Status::Running);
        assert_eq!(d.state.unlisted_since, Some(at(0)));
        s = d.state;
        let d = look(&s, &nodes, 4, 599);
        assert_eq!(
            d.state.status,
            Status::Running,
            "a launch may take that long"
        );
        let d = look(&s, &nodes, 4, 600);
        let Status::Degraded { reason } = &d.state.status else {
            panic!("{:?}", d.state.status)
        };
        assert!(
            reason.contains("describe contradicts itself: it answered size 4 but listed 2 node(s)")
                && reason.contains("startupTimeout (10m)"),
            "{reason}"
        );
        assert_eq!(reasons(&d, EventKind::Degraded).len(), 1);
        // Once the provider lists what it counts, the clock starts over.
        let all: Vec<Node> = (0..4).map(|i| healthy(&format!("o{i}"), &old())).collect();
        let d = look(&s, &all, 4, 300);
        assert_eq!(d.state.unlisted_since, None);
    }

    #[test]
    fn half_the_deadline_reports_a_stall_once_naming_what_it_waits_for() {
        let mut s = state(2, 1, 0);
        s.settings.progress_deadline = Some(Duration::secs(600));
        s.settings.startup_timeout = Duration::secs(100_000);
        let mut nodes = vec![healthy("o0", &old()), healthy("o1", &old())];
        nodes.push(node("n0", &new(), crate::model::NodeState::Pending));
        let d = look(&s, &nodes, 3, 10);
        assert!(reasons(&d, EventKind::RolloutStalled).is_empty());
        s = d.state;
        let d = look(&s, &nodes, 3, 300);
        let stalled = reasons(&d, EventKind::RolloutStalled);
        assert_eq!(stalled.len(), 1, "{:?}", d.notes);
        assert!(
            stalled[0].contains("no progress for 5m")
                && stalled[0].contains("1 new node(s) to become available"),
            "{stalled:?}"
        );
        s = d.state;
        let d = look(&s, &nodes, 3, 450);
        assert!(reasons(&d, EventKind::RolloutStalled).is_empty(), "once");
        s = d.state;
        let d = look(&s, &nodes, 3, 600);
        let Status::Degraded { reason } = &d.state.status else {
            panic!("{:?}", d.state.status)
        };
        assert!(reason.contains("waiting for 1 new node(s)"), "{reason}");
    }

    #[test]
    fn a_drain_within_its_own_timeout_is_reported_but_not_cut_short() {
        let mut s = state(2, 0, 1);
        s.settings.progress_deadline = Some(Duration::secs(600));
        s.settings.drain_timeout = Duration::secs(3600);
        s.marks.insert(
            "o0".into(),
            Mark::Draining {
                since: at(0),
                blocked: Some("PDB default/web allows 0 disruptions".into()),
            },
        );
        let nodes = vec![healthy("o0", &old()), healthy("o1", &old())];
        let d = look(&s, &nodes, 2, 300);
        let stalled = reasons(&d, EventKind::RolloutStalled);
        assert!(
            stalled.len() == 1
                && stalled[0].contains("the drain of o0 (PDB default/web allows 0 disruptions)"),
            "{stalled:?}"
        );
        s = d.state;
        let d = look(&s, &nodes, 2, 3000);
        assert_eq!(
            d.state.status,
            Status::Running,
            "drain.timeout (1h) decides, not the 10m deadline"
        );
    }

    #[test]
    fn with_progress_deadline_none_a_rollout_waits_forever_and_is_not_reported() {
        let mut s = state(2, 1, 0);
        s.settings.progress_deadline = None;
        s.settings.startup_timeout = Duration::secs(1_000_000);
        let nodes = vec![
            healthy("o0", &old()),
            healthy("o1", &old()),
            node("n0", &new(), crate::model::NodeState::Pending),
        ];
        let d = look(&s, &nodes, 3, 500_000);
        assert_eq!(d.state.status, Status::Running);
        assert!(reasons(&d, EventKind::RolloutStalled).is_empty());
    }

    #[test]
    fn a_node_listed_again_after_it_went_is_an_error_naming_it() {
        let s = state(2, 1, 0);
        let nodes = vec![healthy("o0", &old()), healthy("o1", &old())];
        let drains = BTreeMap::new();
        let back = [std::sync::Arc::from("o1")];
        let inp = Inputs {
            reappeared: &back,
            ..inputs(&nodes, &drains, at(5))
        };
        let d = super::super::decide(&s, &inp);
        let Status::Degraded { reason } = &d.state.status else {
            panic!("{:?}", d.state.status)
        };
        assert!(
            reason.contains(
                "node o1 was missing from its answer (so counted gone) and is listed again"
            ),
            "{reason}"
        );
    }
}
