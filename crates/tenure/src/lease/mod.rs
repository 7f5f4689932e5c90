//! Leases: time-bounded exclusive ownership of a key.
//!
//! A [`Lease`] is a description (key, TTL, renewal); [`Lease::acquire`]
//! (waits), [`Lease::acquire_timeout`] (waits at most so long, then
//! [`Error::Busy`]) and [`Lease::try_acquire`] (once, `None` when held) turn it
//! into a [`LeaseGuard`]; [`Lease::with`] runs a closure under the lease and
//! releases it. [`Lease::attempt`] and [`Lease::attempt_within`] report a
//! refusal as a value ([`Attempt::Held`]) with the holder's TTL left.
//! The guard knows its fencing token, renews in the background when asked to, and
//! tells its holder when it may no longer be alone — *before* the store expires the
//! key, because its local deadline is computed from the moment the request was
//! *sent*, minus a clock-drift margin (1% + 2 ms; hence [`MIN_TTL`]).
//!
//! # The local deadline
//!
//! - **Checked by whoever asks.** [`LeaseGuard::is_lost`],
//!   [`LostSignal::is_lost`], [`LeaseGuard::remaining`] and [`LeaseGuard::run`]
//!   compare the clock with the deadline themselves; they do not depend on the
//!   guard's background task, which blocking code or a busy single-threaded
//!   runtime can starve. `run` checks before every poll of its work and races a
//!   timer, but cannot interrupt code that blocks inside one poll.
//! - **On a clock that counts suspended time.** The store's clock (a Redis
//!   server elsewhere, or the SQLite store's host clock) runs on while this host
//!   sleeps, so deadlines are read on [`SystemClock`](crate::clock::SystemClock):
//!   `CLOCK_BOOTTIME` on Linux, `CLOCK_MONOTONIC` on macOS (which counts sleep
//!   there, unlike `std::time::Instant`); other Unix systems use
//!   `CLOCK_MONOTONIC`, whose behaviour across suspend depends on the OS. The
//!   SQLite store expires leases on the same clock. tokio's timers stop during a
//!   suspend, so the guard's task and [`LostSignal::wait`] re-read the clock at
//!   least every 100 ms: after a resume past the deadline, the signal fires within
//!   about that long, and every check above says "lost" at once.
//! - **What the tests show, and what they cannot.** A [`FakeClock`](crate::clock::FakeClock)
//!   that jumps forward stands in for a suspend in the tests (is_lost,
//!   remaining, run and the signal all report the loss). A real suspend and
//!   resume of the test host cannot be run in CI; that the chosen clocks count
//!   suspended time rests on the OS documentation (`clock_gettime(2)` on Linux,
//!   `mach_continuous_time` behind `CLOCK_MONOTONIC` on macOS).
//!
//! # Waiting and failures
//!
//! [`Lease::attempt_within`] retries [transient](Error::is_transient) backend
//! errors with backoff until its budget is spent; permanent ones end it at once.
//! An attempt abandoned by its caller (dropped by a `timeout` or `select!`) or
//! failed after its request may have been applied undoes its grant with its own
//! owner token when the answer arrives, so no grant is left without a guard
//! until its TTL. An attempt whose fate is unknown (timed out, connection
//! broken) is undone repeatedly for up to a minute; a server frozen for longer
//! than that which then applies the request leaves the grant to its TTL.
//!
//! An acquire never returns a guard whose validity is already spent: a grant
//! whose answer arrives after its validity (a server that froze after
//! running the request, a stalled link) is confirmed with an extend under the
//! same token, counted from the extend's send, or — the key no longer ours,
//! or the extend late too — undone and reported as a transient
//! [`Error::Timeout`], which a wait retries within its budget.
//!
//! # What a lease does not guarantee
//!
//! A lease limits concurrency; it does not guarantee exclusive execution once it
//! has expired. A process paused longer than the TTL (GC, swap, SIGSTOP, a VM
//! migration) can act after another holder has taken over, and no client-side
//! check can prevent it, because the pause can fall between the check and the
//! write. Pass [`LeaseGuard::fence`] to the protected resource and let it refuse
//! stale tokens (see [`fence`](crate::fence)).

