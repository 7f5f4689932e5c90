//! The in-process lease backend.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::watch;

use crate::clock::{Clock, Moment, SystemClock};
use crate::error::{Error, Result};
use crate::fence::{Fence, FloorUnit, next_fence, wall_clock_us};
use crate::lease::{
    AcquireReply, ExtendReply, Holder, HolderInfo, LeaseStatus, LeaseStore, ReleaseOutcome,
    ReleaseWatch, valid_until,
};
use crate::token::OwnerToken;

/// Leases held in this process's memory, with the same semantics as Redis: TTLs,
/// owner tokens, fence counters and release notifications.
///
/// Time is the backend's [`Clock`]: the [`SystemClock`] by default, or a
/// [`FakeClock`](crate::clock::FakeClock) given to [`with_clock`](Self::with_clock),
/// which expires leases (and passes the holders' deadlines) without sleeping.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> tenure::Result<()> {
/// use std::time::Duration;
/// use tenure::Coordinator;
///
/// let tenure = Coordinator::memory();
/// let lease = tenure.lease("jobs:nightly").ttl(Duration::from_secs(5));
/// let guard = lease.try_acquire().await?.expect("free");
/// assert!(lease.try_acquire().await?.is_none()); // held
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct MemoryStore {
    inner: Arc<Mutex<State>>,
    clock: Arc<dyn Clock>,
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::with_clock(SystemClock)
    }
}

#[derive(Debug, Default)]
struct State {
    leases: HashMap<String, Entry>,
    fences: HashMap<String, u64>,
    releases: HashMap<String, watch::Sender<u64>>,
}

#[derive(Debug)]
struct Entry {
    token: OwnerToken,
    expires_at: Moment,
    /// What the holder recorded, and when it acquired the lease.
    holder: Option<(HolderInfo, Moment)>,
}

impl State {
    /// The live entry for `key`, dropping it first if it has expired.
    fn live(&mut self, key: &str, now: Moment) -> Option<&mut Entry> {
        if self.leases.get(key).is_some_and(|e| e.expires_at <= now) {
            self.leases.remove(key);
        }
        self.leases.get_mut(key)
    }

    /// The status of `key` at `now` (an expired entry is dropped first).
    fn status(&mut self, key: &str, now: Moment) -> LeaseStatus {
        let fence = self.fences.get(key).copied().map(Fence::new);
        let waiters = self
            .releases
            .get(key)
            .map(|tx| u64::try_from(tx.receiver_count()).unwrap_or(u64::MAX));
        let mut status = LeaseStatus::free(key.to_string(), fence);
        status.waiters = waiters;
        if let Some(entry) = self.live(key, now) {
            status.held = true;
            status.ttl_left = Some(entry.expires_at.saturating_duration_since(now));
            status.holder = entry.holder.as_ref().map(|(info, since)| {
                Holder::new(info.clone(), Some(now.saturating_duration_since(*since)))
            });
        }
        status
    }
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty store whose leases expire on `clock`, and whose holders'
    /// deadlines are read on it too.
    pub fn with_clock(clock: impl Clock) -> Self {
        MemoryStore {
            inner: Arc::default(),
            clock: Arc::new(clock),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding this lock cannot leave the maps half-updated
        // (every update is a single insert or remove), so poisoning is ignored.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[async_trait]
impl LeaseStore for MemoryStore {
    async fn try_acquire(
        &self,
        key: &str,
        token: &OwnerToken,
        ttl: Duration,
        holder: Option<&HolderInfo>,
    ) -> Result<AcquireReply> {
        let now = self.clock.now();
        let mut state = self.lock();
        if let Some(entry) = state.live(key, now) {
            return Ok(AcquireReply::Held {
                ttl_left: Some(entry.expires_at.saturating_duration_since(now)),
            });
        }
        // Floored by the process's wall clock, so a store made after this
        // one was dropped (a restarted process) still hands out greater fences.
        let last = state.fences.get(key).copied();
        let fence = next_fence(last, wall_clock_us(), FloorUnit::Micros).ok_or_else(|| {
            Error::WrongType {
                key: key.to_string(),
                detail: "the fence counter is at its maximum".into(),
            }
        })?;
        state.leases.insert(
            key.to_string(),
            Entry {
                token: token.clone(),
                expires_at: now + ttl,
                holder: holder.map(|h| (h.clone(), now)),
            },
        );
        state.fences.insert(key.to_string(), fence);
        Ok(AcquireReply::Acquired {
            fence: Fence::new(fence),
            valid_until: valid_until(now, ttl),
        })
    }

    async fn extend(&self, key: &str, token: &OwnerToken, ttl: Duration) -> Result<ExtendReply> {
        let now = self.clock.now();
        let mut state = self.lock();
        match state.live(key, now) {
            Some(entry) if entry.token == *token => {
                entry.expires_at = now + ttl;
                Ok(ExtendReply::Extended {
                    valid_until: valid_until(now, ttl),
                })
            }
            _ => Ok(ExtendReply::NotHeld),
        }
    }

    async fn release(&self, key: &str, token: &OwnerToken) -> Result<ReleaseOutcome> {
        let now = self.clock.now();
        let mut state = self.lock();
        match state.live(key, now) {
            Some(entry) if entry.token == *token => {
                state.leases.remove(key);
                if let Some(tx) = state.releases.get(key) {
                    tx.send_modify(|n| *n += 1);
                }
                Ok(ReleaseOutcome::Released)
            }
            _ => Ok(ReleaseOutcome::NotHeld),
        }
    }

    async fn holder_token(&self, key: &str) -> Result<Option<OwnerToken>> {
        let now = self.clock.now();
        Ok(self.lock().live(key, now).map(|entry| entry.token.clone()))
    }

    async fn status(&self, key: &str) -> Result<LeaseStatus> {
        let now = self.clock.now();
        Ok(self.lock().status(key, now))
    }

    async fn list(&self, prefix: &str) -> Result<Vec<(String, LeaseStatus)>> {
        let now = self.clock.now();
        let mut state = self.lock();
        let mut keys: Vec<String> = state
            .leases
            .keys()
            .filter(|k| k.starts_with(prefix))
            .cloned()
            .collect();
        keys.sort();
        Ok(keys
            .into_iter()
            .map(|k| {
                let status = state.status(&k, now);
                (k, status)
            })
            .filter(|(_, s)| s.held)
            .collect())
    }

    async fn watch_releases(&self, key: &str) -> ReleaseWatch {
        let mut state = self.lock();
        // Senders of keys nobody watches any more are pruned here, so the map
        // stays as large as the number of keys being waited on.
        state.releases.retain(|_, tx| tx.receiver_count() > 0);
        let tx = state
            .releases
            .entry(key.to_string())
            .or_insert_with(|| watch::channel(0).0);
        ReleaseWatch::from_channel(tx.subscribe(), None)
    }

    fn describe(&self) -> String {
        "memory:".to_string()
    }

    fn kind(&self) -> std::borrow::Cow<'static, str> {
        std::borrow::Cow::Borrowed("memory")
    }

    fn is_shared(&self) -> bool {
        false
    }

    fn clock(&self) -> &dyn Clock {
        &*self.clock
    }
}
