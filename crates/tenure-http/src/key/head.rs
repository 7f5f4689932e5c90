//! [`RequestHead`]: what an extractor may read of a request, and [`PeerAddr`],
//! the TCP peer's address it finds among the extensions.

use std::net::{IpAddr, SocketAddr};

use http::{Extensions, HeaderMap, Method, Request, Uri};

/// The address of the TCP peer, as a request extension.
///
/// Servers built on hyper insert it per connection; under axum,
/// `into_make_service_with_connect_info::<SocketAddr>()` is read as well.
///
/// ```
/// let mut req = http::Request::new(());
/// req.extensions_mut().insert(tenure_http::PeerAddr("192.0.2.1:4000".parse().unwrap()));
/// let head = tenure_http::RequestHead::new(&req);
/// assert_eq!(head.peer_ip(), Some("192.0.2.1".parse().unwrap()));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerAddr(pub SocketAddr);

/// The parts of a request a [`KeyExtractor`](super::KeyExtractor) may look at (everything but the
/// body, which the middleware never reads).
#[derive(Debug, Clone, Copy)]
pub struct RequestHead<'a> {
    /// The method.
    pub method: &'a Method,
    /// The request target.
    pub uri: &'a Uri,
    /// The header fields.
    pub headers: &'a HeaderMap,
    /// The extensions, e.g. [`PeerAddr`].
    pub extensions: &'a Extensions,
}

impl<'a> RequestHead<'a> {
    /// Borrows the head of any request.
    pub fn new<B>(req: &'a Request<B>) -> Self {
        RequestHead {
            method: req.method(),
            uri: req.uri(),
            headers: req.headers(),
            extensions: req.extensions(),
        }
    }

    /// The TCP peer's IP address (IPv4-mapped IPv6 folded to IPv4), if the
    /// server recorded it.
    #[inline(always)]
    pub fn peer_ip(&self) -> Option<IpAddr> {
        if let Some(PeerAddr(addr)) = self.extensions.get::<PeerAddr>() {
            return Some(addr.ip().to_canonical());
        }
        #[cfg(feature = "axum")]
        if let Some(info) = self
            .extensions
            .get::<axum::extract::ConnectInfo<SocketAddr>>()
        {
            return Some(info.0.ip().to_canonical());
        }
        None
    }
}