mod attempt;
pub(crate) mod cleanup;
mod guard;
mod holder;
mod line;
mod monitor;
mod release_watch;
mod set;
mod signal;
mod standby;
pub mod store;
#[cfg_attr(not(feature = "redis"), allow(dead_code))]
mod turn_signal;

pub use guard::{ExtendOutcome, LeaseGuard, LossCause, LostSignal};
#[cfg(any(feature = "redis", feature = "sqlite", feature = "etcd"))]
pub(crate) use holder::elapsed_ms;
pub use holder::{Holder, HolderInfo, MAX_LABEL_LEN};
pub use set::{LeaseSet, LeaseSetGuard};
// The implementer types, under short paths for the stores of this crate (which
// use a different subset with each set of cargo features).
#[allow(unused_imports)]
pub(crate) use line::{CLAIM_WINDOW, HEARTBEAT, PLACE_LIFETIME};
#[allow(unused_imports)]
pub(crate) use release_watch::{Handoff, ReleaseWatch};
#[allow(unused_imports)]
pub(crate) use store::{AcquireReply, ExtendReply, LeaseStore, QueuePlace, valid_until};
pub use store::{LeaseStatus, ReleaseOutcome, drift};
#[allow(unused_imports)]
pub(crate) use turn_signal::{TurnReceiver, TurnSender};

use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use tokio::time::Instant;
use tracing::field::Empty;

use crate::error::{Error, Result};
use crate::fence::Fence;
use crate::key::validate_key;
use crate::telemetry;
use crate::token::OwnerToken;
use line::Line;

/// TTL of a lease unless [`Lease::ttl`] says otherwise.
pub const DEFAULT_TTL: Duration = Duration::from_secs(30);

/// The longest TTL tenure accepts. Longer leases are almost always a unit mistake,
/// and they would outlive any realistic process anyway.
pub const MAX_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

/// The shortest TTL tenure accepts.
///
/// The holder's local validity is the TTL minus the clock-drift margin (1% +
/// 2 ms, see [`drift`]) minus the round trip of the
/// acquire request. A TTL of 10 ms leaves 7.9 ms before the round trip; a
/// shorter one would hand out a guard that is lost (or nearly so) the moment it
/// exists, so it is refused with [`Error::InvalidArgument`] naming `ttl`. The
/// round trip is only known at run time: it is subtracted from the deadline
/// then, and a guard whose round trip ate its validity reports itself lost.
pub const MIN_TTL: Duration = Duration::from_millis(10);

/// First retry delay when polling a contended lease.
const MIN_BACKOFF: Duration = Duration::from_millis(5);

/// Longest retry delay when polling a contended lease.
const MAX_BACKOFF: Duration = Duration::from_millis(250);

/// First retry delay after a transient backend error while waiting.
const MIN_ERROR_BACKOFF: Duration = Duration::from_millis(20);

/// Longest retry delay after transient backend errors while waiting: a
/// restarted server is noticed within about this long.
const MAX_ERROR_BACKOFF: Duration = Duration::from_millis(500);

/// [`Lease::acquire`] waits in slices this long, each one stand in line (a
/// wait looks again at least every second anyway, so a lost notification
/// costs no more than that). Long, so that FIFO order holds for any real wait.
const WAIT_SLICE: Duration = MAX_TTL;

/// Longest wait for a pushed release notification before trying again anyway
/// (a notification can be lost while the subscriber reconnects).
const MAX_PUSH_WAIT: Duration = Duration::from_secs(1);

/// The outcome of [`Lease::attempt`] and [`Lease::attempt_within`]: refusal
/// is a value, with the holder's TTL left.
#[derive(Debug)]
#[must_use = "dropping the outcome releases an acquired lease"]
pub enum Attempt {
    /// The lease is ours until released, dropped or lost.
    Acquired(LeaseGuard),
    /// Someone else holds the lease (and kept it for the whole wait, if any).
    Held {
        /// The other holder's remaining TTL, when the store knows it.
        ttl_left: Option<Duration>,
    },
}

impl Attempt {
    /// The guard, if the lease was acquired.
    pub fn into_guard(self) -> Option<LeaseGuard> {
        match self {
            Attempt::Acquired(g) => Some(g),
            Attempt::Held { .. } => None,
        }
    }

