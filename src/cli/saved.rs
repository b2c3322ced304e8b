//! Saved plans (`plan --out FILE`, `apply FILE`): the plan plus digests of what
//! it was computed from. Applied only while the files, the pools and the
//! inventory are exactly as they were.

use std::path::Path;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::Common;
use super::snapshot::Snapshot;
use crate::plan::render::Source;
use crate::plan::{Plan, SAVED_FORMAT_VERSION, config_digest, observed_digest};
use crate::store::Inventory;

const KIND: &str = "poolwright-plan";

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct SavedPlan {
    kind: String,
    format_version: u32,
    created_at: jiff::Timestamp,
    /// Absolute paths, so the plan applies from any working directory.
    pub dir: String,
    pub state_dir: String,
    pub prune: bool,
    config_digest: String,
    observed_digest: String,
    inventory_digest: String,
    source: Source,
    pub plan: Plan,
}

fn inventory_digest(inv: &Inventory) -> String {
    let bytes = serde_json::to_vec(inv).unwrap_or_default();
    Sha256::digest(&bytes)
        .iter()
        .take(16)
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn absolute(p: &Path) -> anyhow::Result<String> {
    Ok(std::path::absolute(p)?.display().to_string())
}

impl SavedPlan {
    pub fn new(
        dir: &Path,
        common: &Common,
        snap: &Snapshot,
        plan: &Plan,
        source: Source,
        now: jiff::Timestamp,
    ) -> anyhow::Result<Self> {
        Ok(SavedPlan {
            kind: KIND.into(),
            format_version: SAVED_FORMAT_VERSION,
            created_at: now,
            dir: absolute(dir)?,
            state_dir: absolute(&common.state_dir)?,
            prune: common.prune,
            config_digest: config_digest(&snap.config),
            observed_digest: observed_digest(&snap.observed),
            inventory_digest: inventory_digest(&snap.inventory),
            source,
            plan: plan.clone(),
        })
    }

    pub fn save(&self, path: &Path) -> anyhow::Result<()> {
        let bytes = serde_json::to_vec_pretty(self)?;
        crate::files::atomic_write(path, &bytes)
            .map_err(|e| anyhow::anyhow!("writing plan {}: {e}", path.display()))
    }

    /// A saved plan if `path` is one; `None` for a directory or a YAML file.
    pub fn read_if_plan(path: &Path) -> anyhow::Result<Option<SavedPlan>> {
        if !path.is_file() {
            return Ok(None);
        }
        // A saved plan is a file a user names: regular, and of bounded size.
        let bytes = crate::files::read_regular(path, 64 * 1024 * 1024)
            .map_err(|e| anyhow::anyhow!("{} {e}", path.display()))?;
        let Ok(value) = serde_json::from_slice::<serde_json::Value>(&bytes) else {
            return Ok(None);
        };
        if value.get("kind").and_then(|k| k.as_str()) != Some(KIND) {
            return Ok(None);
        }
        let saved: SavedPlan = serde_json::from_value(value).map_err(|e| {
            anyhow::anyhow!(
                "{} is not a plan this release can apply: {e}",
                path.display()
            )
        })?;
        anyhow::ensure!(
            saved.format_version == SAVED_FORMAT_VERSION,
            "{} has plan format {}, this release applies {SAVED_FORMAT_VERSION}",
            path.display(),
            saved.format_version
        );
        Ok(Some(saved))
    }

    /// Refuse a plan whose inputs changed since it was made.
    pub fn check_fresh(&self, snap: &Snapshot) -> anyhow::Result<()> {
        let stale = |what: &str| {
            anyhow::anyhow!(
                "plan is stale: {what} changed since it was made at {}; run `poolwright plan` again. Nothing was changed.",
                self.created_at
            )
        };
        if config_digest(&snap.config) != self.config_digest {
            return Err(stale("the desired state"));
        }
        if observed_digest(&snap.observed) != self.observed_digest {
            return Err(stale("the observed pools"));
        }
        if inventory_digest(&snap.inventory) != self.inventory_digest {
            return Err(stale("the inventory of managed pools"));
        }
        Ok(())
    }
}
