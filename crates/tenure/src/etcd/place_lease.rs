//! The etcd lease this process's places in waiting lines are bound to (see
//! `line.rs`): one per store handle, like etcd's own concurrency session.
//!
//! A lease of its own per place would be one keep-alive per waiter per
//! heartbeat (N × 4 a second) and a grant and an expiry (each a write etcd
//! commits to disk) per wait. Here the places share one lease of the place
//! lifetime, kept alive by whichever waiter's heartbeat finds it due: about
//! four keep-alives a second per process, however many wait. A killed
//! process stops refreshing it, so its places go within the place lifetime
//! plus etcd's expiry sweep, as before.
//!
//! A place that may have been left behind while the process lives on (a
//! first look whose fate is unknown, a leave that failed) would live as long
//! as the process's other waiters keep the lease alive: it is *swept* — its
//! key deleted in the background, at once and again after twice the call
//! budget, by when a request that wrote it has in practice been applied or
//! dropped ([`EtcdStore::sweep_place`]). (Ending
//! the shared lease instead would make every waiter of the process stand in
//! line again at once: a storm, under exactly the load that makes requests
//! time out.)

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Mutex;
use tokio::time::Instant;

use super::api::etcdserverpb::{RequestOp, TxnRequest};
use super::lease::{EtcdStore, Granted};
use crate::error::Result;
use crate::lease::PLACE_LIFETIME;

/// The places' lease of a store handle, shared by its clones.
#[derive(Default, Clone)]
pub(super) struct PlaceLease {
    current: Arc<Mutex<Option<Current>>>,
}

/// The lease new places are bound to, and when it was last refreshed.
#[derive(Debug, Clone, Copy)]
struct Current {
    granted: Granted,
    refreshed: Instant,
}

impl Current {
    /// Whether a keep-alive is due: more than a quarter of the TTL since the
    /// last one (a heartbeat, for a TTL of one second).
    fn due(&self) -> bool {
        let ttl = Duration::from_secs(u64::try_from(self.granted.ttl_secs).unwrap_or(0));
        self.refreshed.elapsed() >= ttl / 4
    }
}

impl EtcdStore {
    /// The lease to bind a new place to: the current one (kept alive first
    /// when that is due), or a fresh grant when there is none or it ended.
    pub(super) async fn place_lease(&self, key: &str) -> Result<Granted> {
        let mut current = self.places.current.lock().await;
        if let Some(c) = current.as_mut()
            && self.keep_current(key, c).await?
        {
            return Ok(c.granted);
        }
        let sent = Instant::now();
        let granted = self.grant("wait", key, PLACE_LIFETIME).await?;
        *current = Some(Current {
            granted,
            refreshed: sent,
        });
        Ok(granted)
    }

    /// Keeps the places' lease `id` alive when that is due (whichever
    /// waiter asks first sends the keep-alive); `false` when `id` is no
    /// longer the current lease (it ended, and the place with it: the
    /// waiter stands in line again).
    pub(super) async fn keep_places(&self, key: &str, id: i64) -> Result<bool> {
        let mut current = self.places.current.lock().await;
        let Some(c) = current.as_mut().filter(|c| c.granted.id == id) else {
            return Ok(false);
        };
        if self.keep_current(key, c).await? {
            return Ok(true);
        }
        *current = None;
        Ok(false)
    }

    /// Keeps the places' lease `c` alive when that is due; `false` when
    /// etcd no longer knows it (it ended).
    async fn keep_current(&self, key: &str, c: &mut Current) -> Result<bool> {
        if !c.due() {
            return Ok(true);
        }
        let sent = Instant::now();
        let alive = self.keep_alive("wait", key, c.granted.id).await?;
        if alive {
            c.refreshed = sent;
        }
        Ok(alive)
    }

    /// Deletes the place `place_key` in the background, at once and again
    /// after twice the call budget (a request that wrote it and timed out
    /// may still be applied after the first delete); `key` names it in
    /// errors.
    pub(super) fn sweep_place(&self, key: &str, place_key: &str) {
        let (store, key, place_key) = (self.clone(), key.to_string(), place_key.to_string());
        let later = 2 * self.conn.timeout();
        tokio::spawn(async move {
            for pause in [Duration::ZERO, later] {
                tokio::time::sleep(pause).await;
                let delete = TxnRequest::new().and_then([RequestOp::delete(place_key.as_str())]);
                if let Err(e) = store.txn("leave", &key, delete).await {
                    tracing::debug!(key, error = %e, "sweeping a place left in line failed");
                }
            }
        });
    }
}
