//! `tenure once` stopped by a signal, and `--capture` at its limits: the
//! command never outlives its runner's lease, the key is released, and
//! captured output is bounded; on SQLite and on Redis.

#![allow(clippy::unwrap_used)]

mod common;

use std::os::unix::process::ExitStatusExt;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{Sandbox, alive, output, pid_in, stderr, stdout};
use nix::sys::signal::{Signal, kill};
use tenure_test::RedisServer;

/// A runner gets `sig` while its command runs; the command (and a process it
/// started) ignore it. tenure must not die leaving them running: it forwards
/// the signal, kills the group after the grace, releases the key, and exits
/// with the command's status rather than by the signal.
fn a_signalled_runner_leaves_nothing_running(backend: &str, sig: Signal) {
    let sandbox = Sandbox::new();
    let shell = sandbox.path("shell.pid");
    let worker = sandbox.path("worker.pid");
    let script = format!(
        "trap '' INT TERM HUP; sleep 60 & echo $! > {}; echo $$ > {}; wait",
        worker.display(),
        shell.display()
    );
    // A TTL of 3 s: a grace of 1 s, and a key left held would keep a second
    // caller waiting for about 3 s.
    let key = format!("job-{sig}");
    let mut runner = sandbox.start(&[
        "--backend",
        backend,
        "once",
        "--key",
        &key,
        "--ttl",
        "3s",
        "--",
        "sh",
        "-c",
        &script,
    ]);
    let worker_pid = pid_in(&worker);
    let shell_pid = pid_in(&shell);
    kill(runner.pid(), sig).unwrap();
    let status = runner.wait(Duration::from_secs(10));
    let err = runner.stderr();
    assert_eq!(
        status.signal(),
        None,
        "{sig}: tenure died by the signal: {err}"
    );
    assert_eq!(
        status.code(),
        Some(137),
        "{sig}: the command was killed: {err}"
    );
    assert!(!alive(shell_pid), "{sig}: the command outlived its runner");
    assert!(!alive(worker_pid), "{sig}: its child outlived its runner");
    // Released (the failure was not recorded): the next caller runs at once.
    let started = Instant::now();
    let next = output(sandbox.tenure().args([
        "--backend",
        backend,
        "once",
        "--key",
        &key,
        "--wait",
        "1s",
        "--",
        "echo",
        "again",
    ]));
    assert_eq!(next.status.code(), Some(0), "{sig}: {}", stderr(&next));
    assert_eq!(stdout(&next), "again\n");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
}

/// A command that acts on the forwarded signal ends with its own status.
fn a_command_that_handles_the_signal_reports_its_status(backend: &str) {
    let sandbox = Sandbox::new();
    let shell = sandbox.path("shell.pid");
    let script = format!(
        "trap 'echo cleaned; exit 5' TERM; echo $$ > {}; while :; do sleep 0.05; done",
        shell.display()
    );
    let mut runner = common::Running(
        sandbox
            .tenure()
            .args(["--backend", backend, "once", "--key", "k", "--capture"])
            .args(["--", "sh", "-c", &script])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    pid_in(&shell);
    kill(runner.pid(), Signal::SIGTERM).unwrap();
    let status = runner.wait(Duration::from_secs(10));
    assert_eq!(status.code(), Some(5), "{}", runner.stderr());
    let mut out = String::new();
    std::io::Read::read_to_string(&mut runner.0.stdout.take().unwrap(), &mut out).unwrap();
    assert_eq!(out, "cleaned\n");
}

/// Every signal that ends a runner, then a command that handles it, on `backend`.
fn signals_on(backend: &str) {
    for sig in [Signal::SIGTERM, Signal::SIGHUP, Signal::SIGINT] {
        a_signalled_runner_leaves_nothing_running(backend, sig);
    }
    a_command_that_handles_the_signal_reports_its_status(backend);
}

#[test]
fn signals_on_sqlite() {
    let sandbox = Sandbox::new();
    signals_on(&sandbox.sqlite());
}

#[test]
fn signals_on_redis() {
    let server = RedisServer::start();
    signals_on(&server.url());
}

/// A background process that inherited the captured stdout does not keep the
/// runner (and its lease) waiting: it is killed when the command exits, as
/// without `--capture`.
#[test]
fn capture_does_not_wait_for_a_background_process() {
    let sandbox = Sandbox::new();
    let started = Instant::now();
    let out = output(sandbox.tenure().args([
        "--backend",
        &sandbox.sqlite(),
        "once",
        "--key",
        "bg",
        "--capture",
        "--",
        "sh",
        "-c",
        "sleep 60 & echo hi",
    ]));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "hi\n");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
}

/// Exactly 1 MiB of stdout is recorded and replayed; one byte more is refused.
#[test]
fn capture_records_exactly_one_mebibyte() {
    let sandbox = Sandbox::new();
    let db = sandbox.sqlite();
    let once = |key: &str, bytes: usize| {
        output(sandbox.tenure().args([
            "--backend",
            &db,
            "once",
            "--key",
            key,
            "--capture",
            "--",
            "sh",
            "-c",
            &format!("head -c {bytes} /dev/zero"),
        ]))
    };
    let fits = once("fits", 1024 * 1024);
    assert_eq!(fits.status.code(), Some(0), "{}", stderr(&fits));
    let replay = once("fits", 0);
    assert_eq!(replay.status.code(), Some(0), "{}", stderr(&replay));
    assert_eq!(replay.stdout.len(), 1024 * 1024);
    let over = once("over", 1024 * 1024 + 1);
    assert_eq!(over.status.code(), Some(65), "{}", stderr(&over));
    assert!(!stderr(&over).contains("max_result"), "{}", stderr(&over));
}
