//! The command-line grammar (clap types only; no behaviour).

use std::ffi::OsString;
use std::num::NonZeroU32;
use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgAction, Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use clap_complete::Shell;
use tenure::limit::Algorithm;

use crate::duration;
pub use crate::global::Global;
use crate::global::{Sub, WrittenAfter};

/// The whole command line: global options and one subcommand. (The about
/// text is the crate's description; `--help` ends with examples and the exit
/// statuses, see [`command`].)
#[derive(Debug, Parser)]
#[command(name = "tenure", version, about, long_about = None)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,

    #[command(subcommand)]
    pub command: Command,
}

// Usage lines: clap's own would show KEY as optional (it may come as -k).
const RUN_USAGE: &str = "tenure run [OPTIONS] KEY [--] CMD [ARGS]...
       tenure run [OPTIONS] KEY -c 'SHELL COMMAND'
       tenure run [OPTIONS] -k KEY [-k KEY]... (-- CMD [ARGS]... | -c 'SHELL COMMAND')";
const ELECT_USAGE: &str = "tenure elect [OPTIONS] KEY [--] CMD [ARGS]...
       tenure elect [OPTIONS] KEY -c 'SHELL COMMAND'
       tenure elect [OPTIONS] -k KEY (-- CMD [ARGS]... | -c 'SHELL COMMAND')";
const ONCE_USAGE: &str = "tenure once [OPTIONS] KEY [--] CMD [ARGS]...
       tenure once [OPTIONS] KEY -c 'SHELL COMMAND'
       tenure once [OPTIONS] -k KEY (-- CMD [ARGS]... | -c 'SHELL COMMAND')";
const RELEASE_USAGE: &str = "tenure release [OPTIONS] --force (KEY | -k KEY)";
const LIMIT_USAGE: &str = "tenure limit [OPTIONS] --rate N/PERIOD (KEY | -k KEY)
       tenure limit [OPTIONS] --rate N/PERIOD --reserve --max-delay D (KEY | -k KEY)
       tenure limit [OPTIONS] --rate N/PERIOD --refund N (KEY | -k KEY)
       tenure limit [OPTIONS] --reset (KEY | -k KEY)";
const STATUS_USAGE: &str = "tenure status [OPTIONS] (KEY | -k KEY)";
const LEADER_USAGE: &str = "tenure leader [OPTIONS] (KEY | -k KEY)";

const EXAMPLES: &str = "\
Examples:
  tenure run nightly -c 'pg_dump shop > /backup/shop.sql'
  tenure run deploy -w inf ./deploy.sh --prod
  tenure run cron -n -q -E 0 ./job       # skip quietly if already running
  tenure limit api:alice --rate 10/1m
  tenure status nightly --json
  TENURE_BACKEND=redis://10.0.0.5:6379 tenure run nightly -c ./job.sh";

/// The top-level `--help` epilogue: examples, then the exit-status table.
fn root_after_help() -> String {
    format!("{EXAMPLES}\n\n{}", crate::exit::help_text())
}

/// The grammar as `--help`, the man pages and docs/cli.md show it: with the
/// top-level epilogue, which [`parse`] formats only to show it.
pub fn command() -> clap::Command {
    Cli::command().after_help(root_after_help())
}

/// Parses this process's command line (see [`parse_from`]).
pub fn parse() -> Result<Cli, clap::Error> {
    parse_from(std::env::args_os().collect())
}

/// Parses a command line (its first word the program's name), formatting
/// the top-level epilogue only when help is shown: a `tenure run` does not
/// pay for it. The options of [`Global`] written after the subcommand are
/// settled into [`Cli::global`].
pub fn parse_from(args: Vec<OsString>) -> Result<Cli, clap::Error> {
    use clap::error::ErrorKind;
    let mut grammar = Cli::command();
    let parsed = grammar
        .try_get_matches_from_mut(&args)
        .and_then(|matches| Cli::from_matches(matches).map_err(|e| e.format(&mut grammar)));
    // Not dropped: the process exits soon after and the kernel frees it
    // then, where freeing it here would cost instructions of a cold start.
    std::mem::forget(grammar);
    match parsed {
        Err(e)
            if matches!(
                e.kind(),
                ErrorKind::DisplayHelp | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
            ) =>
        {
            let matches = command().try_get_matches_from(args)?;
            Cli::from_matches(matches).map_err(|e| e.format(&mut command()))
        }
        parsed => parsed,
    }
}

