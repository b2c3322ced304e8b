//! Serving HTTP on the TCP listener and the control socket with bounded
//! resources: a cap on open connections, a deadline for a request's headers
//! (which also closes idle keep-alive connections and slow-header clients),
//! and file descriptors kept in reserve for the journal and the inventory.
//!
//! axum's `serve` has neither a connection cap nor timeouts, so connections
//! are accepted here and handed to hyper directly.

use crate::sync::Locked;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use tokio::net::{TcpListener, UnixListener};

use crate::daemon::serve::peer_id::Peer;
use crate::sync::Stop;

/// Limits of one listener.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Open connections at most; more are closed on accept.
    pub max_connections: usize,
    /// A request's headers must arrive within this; an idle keep-alive
    /// connection is closed after it too.
    pub header_timeout: Duration,
}

/// A write that makes no progress for this long closes its connection: a
/// client that stops reading (a live stream above all) gives its place up.
const WRITE_STALL: Duration = Duration::from_secs(30);

/// File descriptors never handed to connections: journal and inventory writes
/// (a temp file, its directory for fsync), provider sockets, config reads.
const FD_RESERVE: u64 = 256;

/// Raise the soft open-files limit to the hard one, and return what there is
/// to share between the two listeners' connections after the reserve.
pub fn connection_budget() -> usize {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit write/read only the struct passed.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: lim.rlim_max,
                rlim_max: lim.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                lim = raised;
            }
        }
    }
    let total = if lim.rlim_cur == libc::RLIM_INFINITY {
        65_536
    } else {
        lim.rlim_cur
    };
    usize::try_from(total.saturating_sub(FD_RESERVE).max(16)).unwrap_or(usize::MAX)
}

/// Accept on `listener` until `stop`, serving `router` on each connection.
pub async fn serve_tcp(listener: TcpListener, router: Router, limits: Limits, stop: Stop) {
    let slots = Arc::new(Connections::new(limits.max_connections));
    loop {
        let accepted = tokio::select! {
            _ = stop.requested() => return,
            a = listener.accept() => a,
        };
        match accepted {
            Ok((stream, remote)) => {
                let _ = stream.set_nodelay(true);
                let Ok(local) = stream.local_addr() else {
                    continue;
                };
                // Who a connection from this host belongs to is read from
                // /proc once, off the async threads, before it is served.
                let (router, slots) = (router.clone(), slots.clone());
                tokio::spawn(async move {
                    let peer = tokio::task::spawn_blocking(move || Peer::tcp(remote, local))
                        .await
                        .unwrap_or(Peer::Tcp {
                            remote,
                            owner: None,
                        });
                    spawn_connection(stream, peer, &router, limits, &slots);
                });
            }
            Err(e) => accept_failed(&e).await,
        }
    }
}

