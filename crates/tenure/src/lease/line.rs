//! A waiter's stand in a store's waiting line, for one
//! [`Lease::attempt_within`](super::Lease::attempt_within).
//!
//! The waiter keeps one owner token for the whole wait (its place in line is
//! keyed by it) and a watch that wakes when the lease is handed to that token.
//! The first look is the wait's first attempt: where the store has a watch
//! ready before it ([`LeaseStore::ready_turn_watch`]), a refusal already
//! stands the waiter in line; otherwise the waiter watches after the refusal
//! and looks again at once.
//!
//! A hand-off whose notification names the place of the waiter's last look
//! is taken without asking the store again: the hand-off ran after that look
//! was sent, so the validity counts from that send (see [`Line::look`]). A
//! store that keeps places alive without the waiter's looks dates the places
//! it wrote ([`QueuePlace::written`]): the validity then counts from that. A
//! hand-off sets the lease for the claim window only ([`CLAIM_WINDOW`], when
//! the TTL is longer): the guard's first renewal, sent [`CLAIM_LEAD`] before
//! the window ends, claims the full TTL, so a holder that releases sooner
//! sends nothing but its release.
//! A wait that ends without the lease leaves the line; a wait that is
//! cancelled (its future dropped) leaves it in the background, passing on a
//! lease that was handed to it meanwhile. Nothing blocks in `Drop`.

use std::sync::Arc;
use std::time::Duration;

use super::attempt;
use super::cleanup;
use super::holder::HolderInfo;
use super::release_watch::ReleaseWatch;
use super::store::{AcquireReply, DriftMargin, LeaseStore, QueuePlace, valid_until};
use crate::clock::Moment;
use crate::error::Result;
use crate::token::OwnerToken;

/// How often a waiter with a place in line looks again, refreshing its
/// place, while nothing wakes it.
pub(crate) const HEARTBEAT: Duration = Duration::from_millis(250);

/// How long a place in line lives without a look: four heartbeats. A waiter
/// that is killed (or cut off) while it waits stops counting after this
/// long, whatever its lease's TTL.
#[cfg_attr(not(any(feature = "sqlite", feature = "etcd")), allow(dead_code))]
pub(crate) const PLACE_LIFETIME: Duration = Duration::from_millis(1000);

/// How long a lease handed to a waiter stays set for it (at most its TTL)
/// until the waiter claims it — with its first renewal, or with a look when
/// the hand-off cannot be taken from its notification — which sets the full
/// TTL: a lease handed to a waiter that died meanwhile is free again after
/// this long.
pub(crate) const CLAIM_WINDOW: Duration = Duration::from_millis(500);

/// How long before the end of the claim window a guard taken from a hand-off
/// claims the full TTL (its first renewal).
pub(crate) const CLAIM_LEAD: Duration = Duration::from_millis(200);

/// A hand-off for the claim window is taken from its notification only while
/// it leaves this much validity (the claim is then due at the earliest
/// 50 ms later); less, and the waiter claims with a look at once.
const CLAIM_TAKE_MIN: Duration = Duration::from_millis(250);

/// A hand-off of the full TTL (at most the claim window) is taken from its
/// notification only while the validity it leaves is within this fraction
/// (1/16) of a full one; older, the waiter claims the lease, which counts a
/// full validity from the claim.
const HANDOFF_SLACK_DIVISOR: u32 = 16;

pub(super) struct Line {
    backend: Arc<dyn LeaseStore>,
    key: Arc<str>,
    token: OwnerToken,
    place: Option<QueuePlace>,
    /// When the call that wrote `place` was sent, on the store's clock.
    placed_at: Option<Moment>,
    watch: Option<ReleaseWatch>,
    /// The lease was taken from a hand-off for the claim window only.
    unclaimed: bool,
    standing: bool,
    looked: bool,
    waited: bool,
}

impl Line {
    /// A stand for a fresh token, watching at once where the store can do it
    /// without a round trip; the first [`look`](Self::look) is the wait's
    /// first attempt.
    pub(super) fn new(backend: Arc<dyn LeaseStore>, key: Arc<str>) -> Result<Line> {
        let token = OwnerToken::generate()?;
        let watch = backend.ready_turn_watch(&key, &token);
        Ok(Line {
            backend,
            key,
            token,
            place: None,
            placed_at: None,
            watch,
            unclaimed: false,
            standing: true,
            looked: false,
            waited: false,
        })
    }

