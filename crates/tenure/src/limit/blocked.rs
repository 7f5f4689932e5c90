//! A local cache of blocked keys ([`Limiter::cache_blocked`](super::Limiter::cache_blocked)):
//! a store in front of the limiter's store that remembers its refusals and
//! answers a refused key itself until the refusal's `retry_after` has passed.
//!
//! Why it never admits what the store would refuse: it only ever answers
//! with a refusal the store gave; everything else goes to the store. Why a
//! remembered refusal is stale only in the refusing direction, and at most
//! until its `retry_after`: without refunds or resets, units come back only
//! with time, so a request the store refused at instant `t` with
//! `retry_after = r` stays refused until `t + r` whatever other requests do;
//! and so does any request of the same key, policies and a cost at least as
//! high. The cache counts `r` from when it *sent* the request, which is no
//! later than when the store decided, so it forgets a refusal no later than
//! the store would lift it (up to the drift between the two clocks). A
//! refund or reset by another process is not seen: the key stays refused
//! here until `r` has passed; a refund or reset through this limiter forgets
//! the key's refusal.
//!
//! Not cached: reservations and refunds (only checks and peeks are),
//! requests at an injected instant (simulated time has nothing to
//! do with this process's clock), and limiters with a sliding log that records
//! refused requests (the store would record every refused request and stay
//! refusing longer; answering locally would record none and shorten it).

use std::collections::{BTreeMap, HashMap};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use super::decision::{Decision, Mode, Timestamp};
use super::policy::Policy;
use super::store::{LimitRequest, LimitStore};
use crate::error::Result;

/// A limit store that remembers the refusals of the store it wraps, for at
/// most `max_keys` keys.
#[derive(Debug)]
pub(crate) struct BlockedKeys {
    inner: Arc<dyn LimitStore>,
    max_keys: usize,
    table: Mutex<Table>,
}

/// The remembered refusals, by key and by the instant they end.
#[derive(Debug, Default)]
struct Table {
    entries: HashMap<String, Entry>,
    /// `(until, seq)` of every entry: the soonest to end comes first.
    ends: BTreeMap<(Instant, u64), String>,
    seq: u64,
}

/// One remembered refusal.
#[derive(Debug)]
struct Entry {
    /// When the request was sent: the refusal's times count from here.
    sent: Instant,
    /// When the first of its refusing policies would admit again.
    until: Instant,
    seq: u64,
    /// The limiter's policies when it was refused.
    policies: u64,
    /// The refused cost: a lower cost may fit sooner.
    cost: u32,
    decisions: Vec<Decision>,
}

impl BlockedKeys {
    /// `store` behind a cache of at most `max_keys` refused keys.
    pub(crate) fn wrap(store: Arc<dyn LimitStore>, max_keys: NonZeroUsize) -> Arc<dyn LimitStore> {
        Arc::new(BlockedKeys {
            inner: store,
            max_keys: max_keys.get(),
            table: Mutex::default(),
        })
    }

    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        // The table is consistent after any panic of a holder (every change
        // is a single insert or remove): a poisoned lock is still usable.
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The remembered refusal that answers `request` now, if any.
    fn lookup(&self, request: &LimitRequest<'_>) -> Option<Vec<Decision>> {
        let now = Instant::now();
        let mut table = self.table();
        let entry = table.entries.get(request.key)?;
        if entry.until <= now {
            table.remove(request.key);
            return None;
        }
        if request.cost < entry.cost || entry.policies != fingerprint(request.policies) {
            return None;
        }
        let elapsed = now.saturating_duration_since(entry.sent);
        Some(entry.decisions.iter().map(|d| aged(d, elapsed)).collect())
    }

    /// Remembers `decisions` for `request`, sent at `sent`, if they refuse.
    fn remember(&self, request: &LimitRequest<'_>, sent: Instant, decisions: &[Decision]) {
        let Some(wait) = decisions
            .iter()
            .filter(|d| !d.allowed)
            .filter_map(|d| d.retry_after)
            .min()
            .filter(|w| !w.is_zero())
        else {
            return;
        };
        let entry = Entry {
            sent,
            until: sent + wait,
            seq: 0,
            policies: fingerprint(request.policies),
            cost: request.cost,
            decisions: decisions.to_vec(),
        };
        self.table()
            .insert(request.key, entry, Instant::now(), self.max_keys);
    }
}

impl Table {
    fn remove(&mut self, key: &str) {
        if let Some(old) = self.entries.remove(key) {
            self.ends.remove(&(old.until, old.seq));
        }
    }

    /// Inserts `entry` for `key`, dropping ended entries and, when full, the
    /// one that ends soonest (forgetting a refusal only costs a store call).
    fn insert(&mut self, key: &str, mut entry: Entry, now: Instant, max_keys: usize) {
        self.remove(key);
        while let Some(first) = self.ends.first_entry() {
            let full = self.entries.len() >= max_keys;
            if first.key().0 > now && !full {
                break;
            }
            let gone = first.remove();
            self.entries.remove(&gone);
        }
        self.seq += 1;
        entry.seq = self.seq;
        self.ends.insert((entry.until, entry.seq), key.to_owned());
        self.entries.insert(key.to_owned(), entry);
    }
}

