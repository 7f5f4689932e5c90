//! [`TrustedProxies`]: the CIDR ranges whose forwarding headers [`ClientIp`](super::ClientIp) believes.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use ipnet::IpNet;

/// A list of CIDR ranges, e.g. the addresses of your load balancers.
///
/// ```
/// use tenure_http::TrustedProxies;
/// let t: TrustedProxies = "10.0.0.0/8, 127.0.0.1, ::1/128".parse()?;
/// assert!(t.contains("10.1.2.3".parse().unwrap()));
/// assert!(t.contains("::ffff:127.0.0.1".parse().unwrap())); // mapped IPv4 folds
/// assert!(!t.contains("192.0.2.1".parse().unwrap()));
/// assert!("10.0.0.0/33".parse::<TrustedProxies>().is_err());
/// # Ok::<(), tenure_http::InvalidCidr>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustedProxies {
    nets: Vec<IpNet>,
}

/// A CIDR range that could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidCidr(pub String);

impl fmt::Display for InvalidCidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid CIDR range {:?}: expected an address or address/prefix, e.g. 10.0.0.0/8 or 2001:db8::/32",
            self.0
        )
    }
}

impl std::error::Error for InvalidCidr {}

impl TrustedProxies {
    /// No trusted proxies: forwarding headers are never read.
    pub fn none() -> Self {
        Self::default()
    }

    /// Adds one range (`10.0.0.0/8`) or single address (`127.0.0.1`).
    pub fn add(&mut self, cidr: &str) -> Result<(), InvalidCidr> {
        let cidr = cidr.trim();
        let net = match cidr.parse::<IpNet>() {
            Ok(net) => net.trunc(),
            Err(_) => match cidr.parse::<IpAddr>() {
                Ok(ip) => IpNet::from(ip),
                Err(_) => return Err(InvalidCidr(cidr.to_owned())),
            },
        };
        self.nets.push(net);
        Ok(())
    }

    /// Whether `ip` is in one of the ranges (IPv4-mapped IPv6 folded to IPv4).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.nets.iter().any(|n| n.contains(&ip))
    }

    /// Whether no range is configured.
    pub fn is_empty(&self) -> bool {
        self.nets.is_empty()
    }
}

impl FromStr for TrustedProxies {
    type Err = InvalidCidr;

    /// Comma-separated ranges.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut t = TrustedProxies::none();
        for part in s.split(',').filter(|p| !p.trim().is_empty()) {
            t.add(part)?;
        }
        Ok(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::test_support::trusted;

    #[test]
    fn cidr_parsing() {
        let t = trusted("10.1.2.3/8");
        assert!(t.contains("10.200.0.1".parse().expect("ip")));
        assert!("".parse::<TrustedProxies>().expect("empty").is_empty());
        for bad in ["10.0.0.0/33", "nope", "1.2.3.4/-1", "::/129"] {
            assert!(bad.parse::<TrustedProxies>().is_err(), "{bad}");
        }
    }
}
