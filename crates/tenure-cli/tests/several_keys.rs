//! `tenure run -k A -k B …`: 20 processes asking for random overlapping sets
//! in random orders on SQLite and on a real redis-server — a key never has two
//! holders (checked by the commands themselves with `mkdir`, and by the order
//! of the fences they log), nobody deadlocks (every run finishes within its
//! --wait), nothing is left held — plus `--max-hold` and what `list` shows.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use common::{Sandbox, output, stderr, stdout};
use tenure_test::RedisServer;
use tenure_test::nemesis::Rng;

const KEYS: [&str; 6] = ["ka", "kb", "kc", "kd", "ke", "kf"];

/// The command each run holds its keys for: takes a directory per key (an
/// existing one means another holder is inside), logs `KEY FENCE`, sleeps a
/// little, gives the directories back.
const CRITICAL: &str = r#"
d="$1"
set -- $TENURE_FENCES
for k in $TENURE_KEYS; do
  mkdir "$d/$k.held" 2>/dev/null || { echo "overlap on $k" >&2; exit 99; }
  echo "$k $1" >> "$d/fences"
  shift
done
sleep 0.02
for k in $TENURE_KEYS; do rmdir "$d/$k.held"; done
"#;

/// 2 to 4 distinct keys in a random order.
fn random_set(rng: &mut Rng) -> Vec<&'static str> {
    let mut keys = KEYS.to_vec();
    let n = 2 + usize::try_from(rng.below(3)).unwrap();
    for i in 0..n {
        let j = i + usize::try_from(rng.below((KEYS.len() - i) as u64)).unwrap();
        keys.swap(i, j);
    }
    keys.truncate(n);
    keys
}

/// 20 threads, each running `rounds` `tenure run`s one after the other.
fn twenty_processes(s: &Sandbox, backend: &str, rounds: usize) {
    let seed = u64::from(std::process::id());
    eprintln!("seed {seed}");
    let mut rng = Rng::new(seed);
    let dir = s.path("held");
    std::fs::create_dir_all(&dir).unwrap();
    let started = Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..20 {
            let mut rng = rng.fork();
            let dir = dir.display().to_string();
            scope.spawn(move || {
                for _ in 0..rounds {
                    let mut args = vec!["--backend", backend, "run", "-w", "60", "-t", "10"];
                    for key in random_set(&mut rng) {
                        args.extend(["-k", key]);
                    }
                    args.extend(["--", "sh", "-c", CRITICAL, "sh", &dir]);
                    let out = output(s.tenure().args(&args));
                    assert!(out.status.success(), "{args:?}: {}", stderr(&out));
                }
            });
        }
    });
    eprintln!("{rounds} rounds of 20 processes in {:?}", started.elapsed());
    // The fences each key was held with, in the order the holders wrote
    // them: strictly increasing.
    let log = std::fs::read_to_string(dir.join("fences")).unwrap();
    let mut last: HashMap<&str, u64> = HashMap::new();
    let mut lines = 0;
    for line in log.lines() {
        let (key, fence) = line.split_once(' ').unwrap();
        let fence: u64 = fence.parse().unwrap();
        let before = last.insert(key, fence).unwrap_or(0);
        assert!(fence > before, "{key}: fence {fence} after {before}");
        lines += 1;
    }
    assert!(lines >= 20 * rounds * 2, "{lines} holds logged");
    // Nothing left held.
    let list = output(s.tenure().args(["--backend", backend, "list", "--json"]));
    assert!(list.status.success(), "{}", stderr(&list));
    assert_eq!(stdout(&list).trim(), "", "left held");
}

#[test]
fn twenty_processes_of_overlapping_sets_on_sqlite() {
    let s = Sandbox::new();
    twenty_processes(&s, &s.sqlite(), 3);
}

#[test]
fn twenty_processes_of_overlapping_sets_on_redis() {
    let server = RedisServer::start();
    let s = Sandbox::new();
    twenty_processes(&s, &server.url(), 3);
}

#[test]
fn max_hold_stops_the_command_with_76() {
    let s = Sandbox::new();
    let db = s.sqlite();
    let started = Instant::now();
    let out = output(s.tenure().args([
        "--backend",
        &db,
        "run",
        "-k",
        "mh:a",
        "-k",
        "mh:b",
        "--max-hold",
        "1",
        "--",
        "sleep",
        "60",
    ]));
    let took = started.elapsed();
    assert_eq!(out.status.code(), Some(76), "{}", stderr(&out));
    assert!(stderr(&out).contains("--max-hold 1s"), "{}", stderr(&out));
    // SIGTERM at the maximum hold: long before the command's own end.
    assert!(took < Duration::from_secs(30), "{took:?}");
    assert!(took >= Duration::from_secs(1), "{took:?}");
    for key in ["mh:a", "mh:b"] {
        let status = output(s.tenure().args(["--backend", &db, "status", key]));
        assert_eq!(status.status.code(), Some(75), "{key} left held");
    }
    // A command that ends within its maximum hold ends as usual.
    let out = output(s.tenure().args([
        "--backend",
        &db,
        "run",
        "mh:a",
        "--max-hold",
        "30",
        "--",
        "true",
    ]));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

#[test]
fn list_and_status_show_each_key_of_a_set_with_its_holder() {
    let s = Sandbox::new();
    let db = s.sqlite();
    let marker = s.path("started");
    let script = format!("touch {}; sleep 60", marker.display());
    let mut running = s.start(&[
        "--backend",
        &db,
        "run",
        "-k",
        "set:b",
        "-k",
        "set:a",
        "-l",
        "nightly",
        "--",
        "sh",
        "-c",
        &script,
    ]);
    let until = Instant::now() + Duration::from_secs(30);
    while !marker.exists() {
        assert!(Instant::now() < until, "the command did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    let list = output(s.tenure().args(["--backend", &db, "list", "--json"]));
    let rows: Vec<serde_json::Value> = stdout(&list)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let keys: Vec<&str> = rows.iter().map(|r| r["key"].as_str().unwrap()).collect();
    assert_eq!(keys, ["set:a", "set:b"]);
    let pid = i64::from(running.pid().as_raw());
    for row in &rows {
        assert_eq!(row["holder"]["label"], "nightly", "{row}");
        assert_eq!(row["holder"]["pid"].as_i64(), Some(pid), "{row}");
    }
    let status = output(s.tenure().args(["--backend", &db, "status", "set:b"]));
    assert!(
        stdout(&status).contains("\"nightly\""),
        "{}",
        stdout(&status)
    );
    nix::sys::signal::kill(running.pid(), nix::sys::signal::Signal::SIGTERM).unwrap();
    running.wait(Duration::from_secs(30));
}
