//! The rollout step function: a PURE function from (journal state, observed
//! nodes, drain progress, now) to the next actions, and [`absorb`], which
//! takes the outcomes of those actions back in. The disruption policy is
//! evaluated here too (it is pure), so every decision about what may start,
//! and every backoff and fallback, is made in this module.
//!
//! It is level-triggered, like a Kubernetes controller: every call recomputes
//! from what is observed, so repeating a call after a crash repeats no side
//! effect that already happened (a created node is counted, a terminating node
//! is not chosen again). It is pipelined: whenever a slot frees, the next step
//! starts in the same call; nothing waits for the slowest node of a batch
//! (unless the pool asks for waves).
//!
//! One call runs these phases, in this order (each in its own module):
//! 1. `marks`: forget nodes that are gone; take up calls that never reached
//!    the provider (a crash between journaling and calling). `holds`: which
//!    old nodes do-not-disrupt holds now.
//! 2. `failures`: new nodes not healthy within `startupTimeout`.
//! 3. `drains`: drains in flight finish, time out, or are blocked.
//! 4. `tally`: count what is available, updated, in flight; raise the peak.
//! 5. `gates`: completion; then what holds new steps: the disruption policy,
//!    a checkpoint reached now or baking, a human, a refused surge.
//! 6. `steps`: create within size + surge; take down within the floor.
//! 7. `stall`: quarantined nodes holding all surge; the progress deadline.
//!
//! Bounds, at every instant (docs/ARCHITECTURE.md, "Rollout rules"):
//!   total nodes     <= size + surge
//!   available nodes >= min(size - unavailable, the most seen available)

mod drains;
mod failures;
mod gates;
mod holds;
mod marks;
mod stall;
mod steps;
mod tally;
pub mod timers;

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};

use super::change;
use super::state::{Mark, RolloutState, Settings, Status};
use crate::model::{EventKind, Node, NodeState, NodeTemplate, TemplateHash};
use crate::spec::types::ChangeClass;
use crate::spec::values::Duration;

pub use crate::model::DrainProgress;

pub struct Inputs<'a> {
    pub now: Timestamp,
    /// Every node the provider reports for the pool (terminating ones included).
    pub nodes: &'a [Node],
    /// The size the provider holds.
    pub provider_size: u32,
    pub drains: &'a BTreeMap<String, DrainProgress>,
    /// An emergency override: the disruption policy holds nothing.
    pub override_policy: bool,
    /// When given, `nodes` holds only the nodes this set leaves out: a look
    /// at a large pool visits the few nodes in flight, not every node.
    pub quiet: Option<&'a dyn Quiet>,
    /// Nodes the provider listed again after its answers had them gone.
    pub reappeared: &'a [std::sync::Arc<str>],
    /// What the cluster answered, for nodes it was asked about, on whether
    /// a pod running on them holds them (do-not-disrupt): why, or `None`
    /// for no hold. A node not asked about keeps the hold it has.
    pub pod_holds: Option<&'a BTreeMap<String, Option<String>>>,
}

/// The quiet nodes of a pool, counted and not visited: healthy, in service
/// (not cordoned), unmarked, not terminating and settled (`minReady` served,
/// or no instant it is still running to) as of the rollout state and the
/// instant of the look; an old one (not on the target) is available and may
/// be taken down, a new one is available and already in `healthy_seen`.
/// Whoever keeps the set (the executor's index of the pool) works them out
/// against the state `decide` is given; any node may be left out of it (it
/// is then in `nodes`), none may be in both.
pub trait Quiet {
    /// The target the set was worked out for (`None`: not yet).
    fn target(&self) -> Option<TemplateHash>;
    /// How many quiet old nodes there are.
    fn quiet_old(&self) -> u32;
    /// How many quiet new nodes there are.
    fn quiet_new(&self) -> u32;
    /// The first `k` quiet old nodes in take-down order (`rollout.order`),
    /// of the zone `group` when one is given.
    fn first_old(&self, k: usize, group: Option<&str>) -> Vec<&Node>;
    /// Under `rollout.order: zone`, how many quiet old nodes each zone has.
    fn quiet_old_by_group(&self) -> Vec<(std::sync::Arc<str>, u32)>;
    /// Whether a node of this id is observed at all (quiet or not).
    fn contains(&self, id: &str) -> bool;
    /// Every observed node, in the order the provider lists them: for the
    /// rare look that must visit each one (a rollback turns the target
    /// round; a scale-down chooses among new nodes).
    fn all(&self) -> Vec<Node>;
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Launch `count` nodes on the target template (raises the provider size).
    CreateNodes { count: u32 },
    /// Cordon and start draining an old node.
    Drain { node: String },
    /// Give up on a drain that timed out (`onTimeout: force`): delete its pods.
    ForceDrain { node: String },
    /// Terminate a node and lower the provider size by one.
    Terminate { node: String },
    /// Reimage a drained node onto the target template, in place.
    Reimage { node: String },
    /// Set the template new nodes launch with (rollback).
    SetTemplate { template: Box<NodeTemplate> },
    /// Return a cordoned node to service (its drain was cut short by a rollback).
    Uncordon { node: String },
}

