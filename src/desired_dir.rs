//! Reading a desired-state directory from disk: which files, in which order,
//! and only regular files of bounded size (a FIFO, a device or a symlink to
//! one under a YAML name would block a read forever). What the bytes mean is
//! the pure [`crate::spec`]'s business.

use std::path::{Path, PathBuf};

use crate::spec::load::{IGNORE_FILE, Limits, SourceFile, is_desired_state_file};
use crate::spec::validate::{LoadReport, ParseCache, load_sources_cached};
use crate::spec::{Diagnostic, Pos};

/// Load and validate a directory (recursively) or a single file.
pub fn load_dir(root: &Path, limits: &Limits) -> LoadReport {
    load_dir_cached(root, limits, &mut ParseCache::default())
}

/// Files named one by one (`validate FILE...`), loaded as one set.
pub fn load_files(paths: &[PathBuf], limits: &Limits) -> LoadReport {
    let (files, diags) = read_files(paths, limits);
    let report = crate::spec::validate::load_sources(&files, limits);
    checked(report, paths.len(), diags)
}

/// [`load_dir`], parsing only the files that changed since the last load
/// with the same `cache` (the daemon's reloads).
pub fn load_dir_cached(root: &Path, limits: &Limits, cache: &mut ParseCache) -> LoadReport {
    let paths = match discover(root) {
        Ok(p) => p,
        Err(d) => {
            return LoadReport {
                diagnostics: vec![d],
                ..LoadReport::default()
            };
        }
    };
    if paths.is_empty() {
        // An empty directory would read as "no pools at all": refuse it rather
        // than let it look like every pool was removed.
        return LoadReport {
            diagnostics: vec![Diagnostic::error(
                &root.display().to_string(),
                Pos::START,
                "no desired-state files (*.yaml, *.yml) found",
            )],
            ..LoadReport::default()
        };
    }
    let (files, diags) = read_files(&paths, limits);
    let report = load_sources_cached(&files, limits, cache);
    checked(report, paths.len(), diags)
}

/// A load's report with the files its documents name checked, and the
/// files that could not be read: any error of either leaves no config.
fn checked(mut report: LoadReport, files: usize, mut unread: Vec<Diagnostic>) -> LoadReport {
    report.files = files;
    if let Some(config) = &report.config {
        let named = check_named_files(config);
        if named.iter().any(|d| d.is_error()) {
            report.config = None;
        }
        report.diagnostics.extend(named);
    }
    if !unread.is_empty() {
        unread.append(&mut report.diagnostics);
        unread.sort_by(|a, b| (&a.file, a.line, a.column).cmp(&(&b.file, b.line, b.column)));
        report.diagnostics = unread;
        report.config = None;
    }
    report
}

/// The largest file a provider or cluster names (kubeconfig, token, CA,
/// client certificate) that is looked at.
const NAMED_FILE_LIMIT: u64 = 4 * 1024 * 1024;

/// The files providers and clusters name (kubeconfigs, tokens, CAs, client
/// certificates), relative to their document's directory: one that is not a
/// regular file of bounded size is an error at its field, as the load of a
/// desired-state file is; one that does not exist here is left to the
/// commands that use it.
fn check_named_files(config: &crate::spec::Config) -> Vec<Diagnostic> {
    use crate::spec::located::At;
    use crate::spec::types::ProviderSpec;
    let mut out = Vec::new();
    let mut check = |file: &str, field: &str, path: Option<&At<PathBuf>>| {
        let Some(p) = path else { return };
        let resolved = Path::new(file)
            .parent()
            .unwrap_or(Path::new("."))
            .join(crate::files::expand_home(&p.value));
        // Only its type and size: the daemon checks on every reload, and the
        // file is read by what uses it.
        match crate::files::check_regular(&resolved, NAMED_FILE_LIMIT) {
            Ok(_) => {}
            // Not here: the directory may be checked on a laptop, not on
            // the bastion; plan and apply say so when they connect.
            Err(crate::files::ReadError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => out.push(Diagnostic::error(
                file,
                p.pos,
                format!("{field} {} {e}", resolved.display()),
            )),
        }
    };
    for e in config.providers.values() {
        if let ProviderSpec::Http(h) = &e.doc.spec.value {
            check(&e.file, "tokenFile", h.token_file.as_ref());
            check(&e.file, "caFile", h.ca_file.as_ref());
            check(&e.file, "clientCert", h.client_cert.as_ref());
            check(&e.file, "clientKey", h.client_key.as_ref());
        }
    }
    for e in config.clusters.values() {
        check(&e.file, "kubeconfig", e.doc.spec.value.kubeconfig.as_ref());
    }
    out.sort_by(|a, b| (&a.file, a.line, a.column).cmp(&(&b.file, b.line, b.column)));
    out
}

/// The largest `.poolwrightignore` read.
const IGNORE_FILE_LIMIT: u64 = 1024 * 1024;

/// Every `.poolwrightignore` the walk would read (in the directory, the
/// directories under it that are not hidden, and its parents) must be a
/// regular file of bounded size: the walker reads them with a plain `read`,
/// which a FIFO would block forever.
fn check_ignore_files(root: &Path) -> Result<(), Diagnostic> {
    let check = |dir: &Path| -> Result<(), Diagnostic> {
        let path = dir.join(IGNORE_FILE);
        if std::fs::symlink_metadata(&path).is_err() {
            return Ok(());
        }
        let shown = path.display().to_string();
        match std::fs::metadata(&path) {
            Ok(m) if m.is_file() && m.len() <= IGNORE_FILE_LIMIT => Ok(()),
            Ok(m) if m.is_file() => Err(Diagnostic::error(
                &shown,
                Pos::START,
                format!("{IGNORE_FILE} is larger than the limit of {IGNORE_FILE_LIMIT} bytes"),
            )),
            Ok(m) => Err(Diagnostic::error(
                &shown,
                Pos::START,
                format!(
                    "{IGNORE_FILE} {}",
                    crate::files::ReadError::NotRegular(crate::files::kind_of(&m))
                ),
            )),
            Err(e) => Err(Diagnostic::error(
                &shown,
                Pos::START,
                format!("cannot read: {e}"),
            )),
        }
    };
    if let Ok(absolute) = std::path::absolute(root) {
        for parent in absolute.ancestors().skip(1) {
            check(parent)?;
        }
    }
    let mut pending = vec![(root.to_path_buf(), 0u32)];
    while let Some((dir, depth)) = pending.pop() {
        check(&dir)?;
        // The walk below refuses deeper trees with its own error.
        if depth >= 64 {
            continue;
        }
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let hidden = entry.file_name().to_string_lossy().starts_with('.');
            if !hidden && entry.file_type().is_ok_and(|t| t.is_dir()) {
                pending.push((entry.path(), depth + 1));
            }
        }
    }
    Ok(())
}

