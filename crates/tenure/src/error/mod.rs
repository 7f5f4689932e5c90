//! The one error type of tenure.
//!
//! Refusals are values where the call can return one: a lease held by
//! someone else is `None` from [`Lease::try_acquire`](crate::Lease::try_acquire)
//! or [`Attempt::Held`](crate::Attempt::Held), a lease that is no longer ours
//! is [`ReleaseOutcome::NotHeld`](crate::ReleaseOutcome::NotHeld). Only a call
//! that promises a guard, [`Lease::acquire_timeout`](crate::Lease::acquire_timeout),
//! reports a refusal as [`Error::Busy`], so `?` passes it on; [`Error::is_busy`]
//! tells it apart from the rest of [`Error`], which is for infrastructure
//! failures and bad input. Every message names the key and the cause.
//!
//! The cause of a store failure is kept as the error it came from, a [`Cause`]
//! (the redis-rs or rusqlite error, or a message when tenure itself found the
//! fault): its text is part of the message, and it is the error's
//! [`source()`](std::error::Error::source), so callers can downcast it.
//!
//! This module is the bottom of the crate: it imports nothing from tenure.

use std::time::Duration;

mod node;

pub(crate) use node::list_votes;
pub use node::{NodeOutcome, NodeVote};

/// Error replies of a Redis server that mean "not now" rather than "never":
/// loading its dataset after a restart, busy with a script, a failover or a
/// cluster reconfiguration in progress.
const TRANSIENT_REPLIES: [&str; 6] = [
    "LOADING",
    "BUSY",
    "TRYAGAIN",
    "MASTERDOWN",
    "CLUSTERDOWN",
    "READONLY",
];

