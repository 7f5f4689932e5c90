//! `tenure run` never reports a lone run that may not have been one, and never
//! leaves the command (or anything it started) running without the lease.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use common::{Sandbox, alive, output, pid_in, start_run, stderr, stdout};
use nix::sys::signal::{Signal, kill};
use tenure_test::RedisServer;

/// A command that records its pid and waits until the file `go` appears (it
/// never touches the store: what happens to the lease meanwhile is up to the
/// test), then exits 0.
fn until_go(sandbox: &Sandbox) -> String {
    format!(
        "echo $$ > {m}; while [ ! -e {go} ]; do sleep 0.02; done",
        m = sandbox.path("child").display(),
        go = sandbox.path("go").display(),
    )
}

/// Starts `tenure --backend URL run --key KEY --ttl 30s -- sh -c until_go`: with
/// a 30 s TTL no renewal happens during the test, so only the final release can
/// notice what was done to the key.
fn start_long_run(sandbox: &Sandbox, url: &str, key: &str) -> common::Running {
    let script = until_go(sandbox);
    let run = start_run(sandbox, url, key, &["--ttl", "30s"], &script);
    pid_in(&sandbox.path("child"));
    run
}

fn finish(sandbox: &Sandbox, run: &mut common::Running) -> (Option<i32>, String) {
    std::fs::write(sandbox.path("go"), "").unwrap();
    let status = run.wait(Duration::from_secs(15));
    (status.code(), run.stderr())
}

/// Item 4: the key deleted under a running command (DEL, FLUSHALL): the final
/// release finds it gone, so the command may not have run alone: 76, and the
/// message says the lease vanished, not that another holder took it.
#[test]
fn a_lease_deleted_while_the_command_ran_exits_76_and_says_so() {
    let server = RedisServer::start();
    for wipe in ["DEL tenure:{wiped}", "FLUSHALL"] {
        let sandbox = Sandbox::new();
        let mut run = start_long_run(&sandbox, &server.url(), "wiped");
        server.command(wipe).unwrap();
        let (code, err) = finish(&sandbox, &mut run);
        assert_eq!(code, Some(76), "{wipe}: {err}");
        assert!(err.contains("deleted or expired"), "{wipe}: {err}");
        assert!(!err.contains("taken by another holder"), "{wipe}: {err}");
    }
}

/// Item 4: Redis restarted without persistence while the command ran.
#[test]
fn a_redis_restart_without_persistence_under_a_running_command_exits_76() {
    let mut server = RedisServer::start();
    let sandbox = Sandbox::new();
    let mut run = start_long_run(&sandbox, &server.url(), "restarted");
    server.restart();
    let (code, err) = finish(&sandbox, &mut run);
    assert_eq!(code, Some(76), "{err}");
    assert!(err.contains("deleted or expired"), "{err}");
}

/// Item 4: the key deleted and then taken by a second holder, which ran at
/// the same time as the first command: 76, "taken by another holder".
#[test]
fn a_lease_taken_by_another_holder_while_the_command_ran_exits_76() {
    let server = RedisServer::start();
    let sandbox = Sandbox::new();
    let mut first = start_long_run(&sandbox, &server.url(), "taken");
    server.command("DEL tenure:{taken}").unwrap();
    let second_marker = sandbox.path("second");
    let script = format!("echo $$ > {}; sleep 300", second_marker.display());
    let mut second = start_run(&sandbox, &server.url(), "taken", &["--no-wait"], &script);
    pid_in(&second_marker);
    let (code, err) = finish(&sandbox, &mut first);
    assert_eq!(code, Some(76), "{err}");
    assert!(err.contains("taken by another holder"), "{err}");
    kill(second.pid(), Signal::SIGTERM).unwrap();
    second.wait(Duration::from_secs(10));
}

/// Item 4 on the embedded SQLite store: the lease taken from a running
/// command by `tenure release --force` (and then by a second holder, or by
/// nobody): the final release finds it gone, 76, and says what became of it.
#[test]
fn a_lease_taken_from_a_command_on_sqlite_exits_76() {
    for (key, then_held) in [("forced", false), ("taken-over", true)] {
        let sandbox = Sandbox::new();
        let url = sandbox.sqlite();
        let mut first = start_long_run(&sandbox, &url, key);
        let forced = output(
            sandbox
                .tenure()
                .args(["--backend", &url, "release", key, "--force"]),
        );
        assert!(forced.status.success(), "{}", stderr(&forced));
        let second = then_held.then(|| {
            let marker = sandbox.path("second");
            let script = format!("echo $$ > {}; sleep 300", marker.display());
            let run = start_run(&sandbox, &url, key, &["--no-wait"], &script);
            pid_in(&marker);
            run
        });
        let (code, err) = finish(&sandbox, &mut first);
        assert_eq!(code, Some(76), "{key}: {err}");
        let said = if then_held {
            "taken by another holder"
        } else {
            "deleted or expired"
        };
        assert!(err.contains(said), "{key}: {err}");
        if let Some(mut second) = second {
            kill(second.pid(), Signal::SIGTERM).unwrap();
            second.wait(Duration::from_secs(10));
        }
    }
}

