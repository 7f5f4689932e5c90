//! The [`Limiter`] handle.

use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;
use tracing::field::Empty;

use super::blocked::BlockedKeys;
use super::decision::{Decision, Mode, Timestamp};
use super::policy::Policy;
use super::quota::{Algorithm, Quota};
use super::reservation::Reservation;
use super::shadow::Shadowing;
use super::step::check_request;
use super::store::{LimitRequest, LimitStore};
use crate::error::{Error, Result};
use crate::key::validate_key;
use crate::telemetry;

/// The latest instant a caller may inject: with a policy's longest span
/// ([`MAX_SPAN`](super::MAX_SPAN)) on top it stays below 2^53, where Lua's
/// doubles are exact.
const LATEST_NOW: u64 = (1 << 53) - (1 << 50) - 1;

/// A rate limiter on one store: one or more policies, checked together.
/// Cheap to clone (an `Arc` inside).
///
/// Build it with [`Coordinator::limiter`](crate::Coordinator::limiter) (on the
/// handle's store) or [`Limiter::local`] (in-process), add policies with
/// [`and`](Self::and). Every check of a compound limiter is atomic: when any
/// policy refuses, no policy consumes anything.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> tenure::Result<()> {
/// use std::num::NonZeroU32;
/// use tenure::limit::{Algorithm, Quota};
/// let nz = |n| NonZeroU32::new(n).unwrap();
///
/// let tenure = tenure::Coordinator::memory();
/// let api = tenure
///     .limiter(Quota::per_second(nz(10)), Algorithm::Gcra)
///     .and(Quota::per_day(nz(3)), Algorithm::FixedWindow); // 10/s and 3/day
/// for _ in 0..3 {
///     assert!(api.check("key:abc").await?.allowed);
/// }
/// let d = api.check("key:abc").await?;
/// assert!(!d.allowed);                       // the daily policy refuses…
/// assert_eq!(d.limit, 3);
/// assert!(api.peek("key:abc").await?.remaining == 0);
/// assert!(api.check_n("key:abc", 11).await.is_err()); // …and 11 > 10 never fits
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Limiter {
    inner: Arc<Inner>,
}

#[derive(Debug, Clone)]
struct Inner {
    store: Arc<dyn LimitStore>,
    quotas: Vec<(Quota, Algorithm)>,
    record_rejected: bool,
    /// Asked instead when the store fails (unreachable, timeout, server error).
    fallback: Option<Limiter>,
    /// The policies whose refusals are counted but not enforced.
    shadow: Shadowing,
    /// The checked policies, or why they are unusable (reported on every call:
    /// building a limiter never fails, like `Quota`'s const constructors).
    policies: std::result::Result<Vec<Policy>, (&'static str, String)>,
    /// Whether a check may be decided at once ([`Limiter::check_local`]):
    /// the store is in this process and no policy is in shadow mode. Kept
    /// up to date by [`Inner::settle`].
    inline: bool,
    /// The store, when it is the in-process one: decided without a dynamic
    /// call by [`Limiter::check_local`].
    memory: Option<crate::memory::MemoryLimits>,
}

impl Inner {
    fn build(
        store: Arc<dyn LimitStore>,
        quotas: Vec<(Quota, Algorithm)>,
        record_rejected: bool,
    ) -> Self {
        let policies = Self::policies(&quotas, record_rejected);
        let mut inner = Inner {
            store,
            quotas,
            record_rejected,
            fallback: None,
            shadow: Shadowing::default(),
            policies,
            inline: false,
            memory: None,
        };
        inner.settle();
        inner
    }

    /// Recomputes what follows from the store and the shadow mode.
    fn settle(&mut self) {
        self.inline = !self.store.is_shared() && !self.shadow.is_active();
        self.memory = self.store.as_memory().cloned();
    }

