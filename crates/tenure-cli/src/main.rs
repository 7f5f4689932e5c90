//! The `tenure` command line: a thin layer over the tenure library.
//!
//! `tenure run` runs a command under a lease, `tenure elect` runs one only
//! while this process leads an election and `tenure leader` shows who leads,
//! `tenure once` runs a command at most once per key, `tenure limit` takes
//! units from a rate limit, `tenure status` inspects a lease and `tenure list`
//! the held ones; `tenure completions` and `tenure man` print what packagers
//! install. The store is the embedded SQLite file by default, or Redis (one
//! master, Cluster, Sentinel, a quorum of masters) or etcd. See docs/cli.md for
//! the contract scripts rely on (options, output, exit statuses).

// The entry point is `start`'s (see there why), except in unit tests, whose
// harness brings its own.
#![cfg_attr(not(test), no_main)]

mod cli;
mod duration;
mod elect;
mod exit;
mod gates;
mod generate;
mod global;
mod grant;
mod leader;
mod limit;
mod list;
mod once;
mod output;
#[cfg(test)]
mod reference;
mod release;
mod run;
mod secrets;
mod start;
mod status;
mod store;
mod terminal;

use std::time::Duration;

use crate::cli::{Cli, Command};
use crate::exit::Failure;

/// The process's entry point (see [`start`]); unused by unit tests. One of
/// the two items of tenure-cli the `unsafe_code` lint is allowed for (the
/// other ignores SIGPIPE): an entry point must be named `main` unmangled,
/// which the compiler cannot check.
#[cfg(not(test))]
#[allow(unsafe_code)]
#[unsafe(no_mangle)]
extern "C" fn main(_argc: std::os::raw::c_int, _argv: *const *const u8) -> std::os::raw::c_int {
    start::run(command_line)
}

/// The command line's work; returns the exit status.
#[cfg_attr(test, allow(dead_code))]
fn command_line() -> u8 {
    // First of all, so that not even a usage error can print a password.
    secrets::collect(
        std::env::args_os()
            .skip(1)
            .chain(std::env::var_os("TENURE_BACKEND"))
            .map(|v| v.to_string_lossy().into_owned()),
    );
    let mut cli = match cli::parse() {
        Ok(cli) => cli,
        Err(e) => {
            let (code, text) = exit::from_clap(&e);
            if code == 0 {
                output::line(text.trim_end());
            } else {
                output::note(&text);
            }
            return code;
        }
    };
    if let Err(problem) = cli.command.resolve() {
        output::note(&format!("{problem} (see 'tenure --help')"));
        return exit::USAGE;
    }
    // Generated from the grammar alone: no store, no runtime.
    match &cli.command {
        Command::Completions(sub) => return generate::completions(&sub.args),
        Command::Man(sub) => return generate::man(&sub.args),
        _ => {}
    }
    init_logging(cli.global.verbose);
    let mut builder = tokio::runtime::Builder::new_current_thread();
    builder.enable_all();
    if store::is_sqlite(&cli.global) {
        builder.max_blocking_threads(1);
    }
    let runtime = match builder.build() {
        Ok(rt) => rt,
        Err(e) => {
            output::note(&format!("cannot start the async runtime: {e}"));
            return exit::SOFTWARE;
        }
    };
    // On the heap: the future of a whole subcommand is large, and passing it
    // down by value through the runtime's calls would copy it into fresh
    // stack pages at each (every first touch of a page is a page fault).
    let result = runtime.block_on(Box::pin(dispatch(&cli)));
    runtime.block_on(store::close_all());
    // Background work (a release after a failure) gets a moment, not forever.
    runtime.shutdown_timeout(Duration::from_secs(1));
    match result {
        Ok(code) => code,
        Err(failure) => {
            output::note(&failure.to_string());
            failure.code
        }
    }
}

async fn dispatch(cli: &Cli) -> Result<u8, Failure> {
    match &cli.command {
        Command::Run(sub) => run::run(&cli.global, &sub.args).await,
        Command::Limit(sub) => limit::limit(&cli.global, &sub.args).await,
        Command::Status(sub) => status::status(&cli.global, &sub.args).await,
        Command::List(sub) => list::list(&cli.global, &sub.args).await,
        Command::Elect(sub) => elect::elect(&cli.global, &sub.args).await,
        Command::Leader(sub) => leader::leader(&cli.global, &sub.args).await,
        Command::Once(sub) => once::once(&cli.global, &sub.args).await,
        Command::Release(sub) => release::release(&cli.global, &sub.args).await,
        // Handled in `main` before the runtime starts.
        Command::Completions(_) | Command::Man(_) => Ok(0),
    }
}

/// Logs to stderr when `-v` or `RUST_LOG` asks for it.
///
/// `RUST_LOG` takes `target=level` and `level` directives separated by commas
/// (`tenure=debug,info`, `off`); what it names wins, and `-v` sets the level of
/// everything it leaves unnamed. A malformed value is reported in one line and
/// ignored: logging is a diagnostic, not a reason to refuse the command.
fn init_logging(verbose: u8) {
    use tracing_subscriber::filter::{LevelFilter, Targets};
    use tracing_subscriber::prelude::*;

    let from_v = match verbose {
        0 => None,
        1 => Some(LevelFilter::INFO),
        2 => Some(LevelFilter::DEBUG),
        _ => Some(LevelFilter::TRACE),
    };
    let from_env = match std::env::var("RUST_LOG") {
        Ok(text) if !text.trim().is_empty() => match text.parse::<Targets>() {
            Ok(targets) => Some(targets),
            Err(e) => {
                output::note(&format!(
                    "ignoring RUST_LOG ({e}); write e.g. RUST_LOG=debug or RUST_LOG=tenure=trace"
                ));
                None
            }
        },
        _ => None,
    };
    let targets = match (from_env, from_v) {
        (None, None) => return,
        (None, Some(level)) => Targets::new().with_default(level),
        (Some(targets), Some(level)) if targets.default_level().is_none() => {
            targets.with_default(level)
        }
        (Some(targets), _) => targets,
    };
    let layer = tracing_subscriber::fmt::layer()
        .with_writer(|| secrets::ScrubbedStderr)
        .with_target(false)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_filter(targets);
    let _ = tracing_subscriber::registry().with(layer).try_init();
}
