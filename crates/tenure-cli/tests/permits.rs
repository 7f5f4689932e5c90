//! `tenure run --permits N` end to end: twenty contenders, never more than N
//! inside (Redis, SQLite, etcd); permits of SIGKILLed holders come back after
//! their TTL and not before; lowering N from 5 to 2 under load never admits a
//! sixth and settles at 2 (Redis, SQLite).

#![allow(clippy::unwrap_used)]

mod common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{Running, Sandbox, output, pid_in, stderr, timed_runs, wait_for_file_of};
use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use tenure_test::RedisServer;

fn never_more_than_three(backend: &str) {
    let sandbox = Sandbox::new();
    let shapes = vec![vec!["--key", "pool", "--permits", "3"]; 20];
    let mut events = Vec::new();
    let mut fences = Vec::new();
    for (fence, start, end) in timed_runs(&sandbox, backend, "0.2", &shapes) {
        fences.push(fence);
        events.push((start, 1i32));
        events.push((end, -1i32));
    }
    // Ends sort before starts at the same instant.
    events.sort();
    let (mut inside, mut most) = (0, 0);
    for (_, delta) in events {
        inside += delta;
        most = most.max(inside);
    }
    assert!(most <= 3, "{most} inside at once");
    assert!(most >= 2, "the permits were used concurrently ({most})");
    fences.sort_unstable();
    fences.dedup();
    assert_eq!(fences.len(), 20, "every permit has its own fence");
}

#[test]
fn twenty_contenders_on_redis() {
    let server = RedisServer::start();
    never_more_than_three(&server.url());
}

#[test]
fn twenty_contenders_on_etcd() {
    let etcd = tenure_test::EtcdCluster::single();
    never_more_than_three(&etcd.url());
}

#[test]
fn twenty_contenders_on_sqlite() {
    let sandbox = Sandbox::new();
    never_more_than_three(&sandbox.sqlite());
}

/// `--permits 0` is a usage error, one line naming `--permits`, and a
/// permit held before it is still held.
#[test]
fn zero_permits_is_a_usage_error_and_leaves_held_permits_alone() {
    let sandbox = Sandbox::new();
    let db = sandbox.sqlite();
    let marker = sandbox.path("holder");
    let script = format!("echo $$ > {}; sleep 60", marker.display());
    let mut holder = sandbox.start(&[
        "--backend",
        &db,
        "run",
        "--key",
        "k",
        "--permits",
        "1",
        "--",
        "sh",
        "-c",
        &script,
    ]);
    pid_in(&marker);
    common::assert_one_line_error(
        &sandbox,
        &[
            "--backend",
            &db,
            "run",
            "--key",
            "k",
            "--permits",
            "0",
            "--",
            "true",
        ],
        64,
        "--permits",
    );
    let busy = output(
        sandbox
            .tenure()
            .args(["--backend", &db, "run", "--key", "k", "--permits", "1"])
            .args(["--no-wait", "--", "true"]),
    );
    assert_eq!(
        busy.status.code(),
        Some(75),
        "the permit is still held: {}",
        stderr(&busy)
    );
    kill(holder.pid(), Signal::SIGTERM).unwrap();
    holder.wait(Duration::from_secs(10));
}

/// TTL of the permits in the crash test: renewed every second, so the last
/// renewal before a kill is at most a second old and the permit lives at
/// least two more seconds on the store.
const CRASH_TTL: Duration = Duration::from_secs(3);

/// `tenure run --permits 2 --no-wait`: whether it got a permit (exit 0) or
/// found both held (75).
fn try_permit(sandbox: &Sandbox, backend: &str) -> Option<i32> {
    output(
        sandbox
            .tenure()
            .args([
                "--backend",
                backend,
                "run",
                "--key",
                "pool",
                "--permits",
                "2",
            ])
            .args(["--no-wait", "--", "true"]),
    )
    .status
    .code()
}

