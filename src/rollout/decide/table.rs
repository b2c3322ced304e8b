//! The rules of `decide`, one table row each: a pool written as a line of
//! node tokens, the settings as words, and the actions and wait expected of
//! one step. A new rule is one more row.
//!
//! Nodes: `o3` is an old node, `n1` a new one (on the target); a suffix says
//! more: `:pending`, `:unhealthy`, `:terminating`, `:cordoned`, `:fresh`
//! (healthy since the instant of the step, so inside `minReady`);
//! `>running`, `>done`, `>blocked` mark it draining with that drain
//! progress, `>terminating` marks its termination requested.
//!
//! Settings: `size=4 surge=1 unavailable=0`, and any of `minReady=SECS`,
//! `canary`, `checkpoint=PERCENT:SECS`, `block` (a disruption policy Block),
//! `paused`, `failed=N` (max failed nodes), `reimage`, `countTerminating`.

use std::collections::BTreeMap;

use super::fixtures::*;
use super::{Action, DrainProgress, decide};
use crate::model::{Node, NodeState};
use crate::rollout::state::{Mark, Status};
use crate::spec::located::At;
use crate::spec::types::{Disruption, DisruptionPolicy};
use crate::spec::values::Duration;

struct Row {
    rule: &'static str,
    settings: &'static str,
    nodes: &'static str,
    /// Seconds after the roll began.
    now: i64,
    /// The actions, in order: `create N`, `drain ID`, `force ID`,
    /// `terminate ID`, `reimage ID`, `uncordon ID`, `set-template`.
    actions: &'static str,
    /// How the wait's text starts, when the step waits.
    waits: Option<&'static str>,
}

const ROWS: &[Row] = &[
    Row {
        rule: "surge 1, unavailable 0: create one first",
        settings: "size=4 surge=1 unavailable=0",
        nodes: "o0 o1 o2 o3",
        now: 0,
        actions: "create 1",
        waits: None,
    },
    Row {
        rule: "surge 0, unavailable 2: take two down first",
        settings: "size=4 surge=0 unavailable=2",
        nodes: "o0 o1 o2 o3",
        now: 0,
        actions: "drain o0, drain o1",
        waits: None,
    },
    Row {
        rule: "surge 2, unavailable 2: both at once",
        settings: "size=4 surge=2 unavailable=2",
        nodes: "o0 o1 o2 o3",
        now: 0,
        actions: "create 2, drain o0, drain o1",
        waits: None,
    },
    Row {
        rule: "a pending new node uses the surge slot",
        settings: "size=4 surge=1 unavailable=0",
        nodes: "o0 o1 o2 o3 n0:pending",
        now: 10,
        actions: "",
        waits: None,
    },
    Row {
        rule: "a healthy new node frees an old one to drain",
        settings: "size=4 surge=1 unavailable=0",
        nodes: "o0 o1 o2 o3 n0",
        now: 10,
        actions: "drain o0",
        waits: None,
    },
    Row {
        rule: "a new node inside minReady is not yet available",
        settings: "size=4 surge=1 unavailable=0 minReady=30",
        nodes: "o0 o1 o2 o3 n0:fresh",
        now: 10,
        actions: "",
        waits: None,
    },
    Row {
        rule: "a drain still running is waited for",
        settings: "size=4 surge=1 unavailable=0",
        nodes: "o0>running o1 o2 o3 n0",
        now: 20,
        actions: "",
        waits: None,
    },
    Row {
        rule: "a finished drain terminates the node",
        settings: "size=4 surge=1 unavailable=0",
        nodes: "o0>done o1 o2 o3 n0",
        now: 20,
        actions: "terminate o0",
        waits: None,
    },
    Row {
        rule: "a finished drain reimages the node in reimage mode",
        settings: "size=4 surge=0 unavailable=1 reimage",
        nodes: "o0>done o1 o2 o3",
        now: 20,
        actions: "reimage o0",
        waits: None,
    },
    Row {
        rule: "a canary goes first, alone",
        settings: "size=4 surge=2 unavailable=0 canary",
        nodes: "o0 o1 o2 o3",
        now: 0,
        actions: "create 1",
        waits: None,
    },
    Row {
        rule: "a disruption policy Block holds the roll",
        settings: "size=4 surge=1 unavailable=0 block",
        nodes: "o0 o1 o2 o3",
        now: 0,
        actions: "",
        waits: Some("blocked by the disruption policy Block"),
    },
    Row {
        rule: "a paused roll starts nothing and says why",
        settings: "size=4 surge=1 unavailable=0 paused",
        nodes: "o0 o1 o2 o3",
        now: 0,
        actions: "",
        waits: Some("paused by the table"),
    },
    Row {
        rule: "a checkpoint reached bakes before the next step",
        settings: "size=4 surge=2 unavailable=0 checkpoint=50:30",
        nodes: "o0 o1 n0 n1",
        now: 60,
        actions: "",
        waits: Some("baking at a checkpoint until"),
    },
    Row {
        rule: "a node the provider shows terminating is not asked again, and no longer counts",
        settings: "size=4 surge=1 unavailable=0",
        nodes: "o0:terminating>terminating o1 o2 o3 n0",
        now: 30,
        actions: "create 1",
        waits: None,
    },
    Row {
        rule: "with countTerminating, a terminating node still takes its slot",
        settings: "size=4 surge=1 unavailable=0 countTerminating",
        nodes: "o0:terminating>terminating o1 o2 o3 n0",
        now: 30,
        actions: "",
        waits: None,
    },
    Row {
        rule: "a termination journaled but not seen is sent again (a crash between the two)",
        settings: "size=4 surge=1 unavailable=0",
        nodes: "o0>terminating o1 o2 o3 n0",
        now: 30,
        actions: "terminate o0",
        waits: None,
    },
    Row {
        rule: "a blocked drain holds its slot and starts no other",
        settings: "size=4 surge=1 unavailable=0",
        nodes: "o0>blocked o1 o2 o3 n0",
        now: 30,
        actions: "",
        waits: None,
    },
    Row {
        rule: "an unhealthy new node is not available: nothing more is taken down",
        settings: "size=4 surge=1 unavailable=0",
        nodes: "o0 o1 o2 o3 n0:unhealthy",
        now: 30,
        actions: "",
        waits: None,
    },
];

