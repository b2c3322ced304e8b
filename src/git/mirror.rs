//! The daemon's own clone of a config repo (`run --git-url`): a bare
//! repository under the state directory, fetched with gix, from which the
//! desired state is read at the branch tip. No work tree is kept.
//!
//! A fetch is bounded (time, the bytes and the objects it brings: a watcher
//! interrupts it the moment one is crossed) and never prompts: a token comes from a file, read again on every
//! fetch; ssh runs with the deploy key and the known-hosts file given, and
//! refuses a host it does not know.
//!
//! The commit in force is kept beside the clone (not in it: a clone removed
//! to start afresh keeps it), so a restart applies what was in force, not
//! whatever the remote holds now.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use sha2::{Digest, Sha256};

use crate::files::read_regular_text;
use crate::plan::render::Revision;
use crate::spec::Limits;
use crate::spec::load::SourceFile;

/// What to fetch, and how.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct RemoteOptions {
    pub url: String,
    pub branch: String,
    /// The desired-state directory inside the repository ("" for its root).
    pub path: PathBuf,
    pub token_file: Option<PathBuf>,
    /// https: further CAs to trust (PEM), besides the system's.
    pub ca_file: Option<PathBuf>,
    pub ssh_key: Option<PathBuf>,
    pub known_hosts: Option<PathBuf>,
    pub limits: FetchLimits,
    /// Refs to fetch besides the branch, to plan but never apply
    /// (`--preview-refs refs/heads/pr/*`): patterns with at most one `*`.
    pub preview_refs: Vec<String>,
}

/// The most preview refs taken from one fetch (by name); the rest are
/// counted, not planned.
const MAX_PREVIEWS: usize = 50;

/// The namespace a preview pattern's listing names as its destination
/// (nothing is written there); never previewed itself.
const PREVIEWS_NS: &str = "refs/previews/";

/// The bounds of one fetch.
#[derive(Clone, Copy, Debug, serde::Serialize, serde::Deserialize)]
pub struct FetchLimits {
    pub timeout: Duration,
    /// What one fetch may bring, in bytes (a first fetch brings everything).
    pub max_bytes: u64,
    /// Objects in one incoming pack (a first fetch receives them all).
    pub max_objects: u64,
    /// The most bytes one object may inflate to (the wire bounds say
    /// nothing of it: a pack is compressed).
    pub max_object_size: u64,
    /// The data segment of the process that fetches (see [`isolated`]).
    pub max_memory: u64,
}

/// The defaults of `--git-max-object-size` and `--git-max-memory`.
pub const DEFAULT_MAX_OBJECT_SIZE: u64 = 16 * 1024 * 1024;
pub const DEFAULT_MAX_MEMORY: u64 = 256 * 1024 * 1024;

impl Default for FetchLimits {
    fn default() -> Self {
        FetchLimits {
            timeout: Duration::from_secs(300),
            max_bytes: 512 * 1024 * 1024,
            max_objects: 2_000_000,
            max_object_size: DEFAULT_MAX_OBJECT_SIZE,
            max_memory: DEFAULT_MAX_MEMORY,
        }
    }
}

/// Why a fetch gave no new tip. Each says what was asked and what answered.
#[derive(Debug, thiserror::Error, serde::Serialize, serde::Deserialize)]
pub enum FetchError {
    #[error("fetching {url}: {message}")]
    Remote { url: String, message: String },
    #[error("fetching {url}: the remote has no branch {branch:?} (deleted or renamed?)")]
    NoBranch { url: String, branch: String },
    #[error("fetching {url}: took longer than {}s (--git-fetch-timeout)", .after.as_secs())]
    TimedOut { url: String, after: Duration },
    #[error("fetching {url}: the fetch would bring more than {limit} bytes (--git-max-bytes)")]
    TooLarge { url: String, limit: u64 },
    #[error(
        "fetching {url}: the incoming pack has {count} objects, more than {limit} (--git-max-objects)"
    )]
    TooManyObjects { url: String, count: u64, limit: u64 },
    #[error(
        "fetching {url}: an object inflates to {size} bytes, more than {limit} (--git-max-object-size; no desired-state file may exceed 1 MiB)"
    )]
    ObjectTooLarge { url: String, size: u64, limit: u64 },
    #[error(
        "fetching {url}: the fetch needs more than its {limit} bytes of memory (--git-max-memory): {}",
        match .largest {
            Some(n) => format!("the pack declares an object of {n} bytes (--git-max-object-size is {max_object_size})"),
            None => format!("an object inflates past it (--git-max-object-size is {max_object_size})"),
        }
    )]
    TooMuchMemory {
        url: String,
        limit: u64,
        largest: Option<u64>,
        max_object_size: u64,
    },
    #[error("reading the token file {path}: {message}")]
    Token { path: String, message: String },
    #[error("the CA file {path}: {message}")]
    Ca { path: String, message: String },
    #[error("a fetch of {url} is still running (stuck on the network?); not starting another")]
    Busy { url: String },
    #[error("the local clone {path}: {message}")]
    Local { path: String, message: String },
}

/// What a fetch in a child process is asked: the clone (by its state
/// directory) and how.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct Request {
    pub state_root: PathBuf,
    pub options: RemoteOptions,
}

/// A child's answer on its standard output.
pub type Answer = Result<Fetched, FetchError>;

