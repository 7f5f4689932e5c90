//! The trait a limit store implements.

use std::fmt::Debug;

use async_trait::async_trait;

use super::decision::{Decision, Mode, Timestamp};
use super::policy::Policy;
use crate::error::Result;

/// One request to a limit store: take (or look at) `cost` units of `key` under
/// every policy, atomically.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct LimitRequest<'a> {
    /// The user key (already validated).
    pub key: &'a str,
    /// The policies, at least one, distinct, each with a capacity ≥ `cost`.
    pub policies: &'a [Policy],
    /// Units to take, ≥ 1.
    pub cost: u32,
    /// Consume or peek.
    pub mode: Mode,
    /// The instant to decide at instead of the store's clock. For tests and
    /// simulations only: a Redis store then keeps keys at least a minute, since
    /// their TTLs no longer relate to the server's clock.
    pub now: Option<Timestamp>,
}

impl<'a> LimitRequest<'a> {
    /// A request at the store's clock.
    pub fn new(key: &'a str, policies: &'a [Policy], cost: u32, mode: Mode) -> Self {
        LimitRequest {
            key,
            policies,
            cost,
            mode,
            now: None,
        }
    }

    /// Decides at `now` instead of the store's clock (tests, simulations).
    #[must_use]
    pub fn at(mut self, now: Option<Timestamp>) -> Self {
        self.now = now;
        self
    }
}

/// A store of limiter state. Implementations run [`apply`](super::apply) (or, for
/// Redis, the same logic in Lua) atomically over the request's policies.
///
/// They must return [`Error`](crate::Error) only for infrastructure failures and
/// bad stored data ([`Error::WrongType`](crate::Error::WrongType)); a refusal is a
/// [`Decision`] with `allowed == false`.
#[async_trait]
pub trait LimitStore: Debug + Send + Sync + 'static {
    /// Applies `request`, returning one decision per policy, in order.
    async fn apply(&self, request: &LimitRequest<'_>) -> Result<Vec<Decision>>;

    /// The store's clock now: the instant a request without an injected `now`
    /// would be decided at.
    async fn now(&self) -> Result<Timestamp>;

    /// A short description for error messages and logs.
    fn describe(&self) -> String;
}
