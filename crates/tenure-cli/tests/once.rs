//! `tenure once` end to end: fifty concurrent processes, a runner killed with
//! SIGKILL, recorded failures, bad input; on Redis and on SQLite.

#![allow(clippy::unwrap_used)]

mod common;

use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::{Sandbox, output, stderr, stdout, wait_for_file};
use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use tenure_test::RedisServer;

fn spawn_once(sandbox: &Sandbox, backend: &str, key: &str, extra: &[&str], script: &str) -> Child {
    sandbox
        .tenure()
        .args(["--backend", backend, "once", "--key", key])
        .args(extra)
        .args(["--", "sh", "-c", script])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Fifty callers at once: the command runs once, every caller gets its
/// stdout and status.
fn fifty_callers_run_it_once(backend: &str) {
    let sandbox = Sandbox::new();
    let log = sandbox.path("ran");
    let script = format!(
        "echo \"$TENURE_FENCE\" >> {}; sleep 0.3; echo \"result of $TENURE_FENCE\"",
        log.display()
    );
    let children: Vec<Child> = (0..50)
        .map(|_| spawn_once(&sandbox, backend, "report", &["--capture"], &script))
        .collect();
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        assert_eq!(stdout(&out), "result of 1\n", "{}", stderr(&out));
    }
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "1\n");
}

#[test]
fn fifty_callers_on_redis() {
    let server = RedisServer::start();
    fifty_callers_run_it_once(&server.url());
}

#[test]
fn fifty_callers_on_sqlite() {
    let sandbox = Sandbox::new();
    fifty_callers_run_it_once(&sandbox.sqlite());
}

/// The runner is killed (tenure and its command) mid-way: exactly one waiter
/// takes over, with a higher fence, and every waiter gets its result.
fn a_killed_runner_is_taken_over_by_one_waiter(backend: &str) {
    let sandbox = Sandbox::new();
    let log = sandbox.path("starts");
    // The first runner (fence 1) hangs until killed; a successor finishes.
    let script = format!(
        "echo \"$TENURE_FENCE $$\" >> {}; [ \"$TENURE_FENCE\" = 1 ] && sleep 60; echo \"done by $TENURE_FENCE\"",
        log.display()
    );
    let extra = ["--capture", "--ttl", "1s"];
    let mut runner = spawn_once(&sandbox, backend, "job", &extra, &script);
    let started = wait_for_file(&log, Duration::from_secs(10));
    let group: i32 = started.split_whitespace().nth(1).unwrap().parse().unwrap();
    let waiters: Vec<Child> = (0..5)
        .map(|_| spawn_once(&sandbox, backend, "job", &extra, &script))
        .collect();
    // Let the waiters find the job running before its runner dies.
    std::thread::sleep(Duration::from_millis(300));
    let killed_at = Instant::now();
    kill(
        Pid::from_raw(i32::try_from(runner.id()).unwrap()),
        Signal::SIGKILL,
    )
    .unwrap();
    let _ = killpg(Pid::from_raw(group), Signal::SIGKILL);
    let _ = runner.wait();
    for child in waiters {
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        assert_eq!(stdout(&out), "done by 2\n", "{}", stderr(&out));
    }
    // The TTL (1 s) plus one retry and a process start.
    assert!(
        killed_at.elapsed() < Duration::from_secs(3),
        "{:?}",
        killed_at.elapsed()
    );
    let starts: Vec<u64> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| l.split_whitespace().next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(
        starts,
        vec![1, 2],
        "exactly one waiter took over, with a higher fence"
    );
}

#[test]
fn a_killed_runner_on_redis() {
    let server = RedisServer::start();
    a_killed_runner_is_taken_over_by_one_waiter(&server.url());
}

#[test]
fn a_killed_runner_on_sqlite() {
    let sandbox = Sandbox::new();
    a_killed_runner_is_taken_over_by_one_waiter(&sandbox.sqlite());
}

#[test]
fn failures_run_again_unless_cached() {
    let sandbox = Sandbox::new();
    let db = sandbox.sqlite();
    let once = |key: &str, extra: &[&str], script: &str| {
        output(
            sandbox
                .tenure()
                .args(["--backend", &db, "once", "--key", key])
                .args(extra)
                .args(["--", "sh", "-c", script]),
        )
    };
    let failed = once("f", &[], "echo try; exit 3");
    assert_eq!(failed.status.code(), Some(3));
    // Not recorded: the next caller runs it.
    let ok = once("f", &[], "echo second; exit 0");
    assert_eq!(
        (ok.status.code(), stdout(&ok).as_str()),
        (Some(0), "second\n")
    );
    let later = once("f", &[], "echo third; exit 0");
    assert_eq!(
        (later.status.code(), stdout(&later).as_str()),
        (Some(0), "")
    );
    // The run that succeeded had the second fence: larger than the first.
    let said = stderr(&later);
    let fence = said
        .split("already ran (fence ")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .and_then(|f| f.parse::<u64>().ok());
    assert!(fence.is_some_and(|f| f > 1), "{said}");

    let cached = once("g", &["--cache-failures", "--capture"], "echo oops; exit 3");
    assert_eq!(cached.status.code(), Some(3));
    let replay = once("g", &["--cache-failures", "--capture"], "echo no; exit 0");
    assert_eq!(
        (replay.status.code(), stdout(&replay).as_str()),
        (Some(3), "oops\n")
    );
}

#[test]
fn oversized_output_is_refused_and_bad_input_is_a_usage_error() {
    let sandbox = Sandbox::new();
    let db = sandbox.sqlite();
    let big = output(sandbox.tenure().args([
        "--backend",
        &db,
        "once",
        "--key",
        "big",
        "--capture",
        "--",
        "sh",
        "-c",
        "head -c 1100000 /dev/zero",
    ]));
    assert_eq!(big.status.code(), Some(65), "{}", stderr(&big));
    assert!(
        stderr(&big).contains("too large to record"),
        "{}",
        stderr(&big)
    );
    for args in [
        &["once", "--key", "", "--", "true"][..],
        &["once", "--key", "k", "--retain", "0s", "--", "true"][..],
        &["once", "--key", "k"][..],
    ] {
        let out = output(sandbox.tenure().args(["--backend", &db]).args(args));
        assert_eq!(out.status.code(), Some(64), "{args:?}: {}", stderr(&out));
    }
    // A busy run with a bounded wait: 75.
    let mut runner = sandbox
        .tenure()
        .args(["--backend", &db, "once", "--key", "slow", "--", "sh", "-c"])
        .arg(format!(
            "echo $$ > {}; exec sleep 30",
            sandbox.path("slow.pid").display()
        ))
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    loop {
        let status =
            output(
                sandbox
                    .tenure()
                    .args(["--backend", &db, "status", "--key", "slow", "--json"]),
            );
        if stdout(&status).contains("\"held\":true") {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(10));
        std::thread::sleep(Duration::from_millis(20));
    }
    let busy = output(sandbox.tenure().args([
        "--backend",
        &db,
        "once",
        "--key",
        "slow",
        "--wait",
        "100ms",
        "--",
        "true",
    ]));
    assert_eq!(busy.status.code(), Some(75), "{}", stderr(&busy));
    let _ = runner.kill();
    let _ = runner.wait();
    let pid = wait_for_file(&sandbox.path("slow.pid"), Duration::from_secs(5));
    let _ = killpg(Pid::from_raw(pid.trim().parse().unwrap()), Signal::SIGKILL);
}
