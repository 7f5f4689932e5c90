//! The in-process limit store: a keyed map with bounded memory, behind a
//! mutex. The map is a [`StateTable`] for the shared read/step/write loop; this
//! file adds only what is particular to memory: the index by user key and
//! policy (no storage key is formatted, a check of a known key allocates
//! nothing in the map), the bound on keys (refusing new keys when full, never
//! evicting live ones) and the sweeps of expired keys.

use std::hash::BuildHasher;
use std::sync::{Arc, Mutex};

use hashbrown::HashTable;

use async_trait::async_trait;
use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::limit::store::{
    LimitRequest, LimitStore, SlotKey, State, StateTable, keep, read_step_write,
    read_step_write_combined, step,
};
use crate::limit::{Algorithm, Decision, Limiter, Mode, Policy, PolicyTag, Quota, Timestamp};

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
    origin: Instant,
    origin_wall: Timestamp,
}

/// The map and the hasher of its keys, which hashes a request's key before
/// the lock is taken.
#[derive(Debug, Default)]
struct Shared {
    map: Mutex<Map>,
    hasher: KeyHasher,
}

/// The hasher of user keys, randomly keyed: the keys come from clients.
type KeyHasher = foldhash::fast::RandomState;

#[derive(Debug, Default)]
struct Map {
    /// Per user key, the state of each policy that has one (most keys have
    /// one policy, a compound limiter's a few). A table of its own hashes
    /// (see [`KeyHasher`]), so a request's key is hashed once for its read
    /// and its write.
    entries: HashTable<Keyed>,
    /// The same hasher as [`Shared::hasher`].
    hasher: KeyHasher,
    /// The number of (key, policy) states held.
    len: usize,
    /// Writes since the last periodic sweep.
    ops: u64,
    /// No entry expires before this (a lower bound, exact after a sweep):
    /// while the store is full, sweeping earlier would find nothing to drop,
    /// so refusals of new keys cost no scan of the map.
    next_expiry: u64,
    /// The latest reading of the store's own clock a decision used (see
    /// [`Read`]).
    latest: Timestamp,
}

/// The time a decision is made at, read before the lock is taken.
#[derive(Debug, Clone, Copy)]
enum Read {
    /// The store's own clock. Under the lock it is raised to the latest
    /// reading already used: a thread preempted between reading the clock and
    /// taking the lock then decides as if it came right after the decisions
    /// that overtook it. At its stale time it would be charged for their later
    /// arrival, and could be refused what the quota allows.
    Own(Timestamp),
    /// A time the caller chose ([`LimitRequest::at`]), used as given.
    Given(Timestamp),
}

impl Read {
    fn of(store: &MemoryLimits, request: &LimitRequest<'_>) -> Read {
        request
            .now
            .map_or_else(|| Read::Own(store.now()), Read::Given)
    }
}

/// One user key's states.
#[derive(Debug)]
struct Keyed {
    key: Box<str>,
    states: Vec<(PolicyTag, Entry)>,
}

#[derive(Debug)]
struct Entry {
    state: State,
    expires_at: u64,
}

/// Sweep expired keys after at least this many writes, and at least as many
/// writes as states are held: a sweep visits every state, so this keeps its
/// cost per write constant however many keys there are.
const SWEEP_EVERY: u64 = 4096;

/// A periodic sweep drops a state only once it has been expired this long
/// (µs): a key that comes back soon after its state expired keeps its entry
/// instead of being freed and allocated again. (When the store is full, a
/// sweep drops every expired state at once.)
const SWEEP_GRACE_US: u64 = 500_000;

