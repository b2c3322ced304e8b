//! The command-line interface: argument definitions and the commands' bodies.
//! `main.rs` only parses arguments and turns the outcome into an exit code.

use crate::spec::values::InvalidValue;
use std::io::Write;
use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

use crate::spec::{self, Limits};
use crate::store::DEFAULT_STATE_DIR;

mod apply_report;
mod doctor;
mod fleet_cmd;
mod forecast_cmd;
mod git_args;
mod images_cmd;
mod init_cmd;
mod package_assets;
mod plugin_cmd;
mod progress_log;
mod rollout_cmd;
mod rollout_wait;
mod saved;
mod service_dir;
mod snapshot;
mod staged;
mod status_cmd;
mod workflow;

pub use rollout_cmd::RolloutCommand;

/// Exit codes shared by every command (docs/reference/commands.md).
pub mod exit {
    /// Success; for `validate`, the desired state is valid.
    pub const OK: u8 = 0;
    /// Invalid desired state, the command failed, or it was used wrongly
    /// (clap's message says how). Never 2: that is `plan
    /// --detailed-exitcode`'s "changes present", and a mistyped flag in CI
    /// must not read as pending changes.
    pub const FAILED: u8 = 1;
    /// `plan --detailed-exitcode`: the plan has changes.
    pub(crate) const CHANGES: u8 = 2;
}

/// Where `run` serves status and metrics, and so where `doctor` looks.
const DEFAULT_LISTEN: &str = "127.0.0.1:9479";

/// The release and the git revision it was built from.
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (",
    env!("POOLWRIGHT_GIT_REVISION"),
    ")"
);

#[derive(Debug, Parser)]
#[command(
    name = "poolwright",
    version = VERSION,
    about = "Reconcile node pools from a directory of desired-state YAML",
    long_about = "poolwright reads a directory of desired-state YAML (Provider, Cluster and NodePool \
documents), compares it with the pools its providers report, shows the difference as a plan and \
applies it, replacing nodes through one rollout executor that honours surge/unavailable budgets, \
drains, health gates and disruption policies."
)]
pub struct Cli {
    /// Never colour the output (NO_COLOR is honoured too; Terraform's -no-color works)
    #[arg(long, global = true)]
    pub no_color: bool,
    #[command(subcommand)]
    pub command: Command,
}

/// `poolwright sim ...`
#[derive(Subcommand, Debug)]
pub enum SimCommand {
    /// Publish IMAGE to the simulator's catalogue, as a vendor releases one
    /// (ImageChannels with `source: {sim: ...}` see it at their next ask)
    #[command(
        after_help = "Examples:\n  poolwright sim release img-2\n  poolwright sim release img-3 --released 2026-12-01T10:00:00Z"
    )]
    Release {
        image: String,
        /// When it was released (RFC 3339; default now)
        #[arg(long, value_name = "TIME")]
        released: Option<String>,
        #[arg(long, env = "POOLWRIGHT_STATE_DIR", default_value = DEFAULT_STATE_DIR, value_name = "DIR")]
        state_dir: PathBuf,
    },
}

