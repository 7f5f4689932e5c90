//! [`PeerIp`]: one bucket per TCP peer address.

use super::{KeyExtractor, RequestHead};

/// Keys requests by the TCP peer's address: `ip:192.0.2.1`.
///
/// Behind a reverse proxy every request comes from the proxy; use [`ClientIp`](super::ClientIp).
///
/// ```
/// use tenure_http::{KeyExtractor, PeerAddr, PeerIp, RequestHead};
/// let mut req = http::Request::new(());
/// req.extensions_mut().insert(PeerAddr("[::ffff:192.0.2.1]:80".parse().unwrap()));
/// assert_eq!(PeerIp.extract(&RequestHead::new(&req)).as_deref(), Some("ip:192.0.2.1"));
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct PeerIp;

impl KeyExtractor for PeerIp {
    fn extract(&self, head: &RequestHead<'_>) -> Option<String> {
        head.peer_ip().map(|ip| format!("ip:{ip}"))
    }
}
