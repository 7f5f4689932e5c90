//! `tenure run` end to end: the real binary, real SQLite files, real Redis.

#![allow(clippy::unwrap_used)]

mod common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{
    Sandbox, alive, concurrent_runs_take_turns, output, pid_in, stderr, stdout, wait_for_file,
};
use nix::sys::signal::{Signal, kill};
use tenure_test::RedisServer;

#[test]
fn eight_concurrent_runs_on_sqlite_take_turns_with_increasing_fences() {
    let sandbox = Sandbox::new();
    concurrent_runs_take_turns(&sandbox, &sandbox.sqlite(), 8, "0.15");
}

#[test]
fn eight_concurrent_runs_on_redis_take_turns_with_increasing_fences() {
    let server = RedisServer::start();
    concurrent_runs_take_turns(&Sandbox::new(), &server.url(), 8, "0.15");
}

/// A child that records its pid, then waits; on SIGTERM it notes "term".
fn patient_child(marker: &std::path::Path) -> String {
    format!(
        "trap 'echo term >> {m}; exit 143' TERM; echo $$ > {m}; sleep 30 & wait",
        m = marker.display()
    )
}

/// A child that sets a trap, records its pid, and loops until stopped.
fn looping_child(trap: &str, marker: &std::path::Path) -> String {
    format!(
        "trap {trap}; echo $$ > {}; while :; do sleep 0.05; done",
        marker.display()
    )
}

/// Starts `tenure --backend BACKEND run --key KEY OPTIONS… -- sh -c SCRIPT`.
fn start_run(
    sandbox: &Sandbox,
    backend: &str,
    key: &str,
    options: &[&str],
    script: &str,
) -> common::Running {
    let mut args = vec!["--backend", backend, "run", "--key", key];
    args.extend_from_slice(options);
    args.extend_from_slice(&["--", "sh", "-c", script]);
    sandbox.start(&args)
}

#[test]
fn a_deleted_redis_key_terminates_the_command_and_exits_76() {
    let server = RedisServer::start();
    let sandbox = Sandbox::new();
    let marker = sandbox.path("child");
    let mut tenure = start_run(
        &sandbox,
        &server.url(),
        "job",
        &["--ttl", "3s"],
        &patient_child(&marker),
    );
    let pid = pid_in(&marker);
    let deleted = server.command("DEL tenure:{job}").unwrap();
    assert!(deleted.contains('1'), "DEL answered {deleted:?}");
    let status = tenure.wait(Duration::from_secs(15));
    let err = tenure.stderr();
    assert_eq!(status.code(), Some(76), "{err}");
    assert!(err.contains("lost"), "{err}");
    // The store can tell the key is simply gone (nobody took it).
    assert!(err.contains("deleted or expired"), "{err}");
    assert!(std::fs::read_to_string(&marker).unwrap().contains("term"));
    assert!(!alive(pid), "the command survived its lost lease");
}

#[test]
fn a_tenure_paused_past_its_ttl_on_sqlite_kills_the_command_and_exits_76() {
    let sandbox = Sandbox::new();
    let marker = sandbox.path("child");
    let mut tenure = start_run(
        &sandbox,
        &sandbox.sqlite(),
        "job",
        &["--ttl", "1s", "--grace", "300ms"],
        &patient_child(&marker),
    );
    let pid = pid_in(&marker);
    let status = output(sandbox.tenure().args([
        "--backend",
        &sandbox.sqlite(),
        "status",
        "--key",
        "job",
        "--json",
    ]));
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    let first = status["fence"].as_u64().expect("held, with a fence");
    let tenure_pid = tenure.pid();
    kill(tenure_pid, Signal::SIGSTOP).unwrap();
    // Paused: it cannot renew. Past the TTL another process takes the lease,
    // exactly the situation fencing tokens exist for.
    std::thread::sleep(Duration::from_millis(1500));
    let other = output(
        sandbox
            .tenure()
            .args([
                "--backend",
                &sandbox.sqlite(),
                "run",
                "--key",
                "job",
                "--no-wait",
            ])
            .args(["--", "sh", "-c", "echo $TENURE_FENCE"]),
    );
    kill(tenure_pid, Signal::SIGCONT).unwrap();
    assert_eq!(other.status.code(), Some(0), "{}", stderr(&other));
    let next: u64 = stdout(&other).trim().parse().unwrap();
    assert!(
        next > first,
        "the next holder gets a higher fence: {next} after {first}"
    );
    let status = tenure.wait(Duration::from_secs(15));
    assert_eq!(status.code(), Some(76));
    // Its deadline long past, the command gets no grace: SIGKILL right away.
    assert!(!alive(pid), "the command outlived its lease");
}