/// A fetched branch tip.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Fetched {
    pub revision: Revision,
    /// Objects received (0 when the tip was already here).
    pub objects: u64,
    /// The refs matching `preview_refs` (at most [`MAX_PREVIEWS`], by name),
    /// each with its tip.
    pub previews: Vec<(String, Revision)>,
    /// Matching refs beyond [`MAX_PREVIEWS`], not taken.
    pub previews_dropped: usize,
    /// Why the preview refs could not be fetched (the branch was).
    pub previews_error: Option<String>,
}

/// How a fetched tip relates to the commit in force.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lineage {
    /// The commit in force itself.
    Same,
    /// A descendant: history moved forward.
    Forward,
    /// Not a descendant: history was rewritten (a force-push, a reset).
    Rewritten,
    /// Nothing is in force yet.
    First,
}

/// The daemon's clone.
pub struct Mirror {
    /// The state directory it is under.
    state_root: PathBuf,
    dir: PathBuf,
    /// `dir` with `.in-force`: the commit in force.
    in_force_file: PathBuf,
    opts: RemoteOptions,
    /// Held while a fetch runs, so a fetch stuck past its deadline (its
    /// thread still blocked on the network) is not joined by another.
    busy: Arc<Mutex<()>>,
    /// Fetch in a child process of this poolwright binary, its memory
    /// capped (see [`isolated`]); in this process when `None`.
    child: Option<PathBuf>,
}

/// The largest token file read.
const TOKEN_LIMIT: u64 = 4096;
type GitDaemonConnection = gix::protocol::transport::client::git::blocking_io::Connection<
    std::net::TcpStream,
    std::net::TcpStream,
>;

/// A server that sends nothing for this long is dead (or the fetch's own
/// timeout, if shorter).
const STALL: Duration = Duration::from_secs(60);
/// The largest CA file read.
const CA_LIMIT: u64 = 1024 * 1024;

impl Mirror {
    /// The clone for `opts.url` under `state_root/git/`, created empty when
    /// missing.
    pub fn open(state_root: &Path, opts: RemoteOptions) -> anyhow::Result<Mirror> {
        check_url(&opts.url)?;
        check_branch(&opts.branch)?;
        for pattern in &opts.preview_refs {
            check_ref_pattern(pattern)?;
        }
        for (flag, path) in [
            ("--git-ssh-key", &opts.ssh_key),
            ("--git-known-hosts", &opts.known_hosts),
        ] {
            if let Some(p) = path {
                let text = p.to_string_lossy();
                anyhow::ensure!(
                    p.is_absolute() && !text.contains(['\'', '\n']),
                    "{flag} {}: give an absolute path without quotes or newlines",
                    p.display()
                );
            }
        }
        let digest = Sha256::digest(opts.url.as_bytes());
        let name: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
        let dir = state_root.join("git").join(format!("{name}.git"));
        if !dir.join("HEAD").exists() {
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            gix::init_bare(&dir)
                .with_context(|| format!("creating the clone {}", dir.display()))?;
        }
        Ok(Mirror {
            state_root: state_root.to_path_buf(),
            in_force_file: dir.with_extension("in-force"),
            dir,
            opts,
            busy: Arc::new(Mutex::new(())),
            child: None,
        })
    }

    /// Fetch in a child process of `exe` (the poolwright binary), with its
    /// memory capped at `--git-max-memory`: the daemon's and `plan
    /// --git-url`'s fetches.
    pub fn in_child(mut self, exe: PathBuf) -> Mirror {
        self.child = Some(exe);
        self
    }

