//! A shard as the shared read/step/write loop sees it, under its lock: reads
//! and writes of the request's key, and the bound on keys, which is the
//! whole store's.

use std::hash::BuildHasher;

use crate::error::{Error, Result};
use crate::limit::store::{SlotKey, State, StateTable};
use crate::limit::{Decision, Timestamp};

use super::KeyHasher;
use super::shard::{Entry, Keyed, Shard};
use super::shards::Shards;

/// The request's shard under its lock, and the room it takes in the store.
pub(super) struct Table<'a> {
    pub(super) shard: &'a mut Shard,
    pub(super) shards: &'a Shards,
    /// The shard's index in `shards`.
    pub(super) index: usize,
    pub(super) hasher: &'a KeyHasher,
    /// The request's user key (every slot's) and its hash.
    pub(super) key: &'a str,
    pub(super) hash: u64,
    pub(super) max_keys: usize,
    /// Whether a full store may send the request back to have the other
    /// shards swept (see [`crowded`](Self::crowded)).
    pub(super) may_sweep_others: bool,
    /// Whether the request wrote anything (counts towards the next sweep).
    pub(super) wrote: bool,
    /// Where the request's key was found by a read: its write then needs no
    /// second lookup. Forgotten when a sweep moves entries.
    pub(super) bucket: Option<usize>,
    /// Room reserved in the store for states not added yet.
    pub(super) reserved: usize,
    /// Set when the request was refused for room while another shard holds
    /// states that have expired: swept, they would make room.
    pub(super) crowded: bool,
}

impl StateTable for Table<'_> {
    type Error = Error;

    fn read(&mut self, slot: SlotKey<'_>) -> Result<Option<State>> {
        // An expired state reads exactly like no state (property-tested), so it
        // is used as is until a sweep drops it; this also keeps a clock that
        // steps back from forgetting what was consumed.
        let hash = self.hash_of(slot.key)?;
        let key = slot.key;
        let bucket = self.shard.entries.find_bucket_index(hash, |k| k.is(key));
        self.bucket = bucket;
        let keyed = bucket.and_then(|b| self.shard.entries.get_bucket(b));
        Ok(keyed
            .and_then(|k| k.state(slot.policy.tag()))
            .map(|e| e.state.clone()))
    }

    fn admit(
        &mut self,
        writes: &[SlotKey<'_>],
        now: Timestamp,
        decisions: &[Decision],
    ) -> Result<Option<Vec<Decision>>> {
        let at = now.as_micros();
        if self.reserve_added(writes)? {
            return Ok(None);
        }
        if at >= self.shard.next_expiry {
            self.shard.sweep(at);
            self.shards.settle(self.shard);
            self.bucket = None;
            if self.reserve_added(writes)? {
                return Ok(None);
            }
        }
        let others = self.shards.next_expiry_except(self.index);
        self.crowded = self.may_sweep_others && others <= at;
        Ok(Some(full(
            others.min(self.shard.next_expiry),
            at,
            decisions,
        )))
    }

    fn write(&mut self, slot: SlotKey<'_>, state: State, expires_at: Timestamp) -> Result<()> {
        let expires_at = expires_at.as_micros();
        let hash = self.hash_of(slot.key)?;
        let (tag, key, hasher) = (slot.policy.tag(), slot.key, self.hasher);
        let shard = &mut *self.shard;
        shard.expires(expires_at);
        let entry = Entry { state, expires_at };
        // The bucket the read found, if it still holds this key.
        let known = self
            .bucket
            .and_then(|b| shard.entries.get_bucket_mut(b))
            .filter(|k| k.is(key));
        // A known key is found without allocating; only a new one is copied.
        let found = match known {
            Some(keyed) => Some(keyed),
            None => shard.entries.find_mut(hash, |k| k.is(key)),
        };
        let states = match found {
            Some(keyed) => &mut keyed.states,
            None => {
                let keyed = Keyed {
                    key: key.into(),
                    states: Vec::with_capacity(1),
                };
                let rehash = |k: &Keyed| hasher.hash_one(&*k.key);
                &mut shard
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
                shard.len += 1;
                match self.reserved.checked_sub(1) {
                    Some(left) => self.reserved = left,
                    None => self.shards.add_unreserved(),
                }
            }
        }
        self.wrote = true;
        Ok(())
    }
}

impl Table<'_> {
    /// The hash of `key`, which must be the request's own: every slot of a
    /// request is its key's, so they all live in its shard.
    fn hash_of(&self, key: &str) -> Result<u64> {
        if std::ptr::eq(key, self.key) || key == self.key {
            Ok(self.hash)
        } else {
            Err(Error::invalid(
                "key",
                "a request's slots are of its own key",
            ))
        }
    }

    /// Reserves room for the states `writes` would add (each slot not held
    /// yet); `false` (nothing reserved) when the store has no room for them.
    fn reserve_added(&mut self, writes: &[SlotKey<'_>]) -> Result<bool> {
        let mut added = 0;
        for slot in writes {
            let hash = self.hash_of(slot.key)?;
            added += usize::from(self.shard.get(hash, slot.key, slot.policy.tag()).is_none());
        }
        if added == 0 || self.shards.reserve(added, self.max_keys) {
            self.reserved += added;
            return Ok(true);
        }
        Ok(false)
    }
}

/// The refusal of a request that needs a new key while the store is full of
/// live ones: no room until the first key is fresh again at `first` (µs).
/// Evicting a live key instead would hand its owner a fresh quota. (With no
/// state held yet, the room is reserved by requests of other threads about
/// to write: it may be free again at once.)
fn full(first: u64, now: u64, fresh: &[Decision]) -> Vec<Decision> {
    let wait = match first {
        u64::MAX => 1,
        first => first.saturating_sub(now).max(1),
    };
    fresh
        .iter()
        .map(|d| Decision::from_parts(false, d.limit, 0, wait, Some(wait)))
        .collect()
}
