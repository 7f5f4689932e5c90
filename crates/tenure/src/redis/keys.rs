//! The Redis key layout: the one place that turns a user key into the names of
//! Redis keys and channels, and the duration conversions Redis arguments use.
//!
//! For a lease named `orders:42` with the default prefix `tenure:`:
//!
//! | name | what |
//! |---|---|
//! | `tenure:{orders:42}` | the lease key (the holder's owner token, with TTL) |
//! | `tenure:{orders:42}:fence` | the fence counter (TTL: the fence retention) |
//! | `tenure:{orders:42}:holder` | who holds it (a hash with the lease's TTL, only when recorded) |
//! | `tenure:{orders:42}:queue` | the waiting line (a list, with TTL; see `scripts/lease_line.lua`) |
//! | `tenure:{orders:42}:released` | the channel hand-offs and releases are published on |
//! | `tenure:resource:balance:42` | a [`RedisFencedStore`](super::RedisFencedStore) resource |
//!
//! The lease names share the hash tag `{orders:42}` (see
//! [`hash_tag`](crate::key::hash_tag)), so they live in one Redis Cluster slot.
//! The strings are stored state: changing any of them orphans existing leases
//! and fence counters. Rate-limit keys are named by
//! [`Policy::storage_key`](crate::limit::Policy::storage_key), which is public.

use std::sync::Arc;
use std::time::Duration;

use crate::key::hash_tag;

/// The suffixes of a lease's names after `<prefix>{<key>}` (the table
/// above): what [`Keys::names`] takes to name several in one allocation.
pub(crate) mod suffix {
    /// The lease key itself.
    pub(crate) const LEASE: &str = "";
    /// The fence counter.
    pub(crate) const FENCE: &str = ":fence";
    /// The hash describing the holder.
    pub(crate) const HOLDER: &str = ":holder";
    /// The waiting line.
    pub(crate) const QUEUE: &str = ":queue";
    /// The channel releases and hand-offs are published on.
    pub(crate) const RELEASED: &str = ":released";
}

/// Several names of one lease in one string (see [`Keys::names`]).
#[derive(Debug)]
pub(crate) struct Names<const N: usize> {
    text: String,
    ends: [usize; N],
}

impl<const N: usize> Names<N> {
    /// The names, in the order of their suffixes.
    pub(crate) fn get(&self) -> [&str; N] {
        let mut start = 0;
        self.ends.map(|end| {
            let name = &self.text[start..end];
            start = end;
            name
        })
    }
}

/// The key names of one prefix. Cheap to clone.
#[derive(Debug, Clone)]
pub(crate) struct Keys {
    prefix: Arc<str>,
}

impl Keys {
    pub(crate) fn new(prefix: impl Into<Arc<str>>) -> Self {
        Keys {
            prefix: prefix.into(),
        }
    }

    /// The prefix every name starts with.
    pub(crate) fn prefix(&self) -> &str {
        &self.prefix
    }

    /// `<prefix>{<key>}<suffix>`: a name of the lease `key`, built in one
    /// allocation (these are formatted several times per acquire + release,
    /// and `format!` cost about a thousand instructions each).
    fn named(&self, key: &str, suffix: &str) -> String {
        let tag = hash_tag(key);
        let mut name = String::with_capacity(self.prefix.len() + tag.len() + 2 + suffix.len());
        name.push_str(&self.prefix);
        name.push('{');
        name.push_str(&tag);
        name.push('}');
        name.push_str(suffix);
        name
    }

    /// Names of the lease `key` with each of `suffixes`, in one buffer (one
    /// allocation for all, where each `String` would cost its own).
    pub(crate) fn names<const N: usize>(&self, key: &str, suffixes: [&str; N]) -> Names<N> {
        let tag = hash_tag(key);
        let stem = self.prefix.len() + tag.len() + 2;
        let mut text = String::with_capacity(suffixes.iter().map(|s| stem + s.len()).sum());
        text.push_str(&self.prefix);
        text.push('{');
        text.push_str(&tag);
        text.push('}');
        // Every further name repeats the stem: one copy from the first.
        let mut first = true;
        let ends = suffixes.map(|suffix| {
            if !std::mem::take(&mut first) {
                text.extend_from_within(..stem);
            }
            text.push_str(suffix);
            text.len()
        });
        Names { text, ends }
    }