/// The underlying error of a store failure: the store client's own error
/// (e.g. `redis::RedisError`, `rusqlite::Error`), or a message (`String` and
/// `&str` convert with `.into()`) when tenure itself found the fault, e.g. a
/// malformed reply.
pub type Cause = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A `Result` with tenure's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in tenure, apart from ordinary refusals.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The key is empty, too long, or otherwise unusable.
    #[error("invalid key {key:?}: {reason}")]
    InvalidKey {
        /// The key as given (truncated to 64 characters when huge).
        key: String,
        /// Why it was refused.
        reason: String,
    },

    /// An argument other than the key is out of range (zero TTL, zero rate…).
    #[error("invalid {what}: {reason}")]
    InvalidArgument {
        /// The argument's name, e.g. `"ttl"`.
        what: &'static str,
        /// Why it was refused.
        reason: String,
    },

    /// The backend URL or configuration could not be understood.
    #[error("invalid backend configuration {url:?}: {reason}")]
    Config {
        /// The URL or setting as given.
        url: String,
        /// What is wrong with it.
        reason: String,
    },

    /// The backend could not be reached (connection refused, reset, closed).
    #[error("backend {backend} unreachable during {op}{}: {cause}", on_key(key))]
    Unreachable {
        /// Which backend, e.g. `redis://127.0.0.1:6379`.
        backend: String,
        /// The operation, e.g. `"acquire"`.
        op: &'static str,
        /// The key the operation was for.
        key: String,
        /// The underlying cause, also the error's `source()`.
        #[source]
        cause: Cause,
    },

    /// The backend did not answer in time.
    #[error(
        "backend {backend} timed out after {after:?} during {op}{}",
        on_key(key)
    )]
    Timeout {
        /// Which backend.
        backend: String,
        /// The operation, e.g. `"extend"`.
        op: &'static str,
        /// The key the operation was for.
        key: String,
        /// How long tenure waited.
        after: Duration,
    },

    /// A key tenure needs holds a value of another type or a value tenure did not
    /// write (e.g. a hash where a lease string belongs, a non-integer fence counter).
    #[error("key {key:?} holds data tenure cannot use: {detail}")]
    WrongType {
        /// The storage key at fault.
        key: String,
        /// What the backend said.
        detail: String,
    },

    /// The backend answered with an error tenure does not classify further.
    #[error("backend {backend} failed during {op}{}: {cause}", on_key(key))]
    Backend {
        /// Which backend.
        backend: String,
        /// The operation.
        op: &'static str,
        /// The key the operation was for.
        key: String,
        /// What the backend said, also the error's `source()`.
        #[source]
        cause: Cause,
    },

    /// The lease was lost while a guarded operation ran (see
    /// [`LeaseGuard::run`](crate::LeaseGuard::run)).
    #[error("lease on key {key:?} was lost")]
    LeaseLost {
        /// The lease's key.
        key: String,
    },

    /// Someone else held the lease for the whole wait of
    /// [`Lease::acquire_timeout`](crate::Lease::acquire_timeout) (or the
    /// election of [`Election::campaign_timeout`](crate::election::Election::campaign_timeout)).
    /// A refusal, not a failure: [`is_busy`](Error::is_busy) is true, and
    /// [`is_infrastructure`](Error::is_infrastructure) and
    /// [`is_transient`](Error::is_transient) are false.
    #[error("key {key:?} is held by another holder{}", retry_in.map(|d| format!(" (free in {d:?} at the latest, unless renewed)")).unwrap_or_default())]
    Busy {
        /// The lease's key.
        key: String,
        /// The holder's TTL left, when the store knows it: the key is free by
        /// then unless the holder renews it.
        retry_in: Option<Duration>,
    },

    /// The store behind the handle cannot do what was asked, e.g. keep
    /// rate limits that all processes share on a quorum of Redis masters.
    /// The message names what to use instead. Not transient: asking again
    /// gives the same answer.
    #[error("{store} cannot keep {what}: {instead}")]
    Unsupported {
        /// Which store, as its URL (password redacted).
        store: String,
        /// What it cannot do, e.g. `"shared rate limits"`.
        what: &'static str,
        /// What to use instead.
        instead: String,
    },

    /// Too few nodes of a quorum answered for the operation to be decided (see
    /// [`QuorumStore`](crate::quorum::QuorumStore)). A lease held by another
    /// client on a majority is not this error but an ordinary `Held` outcome.
    #[error(
        "quorum unavailable during {op}{}: {needed} of {} nodes needed; {}",
        on_key(key),
        votes.len(),
        list_votes(votes)
    )]
    QuorumUnavailable {
        /// The operation, e.g. `"acquire"`.
        op: &'static str,
        /// The key the operation was for.
        key: String,
        /// How many nodes had to agree (N/2+1).
        needed: usize,
        /// What every node answered, in the order the nodes were configured.
        votes: Vec<NodeVote>,
    },

    /// Fewer replicas than required acknowledged a lease write (`WAIT`); after an
    /// acquire the lease was released again, after an extend it was kept (see [`RedisOptions::require_replicas`](crate::redis::RedisOptions::require_replicas)).
    #[error(
        "backend {backend}: only {acked} of {needed} required replicas acknowledged {op} on key {key:?} within {waited:?}; {}",
        if *.op == "extend" { "the lease was kept until its last confirmed deadline" } else { "the lease was released" }
    )]
    ReplicasUnacknowledged {
        /// Which master.
        backend: String,
        /// The operation, `"acquire"` or `"extend"`.
        op: &'static str,
        /// The key the operation was for.
        key: String,
        /// Replicas required.
        needed: u32,
        /// Replicas that acknowledged in time.
        acked: u32,
        /// How long the master waited.
        waited: Duration,
    },

    /// The store's file cannot be used: it cannot be opened or created, is not a
    /// database, is corrupt, or belongs to another application.
    #[error("backend {backend} cannot be used: {reason}")]
    Storage {
        /// Which backend, e.g. `sqlite:/var/lib/app/tenure.db`.
        backend: String,
        /// What is wrong with it, as a sentence ("the file is not a SQLite
        /// database").
        reason: String,
    },

    /// The operating system's random number generator failed, so no owner
    /// token could be drawn. Not a store failure: no store was asked anything.
    #[error("the operating system's random number generator failed: {cause}")]
    Rng {
        /// What the RNG reported, also the error's `source()`.
        #[source]
        cause: Cause,
    },

    /// A rate-limit request costs more units than a policy's capacity: it could
    /// never be admitted, so waiting would be in vain.
    #[error("a cost of {cost} units exceeds the limiter's capacity of {capacity}")]
    CostExceedsCapacity {
        /// The units asked for.
        cost: u64,
        /// The largest cost the policy can ever admit.
        capacity: u64,
    },
}

