use std::process::ExitCode;

use clap::Parser;
use poolwright::cli::{Cli, exit, normalize_args, run};

fn main() -> ExitCode {
    let cli = Cli::parse_from(normalize_args(std::env::args_os()));
    match run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("poolwright: error: {e:#}");
            ExitCode::from(exit::FAILED)
        }
    }
}