#[derive(Debug, Subcommand)]
// Parsed once per process; boxing the big variant would buy nothing.
#[allow(clippy::large_enum_variant)]
pub enum Command {
    /// Check a desired-state directory and report every problem as FILE:LINE:COL
    ///
    /// Exit status: 0 when valid, 1 when any error was found.
    #[command(
        after_help = "Examples:\n  poolwright validate pools/\n  poolwright validate --dir . pools/web.yaml pools/api.yaml   # changed files, the rest of . as context\n  poolwright validate pools/ -o json"
    )]
    Validate {
        /// A directory (searched recursively for *.yaml and *.yml), or files:
        /// checked as one set, or with --dir in the context of that directory
        #[arg(default_value = ".", value_name = "DIR|FILE")]
        paths: Vec<PathBuf>,
        /// With files: the desired-state directory they belong to, loaded as
        /// their context (default: the files alone)
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
        /// Output format
        #[arg(long, short, value_enum, default_value_t = Output::Text)]
        output: Output,
        /// Refuse files larger than this many bytes
        #[arg(long, default_value_t = Limits::default().max_file_bytes, value_name = "BYTES")]
        max_file_size: u64,
    },
    /// Show what apply would change: a Terraform-style plan
    ///
    /// Exit status: 0 success, 1 error; with --detailed-exitcode, 0 no changes,
    /// 1 error, 2 changes present.
    #[command(
        after_help = "Examples:\n  poolwright plan pools/\n  poolwright plan pools/ -out web.plan && poolwright apply web.plan\n  poolwright plan pools/ --detailed-exitcode   # 0 no changes, 1 error, 2 changes\n  poolwright plan pools/ --git-ref feature/img-2026-12 -o markdown   # a pull-request comment"
    )]
    Plan {
        /// Desired-state directory (searched recursively) or single file
        #[arg(default_value = ".")]
        dir: PathBuf,
        #[command(flatten)]
        common: Common,
        /// Output format (markdown: for a pull-request comment)
        #[arg(long, short, value_enum, default_value_t = PlanOutput::Text)]
        output: PlanOutput,
        /// Plan DIR as committed at this branch, tag or commit of its git
        /// repository (a branch before it merges), not the files on disk;
        /// with --git-url, this branch (or full ref name) of the remote
        #[arg(long, value_name = "REF", conflicts_with = "out")]
        git_ref: Option<String>,
        #[command(flatten)]
        remote: git_args::RemoteArgs,
        /// Exit 2 when there are changes, 0 when there are none
        #[arg(long)]
        detailed_exitcode: bool,
        /// Accepted for Terraform's `-input=false`: plan never asks for input
        #[arg(long, value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set)]
        input: bool,
        /// Plan even when a Cluster cannot be read (its pools without their
        /// nodes' Ready state, cordons and budgets); otherwise that exits 1
        #[arg(long)]
        allow_unreachable: bool,
        /// Save the plan to FILE for `poolwright apply FILE`
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
        /// After the plan, forecast every roll it holds (see `poolwright forecast`)
        #[arg(long)]
        forecast: bool,
    },
    /// Forecast every roll the plan holds: duration, finish time, capacity, surge cost, risk
    ///
    /// Runs the real rollout executor (the same decisions, policy and windows)
    /// on a virtual clock against a simulated copy of each observed pool, RUNS
    /// times with seeded draws of the latencies (the pool's history, else the
    /// simulator's distributions, else defaults). Nothing is changed.
    #[command(
        after_help = "Examples:\n  poolwright forecast pools/\n  poolwright forecast pools/ --pool web --sweep --svg web.svg\n  poolwright forecast pools/ --set web.rollout.maxSurge=4"
    )]
    Forecast {
        /// Desired-state directory (searched recursively) or single file
        #[arg(default_value = ".")]
        dir: PathBuf,
        #[command(flatten)]
        common: Common,
        /// Output format
        #[arg(long, short, value_enum, default_value_t = Output::Text)]
        output: Output,
        /// Monte Carlo runs per forecast (1 to 10000)
        #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..=10_000))]
        runs: u32,
        /// Seed of the draws: the same seed gives the same forecast
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Only this pool (repeatable; default every pool the plan rolls)
        #[arg(long, value_name = "POOL")]
        pool: Vec<String>,
        /// Also compare budgets: GKE's presets, the pool's own and a few around it
        #[arg(long)]
        sweep: bool,
        /// What-if without editing files: POOL.rollout.maxSurge=V or POOL.rollout.maxUnavailable=V (repeatable)
        #[arg(long, value_name = "POOL.FIELD=VALUE")]
        set: Vec<String>,
        /// Draw capacity over time of the median run (and, with --sweep, each budget) as SVG
        #[arg(long, value_name = "FILE")]
        svg: Option<PathBuf>,
        /// Stop forecasting after this long, whatever it is doing (0: no limit); fewer runs are said
        #[arg(long, default_value = "60s", value_parser = parse_duration, value_name = "DURATION")]
        time_limit: std::time::Duration,
    },
    /// Make the pools match the desired state (shows the plan and asks first)
    ///
    /// TARGET is a desired-state directory, or a plan saved with `plan --out`,
    /// which is applied only if neither the files nor the pools changed since.
    #[command(
        after_help = "Examples:\n  poolwright apply pools/\n  poolwright apply web.plan                 # a saved plan: applied without a question\n  poolwright apply pools/ --auto-approve --events events.jsonl"
    )]
    Apply {
        /// Desired-state directory, single file, or saved plan
        #[arg(default_value = ".")]
        target: PathBuf,
        #[command(flatten)]
        common: Common,
        /// Do not ask for confirmation (required when standard input is not a
        /// terminal; a saved plan is never asked about: it was the approval)
        #[arg(long)]
        auto_approve: bool,
        /// false: never ask, as in CI; without --auto-approve or a saved
        /// plan, apply then refuses (exit 1) instead of asking
        #[arg(long, value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set)]
        input: bool,
        /// Output format; json: one JSON object per line on standard output
        /// (the plan, each event, the outcome last), which needs
        /// --auto-approve or a saved plan
        #[arg(long, short, value_enum, default_value_t = Output::Text)]
        output: Output,
        /// Apply even when a Cluster cannot be read (no drain can reach it);
        /// otherwise nothing is changed and the command exits 1
        #[arg(long)]
        allow_unreachable: bool,
        /// Append one JSON object per line for every step to FILE
        #[arg(long, value_name = "FILE")]
        events: Option<PathBuf>,
        /// Emergency: start disruptive steps even where a disruption policy holds
        /// them (recorded as an event and in the daemon's status, with --reason)
        #[arg(long, requires = "reason")]
        override_disruption_policy: bool,
        /// Why the disruption policy is overridden (required with the override)
        #[arg(long, value_name = "TEXT", requires = "override_disruption_policy")]
        reason: Option<String>,
    },
    /// Run as a service: watch DIR, reconcile on every change and on a periodic resync
    ///
    /// Serves /healthz, /readyz, /metrics and /v1/status on --listen (loopback by
    /// default), notifies systemd (READY, STATUS, WATCHDOG, STOPPING), reloads on
    /// SIGHUP, and on SIGTERM/SIGINT lets steps in flight reach a safe point and exits 0.
    #[command(
        after_help = "Examples:\n  poolwright run pools/ --dry-run          # shadow mode first\n  poolwright run /srv/config --git-committed-only\n  poolwright run --git-url git@git.example.com:platform/pools.git --git-path pools"
    )]
    Run {
        /// Desired-state directory (searched recursively)
        #[arg(default_value = ".")]
        dir: PathBuf,
        #[command(flatten)]
        common: Common,
        /// Shadow mode: plan and export the diffs (log, status, /v1/plan); never act
        #[arg(long)]
        dry_run: bool,
        /// Reconcile the tree committed at HEAD of DIR's git repository, so
        /// uncommitted edits are never applied; a new commit triggers a reconcile
        #[arg(long, conflicts_with = "git_url")]
        git_committed_only: bool,
        /// Full resync period: observe every pool, correct drift
        #[arg(long, default_value = "5m", value_parser = parse_duration, value_name = "DURATION")]
        resync: std::time::Duration,
        /// Most pools acted on at the same time (one worker per pool)
        #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..))]
        parallelism: u16,
        /// Address for status and metrics; anything beyond loopback must be asked for
        #[arg(
            long,
            env = "POOLWRIGHT_LISTEN",
            default_value = DEFAULT_LISTEN,
            value_name = "ADDR"
        )]
        listen: std::net::SocketAddr,
        /// Append one JSON object per line for every event (default STATE/events.jsonl)
        #[arg(long, value_name = "FILE")]
        events: Option<PathBuf>,
        /// On SIGTERM, how long steps in flight may take to reach a safe point
        #[arg(long, default_value = "30s", value_parser = parse_duration, value_name = "DURATION")]
        shutdown_grace: std::time::Duration,
        /// Quiet time that ends a burst of file changes (one reload per burst)
        #[arg(long, default_value = "200ms", value_parser = parse_duration, value_name = "DURATION")]
        debounce: std::time::Duration,
        /// After a pool's work ends with its desired state unchanged, wait this
        /// long before acting on it again (failures are retried this often)
        #[arg(long, default_value = "30s", value_parser = parse_duration, value_name = "DURATION")]
        retry_after: std::time::Duration,
        /// Log format: auto is journald under systemd, human otherwise
        #[arg(long, value_enum, default_value_t = LogFormat::Auto)]
        log_format: LogFormat,
        #[command(flatten)]
        git: git_args::GitArgs,
        #[command(flatten)]
        ha: HaArgs,
        #[command(flatten)]
        control: ControlArgs,
    },
    /// Show what a running daemon is doing, pool by pool
    #[command(
        after_help = "Examples:\n  poolwright status\n  poolwright status --url 127.0.0.1:9479 -o json"
    )]
    Status {
        #[arg(long, env = "POOLWRIGHT_STATE_DIR", default_value = DEFAULT_STATE_DIR, value_name = "DIR")]
        state_dir: PathBuf,
        /// The daemon's status address, e.g. http://127.0.0.1:9479 (default: read
        /// from STATE/daemon.json; without a scheme, http)
        #[arg(long, value_name = "URL", value_parser = parse_daemon_url)]
        url: Option<String>,
        /// Output format
        #[arg(long, short, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
    /// Pause, resume or inspect a pool's rollout
    ///
    /// With a daemon running on the state directory, pause and resume go through it.
    #[command(
        subcommand,
        after_help = "Examples:\n  \
        poolwright rollout status web\n  \
        poolwright rollout pause web --reason \"INC-4711\"\n  \
        poolwright rollout resume web --reason \"alarms cleared\""
    )]
    Rollout(rollout_cmd::RolloutCommand),
    /// A change across pools (FleetRollout): where it is, or pause or resume it
    ///
    /// Through the daemon running on the state directory: status from its
    /// /v1/fleet (or --url), pause and resume through its control socket.
    /// With no daemon, status is an error (exit 1) and pause and resume edit
    /// the change's journal under the state lock. Exit status of status: 1
    /// when a change shown is halted.
    #[command(
        after_help = "Examples:\n  poolwright fleet status\n  poolwright fleet pause rings --reason \"INC-4711\"\n  poolwright fleet resume rings --reason \"image fixed\""
    )]
    Fleet {
        #[arg(value_enum)]
        action: fleet_cmd::FleetAction,
        /// The FleetRollout, or the id of its change (default for status: every one)
        name: Option<String>,
        #[arg(long, env = "POOLWRIGHT_STATE_DIR", default_value = DEFAULT_STATE_DIR, value_name = "DIR")]
        state_dir: PathBuf,
        /// The daemon's status address, for status (default: read from
        /// STATE/daemon.json; without a scheme, http)
        #[arg(long, value_name = "URL", value_parser = parse_daemon_url)]
        url: Option<String>,
        /// Why (required to resume; recorded in the daemon's log and the event, with who asked)
        #[arg(long, value_name = "TEXT")]
        reason: Option<String>,
        /// Output format (status)
        #[arg(long, short, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
    /// Image channels: each one's image in force, the newest seen and when it
    /// is eligible, the queued one, the recalls, and each pool's image
    ///
    /// From the daemon running on the state directory (its /v1/images), or
    /// --url; with no daemon, the state directory's record (no pools).
    #[command(
        after_help = "Examples:\n  poolwright images\n  poolwright images --url http://bastion:9100 -o json"
    )]
    Images {
        #[arg(long, env = "POOLWRIGHT_STATE_DIR", default_value = DEFAULT_STATE_DIR, value_name = "DIR")]
        state_dir: PathBuf,
        /// The daemon's status address (default: read from STATE/daemon.json)
        #[arg(long, value_name = "URL", value_parser = parse_daemon_url)]
        url: Option<String>,
        #[arg(long, short, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
    /// Recall a bad node image (or undo a recall)
    ///
    /// A recall halts nothing by hand: no channel picks the image again, and
    /// every channel with it in force goes back to its previous good image,
    /// so its pools roll at once (no soak, no gate) within each pool's own
    /// budget, policy and maxConcurrentPools. Pools whose files name the
    /// image are reported, not rolled. Through the daemon's control socket;
    /// with no daemon, the record is edited and the next apply follows it.
    #[command(
        after_help = "Examples:\n  poolwright image recall ami-0bad --reason \"CVE-2026-1234\"\n  poolwright image unrecall ami-0bad --reason \"false alarm\""
    )]
    Image {
        #[arg(value_enum)]
        action: images_cmd::ImageAction,
        /// The image id
        image: String,
        /// Why (required; recorded with who asked)
        #[arg(long, value_name = "TEXT")]
        reason: Option<String>,
        #[arg(long, env = "POOLWRIGHT_STATE_DIR", default_value = DEFAULT_STATE_DIR, value_name = "DIR")]
        state_dir: PathBuf,
    },
    /// The simulator as a vendor: publish an image to its catalogue
    #[command(subcommand)]
    Sim(SimCommand),
    /// Provider plug-ins: check one against the contract, or print the contract
    #[command(
        subcommand,
        after_help = "Examples:\n  poolwright plugin check http://127.0.0.1:9480 --token-file plugin.token"
    )]
    Plugin(plugin_cmd::PluginCommand),
    /// Print the JSON Schema (draft-07) of the desired-state documents
    Schema,
    /// Print the release and the git revision it was built from
    #[command(after_help = "Examples:\n  poolwright version -o json")]
    Version {
        /// Output format
        #[arg(long, short, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
    /// Print a shell completion script
    #[command(
        after_help = "Examples:\n  poolwright completions bash > /etc/bash_completion.d/poolwright"
    )]
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Start a config repository: a provider, a pool, a disruption policy,
    /// the JSON Schema for editors and a .gitignore
    ///
    /// Writes nothing when any of those files exists already.
    #[command(
        after_help = "Examples:\n  poolwright init pools && poolwright plan pools\n  poolwright init .   # in an empty git repository"
    )]
    Init {
        /// The directory (created when missing)
        dir: PathBuf,
    },
    /// Check what a bastion needs: the desired state, each provider's
    /// credentials, each cluster's kubeconfig, the state directory's
    /// permissions, the systemd unit's hardening, the listener and the
    /// control socket's group
    ///
    /// Reads, observes and connects; changes nothing. Run it as the
    /// daemon's user (sudo -u poolwright poolwright doctor ...). Exit status:
    /// 0 when nothing failed (warnings may be printed), 1 otherwise.
    #[command(
        after_help = "Examples:\n  poolwright doctor examples/ -o json\n  sudo -u poolwright poolwright doctor /srv/poolwright/config \\\n      --state-dir /var/lib/poolwright --control-group poolwright-ops"
    )]
    Doctor {
        /// Desired-state directory
        #[arg(default_value = ".")]
        dir: PathBuf,
        /// The state directory the daemon uses
        #[arg(long, env = "POOLWRIGHT_STATE_DIR", default_value = DEFAULT_STATE_DIR, value_name = "DIR")]
        state_dir: PathBuf,
        /// The systemd unit to check (default: poolwright.service where systemd looks)
        #[arg(long, value_name = "FILE")]
        unit: Option<PathBuf>,
        /// The address `run --listen` will use
        #[arg(
            long,
            env = "POOLWRIGHT_LISTEN",
            default_value = DEFAULT_LISTEN,
            value_name = "ADDR"
        )]
        listen: std::net::SocketAddr,
        /// The group `run --control-group` will give the control socket
        #[arg(long, value_name = "GROUP")]
        control_group: Option<String>,
        /// Output format
        #[arg(long, short, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
    /// Write the man pages and shell completions into DIR (for packages)
    #[command(hide = true)]
    PackageAssets { dir: PathBuf },
    /// One fetch of a config repository, asked as JSON on standard input:
    /// the daemon's fetches run here, in a child whose memory is capped
    #[command(hide = true)]
    GitFetchWorker,
}

