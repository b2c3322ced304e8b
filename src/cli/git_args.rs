//! `poolwright run --git-url`: the config repo the daemon fetches, and the
//! webhook that tells it to fetch at once.

use crate::spec::values::InvalidValue;
use std::path::PathBuf;
use std::time::Duration;

use crate::git::mirror::{FetchLimits, RemoteOptions};
use crate::git::verify::Format;

/// Where the config repo is and how to reach it: `run --git-url` and
/// `plan --git-url --git-ref`.
#[derive(Clone, Debug, clap::Args)]
pub struct RemoteArgs {
    /// The config repo, instead of DIR: https://, ssh:// (or
    /// user@host:path), git:// or file://. `run` keeps its own clone under
    /// the state directory; `plan --git-ref` fetches into a temporary one
    #[arg(long, value_name = "URL")]
    pub git_url: Option<String>,
    /// The branch whose tip is applied
    #[arg(
        long,
        value_name = "BRANCH",
        default_value = "main",
        requires = "git_url"
    )]
    pub git_branch: String,
    /// The desired-state directory inside the repository (default: its root)
    #[arg(long, value_name = "DIR", default_value = "", requires = "git_url", value_parser = parse_repo_path)]
    pub git_path: PathBuf,
    /// https: a token (the password of the x-access-token user), read again on every fetch
    #[arg(long, value_name = "FILE", requires = "git_url")]
    pub git_token_file: Option<PathBuf>,
    /// https: a further CA (PEM) to trust for the remote, besides the system's
    #[arg(long, value_name = "FILE", requires = "git_url")]
    pub git_ca_file: Option<PathBuf>,
    /// ssh: the deploy key (only this key is offered)
    #[arg(long, value_name = "FILE", requires = "git_url")]
    pub git_ssh_key: Option<PathBuf>,
    /// ssh: the known-hosts file; a host not in it is refused
    /// (default: ssh's own, ~/.ssh/known_hosts)
    #[arg(long, value_name = "FILE", requires = "git_url")]
    pub git_known_hosts: Option<PathBuf>,
    /// A fetch taking longer than this fails (the commit in force stays)
    #[arg(long, default_value = "5m", value_parser = super::parse_duration, value_name = "DURATION", requires = "git_url")]
    pub git_fetch_timeout: Duration,
    /// A fetch may not bring more than this many bytes (a first fetch brings the whole repository)
    #[arg(long, default_value_t = 512 * 1024 * 1024, value_parser = clap::value_parser!(u64).range(1024 * 1024..=(1 << 40)), value_name = "BYTES", requires = "git_url")]
    pub git_max_bytes: u64,
    /// A fetch may not bring more objects than this
    #[arg(long, default_value_t = 2_000_000, value_parser = clap::value_parser!(u64).range(1..=1_000_000_000), value_name = "N", requires = "git_url")]
    pub git_max_objects: u64,
    /// No object of a fetch may inflate to more than this many bytes (a
    /// pack is compressed: 1 GiB of zeros is 1 MiB on the wire)
    #[arg(long, default_value_t = crate::git::mirror::DEFAULT_MAX_OBJECT_SIZE, value_parser = clap::value_parser!(u64).range(1024 * 1024..=(1 << 32)), value_name = "BYTES", requires = "git_url")]
    pub git_max_object_size: u64,
    /// The memory of the process that fetches (a child of poolwright's own):
    /// a fetch that needs more is refused, and the daemon is unharmed
    #[arg(long, default_value_t = crate::git::mirror::DEFAULT_MAX_MEMORY, value_parser = clap::value_parser!(u64).range(64 * 1024 * 1024..=(1 << 36)), value_name = "BYTES", requires = "git_url")]
    pub git_max_memory: u64,
}

impl RemoteArgs {
    /// The remote, when `--git-url` is given; `preview_refs` are fetched too.
    pub fn options(&self, preview_refs: Vec<String>) -> Option<RemoteOptions> {
        Some(RemoteOptions {
            url: self.git_url.clone()?,
            branch: self.git_branch.clone(),
            path: self.git_path.clone(),
            token_file: self.git_token_file.clone(),
            ca_file: self.git_ca_file.clone(),
            ssh_key: self.git_ssh_key.clone(),
            known_hosts: self.git_known_hosts.clone(),
            limits: FetchLimits {
                timeout: self.git_fetch_timeout,
                max_bytes: self.git_max_bytes,
                max_objects: self.git_max_objects,
                max_object_size: self.git_max_object_size,
                max_memory: self.git_max_memory,
            },
            preview_refs,
        })
    }
}

