//! Exit statuses (the `sysexits.h` values scripts know), what each means, and
//! the one-line failure that goes with them.
//!
//! [`TABLE`] is the one list of statuses and meanings: `tenure --help`, the man
//! pages and the table in docs/cli.md are all rendered from it.

use std::fmt;

/// Bad usage: unknown flag, malformed duration, zero TTL, empty key, unknown
/// backend scheme.
pub const USAGE: u8 = 64;
/// A `limit` cost above the quota's capacity (it could never be allowed), or a
/// `once --capture` output too large to record.
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

/// Which exit statuses a row of [`TABLE`] describes.
#[derive(Debug, Clone, Copy)]
pub enum Status {
    /// The command's own status, passed through.
    Command,
    /// 128+N: a signal N ended the command (or tenure).
    Signal,
    /// These fixed statuses.
    Codes(&'static [u8]),
}

impl Status {
    /// How the status column shows it: `the command's`, `128+N`, `126, 127`.
    pub fn label(self) -> String {
        match self {
            Status::Command => "the command's".to_string(),
            Status::Signal => "128+N".to_string(),
            Status::Codes(codes) => codes
                .iter()
                .map(u8::to_string)
                .collect::<Vec<_>>()
                .join(", "),
        }
    }
}

/// One row of the exit-status table.
#[derive(Debug, Clone, Copy)]
pub struct Row {
    /// The status or statuses.
    pub status: Status,
    /// What it means, per subcommand; `code spans` in Markdown backticks.
    pub meaning: &'static str,
}

impl Row {
    /// The meaning as plain text (backticks dropped), for `--help` and man.
    pub fn plain(&self) -> String {
        self.meaning.replace('`', "")
    }
}

/// Every exit status tenure can return, with its meaning.
pub const TABLE: [Row; 12] = [
    Row {
        status: Status::Command,
        meaning: "`run`, `elect`, `once`: the command exited with it (`once`: or the recorded \
                  status of an earlier run)",
    },
    Row {
        status: Status::Signal,
        meaning: "`run`, `elect`: the command was killed by signal N; tenure got signal N \
                  while it waited for the lease (`run`) or campaigned (`elect`)",
    },
    Row {
        status: Status::Codes(&[0]),
        meaning: "`status`: the key is held (the lease, a reader or writer, a permit); `list`; \
                  `limit`: allowed; `leader`: someone leads; `release`: released, or free \
                  already; `completions`, `man`, `--help`, `--version`",
    },
    Row {
        status: Status::Codes(&[USAGE]),
        meaning: "bad usage: unknown flag, malformed duration, zero TTL, a TTL too short to \
                  renew (`run`, `elect`: under 100 ms), `--grace` above a third of the TTL, \
                  a key that is empty, over 1024 bytes or has control characters, an unknown \
                  backend scheme, `memory:`, a missing key or command, `-c` beside a command; \
                  `run --permits 0`; `release` without `--force`, or on a quorum; `elect --id` empty, \
                  too long, with control characters, or on a quorum; `once` or \
                  `run --permits` on a quorum; `limit` on a quorum or etcd; a `--label` too \
                  long or with control characters; `list --watch` without a terminal; \
                  `list` on a quorum or a Redis Cluster",
    },
    Row {
        status: Status::Codes(&[DATA]),
        meaning: "`limit`: the cost exceeds the quota's capacity (it could never be \
                  allowed); `once --capture`: the output is too large to record",
    },
    Row {
        status: Status::Codes(&[UNAVAILABLE]),
        meaning: "the backend is unreachable or unusable (refused connection, timeout, \
                  quorum unavailable, unopenable, corrupt or foreign SQLite file, a Redis \
                  key holding data of another type)",
    },
    Row {
        status: Status::Codes(&[SOFTWARE]),
        meaning: "internal failure (no signal handlers, no runtime, stdout closed while \
                  `completions` or `man` wrote)",
    },
    Row {
        status: Status::Codes(&[CANT_CREATE]),
        meaning: "`run --json-file`, `man --dir`: the file or directory cannot be created",
    },
    Row {
        status: Status::Codes(&[NOT_ACQUIRED]),
        meaning: "`run`: not acquired within `--wait` (or the `--conflict-exit-code`); \
                  `status`: the key is free; `limit`: limited; `leader`: nobody leads; \
                  `once`: another caller still runs it after `--wait`; `release --force`: \
                  the lease changed hands meanwhile (nothing released)",
    },
    Row {
        status: Status::Codes(&[LEASE_LOST]),
        meaning: "`run`: the command may not have run alone (the lease was lost, deleted or \
                  taken while it ran, or was left with too little validity to start it); \
                  `elect --exit-on-loss`: leadership was lost; `once`: the runner's lease was \
                  lost (also after another caller's `release --force`)",
    },
    Row {
        status: Status::Codes(&[CANNOT_EXECUTE]),
        meaning: "`run`, `elect`, `once`: the command was found but could not be executed",
    },
    Row {
        status: Status::Codes(&[NOT_FOUND]),
        meaning: "`run`, `elect`, `once`: the command was not found",
    },
];

/// The exit-status table as `--help` shows it: a heading, then one entry per
/// row, its meaning wrapped under a hanging indent.
pub fn help_text() -> String {
    const WIDTH: usize = 80;
    let column = TABLE
        .iter()
        .map(|r| r.status.label().len())
        .max()
        .unwrap_or(0)
        + 4;
    let mut out = String::from("Exit statuses:\n");
    for row in &TABLE {
        let mut line = format!("  {:<w$}", row.status.label(), w = column - 2);
        let mut width = line.len();
        for word in row.plain().split_whitespace() {
            if width > column && width + 1 + word.len() > WIDTH {
                out.push_str(line.trim_end());
                out.push('\n');
                line = " ".repeat(column);
                width = column;
            } else if width > column {
                line.push(' ');
                width += 1;
            }
            line.push_str(word);
            width += word.chars().count();
        }
        out.push_str(&line);
        out.push('\n');
    }
    out.trim_end().to_string()
}

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
        _ => (USAGE, one_line(&e.to_string())),
    }
}

