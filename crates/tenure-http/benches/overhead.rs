//! What the middleware costs per request: a bare service, the layer over an
//! in-process limiter, and the layer over a real redis-server (sliding log,
//! the bank's algorithm). Prints means and ratios; asserts nothing.
//!
//! `cargo bench -p tenure-http --bench overhead`

#![allow(clippy::unwrap_used)]

use std::convert::Infallible;
use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use http::{Request, Response};
use tenure::limit::{Algorithm, Limiter, Quota};
use tenure_http::{PeerAddr, PeerIp, RateLimitLayer};
use tower::{Service, ServiceBuilder, ServiceExt, service_fn};

async fn hello(_req: Request<String>) -> Result<Response<String>, Infallible> {
    Ok(Response::new(String::new()))
}

fn request(i: u32) -> Request<String> {
    let mut req = Request::new(String::new());
    // 256 clients, so the limiter keeps several keys warm.
    let peer = format!("192.0.2.{}:1000", i % 256);
    req.extensions_mut().insert(PeerAddr(peer.parse().unwrap()));
    req
}

/// Mean time per request over `n` sequential requests.
async fn measure<S>(mut svc: S, n: u32) -> Duration
where
    S: Service<Request<String>>,
    S::Error: std::fmt::Debug,
{
    for i in 0..n / 10 {
        svc.ready().await.unwrap().call(request(i)).await.unwrap(); // warm-up
    }
    let started = Instant::now();
    for i in 0..n {
        svc.ready().await.unwrap().call(request(i)).await.unwrap();
    }
    started.elapsed() / n
}

fn layered(limiter: Limiter) -> impl Service<Request<String>, Error = Infallible> {
    ServiceBuilder::new()
        .layer(RateLimitLayer::new(limiter, PeerIp))
        .service(service_fn(hello))
}

/// The raw limiter call inside `tokio::time::timeout`, as the layer bounds it.
async fn timed_checks(limiter: &Limiter, n: u32) -> Duration {
    let started = Instant::now();
    for i in 0..n {
        let key = format!("ip:192.0.2.{}", i % 256);
        let _ = tokio::time::timeout(Duration::from_millis(250), limiter.check(&key))
            .await
            .unwrap()
            .unwrap();
    }
    started.elapsed() / n
}

/// The raw limiter call, without the layer.
async fn raw_checks(limiter: &Limiter, n: u32) -> Duration {
    let started = Instant::now();
    for i in 0..n {
        let _ = limiter
            .check(&format!("ip:192.0.2.{}", i % 256))
            .await
            .unwrap();
    }
    started.elapsed() / n
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let quota = Quota::per_minute(NonZeroU32::new(1_000_000).unwrap());
    let small = Quota::per_minute(NonZeroU32::new(1_000).unwrap());
    let server = tokio::task::spawn_blocking(tenure_test::RedisServer::start)
        .await
        .unwrap();
    let tenure = tenure::Coordinator::connect(&server.url()).await.unwrap();
    let (n, redis_n) = (20_000, 3_000);
    // Five interleaved rounds, best of each: the machine is shared and noisy.
    let mut best = [Duration::MAX; 6];
    for _ in 0..5 {
        let round = [
            measure(service_fn(hello), n).await,
            measure(layered(Limiter::local(quota, Algorithm::Gcra)), n).await,
            raw_checks(&tenure.limiter(quota, Algorithm::Gcra), redis_n).await,
            measure(layered(tenure.limiter(quota, Algorithm::Gcra)), redis_n).await,
            measure(
                layered(tenure.limiter(small, Algorithm::SlidingLog)),
                redis_n,
            )
            .await,
            timed_checks(&tenure.limiter(quota, Algorithm::Gcra), redis_n).await,
        ];
        for (b, r) in best.iter_mut().zip(round) {
            *b = (*b).min(r);
        }
    }
    let [bare, local, raw_check, redis_gcra, redis_log, timed] = best;
    println!("per request (sequential, one connection, best of 5 rounds):");
    println!("  bare service                  {bare:>10.1?}");
    println!("  layer + local GCRA            {local:>10.1?}");
    println!("  limiter.check on Redis (GCRA) {raw_check:>10.1?}");
    println!("  same inside tokio timeout     {timed:>10.1?}");
    println!("  layer + Redis GCRA            {redis_gcra:>10.1?}");
    println!("  layer + Redis sliding log     {redis_log:>10.1?}  (1000/min)");
    let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64().max(1e-12);
    println!(
        "layer + Redis GCRA / bare Redis check: {:.2}x  (the middleware's own share)",
        ratio(redis_gcra, raw_check)
    );
    println!(
        "layer + local GCRA overhead over bare: {:.1?}",
        local.saturating_sub(bare)
    );
    println!(
        "Redis sliding log / Redis GCRA: {:.2}x",
        ratio(redis_log, redis_gcra)
    );
}
