//! `tenure run`: a command under a lease.
//!
//! The command runs in its own process group with `TENURE_FENCE` and
//! `TENURE_KEY` in its environment. tenure renews the lease in the background
//! (every third of the TTL), forwards signals to the group, and releases the
//! lease when the command exits — after killing whatever the command left
//! running in its group, so nothing of it runs without the lease.
//!
//! The group is never left running past the lease's local deadline (which
//! comes a drift margin before the store's expiry): when renewals stop being
//! confirmed and the validity left shrinks to `--grace`, the group gets SIGTERM,
//! and SIGKILL at the deadline. When the store says the lease is gone (renewal
//! found the key deleted or taken), SIGTERM comes at once and SIGKILL after
//! `--grace` or at the deadline, whichever is first. Either way tenure exits
//! 76, as it does when the final release finds the lease gone: 76 means the
//! command may not have run alone.
//!
//! With several keys (`-k A -k B`) every key is taken, all or none (in one
//! canonical order, so runs asking for overlapping keys cannot deadlock),
//! `TENURE_KEYS` and `TENURE_FENCES` list them (one per line, in that order),
//! and losing any key is losing the lease. `--max-hold D` stops renewing after
//! D: the command is then stopped as on any loss (SIGTERM, SIGKILL after
//! `--grace`, exit 76).

use std::io::{ErrorKind, Write};
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tenure::{Attempt, Coordinator, Error, Lease, LossCause, ReleaseOutcome};
use tokio::process::{Child, Command};
use tokio::signal::unix::{SignalKind, signal};
use tokio::time::Instant;

use crate::cli::{Global, RunArgs, Wait};
use crate::exit::{self, Failure};
use crate::grant::Grant;
use crate::{duration, output, secrets, store, terminal};

/// `--grace` unless given (shortened to a third of the TTL when that is less).
pub const DEFAULT_GRACE: Duration = Duration::from_secs(10);

/// Signals tenure passes on to the command's group. Besides the usual three,
/// every signal whose default action would end tenure and orphan the command
/// (SIGKILL cannot be caught; SIGPIPE is ignored by Rust programs).
pub const FORWARDED: [Signal; 13] = [
    Signal::SIGINT,
    Signal::SIGTERM,
    Signal::SIGHUP,
    Signal::SIGQUIT,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
    Signal::SIGALRM,
    Signal::SIGVTALRM,
    Signal::SIGPROF,
    Signal::SIGXCPU,
    Signal::SIGXFSZ,
    Signal::SIGPWR,
    Signal::SIGSYS,
];

/// The shortest `--ttl` of a command run under a lease (`run`, `elect`):
/// above the library's `MIN_TTL`, as starting the command and a renewal's
/// round trip must fit in the twelfth of the TTL the timing rules leave
/// (with 10 ms every run was terminated before its first renewal came back).
pub const MIN_RUN_TTL: Duration = Duration::from_millis(100);

/// How long tenure waits for the killed rest of a group to disappear.
const GROUP_EXIT_WAIT: Duration = Duration::from_secs(1);

/// Checks `--ttl` and `--grace` against the lease's timing and returns the
/// grace period to use.
///
/// - The validity of a lease is its TTL minus the drift margin (1% + 2 ms),
///   counted from when the request was sent. The margin may take at most a
///   quarter of the TTL: renewals come every third of it, and SIGTERM up to a
///   third before the deadline, so a quarter leaves a twelfth of the TTL for a
///   renewal's round trip before a healthy lease would be mistaken for a lost
///   one. (A TTL whose validity is not even positive is refused by this too.)
/// - `--grace` is at most a third of the TTL (the renewal interval): SIGTERM
///   then comes no earlier than one missed renewal, and the group is gone at
///   the local deadline, before the store could grant the lease again.
pub fn timing(args: &RunArgs) -> Result<Duration, Failure> {
    let ttl = args.ttl;
    let renewal = ttl / 3;
    // The library refuses a TTL below its MIN_TTL too; this says why in terms
    // of `tenure run`, whose renewals and SIGTERM need the room.
    if ttl < tenure::lease::MIN_TTL || tenure::lease::drift(ttl) > ttl / 4 {
        return Err(Failure::usage(format!(
            "--ttl {} is too short: the clock-drift margin (1% + 2 ms) would take more than \
             a quarter of it, leaving no time to renew the lease; use at least {}",
            duration::show(ttl),
            duration::show(MIN_RUN_TTL),
        )));
    }
    if ttl < MIN_RUN_TTL {
        return Err(Failure::usage(format!(
            "--ttl {} is too short for a command: starting it and renewing the lease need \
             more room than a twelfth of the TTL leaves; use at least {}",
            duration::show(ttl),
            duration::show(MIN_RUN_TTL),
        )));
    }
    match args.grace {
        None => Ok(DEFAULT_GRACE.min(renewal)),
        Some(grace) if grace <= renewal => Ok(grace),
        Some(grace) => Err(Failure::usage(format!(
            "--grace {} cannot be honoured with --ttl {}: the command must be gone before \
             the lease could be granted again, so the grace is at most a third of the TTL ({})",
            duration::show(grace),
            duration::show(ttl),
            duration::show(renewal),
        ))),
    }
}

