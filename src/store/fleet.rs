//! The fleet journal: each FleetRollout's change (`fleet::FleetState`),
//! written before the daemon acts on it. One file per FleetRollout under
//! `STATE/fleet/`, replaced atomically; or, with `run --ha`, one ConfigMap
//! every daemon reads and changes with a compare-and-swap. A third, in
//! memory, serves forecasts and tests.

use crate::sync::Locked;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use super::shared::{Record, SharedError, SharedHome};
use crate::files::atomic_write;
use crate::fleet::FleetState;
use crate::fleet::change::FORMAT;

/// A fleet journal is a few hundred KiB at most (a record per pool a change
/// admitted); anything far larger is not one.
const FLEET_LIMIT: u64 = 64 * 1024 * 1024;

#[derive(Clone)]
pub enum FleetJournal {
    Files(PathBuf),
    Shared(Arc<dyn SharedHome>),
    Memory(Arc<Mutex<BTreeMap<String, FleetState>>>),
}

/// Why a fleet journal could not be changed.
#[derive(Debug, thiserror::Error)]
pub enum FleetJournalError {
    /// This daemon holds no lease: it may not write what the daemons share.
    #[error("{0}")]
    Fenced(super::shared::Fenced),
    #[error("{0:#}")]
    Other(#[from] anyhow::Error),
}

fn is_fleet_name(name: &str) -> bool {
    crate::spec::validate::is_dns_label(name, 63)
}

fn parse(bytes: &[u8], fleet: &str, what: &dyn std::fmt::Display) -> anyhow::Result<FleetState> {
    let state: FleetState = serde_json::from_slice(bytes)
        .map_err(|e| anyhow::anyhow!("fleet journal {what} is corrupt: {e}"))?;
    anyhow::ensure!(
        state.format == FORMAT,
        "fleet journal {what} has format {}, this release reads {FORMAT}",
        state.format
    );
    anyhow::ensure!(
        state.fleet == fleet,
        "fleet journal {what} is corrupt: it names FleetRollout {:?}",
        state.fleet
    );
    Ok(state)
}

impl FleetJournal {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        FleetJournal::Files(dir.into())
    }

    pub fn memory() -> Self {
        FleetJournal::Memory(Arc::default())
    }

    /// A journal's file name comes only from a valid FleetRollout name.
    fn path(dir: &std::path::Path, fleet: &str) -> anyhow::Result<PathBuf> {
        anyhow::ensure!(
            is_fleet_name(fleet),
            "{fleet:?} is not a FleetRollout name (1 to 63 lower-case letters, digits and '-')"
        );
        Ok(dir.join(format!("{fleet}.json")))
    }

    /// The FleetRollout's journal, if it has one.
    pub async fn load(&self, fleet: &str) -> anyhow::Result<Option<FleetState>> {
        match self {
            FleetJournal::Files(dir) => {
                let path = Self::path(dir, fleet)?;
                match crate::files::read_regular(&path, FLEET_LIMIT) {
                    Ok(bytes) => parse(&bytes, fleet, &path.display()).map(Some),
                    Err(crate::files::ReadError::Io(e))
                        if e.kind() == std::io::ErrorKind::NotFound =>
                    {
                        Ok(None)
                    }
                    Err(e) => anyhow::bail!("reading fleet journal {}: {e}", path.display()),
                }
            }
            FleetJournal::Shared(home) => {
                anyhow::ensure!(is_fleet_name(fleet), "{fleet:?} is not a FleetRollout name");
                let record = Record::Fleet(fleet);
                match home.read(record).await? {
                    Some(body) => parse(body.as_bytes(), fleet, &home.describe(record)).map(Some),
                    None => Ok(None),
                }
            }
            FleetJournal::Memory(map) => Ok(map.locked().get(fleet).cloned()),
        }
    }

    /// The journals of these FleetRollouts (those of the desired state in
    /// force: nothing else is read); a corrupt one with its error.
    pub async fn of(
        &self,
        fleets: impl IntoIterator<Item = &str>,
    ) -> BTreeMap<String, Result<FleetState, crate::model::Unreadable>> {
        let mut out = BTreeMap::new();
        for fleet in fleets {
            match self.load(fleet).await {
                Ok(Some(s)) => {
                    out.insert(fleet.to_string(), Ok(s));
                }
                Ok(None) => {}
                Err(e) => {
                    out.insert(
                        fleet.to_string(),
                        Err(crate::model::Unreadable(format!("{e:#}"))),
                    );
                }
            }
        }
        out
    }

    /// Change the FleetRollout's journal: `change` gets it as it is now and
    /// returns what to write (`None`: leave it). In the cluster the write is
    /// a compare-and-swap: when another daemon wrote in between, `change`
    /// is asked again with what it wrote. Returns the journal afterwards.
    pub async fn update(
        &self,
        fleet: &str,
        mut change: impl FnMut(Option<FleetState>) -> Option<FleetState> + Send,
    ) -> Result<Option<FleetState>, FleetJournalError> {
        match self {
            FleetJournal::Files(dir) => {
                let current = self.load(fleet).await?;
                let Some(next) = change(current.clone()) else {
                    return Ok(current);
                };
                let path = Self::path(dir, fleet)?;
                let bytes = serde_json::to_vec(&next).map_err(anyhow::Error::from)?;
                atomic_write(&path, &bytes).map_err(|e| {
                    anyhow::anyhow!("writing fleet journal {}: {e}", path.display())
                })?;
                Ok(Some(next))
            }
            FleetJournal::Memory(map) => {
                let mut held = map.locked();
                if let Some(next) = change(held.get(fleet).cloned()) {
                    held.insert(fleet.to_string(), next);
                }
                Ok(held.get(fleet).cloned())
            }
            FleetJournal::Shared(home) => {
                if !is_fleet_name(fleet) {
                    return Err(anyhow::anyhow!("{fleet:?} is not a FleetRollout name").into());
                }
                let record = Record::Fleet(fleet);
                let what = home.describe(record);
                let mut step = |body: Option<&str>| -> anyhow::Result<Option<String>> {
                    let current = match body {
                        Some(b) => Some(parse(b.as_bytes(), fleet, &what)?),
                        None => None,
                    };
                    match change(current) {
                        Some(next) => Ok(Some(serde_json::to_string(&next)?)),
                        None => Ok(None),
                    }
                };
                match home.update(record, &mut step).await {
                    Ok(Some(body)) => Ok(Some(parse(body.as_bytes(), fleet, &what)?)),
                    Ok(None) => Ok(None),
                    Err(SharedError::Fenced(why)) => Err(FleetJournalError::Fenced(why)),
                    Err(SharedError::Other(e)) => Err(e.into()),
                }
            }
        }
    }
}