impl Default for MemoryLimits {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryLimits {
    /// An empty store bounded to [`DEFAULT_MAX_KEYS`] keys.
    pub fn new() -> Self {
        let hasher = KeyHasher::default();
        let map = Map {
            hasher: hasher.clone(),
            ..Map::default()
        };
        MemoryLimits {
            inner: Arc::new(Shared {
                map: Mutex::new(map),
                hasher,
            }),
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
        self.lock().len
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
        self.inner.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The hash of a user key in the map.
    fn hash(&self, key: &str) -> u64 {
        self.inner.hasher.hash_one(key)
    }

    /// Runs a request synchronously (the store never waits on I/O).
    ///
    /// # Errors
    /// See [`apply`](crate::limit::store::apply): zero cost, cost over
    /// capacity, mismatched state.
    pub fn apply_now(&self, request: &LimitRequest<'_>) -> Result<Vec<Decision>> {
        self.locked(request, Read::of(self, request), |table, request, now| {
            read_step_write(table, request, now)
        })
    }

    /// Runs `run` (one of the shared read/step/write loops) on the map, under
    /// the lock, and now and then sweeps keys expired for a while (see
    /// [`SWEEP_EVERY`], [`SWEEP_GRACE_US`]).
    fn locked<T>(
        &self,
        request: &LimitRequest<'_>,
        read: Read,
        run: impl FnOnce(&mut Table<'_>, &LimitRequest<'_>, Timestamp) -> Result<T>,
    ) -> Result<T> {
        let hash = self.hash(request.key);
        let map = &mut self.lock();
        let now = map.decision_time(read);
        let mut table = Table {
            hash,
            key: request.key,
            map,
            max_keys: self.max_keys,
            wrote: false,
            bucket: None,
        };
        let answer = run(&mut table, request, now)?;
        if table.wrote {
            table.map.wrote(now);
        }
        Ok(answer)
    }
}

/// The map as the shared read/step/write loop sees it, under the lock.
struct Table<'a> {
    map: &'a mut Map,
    /// The request's user key (every slot's) and its hash.
    key: &'a str,
    hash: u64,
    max_keys: usize,
    /// Whether the request wrote anything (counts towards the next sweep).
    wrote: bool,
    /// Where the request's key was found by a read: its write then needs no
    /// second lookup. Forgotten when a sweep moves entries.
    bucket: Option<usize>,
}

impl StateTable for Table<'_> {
    type Error = Error;

    fn read(&mut self, slot: SlotKey<'_>) -> Result<Option<State>> {
        // An expired state reads exactly like no state (property-tested), so it
        // is used as is until a sweep drops it; this also keeps a clock that
        // steps back from forgetting what was consumed.
        let hash = self.hash_of(slot.key);
        if self.is_own(slot.key) {
            let bucket = self
                .map
                .entries
                .find_bucket_index(hash, |k| *k.key == *slot.key);
            self.bucket = bucket;
            let keyed = bucket.and_then(|b| self.map.entries.get_bucket(b));
            return Ok(keyed
                .and_then(|k| k.state(slot.policy.tag()))
                .map(|e| e.state.clone()));
        }
        Ok(self.map.get(hash, slot).map(|e| e.state.clone()))
    }

    fn admit(
        &mut self,
        writes: &[SlotKey<'_>],
        now: Timestamp,
        decisions: &[Decision],
    ) -> Result<Option<Vec<Decision>>> {
        if self.map.len + writes.len() <= self.max_keys {
            return Ok(None); // room even if every write is a new key
        }
        let hashes: Vec<u64> = writes.iter().map(|slot| self.hash_of(slot.key)).collect();
        let map = &mut *self.map;
        let at = now.as_micros();
        let added = |map: &Map| {
            writes
                .iter()
                .zip(&hashes)
                .filter(|(slot, hash)| map.get(**hash, **slot).is_none())
                .count()
        };
        if map.len + added(map) > self.max_keys {
            if at >= map.next_expiry {
                map.sweep(at);
                self.bucket = None;
            }
            if map.len + added(map) > self.max_keys {
                return Ok(Some(map.full(at, decisions)));
            }
        }
        Ok(None)
    }

    fn write(&mut self, slot: SlotKey<'_>, state: State, expires_at: Timestamp) -> Result<()> {
        let expires_at = expires_at.as_micros();
        let map = &mut *self.map;
        map.next_expiry = map.next_expiry.min(expires_at);
        let entry = Entry { state, expires_at };
        let tag = slot.policy.tag();
        let hash = self.hash_of(slot.key);
        let bucket = self.bucket.filter(|_| self.is_own(slot.key));
        let map = &mut *self.map;
        // The bucket the read found, if it still holds this key.
        let known = bucket
            .and_then(|b| map.entries.get_bucket_mut(b))
            .filter(|k| *k.key == *slot.key);
        // A known key is found without allocating; only a new one is copied.
        let found = match known {
            Some(keyed) => Some(keyed),
            None => map.entries.find_mut(hash, |k| *k.key == *slot.key),
        };
        let states = match found {
            Some(keyed) => &mut keyed.states,
            None => {
                let hasher = &map.hasher;
                let keyed = Keyed {
                    key: slot.key.into(),
                    states: Vec::with_capacity(1),
                };
                let rehash = |k: &Keyed| hasher.hash_one(&*k.key);
                &mut map
                    .entries
                    .insert_unique(hash, keyed, rehash)
                    .into_mut()
                    .states
            }
        };
        match states.iter_mut().find(|(t, _)| *t == tag) {
            Some((_, held)) => *held = entry,
            None => {
                states.push((tag, entry));
                map.len += 1;
            }
        }
        self.wrote = true;
        Ok(())
    }
}

impl Table<'_> {
    /// Whether `key` is the request's own key: the same slice, as the shared
    /// loop passes it (no bytes compared), or equal bytes.
    fn is_own(&self, key: &str) -> bool {
        std::ptr::eq(key, self.key) || key == self.key
    }

