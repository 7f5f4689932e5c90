//! The holder's side of a lease.

use std::future::{Future, poll_fn};
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::task::Poll;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;
use tracing::field::Empty;

use super::cleanup;
use super::monitor;
use super::signal::Signal;
use super::standby::{self, Ticket};
use super::store::{ExtendReply, LeaseStore, ReleaseOutcome};
use crate::clock::Moment;
use crate::error::{Error, Result};
use crate::fence::{AcquisitionId, Fence, FenceStamp};
use crate::telemetry;
use crate::token::OwnerToken;

/// State shared by the guard and its monitor task.
#[derive(Debug)]
pub(super) struct Shared {
    pub(super) backend: Arc<dyn LeaseStore>,
    pub(super) key: Arc<str>,
    pub(super) token: OwnerToken,
    pub(super) ttl: Duration,
    /// The fence of this acquisition, for spans and events.
    fence: Fence,
    /// When the lease was granted (for the hold time).
    granted_at: Instant,
    /// Set by the first [`mark_lost`](Self::mark_lost), so a loss is reported once.
    cause: Arc<OnceLock<LossCause>>,
    /// The end of the [maximum hold](super::Lease::max_hold), if any: no
    /// renewal after it, and the lease counts as lost from then on.
    hold_until: Option<Moment>,
    /// Local validity deadline on the backend's clock, moved forward by each
    /// renewal.
    deadline: Mutex<Moment>,
    /// Fired when the holder may no longer be alone.
    pub(super) lost: Signal,
    /// Fired when the guard is released or dropped: stops the monitor.
    pub(super) stop: Signal,
    /// The renewal interval (`None`: no renewal).
    renew_every: Option<Duration>,
    /// Whether the lease was handed over for the claim window only: the
    /// monitor's first renewal claims its full TTL.
    unclaimed: bool,
    /// Set once the monitor task runs.
    monitoring: AtomicBool,
    /// Where the guard waits for its monitor, if it does (see `standby`).
    standby: OnceLock<Ticket>,
}

