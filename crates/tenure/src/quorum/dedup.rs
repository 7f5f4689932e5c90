//! One server, one vote: the nodes of a quorum are compared by where their
//! URLs lead — the server's address and the database — not by how the URLs
//! are spelled (`127.0.0.1:P`, `localhost:P` and `127.0.0.1:P/0` are one
//! node).

use std::collections::HashSet;
use std::net::{IpAddr, SocketAddr};

use redis::{ConnectionAddr, IntoConnectionInfo};

use crate::error::{Error, Result};

/// Where one node URL leads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Target {
    /// The host as the URL names it, in a canonical spelling (lowercase, no
    /// trailing dot, IP literals normalised), with its port; or a socket path.
    place: String,
    /// Whether `place` is a `host:port` to resolve (a TCP node).
    tcp: bool,
    /// The database number.
    db: i64,
}

impl Target {
    /// Reads `url`; `None` when it does not parse (the node's own parser
    /// reports that).
    pub(super) fn of(url: &str) -> Option<Target> {
        let info = url.into_connection_info().ok()?;
        let db = info.redis_settings().db();
        let (place, tcp) = match info.addr() {
            ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
                let host = canonical_host(host);
                let hostport = match host.parse::<IpAddr>() {
                    Ok(IpAddr::V6(_)) => format!("[{host}]:{port}"),
                    _ => format!("{host}:{port}"),
                };
                (hostport, true)
            }
            ConnectionAddr::Unix(path) => (format!("unix:{}", path.display()), false),
            // A kind of address this check does not know: compared as written.
            other => (format!("{other:?}"), false),
        };
        Some(Target { place, tcp, db })
    }
}

/// A host name as written, in one spelling per name or address.
fn canonical_host(host: &str) -> String {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let host = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
    match host.parse::<IpAddr>() {
        Ok(ip) => ip.to_string(),
        Err(_) => host,
    }
}

/// The error for a node listed twice (`name` is the redacted URL).
fn twice(name: &str) -> Error {
    Error::Config {
        url: name.to_string(),
        reason: "the same node is listed twice (same server and database under another \
                 spelling); it would vote twice"
            .into(),
    }
}

/// Refuses a node whose host (as spelled, canonically), port and database
/// equal an earlier one's. No I/O.
pub(super) fn check_spelled(nodes: &[(String, Option<Target>)]) -> Result<()> {
    let mut seen: HashSet<(&str, i64)> = HashSet::new();
    for (name, target) in nodes {
        if let Some(t) = target
            && !seen.insert((t.place.as_str(), t.db))
        {
            return Err(twice(name));
        }
    }
    Ok(())
}

/// Refuses a node whose resolved addresses share one with an earlier node's
/// on the same database (`localhost` and `127.0.0.1`). A host that does not
/// resolve now is skipped: a node may be down at start.
pub(super) async fn check_resolved(nodes: &[(String, Option<Target>)]) -> Result<()> {
    let mut seen: Vec<(HashSet<SocketAddr>, i64)> = Vec::new();
    for (name, target) in nodes {
        let Some(Target {
            place,
            tcp: true,
            db,
        }) = target
        else {
            continue;
        };
        let Ok(addrs) = tokio::net::lookup_host(place.as_str()).await else {
            continue;
        };
        let addrs: HashSet<SocketAddr> = addrs.collect();
        if seen
            .iter()
            .any(|(other, other_db)| other_db == db && !other.is_disjoint(&addrs))
        {
            return Err(twice(name));
        }
        seen.push((addrs, *db));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(url: &str) -> Target {
        Target::of(url).expect("parses")
    }

    #[test]
    fn spellings_of_one_node_are_one_target() {
        let base = target("redis://127.0.0.1:6379");
        for same in [
            "redis://127.0.0.1:6379/0",
            "redis://127.0.0.1:6379/",
            "redis://:pw@127.0.0.1:6379",
            "redis://127.0.0.1:6379/?protocol=resp2",
        ] {
            assert_eq!(target(same), base, "{same}");
        }
        assert_eq!(
            target("redis://LocalHost.:1"),
            target("redis://localhost:1")
        );
        assert_eq!(target("redis://[::1]:1"), target("redis://[0:0::1]:1"));
        assert_ne!(target("redis://127.0.0.1:6379/1"), base);
        assert_ne!(target("redis://127.0.0.1:6380"), base);
    }
}
