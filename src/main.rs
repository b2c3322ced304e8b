use std::io::IsTerminal;
use std::process::ExitCode;

use clap::{CommandFactory, Parser};
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
                "error: -json: `poolwright {}` has no JSON output ({} have it)",
                typed_command(&args),
                json_commands(&Cli::command(), "").join(", ")
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

/// The command the user typed, as clap names it (`rollout pause`, `init`).
fn typed_command(args: &[std::ffi::OsString]) -> String {
    let mut cmd = Cli::command();
    let mut words = Vec::new();
    for word in args.iter().skip(1).filter_map(|a| a.to_str()) {
        if word.starts_with('-') {
            continue;
        }
        let Some(sub) = cmd.find_subcommand(word).cloned() else {
            break;
        };
        words.push(sub.get_name().to_string());
        cmd = sub;
    }
    words.join(" ")
}

/// The commands under `cmd` that take `--output` (hidden ones left out).
fn json_commands(cmd: &clap::Command, path: &str) -> Vec<String> {
    let mut found = Vec::new();
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        let name = format!("{path}{}", sub.get_name());
        if sub.get_arguments().any(|a| a.get_id() == "output") {
            found.push(name.clone());
        }
        found.extend(json_commands(sub, &format!("{name} ")));
    }
    found
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
                    .with_writer(poolwright::secrets::RedactedStderr),
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
        .with_writer(poolwright::secrets::RedactedStderr)
        .with_ansi(std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none())
}