pub async fn run(global: &Global, args: &RunArgs) -> Result<u8, Failure> {
    for key in &args.keys {
        tenure::validate_key(key)?;
    }
    let grace = timing(args)?;
    // Opened before anything else happens: a report that cannot be written
    // is found out before the lease is taken, not after the command ran.
    let mut report = Report::open(args)?;
    let tenure = store::connect(global).await?;
    // Handled from before the wait, so that a signal never ends tenure by
    // its default action: not while it waits, and not between the grant and
    // the command's start, when the lease would stay held for its TTL.
    let mut signals = signal_streams(&FORWARDED)?;
    let started = Instant::now();
    let outcome = tokio::select! {
        taken = take(global, args, &tenure) => taken?,
        sig = first_signal(&mut signals) => {
            // The wait is dropped: its place in the waiting line is left by
            // a task that the store's close at exit waits for.
            report.waited = started.elapsed();
            return Ok(report.finish("stopped", 128 + sig as u8));
        }
    };
    report.waited = started.elapsed();
    let grant = match outcome {
        Taken::Granted(grant) => grant,
        Taken::Held { key, ttl_left } => {
            if !global.quiet {
                // Who holds it, when it recorded itself: one read, best-effort.
                let status = tenure.status(&key).await.ok();
                let who = status.as_ref().and_then(output::holder_note);
                note_held(args, &key, ttl_left, report.waited, who);
            }
            let code = args.conflict_exit_code.unwrap_or(exit::NOT_ACQUIRED);
            return Ok(report.finish("not_acquired", code));
        }
    };
    let acquired = Instant::now();
    report.fences = grant.fences();
    tracing::info!(lease = %grant.name(), fences = ?report.fences, "lease acquired");
    let held = hold(global, args, &tenure, grant, grace, &mut signals).await?;
    report.ran = Some(held.ran);
    report.command_status = held.command_status;
    report.held = Some(acquired.elapsed());
    Ok(report.finish(if held.lost { "lost" } else { "exited" }, held.code))
}

/// What `run` got: the lease(s), or the key someone else held all along.
enum Taken {
    Granted(Grant),
    Held {
        key: String,
        ttl_left: Option<Duration>,
    },
}

/// The lease `run` takes on its one key: a permit with --permits, a grant
/// of the read-write lease with --shared or --exclusive.
fn one_lease(args: &RunArgs, tenure: &Coordinator) -> Result<Lease, Failure> {
    let lease = match (args.permits, args.shared, args.exclusive) {
        (Some(n), ..) => tenure.semaphore(&args.key, n)?.lease(),
        (None, true, _) => tenure.rw_lease(&args.key)?.read(),
        (None, _, true) => tenure.rw_lease(&args.key)?.write(),
        (None, false, false) => tenure.lease(&args.key),
    }
    .ttl(args.ttl)
    .watchdog(true)
    // Who holds it, for `tenure status`, `tenure list` and waiting runs.
    .record_holder(true);
    let lease = match &args.label {
        Some(label) => lease.label(label),
        None => lease,
    };
    Ok(match args.max_hold {
        Some(max) => lease.max_hold(max),
        None => lease,
    })
}