    pub fn options(&self) -> &RemoteOptions {
        &self.opts
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The URL as shown: without any user name.
    pub fn shown_url(&self) -> String {
        shown_url(&self.opts.url)
    }

    /// The clone, opened without the user's or the system's git
    /// configuration (no credential helper, no `url.insteadOf`), with the
    /// ssh command and the network bounds of this daemon.
    fn repo(&self) -> Result<gix::Repository, FetchError> {
        let mut overrides = vec![
            // A stalled HTTP transfer fails instead of hanging.
            "http.lowSpeedLimit=1".to_string(),
            format!(
                "http.lowSpeedTime={}",
                self.opts.limits.timeout.as_secs().max(1)
            ),
            "gitoxide.http.connectTimeout=10000".to_string(),
        ];
        overrides.push(format!("core.sshCommand={}", self.ssh_command()));
        gix::open_opts(
            &self.dir,
            gix::open::Options::isolated().config_overrides(overrides),
        )
        .map_err(|e| self.local(e))
    }

    /// `ssh` never asks: batch mode, the deploy key only, strict host keys.
    fn ssh_command(&self) -> String {
        let mut cmd = String::from(
            "ssh -o BatchMode=yes -o StrictHostKeyChecking=yes -o ConnectTimeout=10 -o ServerAliveInterval=15 -o ServerAliveCountMax=4",
        );
        if let Some(key) = &self.opts.ssh_key {
            cmd.push_str(&format!(" -o IdentitiesOnly=yes -i '{}'", key.display()));
        }
        if let Some(hosts) = &self.opts.known_hosts {
            cmd.push_str(&format!(" -o UserKnownHostsFile='{}'", hosts.display()));
        }
        cmd
    }

    pub(super) fn local(&self, e: impl std::fmt::Display) -> FetchError {
        FetchError::Local {
            path: self.dir.display().to_string(),
            message: e.to_string(),
        }
    }

    fn remote(&self, e: impl std::fmt::Display) -> FetchError {
        FetchError::Remote {
            url: self.shown_url(),
            message: e.to_string(),
        }
    }

    /// A gix error with every cause, not only the outermost ("Transport
    /// handshake failed" says nothing; the certificate it failed on does).
    fn remote_err(&self, e: &(dyn std::error::Error + 'static)) -> FetchError {
        self.remote(causes(e))
    }

    /// Fetch the branch and return its tip, then the refs of
    /// `preview_refs` in a fetch of their own (so a large or broken preview
    /// ref never holds up the branch: its failure is reported with the
    /// previews). Blocking; each fetch bounded by the limits.
    pub fn fetch(&self) -> Result<Fetched, FetchError> {
        let busy = self.busy.clone();
        let Ok(_held) = busy.try_lock() else {
            return Err(FetchError::Busy {
                url: self.shown_url(),
            });
        };
        match &self.child {
            Some(exe) => self.fetch_in_child(exe),
            None => self.fetch_here(),
        }
    }

    /// The fetch in a child of `exe` (`poolwright git-fetch-worker`, see
    /// [`super::isolated`]), its data segment capped at `--git-max-memory`
    /// and its life at twice the fetch's timeout (its own watcher ends it at
    /// the timeout). A child that ends without an answer (the cap) leaves
    /// nothing behind, and the refusal names the object it was inflating
    /// when the half-written pack still says.
    fn fetch_in_child(&self, exe: &Path) -> Answer {
        let limits = self.opts.limits;
        let request = serde_json::to_vec(&Request {
            state_root: self.state_root.clone(),
            options: self.opts.clone(),
        })
        .map_err(|e| self.local(e))?;
        let before = self.pack_files();
        let ended = super::child::run_capped(
            exe,
            "git-fetch-worker",
            &request,
            limits.max_memory,
            limits.timeout * 2 + Duration::from_secs(10),
        )
        .map_err(|e| self.local(format!("starting {}: {e}", exe.display())))?;
        if let Ok(answer) = serde_json::from_slice::<Answer>(&ended.stdout) {
            return answer;
        }
        let largest = self.discard_since(&before);
        let Some(status) = ended.status else {
            return Err(FetchError::TimedOut {
                url: self.shown_url(),
                after: limits.timeout,
            });
        };
        let said = String::from_utf8_lossy(&ended.stderr);
        if said.contains("memory allocation") || largest.is_some_and(|n| n > limits.max_object_size)
        {
            return Err(FetchError::TooMuchMemory {
                url: self.shown_url(),
                limit: limits.max_memory,
                largest,
                max_object_size: limits.max_object_size,
            });
        }
        let last = said.lines().last().unwrap_or("").trim();
        Err(self.local(format!(
            "the fetch process ended without an answer ({status}){}",
            if last.is_empty() {
                String::new()
            } else {
                format!(": {}", crate::secrets::redact(last))
            }
        )))
    }

    /// The fetch itself, in this process (the child's part, or a fetch
    /// not isolated).
    pub(super) fn fetch_here(&self) -> Result<Fetched, FetchError> {
        let token = match &self.opts.token_file {
            Some(path) => Some(
                read_regular_text(path, TOKEN_LIMIT)
                    .map(|t| t.trim().to_string())
                    .map_err(|e| FetchError::Token {
                        path: path.display().to_string(),
                        message: e.to_string(),
                    })?,
            ),
            None => None,
        };
        let mut fetched = self.bounded(|interrupt| self.fetch_branch(token.clone(), interrupt))?;
        if !self.opts.preview_refs.is_empty() {
            let tip = fetched.revision.commit.clone();
            match self.bounded(|interrupt| self.fetch_previews(token, interrupt, &tip)) {
                Ok((previews, dropped)) => {
                    fetched.previews = previews;
                    fetched.previews_dropped = dropped;
                }
                Err(e) => fetched.previews_error = Some(e.to_string()),
            }
        }
        Ok(fetched)
    }

    /// Run one exchange with the remote under a watcher that interrupts it
    /// past its time, byte or object bound.
    fn bounded<T>(
        &self,
        exchange: impl FnOnce(&AtomicBool) -> Result<T, FetchError>,
    ) -> Result<T, FetchError> {
        let interrupt = Arc::new(AtomicBool::new(false));
        let done = Arc::new(AtomicBool::new(false));
        let before = self.pack_files();
        let refs = RefsBackup::take(&self.dir);
        let watcher = Watcher::start(
            self.dir.join("objects").join("pack"),
            self.opts.limits,
            interrupt.clone(),
            done.clone(),
        );
        let result = exchange(&interrupt);
        done.store(true, Ordering::SeqCst);
        // The bounds are checked on what was fetched too: a fetch quicker
        // than the watcher's look, or an object that inflates past the
        // bound, is refused all the same.
        let crossed = watcher.join().or_else(|| {
            let largest = self.largest_since(&before)?;
            (largest > self.opts.limits.max_object_size).then_some(Crossed::ObjectSize(largest))
        });
        if crossed.is_some() {
            // Nothing of a refused fetch stays: a retry fetches it again,
            // and is refused again.
            self.discard_since(&before);
            if let Some(refs) = refs {
                refs.restore(&self.dir);
            }
        }
        match (crossed, result) {
            (Some(Crossed::ObjectSize(size)), _) => Err(FetchError::ObjectTooLarge {
                url: self.shown_url(),
                size,
                limit: self.opts.limits.max_object_size,
            }),
            (Some(Crossed::Time), _) => Err(FetchError::TimedOut {
                url: self.shown_url(),
                after: self.opts.limits.timeout,
            }),
            (Some(Crossed::Bytes), _) => Err(FetchError::TooLarge {
                url: self.shown_url(),
                limit: self.opts.limits.max_bytes,
            }),
            (Some(Crossed::Objects(count)), _) => Err(FetchError::TooManyObjects {
                url: self.shown_url(),
                count,
                limit: self.opts.limits.max_objects,
            }),
            (None, result) => result,
        }
    }

    /// The branch, into its tracking ref; its tip.
    fn fetch_branch(
        &self,
        token: Option<String>,
        interrupt: &AtomicBool,
    ) -> Result<Fetched, FetchError> {
        let branch_ref = format!("refs/heads/{}", self.opts.branch);
        let tracking = format!("refs/remotes/origin/{}", self.opts.branch);
        let spec = format!("+{branch_ref}:{tracking}");
        let no_branch = || FetchError::NoBranch {
            url: self.shown_url(),
            branch: self.opts.branch.clone(),
        };
        let (listed, objects) = self.exchange(&[spec], token, Some(interrupt))?;
        let tip = listed
            .iter()
            .find_map(|(name, id)| (*name == branch_ref).then_some(*id))
            .ok_or_else(no_branch)?;
        let repo = self.repo()?;
        let commit = repo
            .find_commit(tip)
            .map_err(|e| self.local(format!("the fetched tip {tip}: {e}")))?;
        Ok(Fetched {
            revision: crate::git::tree::revision_of(&commit, &self.opts.branch),
            objects,
            previews: Vec::new(),
            previews_dropped: 0,
            previews_error: None,
        })
    }

    /// The refs matching `preview_refs`: listed first, then at most
    /// [`MAX_PREVIEWS`] of them fetched (the highest names first, in natural
    /// order, so pr/120 before pr/99: the newest pull requests), skipping
    /// those whose tip is the branch's or in its history (merged). Each with
    /// its tip; and how many were left out.
    fn fetch_previews(
        &self,
        token: Option<String>,
        interrupt: &AtomicBool,
        branch_tip: &str,
    ) -> Result<(Vec<(String, Revision)>, usize), FetchError> {
        let branch_ref = format!("refs/heads/{}", self.opts.branch);
        // A pattern needs a destination, though only the listing is asked for.
        let listing: Vec<String> = self
            .opts
            .preview_refs
            .iter()
            .map(|p| format!("{p}:{PREVIEWS_NS}{}", p.strip_prefix("refs/").unwrap_or(p)))
            .collect();
        let (listed, _) = self.exchange(&listing, token.clone(), None)?;
        let repo = self.repo()?;
        let merged = self.history(&repo, branch_tip);
        let mut matching: Vec<(String, gix::ObjectId)> = listed
            .into_iter()
            .filter(|(name, id)| {
                *name != branch_ref
                    && self.opts.preview_refs.iter().any(|p| ref_matches(p, name))
                    && !merged.contains(id)
            })
            .collect();
        matching.sort_by_cached_key(|(name, _)| std::cmp::Reverse(natural_key(name)));
        let dropped = matching.len().saturating_sub(MAX_PREVIEWS);
        matching.truncate(MAX_PREVIEWS);
        if matching.is_empty() {
            return Ok((Vec::new(), dropped));
        }
        let specs: Vec<String> = matching
            .iter()
            .map(|(name, _)| format!("+{name}"))
            .collect();
        self.exchange(&specs, token, Some(interrupt))?;
        let mut previews = Vec::with_capacity(matching.len());
        for (name, id) in matching {
            // Only commits are planned (a ref to a tag or a tree is skipped).
            if let Ok(c) = repo.find_commit(id) {
                let short = name.strip_prefix("refs/heads/").unwrap_or(&name);
                previews.push((name.clone(), crate::git::tree::revision_of(&c, short)));
            }
        }
        previews.sort_by(|a, b| a.0.cmp(&b.0));
        Ok((previews, dropped))
    }

    /// The commits of the branch's history (at most the newest 100,000).
    fn history(&self, repo: &gix::Repository, tip: &str) -> HashSet<gix::ObjectId> {
        let Ok(id) = gix::ObjectId::from_hex(tip.as_bytes()) else {
            return HashSet::new();
        };
        let Ok(Ok(walk)) = repo.find_commit(id).map(|c| c.ancestors().all()) else {
            return HashSet::new();
        };
        walk.take(100_000)
            .filter_map(Result::ok)
            .map(|info| info.id)
            .collect()
    }

    /// One exchange with the remote for `specs`: the refs it lists for them
    /// (name and tip), and, when `receive` gives the interrupt, the pack
    /// received (the objects counted).
    fn exchange(
        &self,
        specs: &[String],
        token: Option<String>,
        receive: Option<&AtomicBool>,
    ) -> Result<(Vec<(String, gix::ObjectId)>, u64), FetchError> {
        use gix::remote::Direction;
        let repo = self.repo()?;
        let remote = repo
            .remote_at(self.opts.url.as_str())
            .map_err(|e| self.remote_err(&e))?
            .with_refspecs(specs.iter().map(String::as_str), Direction::Fetch)
            .map_err(|e| self.remote_err(&e))?
            .with_fetch_tags(gix::remote::fetch::Tags::None);
        match self.git_daemon(&remote)? {
            Some(transport) => self.negotiate(
                &repo,
                remote.to_connection_with_transport(transport),
                token,
                receive,
            ),
            None => {
                let connection = remote
                    .connect(Direction::Fetch)
                    .map_err(|e| self.remote_err(&e))?;
                self.negotiate(&repo, connection, token, receive)
            }
        }
    }

    /// List the refs on `connection`, and receive their pack when asked.
    fn negotiate<T: gix::protocol::transport::client::blocking_io::Transport>(
        &self,
        repo: &gix::Repository,
        connection: gix::remote::Connection<'_, '_, '_, T>,
        token: Option<String>,
        receive: Option<&AtomicBool>,
    ) -> Result<(Vec<(String, gix::ObjectId)>, u64), FetchError> {
        let connection = match self.https_options(repo)? {
            Some(options) => connection.with_transport_options(options),
            None => connection,
        };
        let connection = connection.with_credentials(move |action| match action {
            gix::credentials::helper::Action::Get(ctx) => Ok(token.as_ref().map(|token| {
                gix::credentials::protocol::Outcome {
                    identity: gix::sec::identity::Account {
                        // Forges take any user name with a token as the
                        // password; GitHub documents this one.
                        username: "x-access-token".into(),
                        password: token.clone(),
                        oauth_refresh_token: None,
                    },
                    next: ctx.into(),
                }
            })),
            _ => Ok(None),
        });
        let prepared = connection
            .prepare_fetch(gix::progress::Discard, Default::default())
            .map_err(|e| self.remote_err(&e))?;
        let listed = |map: &gix::remote::fetch::RefMap| -> Vec<(String, gix::ObjectId)> {
            map.remote_refs
                .iter()
                .filter_map(|r| {
                    let (name, target, peeled) = r.unpack();
                    Some((name.to_string(), peeled.or(target)?.to_owned()))
                })
                .collect()
        };
        // Nothing to receive when no spec matched a ref (a deleted branch):
        // the caller finds its ref missing from the listing.
        let Some(interrupt) = receive.filter(|_| !prepared.ref_map().mappings.is_empty()) else {
            return Ok((listed(prepared.ref_map()), 0));
        };
        let outcome = prepared
            .receive(gix::progress::Discard, interrupt)
            .map_err(|e| {
                let said = causes(&e);
                // gix asks for an object's memory before inflating it, and
                // says so when the cap on this process refuses it.
                if said.contains("too large to fit in memory") {
                    FetchError::TooMuchMemory {
                        url: self.shown_url(),
                        limit: self.opts.limits.max_memory,
                        largest: None,
                        max_object_size: self.opts.limits.max_object_size,
                    }
                } else {
                    self.remote(said)
                }
            })?;
        let objects = match &outcome.status {
            gix::remote::fetch::Status::Change {
                write_pack_bundle, ..
            } => u64::from(write_pack_bundle.index.num_objects),
            _ => 0,
        };
        Ok((listed(&outcome.ref_map), objects))
    }

    /// A git:// remote is connected here, so that a server that stops
    /// answering fails a read within `STALL` instead of holding the fetch's
    /// thread forever (gix sets no read timeout on it); http has
    /// `http.lowSpeedTime` and ssh `ServerAliveInterval` for the same. `None`
    /// for the other transports, which gix connects.
    fn git_daemon(
        &self,
        remote: &gix::Remote<'_>,
    ) -> Result<Option<GitDaemonConnection>, FetchError> {
        use gix::protocol::transport::client::git;
        let Some(url) = remote.url(gix::remote::Direction::Fetch) else {
            return Err(self.remote("no URL"));
        };
        if url.scheme != gix::url::Scheme::Git {
            return Ok(None);
        }
        let host = url
            .host()
            .ok_or_else(|| self.remote("no host"))?
            .to_string();
        let port = url.port;
        let addr = std::net::ToSocketAddrs::to_socket_addrs(&(host.as_str(), port.unwrap_or(9418)))
            .map_err(|e| self.remote(format!("resolving {host}: {e}")))?
            .next()
            .ok_or_else(|| self.remote(format!("{host} has no address")))?;
        let stream = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(10))
            .map_err(|e| self.remote(format!("connecting to {addr}: {e}")))?;
        let stall = self.opts.limits.timeout.min(STALL);
        stream
            .set_read_timeout(Some(stall))
            .and_then(|()| stream.set_write_timeout(Some(stall)))
            .map_err(|e| self.remote_err(&e))?;
        let write = stream.try_clone().map_err(|e| self.remote_err(&e))?;
        Ok(Some(git::blocking_io::Connection::new(
            stream,
            write,
            gix::protocol::transport::Protocol::V2,
            url.path.clone(),
            Some((host, port)),
            git::ConnectMode::Daemon,
            false,
        )))
    }

    /// For an http(s) remote: gix's http options from the (isolated)
    /// configuration, with the fetch's own timeout on every request (the
    /// reqwest client's default, 30 s a request, would fail a long first
    /// fetch of a large repository) and `--git-ca-file`'s CAs trusted.
    fn https_options(
        &self,
        repo: &gix::Repository,
    ) -> Result<Option<Box<dyn std::any::Any>>, FetchError> {
        use gix::protocol::transport::client::blocking_io::http;
        if !self.opts.url.starts_with("https://") && !self.opts.url.starts_with("http://") {
            return Ok(None);
        }
        let roots = match &self.opts.ca_file {
            Some(path) if self.opts.url.starts_with("https://") => {
                let ca = |message: String| FetchError::Ca {
                    path: path.display().to_string(),
                    message,
                };
                let pem =
                    crate::files::read_regular(path, CA_LIMIT).map_err(|e| ca(e.to_string()))?;
                let roots =
                    reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| ca(e.to_string()))?;
                if roots.is_empty() {
                    return Err(ca("no PEM certificate in it".into()));
                }
                roots
            }
            _ => Vec::new(),
        };
        let timeout = self.opts.limits.timeout;
        let mut options = repo
            .transport_options(self.opts.url.as_str(), None)
            .map_err(|e| self.local(e))?
            .and_then(|o| o.downcast::<http::Options>().ok())
            .map(|o| *o)
            .unwrap_or_default();
        options.backend = Some(Arc::new(Mutex::new(http::reqwest::Options {
            configure_client: Some(Box::new(move |mut builder| {
                builder = builder.timeout(timeout);
                for root in &roots {
                    builder = builder.add_root_certificate(root.clone());
                }
                Ok(builder)
            })),
            configure_request: None,
        })));
        Ok(Some(Box::new(options)))
    }

