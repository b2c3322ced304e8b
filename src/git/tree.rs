//! The desired-state files of a committed tree: what `--git-committed-only`
//! reads at a work tree's HEAD and what `--git-url` reads at the fetched
//! branch tip, with the same filters (hidden files, editor leftovers,
//! `.poolwrightignore`) and the same order as a directory on disk.

use std::path::{Path, PathBuf};

use anyhow::Context;
use ignore::gitignore::{Gitignore, GitignoreBuilder};

use crate::plan::render::Revision;
use crate::spec::Limits;
use crate::spec::load::{IGNORE_FILE, SourceFile, is_desired_state_file};

/// The revision a commit is, on `branch`.
pub fn revision_of(commit: &gix::Commit<'_>, branch: &str) -> Revision {
    Revision {
        branch: branch.to_string(),
        commit: commit.id().to_string(),
        subject: commit
            .message()
            .map(|m| m.summary().to_string())
            .unwrap_or_default(),
        dirty: false,
    }
}

/// The repository of the work tree containing `dir`, and `dir`'s path in it.
fn open_at(dir: &Path) -> anyhow::Result<(gix::Repository, PathBuf)> {
    let repo = gix::discover(dir)?;
    let workdir = repo.workdir().context("bare repository")?;
    let prefix = dir
        .canonicalize()?
        .strip_prefix(workdir.canonicalize()?)
        .map(Path::to_path_buf)
        .with_context(|| format!("{} is outside the work tree", dir.display()))?;
    Ok((repo, prefix))
}

/// The desired-state files of `dir` as committed at `git_ref` (a branch,
/// a tag, a commit, anything `git rev-parse` takes) of the repository
/// containing it: `plan --git-ref`, a branch planned before it merges.
pub fn read_ref(
    dir: &Path,
    git_ref: &str,
    limits: &Limits,
) -> anyhow::Result<(Vec<SourceFile>, Revision)> {
    let (repo, prefix) = open_at(dir)?;
    let id = repo
        .rev_parse_single(git_ref)
        .with_context(|| format!("--git-ref {git_ref:?}: no such branch, tag or commit"))?;
    let commit = repo
        .find_object(id)?
        .peel_to_commit()
        .with_context(|| format!("--git-ref {git_ref:?} is not a commit"))?;
    let branch = git_ref.strip_prefix("refs/heads/").unwrap_or(git_ref);
    let revision = revision_of(&commit, branch);
    let files = read_tree(&repo, &commit, &prefix, dir, limits)?;
    Ok((files, revision))
}

/// The desired-state files of `dir` as committed at the HEAD of the work tree
/// containing it.
pub fn read_head(dir: &Path, limits: &Limits) -> anyhow::Result<(Vec<SourceFile>, Revision)> {
    let (repo, prefix) = open_at(dir)?;
    let mut head = repo.head()?;
    let branch = head
        .referent_name()
        .map(|n| n.shorten().to_string())
        .unwrap_or_else(|| "HEAD".to_string());
    let commit = head.peel_to_commit().context("HEAD has no commit yet")?;
    let revision = revision_of(&commit, &branch);
    let files = read_tree(&repo, &commit, &prefix, dir, limits)?;
    Ok((files, revision))
}

/// The desired-state files under `prefix` (a directory inside the repository,
/// empty for its root) of `commit`'s tree. Diagnostics name a file
/// `display_root/PATH-UNDER-PREFIX`.
pub fn read_tree(
    repo: &gix::Repository,
    commit: &gix::Commit<'_>,
    prefix: &Path,
    display_root: &Path,
    limits: &Limits,
) -> anyhow::Result<Vec<SourceFile>> {
    let tree = commit.tree()?;
    let mut recorder = gix::traverse::tree::Recorder::default();
    tree.traverse().breadthfirst(&mut recorder)?;

    // Entries under `prefix`, relative to it.
    let mut entries = Vec::new();
    for entry in recorder.records {
        if !entry.mode.is_blob() {
            continue;
        }
        let path = PathBuf::from(entry.filepath.to_string());
        let Ok(rel) = path.strip_prefix(prefix) else {
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
        let display = display_root.join(&rel).display().to_string();
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
    Ok(files)
}
