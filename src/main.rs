use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;
use poolwright::cli::{Cli, Command, LogFormat, exit, normalize_args, run};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

fn main() -> ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let cli = match Cli::try_parse_from(normalize_args(args.clone())) {
        Ok(cli) => cli,
        // `-json` became `--output=json`: where a command has no output
        // format, clap would name a flag the user never typed.
        Err(e) if json_refused(&e, &args) => {
            eprintln!(
                "error: -json: `poolwright {}` has no JSON output (validate, plan, apply, \
                 forecast, status, fleet, rollout status, plugin check, doctor and \
                 version have it)",
                subcommand(&args)
            );
            return ExitCode::from(exit::FAILED);
        }
        // --help and --version print and succeed; a usage error prints
        // clap's message and exits 1, never 2 (`plan --detailed-exitcode`'s
        // "changes present").
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() {
                exit::FAILED
            } else {
                exit::OK
            });
        }
    };
    init_logging(&cli);
    match run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("poolwright: error: {e:#}");
            ExitCode::from(exit::FAILED)
        }
    }
}

/// Whether `e` refuses the `--output` that a typed `-json` became.
fn json_refused(e: &clap::Error, args: &[std::ffi::OsString]) -> bool {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    let typed = args
        .iter()
        .skip(1)
        .take_while(|a| *a != "--")
        .any(|a| a == "-json");
    typed
        && e.kind() == ErrorKind::UnknownArgument
        && matches!(
            e.get(ContextKind::InvalidArg),
            Some(ContextValue::String(a)) if a.starts_with("--output")
        )
}

/// The command words the user typed (`rollout pause`, `init`).
fn subcommand(args: &[std::ffi::OsString]) -> String {
    let words: Vec<String> = args
        .iter()
        .skip(1)
        .map(|a| a.to_string_lossy().into_owned())
        .filter(|a| !a.starts_with('-'))
        .take(2)
        .collect();
    match words.as_slice() {
        [group, sub] if ["rollout", "fleet", "plugin"].contains(&group.as_str()) => {
            format!("{group} {sub}")
        }
        [first, ..] => first.clone(),
        [] => String::new(),
    }
}

/// Structured logs on stderr. The CLI is quiet unless asked (RUST_LOG=info shows
/// every rollout step: the plan and prompts are its real output); the daemon
/// logs at info, to journald under systemd, human on a terminal, JSON on request.
fn init_logging(cli: &Cli) {
    let (default_level, format) = match &cli.command {
        Command::Run { log_format, .. } => ("info", *log_format),
        _ => ("warn", LogFormat::Human),
    };
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_level));
    let format = match format {
        // systemd sets JOURNAL_STREAM when stderr goes to the journal.
        LogFormat::Auto if std::env::var_os("JOURNAL_STREAM").is_some() => LogFormat::Journald,
        LogFormat::Auto => LogFormat::Human,
        f => f,
    };
    let registry = tracing_subscriber::registry().with(filter);
    match format {
        LogFormat::Journald => match tracing_journald::layer() {
            Ok(layer) => registry.with(layer).init(),
            Err(e) => {
                registry.with(human()).init();
                tracing::warn!("journald is not reachable ({e}); logging to stderr");
            }
        },
        LogFormat::Json => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .json()
                    .with_writer(std::io::stderr),
            )
            .init(),
        _ => registry.with(human()).init(),
    }
}

fn human<S>() -> impl tracing_subscriber::Layer<S>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none())
}
