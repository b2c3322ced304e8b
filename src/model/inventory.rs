//! The inventory: which pools poolwright created or adopted, with what it last
//! applied. Pruning deletes only pools listed here, and drift is measured
//! against `last_applied`. Plain data, read by the planner; `store` keeps it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{Bounds, InPlace, TemplateHash};

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