impl Error {
    /// `true` for failures of the backend itself (unreachable, timeout, server
    /// error) or of the system under it (the OS random number generator), as
    /// opposed to bad input or data.
    pub fn is_infrastructure(&self) -> bool {
        matches!(
            self,
            Error::Unreachable { .. }
                | Error::Timeout { .. }
                | Error::Backend { .. }
                | Error::QuorumUnavailable { .. }
                | Error::ReplicasUnacknowledged { .. }
                | Error::Storage { .. }
                | Error::Rng { .. }
        )
    }

    /// `true` when the lease was held by someone else for the whole wait
    /// ([`Error::Busy`]): an ordinary refusal, not a failure of the store.
    pub fn is_busy(&self) -> bool {
        matches!(self, Error::Busy { .. })
    }

    /// `true` for failures that may go away by themselves, so that trying
    /// again later can succeed: the backend is unreachable (refused, reset,
    /// restarting), timed out (frozen, overloaded, a SQLite write lock held
    /// too long), answered `LOADING`, `BUSY`, `TRYAGAIN`, `MASTERDOWN`,
    /// `CLUSTERDOWN` or `READONLY` (a failover in progress), or too few quorum
    /// nodes or replicas answered.
    ///
    /// `false` for everything retrying cannot fix: bad input or configuration,
    /// authentication failures, data of the wrong type, an unusable store file,
    /// and errors the backend did not classify further.
    ///
    /// [`Lease::acquire_timeout`](crate::Lease::acquire_timeout) and the
    /// other acquire calls that wait retry transient errors while their
    /// budget lasts.
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Unreachable { .. }
            | Error::Timeout { .. }
            | Error::QuorumUnavailable { .. }
            | Error::ReplicasUnacknowledged { .. } => true,
            Error::Backend { cause, .. } => {
                let cause = cause.to_string();
                TRANSIENT_REPLIES.iter().any(|code| {
                    cause
                        .split(|c: char| !c.is_ascii_alphanumeric())
                        .any(|w| w == *code)
                })
            }
            _ => false,
        }
    }

    pub(crate) fn invalid(what: &'static str, reason: impl Into<String>) -> Self {
        Error::InvalidArgument {
            what,
            reason: reason.into(),
        }
    }
}

/// ` on key "K"` for an operation on a key; nothing for one on no key (a
/// connect, a store-wide read).
fn on_key(key: &str) -> String {
    if key.is_empty() {
        String::new()
    } else {
        format!(" on key {key:?}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backend(cause: &str) -> Error {
        Error::Backend {
            backend: "redis://h".into(),
            op: "acquire",
            key: "k".into(),
            cause: cause.into(),
        }
    }

    #[test]
    fn transient_and_permanent_errors() {
        assert!(backend("LOADING: Redis is loading the dataset in memory").is_transient());
        assert!(backend("BUSY Redis is busy running a script").is_transient());
        assert!(!backend("WRONGPASS invalid username-password pair").is_transient());
        assert!(!backend("NOAUTH Authentication required.").is_transient());
        assert!(!backend("ERR unknown command").is_transient());
        assert!(!Error::invalid("ttl", "too short").is_transient());
        let wrong = Error::WrongType {
            key: "k".into(),
            detail: "hash".into(),
        };
        assert!(!wrong.is_transient());
        let timeout = Error::Timeout {
            backend: "redis://h".into(),
            op: "acquire",
            key: "k".into(),
            after: Duration::from_millis(500),
        };
        assert!(timeout.is_transient());
    }
}
