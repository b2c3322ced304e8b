use std::process::ExitCode;

use clap::Parser;
use poolwright::cli::{Cli, exit, run};

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("poolwright: error: {e:#}");
            ExitCode::from(exit::FAILED)
        }
    }
}
