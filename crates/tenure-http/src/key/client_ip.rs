//! [`ClientIp`]: the client behind trusted reverse proxies, read right to left
//! from one forwarding header (parsed in [`forwarded`](super::forwarded)).

use std::fmt::Write as _;
use std::net::IpAddr;

use super::forwarded::{Hop, forwarded_rev, x_forwarded_for_rev};
use super::{Key, KeyExtractor, RequestHead, TrustedProxies};

/// Which forwarding header the trusted proxies write.
///
/// Exactly one is read: a proxy that appends to `X-Forwarded-For` passes a
/// client's own `Forwarded` header through untouched, so reading both would let
/// the client choose its bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ForwardedHeader {
    /// `X-Forwarded-For: client, proxy1, proxy2` (the default).
    #[default]
    XForwardedFor,
    /// `Forwarded: for=client, for=proxy1` (RFC 7239).
    Forwarded,
}

/// Keys requests by the client's address, seen through trusted proxies:
/// `ip:203.0.113.7`.
///
/// When the peer is a trusted proxy, the forwarding header is read **right to
/// left**, skipping addresses that are themselves trusted; the first untrusted
/// address is the client. Entries left of it were written by the client and are
/// ignored, so a forged header cannot select another bucket. When the peer is not
/// trusted, headers are ignored and the peer is the client. When every hop is
/// trusted, the leftmost one is the client; when the header is absent, the peer
/// is. An entry that is not an address (`unknown`, garbage) where the client
/// should be gives no key at all (see [`MissingKey`](crate::MissingKey)).
///
/// ```
/// use tenure_http::{ClientIp, KeyExtractor, PeerAddr, RequestHead};
///
/// let key = ClientIp::new("10.0.0.0/8".parse()?);
/// let mut req = http::Request::get("/")
///     .header("x-forwarded-for", "6.6.6.6, 203.0.113.7, 10.0.0.2") // 6.6.6.6 is forged
///     .body(()).unwrap();
/// req.extensions_mut().insert(PeerAddr("10.0.0.1:5000".parse().unwrap()));
/// assert_eq!(key.extract(&RequestHead::new(&req)).as_deref(), Some("ip:203.0.113.7"));
///
/// // The same header from an untrusted peer changes nothing.
/// req.extensions_mut().insert(PeerAddr("198.51.100.9:5000".parse().unwrap()));
/// assert_eq!(key.extract(&RequestHead::new(&req)).as_deref(), Some("ip:198.51.100.9"));
/// # Ok::<(), tenure_http::InvalidCidr>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct ClientIp {
    trusted: TrustedProxies,
    header: ForwardedHeader,
    ipv6_prefix: Option<u8>,
}

impl ClientIp {
    /// Trusts forwarding headers from peers in `trusted`, reading
    /// `X-Forwarded-For`.
    pub fn new(trusted: TrustedProxies) -> Self {
        ClientIp {
            trusted,
            header: ForwardedHeader::default(),
            ipv6_prefix: None,
        }
    }

    /// Reads this header instead of `X-Forwarded-For`.
    #[must_use]
    pub fn header(mut self, header: ForwardedHeader) -> Self {
        self.header = header;
        self
    }

    /// Counts IPv6 clients per network of this prefix length (e.g. 64), since
    /// one subscriber usually holds a whole /64. Values above 128 are clamped.
    #[must_use]
    pub fn ipv6_prefix(mut self, len: u8) -> Self {
        self.ipv6_prefix = Some(len.min(128));
        self
    }

