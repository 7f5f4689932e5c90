//! [`PeerIp`]: one bucket per TCP peer address.

use std::fmt::Write as _;
use std::net::{IpAddr, Ipv6Addr};

use super::{Key, KeyExtractor, RequestHead};

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
        self.key(head).map(String::from)
    }

    fn key(&self, head: &RequestHead<'_>) -> Option<Key> {
        // One return of one local, written through `&mut`: the key is not
        // built in a temporary of its own and moved in.
        let mut key = None;
        if let Some(ip) = head.peer_ip() {
            push_ip(key.insert(Key::default()), ip);
        }
        key
    }
}

/// `ip:ADDRESS`, the key of a client address, inline.
pub(super) fn ip_key(ip: IpAddr) -> Key {
    let mut key = Key::default();
    push_ip(&mut key, ip);
    key
}

/// Appends `ip:ADDRESS` to an empty key; an IPv4 address is written without
/// the formatting machinery (this runs on every request).
// Always inlined, with the address lookup before it: the extractor then
// makes no calls of its own and writes the key where it returns it.
#[inline(always)]
fn push_ip(key: &mut Key, ip: IpAddr) {
    match ip {
        IpAddr::V4(v4) => key.push_ipv4(v4.octets()),
        IpAddr::V6(v6) => push_ipv6(key, v6),
    }
}

/// `ip:ADDRESS` of an IPv6 address, through the formatting machinery (out
/// of line: the IPv4 path inlined into its callers stays short).
#[inline(never)]
fn push_ipv6(key: &mut Key, v6: Ipv6Addr) {
    let _ = write!(key, "ip:{v6}");
}

#[cfg(test)]
mod ip_key_tests {
    use super::*;

    #[test]
    fn keys_read_like_the_displayed_address() {
        for ip in [
            "0.0.0.0",
            "192.0.2.7",
            "10.20.100.255",
            "2001:db8::1",
            "::ffff:1.2.3.4",
        ] {
            let ip: IpAddr = ip.parse().unwrap();
            assert_eq!(ip_key(ip).as_str(), format!("ip:{ip}"));
        }
        for octet in 0..=255u8 {
            let ip = IpAddr::from([octet, 255 - octet, octet / 7, 9]);
            assert_eq!(ip_key(ip).as_str(), format!("ip:{ip}"));
        }
    }
}
