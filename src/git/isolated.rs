//! A fetch in a child process whose memory is bounded.
//!
//! A pack is compressed: a 1 GiB blob of zeros is about 1 MiB on the wire,
//! and indexing a pack inflates each object whole to hash it. So the bounds
//! on the wire (`--git-max-bytes`, `--git-max-objects`) cannot bound the
//! memory a fetch takes, and a push (or a pull request's preview ref) could
//! take the daemon's host down. The daemon therefore fetches in a child
//! process of its own binary (`poolwright git-fetch-worker`, hidden) whose
//! data segment is capped (`setrlimit(RLIMIT_DATA)`): a bomb ends the
//! child, never the daemon, and is refused with the size it declared. What
//! a fetch brought is checked again once it is in (`check_fetched`), and a
//! fetch refused for any bound leaves nothing behind (its packs removed, the
//! tracking ref put back), so a retry fetches it again and is refused again.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::mirror::{FetchError, Fetched, Mirror, RemoteOptions};

/// What the child is asked: the clone (by its state directory) and how.
#[derive(Debug, Serialize, Deserialize)]
pub struct Request {
    pub state_root: PathBuf,
    pub options: RemoteOptions,
}

/// The child's answer on its standard output.
type Answer = Result<Fetched, FetchError>;

/// The largest request read by the child.
const REQUEST_LIMIT: u64 = 1024 * 1024;

/// `poolwright git-fetch-worker`: one fetch, asked on standard input,
/// answered on standard output.
pub fn worker() -> anyhow::Result<u8> {
    let mut text = String::new();
    std::io::stdin()
        .take(REQUEST_LIMIT)
        .read_to_string(&mut text)?;
    let req: Request = serde_json::from_str(&text)?;
    let answer: Answer = match Mirror::open(&req.state_root, req.options) {
        Ok(m) => m.fetch_here(),
        Err(e) => Err(FetchError::Local {
            path: req.state_root.display().to_string(),
            message: e.to_string(),
        }),
    };
    let mut out = std::io::stdout().lock();
    serde_json::to_writer(&mut out, &answer)?;
    out.write_all(b"\n")?;
    out.flush()?;
    Ok(0)
}

/// Run `mirror`'s fetch in a child of `exe` (the poolwright binary), its
/// data segment capped at `max_memory` bytes, and its whole life at twice
/// the fetch's timeout (its own watcher ends it at the timeout).
pub fn fetch_in_child(mirror: &Mirror, exe: &Path, max_memory: u64) -> Answer {
    let opts = mirror.options();
    let request = serde_json::to_vec(&Request {
        state_root: mirror.state_root().to_path_buf(),
        options: opts.clone(),
    })
    .map_err(|e| mirror.local(e))?;
    let before = mirror.pack_files();
    let mut cmd = Command::new(exe);
    cmd.arg("git-fetch-worker")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env_remove("RUST_LOG");
    cap_memory(&mut cmd, max_memory);
    let mut child = cmd
        .spawn()
        .map_err(|e| mirror.local(format!("starting {}: {e}", exe.display())))?;
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(&request);
    }
    // Read both streams while waiting (a full pipe would block the child).
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let out = std::thread::spawn(move || read_bounded(stdout));
    let err = std::thread::spawn(move || read_bounded(stderr));
    let deadline = Instant::now() + opts.limits.timeout * 2 + Duration::from_secs(10);
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    let out = out.join().unwrap_or_default();
    let err = err.join().unwrap_or_default();
    if let Ok(answer) = serde_json::from_slice::<Answer>(&out) {
        return answer;
    }
    // No answer: the child ended (the memory cap, a signal) or was ended.
    let largest = mirror.discard_since(&before);
    let Some(status) = status else {
        return Err(FetchError::TimedOut {
            url: mirror.shown_url(),
            after: opts.limits.timeout,
        });
    };
    let said = String::from_utf8_lossy(&err);
    let last = said.lines().last().unwrap_or("").trim().to_string();
    if said.contains("memory allocation")
        || largest.is_some_and(|n| n > opts.limits.max_object_size)
    {
        return Err(FetchError::TooMuchMemory {
            url: mirror.shown_url(),
            limit: max_memory,
            largest,
            max_object_size: opts.limits.max_object_size,
        });
    }
    Err(mirror.local(format!(
        "the fetch process ended without an answer ({status}){}",
        if last.is_empty() {
            String::new()
        } else {
            format!(": {}", crate::secrets::redact(&last))
        }
    )))
}

/// At most 16 MiB of a child's stream (its answer is a few KiB).
fn read_bounded(stream: Option<impl Read>) -> Vec<u8> {
    let mut buf = Vec::new();
    if let Some(s) = stream {
        let _ = s.take(16 * 1024 * 1024).read_to_end(&mut buf);
    }
    buf
}

/// Cap the child's data segment (heap and private writable mappings),
/// which is what inflating an object takes.
fn cap_memory(cmd: &mut Command, max_memory: u64) {
    use std::os::unix::process::CommandExt;
    let limit = libc::rlimit {
        rlim_cur: max_memory as libc::rlim_t,
        rlim_max: max_memory as libc::rlim_t,
    };
    // SAFETY: setrlimit is async-signal-safe, and the closure touches
    // nothing but its own copy of `limit`.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setrlimit(libc::RLIMIT_DATA, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// The largest size an object of `pack` declares it inflates to (for a
/// delta, its own instructions), read as a stream: nothing is held whole.
/// `None` when the file is not a readable pack.
pub fn largest_object(pack: &Path) -> Option<u64> {
    use gix::odb::pack::data::input::{BytesToEntriesIter, EntryDataMode, Mode};
    let file = std::fs::File::open(pack).ok()?;
    let entries = BytesToEntriesIter::new_from_header(
        std::io::BufReader::new(file),
        Mode::AsIs,
        EntryDataMode::Ignore,
        gix::hash::Kind::Sha1,
    )
    .ok()?;
    let mut largest = None;
    for entry in entries {
        match entry {
            Ok(e) => largest = largest.max(Some(e.decompressed_size)),
            // A pack cut short (a child ended mid-fetch): what was read counts.
            Err(_) => break,
        }
    }
    largest
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pack of one blob of `size` zeros, as git writes it.
    fn pack_of_zeros(dir: &Path, size: usize) -> PathBuf {
        let git = |args: &[&str]| {
            let out = Command::new("git")
                .args(["-c", "user.name=t", "-c", "user.email=t@t", "-C"])
                .arg(dir)
                .args(args)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        git(&["init", "-q"]);
        std::fs::write(dir.join("zeros"), vec![0u8; size]).unwrap();
        git(&["add", "zeros"]);
        git(&["commit", "-q", "-m", "zeros"]);
        git(&["repack", "-a", "-d", "-q"]);
        std::fs::read_dir(dir.join(".git/objects/pack"))
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .find(|p| p.extension().is_some_and(|e| e == "pack"))
            .unwrap()
    }

    #[test]
    fn the_largest_object_is_read_from_the_headers_without_holding_it() {
        let tmp = tempfile::tempdir().unwrap();
        let path = pack_of_zeros(tmp.path(), 5 * 1024 * 1024);
        assert!(std::fs::metadata(&path).unwrap().len() < 64 * 1024);
        assert_eq!(largest_object(&path), Some(5 * 1024 * 1024));
        let path = tmp.path().join("not.pack");
        std::fs::write(&path, b"not a pack").unwrap();
        assert_eq!(largest_object(&path), None);
    }
}