    fn policies(
        quotas: &[(Quota, Algorithm)],
        record_rejected: bool,
    ) -> std::result::Result<Vec<Policy>, (&'static str, String)> {
        let mut out: Vec<Policy> = Vec::with_capacity(quotas.len());
        for (i, (quota, algorithm)) in quotas.iter().enumerate() {
            if quotas[..i].contains(&(*quota, *algorithm)) {
                return Err((
                    "policy",
                    format!("{quota:?} with {algorithm} is given twice"),
                ));
            }
            // The n-th policy of its algorithm counts in the key's n-th
            // state of that algorithm, whatever its quota.
            let slot = quotas[..i].iter().filter(|(_, a)| a == algorithm).count();
            let policy = Policy::new(*quota, *algorithm)
                .map_err(|e| match e {
                    Error::InvalidArgument { what, reason } => (what, reason),
                    other => ("quota", other.to_string()),
                })?
                .record_rejected(record_rejected)
                .slot(u32::try_from(slot).unwrap_or(u32::MAX));
            out.push(policy);
        }
        Ok(out)
    }
}

impl Limiter {
    /// A limiter with one policy on `store`.
    pub fn new(store: impl LimitStore, quota: Quota, algorithm: Algorithm) -> Self {
        Self::on(Arc::new(store), quota, algorithm)
    }

    /// A limiter with one policy on a shared store.
    pub fn on(store: Arc<dyn LimitStore>, quota: Quota, algorithm: Algorithm) -> Self {
        Limiter {
            inner: Arc::new(Inner::build(store, vec![(quota, algorithm)], false)),
        }
    }

    /// Adds a policy: requests must then pass this one too (compound limiter).
    #[must_use]
    pub fn and(self, quota: Quota, algorithm: Algorithm) -> Self {
        let mut quotas = self.inner.quotas.clone();
        quotas.push((quota, algorithm));
        self.rebuild(quotas, self.inner.record_rejected)
    }

    /// Records refused requests in the sliding-log policies (see
    /// [`Policy::record_rejected`]). Off by default.
    #[must_use]
    pub fn record_rejected(self, on: bool) -> Self {
        let quotas = self.inner.quotas.clone();
        self.rebuild(quotas, on)
    }

    /// Asks `other` instead whenever this limiter's store fails with an
    /// infrastructure error (unreachable, timeout, server error) — typically a
    /// [`Limiter::local`] with a per-instance share of the quota, so a Redis
    /// outage neither lets everything through nor refuses everything. Bad input
    /// and corrupted keys are still errors. Each use is logged at `warn`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> tenure::Result<()> {
    /// use std::num::NonZeroU32;
    /// use tenure::limit::{Algorithm, Limiter, Quota};
    /// let nz = |n| NonZeroU32::new(n).unwrap();
    ///
    /// let tenure = tenure::Coordinator::memory(); // in production: connect("redis://…")
    /// let limiter = tenure
    ///     .limiter(Quota::per_second(nz(100)), Algorithm::Gcra)
    ///     // 4 instances: each admits a quarter locally while Redis is away
    ///     .fallback(Limiter::local(Quota::per_second(nz(25)), Algorithm::Gcra));
    /// assert!(limiter.check("tenant:1").await?.allowed);
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn fallback(self, other: Limiter) -> Self {
        let mut inner = Inner::clone(&self.inner);
        inner.fallback = Some(other);
        Limiter {
            inner: Arc::new(inner),
        }
    }

    /// Puts every policy in shadow mode (a dry run, to roll out a limit):
    /// decisions are computed, consume what they would consume if enforced,
    /// and are counted (outcome `would_refuse`), but a refusal comes back
    /// admitted with [`Decision::would_refuse`] set and its numbers. A
    /// fallback's refusals are not enforced either. See `docs/limiters.md`.
    #[must_use]
    pub fn shadow(self, on: bool) -> Self {
        self.edit(|inner| inner.shadow.set_all(on))
    }

    /// Adds a policy in shadow mode: checked with the others, consuming only
    /// when the request is admitted and it allows it, never refusing.
    #[must_use]
    pub fn and_shadow(self, quota: Quota, algorithm: Algorithm) -> Self {
        let index = self.inner.quotas.len();
        self.and(quota, algorithm)
            .edit(|inner| inner.shadow.add(index))
    }

