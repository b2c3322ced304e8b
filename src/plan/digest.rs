//! Digests that tell whether a saved plan still describes the world: one of the
//! validated desired state, one of what the providers reported.

use sha2::{Digest, Sha256};

use super::planner::Observed;
use crate::spec::Config;

fn hex(bytes: &[u8]) -> String {
    bytes.iter().take(16).map(|b| format!("{b:02x}")).collect()
}

/// The desired state's meaning, not its text: reformatting or editing comments
/// does not make a plan stale.
pub fn config_digest(config: &Config) -> String {
    let mut h = Sha256::new();
    for (name, e) in &config.providers {
        h.update(name.as_bytes());
        h.update(serde_json::to_vec(&e.doc).unwrap_or_default());
    }
    for (name, e) in &config.clusters {
        h.update(name.as_bytes());
        h.update(serde_json::to_vec(&e.doc).unwrap_or_default());
    }
    for (name, e) in &config.pools {
        h.update(name.as_bytes());
        h.update(serde_json::to_vec(&e.doc).unwrap_or_default());
    }
    hex(&h.finalize())
}

/// What the plan depends on: pools, sizes, bounds, templates, in-place
/// attributes and which nodes exist on which template. Node health is left out:
/// it moves on its own and does not change what the plan does.
pub fn observed_digest(observed: &Observed) -> String {
    let mut h = Sha256::new();
    for (name, p) in &observed.pools {
        h.update(name.as_bytes());
        h.update(p.size.to_le_bytes());
        h.update(
            serde_json::to_vec(&(&p.autoscaling, &p.template, &p.in_place)).unwrap_or_default(),
        );
        let mut nodes: Vec<(&str, u64)> = p.live_nodes().map(|n| (&*n.id, n.template.0)).collect();
        nodes.sort_unstable();
        for (id, t) in nodes {
            h.update(id.as_bytes());
            h.update(t.to_le_bytes());
        }
    }
    for (pool, journal) in &observed.rollouts {
        h.update(pool.as_bytes());
        match journal {
            Ok(r) => {
                h.update(r.target.0.to_le_bytes());
                h.update(serde_json::to_vec(&r.status).unwrap_or_default());
            }
            Err(e) => h.update(e.0.as_bytes()),
        }
    }
    for (provider, err) in &observed.unreachable {
        h.update(provider.as_bytes());
        h.update(err.as_bytes());
    }
    hex(&h.finalize())
}

/// What a pool's worker is asked to do, without what merely moves while it
/// works (observed sizes, how many nodes are still outdated): the daemon
/// starts a new worker, superseding the running one, only when this changes,
/// and it does change when the resolved settings do.
pub fn work_key(p: &super::PoolPlan) -> String {
    use super::Step;
    let mut h = Sha256::new();
    h.update(p.pool.as_bytes());
    h.update(p.provider.as_bytes());
    for step in &p.steps {
        let stable = match step {
            Step::Roll {
                size,
                template,
                settings,
                rollback,
                ..
            } => {
                serde_json::json!({"roll": {"size": size, "template": template.hash(), "settings": settings, "rollback": rollback.is_some()}})
            }
            Step::Scale { to, settings, .. } => {
                serde_json::json!({"scale": {"to": to, "settings": settings}})
            }
            other => serde_json::to_value(other).unwrap_or_default(),
        };
        h.update(serde_json::to_vec(&stable).unwrap_or_default());
    }
    hex(&h.finalize())
}
