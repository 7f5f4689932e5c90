//! Expiring semaphores in this process's memory.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::watch;

use crate::clock::{Clock, Moment, SystemClock};
use crate::error::Result;
use crate::fence::Fence;
use crate::lease::{AcquireReply, ExtendReply, ReleaseOutcome, ReleaseWatch, valid_until};
use crate::semaphore::SemaphoreStore;
use crate::token::OwnerToken;

/// [`SemaphoreStore`] in this process's memory.
#[derive(Debug, Clone, Default)]
pub struct MemorySemaphores {
    inner: Arc<Mutex<HashMap<String, Sem>>>,
}

#[derive(Debug, Default)]
struct Sem {
    fence: u64,
    holders: Vec<(OwnerToken, Moment)>,
    released: Option<watch::Sender<u64>>,
}

impl MemorySemaphores {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn with<T>(&self, key: &str, f: impl FnOnce(&mut Sem, Moment) -> T) -> T {
        // Every update completes under the lock; poisoning cannot leave a
        // semaphore half-updated.
        let mut map = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let now = SystemClock.now();
        let sem = map.entry(key.to_string()).or_default();
        sem.holders.retain(|(_, expires)| *expires > now);
        f(sem, now)
    }
}

#[async_trait]
impl SemaphoreStore for MemorySemaphores {
    async fn acquire_permit(
        &self,
        key: &str,
        token: &OwnerToken,
        ttl: Duration,
        permits: NonZeroU32,
    ) -> Result<AcquireReply> {
        Ok(self.with(key, |sem, now| {
            if sem.holders.len() >= permits.get() as usize {
                let soonest = sem.holders.iter().map(|(_, e)| *e).min();
                return AcquireReply::Held {
                    ttl_left: soonest.map(|e| e.saturating_duration_since(now)),
                };
            }
            // Floored by the process's wall clock, like a lease's fence.
            let last = (sem.fence > 0).then_some(sem.fence);
            sem.fence =
                crate::fence::next_fence(last, crate::fence::wall_clock_us()).unwrap_or(u64::MAX);
            sem.holders.push((token.clone(), now + ttl));
            AcquireReply::Acquired {
                fence: Fence::new(sem.fence),
                valid_until: valid_until(now, ttl),
            }
        }))
    }

    async fn extend_permit(
        &self,
        key: &str,
        token: &OwnerToken,
        ttl: Duration,
    ) -> Result<ExtendReply> {
        Ok(self.with(key, |sem, now| {
            match sem.holders.iter_mut().find(|(t, _)| t == token) {
                Some(entry) => {
                    entry.1 = now + ttl;
                    ExtendReply::Extended {
                        valid_until: valid_until(now, ttl),
                    }
                }
                None => ExtendReply::NotHeld,
            }
        }))
    }

    async fn release_permit(&self, key: &str, token: &OwnerToken) -> Result<ReleaseOutcome> {
        Ok(self.with(key, |sem, _| {
            let before = sem.holders.len();
            sem.holders.retain(|(t, _)| t != token);
            if sem.holders.len() == before {
                return ReleaseOutcome::NotHeld;
            }
            if let Some(tx) = &sem.released {
                tx.send_modify(|n| *n += 1);
            }
            ReleaseOutcome::Released
        }))
    }

    async fn permits_held(&self, key: &str) -> Result<(u32, Option<Fence>)> {
        Ok(self.with(key, |sem, _| {
            let held = u32::try_from(sem.holders.len()).unwrap_or(u32::MAX);
            (held, (sem.fence > 0).then(|| Fence::new(sem.fence)))
        }))
    }

    async fn watch_permits(&self, key: &str) -> ReleaseWatch {
        let rx = self.with(key, |sem, _| {
            sem.released
                .get_or_insert_with(|| watch::channel(0).0)
                .subscribe()
        });
        ReleaseWatch::from_channel(rx, None)
    }

    fn describe_semaphores(&self) -> String {
        "memory:".into()
    }
}
