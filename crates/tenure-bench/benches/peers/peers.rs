//! The lease clients measured side by side, all on the same redis-server.

use std::sync::Arc;
use std::time::Duration;

use rslock::LockManager;
use tenure::Coordinator;
use tenure::lease::Lease;

use crate::python::Python;
use crate::raw::Raw;

/// TTL of every peer's lease: long enough never to expire during a run.
pub const TTL: Duration = Duration::from_secs(10);

/// One client of each kind, connected once and reused every round.
pub struct Peers {
    pub url: String,
    pub tenure: Coordinator,
    pub raw: Raw,
    pub rslock: Arc<LockManager>,
    pub python: Option<Python>,
}

impl Peers {
    pub async fn connect(url: &str, python: Option<Python>) -> Self {
        Peers {
            url: url.to_string(),
            tenure: Coordinator::connect(url).await.unwrap(),
            raw: Raw::connect(url).await,
            rslock: Arc::new(LockManager::new(vec![url.to_string()])),
            python,
        }
    }

    /// tenure leases on `keys`, one per task.
    pub fn leases(&self, keys: impl Iterator<Item = String>) -> Arc<Vec<Lease>> {
        Arc::new(
            keys.map(|k| self.tenure.lease(k).watchdog(false).ttl(TTL))
                .collect(),
        )
    }
}

/// A per-task owner token for the raw client.
pub fn token(task: usize) -> String {
    format!("raw-owner-{task}")
}