/// How a command run by [`hold`] ended.
pub struct Held {
    /// tenure's exit status.
    pub code: u8,
    /// Whether the lease was lost (exit 76).
    pub lost: bool,
    /// The command's own status, when it exited while the lease was held.
    pub command_status: Option<u8>,
    /// How long the command ran.
    pub ran: Duration,
}

/// Runs the command of `args` under an acquired `grant`: supervised as the
/// module docs say, released at the end; `signals` (of [`FORWARDED`],
/// handled since before the grant) are passed on to it. (`tenure elect`
/// runs its command through this too.)
pub async fn hold(
    global: &Global,
    args: &RunArgs,
    tenure: &Coordinator,
    grant: Grant,
    grace: Duration,
    signals: &mut Signals,
) -> Result<Held, Failure> {
    if grant.remaining() <= grace {
        // A lease handed over by a release is valid for a short claim window
        // until its first renewal (Redis); a slow round trip can leave little
        // validity too: renew once before giving up on it.
        let _ = grant.extend().await;
    }
    if grant.remaining() <= grace {
        // The round trip ate the validity: the command would be terminated as
        // soon as it started.
        let name = grant.name();
        let _ = grant.release().await;
        return Err(Failure::new(
            exit::LEASE_LOST,
            format!(
                "{name} was acquired with too little validity left to run the command; \
                 use a longer --ttl"
            ),
        ));
    }
    let started = Instant::now();
    let ended = supervise(global, args, &grant, grace, signals).await;
    let ran = started.elapsed();
    let command_status = match &ended {
        Ok(Ended::Exited(status)) => Some(exit_code(*status)),
        _ => None,
    };
    let (code, lost) = finish(global, tenure, grant, ended).await?;
    Ok(Held {
        code,
        lost,
        command_status,
        ran,
    })
}

/// One attempt with `--no-wait`; otherwise waits as `--wait` says, showing
/// that it waits.
async fn take(global: &Global, args: &RunArgs, tenure: &Coordinator) -> Result<Taken, Failure> {
    if args.keys.len() > 1 {
        return take_all(args, tenure).await;
    }
    let lease = one_lease(args, tenure)?;
    let attempt = if args.no_wait {
        lease.attempt().await?
    } else {
        let wait = match args.wait {
            Wait::For(d) => Some(d),
            Wait::Forever => None,
        };
        let show = !global.quiet;
        output::while_waiting(tenure, &args.key, wait, show, acquire(&lease, wait)).await?
    };
    Ok(match attempt {
        Attempt::Acquired(guard) => Taken::Granted(guard.into()),
        Attempt::Held { ttl_left } => Taken::Held {
            key: args.key.clone(),
            ttl_left,
        },
    })
}

/// Takes every key of `-k A -k B …`, all or none, waiting as `--wait` says.
async fn take_all(args: &RunArgs, tenure: &Coordinator) -> Result<Taken, Failure> {
    if args.permits.is_some() || args.shared || args.exclusive {
        return Err(Failure::usage(
            "--permits, --shared and --exclusive hold one key; give a single key with them",
        ));
    }
    let set = tenure
        .lease_all(args.keys.iter().cloned())
        .ttl(args.ttl)
        .watchdog(true)
        .record_holder(true);
    let set = match &args.label {
        Some(label) => set.label(label),
        None => set,
    };
    let set = match args.max_hold {
        Some(max) => set.max_hold(max),
        None => set,
    };
    let acquired = match (args.no_wait, args.wait) {
        (true, _) => set.acquire_timeout(Duration::ZERO).await,
        (false, Wait::For(d)) => set.acquire_timeout(d).await,
        (false, Wait::Forever) => set.acquire().await,
    };
    match acquired {
        Ok(set) => Ok(Taken::Granted(Grant::Set(set))),
        Err(Error::Busy { key, retry_in }) => Ok(Taken::Held {
            key,
            ttl_left: retry_in,
        }),
        Err(e) => Err(e.into()),
    }
}