/// Options shared by the commands that observe and act.
#[derive(Debug, Clone, clap::Args)]
pub struct Common {
    /// Where poolwright keeps its inventory, lock, journal and simulator fleet
    #[arg(long, env = "POOLWRIGHT_STATE_DIR", default_value = DEFAULT_STATE_DIR, value_name = "DIR")]
    pub state_dir: PathBuf,
    /// Treat pools poolwright manages that are no longer in the files as to be
    /// deleted (unless protected): plan and forecast show it, apply and run do it
    #[arg(long)]
    pub prune: bool,
    /// The global --no-color, for the commands' output.
    #[arg(skip)]
    pub no_color: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// journald when systemd connected stderr to the journal, human otherwise
    Auto,
    Human,
    Json,
    Journald,
}

/// A daemon's address as users type it: `127.0.0.1:9479` is http.
fn parse_daemon_url(s: &str) -> Result<String, InvalidValue> {
    let text = if s.contains("://") {
        s.to_string()
    } else {
        format!("http://{s}")
    };
    let url = reqwest::Url::parse(&text).map_err(|e| {
        InvalidValue(format!(
            "{s:?} is not a URL like http://127.0.0.1:9479: {e}"
        ))
    })?;
    if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
        return Err(InvalidValue(format!(
            "{s:?}: the daemon is reached over http or https, at a host (http://127.0.0.1:9479)"
        )));
    }
    Ok(text.trim_end_matches('/').to_string())
}

