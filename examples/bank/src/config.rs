//! Command-line flags.

use std::fmt;
use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use tenure_http::{FailurePolicy, ForwardedHeader, TrustedProxies};

/// `bank`: balances under tenure leases, fenced writes to PostgreSQL, rate
/// limits per client IP.
///
/// `Debug` never shows a password of the database or the backend (see
/// [`SecretUrl`]).
#[derive(Debug, Clone, Parser)]
#[command(name = "bank", version, about)]
pub struct Config {
    /// Address to listen on, e.g. 127.0.0.1:8080.
    #[arg(long, value_name = "ADDR")]
    pub listen: SocketAddr,

    /// tenure store for leases and rate limits, e.g. redis://127.0.0.1:6379.
    #[arg(long, value_name = "REDIS_URL", value_parser = parse_url)]
    pub backend: SecretUrl,

    /// PostgreSQL holding the balances, e.g. postgres://postgres@127.0.0.1/bank
    /// (a URL or `key=value` pairs). Prefer the environment for a password.
    // `hide_env_values`: `--help` would otherwise print the variable's value.
    #[arg(
        long,
        value_name = "POSTGRES_URL",
        env = "DATABASE_URL",
        hide_env_values = true,
        value_parser = parse_url
    )]
    pub database_url: SecretUrl,

    /// Requests per client IP: COUNT/PERIOD with PERIOD like 1m, 30s, 1h, 500ms.
    #[arg(long, value_name = "RATE", default_value = "60/1m", value_parser = parse_rate)]
    pub limit: Rate,

    /// A reverse proxy whose forwarding header is believed (CIDR; repeatable).
    #[arg(long = "trusted-proxy", value_name = "CIDR", value_parser = parse_cidr)]
    pub trusted_proxy: Vec<String>,

    /// The header the trusted proxies write: X-Forwarded-For, or RFC 7239
    /// Forwarded. Only this one is read; the other is the client's.
    #[arg(long, value_enum, default_value_t = ForwardedHeaderArg::XForwardedFor)]
    pub forwarded_header: ForwardedHeaderArg,

    /// What to do when the rate limiter's store fails or is too slow.
    #[arg(long, value_enum, default_value_t = OnFailure::Open)]
    pub on_limiter_failure: OnFailure,

    /// The longest a request waits for the rate limiter.
    #[arg(long, value_name = "DURATION", default_value = "250ms", value_parser = parse_duration)]
    pub limit_budget: Duration,

    /// TTL of an account's lease (renewed by a watchdog while held).
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = parse_duration)]
    pub lease_ttl: Duration,

    /// How long a balance change waits for an account's lease before `503`.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    pub lease_wait: Duration,
}

impl Config {
    /// A configuration with the defaults of the command line.
    pub fn new(listen: SocketAddr, backend: &str, database_url: &str) -> Self {
        Config {
            listen,
            backend: SecretUrl::new(backend),
            database_url: SecretUrl::new(database_url),
            limit: Rate {
                count: NonZeroU32::new(60).unwrap_or(NonZeroU32::MIN),
                period: Duration::from_secs(60),
            },
            trusted_proxy: Vec::new(),
            forwarded_header: ForwardedHeaderArg::XForwardedFor,
            on_limiter_failure: OnFailure::Open,
            limit_budget: Duration::from_millis(250),
            lease_ttl: Duration::from_secs(5),
            lease_wait: Duration::from_secs(10),
        }
    }

    /// The trusted proxies, parsed.
    pub fn trusted_proxies(&self) -> Result<TrustedProxies, tenure_http::InvalidCidr> {
        let mut t = TrustedProxies::none();
        for cidr in &self.trusted_proxy {
            t.add(cidr)?;
        }
        Ok(t)
    }
}

/// The forwarding header, as a flag value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ForwardedHeaderArg {
    /// `X-Forwarded-For: client, proxy1` (the default).
    XForwardedFor,
    /// `Forwarded: for=client, for=proxy1` (RFC 7239).
    Forwarded,
}

impl From<ForwardedHeaderArg> for ForwardedHeader {
    fn from(h: ForwardedHeaderArg) -> Self {
        match h {
            ForwardedHeaderArg::XForwardedFor => ForwardedHeader::XForwardedFor,
            ForwardedHeaderArg::Forwarded => ForwardedHeader::Forwarded,
        }
    }
}

/// A connection string (PostgreSQL, Redis) whose password never shows: `Debug` and
/// `Display` print it with the password replaced by `***` — in the URL's
/// user info (`postgres://user:***@host/db`), in a `password=` query
/// parameter, or in a `password=` key of the `key=value` form.
/// [`expose`](Self::expose) gives the real string, for connecting only.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretUrl(String);

impl SecretUrl {
    /// Wraps a connection string.
    pub fn new(url: &str) -> Self {
        SecretUrl(url.to_owned())
    }

    /// The connection string, password included.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for SecretUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&redact(&self.0), f)
    }
}