/// The one-line note that another process holds the lease.
fn note_held(
    args: &RunArgs,
    key: &str,
    ttl_left: Option<Duration>,
    waited: Duration,
    who: Option<String>,
) {
    let ttl = ttl_left.map_or(String::new(), |t| {
        format!(" (its TTL has {} left)", duration::show(t))
    });
    let waited = if args.no_wait {
        String::new()
    } else {
        format!(" after waiting {}", duration::show(waited))
    };
    let who = who.map_or_else(
        || "another process".to_string(),
        |w| w.replacen("held by ", "", 1),
    );
    let set = if args.keys.len() > 1 {
        " (none of the keys is held by this run)"
    } else {
        ""
    };
    output::note(&format!(
        "lease {key:?} is held by {who}{ttl}; not acquired{waited}{set}"
    ));
}

/// Acquires within `wait`, or until the lease is free when `wait` is `None`.
///
/// The library waits at most `MAX_TTL` (7 days) per call; longer waits are
/// made of several calls, so `--wait 30d` and `--wait inf` mean what they say.
async fn acquire(lease: &tenure::Lease, wait: Option<Duration>) -> Result<Attempt, tenure::Error> {
    let mut left = wait;
    loop {
        let chunk = left.map_or(tenure::lease::MAX_TTL, |l| l.min(tenure::lease::MAX_TTL));
        let outcome = lease.attempt_within(chunk).await?;
        match (&outcome, left) {
            (Attempt::Held { .. }, None) => {}
            (Attempt::Held { .. }, Some(l)) if l > chunk => left = Some(l - chunk),
            _ => return Ok(outcome),
        }
    }
}

/// What `--json` / `--json-file` report when `run` ends.
struct Report {
    keys: Vec<String>,
    /// Where the report goes: `None` when neither flag was given.
    sink: Option<Sink>,
    /// Each key with its fence, once acquired.
    fences: Vec<(String, u64)>,
    waited: Duration,
    held: Option<Duration>,
    ran: Option<Duration>,
    command_status: Option<u8>,
}

enum Sink {
    Stderr,
    File(std::path::PathBuf, std::fs::File),
}

impl Report {
    fn open(args: &RunArgs) -> Result<Self, Failure> {
        let sink = match (&args.json_file, args.json) {
            (Some(path), _) => {
                let file = std::fs::File::create(path).map_err(|e| {
                    Failure::new(
                        exit::CANT_CREATE,
                        format!("cannot create --json-file {}: {e}", path.display()),
                    )
                })?;
                Some(Sink::File(path.clone(), file))
            }
            (None, true) => Some(Sink::Stderr),
            (None, false) => None,
        };
        Ok(Report {
            keys: args.keys.clone(),
            sink,
            fences: Vec::new(),
            waited: Duration::ZERO,
            held: None,
            ran: None,
            command_status: None,
        })
    }

    /// Writes the report (if asked for) and returns `code`, tenure's status.
    fn finish(self, outcome: &str, code: u8) -> u8 {
        let Some(sink) = self.sink else { return code };
        let mut value = serde_json::json!({
            "key": self.keys.first(),
            "outcome": outcome,
            "acquired": !self.fences.is_empty(),
            "fence": self.fences.first().map(|(_, f)| f),
            "exit_status": code,
            "command_status": self.command_status,
            "waited_ms": duration::millis(self.waited),
            "held_ms": self.held.map(duration::millis),
            "ran_ms": self.ran.map(duration::millis),
        });
        if self.keys.len() > 1 {
            // Several keys: all of them, and their fences in the same order.
            value["keys"] = serde_json::json!(self.keys);
            let fences: Vec<u64> = self.fences.iter().map(|(_, f)| *f).collect();
            value["fences"] = serde_json::json!(fences);
        }
        let text = secrets::scrub_json(&value).to_string();
        match sink {
            Sink::Stderr => {
                let _ = writeln!(std::io::stderr().lock(), "{text}");
            }
            Sink::File(path, mut file) => {
                if let Err(e) = writeln!(file, "{text}").and_then(|()| file.sync_all()) {
                    // The command already ran: its status still decides.
                    output::note(&format!("cannot write --json-file {}: {e}", path.display()));
                }
            }
        }
        code
    }
}

/// How the command ended, as far as the lease is concerned.
enum Ended {
    /// It exited while the lease was held.
    Exited(ExitStatus),
    /// The lease was lost (or about to be) first; the command was terminated.
    Lost,
    /// The store said the lease was no longer ours (renewal found the key gone
    /// or taken) before the local deadline; the command was terminated.
    Gone,
}