impl Shared {
    pub(super) fn deadline(&self) -> Moment {
        *self.deadline.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn set_deadline(&self, at: Moment) {
        *self.deadline.lock().unwrap_or_else(|e| e.into_inner()) = at;
    }

    /// The earlier of the deadline and the end of the maximum hold.
    pub(super) fn end(&self) -> Moment {
        let deadline = self.deadline();
        self.hold_until.map_or(deadline, |h| h.min(deadline))
    }

    /// Whether the maximum hold is over at `now`.
    pub(super) fn hold_over(&self, now: Moment) -> bool {
        self.hold_until.is_some_and(|h| now >= h)
    }

    /// Now, on the clock the deadline is on.
    pub(super) fn now(&self) -> Moment {
        self.backend.clock().now()
    }

    /// Whether the lease is lost: the signal fired, or the local deadline has
    /// passed (then the signal is fired here, so nobody depends on the monitor
    /// task having run — it may be starved by blocking code on the runtime).
    /// A guard released on purpose is never reported lost.
    pub(super) fn check_lost(&self) -> bool {
        if self.lost.is_fired() {
            return true;
        }
        if self.stop.is_fired() {
            return false;
        }
        let now = self.now();
        if self.hold_over(now) {
            self.mark_lost(LossCause::MaxHold);
        } else if now >= self.deadline() {
            self.mark_lost(LossCause::Deadline);
        } else {
            return false;
        }
        true
    }

    /// Completes once [`check_lost`](Self::check_lost) is true: on the signal,
    /// or by re-reading the clock at least every [`monitor::SLICE`] (tokio's
    /// timers stop while the host is suspended; the deadline clock does not).
    pub(super) async fn until_lost(&self) {
        loop {
            if self.stop.is_fired() {
                // Released on purpose: only a signal fired before counts.
                self.lost.fired().await;
                return;
            }
            if self.check_lost() {
                return;
            }
            let left = self.end().saturating_duration_since(self.now());
            tokio::select! {
                () = self.lost.fired() => return,
                () = tokio::time::sleep(left.min(monitor::SLICE)) => {}
            }
        }
    }

    /// Starts the monitor task unless it runs already. A guard that renews
    /// starts it at once; one that does not needs it only to fire the lost
    /// signal at the deadline for someone who watches it
    /// ([`LeaseGuard::lost`]): every other check reads the deadline itself.
    pub(super) fn start_monitor(self: &Arc<Self>) {
        if !self.monitoring.swap(true, Ordering::Relaxed) {
            monitor::spawn(self, self.renew_every, self.unclaimed);
        }
    }

    /// Marks the lease lost, unless the guard already let go of it on purpose;
    /// the first time, logs it at `warn` and counts it.
    pub(super) fn mark_lost(&self, cause: LossCause) {
        if self.stop.is_fired() {
            return;
        }
        // The cause is set before the signal fires, so whoever the signal
        // wakes reads it.
        let first = self.cause.set(cause).is_ok();
        self.lost.fire();
        if !first {
            return;
        }
        let cause = cause.label();
        tracing::warn!(
            key = %self.key,
            store = %telemetry::lazy(|| self.backend.describe()),
            fence = self.fence.get(),
            cause,
            "lease lost"
        );
        telemetry::loss(|| self.backend.kind(), cause);
    }

    /// Sends one extend, in an `extend` span, and counts it.
    pub(super) async fn extend(&self) -> Result<ExtendReply> {
        let span = tracing::trace_span!(
            "extend",
            key = %self.key,
            store = %telemetry::lazy(|| self.backend.describe()),
            fence = self.fence.get(),
            outcome = Empty,
            latency_us = Empty,
        );
        let started = Instant::now();
        let result = self
            .backend
            .extend(&self.key, &self.token, self.ttl)
            .instrument(span.clone())
            .await;
        let outcome = match &result {
            Ok(ExtendReply::Extended { .. }) => "extended",
            Ok(ExtendReply::NotHeld) => "not_held",
            Err(_) => "error",
        };
        telemetry::finish!(trace, &span, outcome, started);
        telemetry::renewal(|| self.backend.kind(), outcome);
        result
    }

    /// Lets go of the lease: records the hold time and sends the release, in a
    /// `release` span (an explicit release and a dropped guard alike).
    async fn release(&self) -> Result<ReleaseOutcome> {
        telemetry::hold(|| self.backend.kind(), self.granted_at);
        let span = tracing::debug_span!(
            "release",
            key = %self.key,
            store = %telemetry::lazy(|| self.backend.describe()),
            fence = self.fence.get(),
            held_ms = Empty,
            outcome = Empty,
            latency_us = Empty,
        );
        // The clock is read for the hold time and the span's latency only
        // if the span records them.
        let started = if span.is_disabled() {
            None
        } else {
            let held = self.granted_at.elapsed();
            span.record("held_ms", crate::duration::millis(held));
            Some(Instant::now())
        };
        let result = telemetry::in_span!(&span, self.backend.release(&self.key, &self.token));
        let outcome = match &result {
            Ok(ReleaseOutcome::Released) => "released",
            Ok(_) => "not_held",
            Err(_) => "error",
        };
        if let Some(started) = started {
            telemetry::finish!(debug, &span, outcome, started);
        }
        result
    }

    /// Applies an extend reply and translates it for the caller.
    pub(super) fn apply(&self, reply: ExtendReply) -> ExtendOutcome {
        match reply {
            ExtendReply::Extended { valid_until } => {
                self.set_deadline(valid_until);
                ExtendOutcome::Extended {
                    valid_for: valid_until.saturating_duration_since(self.now()),
                }
            }
            ExtendReply::NotHeld => {
                self.mark_lost(LossCause::NotHeld);
                ExtendOutcome::NotHeld
            }
        }
    }
}

/// Why a holder lost its lease: [`LeaseGuard::loss_cause`] and
/// [`LostSignal::cause`], and the `cause` of the "lease lost" event and the
/// losses metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LossCause {
    /// A renewal found the key gone or taken (`not_held`).
    NotHeld,
    /// The local deadline passed without a confirmed renewal (`deadline`).
    Deadline,
    /// The [maximum hold](super::Lease::max_hold) was over: the watchdog
    /// stopped renewing (`max_hold`).
    MaxHold,
}