/// Parses `tenure WORDS…` as [`parse`] does this process's command line.
#[cfg(test)]
pub fn parse_words(words: &[&str]) -> Result<Cli, clap::Error> {
    parse_from(
        std::iter::once("tenure")
            .chain(words.iter().copied())
            .map(OsString::from)
            .collect(),
    )
}

impl Cli {
    /// The command line in `matches`, with the options written after the
    /// subcommand settled into [`Cli::global`].
    fn from_matches(mut matches: clap::ArgMatches) -> Result<Cli, clap::Error> {
        let written = WrittenAfter::of(&matches);
        let mut cli = Cli::from_arg_matches_mut(&mut matches)?;
        let after = std::mem::take(cli.command.global_mut());
        cli.global.settle(after, &written);
        Ok(cli)
    }
}

const RUN_EXAMPLES: &str = "\
Examples:
  tenure run nightly -c 'pg_dump shop > /backup/shop.sql'
  tenure run deploy --wait inf ./deploy.sh --prod   # wait as long as it takes
  tenure run cron -n -q -E 0 -- ./job      # already running: exit 0, quietly
  tenure run report -t 2m --json-file run.json ./report
  tenure run -k job -w 30 -c 'curl -H \"Fence: $TENURE_FENCE\" -X PUT https://…'
  tenure run -k acct:1 -k acct:2 -- ./transfer.sh   # both keys or neither
  tenure run nightly --max-hold 2h ./job   # stopped (exit 76) after 2 hours";

const LIMIT_EXAMPLES: &str = "\
Examples:
  tenure limit api:alice --rate 10/1m || exit 0   # skip when over the quota
  tenure limit mail --rate 100/1h --burst 20 --json
  tenure limit -k upload --rate 1000/1d --cost 50 --algorithm sliding-window
  tenure limit api:alice --rate 100/1m           # a new rate keeps what was taken
  tenure limit api:alice --rate 10/1m --shadow --json   # what would happen; exit 0
  tenure limit mail --rate 1/s --reserve --max-delay 30 && send-mail
  tenure limit upload --rate 1000/1d --refund 50        # give 50 units back
  tenure limit api:alice --reset";

const ELECT_EXAMPLES: &str = "\
Examples:
  tenure elect scheduler ./scheduler     # on every host; one runs it at a time
  tenure elect migrate --exit-on-loss -t 10 -- ./migrate.sh";

const LEADER_EXAMPLES: &str = "\
Examples:
  tenure leader scheduler
  tenure leader scheduler --json | jq -r .id";

const STATUS_EXAMPLES: &str = "\
Examples:
  tenure status nightly || echo free     # exit 0 when held, 75 when free
  tenure status -k nightly --json | jq .holder";

const ONCE_EXAMPLES: &str = "\
Examples:
  tenure once migrate-v42 ./migrate.sh      # on every host; runs once
  tenure once report:2026-12-01 --capture --retain 7d -- ./report
  tenure once -k seed --cache-failures -w 60 -c './seed.sh && touch seeded'";

const RELEASE_EXAMPLES: &str = "\
Examples:
  tenure status nightly          # who holds it, for how long
  tenure release nightly --force # its holder hangs: take the lease from it";

const COMPLETIONS_EXAMPLES: &str = "\
Examples:
  tenure completions bash > ~/.local/share/bash-completion/completions/tenure
  tenure completions zsh > \"${fpath[1]}/_tenure\"
  tenure completions fish > ~/.config/fish/completions/tenure.fish";

const MAN_EXAMPLES: &str = "\
Examples:
  tenure man | man -l -
  tenure man --dir /usr/local/share/man/man1";

const LIST_EXAMPLES: &str = "\
Examples:
  tenure list
  tenure list --prefix orders: --json | jq -r '.key + \" \" + .holder.label'
  tenure list --prefix deploy --watch";