async fn supervise(
    global: &Global,
    args: &RunArgs,
    grant: &Grant,
    grace: Duration,
    streams: &mut Signals,
) -> Result<Ended, Failure> {
    let mut child = spawn(args, grant)?;
    let group = child_group(&child);
    // Interactive use: the command gets the terminal (and Ctrl-C) while it runs.
    let _terminal = group.and_then(terminal::hand_over);
    let lost = grant.lost();
    let quiet = global.quiet;
    loop {
        // The local deadline as of the last confirmed renewal.
        let now = Instant::now();
        let deadline = now + grant.remaining();
        let term_at = deadline.checked_sub(grace).unwrap_or(now).max(now);
        let any_signal = first_signal(streams);
        tokio::select! {
            biased;
            () = lost.wait() => {
                let max_hold = grant.loss_cause() == Some(LossCause::MaxHold);
                if !quiet {
                    let why = if max_hold {
                        format!(": held for --max-hold {}", args.max_hold.map_or_else(String::new, duration::show))
                    } else {
                        " lost while the command ran (the store no longer holds it for us, or \
                         renewal was not confirmed in time)"
                            .to_string()
                    };
                    output::note(&format!(
                        "{}{why}; terminating the command (SIGTERM, SIGKILL after at most {})",
                        grant.name(),
                        duration::show(grace),
                    ));
                }
                let at = Instant::now();
                terminate(&mut child, group, (at + grace).min(deadline)).await;
                // Before the local deadline only the store (or the maximum
                // hold, which has said why already) can have said so.
                return Ok(if at < deadline && !max_hold { Ended::Gone } else { Ended::Lost });
            }
            status = child.wait() => return exited(quiet, grant, group, status).await,
            () = tokio::time::sleep_until(term_at) => {
                let left = grant.remaining();
                if left > grace {
                    continue; // a renewal moved the deadline meanwhile
                }
                if !quiet {
                    output::note(&format!(
                        "{}: no renewal confirmed and {} of validity left; terminating \
                         the command (SIGTERM now, SIGKILL at the lease's local deadline)",
                        grant.name(),
                        duration::show(left),
                    ));
                }
                terminate(&mut child, group, Instant::now() + left).await;
                return Ok(Ended::Lost);
            }
            sig = any_signal => forward(group, sig),
        }
    }
}

/// A stream for each of a set of signals: once one exists, the signal no
/// longer ends the process by its default action.
pub type Signals = Vec<(Signal, tokio::signal::unix::Signal)>;

/// A stream for each of `signals` (`tenure elect` listens with these too).
pub fn signal_streams(signals: &[Signal]) -> Result<Signals, Failure> {
    signals
        .iter()
        .map(|&sig| {
            let stream = signal(SignalKind::from_raw(sig as i32))
                .map_err(|e| Failure::new(exit::SOFTWARE, format!("cannot handle signals: {e}")))?;
            Ok((sig, stream))
        })
        .collect()
}

/// The command exited while supervised: what it left running in its group is
/// killed, and an exit seen after the lease's validity ran out counts as lost.
async fn exited(
    quiet: bool,
    grant: &Grant,
    group: Option<Pid>,
    status: std::io::Result<ExitStatus>,
) -> Result<Ended, Failure> {
    let status = status
        .map_err(|e| Failure::new(exit::SOFTWARE, format!("cannot wait for the command: {e}")))?;
    // What it left running in its group must not outlive the lease.
    kill_group(group).await;
    // Seen exiting after the lease's validity ran out (tenure itself
    // was paused past the TTL): it may not have run alone to the end.
    if grant.is_lost() || grant.remaining().is_zero() {
        if !quiet {
            let what = match grant.loss_cause() {
                Some(LossCause::MaxHold) => "reached its --max-hold",
                _ => "expired; another holder may have overlapped",
            };
            output::note(&format!(
                "{} {what} before the command finished",
                grant.name()
            ));
        }
        return Ok(Ended::Lost);
    }
    Ok(Ended::Exited(status))
}

/// Completes with the first signal received on any of `streams`.
pub async fn first_signal(streams: &mut [(Signal, tokio::signal::unix::Signal)]) -> Signal {
    std::future::poll_fn(|cx| {
        for (sig, stream) in streams.iter_mut() {
            if let std::task::Poll::Ready(Some(())) = stream.poll_recv(cx) {
                return std::task::Poll::Ready(*sig);
            }
        }
        std::task::Poll::Pending
    })
    .await
}

