//! A child process of poolwright's own binary with its memory capped and a
//! deadline: a job that inflates untrusted data (a fetch) runs there, so
//! what it takes ends the child, never the daemon.

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// How a child ended: what it wrote, and its exit status (`None`: it
/// outlived its deadline and was killed).
pub struct Ended {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub status: Option<ExitStatus>,
}

/// Run `exe SUBCOMMAND` with `input` on its standard input, its data
/// segment capped at `max_memory` bytes, killed past `deadline`.
pub fn run_capped(
    exe: &Path,
    subcommand: &str,
    input: &[u8],
    max_memory: u64,
    deadline: Duration,
) -> std::io::Result<Ended> {
    let mut cmd = Command::new(exe);
    cmd.arg(subcommand)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env_remove("RUST_LOG");
    cap_memory(&mut cmd, max_memory);
    let mut child = cmd.spawn()?;
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(input);
    }
    // Read both streams while waiting (a full pipe would block the child).
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let out = std::thread::spawn(move || read_bounded(stdout));
    let err = std::thread::spawn(move || read_bounded(stderr));
    let until = Instant::now() + deadline;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() < until => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    Ok(Ended {
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
        status,
    })
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