#[test]
fn a_command_that_ignores_sigterm_is_killed_after_the_grace_period() {
    let server = RedisServer::start();
    let sandbox = Sandbox::new();
    let marker = sandbox.path("child");
    let script = looping_child("'' TERM", &marker);
    let mut tenure = start_run(
        &sandbox,
        &server.url(),
        "stubborn",
        &["--ttl", "3s", "--grace", "1s"],
        &script,
    );
    let pid = pid_in(&marker);
    server.command("DEL tenure:{stubborn}").unwrap();
    let status = tenure.wait(Duration::from_secs(15));
    assert_eq!(status.code(), Some(76));
    assert!(!alive(pid), "the command survived SIGKILL");
}

#[test]
fn exit_status_and_environment_reach_the_caller() {
    let sandbox = Sandbox::new();
    let out = output(
        sandbox
            .tenure()
            .args(["run", "--key", "env-check", "--"])
            .args(["sh", "-c", "echo \"$TENURE_KEY $TENURE_FENCE\"; exit 3"]),
    );
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    // TENURE_FENCE is the whole integer (fences are floored by the clock:
    // about 1.8e15 today), never in exponent notation.
    let printed = stdout(&out);
    let (key, fence) = printed.trim().split_once(' ').unwrap();
    assert_eq!(key, "env-check");
    assert!(
        fence.len() >= 16 && fence.bytes().all(|b| b.is_ascii_digit()),
        "{printed}"
    );
    let first: u64 = fence.parse().unwrap();
    let out = output(sandbox.tenure().args([
        "run",
        "--key",
        "env-check",
        "--",
        "sh",
        "-c",
        "kill -KILL $$",
    ]));
    assert_eq!(out.status.code(), Some(128 + 9));
    // The default store is a SQLite file under HOME, created on first use.
    assert!(sandbox.path(".local/state/tenure/tenure.db").is_file());
    let out = output(
        sandbox
            .tenure()
            .args(["status", "--key", "env-check", "--json"]),
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(json["fence"].as_u64().unwrap() > first, "{json}");
    assert_eq!(json["held"], false, "released after the command: {json}");
}

#[test]
fn a_held_lease_gives_75_or_the_conflict_code_and_signals_are_forwarded() {
    let sandbox = Sandbox::new();
    let marker = sandbox.path("holder");
    let script = looping_child("'exit 7' INT", &marker);
    let mut holder = sandbox.start(&["run", "--key", "busy", "--", "sh", "-c", &script]);
    wait_for_file(&marker, Duration::from_secs(10));

    let busy = |extra: &[&str]| {
        output(
            sandbox
                .tenure()
                .args(["run", "--key", "busy"])
                .args(extra)
                .args(["--", "true"]),
        )
    };
    let out = busy(&["--no-wait"]);
    assert_eq!(out.status.code(), Some(75), "{}", stderr(&out));
    // The holder recorded itself: the note names its process.
    let holder_pid = holder.0.id();
    assert!(
        stderr(&out).contains("is held by ")
            && stderr(&out).contains(&format!(" pid {holder_pid} for ")),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        busy(&["--no-wait", "--conflict-exit-code", "9"])
            .status
            .code(),
        Some(9)
    );
    let start = Instant::now();
    let out = busy(&["--wait", "400ms", "--quiet"]);
    assert_eq!(out.status.code(), Some(75));
    assert!(start.elapsed() >= Duration::from_millis(400));
    assert!(stderr(&out).is_empty(), "--quiet: {}", stderr(&out));

    let status = output(sandbox.tenure().args(["status", "--key", "busy", "--json"]));
    let json: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(json["held"], true, "{json}");
    assert!(json["ttl_ms"].as_u64().unwrap() > 0, "{json}");
    assert_eq!(json["storage_key"], "tenure_leases/busy");
    let mut keys: Vec<&str> = json
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "fence",
            "held",
            "holder",
            "key",
            "storage_key",
            "ttl_ms",
            "waiters"
        ],
        "no owner token"
    );
    let mut fields: Vec<&str> = json["holder"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    fields.sort_unstable();
    assert_eq!(fields, ["held_ms", "host", "label", "pid"], "{json}");
    assert_eq!(json["holder"]["pid"], holder_pid, "{json}");
    assert_eq!(json["holder"]["label"], serde_json::Value::Null, "{json}");
    // The run that waited 400 ms left the waiting line when it gave up.
    assert_eq!(json["waiters"], 0, "{json}");

    // SIGINT to tenure reaches the command, whose status tenure returns.
    kill(holder.pid(), Signal::SIGINT).unwrap();
    let status = holder.wait(Duration::from_secs(10));
    assert_eq!(status.code(), Some(7));
    assert_eq!(busy(&["--no-wait"]).status.code(), Some(0), "released");
}

