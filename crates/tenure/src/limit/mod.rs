//! Rate limiters: GCRA, token bucket, sliding log, sliding window counter and
//! fixed window behind one API.
//!
//! A [`Limiter`] checks a key against one or more [`Policy`]s (a [`Quota`]
//! counted by an [`Algorithm`]) and answers with a [`Decision`]: allowed,
//! limit, remaining, reset-after, retry-after. Being refused is a decision, not
//! an error; [`Error`](crate::Error) is for bad input (zero rate or window,
//! zero cost, [a cost over the capacity](crate::Error::CostExceedsCapacity)),
//! bad stored data and store failures.
//!
//! Each algorithm is a pure function `(state, now, policy, cost, mode) →
//! (decision, next state)` ([`gcra::step`], [`token_bucket::step`],
//! [`sliding_log::step`], [`sliding_window::step`], [`fixed_window::step`],
//! and [`store::apply`] for several policies at once). The in-process store
//! ([`MemoryLimits`](crate::memory::MemoryLimits)) runs them under a mutex and
//! the SQLite store in a transaction, both through one loop
//! ([`store::read_step_write`]); the Redis store runs the same
//! arithmetic as one Lua script on the server's clock (`TIME`), never the
//! client's. A differential test feeds both the same sequences and compares
//! every decision. All times are integer microseconds, exact in Lua's doubles.
//!
//! # Choosing an algorithm
//!
//! See `docs/limiters.md` for the long form and the README for measured Redis
//! memory per key.
//!
//! - [`gcra`] — the default. One integer per key; smooth rate, bursts up to
//!   the burst size. Not a per-window count.
//! - [`token_bucket`] — admits exactly what GCRA admits; state reads as
//!   "tokens left". Two integers.
//! - [`sliding_log`] — exact: never more than `limit` in any window of length
//!   `period`. One entry per unit: only for small limits.
//! - [`sliding_window`] — approximate sliding window with three integers.
//! - [`fixed_window`] — calendar quotas (per day from 00:00 UTC). Admits up to
//!   2 × limit across a window boundary.
//!
//! # Compound policies
//!
//! [`Limiter::and`] adds policies ("10 per second and 1000 per day"). All are
//! checked and committed in one step (one Lua script on Redis, whose keys share
//! one hash tag): when any refuses, nothing is consumed.
//!
//! # Layout
//!
//! The top level is the user API ([`Limiter`], [`Quota`], [`Algorithm`],
//! [`Policy`], [`Decision`]) and one public module per algorithm with its pure
//! step function. What only a store implementer needs — the
//! [`LimitStore`](store::LimitStore) trait, [`LimitRequest`](store::LimitRequest), per-key [`State`](store::State),
//! [`apply`](store::apply) and the shared read/step/write loop — is in
//! [`store`]. Nothing here imports from a store: stores import from here.

mod blocked;
mod decision;
pub mod fixed_window;
pub mod gcra;
mod limiter;
mod policy;
mod quota;
mod reservation;
mod shadow;
pub mod sliding_log;
pub mod sliding_window;
mod step;
pub mod store;
pub mod token_bucket;

pub use decision::{Decision, Mode, Timestamp};
pub use limiter::Limiter;
pub(crate) use policy::PolicyTag;
pub use policy::{MAX_LOG_CAPACITY, MAX_ROUNDING_PERCENT, MAX_SPAN, Policy};
pub use quota::{Algorithm, Quota};
pub use reservation::Reservation;
