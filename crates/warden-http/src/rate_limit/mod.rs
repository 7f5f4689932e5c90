//! The rate-limit middleware, in tower's shape: [`RateLimitLayer`]
//! (configuration) wraps a service in [`RateLimit`], whose calls return a
//! [`ResponseFuture`] with a [`RateLimitBody`].
//!
//! Imports go one way, top to bottom:
//!
//! - `layer.rs`: the builder; freezes its knobs into the shared `Settings`;
//! - `service.rs`: finds the request's key, starts the check;
//! - `future.rs`: waits for the check within the budget, calls the inner service;
//! - `respond.rs`: pure — which step or response a limiter's answer gives
//!   (status, rate-limit headers, problem body);
//! - `config.rs`: [`FailurePolicy`], [`MissingKey`], [`DEFAULT_BUDGET`] and the
//!   shared settings; `body.rs`: the response body. Both import no sibling.

mod body;
mod config;
mod future;
mod layer;
mod respond;
mod service;

pub use body::RateLimitBody;
pub use config::{DEFAULT_BUDGET, FailurePolicy, MissingKey};
pub use future::ResponseFuture;
pub use layer::RateLimitLayer;
pub use service::RateLimit;