/// clap's rendered error on one line: its first paragraph names the problem
/// (and, for a missing argument, which one on the next line), a `tip:`
/// paragraph says how to fix it (`to pass '--flag' as a value, use '--
/// --flag'`); the usage text after them is left to `--help`.
fn one_line(rendered: &str) -> String {
    let paragraphs: Vec<String> = rendered
        .trim()
        .split("\n\n")
        .map(|p| p.lines().map(str::trim).collect::<Vec<_>>().join(" "))
        .collect();
    let problem = paragraphs
        .first()
        .map_or("", |p| p.trim_start_matches("error: "));
    let tips: Vec<&str> = paragraphs
        .iter()
        .filter(|p| p.starts_with("tip: "))
        .map(String::as_str)
        .collect();
    if tips.is_empty() {
        format!("{problem} (see 'tenure --help')")
    } else {
        format!("{problem}; {} (see 'tenure --help')", tips.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clap_errors_keep_their_tips_on_one_line() {
        let rendered = "error: unexpected argument '--flag' found\n\n  tip: to pass '--flag' \
                        as a value, use '-- --flag'\n\nUsage: tenure run [OPTIONS] <KEY> \
                        [CMD]...\n\nFor more information, try '--help'.\n";
        assert_eq!(
            one_line(rendered),
            "unexpected argument '--flag' found; tip: to pass '--flag' as a value, use \
             '-- --flag' (see 'tenure --help')"
        );
        let missing = "error: the following required arguments were not provided:\n  \
                       <KEY>\n\nUsage: tenure status <KEY>\n";
        assert_eq!(
            one_line(missing),
            "the following required arguments were not provided: <KEY> (see 'tenure --help')"
        );
    }
}