    /// Remembers the store's refusals in this process, for at most
    /// `max_keys` keys, and refuses a remembered key without asking the store
    /// until the refusal's `retry_after` has passed: a flood of refused
    /// requests costs one store call per key and `retry_after`, not one per
    /// request. Off by default.
    ///
    /// It never admits what the store would refuse (it only answers with
    /// refusals the store gave, for the same policies and at least the same
    /// cost); a remembered refusal is stale only in the refusing direction,
    /// and only until its `retry_after` — e.g. after a refund or reset made
    /// by another process. When `max_keys` are remembered, the refusal that
    /// ends soonest is forgotten. Requests at an injected instant and limiters
    /// that [record rejected requests](Self::record_rejected) are not cached.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> tenure::Result<()> {
    /// use std::num::{NonZeroU32, NonZeroUsize};
    /// use tenure::limit::{Algorithm, Quota};
    ///
    /// let tenure = tenure::Coordinator::memory(); // in production: connect("redis://…")
    /// let limiter = tenure
    ///     .limiter(Quota::per_minute(NonZeroU32::new(1).unwrap()), Algorithm::Gcra)
    ///     .cache_blocked(NonZeroUsize::new(10_000).unwrap());
    /// assert!(limiter.check("ip:192.0.2.1").await?.allowed);
    /// assert!(!limiter.check("ip:192.0.2.1").await?.allowed); // remembered for ~60 s
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn cache_blocked(self, max_keys: NonZeroUsize) -> Self {
        self.edit(|inner| inner.store = BlockedKeys::wrap(Arc::clone(&inner.store), max_keys))
    }

    fn edit(&self, change: impl FnOnce(&mut Inner)) -> Self {
        let mut inner = Inner::clone(&self.inner);
        change(&mut inner);
        inner.settle();
        Limiter {
            inner: Arc::new(inner),
        }
    }

    fn rebuild(&self, quotas: Vec<(Quota, Algorithm)>, record_rejected: bool) -> Self {
        let mut inner = Inner::build(Arc::clone(&self.inner.store), quotas, record_rejected);
        inner.fallback = self.inner.fallback.clone();
        inner.shadow = self.inner.shadow.clone();
        inner.settle();
        Limiter {
            inner: Arc::new(inner),
        }
    }

