//! What [`Limiter::reserve`] books.

use std::time::Duration;

use tokio::time::Instant;

use super::decision::Decision;
use super::limiter::Limiter;
use crate::error::Result;

/// Units booked at an instant by [`Limiter::reserve`], or the refusal to book
/// them. Proceed after [`delay`](Self::delay) (or `.ready().await`); give the
/// units back with [`cancel`](Self::cancel) if you will not use them.
#[derive(Debug)]
#[must_use = "a granted reservation has taken units: wait for it or cancel it"]
pub struct Reservation {
    limiter: Limiter,
    key: String,
    cost: u32,
    decision: Decision,
    ready_at: Instant,
}

impl Reservation {
    pub(super) fn new(limiter: Limiter, key: &str, cost: u32, decision: Decision) -> Self {
        let wait = match decision.retry_after {
            Some(wait) if decision.allowed => wait,
            _ => Duration::ZERO,
        };
        Reservation {
            limiter,
            key: key.to_string(),
            cost,
            decision,
            ready_at: Instant::now() + wait,
        }
    }

    /// Whether the units are booked (else nothing was taken).
    pub fn is_granted(&self) -> bool {
        self.decision.allowed
    }

    /// The store's answer: when granted, `retry_after` is the wait it booked
    /// (`None` for none); when refused, the usual refusal.
    pub fn decision(&self) -> Decision {
        self.decision
    }

    /// How long from now until the caller may proceed (zero when refused or
    /// already due).
    pub fn delay(&self) -> Duration {
        self.ready_at.saturating_duration_since(Instant::now())
    }

    /// The instant the caller may proceed (measured from the store's answer:
    /// never earlier than the store booked).
    pub fn ready_at(&self) -> Instant {
        self.ready_at
    }

    /// Sleeps until the booked instant and returns the admitting decision
    /// (`retry_after` cleared); a refusal is returned at once.
    pub async fn ready(self) -> Decision {
        if !self.decision.allowed {
            return self.decision;
        }
        tokio::time::sleep_until(self.ready_at).await;
        let mut d = self.decision;
        d.reset_after = d
            .reset_after
            .saturating_sub(d.retry_after.unwrap_or_default());
        d.retry_after = None;
        d
    }

    /// Gives the booked units back ([`Limiter::refund`]): a later request can
    /// use them. Reservations booked after this one keep their instants.
    /// Nothing to do for a refusal.
    ///
    /// # Errors
    /// As [`Limiter::refund`].
    pub async fn cancel(self) -> Result<Option<Decision>> {
        if !self.decision.allowed {
            return Ok(None);
        }
        self.limiter.refund(&self.key, self.cost).await.map(Some)
    }
}
