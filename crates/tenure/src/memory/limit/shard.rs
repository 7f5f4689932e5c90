//! One shard of the in-process limit store: the keys whose hash picks it, in
//! a table of their own behind the shard's lock, with what the sweeps of
//! expired states and the per-key clock need.

use hashbrown::HashTable;

use crate::error::Result;
use crate::limit::store::{LimitRequest, State, step_in_place};
use crate::limit::{Decision, Policy, PolicyTag, Timestamp};

/// A periodic sweep drops a state only once it has been expired this long
/// (µs): a key that comes back soon after its state expired keeps its entry
/// instead of being freed and allocated again. (When the store is full, a
/// sweep drops every expired state at once.)
const SWEEP_GRACE_US: u64 = 500_000;

/// The keys of one shard.
#[derive(Debug)]
pub(super) struct Shard {
    /// Per user key, the state of each policy that has one (most keys have
    /// one policy, a compound limiter's a few). A table of the store's own
    /// hashes, so a request's key is hashed once for its read and its write.
    pub(super) entries: HashTable<Keyed>,
    /// The number of (key, policy) states held here.
    pub(super) len: usize,
    /// States dropped by sweeps and not yet taken off the store's count
    /// (see [`Shards::settle`](super::shards::Shards::settle)).
    pub(super) dropped: usize,
    /// Writes since the last periodic sweep.
    ops: u64,
    /// The states held right after the last sweep.
    swept_len: usize,
    /// No entry expires before this (a lower bound, exact after a sweep):
    /// while the store is full, sweeping earlier would find nothing to drop,
    /// so refusals of new keys cost no scan of the table.
    pub(super) next_expiry: u64,
    /// The latest reading of the store's own clock a decision in this shard
    /// used (see [`Read`]).
    latest: Timestamp,
}

impl Default for Shard {
    fn default() -> Self {
        Shard {
            entries: HashTable::new(),
            len: 0,
            dropped: 0,
            ops: 0,
            swept_len: 0,
            next_expiry: u64::MAX,
            latest: Timestamp::default(),
        }
    }
}

/// The time a decision is made at, read before the lock is taken.
#[derive(Debug, Clone, Copy)]
pub(super) enum Read {
    /// The store's own clock. Under the lock it is raised to the latest
    /// reading already used in the key's shard: a thread preempted between
    /// reading the clock and taking the lock then decides as if it came right
    /// after the decisions that overtook it. At its stale time it would be
    /// charged for their later arrival, and could be refused what the quota
    /// allows.
    Own(Timestamp),
    /// A time the caller chose ([`LimitRequest::at`]), used as given.
    Given(Timestamp),
}

/// One user key's states.
#[derive(Debug)]
pub(super) struct Keyed {
    pub(super) key: Box<str>,
    pub(super) states: Vec<(PolicyTag, Entry)>,
}

/// One policy's state of a key, and when it reads as fresh again.
#[derive(Debug)]
pub(super) struct Entry {
    pub(super) state: State,
    pub(super) expires_at: u64,
}

impl Keyed {
    /// Whether this is `key`'s entry. A key of 8 to 32 bytes (an IP key,
    /// most API keys) is compared a few words at a time, inline: the table
    /// compares the key of every lookup's candidate, and a call to `memcmp`
    /// costs more than the comparison.
    #[inline]
    pub(super) fn is(&self, key: &str) -> bool {
        same_key(self.key.as_bytes(), key.as_bytes())
    }

    /// The entry of the policy tagged `tag`, if any.
    #[inline]
    pub(super) fn state(&self, tag: PolicyTag) -> Option<&Entry> {
        self.states
            .iter()
            .find_map(|(t, e)| (*t == tag).then_some(e))
    }

    /// The entry of the policy tagged `tag`, if any, to change.
    #[inline]
    fn state_mut(&mut self, tag: PolicyTag) -> Option<&mut Entry> {
        self.states
            .iter_mut()
            .find_map(|(t, e)| (*t == tag).then_some(e))
    }
}

/// `a == b`, for keys of up to 32 bytes as words: the first and last
/// word (overlapping where the key is shorter than two), and for more than
/// 16 bytes the two words between; a key of 1 to 3 bytes byte by byte.
/// (Slice equality calls the C library's `memcmp`, which costs more than
/// the lookup it ends for a short key.)
#[inline]
fn same_key(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    let byte = |at: usize| a.get(at) == b.get(at);
    let word4 = |at: usize| word::<4>(a, at) == word::<4>(b, at);
    let word8 = |at: usize| word::<8>(a, at) == word::<8>(b, at);
    match n {
        0 => true,
        1..=3 => byte(0) && byte(n / 2) && byte(n - 1),
        4..=7 => word4(0) && word4(n - 4),
        8..=16 => word8(0) && word8(n - 8),
        17..=32 => word8(0) && word8(n - 8) && word8(8) && word8(n - 16),
        _ => a == b,
    }
}

/// The `N` bytes of `s` from `at`, if it has them, as one array: compared
/// as one word, not by `memcmp`.
#[inline]
fn word<const N: usize>(s: &[u8], at: usize) -> Option<[u8; N]> {
    s.get(at..at + N).and_then(|w| <[u8; N]>::try_from(w).ok())
}