impl LossCause {
    /// The cause as spans and metrics name it: `not_held`, `deadline` or
    /// `max_hold`.
    pub fn label(self) -> &'static str {
        match self {
            LossCause::NotHeld => "not_held",
            LossCause::Deadline => "deadline",
            LossCause::MaxHold => "max_hold",
        }
    }
}

impl std::fmt::Display for LossCause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LossCause::NotHeld => "the store no longer held it for us",
            LossCause::Deadline => "no renewal was confirmed before the local deadline",
            LossCause::MaxHold => "its maximum hold was over",
        })
    }
}

/// How a guard is kept: renewed every so often (if at all), and for how long
/// at most.
#[derive(Debug, Clone, Copy)]
pub(super) struct Upkeep {
    pub(super) renew_every: Option<Duration>,
    pub(super) max_hold: Option<Duration>,
    /// Handed over for the claim window only (see [`Line`](super::line)):
    /// renewed to the full TTL before the window ends, with or without a
    /// renewal interval.
    pub(super) unclaimed: bool,
}

/// The result of [`LeaseGuard::extend`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
#[must_use]
pub enum ExtendOutcome {
    /// The TTL was reset; the holder may assume it is alone for `valid_for`.
    Extended {
        /// Local validity from now (TTL minus round trip and drift margin).
        valid_for: Duration,
    },
    /// The lease had expired or was taken over; nothing was changed and the lost
    /// signal has fired.
    NotHeld,
}

/// Fires when a lease may no longer be held. Cheap to clone.
///
/// It fires when renewal finds the key gone or taken, or when the local deadline
/// passes without a confirmed renewal — so the holder hears about it before the
/// store expires the key (by the drift margin, at least). The deadline is
/// checked by whoever asks, not only by the guard's background task: once it has
/// passed, [`is_lost`](Self::is_lost) is true even if that task never ran.
/// The signal of a [`LeaseSetGuard`](super::LeaseSetGuard) fires when any of
/// its keys is lost.
#[derive(Debug, Clone)]
pub struct LostSignal {
    /// One per key (one for a lease, one per key of a set).
    keys: Vec<KeyLoss>,
}

/// The lost signal of one guard.
#[derive(Debug, Clone)]
struct KeyLoss {
    lost: CancellationToken,
    cause: Arc<OnceLock<LossCause>>,
    shared: Weak<Shared>,
}

impl KeyLoss {
    fn is_lost(&self) -> bool {
        match self.shared.upgrade() {
            Some(shared) => shared.check_lost(),
            None => self.lost.is_cancelled(),
        }
    }

    async fn wait(&self) {
        match self.shared.upgrade() {
            Some(shared) => {
                // Stop waiting on the deadline once the guard is gone (released
                // or dropped): then only an already fired signal completes this.
                let stop = shared.stop.token();
                tokio::select! {
                    () = shared.until_lost() => return,
                    () = stop.cancelled() => {}
                }
                drop(shared);
                self.lost.cancelled().await;
            }
            None => self.lost.cancelled().await,
        }
    }
}

impl LostSignal {
    /// One signal for several: it fires when any of them does.
    pub(super) fn any(signals: impl IntoIterator<Item = LostSignal>) -> Self {
        LostSignal {
            keys: signals.into_iter().flat_map(|s| s.keys).collect(),
        }
    }

    /// Whether the lease is known or presumed lost (the local deadline passed).
    pub fn is_lost(&self) -> bool {
        self.keys.iter().any(KeyLoss::is_lost)
    }

    /// Why the lease was lost, once it is (`None` while held, and for a guard
    /// released or dropped without a loss).
    pub fn cause(&self) -> Option<LossCause> {
        self.keys
            .iter()
            .find(|k| k.is_lost())
            .and_then(|k| k.cause.get().copied())
    }

