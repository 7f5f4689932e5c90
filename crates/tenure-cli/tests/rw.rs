//! `tenure run --shared / --exclusive` end to end with real processes:
//! shared runs overlap, an exclusive run is alone; a waiting writer killed
//! with SIGKILL holds the readers behind it back for at most its TTL;
//! `status` and `list` show readers and writers with their labels.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use common::{Running, Sandbox, output, stderr, stdout, timed_runs, wait_for_file};
use nix::sys::signal::{Signal, kill};
use tenure_test::RedisServer;

/// One run as its command recorded it.
#[derive(Debug)]
struct Stay {
    write: bool,
    fence: u64,
    start: u128,
    end: u128,
}

fn shared_runs_overlap_and_exclusive_runs_are_alone(backend: &str) {
    let sandbox = Sandbox::new();
    let write = |i: usize| i % 3 == 1;
    let shapes: Vec<Vec<&str>> = (0..9)
        .map(|i| vec![if write(i) { "--exclusive" } else { "--shared" }, "cfg"])
        .collect();
    let stays: Vec<Stay> = timed_runs(&sandbox, backend, "0.2", &shapes)
        .into_iter()
        .enumerate()
        .map(|(i, (fence, start, end))| Stay {
            write: write(i),
            fence,
            start,
            end,
        })
        .collect();
    let overlap = |a: &Stay, b: &Stay| a.start < b.end && b.start < a.end;
    let mut shared_overlaps = 0;
    for (i, a) in stays.iter().enumerate() {
        for b in &stays[i + 1..] {
            if overlap(a, b) {
                assert!(!a.write && !b.write, "a writer overlapped: {a:?} {b:?}");
                shared_overlaps += 1;
            }
        }
        if a.write {
            // A writer's fence is above every fence of a run that started
            // before it.
            for b in stays.iter().filter(|b| b.start < a.start) {
                assert!(a.fence > b.fence, "{a:?} after {b:?}");
            }
        }
    }
    assert!(
        shared_overlaps >= 1,
        "shared runs never overlapped: {stays:?}"
    );
}

#[test]
fn shared_and_exclusive_runs_on_sqlite() {
    let sandbox = Sandbox::new();
    shared_runs_overlap_and_exclusive_runs_are_alone(&sandbox.sqlite());
}

#[test]
fn shared_and_exclusive_runs_on_redis() {
    let server = RedisServer::start();
    shared_runs_overlap_and_exclusive_runs_are_alone(&server.url());
}

#[test]
fn shared_and_exclusive_runs_on_etcd() {
    let etcd = tenure_test::EtcdCluster::single();
    shared_runs_overlap_and_exclusive_runs_are_alone(&etcd.url());
}

/// `tenure --backend B status cfg --json`, parsed.
fn status_json(sandbox: &Sandbox, backend: &str) -> serde_json::Value {
    let out = output(
        sandbox
            .tenure()
            .args(["--backend", backend, "status", "cfg", "--json"]),
    );
    serde_json::from_str(stdout(&out).trim()).unwrap()
}

/// A holder of `cfg` in `mode` whose command writes its start time into
/// `name` and then sleeps.
fn start_holder(sandbox: &Sandbox, backend: &str, mode: &str, label: &str, name: &str) -> Running {
    let marker = sandbox.path(name);
    let script = format!("date +%s%N > {}; sleep 60", marker.display());
    sandbox.start(&[
        "--backend",
        backend,
        "run",
        mode,
        "cfg",
        "--ttl",
        "3s",
        "--wait",
        "60s",
        "--label",
        label,
        "--",
        "sh",
        "-c",
        &script,
    ])
}

fn a_killed_waiting_writer_holds_readers_back_at_most_its_ttl(backend: &str) {
    let sandbox = Sandbox::new();
    let mut first = start_holder(&sandbox, backend, "--shared", "first", "first");
    wait_for_file(&sandbox.path("first"), Duration::from_secs(10));
    let mut writer = start_holder(&sandbox, backend, "--exclusive", "writer", "writer");
    let deadline = Instant::now() + Duration::from_secs(10);
    while status_json(&sandbox, backend)["rw"]["waiting"] != serde_json::json!(["write"]) {
        assert!(Instant::now() < deadline, "the writer never stood in line");
        std::thread::sleep(Duration::from_millis(20));
    }
    // A reader after the waiting writer waits, though a reader holds.
    let mut second = start_holder(&sandbox, backend, "--shared", "second", "second");
    std::thread::sleep(Duration::from_secs(1));
    assert!(
        !sandbox.path("second").exists(),
        "a reader passed a waiting writer"
    );
    let status = status_json(&sandbox, backend);
    assert_eq!(status["rw"]["readers"][0]["label"], "first", "{status}");
    assert_eq!(
        status["rw"]["waiting"],
        serde_json::json!(["write", "read"])
    );
    // The writer dies in line: the reader behind it gets in within the
    // writer's TTL (its place is not refreshed any more).
    kill(writer.pid(), Signal::SIGKILL).unwrap();
    let _ = writer.0.wait();
    let killed = Instant::now();
    wait_for_file(&sandbox.path("second"), Duration::from_secs(10));
    let after = killed.elapsed();
    assert!(
        after < Duration::from_secs(3) + Duration::from_secs(2),
        "{after:?}"
    );
    // Both readers hold now; `list` shows them with their labels.
    let out = output(sandbox.tenure().args(["--backend", backend, "list"]));
    let table = stdout(&out);
    assert!(table.contains("cfg [read]"), "{table}");
    assert!(
        table.contains("\"first\"") && table.contains("\"second\""),
        "{table}"
    );
    for run in [&mut first, &mut second] {
        kill(run.pid(), Signal::SIGTERM).unwrap();
        run.wait(Duration::from_secs(10));
    }
}

#[test]
fn a_killed_waiting_writer_on_sqlite() {
    let sandbox = Sandbox::new();
    a_killed_waiting_writer_holds_readers_back_at_most_its_ttl(&sandbox.sqlite());
}

#[test]
fn a_killed_waiting_writer_on_redis() {
    let server = RedisServer::start();
    a_killed_waiting_writer_holds_readers_back_at_most_its_ttl(&server.url());
}

#[test]
fn a_killed_waiting_writer_on_etcd() {
    let etcd = tenure_test::EtcdCluster::single();
    a_killed_waiting_writer_holds_readers_back_at_most_its_ttl(&etcd.url());
}

/// --shared and --exclusive together, or with --permits, or with several
/// keys: one-line usage errors.
#[test]
fn conflicting_shapes_are_usage_errors() {
    let sandbox = Sandbox::new();
    let db = sandbox.sqlite();
    for args in [
        &["--shared", "--exclusive", "k"][..],
        &["--shared", "--permits", "2", "k"][..],
        &["--exclusive", "-k", "a", "-k", "b"][..],
    ] {
        let mut full = vec!["--backend", db.as_str(), "run"];
        full.extend_from_slice(args);
        full.extend(["--", "true"]);
        let out = output(sandbox.tenure().args(&full));
        assert_eq!(out.status.code(), Some(64), "{args:?}: {}", stderr(&out));
    }
}
