//! For store implementers: the lease store trait and its reply types. Users
//! of leases need none of it.
//!
//! The lease store trait: what a store must provide so the [`Lease`](crate::Lease)
//! API can build guards, waiting, watchdog renewal and the lost-lease signal on
//! it — the same behaviour on every store.
//!
//! A store keeps lease keys with an owner token and a TTL, and a fence counter per
//! key (etcd uses the key's create revision instead). The implementations live
//! in one folder each:
//!
//! - [`MemoryStore`](crate::memory::MemoryStore): in-process, for unit tests and
//!   single-process programs.
//! - [`RedisStore`](crate::redis::RedisStore): one Redis master, a Redis Cluster
//!   or the master Sentinel names, one round trip per operation; optionally
//!   waiting for replica acknowledgements.
//! - [`QuorumStore`](crate::quorum::QuorumStore): N independent Redis masters
//!   (Redlock) with fencing tokens that stay monotonic across holders.
//! - [`SqliteStore`](crate::sqlite::SqliteStore): a SQLite file shared by the
//!   processes of one host; the embedded default of the `tenure` command line.
//! - `EtcdStore` (feature `etcd`, in `tenure::etcd`): an etcd cluster; grants
//!   committed by a majority.
//!
//! Every store counts a lease valid for its TTL minus one clock-drift margin,
//! [`DriftMargin`] (default 1% + 2 ms; [`drift`] and [`valid_until`] use it).

use std::borrow::Cow;
use std::fmt::Debug;
use std::time::Duration;

use async_trait::async_trait;

use super::holder::{Holder, HolderInfo};
pub use super::release_watch::{Handoff, ReleaseWatch};
use crate::clock::{Clock, Moment, SystemClock};
use crate::error::Result;
use crate::fence::Fence;
pub use crate::token::OwnerToken;

/// The clock-drift margin subtracted from the validity of a lease:
/// `ttl · per_mille / 1000 + fixed`. The default, 1% + 2 ms as Redlock advises,
/// is the margin of every store ([`drift`], [`valid_until`]); a
/// [`QuorumStore`](crate::quorum::QuorumStore) can be given another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DriftMargin {
    /// Proportional part, in thousandths of the TTL.
    pub per_mille: u32,
    /// Fixed part, for the resolution of the nodes' clocks.
    pub fixed: Duration,
}

impl Default for DriftMargin {
    fn default() -> Self {
        DriftMargin {
            per_mille: 10,
            fixed: Duration::from_millis(2),
        }
    }
}

impl DriftMargin {
    /// The margin for `ttl`.
    pub fn of(&self, ttl: Duration) -> Duration {
        let part = ttl.as_nanos().saturating_mul(u128::from(self.per_mille)) / 1000;
        Duration::from_nanos(u64::try_from(part).unwrap_or(u64::MAX)).saturating_add(self.fixed)
    }

    /// What a holder may count on of `ttl`: the TTL minus the margin.
    pub fn validity(&self, ttl: Duration) -> Duration {
        ttl.saturating_sub(self.of(ttl))
    }
}

/// The default clock-drift margin subtracted from a TTL: 1% plus 2 ms
/// ([`DriftMargin::default`]).
pub fn drift(ttl: Duration) -> Duration {
    DriftMargin::default().of(ttl)
}

/// The local validity deadline of a lease whose request was sent at `sent`: the
/// TTL minus the drift margin, measured on the deadline clock (see
/// [`clock`](crate::clock)) from the moment the request left (not from when the
/// answer came back), so the round trip is subtracted too.
pub fn valid_until(sent: Moment, ttl: Duration) -> Moment {
    sent + DriftMargin::default().validity(ttl)
}

/// What a backend answers to an acquire attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum AcquireReply {
    /// The lease is ours.
    Acquired {
        /// The fencing token of this acquisition.
        fence: Fence,
        /// The reading of the backend's [`clock`](LeaseStore::clock) until
        /// which the holder may assume it is alone (already shortened by the
        /// clock-drift margin).
        valid_until: Moment,
    },
    /// Someone else holds it.
    Held {
        /// The remaining TTL of the other holder, when the backend knows it.
        ttl_left: Option<Duration>,
    },
}

/// A waiter's place in a store's waiting line, as the store last wrote it.
/// Opaque: only the store that handed it out reads it. Its `Debug` shows
/// only its length: a place may hold the waiter's owner token.
///
/// A place may also say when the call that wrote it was sent
/// ([`written_at`](Self::written_at)), when that was not the look that
/// returned it (a store that keeps its waiters' places alive in the
/// background): a hand-off that took the waiter out of line from that place
/// ran after that moment. Places compare by what the store wrote alone.
#[derive(Clone)]
pub struct QueuePlace {
    stored: String,
    written: Option<Moment>,
}

impl PartialEq for QueuePlace {
    fn eq(&self, other: &Self) -> bool {
        self.stored == other.stored
    }
}

