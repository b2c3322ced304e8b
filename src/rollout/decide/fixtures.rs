//! Hand-built inputs for the phases' table tests.

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};

use super::{DrainProgress, Inputs};
use crate::model::{Node, NodeState, NodeTemplate};
use crate::rollout::state::{RolloutState, Settings};
use crate::rollout::{Budget, begin};
use crate::spec::types::{Disruption, OnDrainTimeout, OnFailure, Semantics};
use crate::spec::values::Duration;

pub fn t0() -> Timestamp {
    "2026-12-02T12:00:00Z".parse().unwrap()
}

pub fn at(secs: i64) -> Timestamp {
    t0().saturating_add(SignedDuration::from_secs(secs))
        .unwrap()
}

pub fn old() -> NodeTemplate {
    NodeTemplate {
        image: Some("img-1".into()),
        ..NodeTemplate::default()
    }
}

pub fn new() -> NodeTemplate {
    NodeTemplate {
        image: Some("img-2".into()),
        ..NodeTemplate::default()
    }
}

pub fn settings(size: u32, surge: u32, unavailable: u32) -> Settings {
    Settings {
        size,
        budget: Budget { surge, unavailable },
        semantics: Semantics::Kubernetes,
        min_ready: Duration::ZERO,
        startup_timeout: Duration::secs(600),
        drain_timeout: Duration::secs(600),
        on_drain_timeout: OnDrainTimeout::Fail,
        max_blocked_nodes: None,
        retire_before: None,
        on_failure: OnFailure::Pause,
        max_failed_nodes: 3,
        canary: false,
        reimage: false,
        checkpoints: Vec::new(),
        progress_deadline: None,
        count_terminating: false,
        waves: false,
        disruption: Disruption::default(),
        order: Default::default(),
    }
}

/// A rollout from img-1 to img-2 begun at t0 over `size` healthy old nodes.
pub fn state(size: u32, surge: u32, unavailable: u32) -> RolloutState {
    let nodes: Vec<Node> = (0..size)
        .map(|i| healthy(&format!("o{i}"), &old()))
        .collect();
    begin(
        "web",
        new(),
        old(),
        settings(size, surge, unavailable),
        &nodes,
        None,
        t0(),
    )
}

pub fn node(id: &str, t: &NodeTemplate, state: NodeState) -> Node {
    Node {
        id: id.into(),
        template: t.hash(),
        state,
        launched_at: t0(),
        healthy_since: (state == NodeState::Healthy).then(t0),
        cordoned: false,
        provider_id: None,
        zone: None,
        labels: Default::default(),
    }
}

pub fn healthy(id: &str, t: &NodeTemplate) -> Node {
    node(id, t, NodeState::Healthy)
}

pub fn inputs<'a>(
    nodes: &'a [Node],
    drains: &'a BTreeMap<String, DrainProgress>,
    now: Timestamp,
) -> Inputs<'a> {
    Inputs {
        now,
        nodes,
        provider_size: nodes
            .iter()
            .filter(|n| n.state != NodeState::Terminating)
            .count() as u32,
        drains,
        override_policy: false,
        quiet: None,
        reappeared: &[],
        pod_holds: None,
    }
}