    /// Whether the lease was acquired.
    pub fn is_acquired(&self) -> bool {
        matches!(self, Attempt::Acquired(_))
    }
}

/// A lease description: key, TTL and renewal policy. Cheap to clone; acquiring
/// it several times yields independent guards.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> tenure::Result<()> {
/// use std::time::Duration;
/// use tenure::{Attempt, Coordinator};
///
/// let tenure = Coordinator::memory();
/// let lease = tenure
///     .lease("reports:daily")
///     .ttl(Duration::from_secs(10)); // renewed every ttl/3 until released
/// match lease.attempt().await? {
///     Attempt::Acquired(guard) => {
///         let fence = guard.fence(); // pass it to the resource you write
///         assert!(fence.get() >= 1);
///         guard.release().await?;
///     }
///     Attempt::Held { ttl_left } => println!("busy for {ttl_left:?}"),
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
#[must_use]
pub struct Lease {
    backend: Arc<dyn LeaseStore>,
    /// Shared with the attempts and guards (a reference count, not a copy).
    key: Arc<str>,
    ttl: Duration,
    renew_every: Option<Duration>,
    /// What to record about the holder, if anything.
    holder: Option<Arc<HolderInfo>>,
    /// The longest a guard keeps the lease, if bounded.
    max_hold: Option<Duration>,
}

impl Lease {
    pub(crate) fn new(backend: Arc<dyn LeaseStore>, key: String) -> Self {
        Lease {
            backend,
            key: key.into(),
            ttl: DEFAULT_TTL,
            // Renewal on, as for elections and run-once: a holder whose work
            // outlasts the TTL keeps its lease instead of silently losing it.
            renew_every: Some(Duration::ZERO),
            holder: None,
            max_hold: None,
        }
    }

    /// Records who holds the lease — this host's name, this process's id,
    /// and `label` (e.g. the request or job it is taken for) — with every
    /// acquisition, for anyone to read through
    /// [`Coordinator::status`](crate::Coordinator::status) and `tenure status`. Implies
    /// [`record_holder(true)`](Self::record_holder). A label longer than
    /// [`MAX_LABEL_LEN`] bytes or with control characters makes acquiring fail
    /// with [`Error::InvalidArgument`] naming `label`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> tenure::Result<()> {
    /// use tenure::Coordinator;
    ///
    /// let tenure = Coordinator::memory();
    /// let lease = tenure.lease("orders:42").label("POST /orders/42");
    /// let guard = lease.try_acquire().await?.expect("free");
    /// let holder = tenure.status("orders:42").await?.holder.expect("recorded");
    /// assert_eq!(holder.label.as_deref(), Some("POST /orders/42"));
    /// assert_eq!(holder.pid, std::process::id());
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn label(mut self, label: impl Into<String>) -> Self {
        let info = self
            .holder
            .take()
            .map_or_else(HolderInfo::this_process, |h| (*h).clone());
        self.holder = Some(Arc::new(info.with_label(label)));
        self
    }

    /// Turns recording the holder (host name, process id, the
    /// [`label`](Self::label) if any, the acquisition time) on or off. Off by
    /// default: on Redis it adds a small hash beside the lease key, written in
    /// the acquire script, so a lease that does not ask for it costs nothing.
    /// The semaphore's permits record nothing.
    pub fn record_holder(mut self, on: bool) -> Self {
        self.holder = match (on, self.holder.take()) {
            (false, _) => None,
            (true, Some(h)) => Some(h),
            (true, None) => Some(Arc::new(HolderInfo::this_process())),
        };
        self
    }

    /// Sets the TTL: how long the store keeps the lease without renewal
    /// (default [`DEFAULT_TTL`]).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// Turns automatic renewal on (every ttl/3, the default) or off.
    ///
    /// With renewal on, a guard keeps its lease until released, dropped or
    /// lost (the store unreachable past the local deadline, the key taken
    /// over); [`LeaseGuard::run`] and [`Lease::with`] stop the work at the
    /// loss. Off, the lease lapses after its TTL whatever the work does, and
    /// the same calls stop the work then: choose it for a fixed budget.
    ///
    /// Renewals are counted from the validity the store granted, which starts
    /// when the request was sent: after a slow acquire or renewal the next one
    /// comes sooner (at once when less than the validity minus an interval is
    /// left), never an interval after the answer came back.
    pub fn watchdog(mut self, on: bool) -> Self {
        self.renew_every = on.then_some(Duration::ZERO);
        self
    }