    /// The files of the clone's pack directory now.
    pub(super) fn pack_files(&self) -> std::collections::BTreeSet<PathBuf> {
        list(&self.dir.join("objects").join("pack"))
            .into_iter()
            .map(|(p, _)| p)
            .collect()
    }

    /// The largest object the packs added since `before` declare.
    fn largest_since(&self, before: &std::collections::BTreeSet<PathBuf>) -> Option<u64> {
        self.pack_files()
            .difference(before)
            .filter(|p| p.extension().is_some_and(|e| e == "pack"))
            .filter_map(|p| super::pack::largest_object(p))
            .max()
    }

    /// Remove what the pack directory gained since `before` (a refused
    /// fetch's packs, or a child's half-written one); the largest object
    /// any of it declared.
    pub(super) fn discard_since(
        &self,
        before: &std::collections::BTreeSet<PathBuf>,
    ) -> Option<u64> {
        let added: Vec<PathBuf> = self.pack_files().difference(before).cloned().collect();
        let largest = added
            .iter()
            .filter_map(|p| super::pack::largest_object(p))
            .max();
        for p in added {
            let _ = std::fs::remove_file(p);
        }
        largest
    }

    /// How `tip` relates to `in_force`.
    pub fn lineage(&self, in_force: Option<&str>, tip: &str) -> anyhow::Result<Lineage> {
        let Some(in_force) = in_force else {
            return Ok(Lineage::First);
        };
        if in_force == tip {
            return Ok(Lineage::Same);
        }
        let repo = self.repo()?;
        let tip = repo.find_commit(gix::ObjectId::from_hex(tip.as_bytes())?)?;
        let wanted = gix::ObjectId::from_hex(in_force.as_bytes())?;
        for ancestor in tip.ancestors().all()? {
            if ancestor?.id == wanted {
                return Ok(Lineage::Forward);
            }
        }
        Ok(Lineage::Rewritten)
    }

