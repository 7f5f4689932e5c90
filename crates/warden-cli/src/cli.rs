//! The command-line grammar (clap types only; no behaviour).

use std::ffi::OsString;
use std::time::Duration;

use clap::{ArgAction, Args, Parser, Subcommand};

use crate::duration;

/// Leases with fencing tokens and rate limits from the shell, on an embedded
/// SQLite database (no setup) or on Redis.
///
/// Exit statuses: the command's own (128+N when it died by signal N) for `run`;
/// 64 bad usage, 65 a `limit` cost above capacity, 69 backend unreachable,
/// 75 not acquired in time / rate limited, 76 lease lost while running.
#[derive(Debug, Parser)]
#[command(name = "warden", version, about, long_about = None)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,

    #[command(subcommand)]
    pub command: Command,
}

/// Options accepted before or after the subcommand.
#[derive(Debug, Args)]
pub struct Global {
    /// Store URL: sqlite:PATH, redis://HOST:PORT[/DB], rediss://… (repeatable;
    /// several Redis URLs form a quorum). Default: SQLite at $WARDEN_DB, else
    /// $XDG_STATE_HOME/warden/warden.db, else ~/.local/state/warden/warden.db.
    #[arg(
        long = "backend",
        value_name = "URL",
        global = true,
        env = "WARDEN_BACKEND",
        value_delimiter = ',',
        action = ArgAction::Append,
    )]
    pub backends: Vec<String>,

    /// Print nothing but errors (and what --json asks for).
    #[arg(short, long, global = true)]
    pub quiet: bool,

    /// Log to stderr: -v info, -vv debug, -vvv trace.
    #[arg(short, long, global = true, action = ArgAction::Count)]
    pub verbose: u8,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a command while holding a lease; WARDEN_FENCE and WARDEN_KEY are set
    /// in its environment.
    Run(RunArgs),
    /// Show whether a lease is held, its remaining TTL and last fence.
    Status(StatusArgs),
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The lease key.
    #[arg(long)]
    pub key: String,

    /// How long the store keeps the lease without renewal; warden renews it
    /// every third of this while the command runs.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = duration::positive)]
    pub ttl: Duration,

    /// How long to wait for a held lease before giving up (exit 75).
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = duration::parse)]
    pub wait: Duration,

    /// Give up at once if the lease is held (same as --wait 0s).
    #[arg(long, conflicts_with = "wait")]
    pub no_wait: bool,

    /// After the lease is lost: how long the command's process group has
    /// between SIGTERM and SIGKILL.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = duration::parse)]
    pub grace: Duration,

    /// Exit status when the lease was not acquired (instead of 75).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u8))]
    pub conflict_exit_code: Option<u8>,

    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// The lease key.
    #[arg(long)]
    pub key: String,

    /// Print {"key","held","ttl_ms","fence","storage_key"} as JSON.
    #[arg(long)]
    pub json: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_grammar_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn backend_goes_before_or_after_the_subcommand() {
        let before =
            Cli::try_parse_from(["warden", "--backend", "memory:", "status", "--key", "k"])
                .expect("parses");
        let after = Cli::try_parse_from([
            "warden",
            "status",
            "--key",
            "k",
            "--backend",
            "sqlite:a.db",
            "--backend",
            "redis://x",
        ])
        .expect("parses");
        assert_eq!(before.global.backends, ["memory:"]);
        assert_eq!(after.global.backends, ["sqlite:a.db", "redis://x"]);
    }

    #[test]
    fn run_needs_the_command_after_a_double_dash() {
        let cli = Cli::try_parse_from(["warden", "run", "--key", "k", "--", "echo", "--flag"])
            .expect("parses");
        let Command::Run(run) = cli.command else {
            panic!("not run")
        };
        assert_eq!(run.command, ["echo", "--flag"]);
        assert_eq!(run.ttl, Duration::from_secs(30));
        assert!(Cli::try_parse_from(["warden", "run", "--key", "k"]).is_err());
        assert!(
            Cli::try_parse_from(["warden", "run", "--key", "k", "--ttl", "0s", "--", "x"]).is_err()
        );
        assert!(
            Cli::try_parse_from([
                "warden",
                "run",
                "--key",
                "k",
                "--no-wait",
                "--wait",
                "1s",
                "--",
                "x"
            ])
            .is_err()
        );
    }
}
