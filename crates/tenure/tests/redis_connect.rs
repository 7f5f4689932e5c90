//! What connecting to one Redis master sends: the eviction-policy check is the
//! connect's only round trip (no `PING`, no `CLIENT SETINFO`), and where it
//! cannot be read a `PING` still checks the server before `connect` returns.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use tenure::Coordinator;
use tenure::redis::{RedisFencedStore, RedisOptions, RedisStore};
use tenure_test::RedisServer;

fn options() -> RedisOptions {
    RedisOptions::default().timeout(Duration::from_secs(2))
}

/// Calls of `command` in `INFO commandstats` (`config|get`, `ping`).
fn calls(server: &RedisServer, command: &str) -> u64 {
    let info = server.command("INFO commandstats").unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("cmdstat_{command}:calls=")))
        .and_then(|rest| rest.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

#[tokio::test]
async fn connect_reads_the_eviction_policy_and_sends_no_ping() {
    let server = RedisServer::start();
    server.command("CONFIG RESETSTAT").unwrap();
    RedisStore::connect(&server.url(), options()).await.unwrap();
    RedisFencedStore::connect(&server.url()).await.unwrap();
    let tenure = Coordinator::connect(&server.url()).await.unwrap();
    tenure.close().await;
    assert_eq!(calls(&server, "config|get"), 3);
    assert_eq!(calls(&server, "ping"), 0);
}

/// A field of `INFO stats` (`total_error_replies`).
fn stat(server: &RedisServer, field: &str) -> u64 {
    let info = server.command("INFO stats").unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// The policy check is all a connect sends: redis-rs's `CLIENT SETINFO`
/// would be a round trip of its own (answered with an error before Redis
/// 7.2, counted as a call after).
#[tokio::test]
async fn connect_sends_no_client_setinfo() {
    let server = RedisServer::start();
    server.command("CONFIG RESETSTAT").unwrap();
    let tenure = Coordinator::connect(&server.url()).await.unwrap();
    tenure.close().await;
    assert_eq!(calls(&server, "config|get"), 1);
    assert_eq!(calls(&server, "client|setinfo"), 0);
    assert_eq!(stat(&server, "total_error_replies"), 0);
}

#[tokio::test]
async fn without_config_a_ping_checks_the_server_at_connect() {
    let server = RedisServer::builder()
        .args(["--rename-command", "CONFIG", "", "--requirepass", "secret"])
        .start();
    // No password: CONFIG is unknown (refused), so the PING must still fail
    // the connect instead of a first lease call.
    let err = RedisStore::connect(&server.url(), options())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("NOAUTH"), "{err}");
    let url = format!("redis://:secret@127.0.0.1:{}", server.port());
    RedisStore::connect(&url, options()).await.unwrap();
}