/// Every desired-state file under `root` (or `root` itself when it is a file), in a
/// deterministic order: byte order of the path relative to `root`.
pub fn discover(root: &Path) -> Result<Vec<PathBuf>, Diagnostic> {
    let shown = root.display().to_string();
    let meta = std::fs::metadata(root)
        .map_err(|e| Diagnostic::error(&shown, Pos::START, format!("cannot read: {e}")))?;
    if meta.is_file() {
        return Ok(vec![root.to_path_buf()]);
    }
    check_ignore_files(root)?;
    let mut files = Vec::new();
    let walker = ignore::WalkBuilder::new(root)
        .standard_filters(false)
        .hidden(true)
        .add_custom_ignore_filename(IGNORE_FILE)
        .follow_links(false)
        .build();
    for entry in walker {
        let entry = entry.map_err(|e| {
            Diagnostic::error(&shown, Pos::START, format!("cannot list directory: {e}"))
        })?;
        if entry.depth() == 0 {
            continue;
        }
        let name = entry.file_name().to_string_lossy().into_owned();
        let is_dir = entry.file_type().is_some_and(|t| t.is_dir());
        let is_link = entry.file_type().is_some_and(|t| t.is_symlink());
        let here = entry.path().display().to_string();
        if is_desired_state_file(&name) {
            // Whatever it is (a FIFO, a socket, a device, a link to one) is
            // read, and refused there with what it is: skipping it silently
            // would make its pools look removed.
            if is_dir {
                return Err(Diagnostic::error(
                    &here,
                    Pos::START,
                    format!(
                        "{name} is a directory, not a regular file; a directory's name may not end in .yaml or .yml"
                    ),
                ));
            }
            files.push(entry.into_path());
        } else if is_link {
            // Links to directories are not followed (no loops, no reading
            // outside the tree), and a link to nothing readable is not
            // skipped either: where a directory of pools was, its pools would
            // look removed (and prune would delete them).
            match std::fs::metadata(entry.path()) {
                Ok(m) if m.is_file() => {}
                Ok(m) if m.is_dir() => {
                    return Err(Diagnostic::error(
                        &here,
                        Pos::START,
                        format!(
                            "{name} is a symbolic link to a directory, which is not followed; \
                             move the files into the directory, or point poolwright at the link's target"
                        ),
                    ));
                }
                Ok(m) => {
                    return Err(Diagnostic::error(
                        &here,
                        Pos::START,
                        format!(
                            "{name} is a symbolic link to {}; remove it or point it at a regular file",
                            crate::files::kind_of(&m)
                        ),
                    ));
                }
                Err(e) => {
                    return Err(Diagnostic::error(
                        &here,
                        Pos::START,
                        format!(
                            "{name} is a symbolic link that cannot be followed ({e}); remove it"
                        ),
                    ));
                }
            }
        }
    }
    files.sort_by(|a, b| a.as_os_str().cmp(b.as_os_str()));
    Ok(files)
}

/// Read the files: regular files only, after following links (a FIFO or a
/// device under a YAML name would block or stream forever), refusing any over
/// the size limit before reading it whole.
fn read_files(paths: &[PathBuf], limits: &Limits) -> (Vec<SourceFile>, Vec<Diagnostic>) {
    let mut files = Vec::new();
    let mut diags = Vec::new();
    for path in paths {
        let display = path.display().to_string();
        match crate::files::read_regular(path, limits.max_file_bytes) {
            Ok(bytes) => files.push(SourceFile { display, bytes }),
            Err(crate::files::ReadError::TooLarge(limit)) => diags.push(Diagnostic::error(
                &display,
                Pos::START,
                format!(
                    "file is larger than the limit of {limit} bytes; split it into several files"
                ),
            )),
            Err(e @ crate::files::ReadError::NotRegular(_)) => {
                let name = path
                    .file_name()
                    .map_or(display.clone(), |n| n.to_string_lossy().into_owned());
                diags.push(Diagnostic::error(
                    &display,
                    Pos::START,
                    format!("{name} {e}"),
                ))
            }
            Err(e) => diags.push(Diagnostic::error(
                &display,
                Pos::START,
                format!("cannot read: {e}"),
            )),
        }
    }
    (files, diags)
}
