//! What an uncontended acquire + release costs Redis, counted by the server
//! itself (`INFO commandstats`: the `EVALSHA` and every command run inside it).

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use warden::Warden;
use warden::redis::{RedisOptions, RedisStore};
use warden_test::RedisServer;

/// Total calls of every command but the ones this test itself sends.
fn calls(server: &RedisServer) -> u64 {
    let stats = server.command("INFO commandstats").unwrap();
    stats
        .lines()
        .filter_map(|l| l.strip_prefix("cmdstat_"))
        .filter(|l| !l.starts_with("info:") && !l.starts_with("config"))
        .filter_map(|l| {
            let calls = l.split("calls=").nth(1)?;
            calls.split(',').next()?.parse::<u64>().ok()
        })
        .sum()
}

#[tokio::test]
async fn an_acquire_and_release_costs_at_most_seven_commands() {
    let server = RedisServer::start();
    let backend = RedisStore::connect(
        &server.url(),
        RedisOptions::default().timeout(Duration::from_secs(2)),
    )
    .await
    .unwrap();
    let warden = Warden::with_backend(backend);
    // Warm up: connection setup and script loading are not per-cycle costs.
    let g = warden.lease("warm").try_acquire().await.unwrap();
    g.into_guard().unwrap().release().await.unwrap();
    server.command("CONFIG RESETSTAT").unwrap();

    const CYCLES: u64 = 1000;
    for i in 0..CYCLES {
        let lease = warden.lease(format!("cost-{i}"));
        let guard = lease.try_acquire().await.unwrap().into_guard().unwrap();
        guard.release().await.unwrap();
    }
    let per_cycle = calls(&server) as f64 / CYCLES as f64;
    // acquire: EVALSHA, SET NX PX, INCR; release: EVALSHA, GET, DEL, PUBLISH.
    assert!(
        per_cycle <= 7.0,
        "{per_cycle} Redis commands per acquire + release"
    );
}

/// The type checks left the fast path but still run when SET or INCR fails:
/// a fence counter of another type, or a negative one, is a clear error, and
/// neither leaves a lease key behind nor changes the counter.
#[tokio::test]
async fn a_fence_counter_that_is_not_a_fence_is_still_a_clear_error() {
    let server = RedisServer::start();
    let backend = RedisStore::connect(&server.url(), RedisOptions::default())
        .await
        .unwrap();
    let warden = Warden::with_backend(backend);
    server.command("RPUSH warden:{listed}:fence 1").unwrap();
    let err = warden.lease("listed").try_acquire().await.unwrap_err();
    assert!(matches!(err, warden::Error::WrongType { .. }), "{err}");
    assert_eq!(
        server.command("EXISTS warden:{listed}").unwrap().trim(),
        ":0"
    );

    server.command("SET warden:{negative}:fence -1").unwrap();
    let err = warden.lease("negative").try_acquire().await.unwrap_err();
    assert!(matches!(err, warden::Error::WrongType { .. }), "{err}");
    assert_eq!(
        server.command("EXISTS warden:{negative}").unwrap().trim(),
        ":0"
    );
    let counter = server.command("GET warden:{negative}:fence").unwrap();
    assert_eq!(
        counter.trim_end(),
        "$2\r\n-1",
        "the counter is left as it was"
    );
}
