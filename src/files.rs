//! Reading files a user names (desired-state files, kubeconfigs, token and
//! certificate files): regular files only, and never more than a limit.
//!
//! A FIFO, a socket or a device under a YAML name (or behind a symlink) would
//! block a plain `read` forever, or stream without end. The file is opened
//! with `O_NONBLOCK` (so opening a FIFO cannot block waiting for a writer),
//! then checked with `fstat` on the open descriptor, which is what is read:
//! no window between checking and reading where the path could be swapped.

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
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadError::Io(e) => write!(f, "{e}"),
            ReadError::NotRegular(what) => write!(f, "is {what}, not a regular file"),
            ReadError::TooLarge(limit) => {
                write!(f, "is larger than the limit of {limit} bytes")
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

/// Read `path` (following symlinks) if it is a regular file of at most
/// `limit` bytes.
pub fn read_regular(path: &Path, limit: u64) -> Result<Vec<u8>, ReadError> {
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
    let mut bytes = Vec::with_capacity(meta.len() as usize);
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

#[cfg(test)]
mod tests {
    use super::*;

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