    /// The checked policies.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when a quota does not fit its algorithm (see
    /// [`Policy::new`]) or a policy is given twice.
    #[inline]
    pub fn policies(&self) -> Result<&[Policy]> {
        self.inner
            .policies
            .as_deref()
            .map_err(|(what, reason)| Error::invalid(what, reason.clone()))
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn LimitStore> {
        &self.inner.store
    }

    /// Takes one unit for `key` if allowed.
    ///
    /// # Errors
    /// Invalid key or policies, and store failures. A refusal is `Ok` with
    /// `allowed == false`.
    pub async fn check(&self, key: &str) -> Result<Decision> {
        if let Some(done) = self.check_local(key, 1) {
            return done;
        }
        self.decide(key, 1, Mode::Consume, None).await
    }

    /// [`check_n`](Self::check_n) decided at once, without a future, when the
    /// store is in this process ([`Limiter::local`],
    /// [`MemoryLimits`](crate::memory::MemoryLimits)) and nothing watches the
    /// decision (no subscriber of the `limit` span at `debug`, no `metrics`
    /// feature, no shadow mode). `None` otherwise: then await
    /// [`check_n`](Self::check_n), which decides the same.
    ///
    /// ```
    /// use std::num::NonZeroU32;
    /// use tenure::limit::{Algorithm, Limiter, Quota};
    ///
    /// let limiter = Limiter::local(Quota::per_second(NonZeroU32::new(5).unwrap()), Algorithm::Gcra);
    /// if let Some(decision) = limiter.check_local("ip:192.0.2.1", 1) {
    ///     assert!(decision?.allowed);
    /// }
    /// # Ok::<(), tenure::Error>(())
    /// ```
    // Always inlined: its caller then gets the decision in place, without
    // the whole result moved out of this function and into its own.
    #[inline(always)]
    pub fn check_local(&self, key: &str, cost: u32) -> Option<Result<Decision>> {
        if !self.inner.inline || observed() {
            return None;
        }
        self.decide_unobserved(key, cost)
    }

    /// [`check_local`](Self::check_local) once it is known that the store
    /// decides at once and nothing watches the decision.
    #[inline(always)]
    fn decide_unobserved(&self, key: &str, cost: u32) -> Option<Result<Decision>> {
        let inner = &*self.inner;
        let policies = match self.policies() {
            Ok(policies) => policies,
            Err(e) => return Some(Err(e)),
        };
        // `request`'s checks, without its result moved out: a consume at
        // the store's clock has no instant to check.
        if let Err(e) = Self::check_input(key, policies, cost, Mode::Consume) {
            return Some(Err(e));
        }
        let request = LimitRequest::new(key, policies, cost, Mode::Consume);
        let decided = match &inner.memory {
            Some(memory) => memory.decide(&request),
            None => inner.store.decide_inline(&request)?,
        };
        // A store error goes the long way, which reports it. (Only the
        // decision is moved on, not the whole result, which is twice its size.)
        match decided {
            Ok(decision) => Some(Ok(decision)),
            Err(_) => None,
        }
    }

    /// Takes `cost` units for `key` if all are allowed (none are taken otherwise).
    ///
    /// # Errors
    /// As [`check`](Self::check); also [`Error::InvalidArgument`] for a zero cost
    /// and [`Error::CostExceedsCapacity`] for a cost no policy could ever admit.
    pub async fn check_n(&self, key: &str, cost: u32) -> Result<Decision> {
        if let Some(done) = self.check_local(key, cost) {
            return done;
        }
        self.decide(key, cost, Mode::Consume, None).await
    }

    /// What [`check`](Self::check) would answer now, without taking anything;
    /// `remaining` is what is available now.
    ///
    /// # Errors
    /// As [`check`](Self::check).
    pub async fn peek(&self, key: &str) -> Result<Decision> {
        self.decide(key, 1, Mode::Peek, None).await
    }

    /// What [`check_n`](Self::check_n) would answer now, without taking anything.
    ///
    /// # Errors
    /// As [`check_n`](Self::check_n).
    pub async fn peek_n(&self, key: &str, cost: u32) -> Result<Decision> {
        self.decide(key, cost, Mode::Peek, None).await
    }

    /// The general form: `cost` units, consume or peek, at the store's clock or
    /// (for tests and simulations) at `now`.
    ///
    /// # Errors
    /// As [`check_n`](Self::check_n).
    pub async fn decide(
        &self,
        key: &str,
        cost: u32,
        mode: Mode,
        now: Option<Timestamp>,
    ) -> Result<Decision> {
        self.decide_under(key, self.policies()?, cost, mode, now)
            .await
    }

    /// [`decide`](Self::decide) under `policies` instead of the limiter's own.
    async fn decide_under(
        &self,
        key: &str,
        policies: &[Policy],
        cost: u32,
        mode: Mode,
        now: Option<Timestamp>,
    ) -> Result<Decision> {
        let request = Self::request(key, policies, cost, mode, now)?;
        // Unobserved (no `debug` subscriber for its span, no metrics), an
        // in-process store answers at once: no future, no span, no timing.
        // Its errors are never infrastructure errors, so no fallback is due.
        if !observed()
            && !self.inner.shadow.is_active()
            && let Some(Ok(decision)) = self.inner.store.decide_inline(&request)
        {
            return Ok(decision);
        }
        let (_, combined) = self.apply(&request).await?;
        combined.ok_or_else(|| Error::invalid("policy", "no policy"))
    }

    /// Like [`decide`](Self::decide), but returns each policy's decision, in the
    /// order the policies were added.
    ///
    /// # Errors
    /// As [`check_n`](Self::check_n).
    pub async fn decide_each(
        &self,
        key: &str,
        cost: u32,
        mode: Mode,
        now: Option<Timestamp>,
    ) -> Result<Vec<Decision>> {
        let request = Self::request(key, self.policies()?, cost, mode, now)?;
        Ok(self.apply(&request).await?.0)
    }

    /// Asks the store (and the fallback, when the store fails) for a checked
    /// request, inside the `limit` span: each policy's decision and the
    /// combined one.
    async fn apply(&self, request: &LimitRequest<'_>) -> Result<(Vec<Decision>, Option<Decision>)> {
        let (key, cost, mode, now) = (request.key, request.cost, request.mode, request.now);
        let store = &self.inner.store;
        let span = tracing::debug_span!(
            "limit",
            key = %key,
            store = %telemetry::lazy(|| store.describe()),
            cost,
            peek = matches!(mode, Mode::Peek),
            outcome = Empty,
            remaining = Empty,
            would_refuse = Empty,
            latency_us = Empty,
        );
        let started = Instant::now();
        let answer = self
            .inner
            .shadow
            .ask(store.as_ref(), request)
            .instrument(span.clone())
            .await;
        telemetry::limit_store(|| store.kind(), started.elapsed());
        let (result, fell_back) = match (answer, &self.inner.fallback) {
            (Err(e), Some(fallback)) if e.is_infrastructure() => {
                tracing::warn!(parent: &span, error = %e, key, "rate-limit store failed; using the fallback limiter");
                let result = Box::pin(fallback.decide_each(key, cost, mode, now))
                    .instrument(span.clone())
                    .await;
                let result = match self.inner.shadow.is_total() {
                    true => result.map(|d| self.inner.shadow.mark(d)),
                    false => result,
                };
                (result, true)
            }
            (result, _) => (result, false),
        };
        let combined = match &result {
            Ok(each) if fell_back => Decision::combine(each),
            Ok(each) => self.inner.shadow.combine(each),
            Err(_) => None,
        };
        if let Some(d) = &combined {
            span.record("remaining", d.remaining);
            span.record("would_refuse", d.would_refuse);
        }
        let outcome = match (&combined, fell_back) {
            (_, true) => "fallback",
            (Some(d), false) if d.allowed && d.would_refuse => "would_refuse",
            (Some(d), false) if d.allowed => "allowed",
            (Some(_), false) => "refused",
            (None, false) => "error",
        };
        telemetry::finish!(debug, &span, outcome, started);
        telemetry::limit_decision(|| store.kind(), outcome);
        result.map(|each| (each, combined))
    }

    /// The checks of a request's key and cost. Always inlined: on the path
    /// of [`check_local`](Self::check_local), which is inlined into its
    /// callers, a call here would cost more than the usual key's checks.
    #[inline(always)]
    fn check_input(key: &str, policies: &[Policy], cost: u32, mode: Mode) -> Result<()> {
        validate_key(key)?;
        // One unit fits every policy (capacities are at least 1), and the
        // policies of a limiter never share a slot (`Inner::policies`).
        if cost != 1 {
            check_request(policies, cost, mode)?;
        }
        Ok(())
    }

    /// The checked request for `key`: bad input is refused here, before any
    /// store is asked.
    #[inline]
    fn request<'a>(
        key: &'a str,
        policies: &'a [Policy],
        cost: u32,
        mode: Mode,
        now: Option<Timestamp>,
    ) -> Result<LimitRequest<'a>> {
        Self::check_input(key, policies, cost, mode)?;
        if now.is_some_and(|t| t.as_micros() > LATEST_NOW) {
            return Err(Error::invalid(
                "now",
                "an injected instant beyond 2^53 − 2^50 µs (year 2219) is not exact in Lua",
            ));
        }
        Ok(LimitRequest::new(key, policies, cost, mode).at(now))
    }

