//! Fencing tokens and checks on the resource side.
//!
//! A lease limits concurrency; it does not guarantee exclusive execution once the
//! lease has expired. A holder paused by GC, a VM migration or a slow disk can wake
//! up after its lease expired and another holder has written. Only the protected
//! resource can tell the two apart: every acquisition returns a [`Fence`] that is
//! strictly greater than every fence handed out before for the same key — even
//! after the store lost its counters, since fences are floored by the store's
//! clock (see `docs/leases.md`) — and the resource refuses a write whose fence
//! is *older* than the last one it accepted.
//!
//! A fence *equal* to the stored one is the same holder retrying a write whose
//! reply was lost, or writing twice — if it comes from the same acquisition.
//! So a resource stores the [`AcquisitionId`] beside the fence and accepts an
//! equal fence only with the same id ([`LeaseGuard::stamp`](crate::LeaseGuard::stamp)
//! gives both): then no reuse of a fence, whatever its cause, lets a second
//! holder in.
//!
//! - [`RedisFencedStore`](crate::redis::RedisFencedStore) is such a resource in Redis: a fenced `SET` done by one
//!   atomic script.
//! - For SQL, keep the last accepted fence and its acquisition in the row and
//!   make both part of the update:
//!
//! ```sql
//! UPDATE accounts
//!    SET balance = $2, fence = $3, acquisition = $4
//!  WHERE id = $1
//!    AND (fence < $3 OR (fence = $3 AND acquisition = $4));
//!  -- 0 rows updated: a newer holder wrote first (or another holder with this fence)
//! ```
//!
//! (`fence BIGINT NOT NULL DEFAULT 0, acquisition TEXT`, the id as its 32 hex
//! digits; fences fit a `BIGINT`, see [`Fence`].) An `UPDATE` that touches zero
//! rows means the token is stale: the caller must give up (its lease is gone).
//! Retrying with the same stamp after a lost reply is safe: it updates the row
//! again.

use std::fmt;

mod floor;
mod stamp;

pub(crate) use floor::{FloorUnit, next_fence, wall_clock_us};
pub use stamp::{AcquisitionId, AcquisitionIdError, FenceStamp};

/// How long a store keeps a fence counter after its last grant by default: a
/// day. After that the counter is dropped and the key's next fence starts
/// from the store's clock (see the Redis and SQLite options'
/// `fence_retention`).
pub const DEFAULT_FENCE_RETENTION: std::time::Duration =
    std::time::Duration::from_secs(24 * 60 * 60);

/// A fencing token: strictly increasing per lease key across all holders.
///
/// Pass it to the protected resource with every write; see the [module
/// docs](crate::fence). Fences are large numbers: at least the store's clock
/// in microseconds since the Unix epoch (about 1.8·10¹⁵ today), below 2⁵³
/// until the year 2255, so they are exact in a signed 64-bit column, in a Lua
/// or JavaScript number and in JSON. Compare them; never assume they start at
/// 1 or grow by 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Fence(u64);

impl Fence {
    /// Wraps a raw token (as read back from a resource).
    pub const fn new(value: u64) -> Self {
        Fence(value)
    }

    /// The token as a number. For a signed SQL column use
    /// `i64::try_from(fence)`, which refuses a fence past `i64::MAX`.
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

impl From<u64> for Fence {
    fn from(value: u64) -> Self {
        Fence(value)
    }
}

/// A fence that does not fit the other integer type: past `i64::MAX` for a
/// SQL `BIGINT`, or a negative number read back as a fence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("fence {value} does not fit: {reason}")]
pub struct FenceRangeError {
    value: i128,
    reason: &'static str,
}

impl FenceRangeError {
    /// The value that did not fit.
    pub fn value(&self) -> i128 {
        self.value
    }
}

/// For a resource that stores the fence as a signed 64-bit integer
/// (PostgreSQL and SQLite `BIGINT`/`INTEGER`): lossless up to `i64::MAX`,
/// a [`FenceRangeError`] past it (never silently wrapped to a negative
/// number, which would make every later write look stale or every stale one
/// look new).
///
/// ```
/// use tenure::Fence;
///
/// assert_eq!(i64::try_from(Fence::new(42)), Ok(42));
/// assert!(i64::try_from(Fence::new(u64::MAX)).is_err());
/// assert_eq!(Fence::try_from(42_i64), Ok(Fence::new(42)));
/// assert!(Fence::try_from(-1_i64).is_err());
/// ```
impl TryFrom<Fence> for i64 {
    type Error = FenceRangeError;

    fn try_from(fence: Fence) -> Result<i64, FenceRangeError> {
        i64::try_from(fence.0).map_err(|_| FenceRangeError {
            value: i128::from(fence.0),
            reason: "above i64::MAX",
        })
    }
}

/// A fence read back from a signed 64-bit column; negative numbers are
/// refused.
impl TryFrom<i64> for Fence {
    type Error = FenceRangeError;

    fn try_from(value: i64) -> Result<Fence, FenceRangeError> {
        u64::try_from(value)
            .map(Fence)
            .map_err(|_| FenceRangeError {
                value: i128::from(value),
                reason: "negative",
            })
    }
}

/// The result of a fenced write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
#[must_use]
pub enum FencedWrite {
    /// The token was newer than any accepted before, or equal to the last one
    /// and from the same acquisition (a retry whose first reply was lost, or a
    /// second write under the same lease): the value was stored.
    Applied,
    /// A write with a newer token was accepted before — or one with this
    /// token from another acquisition (or from a writer that named none): a
    /// newer holder wrote, this holder's lease is gone, nothing changed.
    Rejected {
        /// The token of the last accepted write.
        current: Fence,
    },
}