fn parse_duration(s: &str) -> Result<std::time::Duration, InvalidValue> {
    let d: jiff::SignedDuration = s.parse().map_err(|e| {
        InvalidValue(format!(
            "{s:?} is not a duration like 30s, 5m or 1h30m: {e}"
        ))
    })?;
    let d =
        std::time::Duration::try_from(d).map_err(|_| InvalidValue(format!("{s:?} is negative")))?;
    if d > crate::spec::values::MAX_DURATION {
        return Err(InvalidValue(format!(
            "{s:?} is longer than the limit of 30 days"
        )));
    }
    Ok(d)
}

/// `plan`'s output formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum PlanOutput {
    Text,
    Json,
    /// For a pull-request comment: a summary table, the pools to look at,
    /// and the text in a fenced block.
    Markdown,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Output {
    Text,
    Json,
}

/// Terraform spells some long options with one dash (`-out`, `-auto-approve`,
/// `-detailed-exitcode`, `-input=false`, `-no-color`) and says `-json` for
/// JSON output; accept them so muscle memory works (docs/reference/commands.md
/// has the table, checked row by row by a test).
pub fn normalize_args(
    args: impl IntoIterator<Item = std::ffi::OsString>,
) -> Vec<std::ffi::OsString> {
    const TERRAFORM_STYLE: [&str; 5] = [
        "-out",
        "-auto-approve",
        "-detailed-exitcode",
        "-input",
        "-no-color",
    ];
    // After `--` every argument is a value (a directory named `-json`).
    let mut values = false;
    args.into_iter()
        .map(|a| {
            let text = a.to_string_lossy();
            let name = text.split('=').next().unwrap_or_default();
            if values || text == "--" {
                values = true;
                a
            } else if TERRAFORM_STYLE.contains(&name) {
                format!("-{text}").into()
            } else if text == "-json" {
                "--output=json".into()
            } else {
                a
            }
        })
        .collect()
}