    /// Turns automatic renewal on with the given interval, which must be shorter
    /// than the TTL minus the drift margin (the validity the holder counts on);
    /// a longer interval would report the lease lost before its first renewal,
    /// so acquiring fails with [`Error::InvalidArgument`].
    pub fn renew_every(mut self, interval: Duration) -> Self {
        self.renew_every = Some(interval);
        self
    }

    /// Bounds how long a guard keeps the lease: once `max_hold` has passed
    /// since the grant, the watchdog renews no more and the guard reports
    /// the lease lost with [`LossCause::MaxHold`] (its lost signal fires,
    /// [`LeaseGuard::run`] stops the work). The key itself is left to lapse
    /// with its TTL, or freed when the guard is released or dropped. A guard
    /// for a holder stuck in a loop thus does not keep the lease forever.
    /// Zero is refused with [`Error::InvalidArgument`] naming `max_hold`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> tenure::Result<()> {
    /// use std::time::Duration;
    /// use tenure::{Coordinator, LossCause};
    ///
    /// let tenure = Coordinator::memory();
    /// let guard = tenure
    ///     .lease("reports:daily")
    ///     .max_hold(Duration::from_millis(50))
    ///     .acquire()
    ///     .await?;
    /// guard.lost().wait().await; // renewed until 50 ms, then reported lost
    /// assert_eq!(guard.loss_cause(), Some(LossCause::MaxHold));
    /// # Ok(()) }
    /// ```
    pub fn max_hold(mut self, max_hold: Duration) -> Self {
        self.max_hold = Some(max_hold);
        self
    }

    /// The lease's key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Acquires the lease, waiting as long as it takes (FIFO where the store
    /// keeps a waiting line; see [`attempt_within`](Self::attempt_within) for
    /// how waiting works). Cancel it by dropping the future, or bound it with
    /// [`acquire_timeout`](Self::acquire_timeout).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> tenure::Result<()> {
    /// let tenure = tenure::Coordinator::memory();
    /// let guard = tenure.lease("jobs:nightly").acquire().await?;
    /// assert!(guard.fence().get() >= 1);
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn acquire(&self) -> Result<LeaseGuard> {
        loop {
            if let Attempt::Acquired(guard) = self.attempt_within(WAIT_SLICE).await? {
                return Ok(guard);
            }
        }
    }

    /// Acquires the lease, waiting at most `max_wait`. A key still held then
    /// is [`Error::Busy`] (with the holder's TTL left), so `?` passes it on
    /// and [`Error::is_busy`] tells it apart from a store failure.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> tenure::Result<()> {
    /// use std::time::Duration;
    ///
    /// let tenure = tenure::Coordinator::memory();
    /// let lease = tenure.lease("jobs:nightly");
    /// let guard = lease.acquire_timeout(Duration::from_millis(50)).await?;
    /// let refused = lease.acquire_timeout(Duration::from_millis(50)).await.unwrap_err();
    /// assert!(refused.is_busy());
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn acquire_timeout(&self, max_wait: Duration) -> Result<LeaseGuard> {
        match self.attempt_within(max_wait).await? {
            Attempt::Acquired(guard) => Ok(guard),
            Attempt::Held { ttl_left } => Err(Error::Busy {
                key: self.key.to_string(),
                retry_in: ttl_left,
            }),
        }
    }

    /// Tries once, without waiting: `None` when someone else holds the key.
    /// A grant whose answer came back after its validity is confirmed, or
    /// reported as a transient [`Error::Timeout`] (see the module docs):
    /// never a guard that is already lost.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> tenure::Result<()> {
    /// let tenure = tenure::Coordinator::memory();
    /// let lease = tenure.lease("jobs:nightly");
    /// let guard = lease.try_acquire().await?.expect("free");
    /// assert!(lease.try_acquire().await?.is_none()); // held by `guard`
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn try_acquire(&self) -> Result<Option<LeaseGuard>> {
        Ok(self.attempt().await?.into_guard())
    }

