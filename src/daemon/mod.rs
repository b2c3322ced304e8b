//! `poolwright run DIR`: the long-running service. Watches the desired state
//! (files, commits with `--git-committed-only`, or a remote config repo it
//! fetches with `--git-url`), reconciles on every change
//! and on a periodic resync, serves status and metrics, and talks to systemd.
//!
//! Shutdown (SIGTERM/SIGINT) stops starting new steps, lets in-flight steps
//! reach a safe point within `--shutdown-grace`, and exits 0; the rollout
//! journal (written before every side effect) lets the next start resume.

pub mod client;
pub mod run;
pub mod serve;
mod shutdown;
pub mod source;
mod turns;
pub mod views;
mod wiring;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use source::ConfigSource;

use crate::store::{StateDir, StateLock};

pub struct Options {
    pub dir: PathBuf,
    pub state_dir: PathBuf,
    pub prune: bool,
    pub dry_run: bool,
    pub git_committed_only: bool,
    /// `--git-url`: fetch the desired state from a remote config repo.
    pub git: Option<GitOptions>,
    pub resync: Duration,
    pub parallelism: usize,
    pub listen: SocketAddr,
    pub events: Option<PathBuf>,
    pub shutdown_grace: Duration,
    pub debounce: Duration,
    pub retry_after: Duration,
    /// `--ha kubernetes`: act only while holding the Lease.
    pub ha: Option<crate::ha::HaOptions>,
    pub control: ControlOptions,
    pub events_rotation: crate::files::Rotation,
}

/// The remote config repo: what to fetch, how often, what may be applied,
/// and the webhook secret.
#[derive(Clone, Debug)]
pub struct GitOptions {
    pub remote: crate::git::mirror::RemoteOptions,
    pub fetch: source::fetcher::FetchSettings,
    pub webhook_secret_file: Option<PathBuf>,
}

/// Who may change state, and what the listeners may cost.
#[derive(Clone, Debug)]
pub struct ControlOptions {
    /// Group owning the control socket (name or gid); default the daemon's.
    pub socket_group: Option<String>,
    /// Allow state changes on TCP with this bearer token.
    pub token_file: Option<PathBuf>,
    /// Extra `Host` names the TCP listener answers to.
    pub allowed_hosts: Vec<String>,
    /// Open connections at most (per listener); bounded by the open-files
    /// limit less a reserve.
    pub max_connections: usize,
    /// A request's headers within this; idle connections closed after it.
    pub header_timeout: Duration,
    /// `/healthz` fails (and the systemd watchdog stops) when the reconcile
    /// loop has not turned for this long.
    pub liveness_timeout: Duration,
}

/// Written to `STATE/daemon.json` so `poolwright status` and `rollout` find
/// the running daemon's status address.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct DaemonFile {
    pub pid: u32,
    pub url: String,
    /// State changes go here (the CLI's `rollout pause|resume`).
    #[serde(default)]
    pub control_socket: Option<PathBuf>,
    pub started_at: Timestamp,
}

fn daemon_file(state_dir: &std::path::Path) -> PathBuf {
    state_dir.join("daemon.json")
}

pub fn run(opts: Options) -> anyhow::Result<u8> {
    // A control token that cannot be used is said before anything starts.
    if let Some(token) = &opts.control.token_file {
        serve::access::read_secret("--control-token-file", token)?;
        serve::access::warn_if_readable_by_others("--control-token-file", token);
    }
    let state = StateDir::new(&opts.state_dir);
    let _lock = StateLock::acquire(
        &state.root,
        &match &opts.git {
            Some(git) => format!(
                "poolwright run --git-url {}",
                crate::git::mirror::shown_url(&git.remote.url)
            ),
            None => format!("poolwright run {}", opts.dir.display()),
        },
    )?;
    // The state directory serves this desired state, and no other: another's
    // inventory is not this one's to prune.
    let served = match &opts.git {
        Some(git) => crate::store::serves::Served::repo(
            &crate::git::mirror::shown_url(&git.remote.url),
            &git.remote.path,
        ),
        None => crate::store::serves::Served::dir(&opts.dir),
    };
    crate::store::serves::check(&state.root, &served)?;
    let source = match &opts.git {
        Some(git) => {
            if let Some(secret) = &git.webhook_secret_file {
                serve::hooks::read_webhook_secret(secret)?;
                serve::access::warn_if_readable_by_others("--webhook-secret-file", secret);
            }
            check_trust(git)?;
            // Fetched in a child process whose memory is capped: a pack
            // that inflates past it ends the child, not the daemon.
            let mirror = crate::git::mirror::Mirror::open(&state.root, git.remote.clone())?
                .in_child(
                    std::env::current_exe()
                        .map_err(|e| anyhow::anyhow!("finding poolwright's own binary: {e}"))?,
                );
            let remote = source::RemoteSource::new(mirror);
            // A commit in force from before --git-verify was turned on is
            // applied only if it passes the check too.
            if let (Some(verify), Some(commit)) = (&git.fetch.verify, remote.in_force())
                && let Err((_, why)) = source::fetcher::verify_commit(&remote, verify, &commit)
            {
                tracing::error!(
                    "the commit in force: {why}; nothing is applied until a verified tip is fetched"
                );
                remote.unaccept();
            }
            ConfigSource::Remote(std::sync::Arc::new(remote))
        }
        None => ConfigSource::new(opts.dir.clone(), opts.git_committed_only)?,
    };
    // Claimed once every setting checked out: a start refused for a bad
    // setting claims nothing.
    if crate::store::serves::claim(&state.root, &served, Timestamp::now())?
        == crate::store::serves::Claim::Earlier
    {
        tracing::warn!(
            "{}",
            crate::store::serves::earlier_note(&state.root, &served)
        );
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let code = rt.block_on(serve(opts, state, source));
    // A read stuck in a blocking thread must not hold the exit.
    rt.shutdown_timeout(Duration::from_secs(1));
    code
}

/// A token only over https; the allowed signers readable before anything
/// starts; a transport without integrity said out loud.
fn check_trust(git: &GitOptions) -> anyhow::Result<()> {
    let url = &git.remote.url;
    anyhow::ensure!(
        git.remote.token_file.is_none() || url.starts_with("https://"),
        "--git-token-file: a token is only sent over https://, and --git-url is {}",
        crate::git::mirror::shown_url(url)
    );
    if let Some(verify) = &git.fetch.verify {
        crate::git::verify::Trusted::load(verify.format, &verify.keys)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    } else if url.starts_with("git://") || url.starts_with("http://") {
        tracing::warn!(
            "--git-url {url}: this transport has no integrity (anyone on the network path can serve a commit); use https:// or ssh, or --git-verify"
        );
    }
    Ok(())
}

async fn serve(opts: Options, state: StateDir, source: ConfigSource) -> anyhow::Result<u8> {
    let mut daemon = wiring::build(&opts, state, source).await?;
    turns::run(&mut daemon, opts.control.liveness_timeout).await?;
    shutdown::stop(daemon, opts.shutdown_grace).await;
    Ok(0)
}
