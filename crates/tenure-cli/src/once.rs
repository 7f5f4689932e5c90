//! `tenure once`: run a command at most once per key; everyone else gets its
//! recorded exit status (and, with `--capture`, its stdout).
//!
//! Built on the library's run-once recipe: the first caller runs the command
//! under a lease (`TENURE_FENCE`, `TENURE_KEY` in its environment, its own
//! process group, killed with SIGKILL if the lease is lost); its exit status —
//! and its stdout with `--capture` — is recorded for `--retain`. Concurrent
//! callers wait and then exit with the recorded status; later ones at once. A
//! failed command (non-zero status) is recorded only with `--cache-failures`;
//! otherwise the next caller runs it again. A runner killed before recording
//! lets the next caller run the command, with a higher `TENURE_FENCE`.
//!
//! While the command runs, the signals `tenure run` forwards are forwarded to
//! its group; after SIGINT, SIGTERM, SIGHUP or SIGQUIT the group is killed if
//! it has not exited within the grace, and only then is the lease released:
//! the command never runs on without it.

use std::ffi::OsString;
use std::io::{ErrorKind, Write};
use std::process::Stdio;
use std::time::Duration;

use clap::Args;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tenure::Fence;
use tenure::once::OnceOutcome;
use tokio::io::AsyncReadExt;
use tokio::process::Command;
use tokio::time::Instant;

use crate::cli::{Global, Invocation, Wait, parse_wait};
use crate::exit::{self, Failure};
use crate::{duration, output, run, store};

// `tenure once` options.
#[derive(Debug, Args)]
pub struct OnceArgs {
    /// The operation's key (an idempotency key) and the command.
    #[command(flatten)]
    pub invocation: Invocation,

    /// The operation's key (from `invocation`).
    #[arg(skip)]
    pub key: String,

    /// How long the recorded outcome is kept; after it, the command runs again.
    #[arg(long, value_name = "DURATION", default_value = "24h", value_parser = duration::positive, allow_hyphen_values = true)]
    pub retain: Duration,

    /// TTL of the runner's lease, renewed every third of it: a killed runner
    /// is taken over about this long after its last renewal.
    #[arg(short, long, value_name = "DURATION", default_value = "30s", value_parser = duration::positive, allow_hyphen_values = true)]
    pub ttl: Duration,

    /// How long to wait for another caller's run (exit 75 after it); `inf`
    /// (the default) waits until it completes or its lease expires.
    #[arg(short, long, value_name = "DURATION|inf", default_value = "inf", value_parser = parse_wait, allow_hyphen_values = true)]
    pub wait: Wait,

    /// Record the command's stdout too (at most 1 MiB), and replay it to
    /// callers that get the recorded outcome.
    #[arg(long)]
    pub capture: bool,

    /// Record a non-zero exit status too (by default a failed run is not
    /// recorded and the next caller runs the command again).
    #[arg(long)]
    pub cache_failures: bool,

    /// The program and its arguments (from `invocation`).
    #[arg(skip)]
    pub command: Vec<OsString>,
}

impl OnceArgs {
    /// Fills `key` and `command` from how they were written.
    pub fn resolve(&mut self) -> Result<(), String> {
        (self.key, self.command) = self.invocation.resolve()?;
        Ok(())
    }
}

pub async fn once(global: &Global, args: &OnceArgs) -> Result<u8, Failure> {
    tenure::validate_key(&args.key)?;
    if args.ttl < tenure::lease::MIN_TTL {
        return Err(Failure::usage(format!(
            "--ttl {} is below the minimum of {}",
            duration::show(args.ttl),
            duration::show(tenure::lease::MIN_TTL)
        )));
    }
    let tenure = store::connect(global).await?;
    let mut once = tenure
        .once(&args.key)
        .retain(args.retain)
        .ttl(args.ttl)
        .cache_failures(args.cache_failures)
        // The record is a tag byte, the status byte, then the stdout.
        .max_result(CAPTURE_LIMIT + 2);
    if let Wait::For(max) = args.wait {
        once = once.wait(max);
    }
    let outcome = match once.run_bytes(|fence| execute(args, fence)).await {
        Ok(outcome) => outcome,
        Err(tenure::Error::InvalidArgument { what: "result", .. }) => {
            return Err(Failure::new(
                exit::DATA,
                "the command ran, but its stdout is too large to record (more than the 1 MiB \
                 --capture keeps); nothing was recorded, so the next caller runs it again",
            ));
        }
        Err(e) => return Err(e.into()),
    };
    report(global, args, outcome)
}

/// The exit status for a run-once outcome, replaying a recorded stdout.
fn report(
    global: &Global,
    args: &OnceArgs,
    outcome: OnceOutcome<Vec<u8>, Vec<u8>>,
) -> Result<u8, Failure> {
    let note = |text: String| {
        if !global.quiet {
            output::note(&text);
        }
    };
    match outcome {
        // Its stdout went to ours as it ran.
        OnceOutcome::Ran { result, .. } => Ok(status_of(&result)),
        OnceOutcome::Recorded { fence, result } => {
            let code = status_of(&result);
            let (Ok(bytes) | Err(bytes)) = &result;
            if let Some(out) = bytes.get(1..).filter(|o| !o.is_empty()) {
                let mut stdout = std::io::stdout().lock();
                let _ = stdout.write_all(out).and_then(|()| stdout.flush());
            }
            note(format!(
                "{:?} already ran (fence {fence}); replaying its recorded exit status {code}",
                args.key
            ));
            Ok(code)
        }
        OnceOutcome::Busy { .. } => {
            note(format!(
                "{:?} is still being run by another process; gave up waiting",
                args.key
            ));
            Ok(exit::NOT_ACQUIRED)
        }
        _ => Err(Failure::new(exit::SOFTWARE, "unexpected run-once outcome")),
    }
}

