//! The in-process limit store: a keyed map with bounded memory, split into
//! shards, each behind its own lock, so threads deciding on different keys
//! rarely wait for each other. Each shard is a [`StateTable`] for the shared
//! read/step/write loop; these files add only what is particular to memory:
//! the index by user key and policy (no storage key is formatted, a check of
//! a known key allocates nothing in the map), the bound on keys over all
//! shards (refusing new keys when full, never evicting live ones) and the
//! sweeps of expired keys.

mod clock;
mod shard;
mod shards;
mod table;
#[cfg(test)]
mod tests;

use std::hash::BuildHasher;
use std::sync::Arc;

use async_trait::async_trait;

use crate::error::Result;
use crate::limit::store::{LimitRequest, LimitStore, read_step_write, read_step_write_combined};
use crate::limit::{Algorithm, Decision, Limiter, Policy, Quota, Timestamp};

use clock::StoreClock;
use shard::Read;
use shards::Shards;
use table::Table;

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
/// The keys are split into shards by their hash, each behind its own lock,
/// so threads deciding on different keys rarely wait for each other; the
/// bound is the whole store's, whichever shards the keys fall in.
///
/// Time is read on the processor's time-stamp counter where it ticks at a
/// constant rate (through `quanta`, as governor does; the OS's monotonic
/// clock elsewhere), offset to start at the wall-clock time of creation so
/// windows line up with the Unix epoch like on Redis. The first store made in
/// a process calibrates the counter once (about 0.6 ms on a 2-core virtual
/// machine; `quanta` gives it at most 200 ms).
/// Like a monotonic clock, the counter does not count time the machine spends
/// suspended. Tests that pause tokio's clock (`tokio::time::pause`) make
/// their store with [`tokio_clock`](Self::tokio_clock).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> tenure::Result<()> {
/// use std::num::NonZeroU32;
/// use tenure::limit::{Algorithm, Limiter, Quota};
/// use tenure::memory::MemoryLimits;
///
/// let store = MemoryLimits::new().max_keys(10_000);
/// let limiter = Limiter::new(store.clone(), Quota::per_second(NonZeroU32::new(5).unwrap()), Algorithm::Gcra);
/// assert!(limiter.check("ip:192.0.2.1").await?.allowed);
/// assert_eq!(store.len(), 1);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct MemoryLimits {
    inner: Arc<Shared>,
    max_keys: usize,
    /// The clock of decisions, started when the store was made.
    clock: StoreClock,
}

/// The shards and the hasher of keys, which picks a key's shard and its
/// place in the shard's table (hashed once, before any lock is taken).
#[derive(Debug)]
struct Shared {
    shards: Shards,
    hasher: KeyHasher,
}

/// The hasher of user keys, randomly keyed: the keys come from clients.
type KeyHasher = foldhash::fast::RandomState;

impl Read {
    #[inline]
    fn of(store: &MemoryLimits, request: &LimitRequest<'_>) -> Read {
        request
            .now
            .map_or_else(|| Read::Own(store.now()), Read::Given)
    }
}

impl Default for MemoryLimits {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryLimits {
    /// An empty store bounded to [`DEFAULT_MAX_KEYS`] keys.
    pub fn new() -> Self {
        Self::with_shards(Shards::new())
    }

    fn with_shards(shards: Shards) -> Self {
        MemoryLimits {
            inner: Arc::new(Shared {
                shards,
                hasher: KeyHasher::default(),
            }),
            max_keys: DEFAULT_MAX_KEYS,
            clock: StoreClock::counter(),
        }
    }

    /// Sets the bound on live keys (at least 1).
    #[must_use]
    pub fn max_keys(mut self, max_keys: usize) -> Self {
        self.max_keys = max_keys.max(1);
        self
    }

    /// Reads tokio's clock (`tokio::time::Instant`) instead of the
    /// processor's counter, so that a test's paused clock applies to this
    /// store's decisions (`tokio::time::pause`, `advance`, `start_paused`)
    /// as it does to [`Limiter::wait`]'s sleeps. Call it on a new store: the
    /// clock starts again at the time of the call.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> tenure::Result<()> {
    /// use std::num::NonZeroU32;
    /// use std::time::Duration;
    /// use tenure::limit::{Algorithm, Limiter, Quota};
    /// use tenure::memory::MemoryLimits;
    ///
    /// tokio::time::pause();
    /// let store = MemoryLimits::new().tokio_clock();
    /// let limiter = Limiter::new(store, Quota::per_hour(NonZeroU32::new(1).unwrap()), Algorithm::Gcra);
    /// assert!(limiter.check("report").await?.allowed);
    /// assert!(!limiter.check("report").await?.allowed);
    /// tokio::time::advance(Duration::from_secs(3600)).await;
    /// assert!(limiter.check("report").await?.allowed); // an hour later, at once
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn tokio_clock(mut self) -> Self {
        self.clock = StoreClock::tokio();
        self
    }

