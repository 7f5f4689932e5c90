//! The rate-limit middleware: [`RateLimitLayer`] (configuration) wraps a
//! service in [`RateLimit`], whose calls return a [`ResponseFuture`] with a
//! [`RateLimitBody`].

mod body;
mod future;
mod layer;
mod service;

pub use body::RateLimitBody;
pub use future::ResponseFuture;
pub use layer::{DEFAULT_BUDGET, FailurePolicy, MissingKey, RateLimitLayer};
pub use service::RateLimit;
