//! Parsing of `X-Forwarded-For` and `Forwarded` (RFC 7239) into hops, read
//! **right to left**, lazily: the caller stops at the client, so the hops a
//! client wrote left of it are never parsed, and nothing is allocated.
//!
//! Both parsers are total: any byte sequence gives hops, where a hop that is
//! not an IP address (garbage, `unknown`, an obfuscated `_node`, a non-ASCII
//! byte, an unclosed quoted string) is [`Hop::Opaque`]. The caller decides
//! what an opaque hop means.
//!
//! They work on bytes and hop by hop, so one bad hop never spoils the others:
//! a client's garbage stays in the client's own (leftmost) hops, and the hops a
//! trusted proxy appended to its right are always read as written.

use std::borrow::Cow;
use std::net::IpAddr;

/// One entry of a forwarding header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hop {
    /// An address, port removed, IPv4-mapped IPv6 folded to IPv4.
    Ip(IpAddr),
    /// Anything else.
    Opaque,
}

/// The hops of one `X-Forwarded-For` line, right to left: comma-separated
/// addresses, each optionally with a port (`192.0.2.1:1234`,
/// `[2001:db8::1]:80`).
pub(crate) fn x_forwarded_for_rev(value: &[u8]) -> impl Iterator<Item = Hop> + '_ {
    value
        .rsplit(|&b| b == b',')
        .map(|item| ascii(item).map_or(Hop::Opaque, |s| parse_node(s.trim())))
}

/// The hops of one `Forwarded` line, right to left: comma-separated elements
/// of `;`-separated `name=value` pairs; the `for` parameter of each element is
/// its hop. Quoted strings may contain `,` `;` and `\`-escapes.
///
/// Elements are split **right to left**. The right end of the line is what the
/// trusted proxies appended, and it is well-formed; the left end is the
/// client's. Splitting left to right would let a client open a quoted string
/// that never closes (`for=6.6.6.6;x="`) and so swallow the proxy's
/// `, for=<real address>` into its own element. From the right, the proxies'
/// elements are split before the client's bytes are looked at, whatever those
/// are; a quoted string still open at the start of the line makes the rest
/// one opaque hop.
pub(crate) fn forwarded_rev(value: &[u8]) -> impl Iterator<Item = Hop> + '_ {
    // The end of the elements not yet returned; `None` once the line is done.
    let mut end = Some(value.len());
    std::iter::from_fn(move || {
        let until = end?;
        let mut quoted = false;
        for i in (0..until).rev() {
            match value[i] {
                // Seen from the right, a quote closes the string unless an odd
                // run of backslashes escapes it (`\\"` is an escaped
                // backslash, then the quote).
                b'"' if quoted => quoted = is_escaped(value, i),
                b'"' => quoted = true,
                b',' if !quoted => {
                    end = Some(i);
                    return Some(parse_element(&value[i + 1..until]));
                }
                _ => {}
            }
        }
        end = None;
        Some(if quoted {
            Hop::Opaque
        } else {
            parse_element(&value[..until])
        })
    })
}

/// Whether the byte at `i` follows an odd number of backslashes.
fn is_escaped(value: &[u8], i: usize) -> bool {
    let run = value[..i].iter().rev().take_while(|&&b| b == b'\\').count();
    run % 2 == 1
}

/// The bytes as text if they are all ASCII (a hop with any other byte is
/// opaque: no address or parameter name contains one).
fn ascii(bytes: &[u8]) -> Option<&str> {
    if bytes.is_ascii() {
        std::str::from_utf8(bytes).ok()
    } else {
        None
    }
}

/// One `Forwarded` element: the address of its single `for` parameter.
fn parse_element(element: &[u8]) -> Hop {
    let Some(element) = ascii(element) else {
        return Hop::Opaque;
    };
    let mut hop = Hop::Opaque;
    let mut seen_for = false;
    let mut pair = |pair: &str| {
        let Some((name, raw)) = pair.split_once('=') else {
            return;
        };
        if !name.trim().eq_ignore_ascii_case("for") {
            return;
        }
        // Two `for` parameters in one element: ambiguous, trust neither.
        hop = if seen_for {
            Hop::Opaque
        } else {
            unquote(raw.trim()).map_or(Hop::Opaque, |v| parse_node(&v))
        };
        seen_for = true;
    };
    // Split at `;` outside quoted strings, left to right.
    let (mut start, mut quoted, mut escaped) = (0, false, false);
    for (i, b) in element.bytes().enumerate() {
        if escaped {
            escaped = false;
        } else if quoted && b == b'\\' {
            escaped = true;
        } else if b == b'"' {
            quoted = !quoted;
        } else if b == b';' && !quoted {
            pair(&element[start..i]);
            start = i + 1;
        }
    }
    // An element that ends inside a quoted string (or right after a `\` in
    // one) is malformed as a whole: its parameters cannot be told apart.
    if quoted {
        return Hop::Opaque;
    }
    pair(&element[start..]);
    hop
}

/// A token or a quoted string with its escapes resolved; `None` if malformed.
/// Borrowed unless an escape had to be resolved.
fn unquote(v: &str) -> Option<Cow<'_, str>> {
    let Some(inner) = v.strip_prefix('"') else {
        return (!v.contains('"')).then_some(Cow::Borrowed(v));
    };
    let inner = inner.strip_suffix('"')?;
    if !inner.contains(['\\', '"']) {
        return Some(Cow::Borrowed(inner));
    }
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => out.push(chars.next()?),
            '"' => return None,
            c => out.push(c),
        }
    }
    Some(Cow::Owned(out))
}

