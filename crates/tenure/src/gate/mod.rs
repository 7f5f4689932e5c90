//! Gates: keys that several holders may share, with a waiting line in
//! arrival order — what [semaphores](crate::semaphore) and
//! [read-write leases](crate::rwlease) are built on.
//!
//! A gate keeps its holders (each with a TTL and a fence) and a line of
//! waiters. Every store applies the same rules, in one atomic step per call
//! (a Redis script, a SQLite transaction, an etcd transaction):
//!
//! - **What fits.** A writer fits when nobody holds; a reader when no writer
//!   holds; a permit of N when fewer than N hold.
//! - **Arrival order.** A newcomer is granted at once only when nobody waits
//!   and it fits; otherwise it waits in line. When a holder leaves (or
//!   expires), the waiters at the head of the line that fit are granted, in
//!   order, and woken; they take the grant at their next look. So a waiting
//!   writer blocks readers that come after it, and permits go in arrival
//!   order. A single attempt ([`Lease::try_acquire`](crate::Lease::try_acquire))
//!   never passes a waiter either.
//! - **Dead waiters.** A waiter refreshes its place every time it looks
//!   (every 250 ms while it waits); a place not refreshed for a second dies,
//!   whatever the TTL, and a grant made to a waiter lives half a second
//!   until the waiter claims it with a look. A waiter killed in line stalls
//!   the waiters behind it for about a second (etcd: its minimum lease TTL
//!   plus its expiry sweep, about 1.5 s).
//! - **Fences.** One counter per gate, floored by the store's clock as lease
//!   fences are (`max(last + 1, clock)`; etcd: the create revision); every
//!   grant takes the next value, so a writer's fence is above every fence
//!   handed out before it, and a store that lost its data goes on above
//!   every fence it handed out.
//!
//! Each grant is an ordinary [`LeaseGuard`](crate::LeaseGuard): TTL,
//! watchdog renewal, the lost signal and the fence work as for leases.

mod request;
mod step;
pub mod store;

pub(crate) use request::{Look, Request};
pub(crate) use step::{Kind, Now, State};
pub use store::{GateAsk, GateHolder, GateKind, GateStatus, GateStore};

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::error::Result;
use crate::fence::Fence;
use crate::lease::{
    AcquireReply, ExtendReply, HolderInfo, LeaseStatus, LeaseStore, QueuePlace, ReleaseOutcome,
    ReleaseWatch,
};
use crate::token::OwnerToken;

/// What a holder of a gate holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Mode {
    /// A shared (read) grant of a read-write lease.
    Read,
    /// The exclusive (write) grant of a read-write lease.
    Write,
    /// One permit of a semaphore admitting this many holders.
    Permit(NonZeroU32),
}

impl Mode {
    /// The family of gates this mode belongs to.
    pub fn kind(self) -> GateKind {
        match self {
            Mode::Read | Mode::Write => GateKind::ReadWrite,
            Mode::Permit(_) => GateKind::Semaphore,
        }
    }

    /// `read`, `write` or `permit`.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Read => "read",
            Mode::Write => "write",
            Mode::Permit(_) => "permit",
        }
    }
}

impl From<Kind> for Mode {
    fn from(kind: Kind) -> Self {
        match kind {
            Kind::Read => Mode::Read,
            Kind::Write => Mode::Write,
            Kind::Permit(n) => Mode::Permit(NonZeroU32::new(n).unwrap_or(NonZeroU32::MIN)),
        }
    }
}

/// One mode of a gate seen as a lease store: the lease layer's guard,
/// watchdog, waiting line and clean-up of abandoned attempts work on gates
/// unchanged.
#[derive(Debug)]
pub(crate) struct Gate {
    store: Arc<dyn GateStore>,
    mode: Mode,
}

impl Gate {
    pub(crate) fn new(store: Arc<dyn GateStore>, mode: Mode) -> Self {
        Gate { store, mode }
    }

    async fn ask(
        &self,
        key: &str,
        token: &OwnerToken,
        ttl: Duration,
        holder: Option<&HolderInfo>,
        place: Option<Option<&QueuePlace>>,
    ) -> Result<(AcquireReply, Option<QueuePlace>)> {
        let mut ask = GateAsk::new(token, self.mode, ttl);
        ask.stand = place.is_some();
        ask.place = place.flatten();
        ask.holder = holder;
        self.store.look(key, ask).await
    }
}

