//! One writer per state directory: an advisory lock on `STATE/lock`, whose content
//! names the holder so the refusal message can say who holds it.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::path::Path;

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockHolder {
    pub pid: u32,
    pub command: String,
    pub since: jiff::Timestamp,
}

/// Held for as long as this value lives; the OS releases it if the process dies.
#[derive(Debug)]
pub struct StateLock {
    _file: File,
}

/// Whether a process acts on a state directory now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Activity {
    /// No apply and no daemon holds the lock.
    Idle,
    /// One does (who, when the lock file says).
    Held(Option<LockHolder>),
    /// The lock file cannot be read (another user's state directory).
    Unknown,
}

impl StateLock {
    /// Who holds the lock, without taking it (a shared try-lock, released
    /// at once; the holder's is exclusive).
    pub fn activity(state_dir: &Path) -> Activity {
        use std::os::unix::fs::OpenOptionsExt;
        let path = state_dir.join("lock");
        let Ok(mut file) = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(&path)
        else {
            return if path.symlink_metadata().is_err() && state_dir.is_dir() {
                Activity::Idle
            } else {
                Activity::Unknown
            };
        };
        if !file.metadata().is_ok_and(|m| m.is_file()) {
            return Activity::Unknown;
        }
        match file.try_lock_shared() {
            Ok(()) => Activity::Idle,
            Err(std::fs::TryLockError::WouldBlock) => {
                let mut text = String::new();
                let _ = (&mut file).take(64 * 1024).read_to_string(&mut text);
                Activity::Held(serde_json::from_str(&text).ok())
            }
            Err(std::fs::TryLockError::Error(_)) => Activity::Unknown,
        }
    }

    /// Take the lock or say who has it.
    pub fn acquire(state_dir: &Path, command: &str) -> anyhow::Result<StateLock> {
        if !state_dir.exists() {
            std::fs::create_dir_all(state_dir).map_err(|e| {
                anyhow::anyhow!("creating state directory {}: {e}", state_dir.display())
            })?;
            // Its owner writes, the control group may look in and reach the
            // socket, nobody else (the mode the unit's StateDirectoryMode sets).
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(state_dir, std::fs::Permissions::from_mode(0o750))
                .map_err(|e| anyhow::anyhow!("setting the mode of {}: {e}", state_dir.display()))?;
        }
        let path = state_dir.join("lock");
        // Never through a link (a planted `lock -> /elsewhere` would have the
        // holder's JSON written over that file), never a FIFO or a device.
        use std::os::unix::fs::OpenOptionsExt;
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(&path)
            .map_err(|e| {
                if e.raw_os_error() == Some(libc::ELOOP) {
                    anyhow::anyhow!(
                        "{} is a symbolic link; the lock file must be a regular file (remove the link)",
                        path.display()
                    )
                } else {
                    anyhow::anyhow!("opening {}: {e}", path.display())
                }
            })?;
        let meta = file.metadata()?;
        if !meta.is_file() {
            anyhow::bail!(
                "{} is {}, not a regular file (remove it)",
                path.display(),
                crate::files::kind_of(&meta)
            );
        }
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                let mut text = String::new();
                let _ = file.read_to_string(&mut text);
                let who = match serde_json::from_str::<LockHolder>(&text) {
                    Ok(h) => format!("{} (pid {}, since {})", h.command, h.pid, h.since),
                    Err(_) => "another poolwright process".to_string(),
                };
                anyhow::bail!(
                    "state directory {} is locked by {who}; only one apply or daemon may act on it at a time",
                    state_dir.display()
                );
            }
            Err(std::fs::TryLockError::Error(e)) => {
                anyhow::bail!("locking {}: {e}", path.display())
            }
        }
        let holder = LockHolder {
            pid: std::process::id(),
            command: command.to_string(),
            since: jiff::Timestamp::now(),
        };
        file.set_len(0)?;
        file.rewind()?;
        file.write_all(serde_json::to_string(&holder)?.as_bytes())?;
        file.sync_all()?;
        Ok(StateLock { _file: file })
    }
}