impl Shard {
    /// The time to decide at, under the lock (see [`Read`]).
    #[inline]
    pub(super) fn decision_time(&mut self, read: Read) -> Timestamp {
        match read {
            Read::Given(at) => at,
            Read::Own(at) => {
                self.latest = self.latest.max(at);
                self.latest
            }
        }
    }

    /// The entry of `key`'s policy tagged `tag`, `key` hashing to `hash`.
    pub(super) fn get(&self, hash: u64, key: &str, tag: PolicyTag) -> Option<&Entry> {
        self.entries.find(hash, |k| k.is(key))?.state(tag)
    }

    /// Notes that a state expires at `at` (µs).
    #[inline]
    pub(super) fn expires(&mut self, at: u64) {
        self.next_expiry = self.next_expiry.min(at);
    }

    /// A request of one policy on a key that already holds a state of it (the
    /// common case): the state is stepped where it lies, with one lookup and
    /// no copy. Such a request adds no key, so the bound has nothing to say.
    /// `None` when the key holds no state of the policy yet.
    #[inline]
    pub(super) fn step_known(
        &mut self,
        hash: u64,
        request: &LimitRequest<'_>,
        policy: &Policy,
        now: Timestamp,
        sweep_every: u64,
    ) -> Option<Result<Decision>> {
        let key = request.key;
        let keyed = self.entries.find_mut(hash, |k| k.is(key))?;
        let entry = keyed.state_mut(policy.tag())?;
        let (cost, mode) = (request.cost, request.mode);
        let (decision, ttl) = match step_in_place(policy, key, &mut entry.state, now, cost, mode) {
            Ok(stepped) => stepped,
            Err(e) => return Some(Err(e)),
        };
        if let Some(ttl_us) = ttl {
            let at = now.as_micros().saturating_add(ttl_us);
            entry.expires_at = at;
            self.expires(at);
            self.wrote(now, sweep_every);
        }
        Some(Ok(decision))
    }

    /// Counts a write, and now and then sweeps the states expired for a while:
    /// after at least `sweep_every` writes, and at least as many writes as
    /// states were held after the last sweep, once a state has been expired
    /// that long. A sweep visits every state of the shard, at most those plus
    /// one per write since, so its cost per write stays constant however many
    /// keys there are, also while every write adds a key (measured against
    /// the states held now, writes that each add one would never catch up).
    #[inline]
    pub(super) fn wrote(&mut self, now: Timestamp, sweep_every: u64) {
        self.ops += 1;
        let due = sweep_every.max(u64::try_from(self.swept_len).unwrap_or(u64::MAX));
        let cutoff = now.as_micros().saturating_sub(SWEEP_GRACE_US);
        // Before the first expiry a sweep would drop nothing.
        if self.ops >= due && cutoff >= self.next_expiry {
            self.ops = 0;
            self.sweep(cutoff);
        }
    }

    /// Forgets the states of `key` (hashing to `hash`) under `policies`, and
    /// the key when it has none left.
    pub(super) fn forget(&mut self, hash: u64, key: &str, policies: &[Policy]) {
        let Ok(mut found) = self.entries.find_entry(hash, |k| k.is(key)) else {
            return;
        };
        let keyed = found.get_mut();
        let before = keyed.states.len();
        keyed
            .states
            .retain(|(tag, _)| !policies.iter().any(|p| p.tag() == *tag));
        let after = keyed.states.len();
        self.len -= before - after;
        self.dropped += before - after;
        if after == 0 {
            found.remove();
        }
    }

    /// Drops the states expired at `now` (µs; they read as fresh, so nothing
    /// is forgotten), and the keys left without one, and notes when the
    /// first state kept expires.
    pub(super) fn sweep(&mut self, now: u64) {
        let (mut next, mut len) = (u64::MAX, 0);
        self.entries.retain(|keyed| {
            let states = &mut keyed.states;
            // Most keys hold one policy's state, most of them live.
            if let [(_, kept)] = states.as_slice()
                && kept.expires_at > now
            {
                next = next.min(kept.expires_at);
                len += 1;
                return true;
            }
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
        self.dropped += self.len - len;
        self.len = len;
        self.swept_len = len;
        self.next_expiry = next;
    }

    /// Sweeps the states expired at `read` (raised to this shard's latest
    /// reading, as a decision here would be), if any can be.
    pub(super) fn sweep_at(&mut self, read: Read) {
        let at = self.decision_time(read).as_micros();
        if at >= self.next_expiry {
            self.sweep(at);
        }
    }
}

#[cfg(test)]
mod same_key_tests {
    use super::same_key;

    #[test]
    fn agrees_with_byte_equality_whatever_the_length_and_the_differing_byte() {
        for len in 0..=40 {
            let key: Vec<u8> = (0..len).map(|i| b'a' + (i % 26) as u8).collect();
            assert!(same_key(&key, &key.clone()), "{len}");
            for at in 0..len {
                let mut other = key.clone();
                other[at] ^= 1;
                assert!(!same_key(&key, &other), "{len} at {at}");
            }
            let longer = [key.as_slice(), b"x"].concat();
            assert!(
                !same_key(&key, &longer) && !same_key(&longer, &key),
                "{len}"
            );
        }
    }
}