#[async_trait]
impl LeaseStore for Gate {
    async fn try_acquire(
        &self,
        key: &str,
        token: &OwnerToken,
        ttl: Duration,
        holder: Option<&HolderInfo>,
    ) -> Result<AcquireReply> {
        Ok(self.ask(key, token, ttl, holder, None).await?.0)
    }

    async fn extend(&self, key: &str, token: &OwnerToken, ttl: Duration) -> Result<ExtendReply> {
        self.store.extend(self.mode, key, token, ttl).await
    }

    async fn release(&self, key: &str, token: &OwnerToken) -> Result<ReleaseOutcome> {
        self.store.release(self.mode, key, token).await
    }

    async fn status(&self, key: &str) -> Result<LeaseStatus> {
        let status = self.store.status(self.mode.kind(), key).await?;
        Ok(lease_status(&status, self.mode))
    }

    async fn watch_releases(&self, key: &str) -> ReleaseWatch {
        self.store.watch(self.mode.kind(), key, None).await
    }

    async fn wait_turn(
        &self,
        key: &str,
        token: &OwnerToken,
        ttl: Duration,
        holder: Option<&HolderInfo>,
        place: Option<&QueuePlace>,
    ) -> Result<(AcquireReply, Option<QueuePlace>)> {
        self.ask(key, token, ttl, holder, Some(place)).await
    }

    async fn leave_line(
        &self,
        key: &str,
        token: &OwnerToken,
        _place: Option<&QueuePlace>,
    ) -> Result<ReleaseOutcome> {
        self.store.release(self.mode, key, token).await
    }

    async fn watch_turn(&self, key: &str, token: &OwnerToken) -> ReleaseWatch {
        self.store.watch(self.mode.kind(), key, Some(token)).await
    }

    fn describe(&self) -> String {
        self.store.describe_gates()
    }
}

/// A gate's status seen from one mode: "held" when a newcomer of that mode
/// would not get in now.
fn lease_status(status: &GateStatus, mode: Mode) -> LeaseStatus {
    let blocked = match mode {
        Mode::Write => !status.holders.is_empty(),
        Mode::Read => status.holders.iter().any(|h| h.mode == Mode::Write),
        Mode::Permit(n) => status.holders.len() >= n.get() as usize,
    } || !status.waiting.is_empty();
    let mut lease = LeaseStatus::free(status.storage_key.clone(), status.fence);
    lease.held = blocked;
    lease.ttl_left = status.holders.iter().map(|h| h.ttl_left).min();
    lease.holder = status.holders.iter().find_map(|h| h.holder.clone());
    lease.waiters = Some(status.waiting.len() as u64);
    lease
}

/// A store's answer to a release: `released` when the grant or place was
/// still there.
pub(crate) fn release_outcome(released: bool) -> ReleaseOutcome {
    if released {
        ReleaseOutcome::Released
    } else {
        ReleaseOutcome::NotHeld
    }
}

/// The status of a gate kept as `state`, read at `now` (store clock ms).
pub(crate) fn status_of(state: &State, now: i64, storage_key: String) -> GateStatus {
    let holders = state
        .holders
        .iter()
        .filter(|h| h.expires_ms > now)
        .map(|h| GateHolder {
            mode: h.kind.into(),
            fence: Fence::new(h.fence),
            ttl_left: Duration::from_millis((h.expires_ms - now).unsigned_abs()),
            holder: h.holder.as_ref().map(|r| {
                let held_for = now
                    .checked_sub(h.since_ms)
                    .and_then(|d| u64::try_from(d).ok());
                r.report(held_for.map(Duration::from_millis))
            }),
        })
        .collect();
    GateStatus {
        fence: (state.fence > 0).then(|| Fence::new(state.fence)),
        holders,
        waiting: state
            .line
            .iter()
            .filter(|w| w.expires_ms > now)
            .map(|w| w.kind.into())
            .collect(),
        storage_key,
    }
}
