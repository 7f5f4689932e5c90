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

#[cfg(test)]
mod tests {
    /// The sibling modules a file of this folder imports (`super::name`).
    fn siblings(source: &str) -> Vec<&str> {
        let mut found: Vec<&str> = source
            .match_indices("super::")
            .filter_map(|(at, _)| {
                let rest = &source[at + "super::".len()..];
                let end = rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))?;
                let name = &rest[..end];
                // Lower-case names are modules; `super::Type` is a re-export.
                name.starts_with(|c: char| c.is_ascii_lowercase())
                    .then_some(name)
            })
            .collect();
        found.sort_unstable();
        found.dedup();
        found
    }

    #[test]
    fn imports_go_one_way_layer_service_future() {
        let layer = siblings(include_str!("layer.rs"));
        let service = siblings(include_str!("service.rs"));
        let future = siblings(include_str!("future.rs"));
        let respond = siblings(include_str!("respond.rs"));
        assert_eq!(layer, ["config", "service"]);
        assert_eq!(service, ["body", "config", "future", "respond"]);
        assert_eq!(future, ["body", "config", "respond"]);
        assert_eq!(respond, ["config"]);
        assert!(siblings(include_str!("config.rs")).is_empty());
        assert!(siblings(include_str!("body.rs")).is_empty());
    }
}
