//! Watching the desired state: notify with notify-debouncer-full, so an
//! editor's atomic save, a checkout rewriting many files or an inotify
//! overflow (need_rescan) each end in one trigger, and the loop reloads
//! everything. Changes that cannot matter (hidden files, editor leftovers,
//! other file types; in git mode anything but HEAD and refs) are dropped here.

use std::path::{Path, PathBuf};
use std::time::Duration;

use notify::{EventKind, RecursiveMode};
use notify_debouncer_full::{DebounceEventResult, new_debouncer};
use tokio::sync::mpsc;

use crate::daemon::source::ConfigSource;
use crate::spec::load::{IGNORE_FILE, is_desired_state_file};

/// Keeps the watch alive.
pub struct Watch {
    _debouncer: Box<dyn std::any::Any + Send>,
}

struct Relevance {
    dir: PathBuf,
    git_dir: Option<PathBuf>,
    git_mode: bool,
}

impl Relevance {
    fn matters(&self, path: &Path) -> bool {
        if let Some(git) = &self.git_dir
            && let Ok(rel) = path.strip_prefix(git)
        {
            // A commit, checkout, reset or pull moves HEAD or a ref.
            return self.git_mode
                && (rel == Path::new("HEAD")
                    || rel == Path::new("packed-refs")
                    || rel.starts_with("refs"));
        }
        if self.git_mode {
            return false; // edits in the work tree never act in git mode
        }
        let Ok(rel) = path.strip_prefix(&self.dir) else {
            return false;
        };
        if rel.components().any(|c| {
            c.as_os_str().to_string_lossy().starts_with('.') && c.as_os_str() != IGNORE_FILE
        }) {
            return false;
        }
        let name = rel
            .file_name()
            .map(|n| n.to_string_lossy().to_string())
            .unwrap_or_default();
        // A directory (no extension) may have held desired-state files.
        name == IGNORE_FILE || is_desired_state_file(&name) || !name.contains('.')
    }
}

/// How often a desired-state directory that is not there yet is looked for.
const APPEAR_POLL: Duration = Duration::from_secs(2);

/// Watch `source`; every relevant batch of changes sends one `()` on `tx`.
/// A directory that is not there yet (a service installed before its
/// config repository was cloned) is waited for, not an error: the daemon
/// runs, says why nothing loads, and loads it once it appears.
pub fn watch(
    source: &ConfigSource,
    debounce: Duration,
    tx: mpsc::UnboundedSender<()>,
) -> anyhow::Result<Watch> {
    if let ConfigSource::Remote(_) = source {
        // Nothing on disk to watch: the fetcher says when a commit lands.
        return Ok(Watch {
            _debouncer: Box::new(()),
        });
    }
    let git_mode = matches!(source, ConfigSource::GitHead { .. });
    let dir = source.dir().to_path_buf();
    if dir.exists() {
        return watch_dir(&dir, git_mode, debounce, tx);
    }
    tracing::error!(
        "nothing at {}: clone your config repository there, or point POOLWRIGHT_CONFIG in /etc/default/poolwright at it (then `sudo systemctl restart poolwright`); waiting for it to appear",
        dir.display()
    );
    let task = tokio::spawn(async move {
        loop {
            tokio::time::sleep(APPEAR_POLL).await;
            if !dir.exists() {
                continue;
            }
            match watch_dir(&dir, git_mode, debounce, tx.clone()) {
                Ok(watching) => {
                    tracing::info!("{} appeared: loading it", dir.display());
                    let _ = tx.send(());
                    // Kept for as long as the daemon keeps this task.
                    let _watching = watching;
                    std::future::pending::<()>().await;
                }
                Err(e) => tracing::warn!("watching {}: {e:#}; trying again", dir.display()),
            }
        }
    });
    Ok(Watch {
        _debouncer: Box::new(AbortOnDrop(task)),
    })
}

/// The task that waits for the directory ends with the watch.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn watch_dir(
    dir: &Path,
    git_mode: bool,
    debounce: Duration,
    tx: mpsc::UnboundedSender<()>,
) -> anyhow::Result<Watch> {
    let dir = dir.canonicalize()?;
    let git_dir = gix::discover(&dir)
        .ok()
        .and_then(|r| r.git_dir().canonicalize().ok());
    let relevance = Relevance {
        dir: dir.clone(),
        git_dir: git_dir.clone(),
        git_mode,
    };
    let mut debouncer = new_debouncer(debounce, None, move |result: DebounceEventResult| {
        let relevant = match result {
            // Reading the files (our own reload) shows up as access events: only
            // changes count, or every load would trigger the next.
            Ok(events) => events.iter().any(|e| {
                e.need_rescan()
                    || (!matches!(e.kind, EventKind::Access(_))
                        && e.paths.iter().any(|p| relevance.matters(p)))
            }),
            Err(errors) => {
                for e in errors {
                    tracing::warn!("watching the desired state: {e}; reloading everything");
                }
                true
            }
        };
        if relevant {
            let _ = tx.send(());
        }
    })?;
    debouncer.watch(&dir, RecursiveMode::Recursive)?;
    if git_mode
        && let Some(g) = &git_dir
        && !g.starts_with(&dir)
    {
        debouncer.watch(g, RecursiveMode::Recursive)?;
    }
    Ok(Watch {
        _debouncer: Box::new(debouncer),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_changes_that_can_matter_trigger() {
        let work = Relevance {
            dir: "/repo/pools".into(),
            git_dir: Some("/repo/.git".into()),
            git_mode: false,
        };
        assert!(work.matters(Path::new("/repo/pools/web.yaml")));
        assert!(work.matters(Path::new("/repo/pools/team/a.yml")));
        assert!(work.matters(Path::new("/repo/pools/team")));
        assert!(work.matters(Path::new("/repo/pools/.poolwrightignore")));
        assert!(!work.matters(Path::new("/repo/pools/.web.yaml.swp")));
        assert!(!work.matters(Path::new("/repo/pools/web.yaml~")));
        assert!(!work.matters(Path::new("/repo/pools/README.md")));
        assert!(!work.matters(Path::new("/repo/pools/.hidden/a.yaml")));
        assert!(!work.matters(Path::new("/repo/.git/refs/heads/main")));

        let git = Relevance {
            git_mode: true,
            ..work
        };
        assert!(!git.matters(Path::new("/repo/pools/web.yaml")));
        assert!(git.matters(Path::new("/repo/.git/HEAD")));
        assert!(git.matters(Path::new("/repo/.git/refs/heads/main")));
        assert!(git.matters(Path::new("/repo/.git/packed-refs")));
        assert!(!git.matters(Path::new("/repo/.git/index")));
        assert!(!git.matters(Path::new("/repo/.git/objects/ab/cdef")));
    }
}