    /// One look: the lease when it is this waiter's turn, else its place is
    /// kept (or taken). A grant records `holder`, if any. A hand-off
    /// announced to the watch is taken without a store call when it can be
    /// (see [`handed_over`](Self::handed_over)).
    pub(super) async fn look(
        &mut self,
        ttl: Duration,
        holder: Option<Arc<HolderInfo>>,
        renew: Option<Duration>,
    ) -> Result<AcquireReply> {
        if holder.is_none()
            && let Some(acquired) = self.handed_over(ttl, renew)
        {
            self.standing = false;
            return Ok(acquired);
        }
        if self.looked && self.place.is_none() {
            // A store without a line keeps no place: each look is a plain
            // attempt, and gets a fresh token so a late clean-up of an earlier
            // one (a quorum undoing a lost vote) can never delete this grant.
            self.token = OwnerToken::generate()?;
        }
        self.looked = true;
        let sent = self.backend.clock().now();
        let (reply, place) = attempt::turn(
            &self.backend,
            &self.key,
            &self.token,
            ttl,
            holder.as_deref(),
            self.place.clone(),
        )
        .await?;
        match reply {
            AcquireReply::Acquired { .. } => self.standing = false,
            AcquireReply::Held { .. } => {
                // A place the store kept alive without this look was
                // written when the store says.
                self.placed_at = Some(place.as_ref().and_then(QueuePlace::written).unwrap_or(sent));
                self.place = place;
            }
        }
        Ok(reply)
    }

    /// The lease, when the watch announced a hand-off from the place our
    /// last look returned (or one whose write the store dated). That look
    /// found the lease held by someone else and wrote the place; the hand-off
    /// took the place out of line, so it ran after the look was sent, and
    /// the TTL it set (the claim window, or the
    /// TTL when that is shorter) runs out after the send plus that TTL: the
    /// validity counts from the send. A hand-off of the full TTL is taken
    /// only while that leaves nearly a full validity (and more than the
    /// renewal interval, so the watchdog renews before the deadline); one for
    /// the claim window while it leaves [`CLAIM_TAKE_MIN`], and the guard's
    /// first renewal claims it. Else the waiter claims with a look.
    fn handed_over(&mut self, ttl: Duration, renew: Option<Duration>) -> Option<AcquireReply> {
        let handoff = self.watch.as_mut()?.take_handoff()?;
        let placed_at = self.written(&handoff.place)?;
        let unclaimed = ttl > CLAIM_WINDOW;
        let set_for = ttl.min(CLAIM_WINDOW);
        let valid_until = valid_until(placed_at, set_for);
        let left = valid_until.saturating_duration_since(self.backend.clock().now());
        let fresh = if unclaimed {
            left >= CLAIM_TAKE_MIN
        } else {
            let validity = DriftMargin::default().validity(ttl);
            left >= validity - validity / HANDOFF_SLACK_DIVISOR
                && renew.is_none_or(|every| every < left)
        };
        self.unclaimed = fresh && unclaimed;
        fresh.then_some(AcquireReply::Acquired {
            fence: handoff.fence,
            valid_until,
        })
    }

    /// When the call that wrote `place` was sent at the latest, as far as
    /// this waiter knows: the store says so (a place it kept alive in the
    /// background), or it is the place the last look returned.
    fn written(&self, place: &QueuePlace) -> Option<Moment> {
        let looked = self
            .placed_at
            .filter(|_| self.place.as_ref() == Some(place));
        looked.into_iter().chain(place.written()).max()
    }

    /// Whether the lease the last look returned was taken from a hand-off
    /// for the claim window only: its guard's first renewal claims it.
    pub(super) fn unclaimed(&self) -> bool {
        self.unclaimed
    }

    /// The token this waiter stands in line with.
    pub(super) fn token(&self) -> &OwnerToken {
        &self.token
    }

    /// Whether the store keeps a place for this waiter (a store without a
    /// line keeps none: its waiters race).
    pub(super) fn has_place(&self) -> bool {
        self.place.is_some()
    }

    /// Whether this is the first wait of the stand (for the log).
    pub(super) fn first_wait(&mut self) -> bool {
        !std::mem::replace(&mut self.waited, true)
    }

    /// The watch that wakes this waiter, once it has one.
    pub(super) fn watch(&mut self) -> Option<&mut ReleaseWatch> {
        self.watch.as_mut()
    }

    /// Starts the watch a stand without a ready one needs (the caller then
    /// looks again at once: a hand-off before the watch would be missed).
    pub(super) async fn start_watch(&mut self) {
        self.watch = Some(self.backend.watch_turn(&self.key, &self.token).await);
    }

    /// Leaves the line now (best effort: a place left behind dies after
    /// [`PLACE_LIFETIME`]).
    pub(super) async fn leave(mut self) {
        self.standing = false;
        if self.place.is_some() {
            leave(&*self.backend, &self.key, &self.token, self.place.as_ref()).await;
        }
    }
}

async fn leave(
    backend: &dyn LeaseStore,
    key: &str,
    token: &OwnerToken,
    place: Option<&QueuePlace>,
) {
    if let Err(e) = backend.leave_line(key, token, place).await {
        tracing::debug!(key, error = %e, "leaving the waiting line failed; the place dies within a second");
    }
}

impl Drop for Line {
    fn drop(&mut self) {
        if !self.standing || self.place.is_none() {
            return;
        }
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (backend, key, token, place) = (
            Arc::clone(&self.backend),
            self.key.clone(),
            self.token.clone(),
            self.place.clone(),
        );
        cleanup::spawn(&handle, async move {
            leave(&*backend, &key, &token, place.as_ref()).await;
        });
    }
}