fn spawn(args: &RunArgs, grant: &Grant) -> Result<Child, Failure> {
    let argv = args.program();
    let (program, rest) = argv
        .split_first()
        .ok_or_else(|| Failure::usage("no command given after --"))?;
    let mut command = Command::new(program);
    command
        .args(rest)
        .envs(grant.env())
        // Its own process group, so that a lost lease stops the command's
        // children too, not only the shell that started them.
        .process_group(0)
        .kill_on_drop(false);
    command.spawn().map_err(|e| {
        let name = program.to_string_lossy();
        match e.kind() {
            ErrorKind::NotFound => {
                Failure::new(exit::NOT_FOUND, format!("command not found: {name}"))
            }
            ErrorKind::PermissionDenied => {
                Failure::new(exit::CANNOT_EXECUTE, format!("cannot execute {name}: {e}"))
            }
            _ => Failure::new(exit::CANNOT_EXECUTE, format!("cannot start {name}: {e}")),
        }
    })
}

/// The child's process group (its pid, as it leads its own group).
pub fn child_group(child: &Child) -> Option<Pid> {
    child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .map(Pid::from_raw)
}

pub fn forward(group: Option<Pid>, sig: Signal) {
    tracing::info!(signal = %sig, "forwarding to the command");
    if let Some(group) = group {
        // ESRCH: the group is already gone; nothing to forward to.
        let _ = killpg(group, sig);
        if matches!(sig, Signal::SIGTERM | Signal::SIGHUP) {
            // A stopped command (Ctrl-Z, SIGTTIN) would never act on it.
            let _ = killpg(group, Signal::SIGCONT);
        }
    }
}

/// SIGTERM to the group, then SIGKILL at `kill_at`; reaps the child and kills
/// the rest of its group.
async fn terminate(child: &mut Child, group: Option<Pid>, kill_at: Instant) {
    forward(group, Signal::SIGTERM);
    if tokio::time::timeout_at(kill_at, child.wait())
        .await
        .is_err()
    {
        tracing::warn!("the command outlived its grace; SIGKILL");
        forward(group, Signal::SIGKILL);
        let _ = child.wait().await;
    }
    // The leader exited; stragglers in its group get no more time.
    kill_group(group).await;
}

/// SIGKILL to what is left of the command's group, and a short wait until no
/// member runs any more.
pub async fn kill_group(group: Option<Pid>) {
    let Some(group) = group else { return };
    if killpg(group, Signal::SIGKILL) == Err(Errno::ESRCH) {
        return;
    }
    tracing::info!("killed what the command left running in its process group");
    let until = Instant::now() + GROUP_EXIT_WAIT;
    while group_runs(group) && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Whether some member of `group` is still running. A killed member stays a
/// zombie until its new parent reaps it — which may be never, under an init
/// that does not reap (some containers) — and `killpg` counts zombies, so on
/// Linux the members' states are read from /proc.
fn group_runs(group: Pid) -> bool {
    if killpg(group, None) == Err(Errno::ESRCH) {
        return false;
    }
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return true;
    };
    let wanted = group.as_raw().to_string();
    entries.flatten().any(|entry| {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            return false;
        };
        // "pid (comm) STATE PPID PGRP …"; comm may hold spaces and parentheses.
        let mut fields = stat.rsplit(')').next().unwrap_or("").split_whitespace();
        let state = fields.next().unwrap_or("Z");
        let pgrp = fields.nth(1).unwrap_or("");
        pgrp == wanted && !matches!(state, "Z" | "X")
    })
}

/// Releases the lease and turns the outcome into tenure's exit status, and
/// whether the lease was found lost (the status is then 76).
async fn finish(
    global: &Global,
    tenure: &Coordinator,
    grant: Grant,
    ended: Result<Ended, Failure>,
) -> Result<(u8, bool), Failure> {
    let ended = match ended {
        Ok(ended) => ended,
        Err(e) => {
            let _ = grant.release().await;
            return Err(e);
        }
    };
    let status = match ended {
        Ended::Lost => {
            let _ = grant.release().await;
            return Ok((exit::LEASE_LOST, true));
        }
        Ended::Gone => {
            let key = grant.lost_key();
            let _ = grant.release().await;
            if !global.quiet {
                output::note(&format!(
                    "lease {key:?} {} while the command ran",
                    what_happened(tenure, &key).await
                ));
            }
            return Ok((exit::LEASE_LOST, true));
        }
        Ended::Exited(status) => status,
    };
    release_after_exit(global, tenure, grant, status).await
}

