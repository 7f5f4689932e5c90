//! Measures the Redis memory of one limiter key per algorithm with
//! `MEMORY USAGE key SAMPLES 0` and prints a table (run with
//! `cargo nextest run -p tenure --test limit_memory_usage --no-capture`);
//! the README quotes it. The assertions only check the ordering the docs
//! claim, never exact byte counts (they vary with Redis versions).

mod limit_common;

use limit_common::*;
use tenure::Coordinator;
use tenure::limit::{Algorithm, Quota};
use tenure_test::RedisServer;

#[tokio::test]
async fn redis_memory_per_key() {
    let server = RedisServer::start();
    let w = Coordinator::connect(&server.url()).await.expect("connect");
    let mut c = redis::Client::open(server.url())
        .expect("client")
        .get_multiplexed_async_connection()
        .await
        .expect("connection");
    let mut rows = Vec::new();
    // One client key per row: a key's state is per algorithm, so rows that
    // share an algorithm must not share a key.
    for (row, (alg, limit, used)) in [
        (Algorithm::Gcra, 100, 50),
        (Algorithm::TokenBucket, 100, 50),
        (Algorithm::FixedWindow, 100, 50),
        (Algorithm::SlidingWindow, 100, 50),
        (Algorithm::SlidingLog, 10, 10),
        (Algorithm::SlidingLog, 100, 100),
        (Algorithm::SlidingLog, 1000, 1000),
    ]
    .into_iter()
    .enumerate()
    {
        let user_key = format!("ip:203.0.113.{row}");
        let user_key = user_key.as_str();
        let l = w.limiter(Quota::per_hour(nz(limit)), alg);
        assert!(l.check_n(user_key, used).await.expect("check").allowed);
        let key = l.policies().expect("policy")[0].storage_key("tenure:", user_key);
        let bytes: u64 = redis::cmd("MEMORY")
            .arg("USAGE")
            .arg(&key)
            .arg("SAMPLES")
            .arg(0)
            .query_async(&mut c)
            .await
            .expect("memory usage");
        let encoding: String = redis::cmd("OBJECT")
            .arg("ENCODING")
            .arg(&key)
            .query_async(&mut c)
            .await
            .expect("encoding");
        rows.push((alg, used, key.len(), encoding, bytes));
    }
    let version = server.command("INFO server").expect("info");
    let version = version
        .lines()
        .find(|l| l.starts_with("redis_version:"))
        .unwrap_or("redis_version:?")
        .to_string();
    println!(
        "\nRedis memory per limiter key ({version}, key name {} bytes)",
        rows[0].2
    );
    println!("| algorithm | units logged | encoding | MEMORY USAGE (bytes) |");
    println!("|---|---|---|---|");
    for (alg, used, _, encoding, bytes) in &rows {
        println!("| {alg} | {used} | {encoding} | {bytes} |");
    }
    let of = |alg: Algorithm, used: u32| {
        rows.iter()
            .find(|r| r.0 == alg && r.1 == used)
            .map(|r| r.4)
            .expect("measured")
    };
    let gcra = of(Algorithm::Gcra, 50);
    assert!(gcra < of(Algorithm::TokenBucket, 50), "GCRA is the leanest");
    assert!(gcra < of(Algorithm::FixedWindow, 50));
    assert!(of(Algorithm::SlidingWindow, 50) < of(Algorithm::SlidingLog, 100));
    assert!(of(Algorithm::SlidingLog, 1000) > 10 * of(Algorithm::SlidingLog, 10));
}