fn killed_holders_permits_come_back_after_their_ttl(backend: &str) {
    let sandbox = Sandbox::new();
    let mut holders: Vec<(Running, i32)> = (0..2)
        .map(|i| {
            let marker = sandbox.path(&format!("holder.{i}"));
            let script = format!("echo $$ > {}; sleep 60", marker.display());
            let run = Running(
                sandbox
                    .tenure()
                    .args(["--backend", backend, "run", "--key", "pool"])
                    .args(["--permits", "2", "--ttl", "3s", "--", "sh", "-c", &script])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .unwrap(),
            );
            (run, pid_in(&marker))
        })
        .collect();
    // Both permits are taken while the holders run.
    assert_eq!(try_permit(&sandbox, backend), Some(75));
    // A crash: each tenure and its command's group are killed at once.
    for (run, cmd) in &mut holders {
        kill(run.pid(), Signal::SIGKILL).unwrap();
        let _ = killpg(Pid::from_raw(*cmd), Signal::SIGKILL);
        let _ = run.0.wait();
    }
    let killed = Instant::now();
    let killed_ns = now_ns();
    // Not before their TTL: for a second after the kill (the permits live at
    // least two more), both are still held.
    let mut probes = 0;
    while killed.elapsed() < Duration::from_secs(1) {
        assert_eq!(
            try_permit(&sandbox, backend),
            Some(75),
            "a permit came back {:?} after its holder was killed",
            killed.elapsed()
        );
        probes += 1;
    }
    assert!(probes >= 1);
    // After their TTL: two waiting newcomers both get in, each within the
    // TTL plus a retry interval of the kill.
    let mut newcomers: Vec<Running> = (0..2)
        .map(|i| {
            let marker = sandbox.path(&format!("again.{i}"));
            let script = format!("date +%s%N > {}; sleep 60", marker.display());
            sandbox.start(&[
                "--backend",
                backend,
                "run",
                "--key",
                "pool",
                "--permits",
                "2",
                "--wait",
                "20s",
                "--",
                "sh",
                "-c",
                &script,
            ])
        })
        .collect();
    for (i, newcomer) in newcomers.iter_mut().enumerate() {
        let marker = sandbox.path(&format!("again.{i}"));
        let entered: u128 = wait_for_file_of(&marker, Duration::from_secs(20), newcomer)
            .trim()
            .parse()
            .unwrap();
        let after = Duration::from_nanos(u64::try_from(entered - killed_ns).unwrap());
        assert!(
            after >= CRASH_TTL * 2 / 3 - Duration::from_millis(500),
            "a permit came back {after:?} after the kill"
        );
        assert!(
            after < CRASH_TTL + Duration::from_secs(2),
            "a permit came back only {after:?} after the kill"
        );
    }
    // Two permits, two holders: nobody else fits.
    assert_eq!(try_permit(&sandbox, backend), Some(75));
    for run in &mut newcomers {
        kill(run.pid(), Signal::SIGTERM).unwrap();
        run.wait(Duration::from_secs(10));
    }
}

fn now_ns() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

#[test]
fn killed_holders_permits_come_back_after_their_ttl_on_redis() {
    let server = RedisServer::start();
    killed_holders_permits_come_back_after_their_ttl(&server.url());
}

#[test]
fn killed_holders_permits_come_back_after_their_ttl_on_etcd() {
    let etcd = tenure_test::EtcdCluster::single();
    killed_holders_permits_come_back_after_their_ttl(&etcd.url());
}

#[test]
fn killed_holders_permits_come_back_after_their_ttl_on_sqlite() {
    let sandbox = Sandbox::new();
    killed_holders_permits_come_back_after_their_ttl(&sandbox.sqlite());
}

/// One permit's run as its command recorded it: the N it was admitted
/// against, its fence, and when the command started and ended (ns).
#[derive(Debug, Clone, Copy)]
struct Stay {
    n: u32,
    fence: u64,
    start: u128,
    end: u128,
}

fn stays(sandbox: &Sandbox, loops: usize) -> Vec<Stay> {
    let mut all = Vec::new();
    for i in 0..loops {
        let text = std::fs::read_to_string(sandbox.path(&format!("stays.{i}"))).unwrap_or_default();
        for line in text.lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            // A line cut short (the loop was stopped mid-write) is ignored.
            if f.len() != 4 {
                continue;
            }
            all.push(Stay {
                n: f[0].parse().unwrap(),
                fence: f[1].parse().unwrap(),
                start: f[2].parse().unwrap(),
                end: f[3].parse().unwrap(),
            });
        }
    }
    all
}