/// Each subcommand's options are added only when it is parsed, shown or
/// built (`defer`): a `tenure run` does not build the grammar of the other
/// nine. What inspects the grammar calls `Command::build` first. The option
/// structs carry plain comments, not doc comments: added after the
/// variant's description, a doc comment would replace it.
#[derive(Debug, Subcommand)]
#[command(defer = true)]
pub enum Command {
    /// Run a command while holding a lease (or several, all or none: -k A -k
    /// B); TENURE_FENCE and TENURE_KEY (for several: TENURE_FENCES and
    /// TENURE_KEYS, one per line) are set in its environment.
    #[command(override_usage = RUN_USAGE, after_help = RUN_EXAMPLES)]
    Run(Sub<RunArgs>),
    /// Take units from a rate limit: exit 0 when allowed, 75 when limited.
    #[command(override_usage = LIMIT_USAGE, after_help = LIMIT_EXAMPLES)]
    Limit(Sub<LimitArgs>),
    /// Show whether a lease is held, who holds it and for how long, its
    /// remaining TTL, last fence and how many wait.
    #[command(override_usage = STATUS_USAGE, after_help = STATUS_EXAMPLES)]
    Status(Sub<StatusArgs>),
    /// List the held leases under a key prefix, with their holders (--watch:
    /// live TTL bars).
    #[command(after_help = LIST_EXAMPLES)]
    List(Sub<ListArgs>),
    /// Run a command only while this process leads an election (TENURE_FENCE
    /// is the term); campaign again after losing leadership unless --exit-on-loss.
    #[command(override_usage = ELECT_USAGE, after_help = ELECT_EXAMPLES)]
    Elect(Sub<crate::elect::ElectArgs>),
    /// Show who leads an election: exit 0, or 75 when nobody leads.
    #[command(override_usage = LEADER_USAGE, after_help = LEADER_EXAMPLES)]
    Leader(Sub<crate::leader::LeaderArgs>),
    /// Run a command at most once per key; later and concurrent callers exit
    /// with its recorded status (and replay its stdout with --capture).
    #[command(override_usage = ONCE_USAGE, after_help = ONCE_EXAMPLES)]
    Once(Sub<crate::once::OnceArgs>),
    /// Break-glass: release a lease whoever holds it (--force); the next fence
    /// is greater and the old holder sees the loss at its next renewal.
    #[command(override_usage = RELEASE_USAGE, after_help = RELEASE_EXAMPLES)]
    Release(Sub<crate::release::ReleaseArgs>),
    /// Print a shell completion script on stdout (e.g. `tenure completions
    /// bash > /etc/bash_completion.d/tenure`).
    #[command(after_help = COMPLETIONS_EXAMPLES)]
    Completions(Sub<CompletionsArgs>),
    /// Print the man page (roff) on stdout, or write one page per command
    /// into a directory with --dir.
    #[command(after_help = MAN_EXAMPLES)]
    Man(Sub<ManArgs>),
}

impl Command {
    /// Reads the key and the command of `run`, `elect` and `once` from how
    /// they were written (see [`Invocation::resolve`]).
    pub fn resolve(&mut self) -> Result<(), String> {
        match self {
            Command::Run(sub) => sub.args.resolve(),
            Command::Elect(sub) => sub.args.resolve(),
            Command::Once(sub) => sub.args.resolve(),
            _ => Ok(()),
        }
    }

    /// The options of [`Global`] written after this subcommand's name.
    fn global_mut(&mut self) -> &mut Global {
        match self {
            Command::Run(sub) => &mut sub.global,
            Command::Limit(sub) => &mut sub.global,
            Command::Status(sub) => &mut sub.global,
            Command::List(sub) => &mut sub.global,
            Command::Elect(sub) => &mut sub.global,
            Command::Leader(sub) => &mut sub.global,
            Command::Once(sub) => &mut sub.global,
            Command::Release(sub) => &mut sub.global,
            Command::Completions(sub) => &mut sub.global,
            Command::Man(sub) => &mut sub.global,
        }
    }
}

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// bash, zsh, fish, elvish or powershell.
    #[arg(value_name = "SHELL")]
    pub shell: Shell,
}

#[derive(Debug, Args)]
pub struct ManArgs {
    /// Write tenure.1, tenure-run.1, … into this directory (created if
    /// missing) instead of printing tenure.1.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

/// How long `run` waits for a held lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// Up to this long (zero: one try).
    For(Duration),
    /// Until the lease is free (`inf`).
    Forever,
}

/// Parses `--wait`: a duration (a bare number is seconds), or `inf`/`infinity`
/// for no limit.
pub fn parse_wait(text: &str) -> Result<Wait, String> {
    match text.trim() {
        "inf" | "infinity" => Ok(Wait::Forever),
        other => duration::parse(other)
            .map(Wait::For)
            .map_err(|e| format!("{e}, or inf to wait until the lease is free")),
    }
}