/// A decision given `elapsed` ago, as it reads now.
fn aged(d: &Decision, elapsed: Duration) -> Decision {
    let mut d = *d;
    d.reset_after = d.reset_after.saturating_sub(elapsed);
    d.retry_after = d.retry_after.map(|r| r.saturating_sub(elapsed));
    d
}

/// Tells one set of policies from another (a limiter rebuilt with other
/// policies over the same cache must not read the old refusals).
fn fingerprint(policies: &[Policy]) -> u64 {
    let mut h = DefaultHasher::new();
    policies.hash(&mut h);
    h.finish()
}

#[async_trait]
impl LimitStore for BlockedKeys {
    async fn apply(&self, request: &LimitRequest<'_>) -> Result<Vec<Decision>> {
        if request.mode == Mode::Refund {
            // Units given back here may lift a refusal before its time.
            let answer = self.inner.apply(request).await;
            self.table().remove(request.key);
            return answer;
        }
        let cacheable = matches!(request.mode, Mode::Consume | Mode::Peek)
            && request.now.is_none()
            && !request.policies.iter().any(Policy::records_rejected);
        if !cacheable {
            return self.inner.apply(request).await;
        }
        if let Some(refusal) = self.lookup(request) {
            return Ok(refusal);
        }
        let sent = Instant::now();
        let decisions = self.inner.apply(request).await?;
        self.remember(request, sent, &decisions);
        Ok(decisions)
    }

    async fn reset(&self, key: &str, policies: &[Policy]) -> Result<()> {
        let answer = self.inner.reset(key, policies).await;
        self.table().remove(key);
        answer
    }

    async fn now(&self) -> Result<Timestamp> {
        self.inner.now().await
    }

    fn describe(&self) -> String {
        self.inner.describe()
    }

    fn kind(&self) -> std::borrow::Cow<'static, str> {
        self.inner.kind()
    }

    fn decide_inline(&self, request: &LimitRequest<'_>) -> Option<Result<Decision>> {
        // An in-process store answers without I/O: nothing to save.
        self.inner.decide_inline(request)
    }

    fn is_shared(&self) -> bool {
        self.inner.is_shared()
    }
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroU32;

    use super::*;
    use crate::limit::{Algorithm, Quota};

    fn entry(until_ms: u64, now: Instant) -> Entry {
        Entry {
            sent: now,
            until: now + Duration::from_millis(until_ms),
            seq: 0,
            policies: 0,
            cost: 1,
            decisions: Vec::new(),
        }
    }

    #[test]
    fn a_full_table_drops_ended_entries_then_the_soonest_to_end() {
        let now = Instant::now();
        let mut t = Table::default();
        t.insert("a", entry(10, now), now, 2);
        t.insert("b", entry(30, now), now, 2);
        t.insert("c", entry(20, now), now, 2);
        assert!(t.entries.contains_key("b") && t.entries.contains_key("c"));
        assert_eq!((t.entries.len(), t.ends.len()), (2, 2));
        let later = now + Duration::from_millis(25);
        t.insert("d", entry(40, now), later, 3);
        let mut keys: Vec<_> = t.entries.keys().cloned().collect();
        keys.sort();
        assert_eq!(keys, ["b", "d"]);
        t.insert("b", entry(50, now), later, 3);
        assert_eq!((t.entries.len(), t.ends.len()), (2, 2));
    }

    #[test]
    fn a_refusal_answers_the_same_or_a_higher_cost_of_the_same_policies_only() {
        let quota = Quota::per_minute(NonZeroU32::MIN);
        let policies = [Policy::new(quota, Algorithm::Gcra).expect("policy")];
        let other = [Policy::new(quota, Algorithm::FixedWindow).expect("policy")];
        let store = BlockedKeys {
            inner: Arc::new(crate::memory::MemoryLimits::new()),
            max_keys: 4,
            table: Mutex::default(),
        };
        let refusal = Decision::refused(1, Duration::from_secs(60), Duration::from_secs(60));
        let ask = |p, cost| LimitRequest::new("k", p, cost, Mode::Consume);
        store.remember(&ask(&policies, 2), Instant::now(), &[refusal]);
        assert!(store.lookup(&ask(&policies, 2)).is_some());
        assert!(store.lookup(&ask(&policies, 3)).is_some());
        assert!(store.lookup(&ask(&policies, 1)).is_none());
        assert!(store.lookup(&ask(&other, 2)).is_none());
        let allowed = Decision::allowed(1, 0, Duration::from_secs(60));
        store.remember(&ask(&policies, 1), Instant::now(), &[allowed]);
        assert!(store.lookup(&ask(&policies, 2)).is_some(), "kept");
    }
}