#[derive(Clone, Debug, clap::Args)]
pub struct GitArgs {
    #[command(flatten)]
    pub remote: RemoteArgs,
    /// How often to fetch (a push webhook fetches at once)
    #[arg(long, default_value = "1m", value_parser = super::parse_duration, value_name = "DURATION", requires = "git_url")]
    pub git_interval: Duration,
    /// Apply a branch tip that does not descend from the commit in force (a
    /// force-push, a reset); refused by default
    #[arg(long, requires = "git_url")]
    pub git_allow_rewrite: bool,
    /// Apply only branch tips signed by a trusted key: `ssh` (git's
    /// `gpg.format ssh`) with --git-allowed-signers, or `gpg` (OpenPGP, git's
    /// default) with --git-keyring
    #[arg(long, value_enum, value_name = "FORMAT", requires = "git_url")]
    pub git_verify: Option<VerifyFormat>,
    /// --git-verify ssh: the allowed signers file (git's
    /// `gpg.ssh.allowedSignersFile` format), read again for every fetched tip
    #[arg(
        long,
        value_name = "FILE",
        required_if_eq("git_verify", "ssh"),
        conflicts_with = "git_keyring"
    )]
    pub git_allowed_signers: Option<PathBuf>,
    /// --git-verify gpg: the public keys that may sign (`gpg --export
    /// [--armor] KEYID...`), read again for every fetched tip
    #[arg(long, value_name = "FILE", required_if_eq("git_verify", "gpg"))]
    pub git_keyring: Option<PathBuf>,
    /// Take push webhooks (GitHub, Gitea, Forgejo, GitLab) at POST
    /// /v1/hooks/git, signed with the secret in this file (at least 32
    /// bytes; read again on every webhook)
    #[arg(long, value_name = "FILE", requires = "git_url")]
    pub webhook_secret_file: Option<PathBuf>,
    /// Plan these refs too, never applying them (a preview of a pull
    /// request before it merges): a full ref name with at most one `*`, like
    /// refs/heads/pr/* or refs/merge-requests/*/head; repeatable. Served at
    /// /v1/previews and on the status page
    #[arg(long, value_name = "PATTERN", requires = "git_url", action = clap::ArgAction::Append)]
    pub preview_refs: Vec<String>,
}

impl GitArgs {
    pub fn options(&self) -> Option<crate::daemon::GitOptions> {
        Some(crate::daemon::GitOptions {
            remote: self.remote.options(self.preview_refs.clone())?,
            fetch: crate::daemon::source::fetcher::FetchSettings {
                interval: self.git_interval.max(Duration::from_secs(1)),
                allow_rewrite: self.git_allow_rewrite,
                verify: self.verify(),
            },
            webhook_secret_file: self.webhook_secret_file.clone(),
        })
    }
}

/// How commits are signed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum VerifyFormat {
    Ssh,
    Gpg,
}

impl GitArgs {
    /// `--git-verify` with its keys file (clap makes sure the file is given).
    fn verify(&self) -> Option<crate::daemon::source::fetcher::Verify> {
        let (format, keys) = match self.git_verify? {
            VerifyFormat::Ssh => (Format::Ssh, self.git_allowed_signers.clone()?),
            VerifyFormat::Gpg => (Format::OpenPgp, self.git_keyring.clone()?),
        };
        Some(crate::daemon::source::fetcher::Verify { format, keys })
    }
}

/// A relative path inside the repository, without `..`.
fn parse_repo_path(s: &str) -> Result<PathBuf, InvalidValue> {
    let path = PathBuf::from(s.trim_end_matches('/'));
    if path.is_absolute()
        || path
            .components()
            .any(|c| !matches!(c, std::path::Component::Normal(_)))
    {
        return Err(InvalidValue(format!(
            "{s:?}: a directory inside the repository, like pools or env/prod (no leading /, no ..)"
        )));
    }
    Ok(path)
}