/// The control socket: created fresh in the state directory, mode 0660, and
/// owned by `group` when one is given.
pub fn bind_control_socket(path: &Path, group: Option<&str>) -> anyhow::Result<UnixListener> {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    // A socket left by a killed daemon is removed; anything else in its place
    // is not ours to delete.
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if meta.file_type().is_socket() {
            std::fs::remove_file(path)
                .with_context(|| format!("removing the stale control socket {}", path.display()))?;
        } else {
            anyhow::bail!(
                "{} exists and is {}; remove it so the control socket can be created",
                path.display(),
                crate::files::kind_of(&meta)
            );
        }
    }
    // Created with no access for others from the first instant.
    // SAFETY: umask only changes this process's file creation mask.
    let old = unsafe { libc::umask(0o117) };
    let bound = UnixListener::bind(path);
    unsafe { libc::umask(old) };
    let listener =
        bound.with_context(|| format!("creating the control socket {}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660))?;
    if let Some(group) = group {
        let gid = group_id(group)?;
        std::os::unix::fs::chown(path, None, Some(gid))
            .with_context(|| format!("giving the control socket to group {group}"))?;
    }
    Ok(listener)
}

/// A group by name or number.
pub fn group_id(group: &str) -> anyhow::Result<u32> {
    if let Ok(gid) = group.parse() {
        return Ok(gid);
    }
    let name = std::ffi::CString::new(group).context("a group name has no NUL")?;
    let mut grp: libc::group = unsafe { std::mem::zeroed() };
    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    let mut out: *mut libc::group = std::ptr::null_mut();
    // SAFETY: getgrnam_r writes into `grp` and `buf`, both owned here and
    // large enough as declared.
    let rc = unsafe {
        libc::getgrnam_r(
            name.as_ptr(),
            &mut grp,
            buf.as_mut_ptr(),
            buf.len(),
            &mut out,
        )
    };
    if rc != 0 || out.is_null() {
        anyhow::bail!("--control-group {group}: no such group");
    }
    Ok(grp.gr_gid)
}

/// Accept on the control socket until `stop`.
pub async fn serve_unix(listener: UnixListener, router: Router, limits: Limits, stop: Stop) {
    let slots = Arc::new(Connections::new(limits.max_connections));
    loop {
        let accepted = tokio::select! {
            _ = stop.requested() => return,
            a = listener.accept() => a,
        };
        match accepted {
            Ok((stream, _)) => {
                let Ok(cred) = stream.peer_cred() else {
                    continue;
                };
                let peer = Peer::Socket {
                    uid: cred.uid(),
                    pid: cred.pid(),
                };
                spawn_connection(stream, peer, &router, limits, &slots);
            }
            Err(e) => accept_failed(&e).await,
        }
    }
}

/// Out of descriptors (or another transient failure): back off instead of
/// spinning, and let the connections in flight finish.
async fn accept_failed(e: &std::io::Error) {
    tracing::warn!("accepting a connection: {e}");
    tokio::time::sleep(Duration::from_millis(100)).await;
}

fn spawn_connection<S>(
    stream: S,
    peer: Peer,
    router: &Router,
    limits: Limits,
    slots: &Arc<Connections>,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let mut open = slots.open.locked();
    // At the cap, the connection idle the longest (no request in progress)
    // makes room: a flood of silent connections cannot keep a prober's
    // `/healthz` out. When every one is busy, the new one is closed at once.
    if open.len() >= slots.cap {
        let idlest = open
            .iter()
            .filter(|(_, c)| c.in_flight.load(Ordering::SeqCst) == 0)
            .min_by_key(|(_, c)| c.idle_since_ms.load(Ordering::SeqCst))
            .map(|(id, _)| *id);
        match idlest {
            Some(id) => {
                if let Some(c) = open.remove(&id) {
                    c.task.abort();
                }
            }
            None => return,
        }
    }
    let id = slots.next.fetch_add(1, Ordering::SeqCst);
    let in_flight = Arc::new(AtomicUsize::new(0));
    let idle_since_ms = Arc::new(AtomicU64::new(slots.now_ms()));
    let router = router.clone();
    let task = tokio::spawn({
        let (slots, in_flight, idle_since_ms) =
            (slots.clone(), in_flight.clone(), idle_since_ms.clone());
        async move {
            let registry = slots.clone();
            let service = hyper::service::service_fn(move |mut req| {
                req.extensions_mut().insert(peer.clone());
                let mut router = router.clone();
                let (slots, in_flight, idle_since_ms) =
                    (slots.clone(), in_flight.clone(), idle_since_ms.clone());
                in_flight.fetch_add(1, Ordering::SeqCst);
                async move {
                    let answer =
                        tower_service::Service::call(&mut router, req.map(axum::body::Body::new))
                            .await;
                    idle_since_ms.store(slots.now_ms(), Ordering::SeqCst);
                    in_flight.fetch_sub(1, Ordering::SeqCst);
                    answer
                }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_timeout)
                .max_buf_size(64 * 1024)
                .serve_connection(
                    TokioIo::new(crate::daemon::serve::write_deadline::WriteDeadline::new(
                        stream,
                        WRITE_STALL,
                    )),
                    service,
                )
                .await;
            registry.open.locked().remove(&id);
        }
    });
    // Registered under the lock the task takes to deregister, so it cannot
    // finish before it is registered.
    open.insert(
        id,
        Open {
            in_flight,
            idle_since_ms,
            task: task.abort_handle(),
        },
    );
}

/// The open connections of one listener, at most `cap`.
struct Connections {
    cap: usize,
    next: AtomicU64,
    origin: std::time::Instant,
    open: std::sync::Mutex<std::collections::HashMap<u64, Open>>,
}

struct Open {
    /// Requests being answered on it.
    in_flight: Arc<AtomicUsize>,
    /// Since when it has been without a request (ms since `origin`).
    idle_since_ms: Arc<AtomicU64>,
    task: tokio::task::AbortHandle,
}

impl Connections {
    fn new(cap: usize) -> Connections {
        Connections {
            cap: cap.max(1),
            next: AtomicU64::new(0),
            origin: std::time::Instant::now(),
            open: std::sync::Mutex::new(std::collections::HashMap::new()),
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX)
    }
}

/// Where the control socket lives.
pub fn control_socket_path(state_dir: &Path) -> PathBuf {
    state_dir.join("control.sock")
}