    /// The key holding the lease `key`.
    pub(crate) fn lease(&self, key: &str) -> String {
        self.named(key, suffix::LEASE)
    }

    /// The fence counter of the lease `key`.
    pub(crate) fn fence(&self, key: &str) -> String {
        self.named(key, suffix::FENCE)
    }

    /// The lease key and the fence counter of `key`, for the scripts that take
    /// both.
    #[cfg_attr(not(feature = "quorum"), allow(dead_code))]
    pub(crate) fn lease_and_fence(&self, key: &str) -> [String; 2] {
        [self.lease(key), self.fence(key)]
    }

    /// The hash describing the holder of `key`, when it recorded itself.
    pub(crate) fn holder(&self, key: &str) -> String {
        self.named(key, suffix::HOLDER)
    }

    /// The lease key, the fence counter and the holder hash of `key`.
    pub(crate) fn lease_fence_holder(&self, key: &str) -> [String; 3] {
        [self.lease(key), self.fence(key), self.holder(key)]
    }

    /// The lease key, the fence counter and the waiting line of `key`, for
    /// the scripts that take all three.
    pub(crate) fn lease_fence_queue(&self, key: &str) -> [String; 3] {
        [
            self.lease(key),
            self.fence(key),
            self.named(key, suffix::QUEUE),
        ]
    }

    /// The channel a release of `key` is published on (waiters listen).
    pub(crate) fn released(&self, key: &str) -> String {
        self.named(key, suffix::RELEASED)
    }

    /// The hash of a fenced resource. One key, so it needs no hash tag.
    pub(crate) fn resource(&self, resource: &str) -> String {
        format!("{}resource:{resource}", self.prefix)
    }
}

/// Whole milliseconds of `d` for a Redis argument (`PX`, `WAIT`), saturating.
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A millisecond count from a Redis reply (`PTTL`, a script's TTL): `None` for
/// the negative codes (no key, no TTL).
pub(crate) fn from_millis(ms: i64) -> Option<Duration> {
    u64::try_from(ms).ok().map(Duration::from_millis)
}

/// The names of the recipes' keys (records, semaphores), beside the lease's.
impl Keys {
    /// The hash holding the fenced record next to the lease `key`.
    pub(crate) fn record(&self, key: &str) -> String {
        format!("{}:record", self.lease(key))
    }

    /// The state of the gate (semaphore or read-write lease) on `key`:
    /// `…:permits` or `…:rw`.
    pub(crate) fn gate(&self, kind: crate::gate::GateKind, key: &str) -> String {
        format!("{}:{}", self.lease(key), kind.name())
    }

    /// The state and the fence counter of a gate (apart from the lease's).
    pub(crate) fn gate_and_fence(&self, kind: crate::gate::GateKind, key: &str) -> [String; 2] {
        let state = self.gate(kind, key);
        let fence = format!("{state}:fence");
        [state, fence]
    }

    /// The channel a gate's grants and releases are published on.
    pub(crate) fn gate_channel(&self, kind: crate::gate::GateKind, key: &str) -> String {
        format!("{}:released", self.gate(kind, key))
    }
}

#[cfg(test)]
mod tests {
    use super::Keys;
    use super::suffix::{FENCE, HOLDER, LEASE, QUEUE, RELEASED};

    #[test]
    fn names_in_one_buffer_are_the_names_one_by_one() {
        let keys = Keys::new("tenure:");
        for key in ["orders:42", "}x", "\\y", "k"] {
            let names = keys.names(key, [LEASE, FENCE, QUEUE, RELEASED]);
            assert_eq!(
                names.get(),
                [
                    keys.lease(key).as_str(),
                    keys.fence(key).as_str(),
                    keys.named(key, QUEUE).as_str(),
                    keys.released(key).as_str()
                ]
            );
            let names = keys.names(key, [HOLDER, LEASE]);
            assert_eq!(
                names.get(),
                [keys.holder(key).as_str(), keys.lease(key).as_str()]
            );
        }
    }
}
