#![allow(clippy::unwrap_used)]
//! The `bank` binary: flags, start-up errors, and one request end to end.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use tenure_test::{PostgresServer, RedisServer, free_port};

const BANK: &str = env!("CARGO_BIN_EXE_bank");

#[test]
fn bad_flags_exit_with_a_usage_error() {
    let valid = [
        "--listen",
        "127.0.0.1:0",
        "--backend",
        "r",
        "--database-url",
        "p",
    ];
    let with = |extra: &[&'static str]| -> Vec<&'static str> {
        valid.iter().chain(extra).copied().collect()
    };
    let mut nowhere = valid.to_vec();
    nowhere[1] = "nowhere";
    for args in [
        vec!["--listen", "127.0.0.1:0", "--backend", "redis://x"],
        nowhere,
        with(&["--limit", "0/1m"]),
        with(&["--trusted-proxy", "1.2.3.4/40"]),
        with(&["--forwarded-header", "x-real-ip"]),
    ] {
        let out = Command::new(BANK)
            .args(&args)
            .env_remove("DATABASE_URL")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(!out.stderr.is_empty());
    }
}

#[test]
fn unreachable_stores_are_reported_not_panicked() {
    let port = free_port();
    let out = Command::new(BANK)
        .args([
            "--listen",
            "127.0.0.1:0",
            "--database-url",
            "postgres://x@127.0.0.1:1/x",
        ])
        .args(["--backend", &format!("redis://127.0.0.1:{port}")])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--backend"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_serves_requests() {
    let redis = tokio::task::spawn_blocking(RedisServer::start)
        .await
        .unwrap();
    let pg = tokio::task::spawn_blocking(PostgresServer::start)
        .await
        .unwrap();
    let port = free_port();
    let mut child = Command::new(BANK)
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(["--backend", &redis.url(), "--database-url", &pg.url()])
        .args(["--limit", "5/1m"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let first_line = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).map(|_| line)
    });
    let line = tokio::time::timeout(Duration::from_secs(30), first_line)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(line.contains(&format!("127.0.0.1:{port}")), "{line}");
    let client = reqwest::Client::new();
    let res = client
        .post(format!("http://127.0.0.1:{port}/accounts/a/deposit"))
        .body(r#"{"amount": 7}"#)
        .send()
        .await
        .unwrap();
    let status = res.status();
    let policy = res.headers().get("ratelimit-policy").cloned();
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(status, 200);
    assert_eq!(policy.unwrap(), "\"default\";q=5;w=60");
}

#[test]
fn the_database_url_comes_from_the_environment_and_its_password_never_shows() {
    const SECRET: &str = "hunter2-s3cret";
    let redis = RedisServer::start();
    let port = free_port();
    let url = format!("postgres://bank:{SECRET}@127.0.0.1:{port}/bank");
    // No --database-url: DATABASE_URL is used (the connection is refused, so
    // start-up fails at the database, after the flags were accepted).
    let out = Command::new(BANK)
        .args(["--listen", "127.0.0.1:0", "--backend", &redis.url()])
        .env("DATABASE_URL", &url)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("--database-url"), "{stderr}");
    assert!(!stderr.contains(SECRET), "{stderr}");
    assert!(!String::from_utf8_lossy(&out.stdout).contains(SECRET));
    // The flag wins over the environment.
    let out = Command::new(BANK)
        .args(["--listen", "127.0.0.1:0", "--backend", &redis.url()])
        .args([
            "--database-url",
            "host=127.0.0.1 port=1 user=x password=flag-s3cret",
        ])
        .env("DATABASE_URL", &url)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        !stderr.contains("flag-s3cret") && !stderr.contains(SECRET),
        "{stderr}"
    );
    // Malformed connection strings: the error names the problem, not the
    // password.
    for bad in [
        format!("postgres://u:{SECRET}@127.0.0.1:badport/db"),
        format!("postgres://u:{SECRET}@[::1/db"),
        format!("host=127.0.0.1 port=1 password={SECRET} bogus=1"),
        format!("host=127.0.0.1 password='{SECRET}"),
        format!("postgres://u@127.0.0.1:{port}/db?password={SECRET}&x=y"),
        format!("postgres://u@127.0.0.1:{port}/db?sslpassword={SECRET}"),
    ] {
        let out = Command::new(BANK)
            .args(["--listen", "127.0.0.1:0", "--backend", &redis.url()])
            .args(["--database-url", &bad])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(stderr.contains("--database-url"), "{stderr}");
        assert!(!stderr.contains(SECRET), "{stderr}");
    }
    // --help names the variable but not its value; neither do usage errors.
    for args in [&["--help"][..], &["--listen", "nowhere"]] {
        let out = Command::new(BANK)
            .args(args)
            .env("DATABASE_URL", &url)
            .output()
            .unwrap();
        let all = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!all.contains(SECRET), "{args:?}: {all}");
        if args == ["--help"] {
            assert!(all.contains("DATABASE_URL"), "{all}");
        }
    }
}
