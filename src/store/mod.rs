//! Durable state under the state directory (or, with `--ha`, in the cluster):
//! the inventory of pools poolwright manages, the rollout journal, the lock
//! that keeps two writers apart, and atomic file replacement.

pub mod fleet;
pub mod images;
mod inventory;
pub mod journal;
pub mod latency;
mod lock;
pub mod overrides;
pub mod serves;
pub mod shared;

pub use fleet::FleetJournal;
pub use inventory::{AppliedState, Inventory, InventoryEntry, InventoryStore, Origin};
pub use journal::Journal;
pub use lock::{Activity, LockHolder, StateLock};

use std::path::PathBuf;

/// Default state directory of the CLI (relative to the working directory).
pub const DEFAULT_STATE_DIR: &str = ".poolwright";

/// Paths inside a state directory.
#[derive(Clone, Debug)]
pub struct StateDir {
    pub root: PathBuf,
}

impl StateDir {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        StateDir { root: root.into() }
    }
    pub fn inventory(&self) -> PathBuf {
        self.root.join("inventory.json")
    }
    pub fn journal_dir(&self) -> PathBuf {
        self.root.join("journal")
    }
    pub fn fleet_dir(&self) -> PathBuf {
        self.root.join("fleet")
    }
}