#[test]
fn several_backends_form_a_quorum() {
    let mut servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let sandbox = Sandbox::new();
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let fence = |cmd: &mut std::process::Command| {
        // A release that times out on a node under load leaves the key there for
        // its TTL: a short TTL and a long wait keep that from failing the test.
        let out = output(
            cmd.args(["run", "--key", "q", "--ttl", "3s", "--wait", "30s"])
                .args(["--", "sh", "-c", "echo $TENURE_FENCE"]),
        );
        assert!(out.status.success(), "{:?}: {}", out.status, stderr(&out));
        stdout(&out).trim().parse::<u64>().unwrap()
    };
    let mut repeated = sandbox.tenure();
    for url in &urls {
        repeated.args(["--backend", url]);
    }
    let first = fence(&mut repeated);
    let mut from_env = sandbox.tenure();
    from_env.env("TENURE_BACKEND", urls.join(","));
    let second = fence(&mut from_env);
    assert!(second > first, "{first} then {second}");
    // A majority suffices: one node down, still served.
    drop(servers.remove(0));
    let third = fence(sandbox.tenure().env("TENURE_BACKEND", urls.join(",")));
    assert!(third > second, "{second} then {third}");
    let out = output(
        sandbox
            .tenure()
            .args(["--backend", &urls[1], "--backend", &sandbox.sqlite()])
            .args(["status", "--key", "q"]),
    );
    assert_eq!(out.status.code(), Some(64), "{}", stderr(&out));
}

/// On a terminal, the command (in its own process group) gets the terminal
/// while it runs: it can read from it instead of being stopped by SIGTTIN.
/// `script` (util-linux) provides the pseudo-terminal.
#[test]
fn on_a_terminal_the_command_can_read_from_it() {
    use std::io::Write;
    let sandbox = Sandbox::new();
    let inner = format!(
        "{} run --key tty -- sh -c 'read line; echo \"got $line\"'",
        common::binary().display()
    );
    let mut script = std::process::Command::new("script")
        .args(["-qec", &inner, "/dev/null"])
        .env("HOME", sandbox.dir.path())
        .env_remove("TENURE_BACKEND")
        .env_remove("TENURE_DB")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = script.stdin.take().unwrap();
    std::thread::sleep(Duration::from_millis(500));
    stdin.write_all(b"over the terminal\n").unwrap();
    let mut running = common::Running(script);
    let status = running.wait(Duration::from_secs(15));
    let mut out = String::new();
    std::io::Read::read_to_string(&mut running.0.stdout.take().unwrap(), &mut out).unwrap();
    assert!(status.success(), "{status:?}: {out}");
    assert!(out.contains("got over the terminal"), "{out:?}");
}