impl Eq for QueuePlace {}

impl Debug for QueuePlace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "QueuePlace({} bytes)", self.stored.len())
    }
}

impl QueuePlace {
    /// A place as the store wrote it.
    pub fn new(stored: impl Into<String>) -> Self {
        QueuePlace {
            stored: stored.into(),
            written: None,
        }
    }

    /// A place as the store wrote it with a call sent at `written`, a
    /// reading of the store's [`clock`](LeaseStore::clock).
    pub fn written_at(stored: impl Into<String>, written: Moment) -> Self {
        QueuePlace {
            stored: stored.into(),
            written: Some(written),
        }
    }

    /// The place as the store wrote it.
    pub fn as_str(&self) -> &str {
        &self.stored
    }

    /// When the call that wrote the place was sent, if the store said so.
    pub fn written(&self) -> Option<Moment> {
        self.written
    }
}

/// What a backend answers to an extend attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ExtendReply {
    /// The TTL was reset; the lease is valid until the given instant.
    Extended {
        /// New validity deadline on the backend's [`clock`](LeaseStore::clock).
        valid_until: Moment,
    },
    /// The key no longer holds our token (expired, deleted or taken over).
    NotHeld,
}

/// What a backend answers to a release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReleaseOutcome {
    /// Our key was deleted.
    Released,
    /// The key did not hold our token; nothing was changed.
    NotHeld,
}

/// A read-only view of a lease key.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaseStatus {
    /// Whether some holder has the lease now.
    pub held: bool,
    /// The holder's remaining TTL (`None` when free or when the key has no TTL).
    pub ttl_left: Option<Duration>,
    /// The last fence handed out for this key: `None` if it was never
    /// acquired, and on etcd whenever the key is free (the fence there is the
    /// create revision of a key that exists only while held).
    pub fence: Option<Fence>,
    /// Where the backend stores the lease (e.g. the Redis key).
    pub storage_key: String,
    /// Who holds it, when the holder recorded it (see
    /// [`Lease::record_holder`](crate::Lease::record_holder)); `None` when
    /// free or when the holder recorded nothing. Never the owner token.
    pub holder: Option<Holder>,
    /// How many wait for the lease, where the store can tell: on Redis the
    /// processes subscribed to its release channel (one per waiting process,
    /// however many tasks wait in it), in the memory store the waiting tasks,
    /// on etcd and SQLite the live places in the lease's waiting line (one
    /// per waiting task), on a quorum the largest count of any node; `None`
    /// where the store cannot tell (a Redis Cluster, or a server that refuses
    /// `PUBSUB NUMSUB`).
    pub waiters: Option<u64>,
}

impl LeaseStatus {
    /// A lease that is free, with the last fence handed out.
    pub fn free(storage_key: String, fence: Option<Fence>) -> Self {
        LeaseStatus {
            held: false,
            ttl_left: None,
            fence,
            storage_key,
            holder: None,
            waiters: None,
        }
    }
}

