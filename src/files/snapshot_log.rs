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
//! Records carry absolute states, never increments, and the change that
//! makes the log outgrow the snapshot is logged before the snapshot is
//! rewritten: replaying a log over a snapshot that already holds it (a crash
//! between writing the snapshot and emptying the log) gives the same state.
//! A last line cut short by a crash was never acknowledged: readers drop it,
//! and the writer cuts it off before its next append. Any other bad line is
//! corruption, and so is a log without its snapshot.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::atomic_write;

/// Below this the snapshot is always rewritten whole (and there is no log).
const SMALL: u64 = 256 * 1024;

/// Where a snapshot-and-log pair stands: their sizes decide when to compact.
#[derive(Debug, Default)]
pub struct SnapshotLog {
    snapshot_bytes: u64,
    /// The log's length up to its last whole record: anything after it (a
    /// record torn by a crash) is cut off before the next append.
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
pub fn read(
    path: &Path,
    limit: u64,
    valid: impl Fn(&[u8]) -> bool,
) -> Result<Read, crate::model::Unreadable> {
    let snapshot = match crate::files::read_regular(path, limit) {
        Ok(b) => Some(b),
        Err(e) if not_found(&e) => None,
        Err(e) => return Err(format!("reading {}: {e}", path.display()).into()),
    };
    let log = log_path(path);
    let log_bytes = match crate::files::read_regular(&log, limit) {
        Ok(b) => b,
        Err(e) if not_found(&e) => Vec::new(),
        Err(e) => return Err(format!("reading {}: {e}", log.display()).into()),
    };
    let mut records = Vec::new();
    let mut whole = 0u64;
    let mut start = 0usize;
    let mut torn = false;
    while start < log_bytes.len() {
        let (line, next, ended) = match log_bytes[start..].iter().position(|b| *b == b'\n') {
            Some(i) => (&log_bytes[start..start + i], start + i + 1, true),
            None => (&log_bytes[start..], log_bytes.len(), false),
        };
        if torn {
            return Err(format!(
                "{} is corrupt: a record before the last does not parse",
                log.display()
            )
            .into());
        }
        if ended && valid(line) {
            records.push(line.to_vec());
            whole = next as u64;
        } else if !line.is_empty() {
            torn = true;
        } else {
            whole = next as u64;
        }
        start = next;
    }
    if snapshot.is_none() && !records.is_empty() {
        return Err(format!(
            "{} is missing but {} holds {} change(s) made after it: restore the snapshot, or remove the log to start from nothing",
            path.display(),
            log.display(),
            records.len()
        ).into());
    }
    Ok(Read {
        state: SnapshotLog {
            snapshot_bytes: snapshot.as_ref().map_or(0, |s| s.len() as u64),
            log_bytes: whole,
        },
        snapshot,
        records,
    })
}

impl SnapshotLog {
    /// Whether a change of `record_len` bytes is folded into a new snapshot
    /// (the state is small, or the log would outgrow the snapshot); else it
    /// is only appended.
    pub fn compacts_after(&self, record_len: usize) -> bool {
        self.snapshot_bytes < SMALL || self.log_bytes + record_len as u64 + 1 > self.snapshot_bytes
    }

    /// Persist one change: append `record` to the log (a large state), then
    /// rewrite the snapshot whole and empty the log when `compacts_after`
    /// says so. On disk (synced) when this returns. `snapshot` is called only
    /// when it is needed.
    pub fn persist(
        &mut self,
        path: &Path,
        record: &[u8],
        snapshot: impl FnOnce() -> Vec<u8>,
    ) -> std::io::Result<()> {
        let compact = self.compacts_after(record.len());
        if self.snapshot_bytes >= SMALL {
            self.append(path, record)?;
        }
        if compact {
            self.compact(path, &snapshot())?;
        }
        Ok(())
    }

    /// Append one record to the log and sync it, after cutting off what a
    /// crash may have left after the last whole record.
    fn append(&mut self, path: &Path, record: &[u8]) -> std::io::Result<()> {
        let mut line = Vec::with_capacity(record.len() + 1);
        line.extend_from_slice(record);
        line.push(b'\n');
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(log_path(path))?;
        if f.metadata()?.len() != self.log_bytes {
            f.set_len(self.log_bytes)?;
        }
        let written = f.write_all(&line).and_then(|()| f.sync_data());
        if let Err(e) = written {
            // A partial record (a full disk) must not glue onto the next one.
            let _ = f.set_len(self.log_bytes);
            return Err(e);
        }
        self.log_bytes += line.len() as u64;
        Ok(())
    }

    /// Write the whole state as the snapshot, then empty the log (also one
    /// this process never wrote to, left beside a snapshot that was gone).
    fn compact(&mut self, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
        atomic_write(path, bytes)?;
        self.snapshot_bytes = bytes.len() as u64;
        match std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(log_path(path))
        {
            Ok(f) => {
                f.set_len(0)?;
                f.sync_all()?;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        self.log_bytes = 0;
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
        s.persist(&path, b"{0}", || big.clone()).unwrap();
        // The snapshot is large now: a change is one appended record.
        s.persist(&path, b"{1}", || unreachable!()).unwrap();
        s.persist(&path, b"{2}", || unreachable!()).unwrap();
        let r = read(&path, 1 << 30, ok).unwrap();
        assert_eq!(r.snapshot.unwrap().len(), SMALL as usize);
        assert_eq!(r.records, [b"{1}".to_vec(), b"{2}".to_vec()]);
        // A log as large as the snapshot is folded into it, the change that
        // outgrew it logged first (a crash before the log is emptied replays
        // it last, over a snapshot that already holds it).
        let record = vec![b'{'; SMALL as usize];
        s.persist(&path, &record, || b"{new}".to_vec()).unwrap();
        let r = read(&path, 1 << 30, ok).unwrap();
        assert_eq!(r.snapshot.unwrap(), b"{new}");
        assert!(r.records.is_empty());
    }

    #[test]
    fn a_torn_last_record_is_dropped_then_cut_off_and_a_torn_middle_one_is_corruption() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.json");
        std::fs::write(&path, vec![b'x'; SMALL as usize]).unwrap();
        std::fs::write(log_path(&path), b"{a}\n{b}\n{c").unwrap();
        let r = read(&path, 1 << 30, ok).unwrap();
        assert_eq!(r.records, [b"{a}".to_vec(), b"{b}".to_vec()]);
        // The writer cuts the torn tail off before appending.
        let mut s = r.state;
        s.persist(&path, b"{d}", || unreachable!()).unwrap();
        let r = read(&path, 1 << 30, ok).unwrap();
        assert_eq!(
            r.records,
            [b"{a}".to_vec(), b"{b}".to_vec(), b"{d}".to_vec()]
        );
        std::fs::write(log_path(&path), b"{a}\n{b\n{c}\n").unwrap();
        let e = read(&path, 1 << 30, ok).err().unwrap();
        assert!(
            e.0.contains("a record before the last does not parse"),
            "{e}"
        );
    }

    #[test]
    fn a_log_without_its_snapshot_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.json");
        std::fs::write(log_path(&path), b"{a}\n").unwrap();
        let e = read(&path, 1 << 20, ok).err().unwrap();
        assert!(e.0.contains("is missing but"), "{e}");
    }

    #[test]
    fn nothing_saved_reads_as_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let r = read(&dir.path().join("s.json"), 1 << 20, ok).unwrap();
        assert!(r.snapshot.is_none() && r.records.is_empty());
    }
}