/// Item 5: a command that ignores SIGTERM, under a lease whose store freezes,
/// is dead before the store's copy of the lease expires (so before anyone
/// else could be granted it): SIGTERM `--grace` before the local deadline,
/// SIGKILL at it. The local deadline comes the drift margin (here 102 ms)
/// before the store's expiry; that is the margin this test checks.
#[test]
fn a_command_ignoring_sigterm_is_dead_before_a_frozen_store_could_regrant() {
    let server = RedisServer::start();
    let sandbox = Sandbox::new();
    let marker = sandbox.path("child");
    let script = format!(
        "trap '' TERM; echo $$ > {}; while :; do sleep 0.05; done",
        marker.display()
    );
    let options = ["--ttl", "10s", "--grace", "3s"];
    let mut run = start_run(&sandbox, &server.url(), "frozen", &options, &script);
    let pid = pid_in(&marker);
    // The store's expiry is at least `sent + PTTL`; a renewal slipping in
    // between only moves it later.
    let sent = Instant::now();
    let pttl: u64 = server
        .command("PTTL tenure:{frozen}")
        .unwrap()
        .trim()
        .trim_start_matches(':')
        .parse()
        .unwrap();
    server.pause();
    let expiry = sent + Duration::from_millis(pttl);
    let dead_at = loop {
        if !alive(pid) {
            break Instant::now();
        }
        assert!(
            Instant::now() < expiry + Duration::from_secs(20),
            "the command outlived its lease by far"
        );
        std::thread::sleep(Duration::from_millis(2));
    };
    server.resume();
    let status = run.wait(Duration::from_secs(20));
    let err = run.stderr();
    assert_eq!(status.code(), Some(76), "{err}");
    assert!(
        dead_at < expiry,
        "the command was alive {:?} after the store could grant the lease again: {err}",
        dead_at - expiry
    );
}

/// Item 5: when the command exits, whatever it left running in its process
/// group is killed before the lease is released.
#[test]
fn a_background_job_left_by_the_command_is_killed() {
    let sandbox = Sandbox::new();
    let pidfile = sandbox.path("bg");
    // The job's output goes elsewhere: a pipe it holds open would keep this
    // test waiting instead of failing.
    let script = format!(
        "sleep 300 >/dev/null 2>&1 & echo $! > {}",
        pidfile.display()
    );
    let out = output(
        sandbox
            .tenure()
            .args(["run", "--key", "bg", "--", "sh", "-c", &script]),
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let pid = pid_in(&pidfile);
    assert!(!alive(pid), "the background job outlived the lease");
}

/// Item 5: fatal signals other than INT/TERM/HUP sent to tenure reach the
/// command's group instead of killing tenure and orphaning the command.
#[test]
fn other_fatal_signals_are_forwarded_and_never_orphan_the_command() {
    for (sig, name) in [
        (Signal::SIGQUIT, "QUIT"),
        (Signal::SIGUSR1, "USR1"),
        (Signal::SIGUSR2, "USR2"),
        (Signal::SIGALRM, "ALRM"),
    ] {
        let sandbox = Sandbox::new();
        let shell = sandbox.path("shell");
        let bg = sandbox.path("bg");
        let script = format!(
            "trap 'echo got > {got}; exit 9' {name}; sleep 300 >/dev/null 2>&1 & echo $! > {bg}; \
             echo $$ > {shell}; exec >/dev/null 2>&1; while :; do sleep 0.05; done",
            got = sandbox.path("got").display(),
            bg = bg.display(),
            shell = shell.display(),
        );
        let mut run = sandbox.start(&["run", "--key", "sig", "--", "sh", "-c", &script]);
        let shell_pid = pid_in(&shell);
        let bg_pid = pid_in(&bg);
        kill(run.pid(), sig).unwrap();
        let status = run.wait(Duration::from_secs(15));
        let err = run.stderr();
        assert_eq!(status.code(), Some(9), "{name}: {err}");
        assert!(sandbox.path("got").exists(), "{name} was not forwarded");
        assert!(!alive(shell_pid), "{name}: the command was orphaned");
        assert!(!alive(bg_pid), "{name}: its background job was orphaned");
    }
}

/// A plain run still returns the command's status and output.
#[test]
fn an_undisturbed_run_returns_the_command_status() {
    let server = RedisServer::start();
    let sandbox = Sandbox::new();
    let out = output(
        sandbox
            .tenure()
            .args([
                "--backend",
                &server.url(),
                "run",
                "--key",
                "calm",
                "--ttl",
                "3s",
            ])
            .args(["--", "sh", "-c", "sleep 1.2; echo done; exit 4"]),
    );
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "done");
}