/// What became of an action, as the executor saw it; [`absorb`] decides what
/// follows (backoff, a narrower surge, a node back in service).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Nodes were launched.
    Created { requested: u32 },
    /// The provider refused the capacity (quota).
    CreateRefused { requested: u32, message: String },
    /// A create failed for another reason; the next round decides again.
    CreateFailed { message: String },
    /// The node could not be cordoned: it never left service.
    CordonFailed { node: String, message: String },
    /// The node is held (do-not-disrupt, found by the cluster just before
    /// the cordon): it was not touched.
    Held { node: String, reason: String },
    /// Another call failed; its mark stays, so the next round takes it up.
    CallFailed {
        node: Option<String>,
        message: String,
    },
}

/// Something worth an event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Note {
    pub event: EventKind,
    pub node: Option<String>,
    pub message: String,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    pub state: RolloutState,
    pub actions: Vec<Action>,
    pub notes: Vec<Note>,
    /// Why no new step could start, when that is the case.
    pub waiting: Option<Wait>,
}

/// What keeps a rollout from starting a new step, when something does. Its
/// text is written here, and only here.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Wait {
    /// The disruption policy holds the roll's change classes; `reason`
    /// names the policy ("disruption policy Block").
    Policy { reason: String },
    /// A checkpoint's bake.
    Bake { until: Timestamp },
    /// Paused or Degraded: a human decides; `reason` says why.
    Human { reason: String },
    /// The provider refused surge capacity, and maxUnavailable is 0.
    SurgeRefused { retry_at: Timestamp },
    /// The step function declined to visit the nodes (it does not).
    Unvisited,
}

impl std::fmt::Display for Wait {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Wait::Policy { reason } => write!(f, "blocked by the {reason}"),
            Wait::Bake { until } => write!(f, "baking at a checkpoint until {until}"),
            Wait::Human { reason } => f.write_str(reason),
            Wait::SurgeRefused { retry_at } => write!(
                f,
                "surge capacity refused by the provider; retrying at {retry_at} (maxUnavailable is 0, so no node can be taken down first)"
            ),
            Wait::Unvisited => f.write_str("the step function could not visit the pool's nodes"),
        }
    }
}

impl Decision {
    fn note(&mut self, event: EventKind, node: Option<&str>, message: impl Into<String>) {
        self.notes.push(note(event, node, message));
    }
}

pub(crate) fn after(t: Timestamp, d: Duration) -> Timestamp {
    let d = SignedDuration::try_from(d.as_std()).unwrap_or(SignedDuration::MAX);
    t.saturating_add(d).unwrap_or(Timestamp::MAX)
}

fn note(event: EventKind, node: Option<&str>, message: impl Into<String>) -> Note {
    Note {
        event,
        node: node.map(str::to_string),
        message: message.into(),
    }
}

/// Available: healthy, not cordoned, not being taken down, and, for a new node
/// (on the target template), healthy for `minReady`. An old node that is healthy
/// is serving: however recently it became healthy, it counts.
pub fn is_available(
    n: &Node,
    target: TemplateHash,
    marks: &BTreeMap<String, Mark>,
    min_ready: Duration,
    now: Timestamp,
) -> bool {
    !marks.contains_key(&*n.id) && Ready::at(target, min_ready, now).is(n)
}

/// Whether a node carrying no mark is available (see [`is_available`]),
/// with the rule's instant worked out once, for a pass over every node of a
/// pool: a new node is ready when it became healthy at or before
/// `now - minReady`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ready {
    target: TemplateHash,
    now: Timestamp,
    min_ready: SignedDuration,
    /// The latest `healthy_since` that has served `minReady` by now; `None`
    /// when none can have (`minReady` reaches back before the first instant).
    cutoff: Option<Timestamp>,
}

