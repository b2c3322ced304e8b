//! Keeping what each image channel remembers (`images::Images`):
//! `STATE/images.json`, replaced atomically. A corrupt file is an error,
//! never an empty record: an empty one would forget the recalls.

use std::path::{Path, PathBuf};

use crate::images::Images;
use crate::images::record::FORMAT;

/// The largest record read: 10 previous images and 20 skipped ones per
/// channel, and the recalls, are far less.
const MAX_BYTES: u64 = 32 * 1024 * 1024;

pub fn path(state_dir: &Path) -> PathBuf {
    state_dir.join("images.json")
}

pub fn load(path: &Path) -> anyhow::Result<Images> {
    let bytes = match crate::files::read_regular(path, MAX_BYTES) {
        Ok(b) => b,
        Err(crate::files::ReadError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(Images::default());
        }
        Err(e) => anyhow::bail!("reading {}: {e}", path.display()),
    };
    let images: Images = serde_json::from_slice(&bytes)
        .map_err(|e| anyhow::anyhow!("the image record {} is corrupt: {e}", path.display()))?;
    anyhow::ensure!(
        images.format == FORMAT,
        "the image record {} has format {}, this release reads {FORMAT}",
        path.display(),
        images.format
    );
    Ok(images)
}

pub fn save(path: &Path, images: &Images) -> anyhow::Result<()> {
    crate::store::atomic_write(path, &serde_json::to_vec_pretty(images)?)?;
    Ok(())
}
