//! Which desired state a state directory serves, recorded in it, so that a
//! state directory is never used for another one.
//!
//! The state directory holds the inventory of the pools poolwright made,
//! and `--prune` deletes the inventory's pools that are missing from the
//! files. A state directory shared by two desired-state directories (the
//! default, `./.poolwright`, used from one working directory for two config
//! repositories) would let `--prune` in one delete the other's pools. So the
//! first desired state to use a state directory claims it
//! (`STATE/serves.json`), and every other is refused, naming both.

use std::path::{Path, PathBuf};

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

const FILE: &str = "serves.json";
const LIMIT: u64 = 64 * 1024;

/// What a state directory serves: a directory (by its absolute, resolved
/// path), or a config repository's URL and the path in it (`run --git-url`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Served {
    pub desired: String,
}

impl Served {
    /// A desired-state directory (or single file), by its resolved path.
    pub fn dir(dir: &Path) -> Served {
        let path = std::fs::canonicalize(dir).unwrap_or_else(|_| {
            std::env::current_dir()
                .map(|cwd| cwd.join(dir))
                .unwrap_or_else(|_| dir.to_path_buf())
        });
        Served {
            desired: path.display().to_string(),
        }
    }

    /// A config repository fetched from `url` (shown without a user name),
    /// its desired state under `path`.
    pub fn repo(url: &str, path: &Path) -> Served {
        let path = path.display().to_string();
        Served {
            desired: if path.is_empty() {
                format!("{url} (the repository's root)")
            } else {
                format!("{url} (path {path})")
            },
        }
    }
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Record {
    format: u32,
    #[serde(flatten)]
    served: Served,
    since: Timestamp,
}

/// How a state directory came to serve a desired state.
#[derive(Debug, PartialEq, Eq)]
pub enum Claim {
    /// It served it already.
    Same,
    /// A new state directory: it serves it from now on.
    New,
    /// A state directory of an earlier poolwright, which did not record what
    /// it served: it serves this from now on (its inventory may hold another
    /// desired state's pools, which the caller says once).
    Earlier,
}

/// The state directory serves another desired state.
#[derive(Debug, thiserror::Error)]
#[error(
    "the state directory {} serves another desired state: {} (since {}), not {}; \
     its inventory, journals and simulator fleet are that one's, and --prune here would \
     delete its pools. Give this desired state its own state directory: run from its own \
     directory (the default is ./.poolwright) or pass --state-dir (or POOLWRIGHT_STATE_DIR). \
     To move the state directory to this desired state for good, remove {}",
    .state.display(),
    .theirs,
    .since.strftime("%Y-%m-%d %H:%M UTC"),
    .ours,
    .record.display()
)]
pub struct ServesAnother {
    pub state: PathBuf,
    pub theirs: String,
    pub since: Timestamp,
    pub ours: String,
    pub record: PathBuf,
}

/// Why the record could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum ClaimError {
    #[error(transparent)]
    Another(#[from] ServesAnother),
    #[error("{}: {message}", .path.display())]
    Unreadable { path: PathBuf, message: String },
}

/// What `state` serves, when it says.
fn served_by(state: &Path) -> Result<Option<(Served, Timestamp)>, ClaimError> {
    let path = state.join(FILE);
    let text = match crate::files::read_regular_text(&path, LIMIT) {
        Ok(t) => t,
        Err(crate::files::ReadError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(None);
        }
        Err(e) => {
            return Err(ClaimError::Unreadable {
                path,
                message: e.to_string(),
            });
        }
    };
    let record: Record = serde_json::from_str(&text).map_err(|e| ClaimError::Unreadable {
        path: path.clone(),
        message: format!("not a record of what the state directory serves: {e}"),
    })?;
    Ok(Some((record.served, record.since)))
}

/// Refuse when `state` serves another desired state than `ours` (a
/// command that changes nothing: it neither creates the state directory
/// nor claims it).
pub fn check(state: &Path, ours: &Served) -> Result<(), ClaimError> {
    match served_by(state)? {
        Some((theirs, since)) if theirs != *ours => Err(ServesAnother {
            state: state.to_path_buf(),
            theirs: theirs.desired,
            since,
            ours: ours.desired.clone(),
            record: state.join(FILE),
        }
        .into()),
        _ => Ok(()),
    }
}

/// Make `state` serve `ours`, or refuse when it serves another desired
/// state. Called with the state lock held, before anything is read from
/// the state directory.
pub fn claim(state: &Path, ours: &Served, now: Timestamp) -> Result<Claim, ClaimError> {
    check(state, ours)?;
    if served_by(state)?.is_some() {
        return Ok(Claim::Same);
    }
    let earlier = state.join("inventory.json").exists();
    let record = Record {
        format: 1,
        served: ours.clone(),
        since: now,
    };
    let bytes = serde_json::to_vec_pretty(&record).expect("a record serializes");
    let path = state.join(FILE);
    crate::files::atomic_write(&path, &bytes).map_err(|e| ClaimError::Unreadable {
        path,
        message: format!("writing it: {e}"),
    })?;
    Ok(if earlier { Claim::Earlier } else { Claim::New })
}

/// What to say once when a state directory of an earlier poolwright is
/// claimed.
pub fn earlier_note(state: &Path, ours: &Served) -> String {
    format!(
        "the state directory {} now records that it serves {} (poolwright refuses to use it for \
         another desired state from now on). It was made by an earlier poolwright that did not \
         record this: if its inventory holds pools of another desired-state directory, do not \
         use --prune here, and give that directory its own state directory",
        state.display(),
        ours.desired
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> Timestamp {
        "2026-12-07T12:00:00Z".parse().unwrap()
    }

    #[test]
    fn the_first_desired_state_claims_and_another_is_refused_naming_both() {
        let tmp = tempfile::tempdir().unwrap();
        let state = tmp.path().join("state");
        let a = Served {
            desired: "/repo/a".into(),
        };
        let b = Served {
            desired: "/repo/b".into(),
        };
        assert!(check(&state, &b).is_ok(), "nothing is claimed yet");
        assert_eq!(claim(&state, &a, now()).unwrap(), Claim::New);
        assert_eq!(claim(&state, &a, now()).unwrap(), Claim::Same);
        assert!(check(&state, &a).is_ok());
        assert!(check(&state, &b).is_err());
        let refused = claim(&state, &b, now()).unwrap_err().to_string();
        assert!(
            refused.contains("/repo/a") && refused.contains("/repo/b"),
            "{refused}"
        );
        assert!(refused.contains("serves.json"), "{refused}");
    }

    #[test]
    fn a_state_directory_of_an_earlier_version_is_claimed_and_said_so() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("inventory.json"), "{}").unwrap();
        let a = Served {
            desired: "/repo/a".into(),
        };
        assert_eq!(claim(tmp.path(), &a, now()).unwrap(), Claim::Earlier);
        assert_eq!(claim(tmp.path(), &a, now()).unwrap(), Claim::Same);
    }

    #[test]
    fn a_directory_is_known_by_its_resolved_path() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("config");
        std::fs::create_dir(&dir).unwrap();
        let via = tmp.path().join("config/../config/.");
        assert_eq!(Served::dir(&dir), Served::dir(&via));
    }
}