    /// Completes when the lease is lost, at the latest shortly after the local
    /// deadline (the clock is re-read at least every 100 ms, so a resume from
    /// suspend is noticed promptly).
    pub async fn wait(&self) {
        if let [one] = self.keys.as_slice() {
            return one.wait().await;
        }
        let mut waits: Vec<_> = self.keys.iter().map(|k| Box::pin(k.wait())).collect();
        poll_fn(|cx| {
            if waits.iter_mut().any(|w| w.as_mut().poll(cx).is_ready()) {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
        .await;
    }
}

/// An acquired lease. Release it with [`release`](Self::release); dropping it
/// releases in the background (best effort, never blocking in `Drop`).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> tenure::Result<()> {
/// use std::time::Duration;
/// use tenure::{ReleaseOutcome, Coordinator};
///
/// let tenure = Coordinator::memory();
/// let guard = tenure
///     .lease("invoices:7")
///     .ttl(Duration::from_secs(5))
///     .try_acquire()
///     .await?
///     .expect("free");
/// // Bound your own I/O by the validity left, and stop if the lease is lost.
/// let budget = guard.remaining();
/// let written = guard
///     .run(async { format!("written with fence {} within {budget:?}", guard.fence()) })
///     .await?;
/// println!("{written}");
/// assert_eq!(guard.release().await?, ReleaseOutcome::Released);
/// # Ok(()) }
/// ```
#[derive(Debug)]
#[must_use = "dropping a guard releases the lease"]
pub struct LeaseGuard {
    shared: Arc<Shared>,
    fence: Fence,
    /// Drawn when first asked for: most guards never are, and a draw checks
    /// the process id (a system call).
    acquisition: OnceLock<AcquisitionId>,
    released: bool,
}

impl LeaseGuard {
    pub(super) fn start(
        backend: Arc<dyn LeaseStore>,
        key: Arc<str>,
        token: OwnerToken,
        ttl: Duration,
        fence: Fence,
        valid_until: Moment,
        upkeep: Upkeep,
    ) -> Self {
        let hold_until = upkeep.max_hold.map(|d| backend.clock().now() + d);
        let shared = Arc::new(Shared {
            backend,
            key,
            token,
            ttl,
            fence,
            granted_at: Instant::now(),
            cause: Arc::default(),
            hold_until,
            deadline: Mutex::new(valid_until),
            lost: Signal::default(),
            stop: Signal::default(),
            renew_every: upkeep.renew_every,
            unclaimed: upkeep.unclaimed,
            monitoring: AtomicBool::new(false),
            standby: OnceLock::new(),
        });
        if hold_until.is_some() {
            shared.start_monitor();
        } else if let Some(due) =
            monitor::first_renewal(&shared, upkeep.renew_every, upkeep.unclaimed)
        {
            // Nothing to do before the first renewal (or the claim of a
            // hand-off): most guards are released by then, and never need a
            // task of their own.
            match standby::enter(&shared, due) {
                Some(ticket) => {
                    let _ = shared.standby.set(ticket);
                }
                None => shared.start_monitor(),
            }
        }
        LeaseGuard {
            shared,
            fence,
            acquisition: OnceLock::new(),
            released: false,
        }
    }

    /// The fencing token of this acquisition: greater than every token handed out
    /// before for this key. Send it with every write to the protected resource.
    pub fn fence(&self) -> Fence {
        self.fence
    }

    /// The id of this acquisition: public, unique to it (see
    /// [`AcquisitionId`]).
    pub fn acquisition(&self) -> AcquisitionId {
        *self.acquisition.get_or_init(AcquisitionId::random)
    }

    /// The fence with this acquisition's id, for a fenced resource: an equal
    /// fence is accepted only from the acquisition that wrote it (see
    /// [`crate::fence`]).
    pub fn stamp(&self) -> FenceStamp {
        FenceStamp::new(self.fence, self.acquisition())
    }

    /// The lease's key.
    pub fn key(&self) -> &str {
        &self.shared.key
    }

    /// The TTL the lease was acquired with.
    pub fn ttl(&self) -> Duration {
        self.shared.ttl
    }

    /// How long the holder may still assume it is alone: the local deadline
    /// minus now, zero once lost. Use it to bound I/O done under the lease.
    /// (The end of a [maximum hold](super::Lease::max_hold) is not counted:
    /// the lease stays valid in the store past it until its TTL lapses, but
    /// the guard is lost from then on and `remaining` is zero.)
    pub fn remaining(&self) -> Duration {
        if self.is_lost() {
            return Duration::ZERO;
        }
        self.shared
            .deadline()
            .saturating_duration_since(self.shared.now())
    }

    /// Why the lease was lost, once it is: `None` while it is held.
    pub fn loss_cause(&self) -> Option<LossCause> {
        self.is_lost();
        self.shared.cause.get().copied()
    }

    /// Whether the lease is known or presumed lost: the lost signal fired, or
    /// the local deadline has passed (checked here, on the deadline clock, so it
    /// holds even when the guard's background task could not run).
    pub fn is_lost(&self) -> bool {
        self.shared.check_lost()
    }

    /// A signal that fires when the lease is lost.
    pub fn lost(&self) -> LostSignal {
        self.shared.start_monitor();
        LostSignal {
            keys: vec![KeyLoss {
                lost: self.shared.lost.token(),
                cause: Arc::clone(&self.shared.cause),
                shared: Arc::downgrade(&self.shared),
            }],
        }
    }

    /// Runs `work` under the lease: if the lease is lost first, `work` is dropped
    /// (cancelled at its next `.await`) and [`Error::LeaseLost`] is returned.
    ///
    /// The deadline is checked before every poll of `work`, and a timer races
    /// it, so `work` is not polled again once the local deadline has passed —
    /// even when blocking code starved the runtime past it.
    ///
    /// Cancellation is cooperative: a write already sent to a resource may still
    /// land, and code that blocks inside one poll cannot be interrupted. Only a
    /// fenced resource rejects a late write for sure.
    pub async fn run<F: Future>(&self, work: F) -> Result<F::Output> {
        let shared = &*self.shared;
        let mut work = pin!(work);
        let mut lost = pin!(shared.until_lost());
        poll_fn(|cx| {
            if shared.check_lost() || lost.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Err(Error::LeaseLost {
                    key: shared.key.to_string(),
                }));
            }
            work.as_mut().poll(cx).map(Ok)
        })
        .await
    }

    /// Resets the TTL now. Never revives a lease that has expired: then it returns
    /// [`ExtendOutcome::NotHeld`] and the lost signal fires.
    ///
    /// A lost guard stays lost: once the lost signal has fired or the local
    /// deadline has passed, `extend` sends no renewal — even if the store,
    /// whose TTL ends a drift margin later, would still grant one — answers
    /// [`ExtendOutcome::NotHeld`] once it has released the key (a failed
    /// release is left to the TTL), so that it is not held for a holder that
    /// may no longer use it.
    pub async fn extend(&self) -> Result<ExtendOutcome> {
        if self.shared.check_lost() {
            if let Err(e) = release_cancel_safe(&self.shared).await {
                tracing::debug!(key = %self.shared.key, error = %e, "release of a lost lease failed; the TTL will free the key");
            }
            return Ok(ExtendOutcome::NotHeld);
        }
        let reply = self.shared.extend().await?;
        Ok(self.shared.apply(reply))
    }

    /// Releases the lease. [`ReleaseOutcome::NotHeld`] means it had already
    /// expired or been taken over; someone else's key is never deleted.
    ///
    /// Cancel-safe: a caller that stops waiting (a `timeout`, a `select!`, a
    /// dropped task) before the answer arrives does not cut the release short
    /// — it is sent again from a task of its own, as a dropped guard's is
    /// (a compare-and-delete with this guard's token, harmless if the first
    /// one went through), and the key is free for others as soon as the store
    /// has it.
    pub async fn release(mut self) -> Result<ReleaseOutcome> {
        self.let_go();
        release_cancel_safe(&self.shared).await
    }

    /// Stops the monitor, after reporting a loss by the deadline that nobody
    /// has noticed yet (a guard without renewal runs no monitor).
    fn let_go(&mut self) {
        self.released = true;
        if let Some(ticket) = self.shared.standby.get() {
            ticket.leave();
        }
        self.shared.check_lost();
        self.shared.stop.fire();
    }
}

/// Sends the release; if the caller drops this future before the answer, the
/// release is sent again from a task of its own.
async fn release_cancel_safe(shared: &Arc<Shared>) -> Result<ReleaseOutcome> {
    let mut releasing = Releasing {
        shared: Arc::clone(shared),
        answered: false,
    };
    let result = releasing.shared.release().await;
    releasing.answered = true;
    result
}

/// A release on its way: sent again in the background if its caller drops it
/// before the answer.
struct Releasing {
    shared: Arc<Shared>,
    answered: bool,
}

impl Drop for Releasing {
    fn drop(&mut self) {
        if !self.answered {
            release_in_background(&self.shared);
        }
    }
}

/// Sends the release from a task of its own, which
/// [`Coordinator::close`](crate::Coordinator::close) waits for (best effort:
/// without a runtime, the TTL frees the key).
fn release_in_background(shared: &Arc<Shared>) {
    if let Ok(handle) = tokio::runtime::Handle::try_current() {
        let shared = Arc::clone(shared);
        cleanup::spawn(&handle, async move {
            if let Err(e) = shared.release().await {
                tracing::debug!(key = %shared.key, error = %e, "release in the background failed; the TTL will free the key");
            }
        });
    }
}

impl Drop for LeaseGuard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        self.let_go();
        release_in_background(&self.shared);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;
    use std::time::Duration;

