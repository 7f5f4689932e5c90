//! A store that is slow to answer, but loses nothing, does not get a healthy
//! command killed or reported as having overlapped (exit 76): renewals count
//! from the validity actually granted, and a release that cannot be confirmed
//! after a command that ended inside its validity is not a lost lease.

#![allow(clippy::unwrap_used)]

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::{Sandbox, start_run, stderr, wait_for_file};
use tenure_test::RedisServer;

/// Writes are paused for 1.5 s just before `run --ttl 3s`: the acquire comes
/// back with half its validity spent. The first renewal must come at once,
/// not a third of the TTL after the acquire returned (by then less than the
/// grace would be left, and the command would get SIGTERM).
#[test]
fn a_slow_acquire_renews_at_once_and_the_command_finishes() {
    let server = RedisServer::start();
    let sandbox = Sandbox::new();
    let paused = Command::new("redis-cli")
        .args([
            "-p",
            &server.port().to_string(),
            "CLIENT",
            "PAUSE",
            "1500",
            "WRITE",
        ])
        .output()
        .unwrap();
    assert!(paused.status.success(), "{}", stderr(&paused));
    let started = Instant::now();
    let out = common::output(sandbox.tenure().args([
        "--backend",
        &server.url(),
        "run",
        "--key",
        "slow",
        "--ttl",
        "3s",
        "--",
        "sleep",
        "2.5",
    ]));
    assert!(
        started.elapsed() >= Duration::from_millis(1400),
        "the acquire was not slowed: {:?}",
        started.elapsed()
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        !stderr(&out).contains("no renewal confirmed"),
        "{}",
        stderr(&out)
    );
}

/// The command freezes the store (SIGSTOP) and exits at once, well inside its
/// validity; the store comes back after the TTL. The release cannot be
/// confirmed in time, but the command ran alone to its end: its own status,
/// not 76.
#[test]
fn a_store_frozen_at_release_is_not_a_lost_lease() {
    let server = RedisServer::start();
    let sandbox = Sandbox::new();
    let marker = sandbox.path("frozen");
    let pid = server.pid().unwrap();
    let script = format!(
        "kill -STOP {pid}; echo frozen > {}; exit 3",
        marker.display()
    );
    let mut runner = start_run(&sandbox, &server.url(), "frozen", &["--ttl", "2s"], &script);
    wait_for_file(&marker, Duration::from_secs(10));
    std::thread::sleep(Duration::from_secs(4));
    server.resume();
    let status = runner.wait(Duration::from_secs(30));
    let err = runner.stderr();
    assert_eq!(status.code(), Some(3), "{err}");
}