// A key, written `KEY` or `-k KEY`, for the subcommands that only read or
// check one (`status`, `leader`, `limit`).
#[derive(Debug, Args)]
pub struct KeyArg {
    /// The key (or -k KEY).
    #[arg(
        value_name = "KEY",
        required_unless_present = "key_flag",
        conflicts_with = "key_flag"
    )]
    key_pos: Option<String>,

    /// The key, as an option (instead of KEY).
    #[arg(short = 'k', long = "key", value_name = "KEY")]
    key_flag: Option<String>,
}

impl KeyArg {
    /// The key, however it was written.
    pub fn get(&self) -> &str {
        self.key_flag
            .as_deref()
            .or(self.key_pos.as_deref())
            .unwrap_or_default()
    }
}

// A key and a command: `KEY [--] CMD [ARGS…]`, `-k KEY [--] CMD [ARGS…]` or
// either key with `-c 'SHELL COMMAND'` (`run`, `elect`, `once`).
//
// With `-k`, the first word clap takes for `KEY` is the command's:
// `Invocation::resolve` sorts that out.
#[derive(Debug, Default, Args)]
pub struct Invocation {
    /// The key (or -k KEY).
    #[arg(value_name = "KEY", required_unless_present = "key_flag")]
    key_pos: Option<String>,

    /// The key, as an option (instead of KEY). `run` takes it several times
    /// to hold every key at once (all or none): -k A -k B.
    #[arg(short = 'k', long = "key", value_name = "KEY", action = ArgAction::Append)]
    key_flag: Vec<String>,

    /// Run this shell command with `/bin/sh -c` (instead of CMD ARGS…).
    #[arg(short = 'c', long = "command", value_name = "SHELL_COMMAND")]
    shell: Option<OsString>,

    /// The command and its arguments, after the key; everything after CMD is
    /// its own (use `--` before a CMD that starts with `-`, or after -k KEY
    /// when an argument does).
    #[arg(value_name = "CMD", trailing_var_arg = true)]
    words: Vec<OsString>,
}

impl Invocation {
    /// The key and the program with its arguments: `/bin/sh -c SHELL_COMMAND`
    /// for `-c` — the POSIX shell by its path, as `system(3)` does, so neither
    /// `$SHELL` nor a short `PATH` (cron's) changes what runs.
    pub fn resolve(&self) -> Result<(String, Vec<OsString>), String> {
        let (mut keys, program) = self.resolve_keys()?;
        if keys.len() > 1 {
            return Err("one key only: -k is given once here (several keys are for `run`)".into());
        }
        Ok((keys.remove(0), program))
    }

    /// The keys (one positional KEY, or every -k KEY) and the program with its
    /// arguments (see [`resolve`](Self::resolve)).
    pub fn resolve_keys(&self) -> Result<(Vec<String>, Vec<OsString>), String> {
        let mut words = self.words.clone();
        let keys = match (self.key_flag.as_slice(), &self.key_pos) {
            ([], Some(key)) => vec![key.clone()],
            ([], None) => return Err("a key is required: KEY or -k KEY".into()),
            (flags, first) => {
                // With -k, the first positional word is the command's.
                if let Some(first) = first {
                    words.insert(0, first.into());
                }
                flags.to_vec()
            }
        };
        let program = match (&self.shell, words.is_empty()) {
            (Some(line), true) => vec!["/bin/sh".into(), "-c".into(), line.clone()],
            (Some(_), false) => {
                return Err(format!(
                    "-c and a command exclude each other; give either -c 'SHELL COMMAND' or \
                     CMD ARGS… (got {:?} after the key; with -k KEY, put '--' before a \
                     command whose arguments start with '-')",
                    words[0]
                ));
            }
            (None, true) => {
                return Err(
                    "a command is required after the key: KEY [--] CMD [ARGS…] or \
                     KEY -c 'SHELL COMMAND'"
                        .into(),
                );
            }
            (None, false) => words,
        };
        Ok((keys, program))
    }
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The lease key and the command.
    #[command(flatten)]
    pub invocation: Invocation,

    /// The lease key (from `invocation`): the first of `keys`.
    #[arg(skip)]
    pub key: String,

    /// Every key to hold (from `invocation`): one, or several with -k A -k B.
    #[arg(skip)]
    pub keys: Vec<String>,

    /// How long the store keeps the lease without renewal (a bare number is
    /// seconds); tenure renews it
    /// every third of this while the command runs.
    #[arg(short, long, value_name = "DURATION", default_value = "30s", value_parser = duration::positive, allow_hyphen_values = true)]
    pub ttl: Duration,

