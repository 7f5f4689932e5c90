//! `tenure elect`: run a command only while this process leads an election.
//!
//! The candidate campaigns on the key (a lease held with the watchdog, see the
//! library's `election` module); once elected it runs the command exactly as
//! `tenure run` does — own process group, `TENURE_FENCE` (the term) and
//! `TENURE_KEY` in its environment, SIGTERM then SIGKILL when leadership is
//! (about to be) lost. After a loss it campaigns again, unless `--exit-on-loss`. When
//! the command exits by itself, tenure resigns and exits with its status.

use std::ffi::OsString;
use std::time::Duration;

use clap::Args;
use nix::sys::signal::Signal;

use crate::cli::{Global, Invocation, RunArgs, Wait};
use crate::exit::Failure;
use crate::{duration, output, run, store};

// `tenure elect` options.
#[derive(Debug, Args)]
pub struct ElectArgs {
    /// The election's key and the command.
    #[command(flatten)]
    pub invocation: Invocation,

    /// The election's key (from `invocation`).
    #[arg(skip)]
    pub key: String,

    /// This candidate's id, shown by `tenure leader` (default HOSTNAME:PID).
    /// Refused on a store that keeps no ids (a quorum).
    #[arg(long)]
    pub id: Option<String>,

    /// TTL of the leader's lease; it is renewed every third of it, and a
    /// crashed leader is replaced about this long after its last renewal.
    #[arg(short, long, value_name = "DURATION", default_value = "30s", value_parser = duration::positive, allow_hyphen_values = true)]
    pub ttl: Duration,

    /// How long the command's process group has between SIGTERM and SIGKILL
    /// when leadership is (about to be) lost; as for `tenure run`.
    #[arg(long, value_name = "DURATION", value_parser = duration::parse, allow_hyphen_values = true)]
    pub grace: Option<Duration>,

    /// After leadership is lost, exit (76) instead of campaigning again.
    #[arg(long)]
    pub exit_on_loss: bool,

    /// The program and its arguments (from `invocation`).
    #[arg(skip)]
    pub command: Vec<OsString>,
}

impl ElectArgs {
    /// Fills `key` and `command` from how they were written.
    pub fn resolve(&mut self) -> Result<(), String> {
        (self.key, self.command) = self.invocation.resolve()?;
        Ok(())
    }
}

/// How a campaign ended.
enum Campaigned {
    Won(tenure::election::Leadership),
    Stopped(Signal),
}

/// The command runs through `tenure run`'s machinery; these are its terms.
fn run_terms(args: &ElectArgs) -> RunArgs {
    RunArgs {
        invocation: Invocation::default(),
        key: args.key.clone(),
        keys: vec![args.key.clone()],
        ttl: args.ttl,
        wait: Wait::For(Duration::ZERO),
        no_wait: false,
        label: None,
        grace: args.grace,
        conflict_exit_code: None,
        json: false,
        json_file: None,
        permits: None,
        shared: false,
        exclusive: false,
        max_hold: None,
        argv: args.command.clone(),
    }
}

pub async fn elect(global: &Global, args: &ElectArgs) -> Result<u8, Failure> {
    tenure::validate_key(&args.key)?;
    let id = match &args.id {
        Some(id) => id.clone(),
        None => default_id(),
    };
    let run_args = run_terms(args);
    let grace = run::timing(&run_args)?;
    check_id(&id)?;
    let tenure = store::connect(global).await?;
    if args.id.is_some() && tenure.records().is_none() {
        return Err(Failure::usage(format!(
            "--id: {} keeps no leader ids (a quorum of Redis masters keeps no records), so \
             `tenure leader` could not show it; drop --id (the term is still the fence), \
             or elect on one Redis master, SQLite or etcd",
            tenure.backend().describe()
        )));
    }
    let election = tenure.election(&args.key).ttl(args.ttl);
    // The signals `tenure run` passes on to its command, handled from the
    // start: while no command runs, each ends the campaign (as its default
    // action would end the process, but leaving the waiting line first).
    let mut signals = run::signal_streams(&run::FORWARDED)?;
    loop {
        let campaigned = tokio::select! {
            won = election.campaign(&id) => Campaigned::Won(won?),
            sig = run::first_signal(&mut signals) => Campaigned::Stopped(sig),
        };
        let leadership = match campaigned {
            Campaigned::Won(leadership) => leadership,
            Campaigned::Stopped(sig) => {
                // The campaign is dropped: its place in the store's waiting
                // line is left by a background task, which the store's close
                // at exit waits for; otherwise the place would stay fresh
                // for up to a TTL and the leader's release would hand
                // leadership to this process.
                return Ok(128 + sig as u8);
            }
        };
        if !global.quiet {
            output::note(&format!(
                "elected leader of {:?} as {id:?} (term {})",
                args.key,
                leadership.term()
            ));
        }
        let held = run::hold(
            global,
            &run_args,
            &tenure,
            leadership.into_guard().into(),
            grace,
            &mut signals,
        )
        .await?;
        if !held.lost || args.exit_on_loss {
            return Ok(held.code);
        }
        if !global.quiet {
            output::note(&format!(
                "leadership of {:?} lost; campaigning again",
                args.key
            ));
        }
    }
}

/// The library refuses bad ids too; this says it as a usage error.
fn check_id(id: &str) -> Result<(), Failure> {
    if id.is_empty() {
        return Err(Failure::usage("--id must not be empty"));
    }
    if id.len() > tenure::election::MAX_ID_LEN || id.chars().any(char::is_control) {
        return Err(Failure::usage(format!(
            "--id must be at most {} bytes without control characters",
            tenure::election::MAX_ID_LEN
        )));
    }
    Ok(())
}

/// `HOSTNAME:PID`.
fn default_id() -> String {
    let host = nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_string());
    format!("{host}:{}", std::process::id())
}