    /// The number of keys held (one per key and policy), expired ones included
    /// until the next sweep.
    pub fn len(&self) -> usize {
        self.inner.shards.held()
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The store's clock now.
    #[inline]
    pub fn now(&self) -> Timestamp {
        self.clock.now()
    }

    /// The hash of a user key: it picks the key's shard and its place there.
    #[inline]
    fn hash(&self, key: &str) -> u64 {
        self.inner.hasher.hash_one(key)
    }

    /// Runs a request synchronously (the store never waits on I/O).
    ///
    /// # Errors
    /// See [`apply`](crate::limit::store::apply): zero cost, cost over
    /// capacity, mismatched state.
    pub fn apply_now(&self, request: &LimitRequest<'_>) -> Result<Vec<Decision>> {
        let (hash, read) = (self.hash(request.key), Read::of(self, request));
        self.locked(hash, request, read, |table, request, now| {
            read_step_write(table, request, now)
        })
    }

    /// Forgets the states of `key` under `policies`, giving back their room.
    fn forget(&self, key: &str, policies: &[Policy]) {
        let hash = self.hash(key);
        let shards = &self.inner.shards;
        shards.lock(shards.index(hash)).forget(hash, key, policies);
    }

    /// The request's decision (combined over its policies) now, or at the
    /// request's instant.
    #[inline]
    pub(crate) fn decide(&self, request: &LimitRequest<'_>) -> Result<Decision> {
        self.decide_read(request, Read::of(self, request))
    }

    /// One decision (combined over the request's policies) at `read`.
    #[inline]
    fn decide_read(&self, request: &LimitRequest<'_>, read: Read) -> Result<Decision> {
        let hash = self.hash(request.key);
        if let [policy] = request.policies {
            let shards = &self.inner.shards;
            let mut shard = shards.lock(shards.index(hash));
            let now = shard.decision_time(read);
            let every = shards.sweep_every();
            if let Some(known) = shard.step_known(hash, request, policy, now, every) {
                return known;
            }
        }
        self.locked(hash, request, read, |table, request, now| {
            read_step_write_combined(table, request, now)
        })
    }

    /// Runs `run` (one of the shared read/step/write loops) on the shard of
    /// the request's key (hashing to `hash`), under its lock. Refused for room
    /// while other shards hold expired states, the request has them swept (one
    /// lock at a time, its own released) and runs once more.
    fn locked<T>(
        &self,
        hash: u64,
        request: &LimitRequest<'_>,
        read: Read,
        run: impl Fn(&mut Table<'_>, &LimitRequest<'_>, Timestamp) -> Result<T>,
    ) -> Result<T> {
        let (answer, crowded) = self.attempt(hash, request, read, true, &run);
        if !crowded {
            return answer;
        }
        self.inner.shards.sweep_all(read);
        self.attempt(hash, request, read, false, &run).0
    }

    /// One run of [`locked`](Self::locked): its answer, and whether it was
    /// refused for room that sweeping the other shards would make.
    fn attempt<T>(
        &self,
        hash: u64,
        request: &LimitRequest<'_>,
        read: Read,
        may_sweep_others: bool,
        run: &impl Fn(&mut Table<'_>, &LimitRequest<'_>, Timestamp) -> Result<T>,
    ) -> (Result<T>, bool) {
        let shards = &self.inner.shards;
        let index = shards.index(hash);
        let mut shard = shards.lock(index);
        let now = shard.decision_time(read);
        let mut table = Table {
            shard: &mut shard,
            shards,
            index,
            hasher: &self.inner.hasher,
            key: request.key,
            hash,
            max_keys: self.max_keys,
            may_sweep_others,
            wrote: false,
            bucket: None,
            reserved: 0,
            crowded: false,
        };
        let answer = run(&mut table, request, now);
        let (wrote, unused, crowded) = (table.wrote, table.reserved, table.crowded);
        shards.release(unused);
        if wrote {
            shard.wrote(now, shards.sweep_every());
        }
        (answer, crowded)
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

    async fn reset(&self, key: &str, policies: &[Policy]) -> Result<()> {
        self.forget(key, policies);
        Ok(())
    }

    fn decide_inline(&self, request: &LimitRequest<'_>) -> Option<Result<Decision>> {
        // Only the decision is moved into the answer, not the whole result
        // (an error is larger than a decision).
        match self.decide_read(request, Read::of(self, request)) {
            Ok(decision) => Some(Ok(decision)),
            Err(e) => Some(Err(e)),
        }
    }

    fn describe(&self) -> String {
        "memory:".to_string()
    }

    fn kind(&self) -> std::borrow::Cow<'static, str> {
        std::borrow::Cow::Borrowed("memory")
    }

    fn as_memory(&self) -> Option<&MemoryLimits> {
        Some(self)
    }

    fn is_shared(&self) -> bool {
        false
    }
}

// `Limiter::local` lives with the store it creates, so the limit concept needs no
// import from a store.
impl Limiter {
    /// A limiter on a fresh in-process store of its own ([`MemoryLimits`]):
    /// keyed, bounded in memory, no I/O. A test that pauses tokio's clock
    /// makes its limiter with `Limiter::new(MemoryLimits::new().tokio_clock(), ..)`
    /// instead (see [`MemoryLimits::tokio_clock`]).
    pub fn local(quota: Quota, algorithm: Algorithm) -> Self {
        Self::new(MemoryLimits::new(), quota, algorithm)
    }
}