    use super::{LeaseGuard, Upkeep};
    use crate::Coordinator;
    use crate::lease::line::CLAIM_WINDOW;

    /// A lease handed to a waiter for the claim window waits in the standby
    /// for its claim: released within the window, it never had a task of its
    /// own; kept, its claim still takes the full TTL before the window ends.
    /// `lease` (of `ttl`) as a waiter takes it from a hand-off: the holder's
    /// token, set for the claim window only.
    async fn handed(lease: &crate::Lease, ttl: Duration) -> LeaseGuard {
        let held = lease.try_acquire().await.expect("acquire").expect("free");
        let s = &held.shared;
        let window_ends = s.backend.clock().now() + CLAIM_WINDOW;
        let upkeep = Upkeep {
            renew_every: None,
            max_hold: None,
            unclaimed: true,
        };
        let (backend, key, token) = (s.backend.clone(), s.key.clone(), s.token.clone());
        let guard = LeaseGuard::start(backend, key, token, ttl, held.fence, window_ends, upkeep);
        std::mem::forget(held);
        guard
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_hand_off_starts_its_monitor_only_when_its_claim_is_due() {
        let tenure = Coordinator::memory();
        let ttl = Duration::from_secs(10);
        let lease = tenure.lease("handed").ttl(ttl).watchdog(false);
        let handed = || handed(&lease, ttl);
        let released_soon = handed().await;
        assert!(!released_soon.shared.monitoring.load(Ordering::Relaxed));
        released_soon.release().await.expect("release");

        let kept = handed().await;
        assert!(!kept.shared.monitoring.load(Ordering::Relaxed));
        assert!(kept.remaining() <= CLAIM_WINDOW);
        tokio::time::sleep(CLAIM_WINDOW + Duration::from_millis(200)).await;
        assert!(!kept.is_lost(), "lost: {:?}", kept.loss_cause());
        assert!(kept.shared.monitoring.load(Ordering::Relaxed));
        assert!(
            kept.remaining() > ttl / 2,
            "claimed: {:?}",
            kept.remaining()
        );
        kept.release().await.expect("release");
    }

    /// A renewing guard whose first renewal is due more than the standby's
    /// linger after it entered, with no guard entering after it, still has
    /// its monitor started: the task does not end with a due entry taken.
    #[tokio::test(start_paused = true)]
    async fn a_lone_guard_due_after_the_linger_gets_its_monitor() {
        let tenure = Coordinator::memory();
        let lease = tenure.lease("lone").ttl(Duration::from_secs(6));
        let guard = lease.try_acquire().await.expect("acquire").expect("free");
        assert!(!guard.shared.monitoring.load(Ordering::Relaxed));
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert!(guard.shared.monitoring.load(Ordering::Relaxed));
        guard.release().await.expect("release");
    }

    /// Hand-offs released within their claim window, one after another with
    /// the standby task running in between, share that one task: a guard
    /// that enters never wakes a lingering task only for it to find the
    /// guard gone, end, and leave the next guard to start another.
    #[test]
    fn short_hand_offs_share_one_standby_task() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async {
            let tenure = Coordinator::memory();
            let ttl = Duration::from_secs(10);
            let lease = tenure.lease("handed-often").ttl(ttl).watchdog(false);
            let before = super::standby::starts();
            for _ in 0..20 {
                handed(&lease, ttl).await.release().await.expect("release");
                for _ in 0..4 {
                    tokio::task::yield_now().await;
                }
            }
            assert_eq!(super::standby::starts() - before, 1);
        });
    }
}
