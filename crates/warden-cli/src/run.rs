//! `warden run`: a command under a lease.
//!
//! The command runs in its own process group with `WARDEN_FENCE` and
//! `WARDEN_KEY` in its environment. warden renews the lease in the background
//! (every third of the TTL), forwards SIGINT, SIGTERM and SIGHUP to the group,
//! and releases the lease when the command exits. If the lease is lost — renewal
//! found the key gone or taken, or the local deadline passed without a confirmed
//! renewal (store unreachable, warden itself paused) — the group gets SIGTERM,
//! then SIGKILL after `--grace`, and warden exits 76.

use std::io::ErrorKind;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::process::{Child, Command};
use tokio::signal::unix::{SignalKind, signal};
use warden::{LeaseGuard, ReleaseOutcome, TryAcquire};

use crate::cli::{Global, RunArgs};
use crate::exit::{self, Failure};
use crate::{duration, output, store, terminal};

pub async fn run(global: &Global, args: &RunArgs) -> Result<u8, Failure> {
    warden::validate_key(&args.key)?;
    let warden = store::connect(global).await?;
    let lease = warden.lease(&args.key).ttl(args.ttl).watchdog(true);
    let outcome = if args.no_wait {
        lease.try_acquire().await?
    } else {
        output::while_waiting(
            &args.key,
            args.wait,
            !global.quiet,
            lease.acquire_within(args.wait),
        )
        .await?
    };
    let guard = match outcome {
        TryAcquire::Acquired(guard) => guard,
        TryAcquire::Held { ttl_left } => {
            if !global.quiet {
                let ttl = ttl_left.map_or(String::new(), |t| {
                    format!(" (its TTL has {} left)", duration::show(t))
                });
                let waited = if args.no_wait {
                    String::new()
                } else {
                    format!(" after waiting {}", duration::show(args.wait))
                };
                output::note(&format!(
                    "lease {:?} is held by another process{ttl}; not acquired{waited}",
                    args.key
                ));
            }
            return Ok(args.conflict_exit_code.unwrap_or(exit::NOT_ACQUIRED));
        }
    };
    tracing::info!(key = %args.key, fence = %guard.fence(), "lease acquired");
    let code = supervise(global, args, &guard).await;
    finish(global, args, guard, code).await
}

/// How the command ended, as far as the lease is concerned.
enum Ended {
    /// It exited while the lease was held.
    Exited(ExitStatus),
    /// The lease was lost first; the command was terminated.
    Lost,
}

async fn supervise(global: &Global, args: &RunArgs, guard: &LeaseGuard) -> Result<Ended, Failure> {
    let signals = [
        SignalKind::interrupt(),
        SignalKind::terminate(),
        SignalKind::hangup(),
    ];
    let mut streams = Vec::new();
    for kind in signals {
        let stream = signal(kind)
            .map_err(|e| Failure::new(exit::SOFTWARE, format!("cannot handle signals: {e}")))?;
        streams.push(stream);
    }
    let [sigint, sigterm, sighup] = &mut streams[..] else {
        return Err(Failure::new(exit::SOFTWARE, "cannot handle signals"));
    };

    let mut child = spawn(args, guard)?;
    let group = child_group(&child);
    // Interactive use: the command gets the terminal (and Ctrl-C) while it runs.
    let _terminal = group.and_then(terminal::hand_over);
    let lost = guard.lost();
    loop {
        tokio::select! {
            biased;
            () = lost.wait() => {
                if !global.quiet {
                    output::note(&format!(
                        "lease {:?} lost while the command ran; terminating it (SIGTERM, SIGKILL after {})",
                        args.key,
                        duration::show(args.grace),
                    ));
                }
                terminate(&mut child, group, args).await;
                return Ok(Ended::Lost);
            }
            status = child.wait() => {
                let status = status.map_err(|e| {
                    Failure::new(exit::SOFTWARE, format!("cannot wait for the command: {e}"))
                })?;
                // Seen exiting after the lease's validity ran out (warden itself
                // was paused past the TTL): it may not have run alone to the end.
                if guard.is_lost() || guard.remaining().is_zero() {
                    if !global.quiet {
                        output::note(&format!(
                            "lease {:?} expired before the command finished; another holder may have overlapped",
                            args.key
                        ));
                    }
                    return Ok(Ended::Lost);
                }
                return Ok(Ended::Exited(status));
            }
            Some(()) = sigint.recv() => forward(group, Signal::SIGINT),
            Some(()) = sigterm.recv() => forward(group, Signal::SIGTERM),
            Some(()) = sighup.recv() => forward(group, Signal::SIGHUP),
        }
    }
}

fn spawn(args: &RunArgs, guard: &LeaseGuard) -> Result<Child, Failure> {
    let (program, rest) = args
        .command
        .split_first()
        .ok_or_else(|| Failure::usage("no command given after --"))?;
    let mut command = Command::new(program);
    command
        .args(rest)
        .env("WARDEN_FENCE", guard.fence().to_string())
        .env("WARDEN_KEY", &args.key)
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
fn child_group(child: &Child) -> Option<Pid> {
    child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .map(Pid::from_raw)
}

fn forward(group: Option<Pid>, sig: Signal) {
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

/// SIGTERM to the group, then SIGKILL after the grace period; reaps the child.
async fn terminate(child: &mut Child, group: Option<Pid>, args: &RunArgs) {
    forward(group, Signal::SIGTERM);
    if tokio::time::timeout(args.grace, child.wait())
        .await
        .is_err()
    {
        tracing::warn!("the command outlived the grace period; SIGKILL");
        forward(group, Signal::SIGKILL);
        let _ = child.wait().await;
    } else {
        // The leader exited; stragglers in its group get no more time.
        let _ = group.map(|g| killpg(g, Signal::SIGKILL));
    }
}

/// Releases the lease and turns the outcome into warden's exit status.
async fn finish(
    global: &Global,
    args: &RunArgs,
    guard: LeaseGuard,
    ended: Result<Ended, Failure>,
) -> Result<u8, Failure> {
    let released = guard.release().await;
    let status = match ended? {
        Ended::Lost => return Ok(exit::LEASE_LOST),
        Ended::Exited(status) => status,
    };
    match released {
        Ok(ReleaseOutcome::Released) => {}
        Ok(_) => {
            if !global.quiet {
                output::note(&format!(
                    "lease {:?} had already expired when the command finished",
                    args.key
                ));
            }
        }
        Err(e) => {
            // The TTL frees the key; the command's own status matters more.
            if !global.quiet {
                output::note(&format!("could not release lease {:?}: {e}", args.key));
            }
        }
    }
    Ok(exit_code(status))
}

/// The command's exit status, or 128+N when it died by signal N (as shells do).
fn exit_code(status: ExitStatus) -> u8 {
    if let Some(code) = status.code() {
        return u8::try_from(code & 0xff).unwrap_or(1);
    }
    status
        .signal()
        .and_then(|sig| u8::try_from(128 + sig).ok())
        .unwrap_or(1)
}