    /// Acquires the lease (waiting as [`acquire`](Self::acquire) does), runs
    /// `work` with its fence under the lease, and releases it. Returns what
    /// `work` returned, or [`Error::LeaseLost`] (converted into `work`'s error
    /// type) when the lease was lost first: `work` is then dropped at its
    /// next `.await` (see [`LeaseGuard::run`]).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> tenure::Result<()> {
    /// let tenure = tenure::Coordinator::memory();
    /// let written = tenure
    ///     .lease("acct:1")
    ///     .with(|fence| async move {
    ///         // write to the resource with `fence`
    ///         Ok::<_, tenure::Error>(fence.get())
    ///     })
    ///     .await?;
    /// assert!(written >= 1);
    /// # Ok(()) }
    /// ```
    pub async fn with<T, E, F, Fut>(&self, work: F) -> std::result::Result<T, E>
    where
        F: FnOnce(Fence) -> Fut,
        Fut: std::future::Future<Output = std::result::Result<T, E>>,
        E: From<Error>,
    {
        let guard = self.acquire().await?;
        let outcome = guard.run(work(guard.fence())).await;
        // What the work returned comes first; a failed release is logged
        // (the TTL frees the key).
        if let Err(e) = guard.release().await {
            tracing::debug!(key = %self.key, error = %e, "release after `with` failed; the TTL will free the key");
        }
        outcome?
    }

    /// Tries once, without waiting, and says why not: [`Attempt::Held`]
    /// carries the holder's TTL left.
    pub async fn attempt(&self) -> Result<Attempt> {
        let renew = self.validate()?;
        let started = telemetry::stopwatch();
        let result = self.attempt_traced(renew).await;
        self.count(&result, started);
        result
    }

    /// Tries until acquired or until `max_wait` has passed.
    ///
    /// Waiters subscribe to release notifications (Redis pub/sub on the Redis
    /// backend), so a released lease changes hands in about one round trip;
    /// without notifications they poll with jittered exponential backoff. A lease
    /// that expires instead of being released is retried when its TTL runs out.
    ///
    /// On a store with a waiting line (Redis: one master, Sentinel, Cluster)
    /// waiting is FIFO: the
    /// wait's first attempt, refused, already stands the waiter in line, with
    /// one owner token for the whole wait ([`LeaseStore::wait_turn`]); a
    /// release hands the lease to the first live waiter and wakes only it;
    /// the waiter claims the lease with one look and counts its validity from
    /// that look (with a TTL of at most half a second, the message carries
    /// the fence and the waiter holds the lease without another round trip,
    /// counting from its last look, which the hand-off followed). A free key with
    /// waiters in line (its holder's TTL ran out) goes to the first of them,
    /// not to a newcomer's wait. Waiting ends by leaving the line; a lease
    /// handed over meanwhile is passed on. FIFO does not cover a plain
    /// [`try_acquire`](Self::try_acquire), which does not look at the line (it
    /// can take a key whose TTL just ran out before the waiters notice), or a
    /// waiter that hit a transient error (it stands in line again at the
    /// end). A waiter's place is kept by its looks, one every 250 ms (its
    /// heartbeat), and lapses a second after the last one, so a killed
    /// waiter holds up the line for about that long, not for its TTL. On
    /// etcd waiting is FIFO too, by the create revision of each
    /// waiter's place: a release wakes the first waiter, which takes the lease
    /// with one transaction, and a plain `try_acquire` does not jump a line
    /// that is not empty (see `docs/etcd.md`). On SQLite waiting is FIFO as
    /// well (a line in the database; a release hands the lease to the first
    /// live waiter in its transaction), and as on Redis a plain `try_acquire`
    /// may take a lease whose TTL just ran out. In memory and on a quorum all
    /// woken waiters race and one wins.
    ///
    /// A [transient](Error::is_transient) backend error (a restart, a frozen or
    /// overloaded server, a failover) does not end the wait: attempts go on with
    /// jittered backoff (20 ms doubling up to 500 ms) until `max_wait` is spent,
    /// and only then is the last error returned (a retry still running then is
    /// abandoned, and undone). Permanent errors (bad input or
    /// configuration, authentication, data of the wrong type) return at once.
    /// Every abandoned or failed attempt is undone with its own owner token, so
    /// retrying never leaves a stray grant behind.
    pub async fn attempt_within(&self, max_wait: Duration) -> Result<Attempt> {
        let renew = self.validate()?;
        let span = tracing::debug_span!(
            "wait",
            key = %self.key,
            store = %telemetry::lazy(|| self.backend.describe()),
            max_wait_ms = crate::duration::millis(max_wait),
            outcome = Empty,
            fence = Empty,
            attempts = Empty,
            latency_us = Empty,
        );
        let started = Instant::now();
        let mut attempts = 0_u32;
        let result = telemetry::in_span!(&span, self.wait(renew, max_wait, &mut attempts));
        // Nothing to record when nobody listens (a disabled span would
        // still offer each field to the `log` crate).
        if !span.is_disabled() {
            span.record("attempts", attempts);
            if let Ok(Attempt::Acquired(guard)) = &result {
                span.record("fence", guard.fence().get());
            }
        }
        telemetry::finish!(debug, &span, outcome(&result), started);
        self.count(&result, telemetry::stopwatch_at(started));
        result
    }