    /// The client's address, or `None` (no peer address, or garbage where the
    /// client's address should be).
    pub fn client_ip(&self, head: &RequestHead<'_>) -> Option<IpAddr> {
        let peer = head.peer_ip()?;
        if !self.trusted.contains(peer) {
            return Some(peer);
        }
        // Several header lines form one list, in order (RFC 9110 §5.3): a
        // proxy may append its entry to the last line or add a line of its
        // own, so the lines are read last to first. Each line is parsed on its
        // own, as bytes, hop by hop, so nothing a client writes on its line (an
        // open quote, a non-ASCII byte) can reach into the hops the proxies
        // wrote to its right.
        match self.header {
            ForwardedHeader::XForwardedFor => {
                let lines = head.headers.get_all("x-forwarded-for").iter().rev();
                self.client(peer, lines.flat_map(|v| x_forwarded_for_rev(v.as_bytes())))
            }
            ForwardedHeader::Forwarded => {
                let lines = head.headers.get_all("forwarded").iter().rev();
                self.client(peer, lines.flat_map(|v| forwarded_rev(v.as_bytes())))
            }
        }
    }

    /// The first untrusted hop, from `hops` given right to left; hops after it
    /// (the client's own) are never parsed. All trusted: the leftmost, or the
    /// peer when there are none.
    fn client(&self, peer: IpAddr, hops: impl Iterator<Item = Hop>) -> Option<IpAddr> {
        let mut client = peer;
        for hop in hops {
            match hop {
                Hop::Ip(ip) if self.trusted.contains(ip) => client = ip,
                Hop::Ip(ip) => return Some(ip),
                Hop::Opaque => return None,
            }
        }
        Some(client)
    }
}

impl KeyExtractor for ClientIp {
    fn extract(&self, head: &RequestHead<'_>) -> Option<String> {
        self.key(head).map(String::from)
    }

    fn key(&self, head: &RequestHead<'_>) -> Option<Key> {
        let ip = self.client_ip(head)?;
        match (ip, self.ipv6_prefix) {
            (IpAddr::V6(v6), Some(len)) => {
                let net = ipnet::Ipv6Net::new(v6, len).ok()?.trunc();
                let mut key = Key::from("ip:");
                let _ = write!(key, "{net}");
                Some(key)
            }
            _ => Some(super::peer::ip_key(ip)),
        }
    }
}

#[cfg(test)]
mod tests {
    use http::Request;

    use super::*;
    use crate::key::test_support::{key, req, trusted};
    use crate::key::{PeerAddr, PeerIp};

    #[test]
    fn untrusted_peer_ignores_forwarding_headers() {
        let e = ClientIp::new(trusted("10.0.0.0/8"));
        let r = req(
            "192.0.2.5:1",
            &[
                ("x-forwarded-for", b"1.1.1.1"),
                ("forwarded", b"for=2.2.2.2"),
            ],
        );
        assert_eq!(key(&e, &r).as_deref(), Some("ip:192.0.2.5"));
        let none = ClientIp::new(TrustedProxies::none());
        let r = req("127.0.0.1:1", &[("x-forwarded-for", b"1.1.1.1")]);
        assert_eq!(key(&none, &r).as_deref(), Some("ip:127.0.0.1"));
    }

    #[test]
    fn reads_right_to_left_across_header_lines() {
        let e = ClientIp::new(trusted("10.0.0.0/8"));
        let r = req(
            "10.0.0.1:1",
            &[
                ("x-forwarded-for", b"9.9.9.9, 198.51.100.4"),
                ("x-forwarded-for", b"10.0.0.3, 10.0.0.2"),
            ],
        );
        assert_eq!(key(&e, &r).as_deref(), Some("ip:198.51.100.4"));
    }

    #[test]
    fn all_trusted_hops_give_the_leftmost_and_no_header_gives_the_peer() {
        let e = ClientIp::new(trusted("10.0.0.0/8"));
        let r = req("10.0.0.1:1", &[("x-forwarded-for", b"10.0.0.9, 10.0.0.2")]);
        assert_eq!(key(&e, &r).as_deref(), Some("ip:10.0.0.9"));
        let r = req("10.0.0.1:1", &[]);
        assert_eq!(key(&e, &r).as_deref(), Some("ip:10.0.0.1"));
    }

