//! `tenure limit` end to end on the embedded SQLite store.

#![allow(clippy::unwrap_used)]

mod common;

use common::{Sandbox, output, stderr, stdout};
use tenure_test::RedisServer;

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
            .tenure()
            .env("TENURE_BACKEND", urls.join(","))
            .args(["limit", "--key", "k", "--rate", "1/s"]),
    );
    assert_eq!(out.status.code(), Some(64), "{}", stderr(&out));
    assert!(stderr(&out).contains("not supported"), "{}", stderr(&out));
}

/// `tenure limit --rate 10/1m --algorithm fixed-window` 15 times: exactly the
/// first 10 are allowed. If a minute boundary falls inside the run (seen as
/// `reset_after_ms` going up), the window started over legitimately: the run is
/// repeated on a fresh key, which no boundary can interrupt again for a minute.
fn fifteen_calls_admit_ten(sandbox: &Sandbox, backend: &[&str]) {
    for attempt in 0..2 {
        let key = format!("reports-{attempt}");
        let mut allowed = 0;
        let mut remaining = Vec::new();
        let mut resets = Vec::new();
        for _ in 0..15 {
            let out = output(sandbox.tenure().args(backend).args([
                "limit",
                "--key",
                &key,
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
            let reset = json["reset_after_ms"].as_u64().unwrap();
            assert!(reset <= 60_000, "{json}");
            resets.push(reset);
            remaining.push(json["remaining"].as_u64().unwrap());
        }
        if resets.windows(2).any(|w| w[1] > w[0]) {
            continue; // the window rolled over mid-run
        }
        assert_eq!(allowed, 10, "remaining after each call: {remaining:?}");
        assert_eq!(remaining, [9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 0, 0, 0, 0, 0]);
        return;
    }
    panic!("two minute boundaries within two short runs");
}

#[test]
fn human_output_and_bad_input() {
    let sandbox = Sandbox::new();
    let limit =
        |extra: &[&str]| output(sandbox.tenure().args(["limit", "--key", "api"]).args(extra));
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
