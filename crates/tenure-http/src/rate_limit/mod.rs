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

/// The `400` answer to a keyless request, for the other middlewares.
pub(crate) fn missing_key_problem() -> http::Response<bytes::Bytes> {
    respond::missing_key()
}

#[cfg(test)]
mod tests {
    /// This file: which siblings exist (`mod name;`) and which names they
    /// re-export (`pub use name::…;`), read from its unindented lines.
    const MOD_RS: &str = include_str!("mod.rs");

    /// The siblings a file of this folder uses, however it names them:
    /// `super::body`, `crate::rate_limit::body`, a group
    /// (`super::{body::X, config}`), or a name a sibling re-exports
    /// (`super::RateLimitBody`, `crate::RateLimitBody`). Comments are skipped
    /// (a doc link is not an import); globs are not followed.
    fn siblings(source: &str) -> Vec<&'static str> {
        let code: Vec<&str> = source
            .lines()
            .map(|line| line.split("//").next().unwrap_or(""))
            .collect();
        let code = code.join("\n");
        let mut found: Vec<&str> = ["super::", "rate_limit::", "crate::"]
            .into_iter()
            .flat_map(|prefix| {
                code.match_indices(prefix)
                    .flat_map(|(at, _)| items(&code[at + prefix.len()..]))
                    .filter_map(owner)
                    .collect::<Vec<_>>()
            })
            .collect();
        found.sort_unstable();
        found.dedup();
        found
    }

    /// What a path goes on with: one item, or each item of a `{…}` group.
    fn items(rest: &str) -> Vec<&str> {
        let Some(group) = rest.strip_prefix('{') else {
            return vec![rest];
        };
        let (mut depth, mut start, mut out) = (0, 0, Vec::new());
        for (i, c) in group.char_indices() {
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => {
                    out.push(&group[start..i]);
                    break;
                }
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    out.push(&group[start..i]);
                    start = i + 1;
                }
                _ => {}
            }
        }
        out
    }

    /// The sibling an item names: `body::X` is `body`; a re-exported name is
    /// the sibling it comes from.
    fn owner(item: &str) -> Option<&'static str> {
        let item = item.trim_start();
        let end = item
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(item.len());
        let name = &item[..end];
        MOD_RS.lines().find_map(|line| {
            if let Some(module) = line.strip_prefix("mod ").and_then(|m| m.strip_suffix(';')) {
                return (module == name).then_some(module);
            }
            let (module, names) = line.strip_prefix("pub use ")?.split_once("::")?;
            names
                .split(['{', '}', ',', ';', ' '])
                .any(|n| !name.is_empty() && n == name)
                .then_some(module)
        })
    }

    #[test]
    fn the_scan_sees_every_way_of_naming_a_sibling() {
        for (source, expected) in [
            ("use super::layer::RateLimitLayer;", &["layer"][..]),
            (
                "use super::{body::RateLimitBody, layer::{self, RateLimitLayer}};",
                &["body", "layer"],
            ),
            ("use crate::rate_limit::layer::RateLimitLayer;", &["layer"]),
            ("use super::RateLimitLayer;", &["layer"]),
            (
                "use crate::{FailurePolicy, RateLimitLayer};",
                &["config", "layer"],
            ),
            ("use super::*;\nuse crate::headers::HeaderStyle;", &[]),
            ("/// [`RateLimitLayer`](super::RateLimitLayer)", &[]),
        ] {
            assert_eq!(siblings(source), expected, "{source}");
        }
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