    #[test]
    fn garbage_where_the_client_should_be_is_no_key() {
        let e = ClientIp::new(trusted("10.0.0.0/8"));
        for bad in [&b"nonsense"[..], b"1.2.3.4, unknown", b"\xff\xfe", b""] {
            let r = req("10.0.0.1:1", &[("x-forwarded-for", bad)]);
            assert_eq!(key(&e, &r), None, "{bad:?}");
        }
        // Garbage left of the client is the client's own business.
        let r = req("10.0.0.1:1", &[("x-forwarded-for", b"junk, 203.0.113.1")]);
        assert_eq!(key(&e, &r).as_deref(), Some("ip:203.0.113.1"));
    }

    #[test]
    fn forwarded_header_when_configured_and_only_then() {
        let e = ClientIp::new(trusted("10.0.0.0/8")).header(ForwardedHeader::Forwarded);
        let r = req(
            "10.0.0.1:1",
            &[
                (
                    "forwarded",
                    br#"for=6.6.6.6, for="[2001:db8::7]:99";proto=https"#,
                ),
                ("x-forwarded-for", b"5.5.5.5"),
            ],
        );
        assert_eq!(key(&e, &r).as_deref(), Some("ip:2001:db8::7"));
        let xff = ClientIp::new(trusted("10.0.0.0/8"));
        assert_eq!(key(&xff, &r).as_deref(), Some("ip:5.5.5.5"));
    }

