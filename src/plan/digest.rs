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
        let mut nodes: Vec<(&str, u64)> = p
            .live_nodes()
            .map(|n| (n.id.as_str(), n.template.0))
            .collect();
        nodes.sort_unstable();
        for (id, t) in nodes {
            h.update(id.as_bytes());
            h.update(t.to_le_bytes());
        }
    }
    for pool in &observed.rollouts_in_progress {
        h.update(pool.as_bytes());
    }
    for (provider, err) in &observed.unreachable {
        h.update(provider.as_bytes());
        h.update(err.as_bytes());
    }
    hex(&h.finalize())
}
