//! The inventory: which pools poolwright created or adopted, with what it last
//! applied. Pruning deletes only pools listed here, and drift is measured against
//! `last_applied`.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::atomic_write;
use crate::model::{Bounds, InPlace, TemplateHash};

const FORMAT: u32 = 1;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Origin {
    Created,
    Adopted,
}

/// What poolwright last made a pool look like.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AppliedState {
    pub size: u32,
    pub template: TemplateHash,
    #[serde(default)]
    pub in_place: InPlace,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoscaling: Option<Bounds>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InventoryEntry {
    pub provider: String,
    pub origin: Origin,
    /// Copied from the pool's lifecycle at each apply, so protection survives
    /// the pool's file being deleted.
    #[serde(default)]
    pub prevent_destroy: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_applied: Option<AppliedState>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Inventory {
    #[serde(default)]
    pub format: u32,
    pub pools: BTreeMap<String, InventoryEntry>,
}

impl Inventory {
    /// Read the inventory; a missing file is an empty inventory, a corrupt one an error.
    pub fn load(path: &Path) -> anyhow::Result<Inventory> {
        match std::fs::read(path) {
            Ok(bytes) => {
                let inv: Inventory = serde_json::from_slice(&bytes)
                    .map_err(|e| anyhow::anyhow!("inventory {} is corrupt: {e}", path.display()))?;
                anyhow::ensure!(
                    inv.format == FORMAT,
                    "inventory {} has format {}, this release reads {FORMAT}",
                    path.display(),
                    inv.format
                );
                Ok(inv)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Inventory {
                format: FORMAT,
                ..Inventory::default()
            }),
            Err(e) => anyhow::bail!("reading inventory {}: {e}", path.display()),
        }
    }

    pub fn save(&self, path: &Path) -> anyhow::Result<()> {
        let mut copy = self.clone();
        copy.format = FORMAT;
        let bytes = serde_json::to_vec_pretty(&copy)?;
        atomic_write(path, &bytes)
            .map_err(|e| anyhow::anyhow!("writing inventory {}: {e}", path.display()))
    }
}