/// Run a parsed command; the result is the process exit code.
pub fn run(cli: Cli) -> anyhow::Result<u8> {
    // What poolwright writes into a state directory (journals, the
    // inventory, events, the lock, the simulator's machines) is its own:
    // 0600 files and 0700 directories, whoever starts it and with whatever
    // umask, as the unit's UMask=0077 makes them (the state directory itself
    // is 0750: the control group reaches its socket). `init` writes the
    // user's own files, with the user's umask.
    if !matches!(
        cli.command,
        Command::Init { .. } | Command::PackageAssets { .. }
    ) {
        // SAFETY: umask only changes this process's file creation mask; no
        // other thread runs yet.
        unsafe { libc::umask(0o077) };
    }
    let no_color = cli.no_color;
    let with_color = |c: Common| Common {
        no_color: no_color || c.no_color,
        ..c
    };
    match cli.command {
        Command::Validate {
            paths,
            dir,
            output,
            max_file_size,
        } => {
            let limits = Limits {
                max_file_bytes: max_file_size,
                ..Limits::default()
            };
            validate_paths(&paths, dir.as_deref(), output, &limits)
        }
        Command::Plan {
            dir,
            common,
            output,
            git_ref,
            remote,
            detailed_exitcode,
            input: _,
            allow_unreachable,
            out,
            forecast,
        } => workflow::plan(
            &dir,
            &with_color(common),
            output,
            workflow::Planning::new(git_ref.as_deref(), &remote)?,
            workflow::PlanFlags {
                detailed_exitcode,
                allow_unreachable,
            },
            out.as_deref(),
            forecast,
        ),
        Command::Forecast {
            dir,
            common,
            output,
            runs,
            seed,
            pool,
            sweep,
            set,
            svg,
            time_limit,
        } => forecast_cmd::forecast(
            &dir,
            &with_color(common),
            output,
            &forecast_cmd::Request {
                runs,
                seed,
                sweep,
                set,
                svg,
                pools: pool,
                deadline: (!time_limit.is_zero()).then(|| std::time::Instant::now() + time_limit),
            },
        ),
        Command::Apply {
            target,
            common,
            auto_approve,
            input,
            output,
            allow_unreachable,
            events,
            override_disruption_policy: _,
            reason,
        } => {
            let report = apply_report::Report::new(output == Output::Json);
            let asking = workflow::Asking {
                auto_approve,
                input,
            };
            let done = workflow::apply(
                &target,
                &with_color(common),
                asking,
                allow_unreachable,
                events.as_deref(),
                reason,
                report.clone(),
            );
            // A program reading the JSON lines always gets the outcome last.
            if let Err(e) = &done
                && report.is_json()
            {
                report.outcome(apply_report::Outcome::Error, 0, &[format!("{e:#}")], "");
            }
            done
        }
        Command::Run {
            git,
            ha,
            control,
            dir,
            common,
            dry_run,
            git_committed_only,
            resync,
            parallelism,
            listen,
            events,
            shutdown_grace,
            debounce,
            retry_after,
            log_format: _,
        } => crate::daemon::run(crate::daemon::Options {
            dir,
            state_dir: common.state_dir,
            prune: common.prune,
            dry_run,
            git_committed_only,
            git: git.options(),
            resync,
            parallelism: parallelism as usize,
            listen,
            events,
            shutdown_grace,
            debounce,
            retry_after,
            ha: ha.options(),
            events_rotation: crate::files::Rotation {
                max_bytes: control.events_max_size,
                keep: control.events_keep,
            },
            control: control.options(),
        }),
        Command::Status {
            state_dir,
            url,
            output,
        } => status_cmd::status(&service_dir::state_dir(&state_dir), url.as_deref(), output),
        Command::Rollout(cmd) => rollout_cmd::run(cmd),
        Command::Images {
            state_dir,
            url,
            output,
        } => images_cmd::images(&service_dir::state_dir(&state_dir), url.as_deref(), output),
        Command::Image {
            action,
            image,
            reason,
            state_dir,
        } => images_cmd::image(
            action,
            &image,
            reason.as_deref(),
            &service_dir::state_dir(&state_dir),
        ),
        Command::Sim(SimCommand::Release {
            image,
            released,
            state_dir,
        }) => images_cmd::sim_release(&image, released.as_deref(), &state_dir),
        Command::Fleet {
            action,
            name,
            state_dir,
            url,
            reason,
            output,
        } => fleet_cmd::fleet(
            action,
            name.as_deref(),
            &service_dir::state_dir(&state_dir),
            url.as_deref(),
            reason.as_deref(),
            output,
        ),
        Command::Plugin(cmd) => plugin_cmd::plugin(cmd),
        Command::Schema => {
            std::io::stdout().write_all(spec::schema::json_schema_text().as_bytes())?;
            Ok(exit::OK)
        }
        Command::Version { output } => {
            match output {
                Output::Text => println!("poolwright {VERSION}"),
                Output::Json => println!(
                    "{}",
                    serde_json::json!({
                        "version": env!("CARGO_PKG_VERSION"),
                        "revision": env!("POOLWRIGHT_GIT_REVISION"),
                    })
                ),
            }
            Ok(exit::OK)
        }
        Command::Completions { shell } => {
            let mut cmd = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(shell, &mut cmd, "poolwright", &mut std::io::stdout());
            Ok(exit::OK)
        }
        Command::Init { dir } => init_cmd::init(&dir),
        Command::Doctor {
            dir,
            state_dir,
            unit,
            listen,
            control_group,
            output,
        } => doctor::doctor(&doctor::Request {
            dir,
            state_dir,
            unit,
            listen,
            control_group,
            output,
        }),
        Command::PackageAssets { dir } => package_assets::write(&dir),
        Command::GitFetchWorker => crate::git::isolated::worker(),
    }
}

