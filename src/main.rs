use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;
use poolwright::cli::{Cli, exit, normalize_args, run};

fn main() -> ExitCode {
    // Structured logs on stderr, quiet unless asked for (RUST_LOG=info shows
    // every rollout step); the plan and prompts are the CLI's real output.
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none())
        .init();
    let cli = Cli::parse_from(normalize_args(std::env::args_os()));
    match run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("poolwright: error: {e:#}");
            ExitCode::from(exit::FAILED)
        }
    }
}
