//! Quorums of 3 and 5 masters (all on this host) against one of them alone:
//! 16 tasks cycle acquire + release on keys of their own; then every node is
//! scanned for lease keys a release left behind.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tenure::Coordinator;
use tenure::quorum::{QuorumOptions, QuorumStore};
use tenure::redis::{RedisOptions, RedisStore};

use crate::peers::TTL;
use crate::samples::Samples;
use crate::server_stats::ServerStats;
use crate::tasks::rate;

pub const TASKS: usize = 16;
/// How long after the last release the nodes are scanned.
const SETTLE: Duration = Duration::from_secs(1);

/// Records `quorum.{1,3,5}` in cycles/s and `quorum.{3,5}.left` in lease keys
/// found on any node `SETTLE` after the last release returned.
pub async fn run(urls: &[String], nodes: &[ServerStats], run_for: Duration, out: &mut Samples) {
    for n in [1usize, 3, 5] {
        let tenure = if n == 1 {
            Coordinator::with_backend(
                RedisStore::connect(&urls[0], RedisOptions::default())
                    .await
                    .unwrap(),
            )
        } else {
            Coordinator::with_backend(
                QuorumStore::new(&urls[..n], QuorumOptions::default()).unwrap(),
            )
        };
        let errors = Arc::new(AtomicU64::new(0));
        let leases: Arc<Vec<_>> = Arc::new(
            (0..TASKS)
                .map(|t| tenure.lease(format!("q{n}:{t}")).watchdog(false).ttl(TTL))
                .collect(),
        );
        let errs = Arc::clone(&errors);
        let cycles = rate(TASKS, run_for, move |t| {
            let (leases, errs) = (Arc::clone(&leases), Arc::clone(&errs));
            async move {
                // On a loaded host a node may miss its timeout and a quorum
                // be unavailable: counted, not fatal (the keys it may have
                // left are counted below).
                let released = match leases[t].attempt().await {
                    Ok(got) => match got.into_guard() {
                        Some(g) => g.release().await.map(|_| ()),
                        None => Ok(()),
                    },
                    Err(e) => Err(e),
                };
                if released.is_err() {
                    errs.fetch_add(1, Ordering::Relaxed);
                }
            }
        })
        .await;
        out.add(format!("quorum.{n}"), cycles);
        out.add(
            format!("quorum.{n}.errors"),
            errors.load(Ordering::Relaxed) as f64,
        );
        if n > 1 {
            // A release answers once a majority has; give the rest a moment.
            tokio::time::sleep(SETTLE).await;
            let mut left = 0;
            for node in &nodes[..n] {
                left += node
                    .keys(&format!("tenure:{{q{n}:*"))
                    .await
                    .iter()
                    .filter(|k| k.ends_with('}'))
                    .count();
            }
            out.add(format!("quorum.{n}.left"), left as f64);
        }
    }
}
