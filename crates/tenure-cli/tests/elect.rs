//! `tenure elect` and `tenure leader` end to end: five real candidate
//! processes, leaders killed with SIGKILL, on Redis, SQLite and etcd.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{Running, Sandbox, output, stderr, stdout};
use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use tenure_test::RedisServer;

const TTL: Duration = Duration::from_secs(1);

/// Upper bound of a waiting candidate's retry after the leader's TTL ran out:
/// it retries when the TTL it was told runs out, and polls at most every
/// 250 ms on SQLite / waits at most 1 s for a push on Redis.
const RETRY: Duration = Duration::from_secs(1);

/// Time for a fresh `tenure` process to connect and start its command.
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

/// `tenure leader --key KEY --json` on `backend`.
fn leader(sandbox: &Sandbox, backend: &str, key: &str) -> std::process::Output {
    output(
        sandbox
            .tenure()
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
        "while :; do echo \"$TENURE_FENCE $$ $(date +%s%N)\" >> {}; sleep 0.02; done",
        beats_path.display()
    );
    let mut candidates: Vec<Running> = (0..5)
        .map(|i| {
            let id = format!("cand-{i}");
            Running(
                sandbox
                    .tenure()
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

    // Three times: SIGKILL the leader — tenure and its command's group, as a
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

    // The survivors are stopped.
    for c in &candidates {
        let _ = kill(c.pid(), Signal::SIGTERM);
    }
    for c in &mut candidates {
        if matches!(c.0.try_wait(), Ok(None)) {
            c.wait(Duration::from_secs(10));
        }
    }
    let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
    // Nobody leads once they are gone — at the latest a TTL later: on Redis
    // the leader's release hands the lease to the first candidate in the
    // waiting line, which may be one that was stopping at that moment (its
    // place was still fresh); that hand-off lapses with its TTL.
    let stopped = Instant::now();
    let (code, json) = loop {
        let (code, json) = leader_json(&sandbox, backend);
        if code != Some(0) || stopped.elapsed() > TTL + RETRY + START {
            break (code, json);
        }
        std::thread::sleep(Duration::from_millis(50));
    };
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
    let etcd = tenure_test::EtcdCluster::single();
    five_candidates_one_leader_at_a_time(&etcd.url());
}

/// `tenure elect --id` on etcd, end to end: `tenure leader` names the
/// elected id and its term; a candidate waiting meanwhile takes over when the
/// leader is stopped (it resigns), under a higher term; once both are gone
/// nobody leads.
#[test]
fn leader_names_the_elected_id_on_etcd() {
    let etcd = tenure_test::EtcdCluster::single();
    let (sandbox, url) = (Sandbox::new(), etcd.url());
    let candidate = |id: &str| {
        sandbox.start(&[
            "--backend",
            &url,
            "elect",
            "--key",
            "jobs",
            "--ttl",
            "5s",
            "--id",
            id,
            "--",
            "sh",
            "-c",
            "sleep 60",
        ])
    };
    let mut first = candidate("chair-1");
    let led = wait_for_leader(&sandbox, &url, "chair-1");
    let term = led["term"].as_u64().expect("a term");
    assert!(led["ttl_ms"].as_u64().unwrap() <= 5000, "{led}");
    let mut second = candidate("chair-2");
    // Stand in line behind the leader before it goes.
    std::thread::sleep(START);
    kill(first.pid(), Signal::SIGTERM).unwrap();
    let status = first.wait(Duration::from_secs(10));
    assert_eq!(status.code(), Some(128 + 15), "{}", first.stderr());
    // Resigned: the waiting candidate is handed the key at once, not after
    // the resigned leader's 5 s TTL.
    let stopped = Instant::now();
    let next = wait_for_leader(&sandbox, &url, "chair-2");
    assert!(
        stopped.elapsed() < Duration::from_secs(4),
        "{:?}",
        stopped.elapsed()
    );
    assert!(next["term"].as_u64().unwrap() > term, "{led} then {next}");
    kill(second.pid(), Signal::SIGTERM).unwrap();
    second.wait(Duration::from_secs(10));
    let (code, json) = leader_json(&sandbox, &url);
    assert_eq!(code, Some(75), "{json}");
    assert!(json["id"].is_null(), "{json}");
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
    let out = output(sandbox.tenure().args([
        "--backend",
        &db,
        "elect",
        "--key",
        "k",
        "--id",
        "solo",
        "--exit-on-loss",
        "--",
        "sh",
        "-c",
        "echo \"$TENURE_KEY $TENURE_FENCE\"; exit 3",
    ]));
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let printed = stdout(&out);
    let term = printed.trim().strip_prefix("k ").unwrap_or_default();
    assert!(term.parse::<u64>().is_ok(), "{printed}");
    assert!(
        stderr(&out).contains(&format!(
            "elected leader of \"k\" as \"solo\" (term {term})"
        )),
        "{}",
        stderr(&out)
    );
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
    let out = output(sandbox.tenure().args([
        "--backend",
        &db,
        "elect",
        "--key",
        "k",
        "--",
        "sh",
        "-c",
        "echo $TENURE_FENCE",
    ]));
    let next: u64 = stdout(&out).trim().parse().unwrap();
    assert!(next > term.parse::<u64>().unwrap(), "{}", stderr(&out));
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
fn bad_ids_are_usage_errors_and_leave_the_leader_alone() {
    let sandbox = Sandbox::new();
    let db = sandbox.sqlite();
    let mut leader_run = sandbox.start(&[
        "--backend",
        &db,
        "elect",
        "--key",
        "jobs",
        "--id",
        "first",
        "--",
        "sh",
        "-c",
        "sleep 60",
    ]);
    let before = wait_for_leader(&sandbox, &db, "first");
    for id in ["", "a\tb"] {
        let out = output(sandbox.tenure().args([
            "--backend",
            &db,
            "elect",
            "--key",
            "jobs",
            "--id",
            id,
            "--",
            "true",
        ]));
        assert_eq!(out.status.code(), Some(64), "{}", stderr(&out));
        assert!(stderr(&out).contains("--id"), "{}", stderr(&out));
    }
    let (code, after) = leader_json(&sandbox, &db);
    assert_eq!(code, Some(0));
    assert_eq!(
        (&after["id"], &after["term"]),
        (&before["id"], &before["term"]),
        "the leader is unchanged"
    );
    kill(leader_run.pid(), Signal::SIGTERM).unwrap();
    leader_run.wait(Duration::from_secs(10));
}

/// Polls `tenure leader --key jobs --json` until `id` leads; returns its JSON.
fn wait_for_leader(sandbox: &Sandbox, backend: &str, id: &str) -> serde_json::Value {
    let start = Instant::now();
    loop {
        let (code, json) = leader_json(sandbox, backend);
        if code == Some(0) && json["id"] == id {
            return json;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{id} never led: {json}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The fenced write of [`RedisFencedStore`](tenure::redis::RedisFencedStore),
/// run by the leaders' commands through `redis-cli`: the resource's own check,
/// not a copy of it.
const FENCED_WRITE: &str = include_str!("../../tenure/src/redis/scripts/fenced_write.lua");

/// The resource the leaders write, and its Redis key.
const RESOURCE: &str = "jobs:output";

/// One write per line in `writes`: `term n applied(1)/rejected(0) nanoseconds`.
fn writes(sandbox: &Sandbox) -> Vec<(u64, u64, u8, u128)> {
    let text = std::fs::read_to_string(sandbox.path("writes")).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() != 4 {
                return None;
            }
            Some((
                f[0].parse().ok()?,
                f[1].parse().ok()?,
                f[2].parse().ok()?,
                f[3].parse().ok()?,
            ))
        })
        .collect()
}

/// Waits for an applied write of a term above `above`; returns the term.
fn applied_term_above(sandbox: &Sandbox, above: u64, max: Duration) -> u64 {
    let start = Instant::now();
    loop {
        if let Some(w) = writes(sandbox).iter().find(|w| w.0 > above && w.2 == 1) {
            return w.0;
        }
        assert!(
            start.elapsed() < max,
            "no applied write of a term above {above} within {max:?}: {:?}",
            writes(sandbox)
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A leader frozen with SIGSTOP (tenure and its command, as a paused VM)
/// past its TTL is replaced; the new leader's writes to a fenced Redis
/// resource are applied. When the old leader wakes, its tenure stops its
/// command before that command writes again, and a write with the old term —
/// what the command would have sent had it woken first — is rejected by the
/// resource, which keeps the new leader's value.
#[test]
fn a_frozen_leader_that_wakes_is_stopped_and_its_old_term_refused() {
    assert!(
        std::process::Command::new("redis-cli")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success()),
        "this test needs redis-cli (Debian: redis-tools, which scripts/test.sh installs)"
    );
    let server = RedisServer::start();
    let sandbox = Sandbox::new();
    let url = server.url();
    let resource_key = format!("tenure:resource:{RESOURCE}");
    // Each leader's command records its pid, then writes its term to the
    // resource every 50 ms and logs the resource's answer.
    let script = format!(
        "echo $$ > {dir}/cmd.$TENURE_FENCE; i=0; while :; do i=$((i+1)); \
         r=$(redis-cli -p {port} EVAL \"$FENCED_WRITE\" 1 {resource_key} $TENURE_FENCE \"term $TENURE_FENCE write $i\" $TENURE_ACQUISITION | head -n 1); \
         echo \"$TENURE_FENCE $i $r $(date +%s%N)\" >> {dir}/writes; sleep 0.05; done",
        dir = sandbox.dir.path().display(),
        port = server.port(),
    );
    let candidate = |id: &str| {
        Running(
            sandbox
                .tenure()
                .args(["--backend", &url, "elect", "--key", "jobs", "--ttl", "1s"])
                .args(["--id", id, "--", "sh", "-c", &script])
                .env("FENCED_WRITE", FENCED_WRITE)
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap(),
        )
    };
    let mut a = candidate("a");
    let old = applied_term_above(&sandbox, 0, Duration::from_secs(10));
    let old_cmd: i32 = common::pid_in(&sandbox.path(&format!("cmd.{old}")));

    // Freeze the whole leader: tenure and its command's process group.
    kill(a.pid(), Signal::SIGSTOP).unwrap();
    killpg(Pid::from_raw(old_cmd), Signal::SIGSTOP).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let frozen_writes = writes(&sandbox).len();

    // A second candidate is elected once the frozen leader's TTL runs out,
    // and its writes, with the higher term, are applied.
    let mut b = candidate("b");
    let new = applied_term_above(&sandbox, old, TTL + RETRY + START + Duration::from_secs(5));
    assert!(new > old);
    let (code, json) = leader_json(&sandbox, &url);
    assert_eq!(code, Some(0), "{json}");
    assert_eq!(
        (json["id"].as_str(), json["term"].as_u64()),
        (Some("b"), Some(new)),
        "{json}"
    );

    // The old leader wakes: its tenure is continued first, its command is
    // still frozen. Coordinator finds its local deadline long past and kills the
    // command before it runs another instruction.
    kill(a.pid(), Signal::SIGCONT).unwrap();
    let woke = Instant::now();
    while common::alive(old_cmd) {
        assert!(
            woke.elapsed() < Duration::from_secs(5),
            "the old leader's command is still alive 5 s after its tenure woke"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // Whatever else was left in the group is continued: there must be nothing.
    let _ = killpg(Pid::from_raw(old_cmd), Signal::SIGCONT);
    std::thread::sleep(Duration::from_millis(300));
    let after: Vec<_> = writes(&sandbox)
        .into_iter()
        .skip(frozen_writes)
        .filter(|w| w.0 == old)
        .collect();
    assert!(
        after.is_empty(),
        "the old leader wrote after waking: {after:?}"
    );
    // The woken tenure is a candidate again, not a leader.
    assert!(
        matches!(a.0.try_wait(), Ok(None)),
        "tenure elect campaigns again"
    );
    let (_, json) = leader_json(&sandbox, &url);
    assert_eq!(json["term"].as_u64(), Some(new), "{json}");

    // The write the old command would have sent had it woken first: refused,
    // naming the new term; the new leader's value stays.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (stale, kept) = rt.block_on(async {
        let store = tenure::redis::RedisFencedStore::connect(&url)
            .await
            .unwrap();
        let stale = store
            .write(
                RESOURCE,
                tenure::Fence::new(old),
                format!("term {old} late write"),
            )
            .await
            .unwrap();
        (stale, store.read(RESOURCE).await.unwrap().unwrap())
    });
    assert_eq!(
        stale,
        tenure::fence::FencedWrite::Rejected {
            current: tenure::Fence::new(new)
        }
    );
    assert_eq!(kept.0.get(), new);
    let kept_value = String::from_utf8(kept.1).unwrap();
    assert!(
        kept_value.starts_with(&format!("term {new} write ")),
        "{kept_value}"
    );
    // Every write of the old term was applied before the new leader's first.
    let log = writes(&sandbox);
    let first_new = log
        .iter()
        .filter(|w| w.0 == new)
        .map(|w| w.3)
        .min()
        .unwrap();
    assert!(
        log.iter()
            .filter(|w| w.0 == old)
            .all(|w| w.2 == 1 && w.3 < first_new),
        "{log:?}"
    );
    assert!(
        log.iter().filter(|w| w.0 == new).all(|w| w.2 == 1),
        "{log:?}"
    );

    for c in [&a, &b] {
        let _ = kill(c.pid(), Signal::SIGTERM);
    }
    b.wait(Duration::from_secs(10));
    a.wait(Duration::from_secs(10));
    let stderr_a = a.stderr();
    assert!(stderr_a.contains("lost"), "{stderr_a}");
}

/// On a quorum of Redis masters the leader's id is not kept: `--id` is
/// refused (64, one line naming it), and without it a leader is elected and
/// `tenure leader` reports its term with a null id.
#[test]
fn on_a_quorum_ids_are_refused_and_the_term_is_reported() {
    let nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let sandbox = Sandbox::new();
    let mut backends: Vec<String> = Vec::new();
    for node in &nodes {
        backends.push("--backend".into());
        backends.push(node.url());
    }
    let with = |args: &[&str]| -> Vec<String> {
        let mut all = backends.clone();
        all.extend(args.iter().map(|a| (*a).to_string()));
        all
    };
    let refused = with(&[
        "elect",
        "--key",
        "q",
        "--id",
        "x",
        "--exit-on-loss",
        "--",
        "true",
    ]);
    let refused: Vec<&str> = refused.iter().map(String::as_str).collect();
    let err = common::assert_one_line_error(&sandbox, &refused, 64, "--id");
    assert!(err.contains("keeps no leader ids"), "{err}");

    let term_file = sandbox.path("term");
    let script = format!("echo $TENURE_FENCE > {}; sleep 60", term_file.display());
    let elect = with(&["elect", "--key", "q", "--", "sh", "-c", &script]);
    let elect: Vec<&str> = elect.iter().map(String::as_str).collect();
    let mut running = sandbox.start(&elect);
    let term: u64 = common::wait_for_file(&term_file, Duration::from_secs(10))
        .trim()
        .parse()
        .unwrap();
    let json_args = with(&["leader", "--key", "q", "--json"]);
    let out = output(sandbox.tenure().args(&json_args));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let json: serde_json::Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    assert!(json["id"].is_null(), "{json}");
    assert_eq!(json["term"].as_u64(), Some(term), "{json}");
    let human = output(sandbox.tenure().args(with(&["leader", "--key", "q"])));
    assert!(
        stdout(&human).contains("(this store keeps no leader ids)"),
        "{}",
        stdout(&human)
    );
    kill(running.pid(), Signal::SIGTERM).unwrap();
    running.wait(Duration::from_secs(10));
}

/// A candidate stopped (SIGTERM) while it waits in Redis's waiting line
/// leaves the line before it exits: the leader's release then elects the
/// next live candidate at once, instead of handing leadership to the stopped
/// one and electing the live one only after that hand-off's TTL.
#[test]
fn a_candidate_stopped_while_waiting_is_not_handed_leadership_on_redis() {
    let server = RedisServer::start();
    let sandbox = Sandbox::new();
    let url = server.url();
    let candidate = |id: &str| {
        let script = format!("echo $$ > {}; sleep 60", sandbox.path(id).display());
        sandbox.start(&[
            "--backend",
            &url,
            "elect",
            "--key",
            "jobs",
            "--ttl",
            "10s",
            "--id",
            id,
            "--",
            "sh",
            "-c",
            &script,
        ])
    };
    let line_len = || {
        let reply = server.command("LLEN tenure:{jobs}:queue").unwrap();
        reply.trim().trim_start_matches(':').parse::<u64>().unwrap()
    };
    let wait_until = |what: &str, ok: &dyn Fn() -> bool| {
        let start = Instant::now();
        while !ok() {
            assert!(start.elapsed() < Duration::from_secs(10), "{what}");
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let mut a = candidate("a");
    let a_cmd = common::pid_in(&sandbox.path("a"));
    let mut b = candidate("b");
    wait_until("b stands in line", &|| line_len() == 1);
    kill(b.pid(), Signal::SIGTERM).unwrap();
    assert_eq!(b.wait(Duration::from_secs(10)).code(), Some(128 + 15));
    let mut c = candidate("c");
    wait_until("c stands in line", &|| line_len() >= 1);
    // The leader's command ends; tenure resigns, and the lease goes to the
    // first live candidate in line.
    let _ = killpg(Pid::from_raw(a_cmd), Signal::SIGTERM);
    let resigned = Instant::now();
    assert_eq!(a.wait(Duration::from_secs(10)).code(), Some(128 + 15));
    common::wait_for_file(&sandbox.path("c"), Duration::from_secs(30));
    assert!(
        resigned.elapsed() < Duration::from_secs(5),
        "c was elected {:?} after the resignation (the 10 s TTL of a hand-off to b?)",
        resigned.elapsed()
    );
    let (code, json) = {
        let out = leader(&sandbox, &url, "jobs");
        let json: serde_json::Value = serde_json::from_str(stdout(&out).trim()).unwrap();
        (out.status.code(), json)
    };
    assert_eq!(code, Some(0), "{json}");
    kill(c.pid(), Signal::SIGTERM).unwrap();
    c.wait(Duration::from_secs(10));
}
