//! What the simulator saved (`SIM/sim.json`), read as a test checks a roll:
//! each pool's template image and each live node's image ("another" for a
//! node not on the pool's template).

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

/// Each pool's template image and its live nodes' images; empty while the
/// simulator has written nothing (or is half way through a write).
pub fn read(sim_json: &Path) -> BTreeMap<String, (String, Vec<String>)> {
    let Ok(text) = std::fs::read_to_string(sim_json) else {
        return BTreeMap::new();
    };
    let Ok(sim) = serde_json::from_str::<Value>(&text) else {
        return BTreeMap::new();
    };
    sim["pools"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(name, p)| {
            let image = p["template"]["image"].as_str().unwrap_or("").to_string();
            let nodes = p["nodes"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|n| n.get("goneAt").is_none())
                .map(|n| {
                    if n["template"] == p["templateHash"] {
                        image.clone()
                    } else {
                        "another".to_string()
                    }
                })
                .collect();
            (name.clone(), (image, nodes))
        })
        .collect()
}
