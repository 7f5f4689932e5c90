//! Parsing of `X-Forwarded-For` and `Forwarded` (RFC 7239) into hop lists.
//!
//! Both parsers are total: any byte sequence gives a list of hops, where a hop
//! that is not an IP address (garbage, `unknown`, an obfuscated `_node`) is
//! [`Hop::Opaque`]. The caller decides what an opaque hop means.

use std::net::IpAddr;

/// One entry of a forwarding header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hop {
    /// An address, port removed, IPv4-mapped IPv6 folded to IPv4.
    Ip(IpAddr),
    /// Anything else.
    Opaque,
}

/// Parses one `X-Forwarded-For` value: comma-separated addresses, each
/// optionally with a port (`192.0.2.1:1234`, `[2001:db8::1]:80`).
pub(crate) fn parse_x_forwarded_for(value: &str, out: &mut Vec<Hop>) {
    for item in value.split(',') {
        out.push(parse_node(item.trim()));
    }
}

/// Parses one `Forwarded` value: comma-separated elements of `;`-separated
/// `name=value` pairs; the `for` parameter of each element is its hop.
/// Quoted strings may contain `,` `;` and `\`-escapes.
pub(crate) fn parse_forwarded(value: &str, out: &mut Vec<Hop>) {
    for element in split_outside_quotes(value, ',') {
        let mut hop = Hop::Opaque;
        let mut seen_for = false;
        for pair in split_outside_quotes(element, ';') {
            let Some((name, raw)) = pair.split_once('=') else {
                continue;
            };
            if !name.trim().eq_ignore_ascii_case("for") {
                continue;
            }
            // Two `for` parameters in one element: ambiguous, trust neither.
            hop = if seen_for {
                Hop::Opaque
            } else {
                unquote(raw.trim()).map_or(Hop::Opaque, |v| parse_node(&v))
            };
            seen_for = true;
        }
        out.push(hop);
    }
}

/// Splits at `sep` where it is not inside a quoted string.
fn split_outside_quotes(s: &str, sep: char) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut start, mut quoted, mut escaped) = (0, false, false);
    for (i, c) in s.char_indices() {
        if escaped {
            escaped = false;
        } else if quoted && c == '\\' {
            escaped = true;
        } else if c == '"' {
            quoted = !quoted;
        } else if c == sep && !quoted {
            parts.push(&s[start..i]);
            start = i + c.len_utf8();
        }
    }
    parts.push(&s[start..]);
    parts
}

/// A token or a quoted string with its escapes resolved; `None` if malformed.
fn unquote(v: &str) -> Option<String> {
    let Some(inner) = v.strip_prefix('"') else {
        return (!v.contains('"')).then(|| v.to_owned());
    };
    let inner = inner.strip_suffix('"')?;
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => out.push(chars.next()?),
            '"' => return None,
            c => out.push(c),
        }
    }
    Some(out)
}

/// `192.0.2.1`, `192.0.2.1:80`, `2001:db8::1`, `[2001:db8::1]`, `[2001:db8::1]:80`.
fn parse_node(node: &str) -> Hop {
    let host = if let Some(rest) = node.strip_prefix('[') {
        match rest.split_once(']') {
            Some((host, tail)) if tail.is_empty() || is_port(tail) => host,
            _ => return Hop::Opaque,
        }
    } else if node.matches(':').count() == 1 {
        match node.split_once(':') {
            Some((host, port)) if is_port(&format!(":{port}")) => host,
            _ => return Hop::Opaque,
        }
    } else {
        node
    };
    host.parse::<IpAddr>()
        .map_or(Hop::Opaque, |ip| Hop::Ip(ip.to_canonical()))
}

fn is_port(tail: &str) -> bool {
    tail.strip_prefix(':')
        .is_some_and(|p| !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> Hop {
        Hop::Ip(s.parse().expect("test address"))
    }

    fn xff(v: &str) -> Vec<Hop> {
        let mut out = Vec::new();
        parse_x_forwarded_for(v, &mut out);
        out
    }

    fn fwd(v: &str) -> Vec<Hop> {
        let mut out = Vec::new();
        parse_forwarded(v, &mut out);
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
            fwd(r#"for="_hidden", for=unknown, proto=https, for="1.2.3.4"#),
            vec![Hop::Opaque, Hop::Opaque, Hop::Opaque, Hop::Opaque]
        );
        // A comma inside a quoted string does not split elements.
        assert_eq!(
            fwd(r#"by="a,b";for=198.51.100.1"#),
            vec![ip("198.51.100.1")]
        );
        // Two `for` in one element: ambiguous.
        assert_eq!(fwd("for=1.1.1.1;for=2.2.2.2"), vec![Hop::Opaque]);
        assert_eq!(fwd(r#"for="1.2.3.4\"""#), vec![Hop::Opaque]);
    }
}
