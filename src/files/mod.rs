//! Reading files a user names (desired-state files, kubeconfigs, token and
//! certificate files): regular files only, and never more than a limit.
//!
//! A FIFO, a socket or a device under a YAML name (or behind a symlink) would
//! block a plain `read` forever, or stream without end. The file is opened
//! with `O_NONBLOCK` (so opening a FIFO cannot block waiting for a writer),
//! then checked with `fstat` on the open descriptor, which is what is read:
//! no window between checking and reading where the path could be swapped.

pub mod snapshot_log;

use std::fmt;
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Why a file was not read.
#[derive(Debug)]
pub enum ReadError {
    Io(std::io::Error),
    /// Not a regular file (after following links): what it is instead.
    NotRegular(&'static str),
    /// Larger than the limit (bytes).
    TooLarge(u64),
    /// Not read within the deadline (a hung network file system).
    TimedOut(std::time::Duration),
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadError::Io(e) => write!(f, "{e}"),
            ReadError::NotRegular(what) => write!(f, "is {what}, not a regular file"),
            ReadError::TooLarge(limit) => {
                write!(f, "is larger than the limit of {limit} bytes")
            }
            ReadError::TimedOut(d) => {
                write!(f, "could not be read within {}s", d.as_secs())
            }
        }
    }
}

impl std::error::Error for ReadError {}

impl From<std::io::Error> for ReadError {
    fn from(e: std::io::Error) -> Self {
        ReadError::Io(e)
    }
}

/// What a file that is not regular is, for messages.
pub fn kind_of(meta: &std::fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_symlink() {
        "a symbolic link"
    } else {
        "a special file"
    }
}

/// A path a user wrote, with a leading `~` read as the home directory
/// (`$HOME`), as kubectl reads one in a kubeconfig path; any other path as
/// it is (a relative one is then resolved by the caller).
pub fn expand_home(path: &Path) -> std::path::PathBuf {
    let home = || std::env::var_os("HOME").filter(|h| !h.is_empty());
    match path.strip_prefix("~") {
        Ok(rest) => match home() {
            Some(h) => Path::new(&h).join(rest),
            None => path.to_path_buf(),
        },
        Err(_) => path.to_path_buf(),
    }
}

/// How long one read of a user-named file may take.
const READ_DEADLINE: std::time::Duration = std::time::Duration::from_secs(10);

/// Read `path` (following symlinks) if it is a regular file of at most
/// `limit` bytes, within [`READ_DEADLINE`].
///
/// A regular file cannot block a read the way a FIFO does, but one on a hung
/// network mount can, uninterruptibly: the read runs on a thread of its own
/// and the caller gets an error at the deadline (the thread is left to finish
/// or hang alone).
pub fn read_regular(path: &Path, limit: u64) -> Result<Vec<u8>, ReadError> {
    within_deadline(path, limit, read_regular_now)
}

/// Whether `path` (following symlinks) is a regular file of at most `limit`
/// bytes, found within [`READ_DEADLINE`]; nothing of it is read.
pub fn check_regular(path: &Path, limit: u64) -> Result<(), ReadError> {
    within_deadline(path, limit, |p, l| open_regular(p, l).map(|_| ()))
}

/// `f(path, limit)` on a thread of its own, given up at [`READ_DEADLINE`].
fn within_deadline<T: Send + 'static>(
    path: &Path,
    limit: u64,
    f: fn(&Path, u64) -> Result<T, ReadError>,
) -> Result<T, ReadError> {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    let owned = path.to_path_buf();
    let spawned = std::thread::Builder::new()
        .name("read-file".into())
        .spawn(move || {
            let _ = tx.send(f(&owned, limit));
        });
    if spawned.is_err() {
        // No thread to be had: do it here rather than not at all.
        return f(path, limit);
    }
    match rx.recv_timeout(READ_DEADLINE) {
        Ok(result) => result,
        Err(_) => Err(ReadError::TimedOut(READ_DEADLINE)),
    }
}

/// `path` opened without blocking, if it is a regular file within `limit`.
fn open_regular(path: &Path, limit: u64) -> Result<(std::fs::File, u64), ReadError> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY)
        .open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(ReadError::NotRegular(kind_of(&meta)));
    }
    if meta.len() > limit {
        return Err(ReadError::TooLarge(limit));
    }
    Ok((file, meta.len()))
}

fn read_regular_now(path: &Path, limit: u64) -> Result<Vec<u8>, ReadError> {
    let (file, len) = open_regular(path, limit)?;
    let mut bytes = Vec::with_capacity(len as usize);
    file.take(limit + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        // It grew while being read.
        return Err(ReadError::TooLarge(limit));
    }
    Ok(bytes)
}

/// [`read_regular`] as UTF-8 text.
pub fn read_regular_text(path: &Path, limit: u64) -> Result<String, ReadError> {
    let bytes = read_regular(path, limit)?;
    String::from_utf8(bytes).map_err(|e| {
        ReadError::Io(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("not UTF-8 text: {e}"),
        ))
    })
}

/// How large an append-only log may grow before it is rotated, and how many
/// rotated files are kept (`NAME.1` the newest ... `NAME.keep`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rotation {
    pub max_bytes: u64,
    pub keep: u32,
}

impl Default for Rotation {
    fn default() -> Self {
        Rotation {
            max_bytes: 64 * 1024 * 1024,
            keep: 5,
        }
    }
}

/// An append-only JSONL log (events, the simulator's audit) that never grows
/// past its rotation: before a line would push the file over `max_bytes`, the
/// file becomes `NAME.1`, `NAME.1` becomes `NAME.2`, and so on; the oldest
/// beyond `keep` is removed. Lines are written whole, one `write` each.
pub struct AppendLog {
    path: std::path::PathBuf,
    rotation: Rotation,
    file: std::fs::File,
    len: u64,
}