    /// The waiting loop of [`attempt_within`](Self::attempt_within), counting
    /// its attempts.
    async fn wait(
        &self,
        renew: Option<Duration>,
        max_wait: Duration,
        attempts: &mut u32,
    ) -> Result<Attempt> {
        let deadline = Instant::now() + max_wait.min(MAX_TTL);
        // When the last wait ended with a release notification: a grant right
        // after it is a hand-off.
        let mut woken_at: Option<Instant> = None;
        // Our stand in the waiting line, from the first refusal on.
        let mut line: Option<Line> = None;
        let mut backoff = MIN_BACKOFF;
        let mut error_backoff = MIN_ERROR_BACKOFF;
        // The last transient error, while the backend keeps failing.
        let mut failing: Option<Error> = None;
        loop {
            *attempts += 1;
            let attempt = match failing.take() {
                None => self.step(&mut line, renew).await,
                // A retry after an error ends with the budget: the error is the
                // answer then. (An attempt cut short is undone by its own task.)
                Some(last) => {
                    match tokio::time::timeout_at(deadline, self.step(&mut line, renew)).await {
                        Ok(attempt) => attempt,
                        Err(_elapsed) => return Err(last),
                    }
                }
            };
            let outcome = match attempt {
                Ok(outcome) => {
                    error_backoff = MIN_ERROR_BACKOFF;
                    outcome
                }
                // A restart, a failover, a frozen server: worth waiting for
                // while the budget lasts. Everything else ends the wait now.
                Err(e) if e.is_transient() => {
                    let paused = self.pause_after_error(e, deadline, &mut error_backoff, &mut line);
                    failing = Some(paused.await?);
                    continue;
                }
                Err(e) => return Err(e),
            };
            let Attempt::Held { ttl_left } = outcome else {
                if let Some(woken_at) = woken_at {
                    telemetry::handoff(|| self.backend.kind(), woken_at.elapsed());
                }
                return Ok(outcome);
            };
            let now = Instant::now();
            if now >= deadline {
                if let Some(line) = line.take() {
                    line.leave().await;
                }
                return Ok(outcome);
            }
            woken_at = self
                .await_turn(&mut line, ttl_left, deadline, &mut backoff)
                .await?;
        }
    }

    /// A transient error while waiting: gives up our stand in line (the look
    /// may or may not have been applied, so the waiter stands in line again
    /// with a fresh token, and a late undo of this one can never touch a
    /// later grant; dropping the stand leaves) and pauses with backoff. The
    /// error is returned to be kept for the next try, or as the answer once
    /// the budget is spent.
    async fn pause_after_error(
        &self,
        e: Error,
        deadline: Instant,
        error_backoff: &mut Duration,
        line: &mut Option<Line>,
    ) -> Result<Error> {
        drop(line.take());
        let now = Instant::now();
        if now >= deadline {
            return Err(e);
        }
        tracing::debug!(key = %self.key, error = %e, "transient error while waiting; retrying");
        let pause = jittered(error_backoff, MAX_ERROR_BACKOFF);
        tokio::time::sleep(pause.min(deadline - now)).await;
        Ok(e)
    }