impl Ready {
    pub(crate) fn at(target: TemplateHash, min_ready: Duration, now: Timestamp) -> Ready {
        let d = SignedDuration::try_from(min_ready.as_std()).unwrap_or(SignedDuration::MAX);
        // `after(h, minReady) <= now`, whose sum saturates at the last
        // instant: at that instant every node has served it.
        let cutoff = if now == Timestamp::MAX {
            Some(now)
        } else {
            now.checked_sub(d).ok()
        };
        Ready {
            target,
            now,
            min_ready: d,
            cutoff,
        }
    }

    pub(crate) fn is(&self, n: &Node) -> bool {
        self.is_as(n.state, n.cordoned, n.template, n.healthy_since)
    }

    /// [`Ready::is`] of a node given by its parts.
    pub(crate) fn is_as(
        &self,
        state: NodeState,
        cordoned: bool,
        template: TemplateHash,
        healthy_since: Option<Timestamp>,
    ) -> bool {
        state == NodeState::Healthy
            && !cordoned
            && (template != self.target || healthy_since.is_some_and(|h| self.served(h)))
    }

    /// Whether a node healthy since `healthy` has served `minReady` by now.
    pub(crate) fn served(&self, healthy: Timestamp) -> bool {
        self.cutoff.is_some_and(|c| healthy <= c)
    }

    /// When a node healthy since `healthy` finishes `minReady`, if that is
    /// still to come.
    pub(crate) fn ends(&self, healthy: Timestamp) -> Option<Timestamp> {
        if self.served(healthy) {
            return None;
        }
        healthy
            .checked_add(self.min_ready)
            .ok()
            .filter(|end| *end > self.now)
    }
}

/// The marks, hashed, for a pass over every node of a pool: a `BTreeMap`
/// lookup compares the id with up to eleven keys at each level of the tree
/// (a surge of 50 marks 50 nodes), a hashed one with about one; and with no
/// marks nothing is hashed.
pub(crate) struct Marked<'a>(Option<rustc_hash::FxHashMap<&'a str, &'a Mark>>);

impl<'a> Marked<'a> {
    pub(crate) fn of(marks: &'a BTreeMap<String, Mark>) -> Marked<'a> {
        Marked((!marks.is_empty()).then(|| marks.iter().map(|(k, m)| (k.as_str(), m)).collect()))
    }

    pub(crate) fn get(&self, id: &str) -> Option<&'a Mark> {
        self.0.as_ref().and_then(|m| m.get(id).copied())
    }

    pub(crate) fn contains(&self, id: &str) -> bool {
        self.get(id).is_some()
    }
}

/// Start a rollout towards `target`, or supersede `prior` (a rollout towards an
/// older desired state): what it has in flight is carried over and finished.
/// `from` is the template the pool has now: what a rollback returns to (when
/// it differs from the target) and what tells the change's class (a pool
/// rolled to the template it already has is resized: a config change).
pub fn begin(
    pool: &str,
    target: NodeTemplate,
    from: NodeTemplate,
    settings: Settings,
    nodes: &[Node],
    prior: Option<&RolloutState>,
    now: Timestamp,
) -> RolloutState {
    let target_hash = target.hash();
    // What the superseded rollout has in flight is finished; a node it left
    // out of service after a failed drain is drained again, so no node stays
    // cordoned and forgotten.
    let carried: BTreeMap<String, Mark> = prior
        .map(|p| {
            p.marks
                .iter()
                .filter_map(|(k, m)| {
                    let m = match m {
                        Mark::DrainFailed => Mark::Draining {
                            since: now,
                            blocked: None,
                        },
                        Mark::Reimaging { .. } => return None,
                        other => other.clone(),
                    };
                    Some((k.clone(), m))
                })
                .collect()
        })
        .unwrap_or_default();
    let available = nodes
        .iter()
        .filter(|n| {
            n.state != NodeState::Terminating
                && is_available(n, target_hash, &carried, settings.min_ready, now)
        })
        .count() as u32;
    // A superseded roll's old nodes still make the change it was making.
    let classes = match prior {
        Some(p) => change::union(&change::classify(&from, &target), &p.classes),
        None => change::classify(&from, &target),
    };
    let previous = Some(from).filter(|f| f.hash() != target_hash);
    RolloutState {
        pool: pool.to_string(),
        target: target.hash(),
        target_template: target,
        previous,
        peak_available: available,
        classes,
        status: Status::Running,
        status_since: Some(now),
        marks: carried,
        failures: 0,
        canary_done: false,
        next_checkpoint: 0,
        bake_until: None,
        started_at: now,
        last_progress_at: now,
        progress: (0, 0),
        surge_refused_until: None,
        surge_backoff_secs: 0,
        surge_narrowed: false,
        removed: 0,
        blocked_by_policy: false,
        healthy_seen: Default::default(),
        rollback_of: None,
        rollback_reason: None,
        creates: 0,
        pending_create: None,
        unlisted_since: None,
        held: BTreeMap::new(),
        zone: None,
        stall_reported: false,
        settings,
    }
}

