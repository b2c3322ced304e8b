//! The rollout journal: one file per pool under `STATE/journal/`, replaced
//! atomically (fsync, rename) BEFORE every side effect, so a restarted process
//! knows what was in flight.

use std::path::PathBuf;

use super::state::RolloutState;
use crate::store::atomic_write;

#[derive(Clone, Debug)]
pub struct Journal {
    dir: PathBuf,
}

impl Journal {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Journal { dir: dir.into() }
    }

    fn path(&self, pool: &str) -> PathBuf {
        self.dir.join(format!("{pool}.json"))
    }

    pub fn load(&self, pool: &str) -> anyhow::Result<Option<RolloutState>> {
        let path = self.path(pool);
        match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|e| anyhow::anyhow!("rollout journal {} is corrupt: {e}", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => anyhow::bail!("reading rollout journal {}: {e}", path.display()),
        }
    }

    pub fn save(&self, state: &RolloutState) -> anyhow::Result<()> {
        let path = self.path(&state.pool);
        let bytes = serde_json::to_vec_pretty(state)?;
        atomic_write(&path, &bytes)
            .map_err(|e| anyhow::anyhow!("writing rollout journal {}: {e}", path.display()))
    }

    pub fn remove(&self, pool: &str) -> anyhow::Result<()> {
        match std::fs::remove_file(self.path(pool)) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => anyhow::bail!("removing rollout journal of {pool}: {e}"),
        }
    }

    /// Pools that have a journal (a rollout in progress, stopped, or rolled back).
    pub fn pools(&self) -> std::collections::BTreeSet<String> {
        std::fs::read_dir(&self.dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| {
                e.file_name()
                    .to_str()?
                    .strip_suffix(".json")
                    .map(str::to_string)
            })
            .collect()
    }
}
