//! `warden elect` and `warden leader` end to end: five real candidate
//! processes, leaders killed with SIGKILL, on Redis, SQLite and etcd.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{Running, Sandbox, output, stderr, stdout};
use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use warden_test::RedisServer;

const TTL: Duration = Duration::from_secs(1);

/// Upper bound of a waiting candidate's retry after the leader's TTL ran out:
/// it retries when the TTL it was told runs out, and polls at most every
/// 250 ms on SQLite / waits at most 1 s for a push on Redis.
const RETRY: Duration = Duration::from_secs(1);

/// Time for a fresh `warden` process to connect and start its command.
const START: Duration = Duration::from_millis(500);

/// Heartbeats of the leaders' commands: `term pid nanoseconds` per line.
fn beats(sandbox: &Sandbox) -> Vec<(u64, i32, u128)> {
    let text = std::fs::read_to_string(sandbox.path("beats")).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            // A line cut short by a kill is ignored.
            if f.len() != 3 {
                return None;
            }
            Some((f[0].parse().ok()?, f[1].parse().ok()?, f[2].parse().ok()?))
        })
        .collect()
}

fn now_ns() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// Waits for a heartbeat of a term above `above`; returns (term, pid).
fn next_term(sandbox: &Sandbox, above: u64, max: Duration) -> (u64, i32) {
    let start = Instant::now();
    loop {
        if let Some(&(term, pid, _)) = beats(sandbox).iter().find(|b| b.0 > above) {
            return (term, pid);
        }
        assert!(
            start.elapsed() < max,
            "no new leader within {max:?} (terms so far: {:?})",
            beats(sandbox).iter().map(|b| b.0).collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// `warden leader --key KEY --json` on `backend`.
fn leader(sandbox: &Sandbox, backend: &str, key: &str) -> std::process::Output {
    output(
        sandbox
            .warden()
            .args(["--backend", backend, "leader", "--key", key, "--json"]),
    )
}

fn leader_json(sandbox: &Sandbox, backend: &str) -> (Option<i32>, serde_json::Value) {
    let out = leader(sandbox, backend, "jobs");
    let value: serde_json::Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    (out.status.code(), value)
}

fn five_candidates_one_leader_at_a_time(backend: &str) {
    let sandbox = Sandbox::new();
    let beats_path = sandbox.path("beats");
    // The command beats every 20 ms while this candidate leads.
    let script = format!(
        "while :; do echo \"$WARDEN_FENCE $$ $(date +%s%N)\" >> {}; sleep 0.02; done",
        beats_path.display()
    );
    let mut candidates: Vec<Running> = (0..5)
        .map(|i| {
            let id = format!("cand-{i}");
            Running(
                sandbox
                    .warden()
                    .args([
                        "--backend",
                        backend,
                        "elect",
                        "--key",
                        "jobs",
                        "--ttl",
                        "1s",
                    ])
                    .args(["--id", &id, "--", "sh", "-c", &script])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .unwrap(),
            )
        })
        .collect();
    let (mut term, mut pid) = next_term(&sandbox, 0, Duration::from_secs(10));

    // Three times: SIGKILL the leader — warden and its command's group, as a
    // crashed host would lose both — and measure how soon another leads.
    for _ in 0..3 {
        let (code, json) = leader_json(&sandbox, backend);
        assert_eq!(code, Some(0), "{json}");
        assert_eq!(json["term"].as_u64(), Some(term), "{json}");
        assert_eq!(json["key"], "jobs");
        assert!(json["ttl_ms"].as_u64().unwrap() <= 1000, "{json}");
        let id = json["id"].as_str().unwrap().to_string();
        let index: usize = id.strip_prefix("cand-").unwrap().parse().unwrap();
        let killed_at = Instant::now();
        kill(candidates[index].pid(), Signal::SIGKILL).unwrap();
        let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
        let _ = candidates[index].0.wait();
        let bound = TTL + RETRY + START;
        let (next, next_pid) = next_term(&sandbox, term, bound);
        assert!(
            killed_at.elapsed() < bound,
            "took {:?}",
            killed_at.elapsed()
        );
        assert!(next > term);
        (term, pid) = (next, next_pid);
    }

    // The survivors are stopped; the leader releases on the way out.
    for c in &candidates {
        let _ = kill(c.pid(), Signal::SIGTERM);
    }
    for c in &mut candidates {
        if matches!(c.0.try_wait(), Ok(None)) {
            c.wait(Duration::from_secs(10));
        }
    }
    let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
    let (code, json) = leader_json(&sandbox, backend);
    assert_eq!(code, Some(75), "{json}");
    assert!(json["id"].is_null(), "{json}");

    // At most one leader at any instant: the terms' beat intervals are
    // disjoint, and terms increase with time.
    let mut spans: BTreeMap<u64, (u128, u128)> = BTreeMap::new();
    for (t, _, at) in beats(&sandbox) {
        let span = spans.entry(t).or_insert((at, at));
        span.0 = span.0.min(at);
        span.1 = span.1.max(at);
    }
    assert!(spans.len() >= 4, "{spans:?}");
    let ordered: Vec<(u64, (u128, u128))> = spans.into_iter().collect();
    for pair in ordered.windows(2) {
        let (a, (_, a_end)) = pair[0];
        let (b, (b_start, _)) = pair[1];
        assert!(
            a_end < b_start,
            "term {a} still beat at {a_end} after term {b} began at {b_start}"
        );
    }
    assert!(ordered.last().unwrap().1.1 <= now_ns());
}

#[test]
fn five_candidates_on_redis() {
    let server = RedisServer::start();
    five_candidates_one_leader_at_a_time(&server.url());
}

/// On etcd a leader's key outlives a kill by its whole-second TTL and the
/// expiry sweep (every 500 ms); waiting candidates are pushed the deletion.
#[test]
fn five_candidates_on_etcd() {
    let etcd = warden_test::EtcdCluster::single();
    five_candidates_one_leader_at_a_time(&etcd.url());
}

#[test]
fn five_candidates_on_sqlite() {
    let sandbox = Sandbox::new();
    five_candidates_one_leader_at_a_time(&sandbox.sqlite());
}

#[test]
fn elect_once_exits_with_the_commands_status_and_resigns() {
    let sandbox = Sandbox::new();
    let db = sandbox.sqlite();
    let out = output(sandbox.warden().args([
        "--backend",
        &db,
        "elect",
        "--key",
        "k",
        "--id",
        "solo",
        "--once",
        "--",
        "sh",
        "-c",
        "echo \"$WARDEN_KEY $WARDEN_FENCE\"; exit 3",
    ]));
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "k 1");
    assert!(stderr(&out).contains("elected leader of \"k\" as \"solo\" (term 1)"));
    // It resigned: nobody leads, and the next term is higher.
    let (code, json) = {
        let out = leader(&sandbox, &db, "k");
        (out.status.code(), stdout(&out))
    };
    assert_eq!(code, Some(75));
    assert_eq!(
        json.trim(),
        r#"{"id":null,"key":"k","term":null,"ttl_ms":null}"#
    );
    let out = output(sandbox.warden().args([
        "--backend",
        &db,
        "elect",
        "--key",
        "k",
        "--",
        "sh",
        "-c",
        "echo $WARDEN_FENCE",
    ]));
    assert_eq!(stdout(&out).trim(), "2", "{}", stderr(&out));
}

#[test]
fn leader_shows_the_default_id() {
    let sandbox = Sandbox::new();
    let db = sandbox.sqlite();
    let mut running = sandbox.start(&[
        "--backend",
        &db,
        "elect",
        "--key",
        "k",
        "--",
        "sh",
        "-c",
        "sleep 30",
    ]);
    let start = Instant::now();
    let json = loop {
        let out = leader(&sandbox, &db, "k");
        // A new leader holds its lease a moment before its id is written:
        // `leader` then reports the term with `"id": null`; wait for the id.
        if out.status.code() == Some(0) {
            let json: serde_json::Value = serde_json::from_str(stdout(&out).trim()).unwrap();
            if json["id"].is_string() {
                break json;
            }
        }
        assert!(start.elapsed() < Duration::from_secs(10), "never elected");
        std::thread::sleep(Duration::from_millis(20));
    };
    let id = json["id"].as_str().unwrap();
    assert!(
        id.ends_with(&format!(":{}", running.pid())),
        "{id} is HOSTNAME:PID"
    );
    kill(running.pid(), Signal::SIGTERM).unwrap();
    let status = running.wait(Duration::from_secs(10));
    assert_eq!(status.code(), Some(128 + 15), "{}", running.stderr());
}

#[test]
fn bad_ids_are_usage_errors() {
    let sandbox = Sandbox::new();
    let db = sandbox.sqlite();
    for id in ["", "a\tb"] {
        let out = output(sandbox.warden().args([
            "--backend",
            &db,
            "elect",
            "--key",
            "k",
            "--id",
            id,
            "--",
            "true",
        ]));
        assert_eq!(out.status.code(), Some(64), "{}", stderr(&out));
        assert!(stderr(&out).contains("--id"), "{}", stderr(&out));
    }
}
