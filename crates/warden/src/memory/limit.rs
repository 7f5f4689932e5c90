//! The in-process limit store: a keyed map with bounded memory.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use tokio::time::Instant;

use crate::error::Result;
use crate::limit::{
    Algorithm, Decision, LimitRequest, LimitStore, Limiter, Quota, Slot, State, Timestamp, apply,
    micros,
};

/// The default bound on the keys a [`MemoryLimits`] keeps.
pub const DEFAULT_MAX_KEYS: usize = 100_000;

/// Limiter state in this process's memory, for tests, single-instance services
/// and as a fallback when the shared store is down.
///
/// Memory is bounded to [`max_keys`](Self::max_keys) keys, and the bound never
/// hands out budget: only a key whose state has expired — it reads exactly
/// like a fresh key, so dropping it forgets nothing — is ever dropped (by
/// periodic sweeps, and whenever the store is full). A live key is never
/// evicted, since evicting it would give its owner its whole quota again
/// (a flood of throwaway keys could reset a victim's login limit). When the
/// store is full of live keys, a request that would add a key is **refused**:
/// an ordinary decision with `allowed == false`, `remaining == 0` and
/// `retry_after` = the time until the first held key is fresh again. Keys
/// already held, and peeks, are never refused for room. So size the bound
/// above the number of keys active within one period: past it, new clients
/// wait (for up to one period) rather than old ones being forgiven.
///
/// Time is tokio's [`Instant`] (monotonic; `tokio::time::pause` works in tests),
/// offset to start at the wall-clock time of creation so windows line up with
/// the Unix epoch like on Redis.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> warden::Result<()> {
/// use std::num::NonZeroU32;
/// use warden::limit::{Algorithm, Limiter, Quota};
/// use warden::memory::MemoryLimits;
///
/// let store = MemoryLimits::new().max_keys(10_000);
/// let limiter = Limiter::new(store.clone(), Quota::per_second(NonZeroU32::new(5).unwrap()), Algorithm::Gcra);
/// assert!(limiter.check("ip:192.0.2.1").await?.allowed);
/// assert_eq!(store.len(), 1);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct MemoryLimits {
    inner: Arc<Mutex<Map>>,
    max_keys: usize,
    origin: Instant,
    origin_wall: Timestamp,
}

#[derive(Debug, Default)]
struct Map {
    entries: HashMap<String, Entry>,
    ops: u64,
    /// No entry expires before this (a lower bound, exact after a sweep):
    /// while the store is full, sweeping earlier would find nothing to drop,
    /// so refusals of new keys cost no scan of the map.
    next_expiry: u64,
}

#[derive(Debug)]
struct Entry {
    state: State,
    expires_at: u64,
}

/// Sweep expired keys every this many writes.
const SWEEP_EVERY: u64 = 4096;

impl Default for MemoryLimits {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryLimits {
    /// An empty store bounded to [`DEFAULT_MAX_KEYS`] keys.
    pub fn new() -> Self {
        MemoryLimits {
            inner: Arc::default(),
            max_keys: DEFAULT_MAX_KEYS,
            origin: Instant::now(),
            origin_wall: Timestamp::now_wall(),
        }
    }

    /// Sets the bound on live keys (at least 1).
    #[must_use]
    pub fn max_keys(mut self, max_keys: usize) -> Self {
        self.max_keys = max_keys.max(1);
        self
    }

    /// The number of keys held (one per key and policy), expired ones included
    /// until the next sweep.
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The store's clock now.
    pub fn now(&self) -> Timestamp {
        self.origin_wall.plus(self.origin.elapsed())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Map> {
        // The map is consistent between statements: a panic elsewhere while
        // holding the lock cannot leave half a write behind.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs a request synchronously (the store never waits on I/O).
    ///
    /// # Errors
    /// See [`apply`]: zero cost, cost over capacity, mismatched state.
    pub fn apply_now(&self, request: &LimitRequest<'_>) -> Result<Vec<Decision>> {
        let now = request.now.unwrap_or_else(|| self.now());
        let at = now.as_micros();
        let keys: Vec<String> = request
            .policies
            .iter()
            .map(|p| p.storage_key("", request.key))
            .collect();
        let mut map = self.lock();
        let slots: Vec<Slot<'_>> = request
            .policies
            .iter()
            .zip(&keys)
            .map(|(policy, key)| Slot {
                policy,
                key,
                // An expired state reads exactly like no state (property-tested),
                // so it is used as is until a sweep drops it; this also keeps
                // a clock that steps back from forgetting what was consumed.
                state: map.entries.get(key).map(|e| e.state.clone()),
            })
            .collect();
        let applied = apply(&slots, now, request.cost, request.mode)?;
        let added = |map: &Map| {
            keys.iter()
                .zip(&applied.writes)
                .filter(|(key, write)| write.is_some() && !map.entries.contains_key(*key))
                .count()
        };
        if map.entries.len() + added(&map) > self.max_keys {
            if at >= map.next_expiry {
                map.sweep(at);
            }
            if map.entries.len() + added(&map) > self.max_keys {
                return Ok(map.full(at, &applied.decisions));
            }
        }
        let mut wrote = false;
        for (key, write) in keys.into_iter().zip(applied.writes) {
            if let Some(next) = write {
                let expires_at = at.saturating_add(micros(next.ttl));
                map.next_expiry = map.next_expiry.min(expires_at);
                map.entries.insert(
                    key,
                    Entry {
                        state: next.state,
                        expires_at,
                    },
                );
                wrote = true;
            }
        }
        if wrote {
            map.ops += 1;
            if map.ops.is_multiple_of(SWEEP_EVERY) {
                map.sweep(at);
            }
        }
        Ok(applied.decisions)
    }
}

impl Map {
    /// Drops the keys whose state has expired (they read as fresh, so nothing
    /// is forgotten) and notes when the next one expires.
    fn sweep(&mut self, now: u64) {
        self.entries.retain(|_, e| e.expires_at > now);
        self.next_expiry = self
            .entries
            .values()
            .map(|e| e.expires_at)
            .min()
            .unwrap_or(u64::MAX);
    }

    /// The refusal of a request that needs a new key while the map is full of
    /// live ones: no room until the first key is fresh again. Evicting a live
    /// key instead would hand its owner a fresh quota.
    fn full(&self, now: u64, fresh: &[Decision]) -> Vec<Decision> {
        let wait = self.next_expiry.saturating_sub(now).max(1);
        fresh
            .iter()
            .map(|d| Decision::from_parts(false, d.limit, 0, wait, Some(wait)))
            .collect()
    }
}

#[async_trait]
impl LimitStore for MemoryLimits {
    async fn apply(&self, request: &LimitRequest<'_>) -> Result<Vec<Decision>> {
        self.apply_now(request)
    }

    async fn now(&self) -> Result<Timestamp> {
        Ok(MemoryLimits::now(self))
    }

    fn describe(&self) -> String {
        "memory:".to_string()
    }
}

// `Limiter::local` lives with the store it creates, so the limit concept needs no
// import from a store.
impl Limiter {
    /// A limiter on a fresh in-process store of its own ([`MemoryLimits`]):
    /// keyed, bounded in memory, no I/O.
    pub fn local(quota: Quota, algorithm: Algorithm) -> Self {
        Self::new(MemoryLimits::new(), quota, algorithm)
    }
}