    /// How long to wait for a held lease before giving up (exit 75); `inf`
    /// waits until it is free (flock's default).
    #[arg(short, long, value_name = "DURATION|inf", default_value = "10s", value_parser = parse_wait, allow_hyphen_values = true)]
    pub wait: Wait,

    /// Give up at once if the lease is held (same as --wait 0s).
    #[arg(short, long, conflicts_with = "wait")]
    pub no_wait: bool,

    /// A label recorded with the lease beside this host's name and tenure's
    /// process id (which `tenure status` and `tenure list` show), e.g. the
    /// job or ticket it runs for. At most 256 bytes, no control characters.
    #[arg(short, long, value_name = "TEXT")]
    pub label: Option<String>,

    /// How long the command's process group has between SIGTERM and SIGKILL
    /// when the lease is (about to be) lost: SIGTERM comes this long before
    /// the local deadline, SIGKILL at it. At most a third of --ttl (default:
    /// 10s, or a third of --ttl if that is shorter).
    #[arg(long, value_name = "DURATION", value_parser = duration::parse, allow_hyphen_values = true)]
    pub grace: Option<Duration>,

    /// Exit status when the lease was not acquired (instead of 75).
    #[arg(short = 'E', long, value_name = "N", value_parser = clap::value_parser!(u8))]
    pub conflict_exit_code: Option<u8>,

    /// When tenure ends, print a JSON report on stderr (its last line): key,
    /// outcome, fence, exit statuses, waited/held/ran milliseconds.
    #[arg(long)]
    pub json: bool,

    /// Write the JSON report to FILE instead of stderr (created or truncated
    /// before the lease is taken).
    #[arg(long, value_name = "FILE")]
    pub json_file: Option<PathBuf>,

    /// Hold one of N permits of an expiring semaphore on the key instead of
    /// the lease: up to N commands run at once (consul lock -n).
    #[arg(long, value_name = "N", value_parser = count, allow_hyphen_values = true)]
    pub permits: Option<NonZeroU32>,

    /// Hold a shared (read) grant of the key's read-write lease: any number
    /// of --shared runs hold it together, never with an --exclusive one.
    #[arg(long, conflicts_with_all = ["permits", "exclusive"])]
    pub shared: bool,

    /// Hold the exclusive (write) grant of the key's read-write lease: alone,
    /// after the --shared runs that came before it; those that come after
    /// wait for it.
    #[arg(long, conflicts_with = "permits")]
    pub exclusive: bool,

    /// Hold the lease at most this long (a bare number is seconds): then
    /// renewal stops and the command is stopped as on any loss (SIGTERM,
    /// SIGKILL after --grace; exit 76).
    #[arg(long, value_name = "DURATION", value_parser = duration::positive, allow_hyphen_values = true)]
    pub max_hold: Option<Duration>,

    /// The program and its arguments (from `invocation`).
    #[arg(skip)]
    pub argv: Vec<OsString>,
}

impl RunArgs {
    /// The program and its arguments.
    pub fn program(&self) -> Vec<OsString> {
        self.argv.clone()
    }

    /// Fills `key` and `argv` from how they were written.
    pub fn resolve(&mut self) -> Result<(), String> {
        let (keys, argv) = self.invocation.resolve_keys()?;
        // A key given twice is held once.
        self.keys = Vec::with_capacity(keys.len());
        for key in keys {
            if !self.keys.contains(&key) {
                self.keys.push(key);
            }
        }
        self.key = self.keys.first().cloned().unwrap_or_default();
        self.argv = argv;
        Ok(())
    }
}

#[derive(Debug, Args)]
pub struct LimitArgs {
    /// The rate-limit key (e.g. a user, an IP, a job name).
    #[command(flatten)]
    pub key: KeyArg,

    /// N units per PERIOD, e.g. 10/1m, 5/s, 1000/1d. The key keeps its state
    /// when the rate changes between calls.
    #[arg(long, value_name = "N/PERIOD", value_parser = parse_rate, required_unless_present = "reset")]
    pub rate: Option<Rate>,

    /// Bucket size of gcra and token-bucket (default: N).
    #[arg(long, value_name = "B", value_parser = count, allow_hyphen_values = true)]
    pub burst: Option<NonZeroU32>,

    /// gcra, token-bucket, sliding-log, sliding-window or fixed-window.
    #[arg(long, value_name = "NAME", default_value = "gcra")]
    pub algorithm: Algorithm,