    /// The hash of `key`: computed once per request for its own key.
    fn hash_of(&self, key: &str) -> u64 {
        if self.is_own(key) {
            self.hash
        } else {
            self.map.hasher.hash_one(key)
        }
    }
}

impl Keyed {
    /// The entry of the policy tagged `tag`, if any.
    fn state(&self, tag: PolicyTag) -> Option<&Entry> {
        self.states
            .iter()
            .find_map(|(t, e)| (*t == tag).then_some(e))
    }

    /// The entry of the policy tagged `tag`, if any, to change.
    fn state_mut(&mut self, tag: PolicyTag) -> Option<&mut Entry> {
        self.states
            .iter_mut()
            .find_map(|(t, e)| (*t == tag).then_some(e))
    }
}

impl MemoryLimits {
    /// One decision (combined over the request's policies) at `read`.
    fn decide_read(&self, request: &LimitRequest<'_>, read: Read) -> Result<Decision> {
        if let [policy] = request.policies {
            let hash = self.hash(request.key);
            let map = &mut self.lock();
            let now = map.decision_time(read);
            if let Some(known) = map.step_known(hash, request, policy, now) {
                return known;
            }
        }
        self.locked(request, read, |table, request, now| {
            read_step_write_combined(table, request, now)
        })
    }
}

impl Map {
    /// The time to decide at, under the lock (see [`Read`]).
    fn decision_time(&mut self, read: Read) -> Timestamp {
        match read {
            Read::Given(at) => at,
            Read::Own(at) => {
                self.latest = self.latest.max(at);
                self.latest
            }
        }
    }

    /// The entry of `slot`, whose key hashes to `hash`, if any.
    fn get(&self, hash: u64, slot: SlotKey<'_>) -> Option<&Entry> {
        self.entries
            .find(hash, |k| *k.key == *slot.key)?
            .state(slot.policy.tag())
    }

    /// A request of one policy on a key that already holds a state of it (the
    /// common case): the state is stepped where it lies, with one lookup and
    /// no copy. Such a request adds no key, so the bound has nothing to say.
    /// `None` when the key holds no state of the policy yet.
    fn step_known(
        &mut self,
        hash: u64,
        request: &LimitRequest<'_>,
        policy: &Policy,
        now: Timestamp,
    ) -> Option<Result<Decision>> {
        let key = request.key;
        let keyed = self.entries.find_mut(hash, |k| *k.key == *key)?;
        let entry = keyed.state_mut(policy.tag())?;
        let stepped = match step(
            policy,
            key,
            Some(&entry.state),
            now,
            request.cost,
            request.mode,
        ) {
            Ok(stepped) => stepped,
            Err(e) => return Some(Err(e)),
        };
        let decision = stepped.decision;
        let commit = decision.allowed || request.mode == Mode::Refund;
        if let Some(next) = keep(stepped, policy, commit) {
            entry.state = next.state;
            entry.expires_at = now.plus(next.ttl).as_micros();
            self.next_expiry = self.next_expiry.min(entry.expires_at);
            self.wrote(now);
        }
        Some(Ok(decision))
    }

