//! The scenario's two outcomes, asserted against a real redis-server.

#![allow(clippy::unwrap_used)]

use lease_example::{Resource, run};
use tenure_test::RedisServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_rejects_the_stale_write_and_keeps_b_s_work() {
    let server = RedisServer::start();
    let out = run(&server.url(), Resource::Fenced).await.unwrap();
    assert!(out.fences.1 > out.fences.0);
    assert!(!out.stale_write_applied, "{:#?}", out.timeline);
    assert_eq!(out.final_value, "200 (B)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_fencing_the_stale_write_destroys_b_s_work() {
    let server = RedisServer::start();
    let out = run(&server.url(), Resource::Unfenced).await.unwrap();
    assert!(out.stale_write_applied, "{:#?}", out.timeline);
    assert_eq!(out.final_value, "100 (A, stale)");
}