    /// Takes one unit for `key`, waiting up to `max_wait` for it. See
    /// [`wait_n`](Self::wait_n).
    ///
    /// # Errors
    /// As [`check`](Self::check).
    pub async fn wait(&self, key: &str, max_wait: Duration) -> Result<Decision> {
        self.wait_n(key, 1, max_wait).await
    }

    /// Takes `cost` units for `key`, waiting until they are available, for at
    /// most `max_wait`: a [`reserve`](Self::reserve) followed by a sleep until
    /// the booked instant. Returns the admitting decision, or at once the
    /// refusal when the wait would exceed `max_wait` (it does not sleep in
    /// vain). Under GCRA, the token bucket and the sliding log, waiters are
    /// served in the order they booked, at the quota's rate, with one store
    /// call each; window counters book nothing, so there a waiter sleeps
    /// until the refusal's `retry_after` and asks again (no order among
    /// waiters).
    ///
    /// Dropping the future while it sleeps leaves the units booked (taken, as
    /// by an admitted request that was then abandoned); use
    /// [`reserve`](Self::reserve) and [`Reservation::cancel`] to give them back.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> tenure::Result<()> {
    /// use std::num::NonZeroU32;
    /// use std::time::Duration;
    /// use tenure::limit::{Algorithm, Limiter, Quota};
    /// use tenure::memory::MemoryLimits;
    ///
    /// tokio::time::pause(); // virtual time: the waits below take no real time
    /// let store = MemoryLimits::new().tokio_clock(); // decides on the paused clock
    /// let limiter = Limiter::new(store, Quota::per_second(NonZeroU32::new(10).unwrap()), Algorithm::Gcra);
    /// limiter.check_n("job", 10).await?;                        // bucket empty
    /// let d = limiter.wait("job", Duration::from_secs(1)).await?;
    /// assert!(d.allowed);                                       // 100 ms later
    /// let d = limiter.wait_n("job", 10, Duration::from_millis(10)).await?;
    /// assert!(!d.allowed);                                      // 1 s away: no wait
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`check_n`](Self::check_n).
    pub async fn wait_n(&self, key: &str, cost: u32, max_wait: Duration) -> Result<Decision> {
        let deadline = Instant::now() + crate::duration::capped(max_wait);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let reservation = self.reserve(key, cost, left).await?;
            if reservation.is_granted() {
                return Ok(reservation.ready().await);
            }
            // Window counters book nothing: sleep until the refusal says,
            // then ask again.
            let refusal = reservation.decision();
            let left = deadline.saturating_duration_since(Instant::now());
            match refusal.retry_after {
                Some(retry) if retry <= left => tokio::time::sleep(retry).await,
                _ => return Ok(refusal),
            }
        }
    }

    /// Books `cost` units for `key` at the first instant they are available,
    /// if that is at most `max_delay` from now, atomically: one store call,
    /// no polling. The [`Reservation`] says how long to wait
    /// ([`delay`](Reservation::delay)) before proceeding; reservations of a
    /// key are served in the order they were booked, at the quota's rate.
    /// Beyond `max_delay` nothing is booked and the reservation is a refusal
    /// (its [`decision`](Reservation::decision) says when to retry).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> tenure::Result<()> {
    /// use std::num::NonZeroU32;
    /// use std::time::Duration;
    /// use tenure::limit::{Algorithm, Limiter, Quota};
    ///
    /// let limiter = Limiter::local(Quota::per_second(NonZeroU32::new(2).unwrap()), Algorithm::Gcra);
    /// limiter.check_n("job", 2).await?;                            // bucket empty
    /// let first = limiter.reserve("job", 1, Duration::from_secs(5)).await?;
    /// let second = limiter.reserve("job", 1, Duration::from_secs(5)).await?;
    /// assert!(first.is_granted() && second.is_granted());
    /// assert!(first.delay() <= Duration::from_millis(500));       // one interval
    /// assert!(second.delay() > Duration::from_millis(500));       // the one after
    /// second.cancel().await?;                                      // its slot is free again
    /// let too_far = limiter.reserve("job", 2, Duration::from_millis(100)).await?;
    /// assert!(!too_far.is_granted());
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`check_n`](Self::check_n).
    pub async fn reserve(&self, key: &str, cost: u32, max_delay: Duration) -> Result<Reservation> {
        let mode = Mode::Reserve(crate::duration::capped(max_delay));
        let decision = self.decide(key, cost, mode, None).await?;
        Ok(Reservation::new(self.clone(), key, cost, decision))
    }

    /// Takes `cost` units for `key` under `quota` instead of the limiter's
    /// first policy's quota (the others stay): a per-key quota, e.g. by a
    /// tenant's plan. The key keeps one state whatever quota it is checked
    /// under; when the quota changes, the state is converted, not reset (see
    /// `docs/limiters.md`, "Per-key quotas").
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> tenure::Result<()> {
    /// use std::num::NonZeroU32;
    /// use tenure::limit::{Algorithm, Limiter, Quota};
    /// let nz = |n| NonZeroU32::new(n).unwrap();
    ///
    /// let limiter = Limiter::local(Quota::per_minute(nz(10)), Algorithm::Gcra);
    /// let free = Quota::per_minute(nz(3));
    /// let paid = Quota::per_minute(nz(100));
    /// for _ in 0..3 {
    ///     assert!(limiter.check_with("tenant:7", free, 1).await?.allowed);
    /// }
    /// assert!(!limiter.check_with("tenant:7", free, 1).await?.allowed);
    /// // Upgraded: the 3 units taken still count, the rest of 100 is there at once.
    /// let d = limiter.check_with("tenant:7", paid, 1).await?;
    /// assert!(d.allowed && d.remaining == 96);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`check_n`](Self::check_n); [`Error::InvalidArgument`] when `quota`
    /// does not fit the algorithm.
    pub async fn check_with(&self, key: &str, quota: Quota, cost: u32) -> Result<Decision> {
        let mut policies = self.policies()?.to_vec();
        if let Some(first) = policies.first_mut() {
            *first = first.with_quota(quota)?;
        }
        self.decide_under(key, &policies, cost, Mode::Consume, None)
            .await
    }

    /// Gives `cost` units back to `key` under every policy — a request that
    /// turned out not to count (it failed, it was cheaper than charged) —
    /// never beyond a policy's capacity. Returns what a peek of one unit sees
    /// afterwards. What each algorithm can give back is in `docs/limiters.md`
    /// ("Refunds").
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> tenure::Result<()> {
    /// use std::num::NonZeroU32;
    /// use tenure::limit::{Algorithm, Limiter, Quota};
    ///
    /// let limiter = Limiter::local(Quota::per_hour(NonZeroU32::new(5).unwrap()), Algorithm::FixedWindow);
    /// limiter.check_n("upload", 4).await?;
    /// assert_eq!(limiter.refund("upload", 3).await?.remaining, 4);
    /// assert_eq!(limiter.refund("upload", 50).await?.remaining, 5); // never above the limit
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`check`](Self::check); [`Error::InvalidArgument`] for a zero cost.
    pub async fn refund(&self, key: &str, cost: u32) -> Result<Decision> {
        self.decide(key, cost, Mode::Refund, None).await
    }

    /// Forgets `key`'s state under every policy of this limiter: its next
    /// request starts from a full budget.
    ///
    /// # Errors
    /// An invalid key or policies, store failures; [`Error::Unsupported`] on
    /// a store that keeps no limits.
    pub async fn reset(&self, key: &str) -> Result<()> {
        validate_key(key)?;
        self.inner.store.reset(key, self.policies()?).await
    }
}