/// A stopped command (Ctrl-Z, SIGTTIN) cannot act on SIGTERM: tenure continues
/// it, so it ends at once rather than at the end of the grace period.
#[test]
fn a_stopped_command_is_continued_so_that_sigterm_ends_it() {
    let server = RedisServer::start();
    let sandbox = Sandbox::new();
    let marker = sandbox.path("child");
    let script = format!("echo $$ > {}; kill -STOP $$", marker.display());
    let mut tenure = start_run(
        &sandbox,
        &server.url(),
        "stopped",
        &["--ttl", "3s", "--grace", "1s"],
        &script,
    );
    wait_for_file(&marker, Duration::from_secs(10));
    server.command("DEL tenure:{stopped}").unwrap();
    let status = tenure.wait(Duration::from_secs(20));
    assert_eq!(status.code(), Some(76), "{}", tenure.stderr());
}

/// A frozen Redis (SIGSTOP) answers nothing: renewals time out, the local
/// deadline passes, and the command is stopped before the store could have
/// handed the lease to anyone else.
#[test]
fn a_frozen_redis_ends_the_run_with_76_at_the_local_deadline() {
    let server = RedisServer::start();
    let sandbox = Sandbox::new();
    let marker = sandbox.path("child");
    let mut tenure = start_run(
        &sandbox,
        &server.url(),
        "frozen",
        &["--ttl", "1500ms", "--grace", "500ms", "-v"],
        &patient_child(&marker),
    );
    wait_for_file(&marker, Duration::from_secs(10));
    server.pause();
    let frozen = Instant::now();
    let status = tenure.wait(Duration::from_secs(20));
    server.resume();
    let err = tenure.stderr();
    assert_eq!(status.code(), Some(76), "{err}");
    assert!(
        frozen.elapsed() < Duration::from_secs(15),
        "{:?}",
        frozen.elapsed()
    );
    assert!(std::fs::read_to_string(&marker).unwrap().contains("term"));
    // -v logs through tracing on stderr.
    assert!(err.contains("lease acquired"), "{err}");
}

/// A `run` waiting in line that is stopped by a signal leaves the line before
/// it exits with 128+N: `status` counts no waiter once it is gone, so the
/// next waiter is not held up by its place. (Stopped by the signal's default
/// action instead, it left its place to lapse, about a second on SQLite.)
#[test]
fn a_run_stopped_while_waiting_leaves_the_line_and_exits_128_plus_n() {
    let sandbox = Sandbox::new();
    let release = sandbox.path("release");
    let mut holder = common::hold(&sandbox, "line", &release);
    let waiters = || -> serde_json::Value {
        let out = output(sandbox.tenure().args(["status", "-k", "line", "--json"]));
        let json: serde_json::Value = serde_json::from_str(stdout(&out).trim()).unwrap();
        json["waiters"].clone()
    };
    for (sig, code) in [(Signal::SIGTERM, 143), (Signal::SIGINT, 130)] {
        let mut waiter = sandbox.start(&["run", "-k", "line", "-w", "30s", "--", "true"]);
        let standing = Instant::now();
        while waiters() != serde_json::json!(1) {
            assert!(
                standing.elapsed() < Duration::from_secs(10),
                "the waiter never stood in line"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        kill(waiter.pid(), sig).unwrap();
        assert_eq!(
            waiter.wait(Duration::from_secs(10)).code(),
            Some(code),
            "{sig}: {}",
            waiter.stderr()
        );
        assert_eq!(
            waiters(),
            serde_json::json!(0),
            "{sig}: its place is still in line"
        );
    }
    std::fs::write(&release, "").unwrap();
    assert_eq!(holder.wait(Duration::from_secs(10)).code(), Some(0));
}