/// Each FleetRollout's stages and the pools in each, in admission order.
fn stage_summary(c: &spec::Config) -> String {
    let mut out = String::new();
    for (name, f) in &c.staging.fleets {
        out.push_str(&format!(
            "FleetRollout {name}: {} governed pool(s)\n",
            f.governed()
        ));
        for (i, (stage, pools)) in f.stages.iter().enumerate() {
            let shown: Vec<&str> = pools.iter().take(8).map(String::as_str).collect();
            out.push_str(&format!(
                "  {}. stage {stage}: {} pool(s): {}{}\n",
                i + 1,
                pools.len(),
                shown.join(", "),
                if pools.len() > shown.len() {
                    format!(", and {} more", pools.len() - shown.len())
                } else {
                    String::new()
                }
            ));
        }
    }
    out
}

/// `validate` of a directory, or of files in the context of theirs (a
/// pre-commit hook passes the changed files only).
fn validate_paths(
    paths: &[PathBuf],
    context: Option<&std::path::Path>,
    output: Output,
    limits: &Limits,
) -> anyhow::Result<u8> {
    let is_file = |p: &PathBuf| std::fs::metadata(p).is_ok_and(|m| m.is_file());
    match paths {
        [one] if !is_file(one) => {
            if context.is_some() {
                anyhow::bail!("--dir is for files: {} is a directory", one.display());
            }
            return validate(one, output, limits);
        }
        _ if !paths.iter().all(is_file) => anyhow::bail!(
            "validate takes one directory, or files: {} {}",
            paths
                .iter()
                .find(|p| !is_file(p))
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
            "is not a regular file"
        ),
        _ => {}
    }
    match context {
        Some(dir) => validate_in(paths, dir, output, limits),
        // The files alone, as one set (a NodePool whose Provider is in
        // another file needs --dir).
        None => {
            let report = crate::desired_dir::load_files(paths, limits);
            let code = validate_report(
                &report,
                &paths
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
                output,
            )?;
            // A reference to a document in another file is the usual
            // reason files alone fail: say how to give them their context.
            if output == Output::Text
                && report
                    .errors()
                    .any(|d| crate::spec::validate::is_dangling_reference(&d.message))
            {
                eprintln!(
                    "hint: the files were checked alone; `poolwright validate --dir DIR FILE...` checks them with the rest of their desired-state directory"
                );
            }
            Ok(code)
        }
    }
}

