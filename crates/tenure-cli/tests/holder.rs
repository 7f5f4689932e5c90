//! Who holds it: `tenure run --label` records the holder, `tenure status`
//! and `tenure list` show it (text and JSON) on SQLite and a real
//! redis-server — and never the owner token.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use common::{Running, Sandbox, assert_one_line_error, output, stderr, stdout};
use nix::sys::signal::{Signal, kill};
use serde_json::Value;
use tenure_test::{EtcdCluster, RedisServer};

/// Starts `tenure --backend BACKEND run --key KEY --label LABEL` around a
/// command that signals it started and then sleeps; returns it once running.
fn hold(s: &Sandbox, backend: &str, key: &str, label: &str) -> Running {
    let marker = s.path(&format!("{}.started", key.replace(':', "_")));
    let script = format!("touch {}; sleep 60", marker.display());
    let running = s.start(&[
        "--backend",
        backend,
        "run",
        "--key",
        key,
        "--label",
        label,
        "--",
        "sh",
        "-c",
        &script,
    ]);
    wait_for_file_or_empty(&marker);
    running
}

/// Waits until `path` exists (it may be empty).
fn wait_for_file_or_empty(path: &std::path::Path) {
    let start = Instant::now();
    while !path.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn json_lines(text: &str) -> Vec<Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn status_json(s: &Sandbox, backend: &str, key: &str) -> Value {
    let out = output(
        s.tenure()
            .args(["--backend", backend, "status", "--key", key, "--json"]),
    );
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    // 0 when held, 75 when free, whatever the output.
    let expected = if json["held"] == true { 0 } else { 75 };
    assert_eq!(out.status.code(), Some(expected), "{}", stderr(&out));
    json
}

/// The checks every store answers alike: status (text, JSON) and list (text,
/// JSON) name the holder and its label; free leases have a null holder.
fn shows_the_holder(s: &Sandbox, backend: &str) -> [Running; 2] {
    let mut first = hold(s, backend, "jobs:a", "nightly report");
    let second = hold(s, backend, "jobs:b", "backup");
    let other = hold(s, backend, "mail", "digest");

    let json = status_json(s, backend, "jobs:a");
    assert_eq!(json["held"], true, "{json}");
    let holder = &json["holder"];
    assert_eq!(holder["pid"], first.0.id(), "{json}");
    assert_eq!(holder["label"], "nightly report", "{json}");
    assert!(
        holder["host"].as_str().is_some_and(|h| !h.is_empty()),
        "{json}"
    );
    assert!(holder["held_ms"].as_u64().is_some(), "{json}");
    // Today's fields are unchanged.
    assert!(json["ttl_ms"].as_u64().unwrap() > 0, "{json}");
    assert!(json["fence"].as_u64().unwrap() >= 1, "{json}");
    assert_eq!(json["key"], "jobs:a");

    let out = output(
        s.tenure()
            .args(["--backend", backend, "status", "--key", "jobs:a"]),
    );
    let text = stdout(&out);
    assert!(
        text.contains("holder   ")
            && text.contains(&format!(" pid {} \"nightly report\"", first.0.id())),
        "{text}"
    );
    assert!(text.contains("held for "), "{text}");

    let out =
        output(
            s.tenure()
                .args(["--backend", backend, "list", "--prefix", "jobs:", "--json"]),
        );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let listed = json_lines(&stdout(&out));
    let keys: Vec<&str> = listed.iter().map(|l| l["key"].as_str().unwrap()).collect();
    assert_eq!(keys, ["jobs:a", "jobs:b"]);
    assert_eq!(listed[1]["holder"]["label"], "backup");
    assert_eq!(listed[1]["holder"]["pid"], second.0.id());
    for field in [
        "held",
        "ttl_ms",
        "fence",
        "storage_key",
        "holder",
        "waiters",
    ] {
        assert!(
            listed[0].get(field).is_some(),
            "{field} missing: {}",
            listed[0]
        );
    }

    let out = output(s.tenure().args(["--backend", backend, "list"]));
    let table = stdout(&out);
    assert_eq!(
        table.lines().count(),
        4,
        "a header and three leases: {table}"
    );
    assert!(
        table.contains("\"digest\"") && table.contains("mail"),
        "{table}"
    );

    // Released (SIGTERM ends the command, then tenure releases): the holder
    // goes with the lease.
    kill(first.pid(), Signal::SIGTERM).unwrap();
    first.wait(Duration::from_secs(15));
    let out = output(s.tenure().args([
        "--backend",
        backend,
        "run",
        "--key",
        "jobs:a",
        "--no-wait",
        "--",
        "true",
    ]));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let json = status_json(s, backend, "jobs:a");
    assert_eq!(
        (json["held"].clone(), json["holder"].clone()),
        (Value::Bool(false), Value::Null),
        "{json}"
    );
    [second, other]
}

/// Starts `tenure run --key KEY --wait 60s -- true` on `backend` and returns
/// it once `status --json` counts one waiter.
fn start_waiter(s: &Sandbox, backend: &str, key: &str) -> Running {
    let waiter = s.start(&[
        "--backend",
        backend,
        "run",
        "--key",
        key,
        "--wait",
        "60s",
        "--",
        "true",
    ]);
    let start = Instant::now();
    loop {
        let json = status_json(s, backend, key);
        if json["waiters"] == 1 {
            return waiter;
        }
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "no waiter counted: {json}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Ends held runs the way a user does (SIGTERM: the command ends, tenure
/// releases), so no command outlives the test.
fn stop(held: impl IntoIterator<Item = Running>) {
    for mut run in held {
        kill(run.pid(), Signal::SIGTERM).unwrap();
        run.wait(Duration::from_secs(15));
    }
}

/// `tenure ARGS` on a pseudo-terminal (`script(1)`): what the terminal
/// showed, stdout and stderr together.
fn on_a_terminal(s: &Sandbox, args: &str) -> String {
    let out = output(
        std::process::Command::new("script")
            .args(["-qec", args, "/dev/null"])
            .env("HOME", s.dir.path())
            .env_remove("TENURE_BACKEND")
            .env_remove("TENURE_DB")
            .stdin(std::process::Stdio::null()),
    );
    stdout(&out)
}

#[test]
fn sqlite_status_and_list_show_who_holds_it() {
    let s = Sandbox::new();
    let backend = s.sqlite();
    let held = shows_the_holder(&s, &backend);
    let json = status_json(&s, &backend, "jobs:b");
    // SQLite counts the places in the lease's waiting line: none yet.
    assert_eq!(json["waiters"], 0, "{json}");
    let out = output(
        s.tenure()
            .args(["--backend", &backend, "status", "--key", "jobs:b"]),
    );
    assert!(stdout(&out).contains("waiting  0"), "{}", stdout(&out));

    // A run waiting on a terminal names the holder in its live line, and in
    // its note when it gives up.
    let tenure = common::binary().display().to_string();
    let screen = on_a_terminal(
        &s,
        &format!("{tenure} --backend {backend} run --key jobs:b --wait 1500ms -- true"),
    );
    let pid = held[0].0.id();
    assert!(
        screen.contains("waiting for lease \"jobs:b\"") && screen.contains("; held by "),
        "{screen:?}"
    );
    assert!(
        screen.contains(&format!(" pid {pid} \"backup\" for ")),
        "{screen:?}"
    );

    // A wait stopped by a signal clears its live line before tenure exits.
    let screen = on_a_terminal(
        &s,
        &format!(
            "{tenure} --backend {backend} run --key jobs:b --wait 60s -- true & \
             sleep 1.5; kill -TERM $!; wait $!"
        ),
    );
    let drawn = screen.rfind("waiting for lease").expect("a live line");
    let cleared = screen.rfind("\r\x1b[2K").unwrap_or(0);
    assert!(cleared > drawn, "the live line stays: {screen:?}");

    // --watch on a terminal redraws a table with TTL bars until Ctrl-C.
    let screen = on_a_terminal(
        &s,
        &format!("{tenure} --backend {backend} list --watch & sleep 2.5; kill -INT $!; wait $!"),
    );
    assert!(screen.contains("\x1b[2J"), "redrawn: {screen:?}");
    assert!(
        screen.matches("jobs:b").count() >= 2,
        "refreshed: {screen:?}"
    );
    assert!(screen.contains("####"), "a TTL bar: {screen:?}");
    stop(held);
}

#[test]
fn redis_status_and_list_show_who_holds_it_and_who_waits_but_never_the_token() {
    let server = RedisServer::start();
    let s = Sandbox::new();
    let backend = server.url();
    let held = shows_the_holder(&s, &backend);

    // The lease key's value stays the plain owner token; no output shows it.
    let token = server.command("GET tenure:{jobs:b}").unwrap();
    let token = token
        .trim()
        .trim_start_matches('$')
        .lines()
        .last()
        .unwrap()
        .trim()
        .to_string();
    assert_eq!(token.len(), 32, "{token:?}");
    let holder_hash = server.command("HGETALL tenure:{jobs:b}:holder").unwrap();
    assert!(!holder_hash.contains(&token), "{holder_hash}");
    for args in [
        vec!["status", "--key", "jobs:b"],
        vec!["status", "--key", "jobs:b", "--json"],
        vec!["list"],
        vec!["list", "--json"],
    ] {
        let out = output(s.tenure().args(["--backend", &backend]).args(&args));
        let all = format!("{}{}", stdout(&out), stderr(&out));
        assert!(
            !all.contains(&token),
            "{args:?} shows the owner token: {all}"
        );
    }
    // Only lease keys are listed: not the fence counters or holder hashes.
    let out = output(s.tenure().args(["--backend", &backend, "list", "--json"]));
    let keys: Vec<String> = json_lines(&stdout(&out))
        .iter()
        .map(|l| l["key"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(keys, ["jobs:b", "mail"]);

    // A waiting process is counted (it subscribes to the release channel).
    assert_eq!(status_json(&s, &backend, "jobs:b")["waiters"], 0);
    let mut waiter = start_waiter(&s, &backend, "jobs:b");
    let out = output(
        s.tenure()
            .args(["--backend", &backend, "status", "--key", "jobs:b"]),
    );
    assert!(stdout(&out).contains("waiting  1"), "{}", stdout(&out));
    stop(held);
    assert!(waiter.wait(Duration::from_secs(15)).success());
}

/// A gate whose state cannot be read (another client wrote its key) makes
/// `status` fail naming the key, instead of calling the key free. (`list`
/// finds gates by their state and passes over a key that holds none.)
#[test]
fn redis_status_fails_on_an_unreadable_gate() {
    let server = RedisServer::start();
    let s = Sandbox::new();
    let backend = server.url();
    server.command("SET tenure:{pool}:permits junk").unwrap();
    for json in [false, true] {
        let mut args = vec!["--backend", backend.as_str(), "status", "--key", "pool"];
        if json {
            args.push("--json");
        }
        assert_one_line_error(&s, &args, 69, "tenure:{pool}:permits");
    }
    let listed = output(s.tenure().args(["--backend", &backend, "list"]));
    assert_eq!(listed.status.code(), Some(0), "{}", stderr(&listed));
}

/// `list --json` counts a held lease's waiters as `status --json` does, on
/// SQLite and etcd, which count the live places in the waiting line.
fn list_counts_the_waiters(backend: &str) {
    let s = Sandbox::new();
    let held = hold(&s, backend, "queue:a", "first");
    let mut waiter = start_waiter(&s, backend, "queue:a");
    let out = output(s.tenure().args(["--backend", backend, "list", "--json"]));
    let lines = json_lines(&stdout(&out));
    let listed = lines.iter().find(|l| l["key"] == "queue:a").unwrap();
    assert_eq!(listed["waiters"], 1, "{listed}");
    stop([held]);
    assert!(waiter.wait(Duration::from_secs(15)).success());
}

#[test]
fn sqlite_list_counts_the_waiters() {
    let s = Sandbox::new();
    list_counts_the_waiters(&s.sqlite());
}

#[test]
fn etcd_list_counts_the_waiters() {
    let etcd = EtcdCluster::single();
    list_counts_the_waiters(&etcd.url());
}

#[test]
fn bad_labels_and_a_watch_without_a_terminal_are_refused_in_one_line() {
    let s = Sandbox::new();
    let backend = s.sqlite();
    assert_one_line_error(
        &s,
        &[
            "--backend",
            &backend,
            "run",
            "--key",
            "k",
            "--label",
            "a\tb",
            "--",
            "true",
        ],
        64,
        "label",
    );
    let long = "x".repeat(300);
    assert_one_line_error(
        &s,
        &[
            "--backend",
            &backend,
            "run",
            "--key",
            "k",
            "--label",
            &long,
            "--",
            "true",
        ],
        64,
        "label",
    );
    // The test's stdout is a pipe, not a terminal.
    assert_one_line_error(
        &s,
        &["--backend", &backend, "list", "--watch"],
        64,
        "terminal",
    );
    // Nothing held: an empty list, a header only.
    let out = output(s.tenure().args(["--backend", &backend, "list", "--json"]));
    assert_eq!((out.status.code(), stdout(&out)), (Some(0), String::new()));
}