/// The recorded exit status: the first byte of the result.
fn status_of(result: &Result<Vec<u8>, Vec<u8>>) -> u8 {
    match result {
        Ok(b) | Err(b) => b.first().copied().unwrap_or(1),
    }
}

/// The most stdout `--capture` records.
const CAPTURE_LIMIT: usize = 1024 * 1024;

/// Signals that ask tenure to stop: forwarded like the others, and the group
/// is killed if it has not exited within the grace.
const STOPPING: [Signal; 4] = [
    Signal::SIGINT,
    Signal::SIGTERM,
    Signal::SIGHUP,
    Signal::SIGQUIT,
];

/// Runs the command: `Ok` with `[status, stdout…]` when it exited 0, `Err`
/// with the same when it failed. A spawn failure is a failure with 126/127.
///
/// While it runs, the signals `tenure run` forwards are forwarded to its
/// group; after SIGINT, SIGTERM, SIGHUP or SIGQUIT the group has the grace
/// (a third of the TTL, at most 10 s) to exit before it is killed, so the
/// lease is released only once nothing of the command runs.
async fn execute(args: &OnceArgs, fence: Fence) -> Result<Vec<u8>, Vec<u8>> {
    let Some((program, rest)) = args.command.split_first() else {
        return Err(vec![exit::USAGE]);
    };
    // Listening before the command starts: no signal finds tenure's default
    // action while the command runs.
    let Ok(mut signals) = run::signal_streams(&run::FORWARDED) else {
        output::note("cannot handle signals; the command was not started");
        return Err(vec![exit::SOFTWARE]);
    };
    let mut command = Command::new(program);
    command
        .args(rest)
        .env("TENURE_FENCE", fence.to_string())
        .env("TENURE_KEY", &args.key)
        .process_group(0)
        .kill_on_drop(true);
    if args.capture {
        command.stdout(Stdio::piped());
    }
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            let name = program.to_string_lossy();
            output::note(&format!("cannot start {name}: {e}"));
            let code = if e.kind() == ErrorKind::NotFound {
                exit::NOT_FOUND
            } else {
                exit::CANNOT_EXECUTE
            };
            return Err(vec![code]);
        }
    };
    let group = run::child_group(&child);
    // Dropped when the lease is lost (the library drops this future): the
    // whole group goes, not only the direct child.
    let _group = group.map(GroupKill);
    let reader = child
        .stdout
        .take()
        .map(|pipe| tokio::spawn(pass_through(pipe)));
    let grace = run::DEFAULT_GRACE.min(args.ttl / 3);
    let status = supervise(&mut child, group, &mut signals, grace).await;
    // What the command left running must not outlive its run (nor hold the
    // captured pipe open).
    run::kill_group(group).await;
    let captured = match reader {
        Some(reader) => reader.await.unwrap_or_default(),
        None => Vec::new(),
    };
    let Some(status) = status else {
        return Err(vec![exit::SOFTWARE]);
    };
    let code = run::exit_code(status);
    let mut record = Vec::with_capacity(captured.len() + 1);
    record.push(code);
    record.extend_from_slice(&captured);
    if code == 0 { Ok(record) } else { Err(record) }
}

/// Waits for the command, forwarding signals to its group; kills the group
/// `grace` after the first stopping signal. `None` if it cannot be waited for.
async fn supervise(
    child: &mut tokio::process::Child,
    group: Option<Pid>,
    signals: &mut [(Signal, tokio::signal::unix::Signal)],
    grace: Duration,
) -> Option<std::process::ExitStatus> {
    let mut kill_at: Option<Instant> = None;
    loop {
        let deadline = async {
            match kill_at {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            status = child.wait() => return status.ok(),
            sig = run::first_signal(signals) => {
                run::forward(group, sig);
                if STOPPING.contains(&sig) && kill_at.is_none() {
                    kill_at = Some(Instant::now() + grace);
                }
            }
            () = deadline => {
                tracing::warn!("the command outlived its grace after a signal; SIGKILL");
                run::forward(group, Signal::SIGKILL);
                kill_at = None;
            }
        }
    }
}

/// Copies the command's stdout to ours as it comes, and keeps up to one byte
/// more than [`CAPTURE_LIMIT`] of it for the record (one more, so that a
/// larger output is refused rather than recorded cut short).
async fn pass_through(mut pipe: tokio::process::ChildStdout) -> Vec<u8> {
    let mut captured = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => return captured,
            Ok(n) => {
                let chunk = &buf[..n];
                let mut stdout = std::io::stdout().lock();
                let _ = stdout.write_all(chunk).and_then(|()| stdout.flush());
                let room = (CAPTURE_LIMIT + 1).saturating_sub(captured.len());
                captured.extend_from_slice(&chunk[..n.min(room)]);
            }
        }
    }
}

/// SIGKILL to a command's process group when dropped.
struct GroupKill(Pid);

impl Drop for GroupKill {
    fn drop(&mut self) {
        // ESRCH: the group is gone already.
        let _ = killpg(self.0, Signal::SIGKILL);
    }
}
