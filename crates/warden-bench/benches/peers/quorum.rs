//! Quorums of 3 and 5 masters (all on this host) against one of them alone:
//! 16 tasks cycle acquire + release on keys of their own; then every node is
//! scanned for lease keys a release left behind.

use std::sync::Arc;
use std::time::Duration;

use warden::Warden;
use warden::quorum::{QuorumOptions, QuorumStore};
use warden::redis::{RedisOptions, RedisStore};

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
        let warden = if n == 1 {
            Warden::with_backend(
                RedisStore::connect(&urls[0], RedisOptions::default())
                    .await
                    .unwrap(),
            )
        } else {
            Warden::with_backend(QuorumStore::new(&urls[..n], QuorumOptions::default()).unwrap())
        };
        let leases: Arc<Vec<_>> = Arc::new(
            (0..TASKS)
                .map(|t| warden.lease(format!("q{n}:{t}")).ttl(TTL))
                .collect(),
        );
        let cycles = rate(TASKS, run_for, move |t| {
            let leases = Arc::clone(&leases);
            async move {
                // A quorum may refuse an uncontended acquire when a node is
                // slow to answer; that is a cycle without a grant.
                if let Some(g) = leases[t].try_acquire().await.unwrap().into_guard() {
                    g.release().await.unwrap();
                }
            }
        })
        .await;
        out.add(format!("quorum.{n}"), cycles);
        if n > 1 {
            // A release answers once a majority has; give the rest a moment.
            tokio::time::sleep(SETTLE).await;
            let mut left = 0;
            for node in &nodes[..n] {
                left += node
                    .keys(&format!("warden:{{q{n}:*"))
                    .await
                    .iter()
                    .filter(|k| k.ends_with('}'))
                    .count();
            }
            out.add(format!("quorum.{n}.left"), left as f64);
        }
    }
}