    #[test]
    fn an_unclosed_quote_cannot_swallow_the_proxy_s_entry() {
        // The client ends its own element inside a quoted string; the trusted
        // proxy appends its entry to the same line, or adds a line. Either way
        // the proxy's entry is found and the client's element is opaque.
        let e = ClientIp::new(trusted("10.0.0.0/8")).header(ForwardedHeader::Forwarded);
        for forged in [
            &br#"for=6.6.6.6;x=""#[..],
            br#"for="6.6.6.6"#,
            br#"for=6.6.6.6;x="\"#,
            br#"for=6.6.6.6;x="\\\""#,
            br#"for=6.6.6.6, by=";for=7.7.7.7"#,
        ] {
            let mut appended = forged.to_vec();
            appended.extend_from_slice(b", for=198.51.100.7");
            let r = req("10.0.0.1:1", &[("forwarded", &appended)]);
            assert_eq!(
                key(&e, &r).as_deref(),
                Some("ip:198.51.100.7"),
                "{}",
                String::from_utf8_lossy(&appended)
            );
            // Behind two proxies, the inner one's entry is skipped as trusted.
            appended.extend_from_slice(br#", for="10.0.0.2:80";proto=https"#);
            let r = req("10.0.0.1:1", &[("forwarded", &appended)]);
            assert_eq!(key(&e, &r).as_deref(), Some("ip:198.51.100.7"));
            // The proxy adds a header line of its own.
            let r = req(
                "10.0.0.1:1",
                &[("forwarded", forged), ("forwarded", b"for=198.51.100.7")],
            );
            assert_eq!(key(&e, &r).as_deref(), Some("ip:198.51.100.7"));
        }
        // Where the client's own element is the one to use (every hop right of
        // it trusted), an unclosed quote makes it no key, not another key.
        let r = req(
            "10.0.0.1:1",
            &[("forwarded", br#"for=6.6.6.6;x=", for=10.0.0.2"#)],
        );
        assert_eq!(key(&e, &r), None);
    }

    #[test]
    fn a_non_ascii_hop_is_opaque_and_the_others_still_parse() {
        let e = ClientIp::new(trusted("10.0.0.0/8"));
        for value in [
            &b"\xc3\xa9t\xc3\xa9, 203.0.113.7"[..],
            b"\xff, 203.0.113.7, 10.0.0.2",
            b"1.1.1.1 \xfe, 203.0.113.7",
        ] {
            let r = req("10.0.0.1:1", &[("x-forwarded-for", value)]);
            assert_eq!(key(&e, &r).as_deref(), Some("ip:203.0.113.7"), "{value:?}");
        }
        let r = req("10.0.0.1:1", &[("x-forwarded-for", b"203.0.113.7, \xff")]);
        assert_eq!(key(&e, &r), None, "garbage where the client should be");
        let r = req(
            "10.0.0.1:1",
            &[
                ("x-forwarded-for", b"\xff"),
                ("x-forwarded-for", b"203.0.113.7"),
            ],
        );
        assert_eq!(key(&e, &r).as_deref(), Some("ip:203.0.113.7"));

        let e = e.header(ForwardedHeader::Forwarded);
        for value in [
            &b"for=\xc3\xa9, for=203.0.113.7"[..],
            b"for=\"\xff\";by=x, for=203.0.113.7;proto=http",
            b"by=\"caf\xc3\xa9, x\";for=1.1.1.1, for=\"203.0.113.7:8080\"",
        ] {
            let r = req("10.0.0.1:1", &[("forwarded", value)]);
            assert_eq!(key(&e, &r).as_deref(), Some("ip:203.0.113.7"), "{value:?}");
        }
        let r = req("10.0.0.1:1", &[("forwarded", b"for=203.0.113.7;by=\xff")]);
        assert_eq!(key(&e, &r), None, "the client's own element is garbage");
    }

    #[test]
    fn ipv6_prefix_groups_a_subscriber() {
        let e = ClientIp::new(TrustedProxies::none()).ipv6_prefix(64);
        let r = req("[2001:db8:1:2:3:4:5:6]:80", &[]);
        assert_eq!(key(&e, &r).as_deref(), Some("ip:2001:db8:1:2::/64"));
        let r = req("192.0.2.1:80", &[]);
        assert_eq!(key(&e, &r).as_deref(), Some("ip:192.0.2.1"));
    }

    #[test]
    fn no_peer_address_is_no_key() {
        let r = Request::new(());
        assert_eq!(key(&PeerIp, &r), None);
        assert_eq!(key(&ClientIp::default(), &r), None);
    }

    #[test]
    fn any_header_bytes_give_the_peer_a_listed_address_or_no_key() {
        // A small deterministic generator (xorshift) over the characters that
        // matter to the parsers: no panic, and the answer is always the peer,
        // an address from the header, or nothing.
        let alphabet = b"0123456789abcdef.:[]\", ;=_\\forFOR\xff";
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let trusted = trusted("10.0.0.0/8, 0.0.0.0/1");
        let extractors = [
            ClientIp::new(trusted.clone()),
            ClientIp::new(trusted).header(ForwardedHeader::Forwarded),
        ];
        for _ in 0..5_000 {
            let len = usize::try_from(next() % 40).expect("small");
            let value: Vec<u8> = (0..len)
                .map(|_| alphabet[usize::try_from(next()).expect("64-bit") % alphabet.len()])
                .collect();
            let Ok(header) = http::HeaderValue::from_bytes(&value) else {
                continue;
            };
            for (e, name) in extractors.iter().zip(["x-forwarded-for", "forwarded"]) {
                let mut r = Request::new(());
                r.headers_mut().insert(name, header.clone());
                r.extensions_mut()
                    .insert(PeerAddr("10.0.0.1:1".parse().expect("peer")));
                if let Some(ip) = e.client_ip(&RequestHead::new(&r)) {
                    let text = String::from_utf8_lossy(&value).to_lowercase();
                    let v4_mapped = format!("::ffff:{ip}");
                    assert!(
                        ip.to_string() == "10.0.0.1"
                            || text.contains(&ip.to_string())
                            || text.contains(&v4_mapped)
                            || ip.is_ipv6(), // compressed forms may be written differently
                        "{ip} from {text:?}"
                    );
                }
            }
        }
    }
}
