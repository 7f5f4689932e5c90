//! Redis Cluster: the `redis+cluster://` URL and the cluster client behind it.
//!
//! `redis+cluster://[user:password@]host1:port1,host2:port2[?query]` (or
//! `rediss+cluster://…` for TLS) names a few *seed* nodes of one cluster; the
//! client reads the slot map from them, sends every command to the master of
//! its key's slot and follows `MOVED`/`ASK` redirections and failovers by
//! itself (redis-rs's `cluster-async`). The credentials and query apply to
//! every node, as the seeds of one cluster share them. A cluster has one
//! database, so a path other than `/` or `/0` is refused.
//!
//! Every tenure script touches keys of one hash tag (see
//! [`keys`](super::keys)), so each runs whole on one master.

use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::{ConnectionInfo, IntoConnectionInfo, ProtocolVersion};

use super::conn::Certificates;

/// The URL schemes of a Redis Cluster, plain and TLS.
pub(crate) const CLUSTER_SCHEMES: [&str; 2] = ["redis+cluster", "rediss+cluster"];

/// What a cluster client is built from; kept so that the release subscriber
/// can open a second client (RESP3, for pushes) to the same seeds.
#[derive(Clone)]
pub(crate) struct ClusterSeeds {
    nodes: Vec<ConnectionInfo>,
    certs: Option<Certificates>,
}

impl std::fmt::Debug for ClusterSeeds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterSeeds")
            .field("nodes", &self.nodes.len())
            .finish_non_exhaustive()
    }
}

impl ClusterSeeds {
    /// The seeds of a `redis+cluster://` URL; `None` for any other scheme. The
    /// error is a reason to show next to the redacted URL (it never repeats the
    /// credentials).
    pub(crate) fn parse(url: &str, certs: Option<Certificates>) -> Option<Result<Self, String>> {
        let (scheme, rest) = url.split_once("://")?;
        let scheme = scheme.to_ascii_lowercase();
        if !CLUSTER_SCHEMES.contains(&scheme.as_str()) {
            return None;
        }
        let node_scheme = scheme.trim_end_matches("+cluster");
        Some(seed_urls(node_scheme, rest).and_then(|urls| {
            let nodes = urls
                .iter()
                .map(|u| u.as_str().into_connection_info().map(super::conn::tuned))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("a seed node is not a valid address ({:?})", e.kind()))?;
            Ok(ClusterSeeds { nodes, certs })
        }))
    }

    /// A client for these seeds speaking `protocol`, with tenure's time budgets.
    pub(crate) fn client(
        &self,
        protocol: ProtocolVersion,
        timeout: std::time::Duration,
        connect_timeout: std::time::Duration,
    ) -> redis::RedisResult<ClusterClient> {
        let builder = ClusterClientBuilder::new(self.nodes.clone())
            .use_protocol(protocol)
            .connection_timeout(connect_timeout)
            .response_timeout(timeout)
            .tcp_settings(super::conn::tcp_settings());
        match &self.certs {
            None => builder.build(),
            #[cfg(feature = "tls")]
            Some(certs) => builder.certs(certs.clone()).build(),
            #[cfg(not(feature = "tls"))]
            Some(never) => match *never {},
        }
    }
}

/// The `redis://` (or `rediss://`) URL of every seed in `rest`, the part of a
/// cluster URL after its `://`.
fn seed_urls(node_scheme: &str, rest: &str) -> Result<Vec<String>, String> {
    // Credentials end at the last `@` (a password may contain `,` or `@`).
    let (userinfo, after) = match rest.rfind('@') {
        Some(at) => rest.split_at(at + 1),
        None => ("", rest),
    };
    let (hosts, query) = match after.split_once('?') {
        Some((hosts, query)) => (hosts, format!("?{query}")),
        None => (after, String::new()),
    };
    let hosts = match hosts.split_once('/') {
        None => hosts,
        Some((hosts, "" | "0")) => hosts,
        Some(_) => {
            return Err("a Redis Cluster has one database: use no path or /0".into());
        }
    };
    hosts
        .split(',')
        .map(str::trim)
        .map(|host| {
            if host.is_empty() {
                Err("the node list has an empty entry; write host1:port1,host2:port2".into())
            } else {
                Ok(format!("{node_scheme}://{userinfo}{host}{query}"))
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cluster_url_names_its_seeds_with_shared_credentials() {
        assert_eq!(
            seed_urls("redis", "u:p,w@d@h1:7000, h2:7001/?protocol=resp3").unwrap(),
            [
                "redis://u:p,w@d@h1:7000?protocol=resp3",
                "redis://u:p,w@d@h2:7001?protocol=resp3"
            ]
        );
        assert_eq!(seed_urls("rediss", "h:1/0").unwrap(), ["rediss://h:1"]);
        assert!(
            seed_urls("redis", "h:1/3")
                .unwrap_err()
                .contains("one database")
        );
        assert!(
            seed_urls("redis", "h:1,,h:2")
                .unwrap_err()
                .contains("empty")
        );
    }

    #[test]
    fn only_cluster_schemes_are_cluster_urls() {
        assert!(ClusterSeeds::parse("redis://h:1", None).is_none());
        assert!(ClusterSeeds::parse("redis+sentinel://h:1/m", None).is_none());
        let seeds = ClusterSeeds::parse("REDIS+CLUSTER://:pw@a:1,b:2", None)
            .expect("a cluster URL")
            .expect("valid seeds");
        assert_eq!(seeds.nodes.len(), 2);
        let bad = ClusterSeeds::parse("redis+cluster://:s3cret@a:notaport", None)
            .expect("a cluster URL")
            .unwrap_err();
        assert!(!bad.contains("s3cret"), "{bad}");
    }
}
