//! The command-line interface: argument definitions and the commands' bodies.
//! `main.rs` only parses arguments and turns the outcome into an exit code.

use std::io::Write;
use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

use crate::spec::{self, Limits};
use crate::store::DEFAULT_STATE_DIR;

mod rollout_cmd;
mod saved;
mod workflow;

pub use rollout_cmd::RolloutAction;

/// Exit codes shared by every command (documented in the README).
pub mod exit {
    /// Success; for `validate`, the desired state is valid.
    pub const OK: u8 = 0;
    /// Invalid desired state, or the command failed.
    pub const FAILED: u8 = 1;
    /// Wrong command-line usage (clap's own code).
    pub const USAGE: u8 = 2;
}

#[derive(Debug, Parser)]
#[command(
    name = "poolwright",
    version,
    about = "Reconcile node pools from a directory of desired-state YAML",
    long_about = "poolwright reads a directory of desired-state YAML (Provider, Cluster and NodePool \
documents), compares it with the pools its providers report, shows the difference as a plan and \
applies it, replacing nodes through one rollout executor that honours surge/unavailable budgets, \
drains, health gates and disruption policies."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Check a desired-state directory and report every problem as FILE:LINE:COL
    ///
    /// Exit status: 0 when valid, 1 when any error was found.
    Validate {
        /// Directory (searched recursively for *.yaml and *.yml) or single file
        #[arg(default_value = ".")]
        dir: PathBuf,
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
    Plan {
        /// Desired-state directory (searched recursively) or single file
        #[arg(default_value = ".")]
        dir: PathBuf,
        #[command(flatten)]
        common: Common,
        /// Output format
        #[arg(long, short, value_enum, default_value_t = Output::Text)]
        output: Output,
        /// Exit 2 when there are changes, 0 when there are none
        #[arg(long)]
        detailed_exitcode: bool,
        /// Save the plan to FILE for `poolwright apply FILE`
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
    },
    /// Make the pools match the desired state (shows the plan and asks first)
    ///
    /// TARGET is a desired-state directory, or a plan saved with `plan --out`,
    /// which is applied only if neither the files nor the pools changed since.
    Apply {
        /// Desired-state directory, single file, or saved plan
        #[arg(default_value = ".")]
        target: PathBuf,
        #[command(flatten)]
        common: Common,
        /// Do not ask for confirmation (required when standard input is not a terminal)
        #[arg(long)]
        auto_approve: bool,
        /// Append one JSON object per line for every step to FILE
        #[arg(long, value_name = "FILE")]
        events: Option<PathBuf>,
    },
    /// Pause, resume or inspect a pool's rollout
    Rollout {
        #[arg(value_enum)]
        action: RolloutAction,
        /// The pool's name
        pool: String,
        #[arg(long, env = "POOLWRIGHT_STATE_DIR", default_value = DEFAULT_STATE_DIR, value_name = "DIR")]
        state_dir: PathBuf,
    },
    /// Print the JSON Schema (draft-07) of the desired-state documents
    Schema,
    /// Print a shell completion script
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

/// Options shared by the commands that observe and act.
#[derive(Debug, Clone, clap::Args)]
pub struct Common {
    /// Where poolwright keeps its inventory, lock, journal and simulator fleet
    #[arg(long, env = "POOLWRIGHT_STATE_DIR", default_value = DEFAULT_STATE_DIR, value_name = "DIR")]
    pub state_dir: PathBuf,
    /// Delete pools poolwright manages that are no longer in the files (unless protected)
    #[arg(long)]
    pub prune: bool,
    /// Never colour the output (NO_COLOR is honoured too)
    #[arg(long)]
    pub no_color: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Output {
    Text,
    Json,
}

/// Terraform spells some long options with one dash (`-out`, `-auto-approve`,
/// `-detailed-exitcode`); accept them so muscle memory works.
pub fn normalize_args(
    args: impl IntoIterator<Item = std::ffi::OsString>,
) -> Vec<std::ffi::OsString> {
    const TERRAFORM_STYLE: [&str; 3] = ["-out", "-auto-approve", "-detailed-exitcode"];
    args.into_iter()
        .map(|a| {
            let text = a.to_string_lossy();
            let name = text.split('=').next().unwrap_or_default();
            if TERRAFORM_STYLE.contains(&name) {
                format!("-{text}").into()
            } else {
                a
            }
        })
        .collect()
}

/// Run a parsed command; the result is the process exit code.
pub fn run(cli: Cli) -> anyhow::Result<u8> {
    match cli.command {
        Command::Validate {
            dir,
            output,
            max_file_size,
        } => {
            let limits = Limits {
                max_file_bytes: max_file_size,
                ..Limits::default()
            };
            validate(&dir, output, &limits)
        }
        Command::Plan {
            dir,
            common,
            output,
            detailed_exitcode,
            out,
        } => workflow::plan(&dir, &common, output, detailed_exitcode, out.as_deref()),
        Command::Apply {
            target,
            common,
            auto_approve,
            events,
        } => workflow::apply(&target, &common, auto_approve, events.as_deref()),
        Command::Rollout {
            action,
            pool,
            state_dir,
        } => rollout_cmd::rollout(action, &pool, &state_dir),
        Command::Schema => {
            std::io::stdout().write_all(spec::schema::json_schema_text().as_bytes())?;
            Ok(exit::OK)
        }
        Command::Completions { shell } => {
            let mut cmd = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(shell, &mut cmd, "poolwright", &mut std::io::stdout());
            Ok(exit::OK)
        }
    }
}

fn validate(dir: &std::path::Path, output: Output, limits: &Limits) -> anyhow::Result<u8> {
    let report = spec::load_dir(dir, limits);
    let errors = report.errors().count();
    let warnings = report.diagnostics.len() - errors;
    match output {
        Output::Json => {
            let counts = report.config.as_ref().map(|c| {
                serde_json::json!({
                    "providers": c.providers.len(),
                    "clusters": c.clusters.len(),
                    "nodePools": c.pools.len(),
                })
            });
            let doc = serde_json::json!({
                "formatVersion": 1,
                "valid": report.is_valid(),
                "files": report.files,
                "documents": report.documents,
                "errorCount": errors,
                "warningCount": warnings,
                "kinds": counts,
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
                Some(c) => println!(
                    "{} is valid: {} file(s), {} provider(s), {} cluster(s), {} node pool(s){}",
                    dir.display(),
                    report.files,
                    c.providers.len(),
                    c.clusters.len(),
                    c.pools.len(),
                    if warnings > 0 {
                        format!(", {warnings} warning(s)")
                    } else {
                        String::new()
                    },
                ),
                None => writeln!(
                    err,
                    "{} is invalid: {errors} error(s){}; nothing was changed",
                    dir.display(),
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