    /// The desired-state files of `commit`, under `--git-path`. Diagnostics
    /// name them by their path in the repository.
    pub fn read(&self, commit: &str, limits: &Limits) -> anyhow::Result<Vec<SourceFile>> {
        let repo = self.repo()?;
        let commit = repo.find_commit(gix::ObjectId::from_hex(commit.as_bytes())?)?;
        crate::git::tree::read_tree(&repo, &commit, &self.opts.path, &self.opts.path, limits)
    }

    /// The revision of a commit of the clone.
    pub fn revision(&self, commit: &str) -> anyhow::Result<Revision> {
        let repo = self.repo()?;
        let commit = repo.find_commit(gix::ObjectId::from_hex(commit.as_bytes())?)?;
        Ok(crate::git::tree::revision_of(&commit, &self.opts.branch))
    }

    /// A commit's signature (its `gpgsig` header), the bytes it signs, and
    /// its committer time (seconds since the epoch).
    pub fn signature(&self, commit: &str) -> anyhow::Result<(Option<Vec<u8>>, Vec<u8>, i64)> {
        let repo = self.repo()?;
        let commit = repo.find_commit(gix::ObjectId::from_hex(commit.as_bytes())?)?;
        let time = commit.time()?.seconds;
        Ok(match commit.signature()? {
            Some((signature, signed)) => {
                (Some(signature.to_vec()), signed.to_bstring().to_vec(), time)
            }
            None => (None, commit.data.clone(), time),
        })
    }

