//! # tenure-http — rate limits for tower and axum
//!
//! [`RateLimitLayer`] puts any [`RateLimiter`] — tenure's `Limiter` on Redis,
//! SQLite or in-process memory, or your own — in front of a tower service or an
//! axum router:
//!
//! - **one bucket per key** from a [`KeyExtractor`]: the peer address
//!   ([`PeerIp`]), the client behind trusted proxies ([`ClientIp`], reading
//!   `X-Forwarded-For` or `Forwarded` right to left, only from peers in the
//!   configured CIDR ranges), a header such as an API key ([`HeaderKey`]), or a
//!   closure; a request without a key is refused (`400`) or counted in a shared
//!   bucket ([`MissingKey`]) — never let through unlimited;
//! - **headers** on every decided response: `RateLimit-Policy: "default";q=60;w=60`
//!   and `RateLimit: "default";r=12;t=41` (draft-ietf-httpapi-ratelimit-headers-11);
//!   the legacy `X-RateLimit-Limit`, `-Remaining`, `-Reset` (Unix seconds) on
//!   request ([`RateLimitLayer::legacy_headers`]); none at all with
//!   [`RateLimitLayer::headers`]`(false)`;
//! - **refusals** are `429 Too Many Requests` with `Retry-After` (seconds) and an
//!   `application/problem+json` body;
//! - **failures** of the store are answered within a per-decision time budget,
//!   by failing open or closed (`503`) as configured ([`FailurePolicy`]).
//!
//! Beside it: a dry run ([`RateLimitLayer::shadow`]), allow and deny lists
//! ([`AccessList`]), costs settled after the response
//! ([`RateLimitLayer::cost_after`]), and an in-flight limit per key on
//! tenure's semaphores ([`ConcurrencyLimitLayer`]).
//!
//! What it does not guarantee: it is no flood shield (a refused request still
//! costs a parse, and a store round trip unless the limiter caches blocked
//! keys); per IP is not per person; the trusted ranges must be exactly your
//! proxies; fail open is unlimited while the store is down; the
//! [budget](RateLimitLayer::budget) bounds latency, not accounting; requests
//! are counted before the handler runs, and a cost settled after the response
//! is not atomic with the check; `Retry-After` is advice.
//!
//! The crate's shape: [`rate_limit`] is the middleware in tower's layout (layer,
//! service, future, and the pure decision-to-response functions); [`key`] holds
//! one extractor per file; [`limiter`] is the question the middleware asks
//! ([`RateLimiter`]) and its answer (tenure's [`Decision`]); [`headers`] and
//! [`problem`] format what goes on the wire.
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use std::{net::SocketAddr, num::NonZeroU32, time::Duration};
//! use axum::{Router, routing::get};
//! use tenure::limit::{Algorithm, Quota};
//! use tenure_http::{ClientIp, FailurePolicy, RateLimitLayer};
//!
//! let tenure = tenure::Coordinator::connect("redis://127.0.0.1:6379").await?;
//! let per_minute = Quota::per_minute(NonZeroU32::new(60).ok_or("zero")?);
//! let limiter = tenure.limiter(per_minute, Algorithm::SlidingLog);
//! let clients = ClientIp::new("10.0.0.0/8".parse()?); // X-Forwarded-For only from these
//! let app = Router::new().route("/", get(|| async { "hello" })).layer(
//!     RateLimitLayer::new(limiter, clients)
//!         .budget(Duration::from_millis(100)) // never wait longer on Redis
//!         .on_store_failure(FailurePolicy::Closed), // 503 while it is down
//! );
//! let listener = tokio::net::TcpListener::bind("0.0.0.0:8080").await?;
//! axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await?;
//! # Ok(()) }
//! ```
//!
//! Serve with `into_make_service_with_connect_info::<SocketAddr>()` (or insert a
//! [`PeerAddr`] extension yourself): without a peer address, IP extractors find
//! no key and requests get `400` (or the [`MissingKey::Bucket`] you configured).

#![forbid(unsafe_code)]
// The public surface stays honest: nothing `pub` that a user cannot reach, no
// type in a public signature that a user cannot name, and `Debug` on every
// public type. Here rather than in Cargo.toml's `[lints]`: that table already
// takes the workspace's lints (`workspace = true`), which Cargo does not let a
// crate extend, and these lints are about a library's surface, not the binaries'.
#![warn(unreachable_pub, unnameable_types, missing_debug_implementations)]
// docs.rs builds with `--cfg docsrs` on nightly: each item shows the feature it needs.
#![cfg_attr(docsrs, feature(doc_cfg))]

/// The README's example (the crate's page on crates.io), compiled as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

mod access;
pub mod concurrency;
pub mod headers;
pub mod key;
pub mod limiter;
mod problem;
pub mod rate_limit;
mod tenure_limiter;

pub use access::{Access, AccessList};
pub use concurrency::{
    ConcurrencyBody, ConcurrencyFuture, ConcurrencyLimit, ConcurrencyLimitLayer,
};
pub use headers::{InvalidPolicyName, PolicyName};
pub use key::{
    ClientIp, ForwardedHeader, HeaderKey, InvalidCidr, Key, KeyExtractor, PeerAddr, PeerIp,
    RequestHead, TrustedProxies,
};
pub use limiter::{BoxFuture, Decision, LimiterError, QuotaPolicy, RateLimiter};
pub use problem::{PROBLEM_JSON, problem};
pub use rate_limit::{
    DEFAULT_BUDGET, FailurePolicy, MissingKey, RateLimit, RateLimitBody, RateLimitLayer,
    ResponseFuture,
};
