//! Settings of an [`EtcdStore`](super::EtcdStore) and its `etcd://` URL.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use crate::error::{Error, Result};

/// The default key prefix: lease `orders:42` lives at `tenure/lease/orders:42`.
pub const DEFAULT_PREFIX: &str = "tenure/lease/";

/// The default time budget of one call.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(2);

/// The default time budget of connecting to an endpoint.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// Settings of an [`EtcdStore`](super::EtcdStore).
#[derive(Clone)]
#[must_use]
#[non_exhaustive]
pub struct EtcdOptions {
    /// Prefix of every key tenure writes (default [`DEFAULT_PREFIX`]).
    pub(crate) prefix: String,
    /// Time budget of one call (default 2 s). A call that runs out of it is an
    /// [`Error::Timeout`].
    pub(crate) timeout: Duration,
    /// Time budget of one connection attempt (default 1 s).
    pub(crate) connect_timeout: Duration,
    /// User name and password for etcd's authentication (default none), as
    /// etcdctl's `--user name:password`. Never printed.
    pub(crate) user: Option<(String, String)>,
    /// PEM file of the certificate authorities that may sign the members'
    /// certificates, for `etcds://` (etcdctl's `--cacert`; default: the
    /// system's trusted roots).
    pub(crate) ca_file: Option<PathBuf>,
    /// PEM files of a client certificate and its private key, for `etcds://`
    /// members that check clients (`--client-cert-auth`; etcdctl's `--cert`
    /// and `--key`).
    pub(crate) client_cert: Option<(PathBuf, PathBuf)>,
}

impl Default for EtcdOptions {
    fn default() -> Self {
        EtcdOptions {
            prefix: DEFAULT_PREFIX.to_string(),
            timeout: DEFAULT_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            user: None,
            ca_file: None,
            client_cert: None,
        }
    }
}

impl fmt::Debug for EtcdOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdOptions")
            .field("prefix", &self.prefix)
            .field("timeout", &self.timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("user", &self.user.as_ref().map(|(name, _)| name))
            .field("ca_file", &self.ca_file)
            .field("client_cert", &self.client_cert)
            .finish()
    }
}

impl EtcdOptions {
    /// Sets the key prefix.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Sets the time budget of one call.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Sets the time budget of one connection attempt.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Authenticates as `name` with `password` (etcdctl's `--user name:password`).
    pub fn user(mut self, name: impl Into<String>, password: impl Into<String>) -> Self {
        self.user = Some((name.into(), password.into()));
        self
    }

    /// Trusts the CAs in the PEM file `path` for `etcds://` instead of the
    /// system's roots (etcdctl's `--cacert`).
    pub fn ca_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.ca_file = Some(path.into());
        self
    }

    /// Presents the client certificate `cert` with its private key `key`
    /// (PEM files) on `etcds://` (etcdctl's `--cert` and `--key`).
    pub fn client_cert(mut self, cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        self.client_cert = Some((cert.into(), key.into()));
        self
    }
}

/// What an `etcd://` URL names: the endpoints and, optionally, a user.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct EtcdUrl {
    /// `host:port` of each member, in the order given.
    pub endpoints: Vec<String>,
    /// User and password from the user-info part.
    pub user: Option<(String, String)>,
    /// `etcds://`: TLS to every member.
    pub tls: bool,
}

impl fmt::Debug for EtcdUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.display())
    }
}

impl EtcdUrl {
    /// `etcd://h1:2379,h2:2379`, with the user but never the password.
    pub(super) fn display(&self) -> String {
        let user = match &self.user {
            Some((name, _)) => format!("{name}:***@"),
            None => String::new(),
        };
        let scheme = if self.tls { "etcds" } else { "etcd" };
        format!("{scheme}://{user}{}", self.endpoints.join(","))
    }