/// The files named, checked with everything else of `dir` loaded beside
/// them; only their own problems are theirs to fix here.
fn validate_in(
    paths: &[PathBuf],
    dir: &std::path::Path,
    output: Output,
    limits: &Limits,
) -> anyhow::Result<u8> {
    let canonical = |p: &std::path::Path| std::fs::canonicalize(p).ok();
    let root = canonical(dir)
        .ok_or_else(|| anyhow::anyhow!("--dir {}: no such directory", dir.display()))?;
    let named: Vec<PathBuf> = paths.iter().filter_map(|p| canonical(p)).collect();
    if let Some(outside) = named.iter().find(|p| !p.starts_with(&root)) {
        anyhow::bail!(
            "{} is not in the desired-state directory {} (name the right one with --dir)",
            outside.display(),
            dir.display()
        );
    }
    let report = crate::desired_dir::load_dir(dir, limits);
    let (mine, others): (Vec<&crate::spec::Diagnostic>, Vec<_>) =
        report.diagnostics.iter().partition(|d| {
            canonical(std::path::Path::new(&d.file)).is_some_and(|f| named.contains(&f))
        });
    let errors = mine.iter().filter(|d| d.is_error()).count();
    let elsewhere = others.iter().filter(|d| d.is_error()).count();
    match output {
        Output::Json => {
            let doc = serde_json::json!({
                "formatVersion": 1,
                "valid": errors == 0,
                "context": dir,
                "files": paths,
                "errorCount": errors,
                "warningCount": mine.len() - errors,
                "errorsInOtherFiles": elsewhere,
                "diagnostics": mine,
            });
            let mut out = std::io::stdout().lock();
            serde_json::to_writer_pretty(&mut out, &doc)?;
            writeln!(out)?;
        }
        Output::Text => {
            let mut err = std::io::stderr().lock();
            for d in &mine {
                writeln!(err, "{d}")?;
            }
            if elsewhere > 0 {
                writeln!(
                    err,
                    "note: {} has {elsewhere} error(s) in other files (`poolwright validate {}` shows them)",
                    dir.display(),
                    dir.display()
                )?;
            }
            if errors == 0 {
                println!(
                    "{} file(s) valid in the context of {}",
                    paths.len(),
                    dir.display()
                );
            } else {
                writeln!(
                    err,
                    "{errors} error(s) in {} file(s) checked in the context of {}; nothing was changed",
                    paths.len(),
                    dir.display()
                )?;
            }
        }
    }
    Ok(if errors == 0 { exit::OK } else { exit::FAILED })
}

fn validate(dir: &std::path::Path, output: Output, limits: &Limits) -> anyhow::Result<u8> {
    let report = crate::desired_dir::load_dir(dir, limits);
    validate_report(&report, &dir.display().to_string(), output)
}

