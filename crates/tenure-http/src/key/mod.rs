//! Which bucket a request counts against.
//!
//! A [`KeyExtractor`] maps a request to a key, or to `None` when the request
//! carries none (the layer then refuses it with `400` or counts it in a default
//! bucket, as configured — never lets it through unlimited). Built-ins:
//!
//! - [`PeerIp`]: the address of the TCP peer;
//! - [`ClientIp`]: the client behind trusted reverse proxies, from
//!   `X-Forwarded-For` or `Forwarded`, read right to left;
//! - [`HeaderKey`]: a header value such as an API key;
//! - any closure `Fn(&RequestHead<'_>) -> Option<String>`.
//!
//! The peer address comes from a [`PeerAddr`] request extension, or from axum's
//! `ConnectInfo<SocketAddr>` (feature `axum`, on by default).
//!
//! One file per extractor: `peer.rs` ([`PeerIp`]), `client_ip.rs` ([`ClientIp`],
//! over `trusted.rs` for the proxy ranges and `forwarded.rs` for the header
//! parsers), `header.rs` ([`HeaderKey`]), `closure.rs` (closures); `head.rs`
//! holds what every extractor reads ([`RequestHead`], [`PeerAddr`]); `text.rs`
//! the [`Key`] the middleware carries (inline when short: IP keys allocate
//! nothing).

mod client_ip;
mod closure;
mod forwarded;
mod head;
mod header;
mod peer;
#[cfg(test)]
mod test_support;
mod text;
mod trusted;

pub use client_ip::{ClientIp, ForwardedHeader};
pub use head::{PeerAddr, RequestHead};
pub use header::{HeaderKey, MAX_HEADER_KEY_LEN};
pub use peer::PeerIp;
pub use text::Key;
pub use trusted::{InvalidCidr, TrustedProxies};

/// Maps a request to the key of its bucket.
///
/// ```
/// use tenure_http::{KeyExtractor, RequestHead};
///
/// // Any closure is an extractor: here, one bucket per tenant path segment.
/// let tenant = |head: &RequestHead<'_>| {
///     head.uri.path().split('/').nth(1).filter(|s| !s.is_empty()).map(|t| format!("tenant:{t}"))
/// };
/// let req = http::Request::get("/acme/orders").body(()).unwrap();
/// assert_eq!(tenant.extract(&RequestHead::new(&req)).as_deref(), Some("tenant:acme"));
/// ```
pub trait KeyExtractor: Send + Sync + 'static {
    /// The key, or `None` if the request carries none.
    fn extract(&self, head: &RequestHead<'_>) -> Option<String>;

    /// The same key as [`extract`](Self::extract), as the middleware asks for
    /// it on every request: a [`Key`], which keeps a short key inline. The
    /// default wraps `extract`'s `String`; the IP extractors write their keys
    /// inline and allocate nothing. An override must give the same text as
    /// `extract`.
    fn key(&self, head: &RequestHead<'_>) -> Option<Key> {
        self.extract(head).map(Key::from)
    }
}
