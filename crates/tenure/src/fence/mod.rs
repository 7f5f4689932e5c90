//! Fencing tokens and checks on the resource side.
//!
//! A lease limits concurrency; it does not guarantee exclusive execution once the
//! lease has expired. A holder paused by GC, a VM migration or a slow disk can wake
//! up after its lease expired and another holder has written. Only the protected
//! resource can tell the two apart: every acquisition returns a [`Fence`] that is
//! strictly greater than every fence handed out before for the same key, and the
//! resource refuses a write whose fence is *older* than the last one it accepted.
//! A fence equal to the stored one comes from the same acquisition — the same
//! holder retrying a write whose reply was lost, or writing twice — and is
//! accepted.
//!
//! - [`RedisFencedStore`](crate::redis::RedisFencedStore) is such a resource in Redis: a fenced `SET` done by one
//!   atomic script.
//! - For SQL, keep the last accepted fence in the row and make it part of the
//!   update:
//!
//! ```sql
//! UPDATE accounts
//!    SET balance = $2, fence = $3
//!  WHERE id = $1 AND fence <= $3;  -- 0 rows updated: a newer holder wrote first
//! ```
//!
//! An `UPDATE` that touches zero rows means the token is stale: a newer holder
//! wrote, so the caller must give up (its lease is gone). Retrying with the same
//! token after a lost reply is safe: it updates the row again.

use std::fmt;

/// A fencing token: strictly increasing per lease key across all holders.
///
/// Pass it to the protected resource with every write; see the [module
/// docs](crate::fence).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Fence(u64);

impl Fence {
    /// Wraps a raw token (as read back from a resource).
    pub const fn new(value: u64) -> Self {
        Fence(value)
    }

    /// The token as a number, e.g. for a SQL parameter.
    pub const fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for Fence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl From<Fence> for u64 {
    fn from(f: Fence) -> u64 {
        f.0
    }
}

/// The result of a fenced write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FencedWrite {
    /// The token was not older than any accepted before: the value was stored.
    /// A token *equal* to the stored one is the same holder writing again (each
    /// acquisition has its own fence): a retry whose first reply was lost, or a
    /// second write under the same lease. Both are applied.
    Applied,
    /// A write with a newer token was accepted before: a newer holder wrote,
    /// this holder's lease is gone, nothing changed.
    Rejected {
        /// The token of the last accepted write.
        current: Fence,
    },
}