impl fmt::Display for SecretUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&redact(&self.0))
    }
}

/// The connection string with every password replaced by `***`. When in
/// doubt it hides more (a `:` … `@` span of a URL is hidden whole, even if
/// the `@` was in the path), never less.
fn redact(url: &str) -> String {
    let mut out = url.to_owned();
    // URL user info: `scheme://user:password@host`. The password may hold
    // unescaped `@` `/` `:`, so hide from the first `:` after the user up to
    // the *last* `@`.
    if let Some(scheme_end) = out.find("://") {
        let rest = scheme_end + 3;
        if let Some(at) = out[rest..].rfind('@').map(|i| rest + i)
            && let Some(colon) = out[rest..at].find(':').map(|i| rest + i)
        {
            out.replace_range(colon + 1..at, "***");
        }
    }
    // `password=` as a query parameter (up to `&`) or a `key=value` pair (up
    // to white space, or a quoted value with `\` escapes), any case, `sslpassword` too.
    let mut from = 0;
    while let Some(i) = out[from..]
        .to_ascii_lowercase()
        .find("password")
        .map(|i| from + i)
    {
        let mut j = i + "password".len();
        let bytes = out.as_bytes();
        while j < bytes.len() && bytes[j] == b' ' {
            j += 1;
        }
        if bytes.get(j) != Some(&b'=') {
            from = j;
            continue;
        }
        j += 1;
        while j < bytes.len() && bytes[j] == b' ' {
            j += 1;
        }
        let start = j;
        if bytes.get(j) == Some(&b'\'') {
            j += 1;
            while j < bytes.len() && bytes[j] != b'\'' {
                j += if bytes[j] == b'\\' { 2 } else { 1 };
            }
            j = (j + 1).min(bytes.len());
        } else {
            while j < bytes.len() && !matches!(bytes[j], b'&' | b' ' | b'#') {
                j += 1;
            }
        }
        out.replace_range(start..j, "***");
        from = start + 3;
    }
    out
}

fn parse_url(s: &str) -> Result<SecretUrl, String> {
    if s.trim().is_empty() {
        return Err("empty: expected a URL".into());
    }
    Ok(SecretUrl::new(s))
}

/// The failure policy, as a flag value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OnFailure {
    /// Let requests through unlimited while the store is down.
    Open,
    /// Answer 503 while the store is down.
    Closed,
}

impl From<OnFailure> for FailurePolicy {
    fn from(f: OnFailure) -> Self {
        match f {
            OnFailure::Open => FailurePolicy::Open,
            OnFailure::Closed => FailurePolicy::Closed,
        }
    }
}

/// `COUNT` requests per `PERIOD`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    /// Requests per period.
    pub count: NonZeroU32,
    /// The period.
    pub period: Duration,
}

/// Parses `60/1m`, `10/30s`, `1000/h`.
///
/// ```
/// use std::time::Duration;
/// let r = bank::config::parse_rate("60/1m").unwrap();
/// assert_eq!((r.count.get(), r.period), (60, Duration::from_secs(60)));
/// assert!(bank::config::parse_rate("0/1m").is_err());
/// assert!(bank::config::parse_rate("60").is_err());
/// ```
pub fn parse_rate(s: &str) -> Result<Rate, String> {
    let (count, period) = s
        .split_once('/')
        .ok_or_else(|| format!("{s:?}: expected COUNT/PERIOD, e.g. 60/1m"))?;
    let count: u32 = count
        .trim()
        .parse()
        .map_err(|_| format!("{s:?}: the count must be a whole number"))?;
    let count =
        NonZeroU32::new(count).ok_or_else(|| format!("{s:?}: the count must be at least 1"))?;
    let period = period.trim();
    // "60/m" means one minute.
    let period = if period.starts_with(|c: char| c.is_ascii_digit()) {
        parse_duration(period)?
    } else {
        parse_duration(&format!("1{period}"))?
    };
    Ok(Rate { count, period })
}

/// Parses `250ms`, `5s`, `1m`, `2h` (non-zero).
///
/// ```
/// use std::time::Duration;
/// assert_eq!(bank::config::parse_duration("250ms"), Ok(Duration::from_millis(250)));
/// assert!(bank::config::parse_duration("5").is_err());
/// assert!(bank::config::parse_duration("0s").is_err());
/// ```
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (n, unit) = s.split_at(split);
    let n: u64 = n
        .parse()
        .map_err(|_| format!("{s:?}: expected a number and a unit (ms, s, m, h), e.g. 30s"))?;
    let d = match unit {
        "ms" => Duration::from_millis(n),
        "s" => Duration::from_secs(n),
        "m" => Duration::from_secs(n.saturating_mul(60)),
        "h" => Duration::from_secs(n.saturating_mul(3600)),
        _ => return Err(format!("{s:?}: the unit must be ms, s, m or h")),
    };
    if d.is_zero() {
        return Err(format!("{s:?}: must be longer than zero"));
    }
    Ok(d)
}

