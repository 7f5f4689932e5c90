//! Allow and deny lists: keys and networks that skip the limiter, and keys
//! and networks refused outright (`403`).
//!
//! A list matches a request's key exactly (`api:partner-7`), or, for the keys
//! of the IP extractors (`ip:203.0.113.7`, from [`PeerIp`](crate::PeerIp) and
//! [`ClientIp`](crate::ClientIp)), by the network the address is in. A
//! denied key is refused even when it is also allowed.

use std::collections::HashSet;
use std::net::IpAddr;

use ipnet::IpNet;

/// Keys and networks that skip the limiter ([`allow_key`](Self::allow_key),
/// [`allow_network`](Self::allow_network)) or get `403 Forbidden`
/// ([`deny_key`](Self::deny_key), [`deny_network`](Self::deny_network)), for
/// [`RateLimitLayer::access`](crate::RateLimitLayer::access).
///
/// ```
/// use tenure_http::AccessList;
/// let list = AccessList::new()
///     .allow_network("10.0.0.0/8".parse().unwrap()) // internal callers
///     .allow_key("api:partner-7")
///     .deny_network("198.51.100.0/24".parse().unwrap());
/// assert_eq!(list.verdict("ip:10.1.2.3"), tenure_http::Access::Allowed);
/// assert_eq!(list.verdict("ip:198.51.100.9"), tenure_http::Access::Denied);
/// assert_eq!(list.verdict("ip:192.0.2.1"), tenure_http::Access::Limited);
/// ```
#[derive(Debug, Clone, Default)]
#[must_use]
pub struct AccessList {
    allow: Matcher,
    deny: Matcher,
}

/// What an [`AccessList`] says about a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Access {
    /// On the allow list (and not denied): the limiter is not asked.
    Allowed,
    /// On the deny list: `403`, the limiter is not asked.
    Denied,
    /// On neither: the limiter decides.
    Limited,
}

#[derive(Debug, Clone, Default)]
struct Matcher {
    keys: HashSet<String>,
    networks: Vec<IpNet>,
}

impl Matcher {
    fn matches(&self, key: &str) -> bool {
        if self.keys.contains(key) {
            return true;
        }
        if self.networks.is_empty() {
            return false;
        }
        key.strip_prefix("ip:")
            .and_then(|ip| ip.parse::<IpAddr>().ok())
            .is_some_and(|ip| self.networks.iter().any(|n| n.contains(&ip)))
    }

    fn is_empty(&self) -> bool {
        self.keys.is_empty() && self.networks.is_empty()
    }
}

impl AccessList {
    /// An empty list: every key is limited.
    pub fn new() -> Self {
        Self::default()
    }

    /// Lets `key` skip the limiter.
    pub fn allow_key(mut self, key: impl Into<String>) -> Self {
        self.allow.keys.insert(key.into());
        self
    }

    /// Lets the IP keys in `network` skip the limiter.
    pub fn allow_network(mut self, network: IpNet) -> Self {
        self.allow.networks.push(network);
        self
    }

    /// Refuses `key` with `403`.
    pub fn deny_key(mut self, key: impl Into<String>) -> Self {
        self.deny.keys.insert(key.into());
        self
    }

    /// Refuses the IP keys in `network` with `403`.
    pub fn deny_network(mut self, network: IpNet) -> Self {
        self.deny.networks.push(network);
        self
    }

    /// Whether the list says nothing about any key.
    pub fn is_empty(&self) -> bool {
        self.allow.is_empty() && self.deny.is_empty()
    }

    /// What the list says about `key`: the deny list first.
    pub fn verdict(&self, key: &str) -> Access {
        if self.deny.matches(key) {
            Access::Denied
        } else if self.allow.matches(key) {
            Access::Allowed
        } else {
            Access::Limited
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deny_wins_and_networks_match_only_ip_keys() {
        let net = |s: &str| s.parse::<IpNet>().expect("cidr");
        let list = AccessList::new()
            .allow_network(net("2001:db8::/32"))
            .allow_network(net("10.0.0.0/8"))
            .deny_key("ip:10.0.0.66")
            .allow_key("api:k1");
        assert_eq!(list.verdict("ip:2001:db8::1"), Access::Allowed);
        assert_eq!(list.verdict("ip:10.0.0.66"), Access::Denied);
        assert_eq!(list.verdict("api:k1"), Access::Allowed);
        assert_eq!(list.verdict("api:10.0.0.1"), Access::Limited);
        assert_eq!(list.verdict("ip:not-an-ip"), Access::Limited);
        assert!(AccessList::new().is_empty() && !list.is_empty());
    }
}
