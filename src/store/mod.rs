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
pub mod snapshot_log;

pub use fleet::FleetJournal;
pub use inventory::{AppliedState, Inventory, InventoryEntry, InventoryStore, Origin};
pub use journal::Journal;
pub use lock::{Activity, LockHolder, StateLock};

use std::io::Write;
use std::path::{Path, PathBuf};

/// Default state directory of the CLI (relative to the working directory).
pub const DEFAULT_STATE_DIR: &str = ".poolwright";

/// Replace `path` with `bytes` atomically: write a temporary file beside it, fsync
/// it, rename it over the target, and fsync the directory. A crash leaves either
/// the old or the new content, never a torn file.
pub fn atomic_write(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    std::fs::create_dir_all(dir)?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    std::fs::File::open(dir)?.sync_all()?;
    Ok(())
}

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
