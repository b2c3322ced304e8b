//! Git provenance of a desired-state directory: branch, commit, subject, and
//! whether the work tree has uncommitted changes. Read with gix, never by
//! shelling out to git.

use std::path::Path;

use crate::plan::render::Revision;

/// The revision of the work tree containing `dir`, or `None` when `dir` is not
/// in a git work tree (or the repository cannot be read: provenance is
/// informative, never a reason to stop).
pub fn revision(dir: &Path) -> Option<Revision> {
    let repo = gix::discover(dir).ok()?;
    let mut head = repo.head().ok()?;
    let branch = head
        .referent_name()
        .map(|n| n.shorten().to_string())
        .unwrap_or_else(|| "HEAD".to_string());
    let commit = head.peel_to_commit().ok()?;
    let subject = commit
        .message()
        .ok()
        .map(|m| m.summary().to_string())
        .unwrap_or_default();
    let dirty = repo.is_dirty().unwrap_or(true);
    Some(Revision {
        branch,
        commit: commit.id().to_string(),
        subject,
        dirty,
    })
}