    /// Units this request takes.
    #[arg(long, value_name = "C", default_value = "1", value_parser = count, allow_hyphen_values = true)]
    pub cost: NonZeroU32,

    /// Decide without taking anything and exit 0; the output says what would
    /// have happened ("would_allow").
    #[arg(long, conflicts_with_all = ["reserve", "refund", "reset"])]
    pub shadow: bool,

    /// Book the units at the first instant they are available, print the wait,
    /// sleep until then, exit 0; exit 75 at once if that is beyond --max-delay.
    #[arg(long, requires = "max_delay", conflicts_with_all = ["refund", "reset"])]
    pub reserve: bool,

    /// The longest wait --reserve books (bare numbers are seconds).
    #[arg(long, value_name = "DURATION", value_parser = duration::parse, requires = "reserve", allow_hyphen_values = true)]
    pub max_delay: Option<Duration>,

    /// Give N units back to the key (never beyond its capacity); exit 0.
    #[arg(long, value_name = "N", conflicts_with_all = ["reset", "cost"], value_parser = count, allow_hyphen_values = true)]
    pub refund: Option<NonZeroU32>,

    /// Forget the key's state under --algorithm: it starts from a full budget.
    #[arg(long, conflicts_with_all = ["cost", "burst"])]
    pub reset: bool,

    /// Print {"allowed","limit","remaining","retry_after_ms","reset_after_ms"}
    /// (and "shadow"/"would_allow", "wait_ms", "refunded", "reset").
    #[arg(long)]
    pub json: bool,
}

/// `N/PERIOD` of `--rate`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    pub limit: NonZeroU32,
    pub period: Duration,
}

/// Parses a count of units or permits: a whole number from 1 to `u32::MAX`.
pub fn count(text: &str) -> Result<NonZeroU32, String> {
    text.trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a whole number from 1 to {}", u32::MAX))
}