    /// The commit in force when the daemon last stopped.
    pub fn in_force(&self) -> Option<String> {
        let text = read_regular_text(&self.in_force_file, 128).ok()?;
        let text = text.trim();
        gix::ObjectId::from_hex(text.as_bytes()).ok()?;
        Some(text.to_string())
    }

    pub fn set_in_force(&self, commit: &str) -> std::io::Result<()> {
        crate::files::atomic_write(&self.in_force_file, format!("{commit}\n").as_bytes())
    }
}

/// An error and its causes, outermost first, each said once.
fn causes(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut next = e.source();
    while let Some(cause) = next {
        let text = cause.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        next = cause.source();
    }
    out
}

/// Which bound a fetch crossed.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Crossed {
    Time,
    Bytes,
    Objects(u64),
    ObjectSize(u64),
}

/// Watches a running fetch: its time, the size of the pack directory and the
/// object count in the header of a pack being received; interrupts the fetch
/// when one is crossed.
struct Watcher {
    handle: std::thread::JoinHandle<Option<Crossed>>,
}

impl Watcher {
    fn start(
        packs: PathBuf,
        limits: FetchLimits,
        interrupt: Arc<AtomicBool>,
        done: Arc<AtomicBool>,
    ) -> Watcher {
        let before: std::collections::BTreeSet<PathBuf> =
            list(&packs).into_iter().map(|(p, _)| p).collect();
        let started = Instant::now();
        let handle = std::thread::spawn(move || {
            // What this fetch brings (the files it adds), past a bound?
            let crossed = || {
                let incoming: Vec<_> = list(&packs)
                    .into_iter()
                    .filter(|(p, _)| !before.contains(p))
                    .collect();
                let bytes: u64 = incoming.iter().map(|(_, len)| len).sum();
                if bytes > limits.max_bytes {
                    return Some(Crossed::Bytes);
                }
                incoming
                    .iter()
                    .filter_map(|(p, _)| pack_objects(p))
                    .find(|&n| n > limits.max_objects)
                    .map(Crossed::Objects)
            };
            while !done.load(Ordering::SeqCst) {
                let now = if started.elapsed() > limits.timeout {
                    Some(Crossed::Time)
                } else {
                    crossed()
                };
                if now.is_some() {
                    interrupt.store(true, Ordering::SeqCst);
                    return now;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            // A fetch quicker than a look still answers for what it brought.
            crossed()
        });
        Watcher { handle }
    }

    fn join(self) -> Option<Crossed> {
        self.handle.join().ok().flatten()
    }
}

/// The clone's refs as they were before a fetch (loose refs and
/// `packed-refs`), put back when the fetch is refused, so that no ref
/// points at what it brought.
struct RefsBackup {
    files: Vec<(PathBuf, Vec<u8>)>,
}

impl RefsBackup {
    /// The most refs kept (a clone has its branch, a few tracking refs and
    /// at most [`MAX_PREVIEWS`] previews).
    const MOST: usize = 10_000;

    fn take(git_dir: &Path) -> Option<RefsBackup> {
        let mut files = Vec::new();
        let mut dirs = vec![git_dir.join("refs")];
        while let Some(d) = dirs.pop() {
            for e in std::fs::read_dir(&d).ok()?.flatten() {
                let t = e.file_type().ok()?;
                if t.is_dir() {
                    dirs.push(e.path());
                } else if t.is_file() {
                    files.push((e.path(), std::fs::read(e.path()).ok()?));
                }
                if files.len() > Self::MOST {
                    return None;
                }
            }
        }
        if let Ok(packed) = std::fs::read(git_dir.join("packed-refs")) {
            files.push((git_dir.join("packed-refs"), packed));
        }
        Some(RefsBackup { files })
    }

    fn restore(self, git_dir: &Path) {
        let _ = std::fs::remove_dir_all(git_dir.join("refs"));
        let _ = std::fs::remove_file(git_dir.join("packed-refs"));
        let _ = std::fs::create_dir_all(git_dir.join("refs/heads"));
        let _ = std::fs::create_dir_all(git_dir.join("refs/tags"));
        for (path, bytes) in self.files {
            if let Some(parent) = path.parent() {
                let _ = std::fs::create_dir_all(parent);
            }
            let _ = std::fs::write(path, bytes);
        }
    }
}

fn list(dir: &Path) -> Vec<(PathBuf, u64)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| Some((e.path(), e.metadata().ok()?.len())))
        .collect()
}