/// A rollout back to `back`, the template the pool had before a change
/// that was stopped from outside (a change across pools that halted with
/// `onHalt: rollback`). Like a failed node's rollback: a repair, no canary
/// or checkpoints on the way back, and it ends `RolledBack` with `failed`
/// and `reason`, so the failed template is not tried again until a human
/// resumes or the desired state changes.
#[allow(clippy::too_many_arguments)]
pub fn begin_rollback(
    pool: &str,
    back: NodeTemplate,
    from: NodeTemplate,
    failed: TemplateHash,
    reason: String,
    settings: Settings,
    nodes: &[Node],
    prior: Option<&RolloutState>,
    now: Timestamp,
) -> RolloutState {
    let mut s = begin(pool, back, from, settings, nodes, prior, now);
    s.rollback_of = Some(failed);
    s.rollback_reason = Some(reason);
    s.classes = vec![ChangeClass::Repair];
    s.canary_done = true;
    s.next_checkpoint = s.settings.checkpoints.len();
    s
}

pub fn decide(prev: &RolloutState, inp: &Inputs) -> Decision {
    let quiet = inp.quiet.filter(|q| q.target() == Some(prev.target));
    if let Some(q) = quiet
        && let Some(d) = decide_over(prev, inp, Some(q))
    {
        return d;
    }
    match inp.quiet {
        // The same decision from every node, one by one.
        Some(q) => {
            let all = q.all();
            let every = Inputs {
                nodes: &all,
                quiet: None,
                ..*inp
            };
            decide_over(prev, &every, None)
        }
        None => decide_over(prev, inp, None),
    }
    .unwrap_or_else(|| unvisited(prev))
}

/// The phases over `inp.nodes` and the `quiet` nodes; `None` when quiet
/// nodes would have to be visited (the target turned round, or there are
/// more new nodes than the size). With no quiet nodes it always decides.
fn decide_over(prev: &RolloutState, inp: &Inputs, quiet: Option<&dyn Quiet>) -> Option<Decision> {
    let mut d = Decision {
        state: prev.clone(),
        actions: Vec::new(),
        notes: Vec::new(),
        waiting: None,
    };
    let live: Vec<&Node> = inp
        .nodes
        .iter()
        .filter(|n| n.state != NodeState::Terminating)
        .collect();
    marks::reconcile(&mut d, inp.nodes, quiet);
    holds::update(&mut d, &live, inp);
    failures::startup(&mut d, &live, inp.now);
    if quiet.is_some() && d.state.target != prev.target {
        return None;
    }
    drains::advance(&mut d, inp.drains, inp.now);
    let t = tally::Tally::of(&mut d, &live, quiet, inp);
    if quiet.is_some() && t.surplus > 0 {
        return None;
    }
    if gates::completed(&mut d, &t) {
        return Some(finish(prev, d, inp.now));
    }
    let g = gates::evaluate(&mut d, &t, inp);
    if g.open {
        steps::start(&mut d, &t, &live, quiet, inp.now);
    }
    stall::check(&mut d, &t, &g, inp);
    Some(finish(prev, d, inp.now))
}

/// What `decide` answers if its full pass ever declined (it does not):
/// nothing done, and the reason.
fn unvisited(prev: &RolloutState) -> Decision {
    Decision {
        state: prev.clone(),
        actions: Vec::new(),
        notes: Vec::new(),
        waiting: Some(Wait::Unvisited),
    }
}

fn finish(prev: &RolloutState, mut d: Decision, now: Timestamp) -> Decision {
    if d.state.status != prev.status {
        d.state.status_since = Some(now);
    }
    d
}

