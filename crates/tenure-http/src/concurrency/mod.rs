//! The in-flight (concurrency) limit, in tower's shape: [`ConcurrencyLimitLayer`]
//! (configuration) wraps a service in [`ConcurrencyLimit`], whose calls
//! return a [`ConcurrencyFuture`] with a [`ConcurrencyBody`].
//!
//! At most N requests of one key are in flight at once, across every
//! process that shares the store: each request holds a permit of tenure's
//! expiring [`Semaphore`](tenure::semaphore::Semaphore) on the key from
//! before the inner service is called until its response body has been
//! sent (or dropped). A request that finds no permit within the wait
//! budget gets `429` with a problem body. The companion of rate limits:
//! those bound how often, this how many at once.
//!
//! - `layer.rs`: the builder; freezes its knobs into the shared settings;
//! - `service.rs`: finds the request's key, starts waiting for a permit;
//! - `future.rs`: waits for the permit, calls the inner service, hands the
//!   permit to the body;
//! - `body.rs`: the response body that holds the permit.

mod body;
mod future;
mod layer;
mod service;

pub use body::ConcurrencyBody;
pub use future::ConcurrencyFuture;
pub use layer::{ConcurrencyLimitLayer, DEFAULT_TTL, DEFAULT_WAIT};
pub use service::ConcurrencyLimit;