/// The object count a pack file's header declares.
fn pack_objects(path: &Path) -> Option<u64> {
    use std::io::Read;
    let mut header = [0u8; 12];
    std::fs::File::open(path)
        .ok()?
        .read_exact(&mut header)
        .ok()?;
    (&header[..4] == b"PACK").then(|| {
        u64::from(u32::from_be_bytes([
            header[8], header[9], header[10], header[11],
        ]))
    })
}

/// The URL without its user name.
pub fn shown_url(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut u) if u.has_host() => {
            let _ = u.set_username("");
            let _ = u.set_password(None);
            u.to_string()
        }
        _ => url.to_string(),
    }
}

/// A URL poolwright fetches: one of the transports it supports, and no
/// password in it (a URL shows in `ps`, unit files and logs).
pub fn check_url(url: &str) -> anyhow::Result<()> {
    anyhow::ensure!(
        !url.starts_with('-') && !url.contains(['\n', '\r', ' ']),
        "--git-url {url:?}: not a URL"
    );
    if let Ok(u) = url::Url::parse(url) {
        anyhow::ensure!(
            matches!(u.scheme(), "https" | "http" | "ssh" | "git" | "file"),
            "--git-url {url:?}: the transports are https://, ssh:// (or user@host:path), git:// and file://"
        );
        anyhow::ensure!(
            u.password().is_none()
                && (u.username().is_empty() || !matches!(u.scheme(), "https" | "http")),
            "--git-url: the URL carries a user name or a password, which logs and errors would show; put the token in a file and give --git-token-file"
        );
        return Ok(());
    }
    // scp-like: user@host:path
    anyhow::ensure!(
        url.contains(':') && !url.contains("://"),
        "--git-url {url:?}: not a URL (https://, ssh://, user@host:path, git:// or file://)"
    );
    Ok(())
}