/// Take the outcomes of the last round's actions in: a refused surge backs
/// off (10 s doubling to 5 min) after first narrowing to one node, a
/// successful launch resets that, a node that could not be cordoned returns
/// to service. Returns what is worth an event.
pub fn absorb(s: &mut RolloutState, outcomes: &[Outcome], now: Timestamp) -> Vec<Note> {
    let mut notes = Vec::new();
    for o in outcomes {
        match o {
            Outcome::Created { .. } => {
                s.surge_backoff_secs = 0;
                s.surge_refused_until = None;
                s.surge_narrowed = false;
            }
            Outcome::CreateRefused { requested, message } if *requested > 1 => {
                s.surge_narrowed = true;
                notes.push(note(
                    EventKind::SurgeRefused,
                    None,
                    format!("{message}; trying one node next (part of the surge may still fit)"),
                ));
            }
            Outcome::CreateRefused { message, .. } => {
                let secs = (s.surge_backoff_secs * 2).clamp(10, 300);
                s.surge_backoff_secs = secs;
                s.surge_narrowed = false;
                let until = now
                    .saturating_add(SignedDuration::from_secs(secs as i64))
                    .unwrap_or(now);
                s.surge_refused_until = Some(until);
                let plan = if s.settings.budget.unavailable > 0 {
                    "falling back to terminate-before-create"
                } else {
                    "stalled: maxUnavailable is 0"
                };
                notes.push(note(
                    EventKind::SurgeRefused,
                    None,
                    format!("{message}; {plan}; retrying at {until}"),
                ));
            }
            Outcome::CreateFailed { message } => {
                notes.push(note(EventKind::StepFailed, None, message.clone()));
            }
            Outcome::CordonFailed { node, message } => {
                // Not cordoned: it never left service; decide again next round.
                s.marks.remove(node);
                notes.push(note(
                    EventKind::StepFailed,
                    Some(node),
                    format!("cordon failed: {message}"),
                ));
            }
            Outcome::Held { node, reason } => {
                // Never cordoned: it stays in service, and out of the roll
                // while the hold lasts.
                s.marks.remove(node);
                if s.held.insert(node.clone(), reason.clone()).is_none() {
                    notes.push(note(EventKind::NodeHeld, Some(node), reason.clone()));
                }
            }
            Outcome::CallFailed { node, message } => {
                notes.push(note(
                    EventKind::StepFailed,
                    node.as_deref(),
                    message.clone(),
                ));
            }
        }
    }
    notes
}

#[cfg(test)]
pub(crate) mod fixtures;
#[cfg(test)]
mod table;

#[cfg(test)]
mod tests {
    use super::fixtures::*;
    use super::*;

    #[test]
    fn absorbing_a_refused_surge_narrows_then_backs_off_then_resets() {
        let mut s = state(4, 2, 1);
        let now = t0();
        let notes = absorb(
            &mut s,
            &[Outcome::CreateRefused {
                requested: 2,
                message: "quota".into(),
            }],
            now,
        );
        assert!(s.surge_narrowed && s.surge_refused_until.is_none());
        assert!(notes[0].message.contains("trying one node next"));
        let notes = absorb(
            &mut s,
            &[Outcome::CreateRefused {
                requested: 1,
                message: "quota".into(),
            }],
            now,
        );
        assert_eq!(s.surge_backoff_secs, 10);
        assert_eq!(s.surge_refused_until, Some(at(10)));
        assert!(
            notes[0]
                .message
                .contains("falling back to terminate-before-create")
        );
        absorb(
            &mut s,
            &[Outcome::CreateRefused {
                requested: 1,
                message: "quota".into(),
            }],
            now,
        );
        assert_eq!(s.surge_backoff_secs, 20, "doubling");
        absorb(&mut s, &[Outcome::Created { requested: 1 }], now);
        assert_eq!((s.surge_backoff_secs, s.surge_refused_until), (0, None));
    }

