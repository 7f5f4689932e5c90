//! `warden limit` end to end on the embedded SQLite store.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{Sandbox, output, stderr, stdout};
use warden_test::RedisServer;

/// Sleeps past the next minute boundary when fewer than `need` remain in this
/// one, so a fixed one-minute window cannot start over during the test. (The
/// store's limiter clock is anchored on the wall clock.)
fn stay_within_one_minute(need: Duration) {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    let into = Duration::from_millis(u64::try_from(now.as_millis() % 60_000).unwrap());
    if Duration::from_secs(60) - into < need {
        std::thread::sleep(Duration::from_secs(60) - into + Duration::from_millis(200));
    }
}

#[test]
fn fifteen_calls_at_ten_per_minute_admit_exactly_ten_on_sqlite() {
    fifteen_calls_admit_ten(&Sandbox::new(), &[]);
}

#[test]
fn fifteen_calls_at_ten_per_minute_admit_exactly_ten_on_redis() {
    let server = RedisServer::start();
    fifteen_calls_admit_ten(&Sandbox::new(), &["--backend", &server.url()]);
}

#[test]
fn a_quorum_has_no_shared_limit_store_and_says_so() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let sandbox = Sandbox::new();
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let out = output(
        sandbox
            .warden()
            .env("WARDEN_BACKEND", urls.join(","))
            .args(["limit", "--key", "k", "--rate", "1/s"]),
    );
    assert_eq!(out.status.code(), Some(64), "{}", stderr(&out));
    assert!(stderr(&out).contains("not supported"), "{}", stderr(&out));
}

/// `warden limit --rate 10/1m --algorithm fixed-window` 15 times: exactly the
/// first 10 are allowed.
fn fifteen_calls_admit_ten(sandbox: &Sandbox, backend: &[&str]) {
    stay_within_one_minute(Duration::from_secs(20));
    let mut allowed = 0;
    let mut remaining = Vec::new();
    for _ in 0..15 {
        let out = output(sandbox.warden().args(backend).args([
            "limit",
            "--key",
            "reports",
            "--rate",
            "10/1m",
            "--algorithm",
            "fixed-window",
            "--json",
        ]));
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        match out.status.code() {
            Some(0) => {
                allowed += 1;
                assert_eq!(json["allowed"], true);
                assert!(json["retry_after_ms"].is_null(), "{json}");
            }
            Some(75) => {
                assert_eq!(json["allowed"], false);
                let retry = json["retry_after_ms"].as_u64().unwrap();
                assert!(retry > 0 && retry <= 60_000, "{json}");
            }
            other => panic!("exit {other:?}: {}", stderr(&out)),
        }
        assert_eq!(json["limit"], 10);
        assert!(json["reset_after_ms"].as_u64().unwrap() <= 60_000, "{json}");
        remaining.push(json["remaining"].as_u64().unwrap());
    }
    assert_eq!(allowed, 10, "remaining after each call: {remaining:?}");
    assert_eq!(remaining, [9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 0, 0, 0, 0, 0]);
}

#[test]
fn human_output_and_bad_input() {
    let sandbox = Sandbox::new();
    let limit =
        |extra: &[&str]| output(sandbox.warden().args(["limit", "--key", "api"]).args(extra));
    let out = limit(&["--rate", "2/1h", "--algorithm", "token-bucket"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).starts_with("allowed: 1 of 2 left"),
        "{}",
        stdout(&out)
    );
    assert_eq!(
        limit(&["--rate", "2/1h", "--algorithm", "token-bucket"])
            .status
            .code(),
        Some(0)
    );
    let out = limit(&["--rate", "2/1h", "--algorithm", "token-bucket"]);
    assert_eq!(out.status.code(), Some(75));
    assert!(
        stdout(&out).starts_with("limited: 0 of 2 left; retry after"),
        "{}",
        stdout(&out)
    );
    assert!(
        limit(&["--rate", "2/1h", "--algorithm", "token-bucket", "-q"])
            .stdout
            .is_empty()
    );

    let out = limit(&["--rate", "10/1m", "--cost", "11"]);
    assert_eq!(out.status.code(), Some(65), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("exceeds the limiter's capacity of 10"),
        "{}",
        stderr(&out)
    );
    assert_eq!(stderr(&out).lines().count(), 1);
    // --burst raises the capacity of gcra.
    assert_eq!(
        limit(&["--rate", "10/1m", "--burst", "20", "--cost", "11"])
            .status
            .code(),
        Some(0)
    );

    for bad in [
        &["--rate", "10"][..],
        &["--rate", "0/1m"],
        &["--rate", "10/1x"],
        &["--rate", "10/1m", "--algorithm", "leaky"],
        &["--rate", "10/1m", "--cost", "0"],
        &["--rate", "10/1m", "--burst", "0"],
    ] {
        let out = limit(bad);
        assert_eq!(out.status.code(), Some(64), "{bad:?}: {}", stderr(&out));
        assert_eq!(stderr(&out).lines().count(), 1, "{bad:?}: {}", stderr(&out));
    }
}
