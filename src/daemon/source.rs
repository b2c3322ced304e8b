//! Where the daemon reads the desired state from: the directory as it is on
//! disk, or (`--git-committed-only`) the tree at the repository's HEAD, so
//! half-written edits are never applied. Read with gix, never by shelling out.

use std::path::{Path, PathBuf};

use anyhow::Context;
use ignore::gitignore::{Gitignore, GitignoreBuilder};

use crate::desired_dir::load_dir_cached;
use crate::gitrev;
use crate::plan::render::Revision;
use crate::spec::load::{IGNORE_FILE, SourceFile, is_desired_state_file};
use crate::spec::validate::{ParseCache, load_sources_cached};
use crate::spec::{Diagnostic, Limits, LoadReport, Pos};

#[derive(Clone, Debug)]
pub enum ConfigSource {
    WorkTree { dir: PathBuf },
    GitHead { dir: PathBuf },
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

    pub fn dir(&self) -> &Path {
        match self {
            ConfigSource::WorkTree { dir } | ConfigSource::GitHead { dir } => dir,
        }
    }

    /// The repository's git directory, whose changes (commits, checkouts) matter
    /// in `--git-committed-only` mode.
    pub fn git_dir(&self) -> Option<PathBuf> {
        let repo = gix::discover(self.dir()).ok()?;
        Some(repo.git_dir().to_path_buf())
    }

    /// The commit HEAD points at (git mode), to tell whether a change to the
    /// repository could change what is loaded.
    pub fn head(&self) -> Option<String> {
        match self {
            ConfigSource::WorkTree { .. } => None,
            ConfigSource::GitHead { dir } => {
                let repo = gix::discover(dir).ok()?;
                Some(repo.head_id().ok()?.to_string())
            }
        }
    }

    /// Load the desired state, parsing again only the files that changed
    /// since the last load with `cache`.
    pub fn load(&self, limits: &Limits, cache: &mut ParseCache) -> Loaded {
        match self {
            ConfigSource::WorkTree { dir } => Loaded {
                report: load_dir_cached(dir, limits, cache),
                revision: gitrev::revision(dir),
            },
            ConfigSource::GitHead { dir } => match read_head(dir, limits) {
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

/// The desired-state files of `dir` as committed at HEAD, in the same order and
/// with the same filters (hidden files, editor leftovers, `.poolwrightignore`)
/// as a directory on disk.
fn read_head(dir: &Path, limits: &Limits) -> anyhow::Result<(Vec<SourceFile>, Revision)> {
    let repo = gix::discover(dir)?;
    let workdir = repo.workdir().context("bare repository")?;
    let prefix = dir
        .canonicalize()?
        .strip_prefix(workdir.canonicalize()?)
        .map(Path::to_path_buf)
        .with_context(|| format!("{} is outside the work tree", dir.display()))?;
    let mut head = repo.head()?;
    let branch = head
        .referent_name()
        .map(|n| n.shorten().to_string())
        .unwrap_or_else(|| "HEAD".to_string());
    let commit = head.peel_to_commit().context("HEAD has no commit yet")?;
    let revision = Revision {
        branch,
        commit: commit.id().to_string(),
        subject: commit
            .message()
            .map(|m| m.summary().to_string())
            .unwrap_or_default(),
        dirty: false,
    };
    let tree = commit.tree()?;
    let mut recorder = gix::traverse::tree::Recorder::default();
    tree.traverse().breadthfirst(&mut recorder)?;

    // Entries under `dir`, relative to it.
    let mut entries = Vec::new();
    for entry in recorder.records {
        if !entry.mode.is_blob() {
            continue;
        }
        let path = PathBuf::from(entry.filepath.to_string());
        let Ok(rel) = path.strip_prefix(&prefix) else {
            continue;
        };
        let hidden = rel
            .components()
            .any(|c| c.as_os_str().to_string_lossy().starts_with('.'));
        let name = rel
            .file_name()
            .map(|n| n.to_string_lossy().to_string())
            .unwrap_or_default();
        if name == IGNORE_FILE || (!hidden && is_desired_state_file(&name)) {
            entries.push((rel.to_path_buf(), entry.oid));
        }
    }
    let mut ignores: Vec<(PathBuf, Gitignore)> = Vec::new();
    for (rel, oid) in entries.iter().filter(|(rel, _)| rel.ends_with(IGNORE_FILE)) {
        let base = rel.parent().unwrap_or(Path::new("")).to_path_buf();
        let blob = repo.find_object(*oid)?;
        let mut builder = GitignoreBuilder::new(&base);
        for line in String::from_utf8_lossy(&blob.data).lines() {
            builder.add_line(None, line)?;
        }
        ignores.push((base, builder.build()?));
    }
    let ignored = |rel: &Path| {
        ignores.iter().any(|(base, gi)| {
            rel.starts_with(base) && gi.matched_path_or_any_parents(rel, false).is_ignore()
        })
    };
    let mut files = Vec::new();
    let mut wanted: Vec<_> = entries
        .into_iter()
        .filter(|(rel, _)| !rel.ends_with(IGNORE_FILE) && !ignored(rel))
        .collect();
    wanted.sort_by(|a, b| a.0.as_os_str().cmp(b.0.as_os_str()));
    for (rel, oid) in wanted {
        let display = dir.join(&rel).display().to_string();
        let header = repo.find_header(oid)?;
        if header.size() > limits.max_file_bytes {
            anyhow::bail!(
                "{display}: file is larger than {} bytes; refusing to read it",
                limits.max_file_bytes
            );
        }
        let blob = repo.find_object(oid)?;
        files.push(SourceFile {
            display,
            bytes: blob.data.clone(),
        });
    }
    Ok((files, revision))
}