    /// Counts a write, and now and then sweeps the keys expired for a while
    /// (see [`SWEEP_EVERY`], [`SWEEP_GRACE_US`]).
    fn wrote(&mut self, now: Timestamp) {
        self.ops += 1;
        if self.ops >= SWEEP_EVERY.max(u64::try_from(self.len).unwrap_or(u64::MAX)) {
            self.ops = 0;
            self.sweep(now.as_micros().saturating_sub(SWEEP_GRACE_US));
        }
    }

    /// Forgets the states of `key` under `policies`, and the key when it has
    /// none left.
    fn forget(&mut self, key: &str, policies: &[Policy]) {
        let hash = self.hasher.hash_one(key);
        let Ok(mut found) = self.entries.find_entry(hash, |k| *k.key == *key) else {
            return;
        };
        let keyed = found.get_mut();
        let before = keyed.states.len();
        keyed
            .states
            .retain(|(tag, _)| !policies.iter().any(|p| p.tag() == *tag));
        let after = keyed.states.len();
        self.len -= before - after;
        if after == 0 {
            found.remove();
        }
    }

    /// Drops the states expired at `now` (they read as fresh, so nothing is
    /// forgotten), and the keys left without one, and notes when the first
    /// state kept expires.
    fn sweep(&mut self, now: u64) {
        let (mut next, mut len) = (u64::MAX, 0);
        self.entries.retain(|keyed| {
            let states = &mut keyed.states;
            if states.iter().any(|(_, e)| e.expires_at <= now) {
                states.retain(|(_, e)| e.expires_at > now);
            }
            next = states
                .iter()
                .map(|(_, e)| e.expires_at)
                .fold(next, u64::min);
            len += states.len();
            !states.is_empty()
        });
        self.len = len;
        self.next_expiry = next;
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

    async fn reset(&self, key: &str, policies: &[Policy]) -> Result<()> {
        self.lock().forget(key, policies);
        Ok(())
    }

    fn decide_inline(&self, request: &LimitRequest<'_>) -> Option<Result<Decision>> {
        Some(self.decide_read(request, Read::of(self, request)))
    }

    fn describe(&self) -> String {
        "memory:".to_string()
    }

    fn is_shared(&self) -> bool {
        false
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

#[cfg(test)]
mod tests {
    use std::num::NonZeroU32;

    use super::*;

    /// Admissions of one-unit requests on one key of a fresh store (1000/s,
    /// burst 2, GCRA), decided in the order given, each at its clock reading
    /// (µs after an origin).
    fn admitted(readings_us: &[u64]) -> Vec<bool> {
        let quota = Quota::per_second(NonZeroU32::new(1000).expect("1000"))
            .burst(NonZeroU32::new(2).expect("2"));
        let policies = [Policy::new(quota, Algorithm::Gcra).expect("policy")];
        let store = MemoryLimits::new();
        let request = LimitRequest::new("k", &policies, 1, Mode::Consume);
        readings_us
            .iter()
            .map(|us| {
                let read = Read::Own(Timestamp::from_micros(1_000_000_000 + us));
                store.decide_read(&request, read).expect("decision").allowed
            })
            .collect()
    }

    #[test]
    fn a_decision_overtaken_between_its_clock_reading_and_the_lock_is_not_refused_for_it() {
        // Requests that read the clock at 0, 0.5 ms and 1 ms: the quota admits
        // all three when each is decided in the order of its reading.
        assert_eq!(admitted(&[0, 500, 1_000]), [true, true, true]);
        // The one that read 0.5 ms takes the lock after the one that read
        // 1 ms: it is decided as if it came right after it, not charged for
        // the other's later arrival.
        assert_eq!(admitted(&[0, 1_000, 500]), [true, true, true]);
    }
}