/// The operations a lease store provides. All methods are atomic on the store.
///
/// Implementations must validate nothing about keys or TTLs: the lease layer has
/// done it. They must return [`Error`](crate::Error) only for infrastructure
/// failures and bad stored data, never for an ordinary refusal.
#[async_trait]
pub trait LeaseStore: Debug + Send + Sync + 'static {
    /// Sets `key` to `token` with `ttl` unless it exists; on success increments
    /// the key's fence counter and returns it. With `holder`, records it (and
    /// the acquisition time) beside the lease, to expire and be renewed with
    /// it and be reported only while this grant holds the lease; without,
    /// records nothing (and any earlier record is
    /// not reported for this lease).
    async fn try_acquire(
        &self,
        key: &str,
        token: &OwnerToken,
        ttl: Duration,
        holder: Option<&HolderInfo>,
    ) -> Result<AcquireReply>;

    /// Resets the TTL of `key` to `ttl` if it still holds `token`.
    async fn extend(&self, key: &str, token: &OwnerToken, ttl: Duration) -> Result<ExtendReply>;

    /// Deletes `key` if it still holds `token`, and wakes waiters.
    async fn release(&self, key: &str, token: &OwnerToken) -> Result<ReleaseOutcome>;

    /// Reads the state of `key` without changing it.
    async fn status(&self, key: &str) -> Result<LeaseStatus>;

    /// The owner token of the lease on `key` while it is held, `None` when it
    /// is free: what a forced release (an operator's break-glass, see
    /// [`Coordinator::force_release`](crate::Coordinator::force_release))
    /// passes to [`release`](Self::release). The default refuses with
    /// [`Error::Config`](crate::Error::Config).
    async fn holder_token(&self, key: &str) -> Result<Option<OwnerToken>> {
        let _ = key;
        Err(crate::Error::Config {
            url: self.describe(),
            reason: "this store cannot release a lease held by someone else".into(),
        })
    }

    /// The leases held now whose key starts with `prefix`, by key, in key
    /// order. The default refuses: a store that cannot list says so with
    /// [`Error::Config`](crate::Error::Config).
    async fn list(&self, prefix: &str) -> Result<Vec<(String, LeaseStatus)>> {
        let _ = prefix;
        Err(crate::Error::Config {
            url: self.describe(),
            reason: "this store cannot list its leases".into(),
        })
    }

    /// Starts watching `key` for releases. Call it *before* an acquire attempt so
    /// a release between the attempt and the wait is not missed.
    async fn watch_releases(&self, key: &str) -> ReleaseWatch;

    /// One look by a waiter that stands in line for `key` as `token` (the same
    /// token for the whole wait): on a store with a waiting line, takes the
    /// lease when it was handed to `token` or is free with `token` first in
    /// line, and otherwise keeps `token`'s place (`place` is the one the last
    /// look returned) or takes one at the end. The first look of a wait
    /// (`place` `None`) is also its first attempt. A lease taken here counts
    /// its validity from this call, not from when the wait began, and records
    /// `holder` as [`try_acquire`](Self::try_acquire) does. A store whose
    /// turn watch announces a [`Handoff`]
    /// promises that the hand-off ran after the look that returned its place
    /// (the waiter then takes the lease without another look).
    ///
    /// The default, for stores without a line, is one
    /// [`try_acquire`](Self::try_acquire) and no place: waiting is a race.
    async fn wait_turn(
        &self,
        key: &str,
        token: &OwnerToken,
        ttl: Duration,
        holder: Option<&HolderInfo>,
        place: Option<&QueuePlace>,
    ) -> Result<(AcquireReply, Option<QueuePlace>)> {
        let _ = place;
        Ok((self.try_acquire(key, token, ttl, holder).await?, None))
    }

    /// Leaves the line of `key` (best effort: a place left behind dies after
    /// its TTL) and, if the lease was handed to `token` meanwhile, passes it on
    /// as [`release`](Self::release) would. The default is a release.
    async fn leave_line(
        &self,
        key: &str,
        token: &OwnerToken,
        place: Option<&QueuePlace>,
    ) -> Result<ReleaseOutcome> {
        let _ = place;
        self.release(key, token).await
    }

    /// Starts watching for the lease of `key` to be handed to `token` (or, on a
    /// store without a line, for any release). Call it before the first
    /// [`wait_turn`](Self::wait_turn).
    async fn watch_turn(&self, key: &str, token: &OwnerToken) -> ReleaseWatch {
        let _ = token;
        self.watch_releases(key).await
    }

    /// A watch for the lease of `key` to be handed to `token` that is in
    /// force already and costs no round trip (on Redis: the release channel
    /// is subscribed in this process), or `None`. Taken before the first
    /// [`wait_turn`](Self::wait_turn) of a wait, it lets that first look
    /// stand in line at once: a hand-off right after it wakes this watch.
    /// Without one, the waiter calls [`watch_turn`](Self::watch_turn) after
    /// its first refusal and looks again at once. The default is `None`.
    fn ready_turn_watch(&self, key: &str, token: &OwnerToken) -> Option<ReleaseWatch> {
        let _ = (key, token);
        None
    }

    /// A short description for error messages and logs, e.g. the URL without
    /// credentials.
    fn describe(&self) -> String;

    /// The kind of store, the `store` label of tenure's metrics (feature
    /// `metrics`): its URL scheme (`redis`, `sqlite`, `memory`, `quorum`,
    /// …), one value per kind of store rather than per host or file. The
    /// default takes the text of [`describe`](Self::describe) before its
    /// first `:` or `(`; tenure's stores answer without formatting anything.
    fn kind(&self) -> Cow<'static, str> {
        crate::telemetry::store_kind(&self.describe())
    }

    /// Whether the store coordinates across processes: `false` for a store that
    /// lives in this process only (the memory store), whose leases exclude
    /// nobody outside it. The default is `true`, since a store is normally
    /// outside the process; an in-process store overrides it.
    fn is_shared(&self) -> bool {
        true
    }

    /// The clock the `valid_until` deadlines of this backend are read on; the
    /// lease layer compares them with this clock's `now`. The default is the
    /// [`SystemClock`], which counts suspended time; a test backend may inject a
    /// [`FakeClock`](crate::clock::FakeClock).
    fn clock(&self) -> &dyn Clock {
        &SystemClock
    }

    /// Waits for the clean-up this store runs in the background (a quorum's
    /// undos and repeated releases, etcd's lease revokes) to end. A
    /// short-lived process calls it (through
    /// [`Coordinator::close`](crate::Coordinator::close)) before it exits,
    /// since an exiting runtime drops its tasks. The default has nothing to
    /// wait for.
    async fn close(&self) {}
}
