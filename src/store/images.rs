//! Keeping what each image channel remembers (`images::Images`):
//! `STATE/images.json`, replaced atomically; or, with `run --ha kubernetes`,
//! one ConfigMap every daemon reads and changes with a compare-and-swap (one
//! daemon asks the sources, any daemon may recall); or, for a dry run, in
//! memory. A corrupt record is an error, never an empty one: an empty one
//! would forget the recalls.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::shared::{Record, SharedError, SharedHome};
use crate::images::Images;
use crate::images::record::FORMAT;

/// The largest record read: 10 previous images and 20 skipped ones per
/// channel, and the recalls, are far less.
const MAX_BYTES: u64 = 32 * 1024 * 1024;

pub fn path(state_dir: &Path) -> PathBuf {
    state_dir.join("images.json")
}

fn parse(bytes: &[u8], what: &dyn std::fmt::Display) -> anyhow::Result<Images> {
    let images: Images = serde_json::from_slice(bytes)
        .map_err(|e| anyhow::anyhow!("the image record {what} is corrupt: {e}"))?;
    anyhow::ensure!(
        images.format == FORMAT,
        "the image record {what} has format {}, this release reads {FORMAT}",
        images.format
    );
    Ok(images)
}

pub fn load(path: &Path) -> anyhow::Result<Images> {
    let bytes = match crate::files::read_regular(path, MAX_BYTES) {
        Ok(b) => b,
        Err(crate::files::ReadError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(Images::default());
        }
        Err(e) => anyhow::bail!("reading {}: {e}", path.display()),
    };
    parse(&bytes, &path.display())
}

pub fn save(path: &Path, images: &Images) -> anyhow::Result<()> {
    crate::files::atomic_write(path, &serde_json::to_vec_pretty(images)?)?;
    Ok(())
}

/// Where a daemon keeps the image record.
#[derive(Clone)]
pub enum ImageStore {
    File(PathBuf),
    Shared(Arc<dyn SharedHome>),
    /// A dry run: the record changes in memory only.
    Memory,
}

/// Why the record could not be changed.
#[derive(Debug, thiserror::Error)]
pub enum ImageStoreError {
    /// This daemon holds no lease: it may not write what the daemons share.
    #[error("{0}")]
    Fenced(super::shared::Fenced),
    #[error("{0:#}")]
    Other(#[from] anyhow::Error),
}

impl ImageStore {
    /// Where the record is, as people know it.
    pub fn describe(&self) -> String {
        match self {
            ImageStore::File(p) => p.display().to_string(),
            ImageStore::Shared(home) => home.describe(Record::Images),
            ImageStore::Memory => "(in memory: a dry run)".into(),
        }
    }

    /// Whether other daemons change the record too (it is read again now
    /// and then to learn what they did).
    pub fn is_shared(&self) -> bool {
        matches!(self, ImageStore::Shared(_))
    }

    /// The record as kept (a dry run starts from `STATE/images.json`).
    pub async fn load(&self, state_dir: &Path) -> anyhow::Result<Images> {
        match self {
            ImageStore::File(p) => load(p),
            ImageStore::Memory => load(&path(state_dir)),
            ImageStore::Shared(home) => match home.read(Record::Images).await? {
                Some(body) => parse(body.as_bytes(), &home.describe(Record::Images)),
                None => Ok(Images::default()),
            },
        }
    }

    /// Change the record: `change` is given it as it is now (`held`, this
    /// daemon's copy, for a file it alone writes; the shared one as another
    /// daemon may have left it) and changes it in place. In the cluster the
    /// write is a compare-and-swap, and `change` is asked again with what
    /// the other writer left. Returns the record afterwards.
    pub async fn update(
        &self,
        held: &Images,
        change: &mut (dyn FnMut(&mut Images) + Send),
    ) -> Result<Images, ImageStoreError> {
        match self {
            ImageStore::File(p) => {
                let mut next = held.clone();
                change(&mut next);
                if next != *held {
                    save(p, &next).map_err(|e| {
                        anyhow::anyhow!("writing the image record {}: {e:#}", p.display())
                    })?;
                }
                Ok(next)
            }
            ImageStore::Memory => {
                let mut next = held.clone();
                change(&mut next);
                Ok(next)
            }
            ImageStore::Shared(home) => {
                let what = home.describe(Record::Images);
                let mut step = |body: Option<&str>| -> anyhow::Result<Option<String>> {
                    let current = match body {
                        Some(b) => parse(b.as_bytes(), &what)?,
                        None => Images::default(),
                    };
                    let mut next = current.clone();
                    change(&mut next);
                    if next == current {
                        return Ok(None);
                    }
                    Ok(Some(serde_json::to_string(&next)?))
                };
                match home.update(Record::Images, &mut step).await {
                    Ok(Some(body)) => Ok(parse(body.as_bytes(), &what)?),
                    Ok(None) => Ok(Images::default()),
                    Err(SharedError::Fenced(why)) => Err(ImageStoreError::Fenced(why)),
                    Err(SharedError::Other(e)) => Err(e.into()),
                }
            }
        }
    }
}
