//! Which state directory a command that talks to the daemon reads, on a
//! bastion where the packaged service runs.
//!
//! The default state directory is `./.poolwright`, beside the desired state
//! one works on. The packaged service keeps its own in `/var/lib/poolwright`
//! (or what `POOLWRIGHT_STATE_DIR` says in `/etc/default/poolwright`), so
//! `poolwright status` run from a home directory found no daemon and advised
//! starting one. When the default was not changed and `./.poolwright` does
//! not exist, `status`, `fleet`, `rollout`, `images` and `image` use the
//! service's, and say so on stderr.

use std::path::{Path, PathBuf};

/// The packaged service's settings (`POOLWRIGHT_SERVICE_DEFAULTS` names
/// another file, for tests and unusual installs).
const DEFAULTS: &str = "/etc/default/poolwright";
/// The packaged unit's state directory when its settings do not change it.
const SERVICE_STATE_DIR: &str = "/var/lib/poolwright";

/// `given`, or the packaged service's state directory when `given` is the
/// default and there is none here.
pub(super) fn state_dir(given: &Path) -> PathBuf {
    if given != Path::new(crate::store::DEFAULT_STATE_DIR) || given.exists() {
        return given.to_path_buf();
    }
    let defaults = std::env::var_os("POOLWRIGHT_SERVICE_DEFAULTS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULTS));
    let (service, from) = match configured(&defaults) {
        Some(dir) => (
            dir,
            format!("POOLWRIGHT_STATE_DIR in {}", defaults.display()),
        ),
        None => (
            PathBuf::from(SERVICE_STATE_DIR),
            "the packaged service's default".to_string(),
        ),
    };
    if !service.is_dir() {
        return given.to_path_buf();
    }
    eprintln!(
        "(no {} here: using the service's state directory {} ({from}); --state-dir chooses another)",
        given.display(),
        service.display()
    );
    service
}

/// `POOLWRIGHT_STATE_DIR=...` in the service's settings file, if set there
/// (a systemd environment file: `NAME=value` lines, `#` comments, optional
/// quotes). The file is small and root's; it is read bounded all the same.
fn configured(path: &Path) -> Option<PathBuf> {
    let bytes = crate::files::read_regular(path, 64 * 1024).ok()?;
    let text = String::from_utf8_lossy(&bytes);
    let value = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.strip_prefix("POOLWRIGHT_STATE_DIR="))
        .next_back()?
        .trim()
        .trim_matches('"');
    (!value.is_empty() && Path::new(value).is_absolute()).then(|| PathBuf::from(value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_setting_is_read_as_systemd_reads_it() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("poolwright");
        std::fs::write(
            &f,
            "# POOLWRIGHT_STATE_DIR=/commented\nPOOLWRIGHT_CONFIG=/srv/x\nPOOLWRIGHT_STATE_DIR=\"/srv/state\"\n",
        )
        .unwrap();
        assert_eq!(configured(&f), Some(PathBuf::from("/srv/state")));
        std::fs::write(&f, "POOLWRIGHT_STATE_DIR=relative\n").unwrap();
        assert_eq!(configured(&f), None, "only an absolute path");
        assert_eq!(configured(&dir.path().join("missing")), None);
    }
}
