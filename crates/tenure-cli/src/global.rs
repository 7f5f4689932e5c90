//! The options every subcommand takes, before or after its name
//! (`tenure --backend URL run …` or `tenure run … --backend URL`).
//!
//! They are not clap's `global` arguments: clap copies those into every
//! subcommand whenever it builds the grammar, about 80 KB of a one-shot
//! run's heap for ten subcommands (docs/BENCHMARKS.md, cold start). Each
//! subcommand flattens them instead ([`Sub`]), so only the one written is
//! built, and [`Global::settle`] gives them clap's meaning for globals: what
//! is written after the subcommand wins over what is written before it, and
//! either wins over the environment.

use std::path::PathBuf;

use clap::parser::ValueSource;
use clap::{ArgAction, ArgMatches, Args, Id};

// Options accepted before or after the subcommand. (Not a doc comment: clap
// would make it the description of every command that flattens this.)
#[derive(Debug, Default, Args)]
pub struct Global {
    /// Store URL: sqlite:PATH, redis://[USER:PASSWORD@]HOST:PORT[/DB],
    /// rediss://… for TLS, redis+cluster://HOST:PORT,HOST:PORT… for a Redis
    /// Cluster, redis+sentinel://HOST:26379,…/MASTER for the master Sentinel
    /// names, or etcd[s]://HOST:2379[,HOST:2379…] (repeatable; several
    /// Redis URLs form a quorum; in
    /// TENURE_BACKEND, separate them with commas). Default: this user's
    /// SQLite file at $TENURE_DB, else $XDG_STATE_HOME/tenure/tenure.db, else
    /// ~/.local/state/tenure/tenure.db.
    // No `value_delimiter`: a comma may be part of a password, so splitting is
    // left to `store::split_urls`, which only cuts before another URL. The
    // environment's value is never shown in --help (it may hold a password).
    #[arg(
        long = "backend",
        value_name = "URL",
        env = "TENURE_BACKEND",
        hide_env_values = true,
        action = ArgAction::Append,
    )]
    pub backends: Vec<String>,

    /// PEM file of the CA that signs the server's certificates of a
    /// rediss://, rediss+cluster://, rediss+sentinel:// or etcds:// store
    /// (default: the system's trusted roots); ignored for other stores.
    #[arg(long, value_name = "FILE", env = "TENURE_CACERT")]
    pub cacert: Option<PathBuf>,

    /// PEM client certificate for a rediss:// server or etcds:// members
    /// that check clients (with --tls-key).
    #[arg(
        long,
        value_name = "FILE",
        env = "TENURE_TLS_CERT",
        requires = "tls_key"
    )]
    pub tls_cert: Option<PathBuf>,

    /// PEM private key of --tls-cert.
    #[arg(
        long,
        value_name = "FILE",
        env = "TENURE_TLS_KEY",
        requires = "tls_cert"
    )]
    pub tls_key: Option<PathBuf>,

    /// Print nothing but errors (and what --json asks for).
    #[arg(short, long)]
    pub quiet: bool,

    /// Log to stderr: -v info, -vv debug, -vvv trace. RUST_LOG (e.g.
    /// `tenure=debug`, `info`, `off`) is read too and wins for what it names.
    #[arg(short, long, action = ArgAction::Count)]
    pub verbose: u8,
}

// A subcommand's own arguments, then the options of `Global` written after
// its name. (Not a doc comment, as above.)
#[derive(Debug, Args)]
pub struct Sub<T: Args> {
    #[command(flatten)]
    pub args: T,

    #[command(flatten)]
    pub global: Global,
}

/// Whether `id` is one of [`Global`]'s options, which every subcommand
/// takes too.
#[cfg(test)]
pub fn is_global(id: &str) -> bool {
    Global::augment_args(clap::Command::new("global"))
        .get_arguments()
        .any(|a| a.get_id() == id)
}

/// The options written after the subcommand's name on the command line (not
/// read from the environment), by id: read from the subcommand's matches
/// before they become a [`Sub`].
#[derive(Debug, Default)]
pub struct WrittenAfter(Vec<Id>);

impl WrittenAfter {
    /// What the command line gave the subcommand in `matches` (the whole
    /// command line's).
    pub fn of(matches: &ArgMatches) -> Self {
        let Some((_, sub)) = matches.subcommand() else {
            return Self::default();
        };
        let written = |id: &&Id| sub.value_source(id.as_str()) == Some(ValueSource::CommandLine);
        Self(sub.ids().filter(written).cloned().collect())
    }

    fn has(&self, id: &str) -> bool {
        self.0.iter().any(|written| written == id)
    }
}