/// Whether a check is watched: a subscriber takes the `limit` span at
/// `debug`, or the `metrics` feature counts decisions.
#[inline]
fn observed() -> bool {
    cfg!(feature = "metrics") || tracing::enabled!(tracing::Level::DEBUG)
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroU32;

    use super::*;

    #[test]
    fn an_in_process_limiter_decides_on_its_store_directly_unless_shadowed() {
        let quota = Quota::per_minute(NonZeroU32::MIN);
        let local = Limiter::local(quota, Algorithm::Gcra);
        assert!(local.inner.inline && local.inner.memory.is_some());
        let shadowed = local.clone().shadow(true);
        assert!(!shadowed.inner.inline);
        assert!(shadowed.check_local("k", 1).is_none());
        // Decisions someone watches (the `metrics` feature, which the
        // workspace's build turns on) always take the long way; the others
        // are decided at once (on a key of their own here).
        assert_eq!(local.check_local("other", 1).is_none(), observed());
        // The direct path itself, whichever features are on.
        let first = local.decide_unobserved("k", 1).expect("decided at once");
        assert!(first.expect("a decision").allowed);
        let second = local.decide_unobserved("k", 1).expect("decided at once");
        assert!(!second.expect("a decision").allowed);
        let bad = local.decide_unobserved("", 1).expect("refused at once");
        assert!(
            matches!(bad, Err(crate::Error::InvalidKey { .. })),
            "{bad:?}"
        );
    }
}
