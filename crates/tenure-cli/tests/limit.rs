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

/// Runs `tenure limit --key KEY ARGS… --json` in `sandbox`: the exit status
/// and the JSON printed.
fn limit_json(sandbox: &Sandbox, key: &str, args: &[&str]) -> (Option<i32>, serde_json::Value) {
    let out = output(
        sandbox
            .tenure()
            .args(["limit", "--key", key, "--json"])
            .args(args),
    );
    let json = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|_| panic!("{args:?}: not JSON: {} {}", stdout(&out), stderr(&out)));
    (out.status.code(), json)
}

#[test]
fn a_new_rate_keeps_the_state_of_the_key() {
    let s = Sandbox::new();
    let (code, _) = limit_json(&s, "plan", &["--rate", "3/1h", "--cost", "3"]);
    assert_eq!(code, Some(0));
    assert_eq!(limit_json(&s, "plan", &["--rate", "3/1h"]).0, Some(75));
    // Upgraded: the 3 units taken still count against the 5.
    let (code, json) = limit_json(&s, "plan", &["--rate", "5/1h"]);
    assert_eq!(code, Some(0), "{json}");
    assert_eq!(
        (json["limit"].as_u64(), json["remaining"].as_u64()),
        (Some(5), Some(1))
    );
    // Downgraded again: 4 taken, over the 3.
    assert_eq!(limit_json(&s, "plan", &["--rate", "3/1h"]).0, Some(75));
}

#[test]
fn shadow_says_what_would_happen_and_takes_nothing() {
    let s = Sandbox::new();
    let rate = ["--rate", "2/1h", "--algorithm", "sliding-log"];
    for _ in 0..2 {
        let (code, json) = limit_json(&s, "dark", &[&rate[..], &["--shadow"]].concat());
        assert_eq!(code, Some(0));
        assert_eq!(
            (json["shadow"].as_bool(), json["would_allow"].as_bool()),
            (Some(true), Some(true))
        );
        assert_eq!(json["remaining"], 2, "{json}: nothing taken");
    }
    assert_eq!(
        limit_json(&s, "dark", &[&rate[..], &["--cost", "2"]].concat()).0,
        Some(0)
    );
    let (code, json) = limit_json(&s, "dark", &[&rate[..], &["--shadow"]].concat());
    assert_eq!(code, Some(0), "a shadow check never refuses");
    assert_eq!(json["would_allow"], false, "{json}");
    assert!(json["retry_after_ms"].as_u64().unwrap() > 0, "{json}");
    let out = output(
        s.tenure()
            .args(["limit", "dark"])
            .args(rate)
            .arg("--shadow"),
    );
    assert!(
        stdout(&out).starts_with("shadow: would limit; 0 of 2 left"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn reserve_waits_for_the_booked_slot_or_exits_75() {
    let s = Sandbox::new();
    let rate = ["--rate", "2/s", "--burst", "1"];
    assert_eq!(limit_json(&s, "slot", &rate).0, Some(0));
    let started = std::time::Instant::now();
    let (code, json) = limit_json(
        &s,
        "slot",
        &[&rate[..], &["--reserve", "--max-delay", "5"]].concat(),
    );
    assert_eq!(code, Some(0), "{json}");
    let wait = json["wait_ms"].as_u64().unwrap();
    assert!(wait > 0 && wait <= 500, "{json}");
    assert!(
        started.elapsed().as_millis() >= u128::from(wait),
        "it waited before exiting"
    );
    // The next slot is half a second away: beyond 100 ms, nothing is booked.
    let (code, json) = limit_json(
        &s,
        "slot",
        &[&rate[..], &["--reserve", "--max-delay", "0.1"]].concat(),
    );
    assert_eq!(code, Some(75), "{json}");
    assert_eq!(json["allowed"], false);
    let out = output(s.tenure().args(["limit", "slot", "--reserve"]).args(rate));
    assert_eq!(
        out.status.code(),
        Some(64),
        "--reserve needs --max-delay: {}",
        stderr(&out)
    );
}

#[test]
fn refund_gives_units_back_up_to_the_capacity() {
    let s = Sandbox::new();
    for alg in [
        "gcra",
        "token-bucket",
        "sliding-log",
        "sliding-window",
        "fixed-window",
    ] {
        // Per day: no window boundary falls inside the test by chance.
        let rate = ["--rate", "2/1d", "--algorithm", alg];
        let key = format!("refund-{alg}");
        assert_eq!(
            limit_json(&s, &key, &[&rate[..], &["--cost", "2"]].concat()).0,
            Some(0)
        );
        let (code, json) = limit_json(&s, &key, &[&rate[..], &["--refund", "1"]].concat());
        assert_eq!(code, Some(0), "{alg}: {json}");
        assert_eq!(
            (json["refunded"].as_u64(), json["remaining"].as_u64()),
            (Some(1), Some(1)),
            "{alg}"
        );
        let (_, json) = limit_json(&s, &key, &[&rate[..], &["--refund", "10"]].concat());
        assert_eq!(json["remaining"], 2, "{alg}: never above the capacity");
    }
}

#[test]
fn reset_forgets_the_key() {
    let s = Sandbox::new();
    let rate = ["--rate", "1/1d"];
    assert_eq!(limit_json(&s, "once-a-day", &rate).0, Some(0));
    assert_eq!(limit_json(&s, "once-a-day", &rate).0, Some(75));
    let (code, json) = limit_json(&s, "once-a-day", &["--reset"]);
    assert_eq!((code, json["reset"].as_bool()), (Some(0), Some(true)));
    assert_eq!(limit_json(&s, "once-a-day", &rate).0, Some(0));
}

#[test]
fn the_new_flags_work_on_redis_too() {
    let server = RedisServer::start();
    let s = Sandbox::new();
    let url = server.url();
    let on = |args: &[&str]| {
        let mut all = vec!["--backend", url.as_str(), "limit", "--key", "r", "--json"];
        all.extend_from_slice(args);
        output(s.tenure().args(&all))
    };
    assert_eq!(on(&["--rate", "1/1h"]).status.code(), Some(0));
    assert_eq!(on(&["--rate", "2/1h"]).status.code(), Some(0), "upgraded");
    assert_eq!(on(&["--rate", "2/1h", "--shadow"]).status.code(), Some(0));
    assert_eq!(on(&["--rate", "2/1h"]).status.code(), Some(75));
    assert_eq!(
        on(&["--rate", "2/1h", "--refund", "1"]).status.code(),
        Some(0)
    );
    assert_eq!(
        on(&["--rate", "2/1h", "--reserve", "--max-delay", "1"])
            .status
            .code(),
        Some(0)
    );
    assert_eq!(on(&["--reset"]).status.code(), Some(0));
    assert_eq!(
        on(&["--rate", "1/1h", "--cost", "1"]).status.code(),
        Some(0)
    );
}

#[test]
fn conflicting_modes_are_usage_errors() {
    let s = Sandbox::new();
    for bad in [
        &["--rate", "1/s", "--shadow", "--refund", "1"][..],
        &["--rate", "1/s", "--reset", "--refund", "1"],
        &["--rate", "1/s", "--max-delay", "1"],
        &["--rate", "1/s", "--refund", "0"],
        &[][..],
    ] {
        let out = output(s.tenure().args(["limit", "k"]).args(bad));
        assert_eq!(out.status.code(), Some(64), "{bad:?}: {}", stderr(&out));
    }
}