/// `192.0.2.1`, `192.0.2.1:80`, `2001:db8::1`, `[2001:db8::1]`, `[2001:db8::1]:80`.
fn parse_node(node: &str) -> Hop {
    let host = if let Some(rest) = node.strip_prefix('[') {
        match rest.split_once(']') {
            Some((host, tail))
                if tail.is_empty() || tail.strip_prefix(':').is_some_and(is_port) =>
            {
                host
            }
            _ => return Hop::Opaque,
        }
    } else if node.matches(':').count() == 1 {
        match node.split_once(':') {
            Some((host, port)) if is_port(port) => host,
            _ => return Hop::Opaque,
        }
    } else {
        node
    };
    host.parse::<IpAddr>()
        .map_or(Hop::Opaque, |ip| Hop::Ip(ip.to_canonical()))
}

/// One to five digits.
fn is_port(digits: &str) -> bool {
    !digits.is_empty() && digits.len() <= 5 && digits.bytes().all(|b| b.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> Hop {
        Hop::Ip(s.parse().expect("test address"))
    }

    /// The hops in header order (the parsers give them right to left).
    fn xff(v: impl AsRef<[u8]>) -> Vec<Hop> {
        let mut out: Vec<Hop> = x_forwarded_for_rev(v.as_ref()).collect();
        out.reverse();
        out
    }

    fn fwd(v: impl AsRef<[u8]>) -> Vec<Hop> {
        let mut out: Vec<Hop> = forwarded_rev(v.as_ref()).collect();
        out.reverse();
        out
    }

    #[test]
    fn x_forwarded_for_addresses_ports_and_garbage() {
        assert_eq!(
            xff("203.0.113.7, 10.0.0.1:8080 ,[2001:db8::1]:443, 2001:db8::2"),
            vec![
                ip("203.0.113.7"),
                ip("10.0.0.1"),
                ip("2001:db8::1"),
                ip("2001:db8::2")
            ]
        );
        assert_eq!(xff("unknown, , 1.2.3"), vec![Hop::Opaque; 3]);
        assert_eq!(xff("::ffff:192.0.2.9"), vec![ip("192.0.2.9")]);
        assert_eq!(xff("[2001:db8::1]x"), vec![Hop::Opaque]);
        assert_eq!(xff("1.2.3.4:99999999"), vec![Hop::Opaque]);
    }

    #[test]
    fn forwarded_elements_quotes_and_case() {
        assert_eq!(
            fwd(r#"for=192.0.2.60;proto=http;by=203.0.113.43, For="[2001:db8:cafe::17]:4711""#),
            vec![ip("192.0.2.60"), ip("2001:db8:cafe::17")]
        );
        assert_eq!(
            fwd(r#"for="_hidden", for=unknown, proto=https"#),
            vec![Hop::Opaque, Hop::Opaque, Hop::Opaque]
        );
        assert_eq!(fwd(r#"for="1.2.3.4"#), vec![Hop::Opaque]);
        // A comma inside a quoted string does not split elements.
        assert_eq!(
            fwd(r#"by="a,b";for=198.51.100.1"#),
            vec![ip("198.51.100.1")]
        );
        // Two `for` in one element: ambiguous.
        assert_eq!(fwd("for=1.1.1.1;for=2.2.2.2"), vec![Hop::Opaque]);
        assert_eq!(fwd(r#"for="1.2.3.4\"""#), vec![Hop::Opaque]);
    }

    #[test]
    fn forwarded_elements_split_from_the_right() {
        // An open quote in the client's element swallows nothing to its right.
        assert_eq!(
            fwd(r#"for=6.6.6.6;x=", for=1.2.3.4"#),
            vec![Hop::Opaque, ip("1.2.3.4")]
        );
        assert_eq!(
            fwd(r#"for="6.6.6.6\", for=1.2.3.4"#),
            vec![Hop::Opaque, ip("1.2.3.4")]
        );
        // Escaped quotes and backslashes in well-formed strings still pair.
        assert_eq!(
            fwd(r#"by="a\",b\\";for=1.1.1.1, for="2.2.2.2";by="\\\"""#),
            vec![ip("1.1.1.1"), ip("2.2.2.2")]
        );
        // An unclosed quote takes everything left of it (the client's side)
        // into one opaque hop, never anything right of it.
        assert_eq!(
            fwd(r#"for=1.1.1.1, for=2.2.2.2;x="y, for=3.3.3.3"#),
            vec![Hop::Opaque, ip("3.3.3.3")]
        );
        // Non-ASCII bytes make their hop opaque, and only that one.
        let out = fwd(b"for=1.1.1.1, for=\"\xff\", for=3.3.3.3");
        assert_eq!(out, vec![ip("1.1.1.1"), Hop::Opaque, ip("3.3.3.3")]);
        let out = xff(b"1.1.1.1,\xc3\xa9 ,3.3.3.3");
        assert_eq!(out, vec![ip("1.1.1.1"), Hop::Opaque, ip("3.3.3.3")]);
    }
}