/// The most stays inside at once among `stays` (ends sort before starts at
/// the same instant).
fn most_inside<'a>(stays: impl IntoIterator<Item = &'a Stay>) -> i32 {
    let mut events: Vec<(u128, i32)> = stays
        .into_iter()
        .flat_map(|s| [(s.start, 1), (s.end, -1)])
        .collect();
    events.sort();
    let (mut inside, mut most) = (0, 0);
    for (_, delta) in events {
        inside += delta;
        most = most.max(inside);
    }
    most
}

/// The most stays inside at once at any instant after `after`.
fn most_inside_after(stays: &[Stay], after: u128) -> i32 {
    let mut most = stays
        .iter()
        .filter(|s| s.start <= after && s.end > after)
        .count();
    for s in stays.iter().filter(|s| s.start > after) {
        let inside = stays
            .iter()
            .filter(|o| o.start <= s.start && o.end > s.start)
            .count();
        most = most.max(inside);
    }
    i32::try_from(most).unwrap()
}

/// Eight processes loop on `tenure run --permits N` (each stay 300 ms) while
/// N goes from 5 to 2: never more than 5 inside, a newcomer admitted against
/// 2 only while fewer than 2 held, and once the holders admitted against 5
/// are gone, never more than 2 — yet 2 are used.
fn lowering_five_to_two_under_load(backend: &str) {
    const LOOPS: usize = 8;
    let sandbox = Sandbox::new();
    std::fs::write(sandbox.path("permits"), "5").unwrap();
    let inner = sandbox.path("inner.sh");
    std::fs::write(
        &inner,
        "s=$(date +%s%N); sleep 0.3; e=$(date +%s%N); echo \"$N $TENURE_FENCE $s $e\" >> \"$STAYS\"\n",
    )
    .unwrap();
    let dir = sandbox.dir.path().display().to_string();
    let looping = format!(
        "while [ ! -e {dir}/stop ]; do N=$(cat {dir}/permits); export N; \
         \"$TENURE\" --backend \"$BACKEND\" run --key pool --permits $N --ttl 5s --wait 60s \
         -- sh {inner} || echo \"exit $?\" >> {dir}/failures; done",
        inner = inner.display()
    );
    let mut loops: Vec<Running> = (0..LOOPS)
        .map(|i| {
            Running(
                std::process::Command::new("sh")
                    .args(["-c", &looping])
                    .env("HOME", sandbox.dir.path())
                    .env_remove("TENURE_BACKEND")
                    .env_remove("TENURE_DB")
                    .env("TENURE", common::binary())
                    .env("BACKEND", backend)
                    .env("STAYS", sandbox.path(&format!("stays.{i}")))
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .unwrap(),
            )
        })
        .collect();
    // Under load at 5 until some 20 stays are done, then at 2 until some 20
    // more are (a bound on each phase keeps a stuck run from hanging the test).
    let phase = |n: u32| {
        let start = Instant::now();
        while stays(&sandbox, LOOPS).iter().filter(|s| s.n == n).count() < 20 {
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "the loops made no progress"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    phase(5);
    std::fs::write(sandbox.path("permits"), "2").unwrap();
    phase(2);
    std::fs::write(sandbox.path("stop"), "").unwrap();
    for l in &mut loops {
        l.wait(Duration::from_secs(60));
    }
    let failures = std::fs::read_to_string(sandbox.path("failures")).unwrap_or_default();
    assert!(failures.is_empty(), "some runs failed: {failures}");

    let all = stays(&sandbox, LOOPS);
    let old: Vec<&Stay> = all.iter().filter(|s| s.n == 5).collect();
    let new: Vec<&Stay> = all.iter().filter(|s| s.n == 2).collect();
    assert!(
        old.len() >= 20 && new.len() >= 20,
        "{} at 5, {} at 2",
        old.len(),
        new.len()
    );
    // Never a sixth, and the five permits were all used.
    assert_eq!(most_inside(&all), 5, "at most 5, and 5 used under load");
    // A newcomer admitted against 2 found fewer than 2 held: of the stays
    // acquired before it (lower fence), at most one was still inside when it
    // started (its command starts after its acquisition, theirs end before
    // their release, so this undercounts, never overcounts, who held then).
    for x in &new {
        let before: Vec<&Stay> = all
            .iter()
            .filter(|y| y.fence < x.fence && y.end > x.start)
            .collect();
        assert!(
            before.len() <= 1,
            "{x:?} admitted against 2 while {before:?} held"
        );
    }
    // Once the last holder admitted against 5 is gone, it settles at 2.
    let old_gone = old.iter().map(|s| s.end).max().unwrap();
    let later = new.iter().filter(|s| s.start > old_gone).count();
    assert!(later >= 5, "{later} stays after the old holders left");
    assert_eq!(
        most_inside_after(&all, old_gone),
        2,
        "at most 2 once the old holders left, and 2 used"
    );
    let mut fences: Vec<u64> = all.iter().map(|s| s.fence).collect();
    fences.sort_unstable();
    fences.dedup();
    assert_eq!(fences.len(), all.len(), "every permit has its own fence");
}

#[test]
fn lowering_permits_from_five_to_two_under_load_on_redis() {
    let server = RedisServer::start();
    lowering_five_to_two_under_load(&server.url());
}

#[test]
fn lowering_permits_from_five_to_two_under_load_on_sqlite() {
    let sandbox = Sandbox::new();
    lowering_five_to_two_under_load(&sandbox.sqlite());
}

/// `tenure status` and `tenure list` show a semaphore's permit holders as
/// they show a lease's holder (`status` exits 0 while one is held), in text
/// and JSON, on SQLite and on Redis.
#[test]
fn status_and_list_show_permit_holders() {
    let server = RedisServer::start();
    let sandbox = Sandbox::new();
    for backend in [sandbox.sqlite(), server.url()] {
        let release = sandbox.path("release");
        let _ = std::fs::remove_file(&release);
        let held = sandbox.path("held");
        let _ = std::fs::remove_file(&held);
        let script = format!(
            "echo $$ > {h}; while [ ! -e {r} ]; do sleep 0.02; done",
            h = held.display(),
            r = release.display()
        );
        let args = [
            "--backend",
            &backend,
            "run",
            "--permits",
            "2",
            "--label",
            "pool job",
            "pool",
            "--",
            "sh",
            "-c",
            &script,
        ];
        let mut holder = sandbox.start(&args);
        wait_for_file_of(&held, Duration::from_secs(10), &mut holder);
        let tenure =
            |args: &[&str]| output(sandbox.tenure().args(["--backend", &backend]).args(args));
        let text = tenure(&["status", "pool"]);
        assert_eq!(text.status.code(), Some(0), "{backend}: {}", stderr(&text));
        let shown = common::stdout(&text);
        assert!(
            shown.contains("permit") && shown.contains("pool job"),
            "{backend}: {shown}"
        );
        let json = tenure(&["status", "--json", "pool"]);
        let json: serde_json::Value = serde_json::from_str(common::stdout(&json).trim()).unwrap();
        let permits = json["semaphore"]["permits"]
            .as_array()
            .expect("permit holders");
        assert_eq!(permits.len(), 1, "{backend}: {json}");
        assert_eq!(permits[0]["label"], "pool job", "{backend}: {json}");
        let listed = common::stdout(&tenure(&["list"]));
        assert!(listed.contains("pool [permit]"), "{backend}: {listed}");
        let lines = common::stdout(&tenure(&["list", "--json"]));
        assert!(
            lines
                .lines()
                .any(|l| l.contains("\"permits\"") && l.contains("\"key\":\"pool\"")),
            "{backend}: {lines}"
        );
        std::fs::write(&release, "").unwrap();
        assert_eq!(holder.wait(Duration::from_secs(10)).code(), Some(0));
        let after = tenure(&["status", "pool"]);
        assert_eq!(after.status.code(), Some(75), "{backend}: released");
    }
}