    /// Parses `etcd[s]://[user[:password]@]host[:port][,host[:port]…][/]`.
    ///
    /// The user-info part follows etcdctl's `--user name[:password]`; `@ : / ? #
    /// % ,` in a password are percent-encoded. A missing port is etcd's client
    /// port, 2379. `etcds://` speaks TLS to every member.
    pub(super) fn parse(url: &str) -> Result<Self> {
        let bad = |reason: &str| Error::Config {
            url: redact(url),
            reason: reason.to_string(),
        };
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| bad("expected etcd://host:2379[,host:2379…]"))?;
        let tls = match scheme.to_ascii_lowercase().as_str() {
            "etcd" => false,
            "etcds" => true,
            _ => return Err(bad("expected the etcd:// or etcds:// (TLS) scheme")),
        };
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        if rest.contains(['?', '#', '/']) {
            return Err(bad(
                "an etcd URL takes no path or query; put options in EtcdOptions",
            ));
        }
        let (user, hosts) = match rest.rsplit_once('@') {
            Some((info, hosts)) => {
                let (name, password) = info.split_once(':').unwrap_or((info, ""));
                let name = percent_decode(name).ok_or_else(|| bad("bad %-escape in the user"))?;
                let password =
                    percent_decode(password).ok_or_else(|| bad("bad %-escape in the password"))?;
                if name.is_empty() {
                    return Err(bad("empty user name before '@'"));
                }
                (Some((name, password)), hosts)
            }
            None => (None, rest),
        };
        let mut endpoints = Vec::new();
        for host in hosts.split(',').map(str::trim) {
            if host.is_empty() {
                return Err(bad(
                    "empty endpoint; expected etcd://host:2379[,host:2379…]",
                ));
            }
            let endpoint = match host.rsplit_once(':') {
                // `[::1]:2379` or `host:2379`; a bare IPv6 address needs brackets.
                Some((h, port)) if !h.is_empty() && !port.contains(']') => {
                    let port: u16 = port
                        .parse()
                        .map_err(|_| bad(&format!("bad port {port:?} in endpoint {host:?}")))?;
                    if port == 0 {
                        return Err(bad(&format!("port 0 in endpoint {host:?}")));
                    }
                    format!("{h}:{port}")
                }
                _ => format!("{host}:2379"),
            };
            if endpoint.contains(|c: char| c.is_whitespace() || c == '@') {
                return Err(bad(&format!("bad endpoint {host:?}")));
            }
            endpoints.push(endpoint);
        }
        Ok(EtcdUrl {
            endpoints,
            user,
            tls,
        })
    }
}

/// The URL with any password replaced by `***`.
pub(crate) fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    match rest.rsplit_once('@') {
        Some((info, hosts)) => {
            let name = info.split_once(':').map_or(info, |(n, _)| n);
            format!("{scheme}://{name}:***@{hosts}")
        }
        None => url.to_string(),
    }
}

fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            // Two hex digits exactly: `from_str_radix` alone would take "+1".
            let hex = s.get(i + 1..i + 3)?;
            if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                return None;
            }
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_endpoints_users_and_refuses_nonsense() {
        let u = EtcdUrl::parse("etcd://h1:2379,h2:2380, h3").expect("valid");
        assert_eq!(u.endpoints, ["h1:2379", "h2:2380", "h3:2379"]);
        assert_eq!(u.user, None);
        assert!(!u.tls);
        let u = EtcdUrl::parse("etcds://h1").expect("valid");
        assert!(u.tls);
        assert_eq!(u.display(), "etcds://h1:2379");

        let u = EtcdUrl::parse("etcd://root:p%40ss%3Aw%2Cd@127.0.0.1:2379/").expect("valid");
        assert_eq!(u.user, Some(("root".into(), "p@ss:w,d".into())));
        assert_eq!(u.display(), "etcd://root:***@127.0.0.1:2379");
        assert!(!format!("{u:?}").contains("p@ss"));

        let u = EtcdUrl::parse("etcd://[::1]:2379,[::1]").expect("valid");
        assert_eq!(u.endpoints, ["[::1]:2379", "[::1]:2379"]);

        for bad in [
            "etcd://",
            "etcd://h1,,h2",
            "etcd://h1:notaport",
            "etcd://h1:0",
            "etcd://h1:99999",
            "etcd://h1/path",
            "etcd://h1?x=1",
            "etcd://:secret@h1",
            "etcd://u:bad%zz@h1",
            "etcd://u:bad%+1@h1",
            "etcd://u:bad%-1@h1",
            "https://h1",
            "http://h1",
            "etcd:h1",
        ] {
            let err = EtcdUrl::parse(bad).expect_err(bad);
            assert!(matches!(err, Error::Config { .. }), "{bad}: {err}");
        }
        let err = EtcdUrl::parse("etcd://u:hunter2@h1:x").expect_err("bad port");
        assert!(!err.to_string().contains("hunter2"), "{err}");
    }

    #[test]
    fn options_never_print_the_password() {
        let o = EtcdOptions::default().user("root", "hunter2");
        assert!(!format!("{o:?}").contains("hunter2"));
        assert!(format!("{o:?}").contains("root"));
    }
}