fn parse_cidr(s: &str) -> Result<String, String> {
    TrustedProxies::none()
        .add(s)
        .map(|()| s.to_owned())
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The required flags, valid.
    const REQUIRED: [&str; 7] = [
        "bank",
        "--listen",
        "127.0.0.1:0",
        "--backend",
        "redis://x",
        "--database-url",
        "postgres://y",
    ];

    #[test]
    fn flags() {
        let c = Config::try_parse_from(REQUIRED.into_iter().chain([
            "--limit",
            "5/30s",
            "--trusted-proxy",
            "10.0.0.0/8",
            "--trusted-proxy",
            "127.0.0.1",
            "--on-limiter-failure",
            "closed",
        ]))
        .unwrap();
        assert_eq!(c.limit.count.get(), 5);
        assert_eq!(c.limit.period, Duration::from_secs(30));
        assert!(
            c.trusted_proxies()
                .unwrap()
                .contains("10.9.9.9".parse().unwrap())
        );
        assert_eq!(c.on_limiter_failure, OnFailure::Closed);
        assert_eq!(c.limit_budget, Duration::from_millis(250));

        let defaults = Config::new("127.0.0.1:0".parse().unwrap(), "redis://x", "postgres://y");
        let parsed = Config::try_parse_from(REQUIRED).unwrap();
        assert_eq!(format!("{defaults:?}"), format!("{parsed:?}"));
    }

    #[test]
    fn forwarded_header_flag() {
        let c = Config::try_parse_from(REQUIRED).unwrap();
        assert_eq!(c.forwarded_header, ForwardedHeaderArg::XForwardedFor);
        let c = Config::try_parse_from(
            REQUIRED
                .into_iter()
                .chain(["--forwarded-header", "forwarded"]),
        )
        .unwrap();
        assert_eq!(c.forwarded_header, ForwardedHeaderArg::Forwarded);
        assert_eq!(
            tenure_http::ForwardedHeader::from(c.forwarded_header),
            tenure_http::ForwardedHeader::Forwarded
        );
    }

    #[test]
    fn the_database_password_is_never_printed() {
        for (url, secret) in [
            ("postgres://bank:s3cret@127.0.0.1:5432/bank", "s3cret"),
            (
                "postgresql://bank:p%40ss@db.internal/bank?sslmode=disable",
                "p%40ss",
            ),
            ("postgres://bank:a@b:c/d@127.0.0.1/bank", "a@b:c/d"),
            (
                "postgres://bank@127.0.0.1/bank?password=s3cret&sslmode=disable",
                "s3cret",
            ),
            (
                "postgres://127.0.0.1/bank?sslmode=disable&PASSWORD=s3cret",
                "s3cret",
            ),
            (
                "host=127.0.0.1 user=bank password=s3cret dbname=bank",
                "s3cret",
            ),
            ("host=127.0.0.1 password = 'se cr\\'et' user=bank", "cr"),
        ] {
            let c = Config::new("127.0.0.1:0".parse().unwrap(), "redis://x", url);
            let debug = format!("{c:?}");
            assert!(!debug.contains(secret), "{debug}");
            assert!(
                debug.contains("127.0.0.1"),
                "the rest stays readable: {debug}"
            );
            assert!(!format!("{}", c.database_url).contains(secret));
            assert_eq!(c.database_url.expose(), url);
        }
        let c = Config::new(
            "127.0.0.1:0".parse().unwrap(),
            "redis://x",
            "postgres://u@h/db",
        );
        assert!(
            format!("{c:?}").contains("postgres://u@h/db"),
            "nothing to hide"
        );
        for (backend, secret) in [
            ("redis://:s3cret@127.0.0.1:6379", "s3cret"),
            ("rediss://app:s3cret@10.0.0.1/0", "s3cret"),
            ("redis://:one1@h1,redis://:two2@h2", "one1"),
            ("redis://:one1@h1,redis://:two2@h2", "two2"),
            ("redis://127.0.0.1/?password=s3cret", "s3cret"),
        ] {
            let c = Config::new("127.0.0.1:0".parse().unwrap(), backend, "postgres://h/db");
            assert!(!format!("{c:?}").contains(secret), "{c:?}");
            assert_eq!(c.backend.expose(), backend);
        }
    }

    #[test]
    fn bad_flags_are_errors_not_panics() {
        for bad in [
            &["--limit", "60"][..],
            &["--limit", "x/1m"],
            &["--limit", "60/1y"],
            &["--limit", "60/0s"],
            &["--trusted-proxy", "10.0.0.0/99"],
            &["--on-limiter-failure", "maybe"],
            &["--limit-budget", "fast"],
        ] {
            let args = REQUIRED.iter().chain(bad.iter()).copied();
            assert!(Config::try_parse_from(args).is_err(), "{bad:?}");
        }
        assert!(Config::try_parse_from(["bank", "--listen", "nowhere"]).is_err());
        assert_eq!(
            parse_rate("100/h").unwrap().period,
            Duration::from_secs(3600)
        );
    }
}
