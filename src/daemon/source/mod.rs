//! Where the daemon reads the desired state from: the directory as it is on
//! disk, (`--git-committed-only`) the tree at the repository's HEAD, so
//! half-written edits are never applied, or (`--git-url`) the tree of the
//! commit in force of the daemon's own clone of a remote, which the fetcher
//! (`crate::daemon::source::fetcher`) moves forward. Read with gix, never by shelling out.

pub mod fetcher;
pub mod previews;

use crate::sync::Locked;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::Context;

use crate::desired_dir::load_dir_cached;
use crate::git::mirror::Mirror;
use crate::git::{rev, tree};
use crate::plan::render::Revision;
use crate::spec::validate::{ParseCache, load_sources_cached};
use crate::spec::{Diagnostic, Limits, LoadReport, Pos};

#[derive(Clone)]
pub enum ConfigSource {
    WorkTree { dir: PathBuf },
    GitHead { dir: PathBuf },
    Remote(Arc<RemoteSource>),
}

/// A remote config repo: the clone, the commit accepted (fetched, and
/// allowed by lineage and signature: what a load reads) and the commit in
/// force (the last accepted one that loaded cleanly: kept beside the clone,
/// so a restart applies it, never a commit that did not load).
pub struct RemoteSource {
    pub mirror: Mirror,
    /// How diagnostics and logs name the source: `URL BRANCH:PATH`.
    shown: PathBuf,
    accepted: Mutex<Option<String>>,
    in_force: Mutex<Option<String>>,
}

impl RemoteSource {
    pub fn new(mirror: Mirror) -> RemoteSource {
        let o = mirror.options();
        let shown = PathBuf::from(format!(
            "{} {}:{}",
            mirror.shown_url(),
            o.branch,
            o.path.display()
        ));
        let in_force = mirror.in_force();
        RemoteSource {
            mirror,
            shown,
            accepted: Mutex::new(in_force.clone()),
            in_force: Mutex::new(in_force),
        }
    }

    /// The last commit that loaded cleanly.
    pub fn in_force(&self) -> Option<String> {
        self.in_force.locked().clone()
    }

    /// What the next load reads.
    pub fn accepted(&self) -> Option<String> {
        self.accepted.locked().clone()
    }

    /// The fetcher accepted `commit`: the next load reads it.
    pub fn accept(&self, commit: &str) {
        *self.accepted.locked() = Some(commit.to_string());
    }

    /// Nothing is loaded until the fetcher accepts a commit (the commit in
    /// force at start failed a check it never had to pass before).
    pub fn unaccept(&self) {
        *self.accepted.locked() = None;
    }

    /// `commit` loaded cleanly: it is in force, kept first, so a restart
    /// applies it. Whether it was not in force before.
    pub fn confirm(&self, commit: &str) -> std::io::Result<bool> {
        if self.in_force().as_deref() == Some(commit) {
            return Ok(false);
        }
        self.mirror.set_in_force(commit)?;
        *self.in_force.locked() = Some(commit.to_string());
        Ok(true)
    }
}

/// One load of the desired state.
pub struct Loaded {
    pub report: LoadReport,
    pub revision: Option<Revision>,
}

impl ConfigSource {
    pub fn new(dir: PathBuf, git_committed_only: bool) -> anyhow::Result<ConfigSource> {
        if git_committed_only {
            let repo = gix::discover(&dir).with_context(|| {
                format!(
                    "--git-committed-only: {} is not in a git work tree",
                    dir.display()
                )
            })?;
            repo.workdir().with_context(|| {
                format!(
                    "--git-committed-only: {} is in a bare repository",
                    dir.display()
                )
            })?;
            Ok(ConfigSource::GitHead { dir })
        } else {
            Ok(ConfigSource::WorkTree { dir })
        }
    }

    /// The directory read, or for a remote how it is named (`URL BRANCH:PATH`).
    pub fn dir(&self) -> &Path {
        match self {
            ConfigSource::WorkTree { dir } | ConfigSource::GitHead { dir } => dir,
            ConfigSource::Remote(r) => &r.shown,
        }
    }

    /// The repository's git directory, whose changes (commits, checkouts) matter
    /// in `--git-committed-only` mode.
    pub fn git_dir(&self) -> Option<PathBuf> {
        if let ConfigSource::Remote(_) = self {
            return None;
        }
        let repo = gix::discover(self.dir()).ok()?;
        Some(repo.git_dir().to_path_buf())
    }

    /// The commit HEAD points at (git mode), or the commit accepted (remote),
    /// to tell whether a change to the repository could change what is loaded.
    pub fn head(&self) -> Option<String> {
        match self {
            ConfigSource::WorkTree { .. } => None,
            ConfigSource::GitHead { dir } => {
                let repo = gix::discover(dir).ok()?;
                Some(repo.head_id().ok()?.to_string())
            }
            ConfigSource::Remote(r) => r.accepted(),
        }
    }

    /// Load the desired state, parsing again only the files that changed
    /// since the last load with `cache`.
    pub fn load(&self, limits: &Limits, cache: &mut ParseCache) -> Loaded {
        match self {
            ConfigSource::WorkTree { dir } => Loaded {
                report: load_dir_cached(dir, limits, cache),
                revision: rev::revision(dir),
            },
            ConfigSource::Remote(r) => load_remote(r, limits, cache),
            ConfigSource::GitHead { dir } => match tree::read_head(dir, limits) {
                Ok((files, revision)) if files.is_empty() => Loaded {
                    report: LoadReport {
                        diagnostics: vec![Diagnostic::error(
                            &dir.display().to_string(),
                            Pos::START,
                            format!(
                                "no desired-state files (*.yaml, *.yml) committed at {}",
                                revision.short()
                            ),
                        )],
                        ..LoadReport::default()
                    },
                    revision: Some(revision),
                },
                Ok((files, revision)) => Loaded {
                    report: load_sources_cached(&files, limits, cache),
                    revision: Some(revision),
                },
                Err(e) => Loaded {
                    report: LoadReport {
                        diagnostics: vec![Diagnostic::error(
                            &dir.display().to_string(),
                            Pos::START,
                            format!("reading the committed tree: {e:#}"),
                        )],
                        ..LoadReport::default()
                    },
                    revision: None,
                },
            },
        }
    }
}

/// The tree of the commit accepted from a remote.
fn load_remote(r: &RemoteSource, limits: &Limits, cache: &mut ParseCache) -> Loaded {
    let failed = |message: String, revision: Option<Revision>| Loaded {
        report: LoadReport {
            diagnostics: vec![Diagnostic::error(
                &r.shown.display().to_string(),
                Pos::START,
                message,
            )],
            ..LoadReport::default()
        },
        revision,
    };
    let Some(commit) = r.accepted() else {
        return failed(
            "no commit accepted yet: nothing is applied until a fetched commit may be (`poolwright status` says why none has been)".into(),
            None,
        );
    };
    let read = r
        .mirror
        .revision(&commit)
        .and_then(|rev| Ok((r.mirror.read(&commit, limits)?, rev)));
    match read {
        Ok((files, revision)) if files.is_empty() => failed(
            format!(
                "no desired-state files (*.yaml, *.yml) committed at {}",
                revision.short()
            ),
            Some(revision),
        ),
        Ok((files, revision)) => Loaded {
            report: load_sources_cached(&files, limits, cache),
            revision: Some(revision),
        },
        Err(e) => failed(format!("reading commit {commit}: {e:#}"), None),
    }
}