/// The command exited within the lease: checks that the lease is still ours,
/// releases it, and turns the outcome into tenure's exit status.
///
/// 76 means the store said the lease was gone while its validity lasted: the
/// command may not have run alone. An answer that comes only after the
/// validity ran out (a frozen or slow store) cannot say that — the key may
/// simply have expired after the command ended — so the command's own status
/// stands, with a note.
async fn release_after_exit(
    global: &Global,
    tenure: &Coordinator,
    grant: Grant,
    status: ExitStatus,
) -> Result<(u8, bool), Failure> {
    // On SQLite the release's own answer is enough: it is one local
    // transaction that either happens or changes nothing, with no broken
    // connection to get past first, so asking before it would only cost a
    // second transaction (see `confirm_held`).
    let gone = !store::is_sqlite(global) && confirm_held(&grant).await;
    // Whether the release is sent while the lease is still valid: only then
    // does "not held" mean it was gone before its validity ended.
    let inside = !grant.is_lost();
    let (name, key) = (grant.name(), grant.lost_key());
    let released = grant.release().await;
    let released = if gone {
        Ok(ReleaseOutcome::NotHeld)
    } else {
        released
    };
    match released {
        Ok(ReleaseOutcome::Released) => Ok((exit_code(status), false)),
        Ok(_) if gone || inside => {
            // The store no longer had our lease: someone may have held it while
            // the command ran. Say which, when the store can tell.
            let what = what_happened(tenure, &key).await;
            if !global.quiet {
                output::note(&format!(
                    "lease {key:?} {what} before the command finished; it may not have run \
                     alone (exit 76; the command itself exited with {})",
                    exit_code(status)
                ));
            }
            Ok((exit::LEASE_LOST, true))
        }
        Ok(_) => {
            if !global.quiet {
                output::note(&format!(
                    "{name}: the store answered only after the lease's validity ran out, \
                     and it had expired by then; the command ended within its validity"
                ));
            }
            Ok((exit_code(status), false))
        }
        Err(e) => {
            // The command finished within the lease's validity; only the
            // release failed, and the TTL frees the key.
            if !global.quiet {
                output::note(&format!("could not release {name}: {e}"));
            }
            Ok((exit_code(status), false))
        }
    }
}

/// Asks the store whether the lease is still ours before letting it go, while
/// it is still valid; `true` when the store said it was gone. A renewal does
/// that (it never revives a lost lease); it is tried twice, because the first
/// call after a store restart can fail on the broken connection, and a release
/// that fails would leave the question open.
async fn confirm_held(grant: &Grant) -> bool {
    for _ in 0..2 {
        if grant.is_lost() {
            // Past the validity: a renewal could no longer tell.
            return false;
        }
        match grant.extend().await {
            Ok(tenure::ExtendOutcome::NotHeld) => return true,
            Ok(_) => return false,
            Err(e) => tracing::info!(error = %e, "checking the lease before release failed"),
        }
    }
    false
}

/// What became of a lease the store no longer holds for us, as far as the
/// store can tell now.
async fn what_happened(tenure: &Coordinator, key: &str) -> String {
    match tenure.status(key).await {
        Ok(s) if s.held => "was taken by another holder".to_string(),
        Ok(_) => "was deleted or expired in the store (key deleted, store restarted without \
                  persistence, or evicted)"
            .to_string(),
        Err(e) => format!("was gone from the store (its state now is unknown: {e})"),
    }
}

/// The command's exit status, or 128+N when it died by signal N (as shells do).
pub fn exit_code(status: ExitStatus) -> u8 {
    if let Some(code) = status.code() {
        return u8::try_from(code & 0xff).unwrap_or(1);
    }
    status
        .signal()
        .and_then(|sig| u8::try_from(128 + sig).ok())
        .unwrap_or(1)
}