    #[test]
    fn a_node_that_could_not_be_cordoned_returns_to_service() {
        let mut s = state(4, 1, 0);
        s.marks.insert(
            "n1".into(),
            Mark::Draining {
                since: t0(),
                blocked: None,
            },
        );
        let notes = absorb(
            &mut s,
            &[Outcome::CordonFailed {
                node: "n1".into(),
                message: "forbidden".into(),
            }],
            t0(),
        );
        assert!(s.marks.is_empty());
        assert_eq!(notes[0].event, EventKind::StepFailed);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(512))]

        /// `Ready`, which works out its instant once per pass, says what the
        /// rule says node by node (`after(healthy, minReady) <= now`, a sum
        /// that saturates at the last instant), at the ends of time too.
        #[test]
        fn ready_once_per_pass_is_the_rule_node_by_node(
            since in proptest::prop_oneof![
                proptest::strategy::Just(i64::MIN),
                proptest::strategy::Just(i64::MAX),
                -1_000_000i64..1_000_000,
                proptest::num::i64::ANY,
            ],
            min_ready in proptest::prop_oneof![
                proptest::strategy::Just(0u64),
                proptest::strategy::Just(u64::MAX),
                0u64..2_000_000,
                proptest::num::u64::ANY,
            ],
            now in proptest::prop_oneof![
                proptest::strategy::Just(i64::MIN),
                proptest::strategy::Just(i64::MAX),
                -1_000_000i64..1_000_000,
                proptest::num::i64::ANY,
            ],
            on_target in proptest::bool::ANY,
            state in proptest::sample::select(vec![
                NodeState::Healthy,
                NodeState::Pending,
                NodeState::Unhealthy,
                NodeState::Terminating,
            ]),
            reported in proptest::bool::ANY,
            cordoned in proptest::bool::ANY,
        ) {
            // Instants anywhere in jiff's range, the ends included.
            let instant = |x: i64| {
                let (lo, hi) = (Timestamp::MIN.as_second(), Timestamp::MAX.as_second());
                let secs = lo + (x as i128 - i64::MIN as i128).rem_euclid((hi - lo + 1) as i128) as i64;
                match x {
                    i64::MIN => Timestamp::MIN,
                    i64::MAX => Timestamp::MAX,
                    _ => Timestamp::from_second(secs).unwrap(),
                }
            };
            let (since, now) = (instant(since), instant(now));
            let min_ready = Duration(std::time::Duration::from_secs(min_ready));
            let mut n = healthy("n1", &if on_target { new() } else { old() });
            n.state = state;
            n.cordoned = cordoned;
            n.healthy_since = reported.then_some(since);
            let target = new().hash();
            let rule = n.state == NodeState::Healthy
                && !n.cordoned
                && (n.template != target
                    || n.healthy_since.is_some_and(|h| after(h, min_ready) <= now));
            proptest::prop_assert_eq!(Ready::at(target, min_ready, now).is(&n), rule);
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

        /// The extremes of every number a user (or a tampered saved plan)
        /// can put in the settings, and of what a provider reports, go
        /// through `decide` without overflow (a debug build panics on one)
        /// and never ask for more nodes than size + surge allows.
        #[test]
        fn extreme_numbers_never_overflow_or_break_the_bounds(
            nodes in 0u32..6,
            size in proptest::sample::select(vec![0u32, 1, 3, 100_000, u32::MAX - 1, u32::MAX]),
            surge in proptest::sample::select(vec![0u32, 1, 2, 100_000, u32::MAX - 1, u32::MAX]),
            unavailable in proptest::sample::select(vec![0u32, 1, 100_000, u32::MAX]),
            provider_size in proptest::sample::select(vec![0u32, 2, u32::MAX]),
            failed in proptest::sample::select(vec![1u32, 3, u32::MAX]),
            later in proptest::sample::select(vec![0i64, 1, 600, 86_400 * 365 * 100]),
        ) {
            let live: Vec<Node> = (0..nodes).map(|i| healthy(&format!("o{i}"), &old())).collect();
            let mut set = settings(size, surge, unavailable);
            set.max_failed_nodes = failed;
            set.checkpoints = vec![(50, Duration::secs(30)), (100, Duration::secs(u64::MAX / 2))];
            set.progress_deadline = Some(Duration::secs(u64::MAX / 4));
            let state = begin("web", new(), old(), set, &live, None, t0());
            let drains = BTreeMap::new();
            let mut inp = inputs(&live, &drains, at(later));
            inp.provider_size = provider_size;
            let d = decide(&state, &inp);
            let created: u64 = d
                .actions
                .iter()
                .map(|a| match a {
                    Action::CreateNodes { count } => u64::from(*count),
                    _ => 0,
                })
                .sum();
            let ceiling = u64::from(size) + u64::from(surge);
            proptest::prop_assert!(u64::from(nodes) + created <= ceiling.max(u64::from(nodes)));
            // And again from what it decided (a second step on its own state).
            let _ = decide(&d.state, &inp);
        }
    }
}