impl AppendLog {
    pub fn open(path: &Path, rotation: Rotation) -> std::io::Result<AppendLog> {
        let file = Self::open_file(path)?;
        let len = file.metadata()?.len();
        Ok(AppendLog {
            path: path.to_path_buf(),
            rotation,
            file,
            len,
        })
    }

    fn open_file(path: &Path) -> std::io::Result<std::fs::File> {
        // A symbolic link is not followed, as the lock file's is not: one
        // planted in a shared directory would send these lines elsewhere.
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY)
            .open(path)
            .map_err(|e| {
                if e.raw_os_error() == Some(libc::ELOOP) {
                    std::io::Error::new(
                        std::io::ErrorKind::InvalidInput,
                        format!(
                            "{} is a symbolic link, which is not followed (name the file itself)",
                            path.display()
                        ),
                    )
                } else {
                    e
                }
            })?;
        let meta = file.metadata()?;
        if !meta.is_file() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!(
                    "{} {}",
                    path.display(),
                    ReadError::NotRegular(kind_of(&meta))
                ),
            ));
        }
        Ok(file)
    }

    /// The `n`th rotated file (`n` ≥ 1).
    pub fn rotated(path: &Path, n: u32) -> std::path::PathBuf {
        let mut name = path.as_os_str().to_owned();
        name.push(format!(".{n}"));
        std::path::PathBuf::from(name)
    }

    pub fn append(&mut self, line: &[u8]) -> std::io::Result<()> {
        use std::io::Write;
        let len = line.len() as u64;
        if self.len > 0 && self.len.saturating_add(len) > self.rotation.max_bytes {
            self.rotate()?;
        }
        self.file.write_all(line)?;
        self.len = self.len.saturating_add(len);
        Ok(())
    }

    fn rotate(&mut self) -> std::io::Result<()> {
        let keep = self.rotation.keep;
        if keep == 0 {
            std::fs::remove_file(&self.path)?;
        } else {
            let _ = std::fs::remove_file(Self::rotated(&self.path, keep));
            for n in (1..keep).rev() {
                let from = Self::rotated(&self.path, n);
                if from.exists() {
                    std::fs::rename(&from, Self::rotated(&self.path, n + 1))?;
                }
            }
            std::fs::rename(&self.path, Self::rotated(&self.path, 1))?;
        }
        self.file = Self::open_file(&self.path)?;
        self.len = 0;
        Ok(())
    }
}

/// Replace `path` with `bytes` atomically: write a temporary file beside it, fsync
/// it, rename it over the target, and fsync the directory. A crash leaves either
/// the old or the new content, never a torn file.
pub fn atomic_write(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    std::fs::create_dir_all(dir)?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    std::fs::File::open(dir)?.sync_all()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_leading_tilde_is_the_home_directory() {
        let home = std::env::var_os("HOME").expect("HOME is set for tests");
        let home = Path::new(&home);
        assert_eq!(
            expand_home(Path::new("~/.kube/config")),
            home.join(".kube/config")
        );
        assert_eq!(expand_home(Path::new("~")), home);
        // Only a whole leading component: `~user` and inner tildes stay.
        assert_eq!(expand_home(Path::new("~bob/x")), Path::new("~bob/x"));
        assert_eq!(expand_home(Path::new("a/~/x")), Path::new("a/~/x"));
        assert_eq!(expand_home(Path::new("/etc/kube")), Path::new("/etc/kube"));
    }

    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("x.yaml");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let link = dir.path().join("link.yaml");
        std::os::unix::fs::symlink(&fifo, &link).unwrap();
        for p in [&fifo, &link] {
            let e = read_regular(p, 1024).unwrap_err();
            assert_eq!(e.to_string(), "is a FIFO, not a regular file");
        }
    }

    #[test]
    fn logs_rotate_and_keep_n_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        let rotation = Rotation {
            max_bytes: 100,
            keep: 2,
        };
        let mut log = AppendLog::open(&path, rotation).unwrap();
        let line = [b'x'; 39]
            .iter()
            .copied()
            .chain([b'\n'])
            .collect::<Vec<_>>();
        for _ in 0..20 {
            log.append(&line).unwrap();
        }
        // 40-byte lines, at most 100 bytes a file: two lines in each.
        let size = |p: &Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
        assert_eq!(size(&path), 80);
        assert_eq!(size(&AppendLog::rotated(&path, 1)), 80);
        assert_eq!(size(&AppendLog::rotated(&path, 2)), 80);
        assert!(!AppendLog::rotated(&path, 3).exists());
        // Reopening continues the current file's size.
        let mut log = AppendLog::open(&path, rotation).unwrap();
        log.append(&line).unwrap();
        assert_eq!(size(&path), 40);
        assert_eq!(size(&AppendLog::rotated(&path, 1)), 80);
    }

    #[test]
    fn limits_and_directories() {
        let dir = tempfile::tempdir().unwrap();
        let big = dir.path().join("big");
        std::fs::write(&big, vec![b'a'; 11]).unwrap();
        assert!(matches!(
            read_regular(&big, 10),
            Err(ReadError::TooLarge(10))
        ));
        assert_eq!(read_regular(&big, 11).unwrap().len(), 11);
        assert_eq!(
            read_regular(dir.path(), 10).unwrap_err().to_string(),
            "is a directory, not a regular file"
        );
        assert!(matches!(
            read_regular(&std::path::PathBuf::from("/dev/zero"), 10),
            Err(ReadError::NotRegular("a character device"))
        ));
    }
}
