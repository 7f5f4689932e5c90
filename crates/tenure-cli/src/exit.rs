//! Exit statuses (the `sysexits.h` values scripts know) and the one-line failure
//! that goes with them.

use std::fmt;

/// Bad usage: unknown flag, malformed duration, zero TTL, empty key, unknown
/// backend scheme.
pub const USAGE: u8 = 64;
/// A `limit` cost above the quota's capacity: it could never be allowed.
pub const DATA: u8 = 65;
/// The backend is unreachable or unusable.
pub const UNAVAILABLE: u8 = 69;
/// tenure itself failed (no signal handler, no runtime).
pub const SOFTWARE: u8 = 70;
/// A file tenure was asked to write (`--json-file`, `man --dir`) cannot be
/// created.
pub const CANT_CREATE: u8 = 73;
/// The lease was not acquired in time, or the rate limit refused.
pub const NOT_ACQUIRED: u8 = 75;
/// The command may not have run alone: the lease was lost, deleted or taken
/// while it ran.
pub const LEASE_LOST: u8 = 76;
/// The command could not be executed (found but not executable).
pub const CANNOT_EXECUTE: u8 = 126;
/// The command was not found.
pub const NOT_FOUND: u8 = 127;

/// A failure to report on one line of stderr, with its exit status.
#[derive(Debug)]
pub struct Failure {
    pub code: u8,
    pub message: String,
}

impl Failure {
    pub fn new(code: u8, message: impl Into<String>) -> Self {
        Failure {
            code,
            message: message.into(),
        }
    }

    pub fn usage(message: impl Into<String>) -> Self {
        Self::new(USAGE, message)
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // One line, whatever the cause said.
        f.write_str(&self.message.replace('\n', " "))
    }
}

impl From<tenure::Error> for Failure {
    fn from(e: tenure::Error) -> Self {
        use tenure::Error as E;
        let code = match &e {
            E::InvalidKey { .. }
            | E::InvalidArgument { .. }
            | E::Config { .. }
            | E::Unsupported { .. } => USAGE,
            E::LeaseLost { .. } => LEASE_LOST,
            E::Busy { .. } => NOT_ACQUIRED,
            E::CostExceedsCapacity { .. } => DATA,
            _ => UNAVAILABLE,
        };
        Failure::new(code, e.to_string())
    }
}

/// Turns a clap error into our one-line form and exit status: help and version
/// go to stdout with status 0, everything else is a usage error (64, not clap's
/// 2).
pub fn from_clap(e: &clap::Error) -> (u8, String) {
    use clap::error::ErrorKind;
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => (0, e.to_string()),
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            // Named from the grammar, so a new subcommand is never left out.
            let cli = <crate::cli::Cli as clap::CommandFactory>::command();
            let names: Vec<&str> = cli
                .get_subcommands()
                .filter(|c| !c.is_hide_set())
                .map(clap::Command::get_name)
                .collect();
            let list = match names.split_last() {
                Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
                _ => names.join(""),
            };
            (
                USAGE,
                format!("a command is required: {list} (see 'tenure --help')"),
            )
        }
        _ => {
            // clap's first paragraph names the problem (and, for a missing
            // argument, which one on the next line); the rest is usage text.
            let rendered = e.to_string();
            let first: Vec<&str> = rendered
                .trim_start()
                .lines()
                .take_while(|l| !l.trim().is_empty())
                .map(str::trim)
                .collect();
            let first = first.join(" ");
            let first = first.trim_start_matches("error: ");
            (USAGE, format!("{first} (see 'tenure --help')"))
        }
    }
}
