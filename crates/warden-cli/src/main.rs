//! The `warden` command line: a thin layer over the warden library.
//!
//! `warden run` runs a command under a lease, `warden limit` takes units from a
//! rate limit, `warden status` inspects a lease. See
//! docs/cli.md for the contract scripts rely on (options, output, exit statuses).

mod cli;
mod duration;
mod elect;
mod exit;
mod leader;
mod limit;
mod output;
mod run;
mod secrets;
mod status;
mod store;
mod terminal;

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;

use crate::cli::{Cli, Command};
use crate::exit::Failure;

fn main() -> ExitCode {
    // First of all, so that not even a usage error can print a password.
    secrets::collect(
        std::env::args_os()
            .skip(1)
            .chain(std::env::var_os("WARDEN_BACKEND"))
            .map(|v| v.to_string_lossy().into_owned()),
    );
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let (code, text) = exit::from_clap(&e);
            if code == 0 {
                output::line(text.trim_end());
            } else {
                output::note(&text);
            }
            return ExitCode::from(code);
        }
    };
    init_logging(cli.global.verbose);
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            output::note(&format!("cannot start the async runtime: {e}"));
            return ExitCode::from(exit::SOFTWARE);
        }
    };
    let result = runtime.block_on(dispatch(&cli));
    // Background work (a release after a failure) gets a moment, not forever.
    runtime.shutdown_timeout(Duration::from_secs(1));
    match result {
        Ok(code) => ExitCode::from(code),
        Err(failure) => {
            output::note(&failure.to_string());
            ExitCode::from(failure.code)
        }
    }
}

async fn dispatch(cli: &Cli) -> Result<u8, Failure> {
    match &cli.command {
        Command::Run(args) => run::run(&cli.global, args).await,
        Command::Limit(args) => limit::limit(&cli.global, args).await,
        Command::Status(args) => status::status(&cli.global, args).await,
        Command::Elect(args) => elect::elect(&cli.global, args).await,
        Command::Leader(args) => leader::leader(&cli.global, args).await,
    }
}

fn init_logging(verbose: u8) {
    let level = match verbose {
        0 => return,
        1 => tracing::Level::INFO,
        2 => tracing::Level::DEBUG,
        _ => tracing::Level::TRACE,
    };
    let _ = tracing_subscriber::fmt()
        .with_writer(|| secrets::ScrubbedStderr)
        .with_max_level(level)
        .with_target(false)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}