/// A branch name git would accept, without anything a ref spec would read.
fn check_branch(branch: &str) -> anyhow::Result<()> {
    let ok = !branch.is_empty()
        && branch.len() <= 200
        && !branch.starts_with(['-', '/', '.'])
        && !branch.ends_with(['/', '.'])
        && !branch.ends_with(".lock")
        && !branch.contains("..")
        && !branch.contains("//")
        && !branch.contains("@{")
        && branch
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'));
    anyhow::ensure!(
        ok,
        "--git-branch {branch:?}: not a branch name (letters, digits, - _ . /)"
    );
    Ok(())
}

/// A ref pattern of `--preview-refs`: a full ref name under `refs/`, with at
/// most one `*` (which matches any run of characters, `/` included, as in a
/// git refspec).
pub fn check_ref_pattern(pattern: &str) -> anyhow::Result<()> {
    let ok = pattern.starts_with("refs/")
        && pattern.len() <= 200
        && pattern.matches('*').count() <= 1
        && !pattern.ends_with(['/', '.'])
        && !pattern.contains("..")
        && !pattern.contains("//")
        && !pattern.contains("@{")
        && !pattern.starts_with(PREVIEWS_NS)
        && pattern
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/' | '*'));
    anyhow::ensure!(
        ok,
        "--preview-refs {pattern:?}: not a ref pattern (refs/heads/pr/*, refs/merge-requests/*/head: a full ref name, at most one *)"
    );
    Ok(())
}

/// `name` with each run of digits padded, so names sort as people read
/// them: pr/99 before pr/120.
fn natural_key(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 16);
    let mut digits = String::new();
    for c in name.chars().chain(std::iter::once('\0')) {
        if c.is_ascii_digit() {
            digits.push(c);
            continue;
        }
        if !digits.is_empty() {
            let trimmed = digits.trim_start_matches('0');
            out.push_str(&format!("{:0>20}", trimmed));
            digits.clear();
        }
        if c != '\0' {
            out.push(c);
        }
    }
    out
}

/// Does `name` match `pattern` (at most one `*`)?
pub fn ref_matches(pattern: &str, name: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == name,
        Some((head, tail)) => {
            name.len() > head.len() + tail.len() && name.starts_with(head) && name.ends_with(tail)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preview_patterns_are_checked_and_match_as_refspecs_do() {
        for good in [
            "refs/heads/pr/*",
            "refs/merge-requests/*/head",
            "refs/heads/next",
        ] {
            check_ref_pattern(good).unwrap();
        }
        for bad in [
            "pr/*",
            "refs/heads/*/*",
            "refs/heads/a..b",
            "refs/previews/x/*",
            "refs/heads/a b",
        ] {
            assert!(check_ref_pattern(bad).is_err(), "{bad}");
        }
        assert!(ref_matches("refs/heads/pr/*", "refs/heads/pr/7"));
        assert!(ref_matches("refs/heads/pr/*", "refs/heads/pr/team/7"));
        assert!(!ref_matches("refs/heads/pr/*", "refs/heads/pr/"));
        assert!(!ref_matches("refs/heads/pr/*", "refs/heads/main"));
        assert!(ref_matches(
            "refs/merge-requests/*/head",
            "refs/merge-requests/12/head"
        ));
        assert!(!ref_matches(
            "refs/merge-requests/*/head",
            "refs/merge-requests/12/merge"
        ));
        assert!(ref_matches("refs/heads/next", "refs/heads/next"));
        let mut names = vec![
            "refs/heads/pr/99",
            "refs/heads/pr/120",
            "refs/heads/pr/7",
            "refs/heads/pr/a",
        ];
        names.sort_by_key(|n| std::cmp::Reverse(natural_key(n)));
        assert_eq!(
            names,
            [
                "refs/heads/pr/a",
                "refs/heads/pr/120",
                "refs/heads/pr/99",
                "refs/heads/pr/7"
            ]
        );
    }

    #[test]
    fn urls_and_branches_are_checked() {
        for good in [
            "https://git.example.com/ops/pools.git",
            "ssh://git@git.example.com:2222/ops/pools.git",
            "git@git.example.com:ops/pools.git",
            "git://127.0.0.1:9418/pools.git",
            "file:///srv/git/pools.git",
        ] {
            check_url(good).unwrap();
        }
        for bad in [
            "https://user:secret@git.example.com/pools.git",
            "https://ghp_token@github.com/ops/pools.git",
            "ftp://x/pools.git",
            "-oProxyCommand=sh",
            "/srv/git/pools.git",
        ] {
            assert!(check_url(bad).is_err(), "{bad}");
        }
        for good in ["main", "release/2026-12", "v1.2"] {
            check_branch(good).unwrap();
        }
        for bad in ["", "-x", "a..b", "a b", "x.lock", "a@{1}", "refs/heads/*"] {
            assert!(check_branch(bad).is_err(), "{bad}");
        }
        assert_eq!(
            shown_url("https://bot@git.example.com/p.git"),
            "https://git.example.com/p.git"
        );
    }
}
