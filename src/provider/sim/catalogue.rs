//! The simulator's image catalogue: what a vendor has published, for
//! `ImageChannel`s with `source: {sim: ...}`. `sim release` adds to it;
//! a sim provider's `spec.images` seeds it. It lives beside the simulated
//! fleets (`STATE/sim/images.json`, or `POOLWRIGHT_SIM_DIR`), shared by
//! every sim provider of the state directory, as a vendor's catalogue is
//! shared by its accounts.

use std::path::{Path, PathBuf};

use crate::model::image::{MAX_RELEASES, Release};
use crate::spec::types::SimProvider;

/// The largest catalogue file read.
const MAX_BYTES: u64 = 16 * 1024 * 1024;

/// Where the catalogue of the simulators of `state_dir` is.
pub fn path(state_dir: &Path) -> PathBuf {
    match std::env::var_os("POOLWRIGHT_SIM_DIR").filter(|d| !d.is_empty()) {
        Some(dir) => PathBuf::from(dir).join("images.json"),
        None => state_dir.join("sim").join("images.json"),
    }
}

/// The images published so far (none when nothing was).
pub fn read(path: &Path) -> anyhow::Result<Vec<Release>> {
    match crate::files::read_regular(path, MAX_BYTES) {
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
            anyhow::anyhow!(
                "the simulator's catalogue {} is corrupt: {e}",
                path.display()
            )
        }),
        Err(crate::files::ReadError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => {
            Ok(Vec::new())
        }
        Err(e) => Err(anyhow::anyhow!("reading {}: {e}", path.display())),
    }
}

/// Publish `release` (again: a second release of one image moves its
/// release time). Returns how many images the catalogue holds.
pub fn publish(path: &Path, release: Release) -> anyhow::Result<usize> {
    let mut all = read(path)?;
    all.retain(|r| r.image != release.image);
    anyhow::ensure!(
        all.len() < MAX_RELEASES,
        "the simulator's catalogue holds {MAX_RELEASES} images already"
    );
    all.push(release);
    all.sort_by(|a, b| (a.released, &a.image).cmp(&(b.released, &b.image)));
    crate::files::atomic_write(path, &serde_json::to_vec_pretty(&all)?)?;
    Ok(all.len())
}

/// The images a provider's `spec.images` seeds (validated: every time parses).
pub fn seeded(settings: &SimProvider) -> Vec<Release> {
    settings
        .images
        .iter()
        .filter_map(|i| {
            Some(Release {
                image: i.image.clone(),
                released: i.released.parse().ok()?,
            })
        })
        .collect()
}