fn parse_settings(words: &str) -> crate::rollout::RolloutState {
    let mut sizes = (0u32, 0u32, 0u32);
    let mut extra = Vec::new();
    for w in words.split_whitespace() {
        match w.split_once('=') {
            Some(("size", v)) => sizes.0 = v.parse().unwrap(),
            Some(("surge", v)) => sizes.1 = v.parse().unwrap(),
            Some(("unavailable", v)) => sizes.2 = v.parse().unwrap(),
            _ => extra.push(w),
        }
    }
    let mut set = settings(sizes.0, sizes.1, sizes.2);
    let mut paused = false;
    for w in extra {
        match w.split_once('=') {
            Some(("minReady", v)) => set.min_ready = Duration::secs(v.parse().unwrap()),
            Some(("failed", v)) => set.max_failed_nodes = v.parse().unwrap(),
            Some(("checkpoint", v)) => {
                let (pct, secs) = v.split_once(':').unwrap();
                set.checkpoints
                    .push((pct.parse().unwrap(), Duration::secs(secs.parse().unwrap())));
            }
            None if w == "canary" => set.canary = true,
            None if w == "reimage" => set.reimage = true,
            None if w == "paused" => paused = true,
            None if w == "countTerminating" => set.count_terminating = true,
            None if w == "block" => {
                set.disruption = Disruption {
                    policy: Some(At::bare(DisruptionPolicy::Block)),
                    ..Disruption::default()
                }
            }
            _ => panic!("unknown setting {w:?}"),
        }
    }
    let old_nodes: Vec<Node> = (0..set.size)
        .map(|i| healthy(&format!("o{i}"), &old()))
        .collect();
    let mut s = crate::rollout::begin("web", new(), old(), set, &old_nodes, None, t0());
    if paused {
        s.status = Status::Paused {
            reason: "paused by the table".into(),
        };
    }
    s
}

/// The nodes, the marks to put in the state, and the drains in progress.
type Pool = (
    Vec<Node>,
    Vec<(String, Mark)>,
    BTreeMap<String, DrainProgress>,
);

fn parse_nodes(tokens: &str, now: jiff::Timestamp) -> Pool {
    let (mut nodes, mut marks, mut drains) = (Vec::new(), Vec::new(), BTreeMap::new());
    for token in tokens.split_whitespace() {
        let (token, mark) = match token.split_once('>') {
            Some((t, m)) => (t, Some(m)),
            None => (token, None),
        };
        let (id, state) = token.split_once(':').unwrap_or((token, ""));
        let template = if id.starts_with('n') { new() } else { old() };
        let mut n = healthy(id, &template);
        match state {
            "" => {}
            "pending" => (n.state, n.healthy_since) = (NodeState::Pending, None),
            "unhealthy" => (n.state, n.healthy_since) = (NodeState::Unhealthy, None),
            "terminating" => n.state = NodeState::Terminating,
            "cordoned" => n.cordoned = true,
            "fresh" => n.healthy_since = Some(now),
            other => panic!("unknown node state {other:?}"),
        }
        match mark {
            None => {}
            Some("terminating") => marks.push((id.to_string(), Mark::Terminating { at: t0() })),
            Some(progress) => {
                n.cordoned = true;
                marks.push((
                    id.to_string(),
                    Mark::Draining {
                        since: t0(),
                        blocked: None,
                    },
                ));
                let p = match progress {
                    "running" => DrainProgress::Running,
                    "done" => DrainProgress::Done,
                    "blocked" => DrainProgress::Blocked("PodDisruptionBudget default/web".into()),
                    other => panic!("unknown drain progress {other:?}"),
                };
                drains.insert(id.to_string(), p);
            }
        }
        nodes.push(n);
    }
    (nodes, marks, drains)
}

fn words(actions: &[Action]) -> String {
    actions
        .iter()
        .map(|a| match a {
            Action::CreateNodes { count } => format!("create {count}"),
            Action::Drain { node } => format!("drain {node}"),
            Action::ForceDrain { node } => format!("force {node}"),
            Action::Terminate { node } => format!("terminate {node}"),
            Action::Reimage { node } => format!("reimage {node}"),
            Action::Uncordon { node } => format!("uncordon {node}"),
            Action::SetTemplate { .. } => "set-template".into(),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[test]
fn every_rule_of_decide_as_a_row() {
    let mut wrong = Vec::new();
    for row in ROWS {
        let now = at(row.now);
        let mut s = parse_settings(row.settings);
        let (nodes, marks, drains) = parse_nodes(row.nodes, now);
        s.marks.extend(marks);
        let d = decide(&s, &inputs(&nodes, &drains, now));
        let got = words(&d.actions);
        let waits = d.waiting.as_ref().map(ToString::to_string);
        let wait_ok = match (row.waits, &waits) {
            (None, _) => true,
            (Some(want), Some(got)) => got.starts_with(want),
            (Some(_), None) => false,
        };
        if got != row.actions || !wait_ok {
            wrong.push(format!(
                "{}:\n  actions: want {:?}, got {got:?}\n  waits: want {:?}, got {waits:?}",
                row.rule, row.actions, row.waits
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