/// A load's report, as `validate` prints it; `what` names what was loaded.
fn validate_report(
    report: &crate::spec::validate::LoadReport,
    what: &str,
    output: Output,
) -> anyhow::Result<u8> {
    let errors = report.errors().count();
    let warnings = report.diagnostics.len() - errors;
    match output {
        Output::Json => {
            let counts = report.config.as_ref().map(|c| {
                serde_json::json!({
                    "providers": c.providers.len(),
                    "clusters": c.clusters.len(),
                    "nodePools": c.pools.len(),
                    "disruptionPolicies": c.policies.len(),
                    "fleetRollouts": c.fleets.len(),
                })
            });
            // Each FleetRollout's stages and their pools, in admission order.
            let stages = report.config.as_ref().map(|c| {
                c.staging
                    .fleets
                    .iter()
                    .map(|(name, f)| {
                        let stages: Vec<serde_json::Value> = f
                            .stages
                            .iter()
                            .map(|(s, pools)| serde_json::json!({"name": s, "pools": pools}))
                            .collect();
                        (name.clone(), serde_json::json!({ "stages": stages }))
                    })
                    .collect::<serde_json::Map<_, _>>()
            });
            let doc = serde_json::json!({
                "formatVersion": 1,
                "valid": report.is_valid(),
                "files": report.files,
                "documents": report.documents,
                "errorCount": errors,
                "warningCount": warnings,
                "kinds": counts,
                "fleetRollouts": stages,
                "diagnostics": report.diagnostics,
            });
            let mut out = std::io::stdout().lock();
            serde_json::to_writer_pretty(&mut out, &doc)?;
            writeln!(out)?;
        }
        Output::Text => {
            let mut err = std::io::stderr().lock();
            for d in &report.diagnostics {
                writeln!(err, "{d}")?;
            }
            match &report.config {
                Some(c) => {
                    println!(
                        "{} is valid: {} file(s), {} provider(s), {} cluster(s), {} node pool(s){}{}",
                        what,
                        report.files,
                        c.providers.len(),
                        c.clusters.len(),
                        c.pools.len(),
                        if c.policies.is_empty() {
                            String::new()
                        } else {
                            format!(", {} disruption policy(ies)", c.policies.len())
                        },
                        if warnings > 0 {
                            format!(", {warnings} warning(s)")
                        } else {
                            String::new()
                        },
                    );
                    print!("{}", stage_summary(c));
                }
                None => writeln!(
                    err,
                    "{} is invalid: {errors} error(s){}; nothing was changed",
                    what,
                    if warnings > 0 {
                        format!(", {warnings} warning(s)")
                    } else {
                        String::new()
                    },
                )?,
            }
        }
    }
    Ok(if report.is_valid() {
        exit::OK
    } else {
        exit::FAILED
    })
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum HaBackend {
    /// A coordination.k8s.io Lease; journals and inventory in ConfigMaps beside it
    Kubernetes,
}

/// High availability: several daemons, one acting.
#[derive(Clone, Debug, clap::Args)]
pub struct HaArgs {
    /// Run a leader election: only the holder of the lease acts, the others
    /// plan and report; the rollout journals and the inventory live in the
    /// cluster so a standby resumes where the leader stopped
    #[arg(long, value_enum, value_name = "BACKEND")]
    ha: Option<HaBackend>,
    /// Kubeconfig of the cluster holding the lease (default: in-cluster, then
    /// $KUBECONFIG or ~/.kube/config)
    #[arg(long, value_name = "FILE", requires = "ha")]
    ha_kubeconfig: Option<PathBuf>,
    /// Kubeconfig context
    #[arg(long, value_name = "NAME", requires = "ha")]
    ha_context: Option<String>,
    /// Namespace of the lease and the ConfigMaps (default: the context's, or the pod's)
    #[arg(long, value_name = "NAME", requires = "ha")]
    ha_namespace: Option<String>,
    /// Name of the Lease; the ConfigMaps are named after it
    #[arg(long, requires = "ha", value_name = "NAME", default_value = "poolwright", value_parser = parse_lease_name)]
    ha_lease: String,
    /// This daemon's identity in the lease (default: HOSTNAME-PID-RANDOM); unique
    /// per daemon, 1 to 128 printable characters
    #[arg(long, value_name = "ID", requires = "ha", value_parser = parse_identity)]
    ha_identity: Option<String>,
    /// How long a standby waits, after it last saw the lease renewed, before taking it
    #[arg(long, requires = "ha", default_value = "15s", value_parser = parse_duration, value_name = "DURATION")]
    ha_lease_duration: std::time::Duration,
    /// The leader stops acting if it could not renew for this long
    #[arg(long, requires = "ha", default_value = "10s", value_parser = parse_duration, value_name = "DURATION")]
    ha_renew_deadline: std::time::Duration,
    /// How often the lease is renewed (or, by a standby, read)
    #[arg(long, requires = "ha", default_value = "2s", value_parser = parse_duration, value_name = "DURATION")]
    ha_retry_period: std::time::Duration,
    /// Split the pools into S shards, each a Lease (LEASE-shard-I): every
    /// daemon holds about S / (live daemons) of them and acts only on their
    /// pools. A pool's shard is fnv1a64(name) mod S. Every daemon must run
    /// with the same S (1 to 256)
    #[arg(long, requires = "ha", value_name = "S", value_parser = clap::value_parser!(u32).range(1..=i64::from(crate::ha::shards::MAX_SHARDS)))]
    shards: Option<u32>,
}

impl HaArgs {
    fn options(self) -> Option<crate::ha::HaOptions> {
        self.ha.map(|HaBackend::Kubernetes| crate::ha::HaOptions {
            kubeconfig: self.ha_kubeconfig,
            context: self.ha_context,
            namespace: self.ha_namespace,
            lease: self.ha_lease,
            identity: self.ha_identity,
            lease_duration: self.ha_lease_duration,
            renew_deadline: self.ha_renew_deadline,
            retry_period: self.ha_retry_period,
            shards: self.shards,
        })
    }
}

fn parse_pool_name(s: &str) -> Result<String, InvalidValue> {
    if crate::spec::validate::is_dns_label(s, 63) {
        Ok(s.to_string())
    } else {
        Err(InvalidValue(
            "a pool name is 1 to 63 lower-case letters, digits and '-'".into(),
        ))
    }
}

/// Who may change state through the daemon, and what its listeners may cost.
#[derive(Clone, Debug, clap::Args)]
pub struct ControlArgs {
    /// Group that owns the control socket STATE/control.sock (mode 0660):
    /// its members may pause and resume rollouts (default: the daemon's group)
    #[arg(long, value_name = "GROUP")]
    control_group: Option<String>,
    /// Also accept pause/resume on the TCP listener, from requests carrying
    /// `Authorization: Bearer TOKEN` with the token in this file (re-read on
    /// each request, so it can be rotated)
    #[arg(long, value_name = "FILE")]
    control_token_file: Option<PathBuf>,
    /// A further Host name the TCP listener answers to (repeatable; besides
    /// its address and, on loopback, localhost)
    #[arg(long = "allowed-host", value_name = "HOST")]
    allowed_hosts: Vec<String>,
    /// Open connections at most, per listener (also bounded by the
    /// open-files limit less a reserve for journal writes)
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    max_connections: u32,
    /// A request's headers must arrive within this; idle connections close after it
    #[arg(long, default_value = "10s", value_parser = parse_duration, value_name = "DURATION")]
    header_timeout: std::time::Duration,
    /// /healthz fails, and the systemd watchdog is no longer pinged, when the
    /// reconcile loop has not turned for this long
    #[arg(long, default_value = "2m", value_parser = parse_duration, value_name = "DURATION")]
    liveness_timeout: std::time::Duration,
    /// Rotate the events file when it would grow past this many bytes
    #[arg(long, default_value_t = 64 * 1024 * 1024, value_parser = clap::value_parser!(u64).range(4096..=(1 << 40)), value_name = "BYTES")]
    events_max_size: u64,
    /// Rotated events files kept (events.jsonl.1 ... .N)
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(0..=1000), value_name = "N")]
    events_keep: u32,
}

impl ControlArgs {
    fn options(&self) -> crate::daemon::ControlOptions {
        crate::daemon::ControlOptions {
            socket_group: self.control_group.clone(),
            token_file: self.control_token_file.clone(),
            allowed_hosts: self.allowed_hosts.clone(),
            max_connections: self.max_connections as usize,
            header_timeout: self.header_timeout,
            liveness_timeout: self.liveness_timeout,
        }
    }
}

fn parse_identity(s: &str) -> Result<String, InvalidValue> {
    if (1..=128).contains(&s.chars().count())
        && s.chars().all(|c| !c.is_control() && !c.is_whitespace())
    {
        Ok(s.to_string())
    } else {
        Err(InvalidValue(
            "use 1 to 128 printable characters without spaces, unique per daemon".into(),
        ))
    }
}

fn parse_lease_name(s: &str) -> Result<String, InvalidValue> {
    if crate::spec::validate::is_dns_label(s, 40) {
        Ok(s.to_string())
    } else {
        Err(InvalidValue("use 1 to 40 lower-case letters, digits and '-' (ConfigMaps are named LEASE-journal-POOL)".into()))
    }
}
