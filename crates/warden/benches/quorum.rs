//! What a quorum costs: uncontended acquire + release on one key, on one Redis
//! master and on quorums of 3 and 5 masters (all real redis-server processes on
//! loopback), and on 3 masters with one frozen (SIGSTOP) or one slowed by a proxy.
//!
//! Prints the median and 99th percentile of each set-up and its ratio to the
//! single master measured in the same run. Run with
//! `cargo bench -p warden --bench quorum`.

#![allow(clippy::unwrap_used, missing_docs)]

use std::time::Duration;

use tokio::time::Instant;
use warden::Warden;
use warden::backend::{RedisBackend, RedisOptions};
use warden::quorum::{QuorumBackend, QuorumOptions};
use warden_test::{Proxy, RedisServer};

const ROUNDS: usize = 2000;

/// Median and p99 of acquire + release, after a warm-up.
async fn measure(warden: &Warden) -> (Duration, Duration) {
    let lease = warden.lease("bench").ttl(Duration::from_secs(10));
    for _ in 0..100 {
        let g = lease.try_acquire().await.unwrap().into_guard().unwrap();
        g.release().await.unwrap();
    }
    let mut times = Vec::with_capacity(ROUNDS);
    for _ in 0..ROUNDS {
        let start = Instant::now();
        let g = lease.try_acquire().await.unwrap().into_guard().unwrap();
        g.release().await.unwrap();
        times.push(start.elapsed());
    }
    times.sort();
    (times[ROUNDS / 2], times[ROUNDS * 99 / 100])
}

fn quorum(urls: Vec<String>) -> Warden {
    let options = QuorumOptions::default().node_timeout(Duration::from_millis(500));
    Warden::with_backend(QuorumBackend::new(urls, options).unwrap())
}

#[tokio::main]
async fn main() {
    let servers: Vec<RedisServer> = (0..5).map(|_| RedisServer::start()).collect();
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let single = Warden::with_backend(
        RedisBackend::connect(&urls[0], RedisOptions::default())
            .await
            .unwrap(),
    );
    let (base, base99) = measure(&single).await;
    println!("uncontended acquire + release, median (p99) of {ROUNDS}:");
    println!("  one master              {base:>10.2?} ({base99:.2?})  1.00x");
    let report = |name: &str, (m, p): (Duration, Duration)| {
        println!(
            "  {name:<23} {m:>10.2?} ({p:.2?})  {:.2}x",
            m.as_secs_f64() / base.as_secs_f64()
        );
    };
    report("quorum of 3", measure(&quorum(urls[..3].to_vec())).await);
    report("quorum of 5", measure(&quorum(urls.clone())).await);

    let proxy = Proxy::start(&servers[2].addr());
    let slow = quorum(vec![urls[0].clone(), urls[1].clone(), proxy.url()]);
    measure(&slow).await; // connect through the proxy while it is fast
    proxy.delay(Duration::from_millis(50));
    report("3, one 50 ms slower", measure(&slow).await);

    let frozen = quorum(urls[..3].to_vec());
    measure(&frozen).await;
    servers[2].pause();
    report("3, one frozen", measure(&frozen).await);
    servers[2].resume();
}
