//! A JSON snapshot plus an append-only log of the changes since it
//! (`NAME.json` and `NAME.log.jsonl`), for state that is one map of many
//! entries changed one entry at a time (the simulator's fleet, the inventory).
//!
//! Rewriting the whole file for every change costs O(entries) per change, so
//! creating N pools cost O(N²): at 10,000 pools every change wrote megabytes.
//! Here a change appends one record (its entry's new state, whole) and syncs
//! it; the snapshot is rewritten when the log has grown as large as the
//! snapshot, so the cost per change is O(1) amortized. A small state (under
//! `SMALL`) is always rewritten whole: cheap, and the snapshot alone is then
//! the state, as tools reading it expect.
//!
//! Records carry absolute states, never increments: replaying a log over a
//! snapshot that already holds it (a crash between writing the snapshot and
//! emptying the log) gives the same state. A last line cut short by a crash
//! was never acknowledged and is dropped; any other bad line is corruption.

use std::io::Write;
use std::path::{Path, PathBuf};

use super::atomic_write;

/// Below this the snapshot is always rewritten whole.
pub const SMALL: u64 = 256 * 1024;

/// Where a snapshot-and-log pair stands: their sizes decide when to compact.
#[derive(Debug, Default)]
pub struct SnapshotLog {
    snapshot_bytes: u64,
    log_bytes: u64,
}

/// What was read: the snapshot (absent: nothing was ever saved) and the log's
/// records in order.
pub struct Read {
    pub snapshot: Option<Vec<u8>>,
    pub records: Vec<Vec<u8>>,
    pub state: SnapshotLog,
}

pub fn log_path(snapshot: &Path) -> PathBuf {
    snapshot.with_extension("log.jsonl")
}

fn not_found(e: &crate::files::ReadError) -> bool {
    matches!(e, crate::files::ReadError::Io(io) if io.kind() == std::io::ErrorKind::NotFound)
}

/// Read the snapshot and its log (regular files only, each within `limit`).
/// `valid` says whether a record parses: only the last may fail (it is dropped).
pub fn read(path: &Path, limit: u64, valid: impl Fn(&[u8]) -> bool) -> Result<Read, String> {
    let snapshot = match crate::files::read_regular(path, limit) {
        Ok(b) => Some(b),
        Err(e) if not_found(&e) => None,
        Err(e) => return Err(format!("reading {}: {e}", path.display())),
    };
    let log = log_path(path);
    let log_bytes = match crate::files::read_regular(&log, limit) {
        Ok(b) => b,
        Err(e) if not_found(&e) => Vec::new(),
        Err(e) => return Err(format!("reading {}: {e}", log.display())),
    };
    let lines: Vec<&[u8]> = log_bytes
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .collect();
    let mut records = Vec::with_capacity(lines.len());
    for (i, line) in lines.iter().enumerate() {
        if valid(line) {
            records.push(line.to_vec());
        } else if i + 1 < lines.len() {
            return Err(format!(
                "{} is corrupt: record {} of {} does not parse",
                log.display(),
                i + 1,
                lines.len()
            ));
        }
    }
    Ok(Read {
        state: SnapshotLog {
            snapshot_bytes: snapshot.as_ref().map_or(0, |s| s.len() as u64),
            log_bytes: log_bytes.len() as u64,
        },
        snapshot,
        records,
    })
}

impl SnapshotLog {
    /// Persist one change: append `record` to the log, or rewrite the
    /// snapshot whole (and empty the log) when the state is small or the log
    /// has outgrown it. Either is on disk (synced) when this returns.
    pub fn persist(
        &mut self,
        path: &Path,
        snapshot: impl FnOnce() -> Vec<u8>,
        record: impl FnOnce() -> Vec<u8>,
    ) -> std::io::Result<()> {
        if self.snapshot_bytes >= SMALL {
            let record = record();
            if self.would_append(record.len()) {
                return self.append(path, &record);
            }
        }
        self.compact(path, &snapshot())
    }

    /// Whether a record of `len` bytes would be appended (else the snapshot
    /// is due to be rewritten whole).
    pub fn would_append(&self, len: usize) -> bool {
        self.snapshot_bytes >= SMALL && self.log_bytes + (len as u64) < self.snapshot_bytes
    }

    /// Append one record to the log and sync it.
    pub fn append(&mut self, path: &Path, record: &[u8]) -> std::io::Result<()> {
        use std::os::unix::fs::OpenOptionsExt;
        let mut line = Vec::with_capacity(record.len() + 1);
        line.extend_from_slice(record);
        line.push(b'\n');
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(log_path(path))?;
        f.write_all(&line)?;
        f.sync_data()?;
        self.log_bytes += line.len() as u64;
        Ok(())
    }

    /// Write the whole state as the snapshot, then empty the log.
    pub fn compact(&mut self, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
        atomic_write(path, bytes)?;
        self.snapshot_bytes = bytes.len() as u64;
        if self.log_bytes > 0 {
            use std::os::unix::fs::OpenOptionsExt;
            let f = std::fs::OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_NOFOLLOW)
                .open(log_path(path))?;
            f.set_len(0)?;
            f.sync_all()?;
            self.log_bytes = 0;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(line: &[u8]) -> bool {
        line.starts_with(b"{") && line.ends_with(b"}")
    }

    #[test]
    fn a_large_state_appends_until_the_log_outgrows_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.json");
        let big = vec![b'x'; SMALL as usize];
        let mut s = SnapshotLog::default();
        s.persist(&path, || big.clone(), || unreachable!()).unwrap();
        // The snapshot is large now: a change is one appended record.
        s.persist(&path, || unreachable!(), || b"{1}".to_vec())
            .unwrap();
        s.persist(&path, || unreachable!(), || b"{2}".to_vec())
            .unwrap();
        let r = read(&path, 1 << 30, ok).unwrap();
        assert_eq!(r.snapshot.unwrap().len(), SMALL as usize);
        assert_eq!(r.records, [b"{1}".to_vec(), b"{2}".to_vec()]);
        // A log as large as the snapshot is folded into it.
        let record = vec![b'{'; SMALL as usize];
        s.persist(&path, || b"{new}".to_vec(), || record.clone())
            .unwrap();
        let r = read(&path, 1 << 30, ok).unwrap();
        assert_eq!(r.snapshot.unwrap(), b"{new}");
        assert!(r.records.is_empty());
    }

    #[test]
    fn a_torn_last_record_is_dropped_and_a_torn_middle_one_is_corruption() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.json");
        std::fs::write(&path, b"{}").unwrap();
        std::fs::write(log_path(&path), b"{a}\n{b}\n{c").unwrap();
        let r = read(&path, 1 << 20, ok).unwrap();
        assert_eq!(r.records, [b"{a}".to_vec(), b"{b}".to_vec()]);
        std::fs::write(log_path(&path), b"{a}\n{b\n{c}\n").unwrap();
        let e = read(&path, 1 << 20, ok).err().unwrap();
        assert!(e.contains("record 2 of 3 does not parse"), "{e}");
    }

    #[test]
    fn nothing_saved_reads_as_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let r = read(&dir.path().join("s.json"), 1 << 20, ok).unwrap();
        assert!(r.snapshot.is_none() && r.records.is_empty());
    }
}