impl Global {
    /// Takes the options written after the subcommand (`after`, of which
    /// `written` says which the command line gave) over these, which were
    /// written before it or read from the environment.
    pub fn settle(&mut self, after: Global, written: &WrittenAfter) {
        // Each field by name, which clap's derive makes its option's id. A
        // new field does not compile until it is taken apart here, and is an
        // unused variable (refused by the lints) until it is listed below.
        let Global {
            backends,
            cacert,
            tls_cert,
            tls_key,
            quiet,
            verbose,
        } = after;
        macro_rules! take_written {
            ($($field:ident),+) => {
                $(if written.has(stringify!($field)) {
                    self.$field = $field;
                })+
            };
        }
        take_written!(backends, cacert, tls_cert, tls_key, quiet, verbose);
    }
}

#[cfg(test)]
mod tests {
    use crate::cli::parse_words;

    #[test]
    fn backend_goes_before_or_after_the_subcommand() {
        let before =
            parse_words(&["--backend", "memory:", "status", "--key", "k"]).expect("parses");
        assert_eq!(before.global.backends, ["memory:"]);
        let after = parse_words(&[
            "status",
            "--key",
            "k",
            "--backend",
            "sqlite:a.db",
            "--backend",
            "redis://x",
        ])
        .expect("parses");
        assert_eq!(after.global.backends, ["sqlite:a.db", "redis://x"]);
        // A comma is not split here: it may belong to a password.
        let comma =
            parse_words(&["--backend", "redis://:a,b@h", "status", "--key", "k"]).expect("parses");
        assert_eq!(comma.global.backends, ["redis://:a,b@h"]);
    }

    #[test]
    fn what_is_written_after_the_subcommand_wins() {
        let both = parse_words(&[
            "--backend",
            "sqlite:a.db",
            "-q",
            "--cacert",
            "a.pem",
            "run",
            "k",
            "--backend",
            "sqlite:b.db",
            "-vv",
            "--",
            "true",
        ])
        .expect("parses");
        assert_eq!(both.global.backends, ["sqlite:b.db"]);
        assert_eq!(both.global.verbose, 2);
        // Not written after: kept from before.
        assert!(both.global.quiet);
        assert_eq!(both.global.cacert.as_deref(), Some("a.pem".as_ref()));
        let twice = parse_words(&["-vvv", "status", "k", "-v"]).expect("parses");
        assert_eq!(twice.global.verbose, 1);
        // The TLS files too, each from the side it was last written on.
        let tls = parse_words(&[
            "--cacert",
            "a.pem",
            "--tls-cert",
            "c.pem",
            "--tls-key",
            "k.pem",
            "status",
            "k",
            "--cacert",
            "b.pem",
            "--tls-cert",
            "d.pem",
            "--tls-key",
            "l.pem",
        ])
        .expect("parses");
        let path = |p: &Option<std::path::PathBuf>| p.as_ref().map(|p| p.display().to_string());
        assert_eq!(path(&tls.global.cacert).as_deref(), Some("b.pem"));
        assert_eq!(path(&tls.global.tls_cert).as_deref(), Some("d.pem"));
        assert_eq!(path(&tls.global.tls_key).as_deref(), Some("l.pem"));
    }

    #[test]
    fn every_subcommand_takes_the_options_after_its_name() {
        for words in [
            &["run", "k", "--backend", "memory:", "-q", "--", "true"][..],
            &["elect", "k", "--backend", "memory:", "-q", "--", "true"],
            &["once", "k", "--backend", "memory:", "-q", "--", "true"],
            &["limit", "k", "--rate", "1/1s", "--backend", "memory:", "-q"],
            &["status", "k", "--backend", "memory:", "-q"],
            &["leader", "k", "--backend", "memory:", "-q"],
            &["list", "--backend", "memory:", "-q"],
            &["release", "k", "--force", "--backend", "memory:", "-q"],
            &["completions", "bash", "--backend", "memory:", "-q"],
            &["man", "--backend", "memory:", "-q"],
        ] {
            let cli = parse_words(words).unwrap_or_else(|e| panic!("{words:?}: {e}"));
            assert_eq!(cli.global.backends, ["memory:"], "{words:?}");
            assert!(cli.global.quiet, "{words:?}");
        }
    }

    #[test]
    fn a_certificate_needs_its_key_on_the_same_side() {
        assert!(parse_words(&["status", "k", "--tls-cert", "c.pem", "--tls-key", "k.pem"]).is_ok());
        let split = parse_words(&["--tls-cert", "c.pem", "status", "k", "--tls-key", "k.pem"]);
        assert!(split.is_err());
    }
}