/// Parses `N/PERIOD`: `10/1m`, `5/s` (a period without a number is one unit).
pub fn parse_rate(text: &str) -> Result<Rate, String> {
    let (n, period) = text
        .split_once('/')
        .ok_or_else(|| format!("{text:?} is not N/PERIOD; write e.g. 10/1m"))?;
    let limit = count(n).map_err(|e| format!("{e} (the units of {text:?})"))?;
    let period = period.trim();
    let period = if period.starts_with(|c: char| c.is_ascii_digit() || c == '.') {
        duration::positive(period)?
    } else {
        duration::positive(&format!("1{period}"))?
    };
    Ok(Rate { limit, period })
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// The lease key.
    #[command(flatten)]
    pub key: KeyArg,

    /// Print {"key","held","ttl_ms","fence","storage_key","holder","waiters"}
    /// as JSON; holder is {"host","pid","label","held_ms"} or null; "rw" and
    /// "semaphore" are added while the key's read-write lease or semaphore is
    /// held or waited for.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// Only leases whose key starts with this (default: all).
    #[arg(short, long, value_name = "PREFIX", default_value = "")]
    pub prefix: String,

    /// Print one JSON object per lease and line, with the fields of
    /// `status --json`.
    #[arg(long, conflicts_with = "watch")]
    pub json: bool,

    /// Redraw the list every second with a TTL bar per lease until Ctrl-C;
    /// refused when stdout is not a terminal.
    #[arg(long)]
    pub watch: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_grammar_is_consistent() {
        Cli::command().debug_assert();
    }

    /// A subcommand's options are added when it is built (`defer`), after
    /// its description: what they add must leave that description alone.
    #[test]
    fn each_subcommand_keeps_its_description_once_built() {
        let described = |cmd: &clap::Command| {
            cmd.get_subcommands()
                .map(|sub| {
                    let text = |t: Option<&clap::builder::StyledStr>| t.map(|t| t.to_string());
                    let about = (text(sub.get_about()), text(sub.get_long_about()));
                    (sub.get_name().to_string(), about)
                })
                .collect::<Vec<_>>()
        };
        let mut root = Cli::command();
        let before = described(&root);
        root.build();
        // Building adds clap's `help` subcommand at the end.
        assert_eq!(described(&root)[..before.len()], before);
        assert!(before.iter().all(|(_, (about, _))| about.is_some()));
    }

    #[test]
    fn rates_read_as_units_per_period() {
        let r = parse_rate("10/1m").expect("rate");
        assert_eq!((r.limit.get(), r.period), (10, Duration::from_secs(60)));
        assert_eq!(
            parse_rate("5/s").expect("rate").period,
            Duration::from_secs(1)
        );
        assert_eq!(
            parse_rate("3/500ms").expect("rate").period,
            Duration::from_millis(500)
        );
        assert!(parse_rate("10").unwrap_err().contains("N/PERIOD"));
        assert!(parse_rate("0/1m").unwrap_err().contains("whole number"));
        assert!(parse_rate("10/0s").unwrap_err().contains("zero"));
        assert!(parse_rate("10/1x").unwrap_err().contains("unknown unit"));
    }

    #[test]
    fn wait_is_a_duration_or_inf() {
        assert_eq!(parse_wait("inf"), Ok(Wait::Forever));
        assert_eq!(parse_wait("infinity"), Ok(Wait::Forever));
        assert_eq!(parse_wait("0s"), Ok(Wait::For(Duration::ZERO)));
        assert_eq!(parse_wait("2m"), Ok(Wait::For(Duration::from_secs(120))));
        assert!(parse_wait("forever").unwrap_err().contains("or inf"));
    }

    /// Parses and resolves `tenure ARGS…`.
    fn parse(args: &[&str]) -> Result<Cli, String> {
        let mut cli = parse_words(args).map_err(|e| e.to_string())?;
        cli.command.resolve()?;
        Ok(cli)
    }

    fn run(args: &[&str]) -> Result<RunArgs, String> {
        let mut all = vec!["run"];
        all.extend_from_slice(args);
        match parse(&all)?.command {
            Command::Run(sub) => Ok(sub.args),
            other => Err(format!("not run: {other:?}")),
        }
    }

    #[test]
    fn the_key_is_positional_or_an_option_and_the_double_dash_optional() {
        for args in [
            &["k", "echo", "--flag"][..],
            &["k", "--", "echo", "--flag"],
            &["-k", "k", "--", "echo", "--flag"],
            &["--key", "k", "echo"],
        ] {
            let r = run(args).unwrap_or_else(|e| panic!("{args:?}: {e}"));
            assert_eq!(r.key, "k", "{args:?}");
            assert!(r.argv.first().is_some_and(|w| w == "echo"), "{args:?}");
        }
        let r = run(&["k", "echo", "--flag"]).expect("parses");
        assert_eq!(r.argv, ["echo", "--flag"]);
        let r = run(&["-k", "k", "echo", "a", "b"]).expect("parses");
        assert_eq!((r.key.as_str(), r.argv.len()), ("k", 3));
        // Options between the key and the command are tenure's.
        let r = run(&["k", "-n", "-t", "5", "echo", "-n"]).expect("parses");
        assert!(r.no_wait);
        assert_eq!(r.ttl, Duration::from_secs(5));
        assert_eq!(r.argv, ["echo", "-n"]);
        let r = run(&["k", "-c", "exit 3"]).expect("parses");
        assert_eq!(r.program(), ["/bin/sh", "-c", "exit 3"]);
        let r = run(&["-c", "exit 3", "-k", "k"]).expect("parses");
        assert_eq!((r.key.as_str(), r.argv.len()), ("k", 3));
        assert!(run(&["k"]).unwrap_err().contains("command is required"));
        assert!(
            run(&["-k", "k"])
                .unwrap_err()
                .contains("command is required")
        );
        assert!(
            run(&["k", "-c", "x", "echo"])
                .unwrap_err()
                .contains("exclude")
        );
        assert!(run(&["-k", "k", "echo", "-c", "x"]).is_err());
        assert!(run(&[]).is_err());
    }

    #[test]
    fn several_keys_come_as_repeated_dash_k() {
        let r = run(&["-k", "b", "-k", "a", "--", "echo", "--flag"]).expect("parses");
        assert_eq!(r.keys, ["b", "a"]);
        assert_eq!(r.key, "b");
        assert_eq!(r.argv, ["echo", "--flag"]);
        let r = run(&["-k", "a", "--key", "b", "-k", "a", "-c", "exit 3"]).expect("parses");
        assert_eq!(r.keys, ["a", "b"], "a key given twice is held once");
        assert_eq!(r.program(), ["/bin/sh", "-c", "exit 3"]);
        let r = run(&["-k", "a", "-k", "b", "echo", "x"]).expect("parses");
        assert_eq!((r.keys.len(), r.argv.len()), (2, 2));
        // One positional KEY: a `--` later on belongs to the command.
        let r = run(&["k", "git", "checkout", "--", "f"]).expect("parses");
        assert_eq!(r.keys, ["k"]);
        assert_eq!(r.argv, ["git", "checkout", "--", "f"]);
        let r = run(&["k", "--max-hold", "90", "true"]).expect("parses");
        assert_eq!(r.max_hold, Some(Duration::from_secs(90)));
        assert!(run(&["k", "--max-hold", "0", "true"]).is_err());
        // Elections and run-once take one key.
        for sub in ["elect", "once"] {
            let err = parse(&[sub, "-k", "a", "-k", "b", "--", "true"]).unwrap_err();
            assert!(err.contains("one key only"), "{sub}: {err}");
        }
    }

    #[test]
    fn durations_take_bare_seconds_and_inf() {
        let r = run(&["k", "-w", "30", "-t", "1.5", "true"]).expect("parses");
        assert_eq!(r.wait, Wait::For(Duration::from_secs(30)));
        assert_eq!(r.ttl, Duration::from_millis(1500));
        let r = run(&["k", "--wait", "inf", "true"]).expect("parses");
        assert_eq!(r.wait, Wait::Forever);
        let r = run(&["k", "--wait", "2m", "true"]).expect("parses");
        assert_eq!(r.wait, Wait::For(Duration::from_secs(120)));
    }

    #[test]
    fn every_keyed_subcommand_takes_key_or_dash_k() {
        for sub in [
            &["status"][..],
            &["leader"],
            &["limit", "--rate", "1/s"],
            &["elect", "--", "true"],
            &["once", "--", "true"],
        ] {
            for key in [&["k"][..], &["-k", "k"], &["--key", "k"]] {
                let mut args = vec![sub[0]];
                args.extend_from_slice(key);
                args.extend_from_slice(&sub[1..]);
                parse(&args).unwrap_or_else(|e| panic!("{args:?}: {e}"));
            }
            let mut twice = vec![sub[0], "k", "-k", "j"];
            twice.extend_from_slice(&sub[1..]);
            if sub[0] != "elect" && sub[0] != "once" {
                assert!(parse(&twice).is_err(), "{twice:?}");
            }
        }
        assert!(parse(&["status"]).is_err());
    }

    #[test]
    fn one_short_flag_one_meaning() {
        let once = parse(&["once", "-k", "k", "-t", "5", "-w", "10", "-c", "x"]).expect("parses");
        let Command::Once(Sub { args: once, .. }) = once.command else {
            panic!("not once")
        };
        assert_eq!(
            (once.ttl, once.wait),
            (Duration::from_secs(5), Wait::For(Duration::from_secs(10)))
        );
        assert_eq!(once.command, ["/bin/sh", "-c", "x"]);
        // -w is --wait wherever it exists; list's --watch has no short form.
        assert!(parse(&["list", "-w"]).is_err());
        assert!(parse(&["list", "--watch"]).is_ok());
        let elect = parse(&["elect", "k", "--exit-on-loss", "true"]).expect("parses");
        let Command::Elect(Sub { args: elect, .. }) = elect.command else {
            panic!("not elect")
        };
        assert!(elect.exit_on_loss);
        assert!(parse(&["elect", "k", "--once", "--", "true"]).is_err());
        // An unknown option after the key is an error, not the command.
        assert!(run(&["k", "--frobnicate", "--", "true"]).is_err());
        // Every short flag means the same long option in every subcommand.
        let mut root = Cli::command();
        root.build();
        let mut meaning: std::collections::HashMap<char, String> = Default::default();
        for sub in root.get_subcommands() {
            for arg in sub.get_arguments() {
                if let (Some(short), Some(long)) = (arg.get_short(), arg.get_long()) {
                    let seen = meaning.entry(short).or_insert_with(|| long.to_string());
                    assert_eq!(seen, long, "-{short} in {}", sub.get_name());
                }
            }
        }
    }

    #[test]
    fn run_checks_its_options() {
        let r = run(&["--key", "k", "--", "echo", "--flag"]).expect("parses");
        assert_eq!(r.argv, ["echo", "--flag"]);
        assert_eq!(r.wait, Wait::For(Duration::from_secs(10)));
        assert_eq!(r.ttl, Duration::from_secs(30));
        assert!(run(&["--key", "k", "--ttl", "0s", "--", "x"]).is_err());
        assert!(run(&["--key", "k", "--no-wait", "--wait", "1s", "--", "x"]).is_err());
    }
}