    /// After a refusal with budget left: when the stand has no watch yet,
    /// watches (the caller then looks again at once: a hand-off or release
    /// between the refusal and the watch would otherwise be missed); else
    /// waits for a release, a hand-off or the holder's TTL. Returns when a
    /// release notification woke us (a grant right after it is a hand-off).
    async fn await_turn(
        &self,
        line: &mut Option<Line>,
        ttl_left: Option<Duration>,
        deadline: Instant,
        backoff: &mut Duration,
    ) -> Result<Option<Instant>> {
        let Some(stand) = line.as_mut() else {
            return Ok(None);
        };
        if stand.first_wait() {
            tracing::debug!(
                ttl_left_ms = ttl_left.map(crate::duration::millis),
                "held by another holder; waiting"
            );
        }
        let has_place = stand.has_place();
        let Some(watch) = stand.watch() else {
            stand.start_watch().await;
            return Ok(None);
        };
        let mut pause = held_pause(watch, ttl_left, backoff);
        if has_place {
            // The look is the heartbeat that keeps the place: a place that
            // misses a few is given up, so a dead waiter stalls nobody long.
            pause = pause.min(line::HEARTBEAT);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if watch.wait(pause.min(left)).await {
            tracing::debug!("woken by a release");
            return Ok(Some(Instant::now()));
        }
        Ok(None)
    }

    /// The next attempt of a wait: a look from our stand in line, the first
    /// one taking the stand (on a store without a line, a plain attempt).
    async fn step(&self, line: &mut Option<Line>, renew: Option<Duration>) -> Result<Attempt> {
        let stand = match line {
            Some(stand) => stand,
            None => line.insert(Line::new(Arc::clone(&self.backend), Arc::clone(&self.key))?),
        };
        self.traced(async {
            match stand.look(self.ttl, self.holder.clone(), renew).await? {
                AcquireReply::Acquired { fence, valid_until } => Ok(Attempt::Acquired(self.guard(
                    stand.token().clone(),
                    fence,
                    valid_until,
                    guard::Upkeep {
                        renew_every: renew,
                        max_hold: self.max_hold,
                        unclaimed: stand.unclaimed(),
                    },
                ))),
                AcquireReply::Held { ttl_left } => Ok(Attempt::Held { ttl_left }),
            }
        })
        .await
    }

    /// Checks key and TTL; returns the renewal interval, if any.
    fn validate(&self) -> Result<Option<Duration>> {
        validate_key(&self.key)?;
        if let Some(holder) = &self.holder {
            holder.validate()?;
        }
        if self.ttl < MIN_TTL {
            return Err(Error::invalid(
                "ttl",
                format!(
                    "{:?} is below the minimum of {MIN_TTL:?}: the clock-drift margin (1% + 2ms) would leave the holder (almost) no validity",
                    self.ttl
                ),
            ));
        }
        if self.max_hold == Some(Duration::ZERO) {
            return Err(Error::invalid(
                "max_hold",
                "a maximum hold of zero would report the lease lost the moment it is granted",
            ));
        }
        if self.ttl > MAX_TTL {
            return Err(Error::invalid(
                "ttl",
                format!("{:?} is above the maximum of 7 days", self.ttl),
            ));
        }
        let validity = self.ttl.saturating_sub(drift(self.ttl));
        match self.renew_every {
            None => Ok(None),
            Some(Duration::ZERO) => Ok(Some(self.ttl / 3)),
            Some(every) if every >= validity => Err(Error::invalid(
                "renewal interval",
                format!(
                    "{every:?} must be shorter than {validity:?} (the ttl {:?} minus the clock-drift margin), or the lease is reported lost before it is renewed",
                    self.ttl
                ),
            )),
            Some(every) => Ok(Some(every)),
        }
    }

    /// One attempt with a fresh owner token. A new token per attempt means a
    /// late clean-up of an earlier attempt (a quorum backend undoing a lost
    /// vote, a delayed compare-and-delete, an abandoned attempt undone by
    /// [`attempt`]) can never delete this attempt's grant.
    async fn attempt_traced(&self, renew: Option<Duration>) -> Result<Attempt> {
        self.traced(self.attempt_once(renew)).await
    }

    /// Runs one attempt, `work`, in an `acquire` span that records its outcome.
    async fn traced(
        &self,
        work: impl std::future::Future<Output = Result<Attempt>>,
    ) -> Result<Attempt> {
        let span = tracing::debug_span!(
            "acquire",
            key = %self.key,
            store = %telemetry::lazy(|| self.backend.describe()),
            ttl_ms = crate::duration::millis(self.ttl),
            outcome = Empty,
            fence = Empty,
            ttl_left_ms = Empty,
            latency_us = Empty,
        );
        // The clock is read for the span's latency only if it records it.
        let started = (!span.is_disabled()).then(Instant::now);
        let result = telemetry::in_span!(&span, work);
        match &result {
            Ok(Attempt::Acquired(guard)) => {
                span.record("fence", guard.fence().get());
            }
            Ok(Attempt::Held {
                ttl_left: Some(ttl_left),
            }) => {
                span.record("ttl_left_ms", crate::duration::millis(*ttl_left));
            }
            _ => {}
        }
        if let Some(started) = started {
            telemetry::finish!(debug, &span, outcome(&result), started);
        }
        result
    }

    /// Counts an acquire call that ended with `result`, `started` then.
    fn count(&self, result: &Result<Attempt>, started: telemetry::Stopwatch) {
        telemetry::acquisition(|| self.backend.kind(), outcome(result), started);
    }

    /// One plain attempt, without its span.
    async fn attempt_once(&self, renew: Option<Duration>) -> Result<Attempt> {
        let token = OwnerToken::generate()?;
        let reply = attempt::acquire(
            &self.backend,
            &self.key,
            &token,
            self.ttl,
            self.holder.as_deref(),
        )
        .await?;
        match reply {
            AcquireReply::Acquired { fence, valid_until } => Ok(Attempt::Acquired(self.guard(
                token,
                fence,
                valid_until,
                guard::Upkeep {
                    renew_every: renew,
                    max_hold: self.max_hold,
                    unclaimed: false,
                },
            ))),
            AcquireReply::Held { ttl_left } => Ok(Attempt::Held { ttl_left }),
        }
    }

    fn guard(
        &self,
        token: OwnerToken,
        fence: Fence,
        valid_until: crate::clock::Moment,
        upkeep: guard::Upkeep,
    ) -> LeaseGuard {
        LeaseGuard::start(
            Arc::clone(&self.backend),
            Arc::clone(&self.key),
            token,
            self.ttl,
            fence,
            valid_until,
            upkeep,
        )
    }
}

/// The `outcome` of an acquire, in spans and metrics.
fn outcome(result: &Result<Attempt>) -> &'static str {
    match result {
        Ok(Attempt::Acquired(_)) => "acquired",
        Ok(Attempt::Held { .. }) => "held",
        Err(_) => "error",
    }
}

/// How long to wait for a release of a held lease: until its TTL runs out
/// (1 ms later the key is surely gone), capped by [`MAX_PUSH_WAIT`] when
/// releases are pushed, else by a jittered, doubling poll interval.
fn held_pause(
    watch: &ReleaseWatch,
    ttl_left: Option<Duration>,
    backoff: &mut Duration,
) -> Duration {
    let expiry = ttl_left.map(|t| t + Duration::from_millis(1));
    if watch.is_push() {
        expiry.unwrap_or(MAX_PUSH_WAIT).min(MAX_PUSH_WAIT)
    } else {
        let poll = jittered(backoff, MAX_BACKOFF);
        expiry.map_or(poll, |e| e.min(poll))
    }
}

/// A random pause in `[backoff / 2, backoff]`; doubles `backoff` up to `max`.
fn jittered(backoff: &mut Duration, max: Duration) -> Duration {
    let pause = rand::rng().random_range(*backoff / 2..=*backoff);
    *backoff = (*backoff * 2).min(max);
    pause
}
