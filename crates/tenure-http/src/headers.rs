//! The rate-limit header fields and the problem bodies.
//!
//! - `RateLimit-Policy: "default";q=60;w=60` and `RateLimit: "default";r=12;t=41`
//!   in the syntax of draft-ietf-httpapi-ratelimit-headers-11 (structured-field
//!   lists of a quoted policy name with integer parameters);
//! - legacy `X-RateLimit-Limit`, `X-RateLimit-Remaining` and `X-RateLimit-Reset`
//!   (Unix time in seconds), which can be turned off;
//! - `Retry-After` in whole seconds on a refusal.
//!
//! Every duration is rounded **up** to whole seconds: a client that waits the
//! advertised time is never early.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::{HeaderMap, HeaderName, HeaderValue};

use crate::limiter::{Decision, QuotaPolicy};

/// `RateLimit-Policy`.
pub const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
/// `RateLimit`.
pub const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
/// `X-RateLimit-Limit`.
pub const X_RATELIMIT_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
/// `X-RateLimit-Remaining`.
pub const X_RATELIMIT_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
/// `X-RateLimit-Reset`.
pub const X_RATELIMIT_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");

/// The name of a quota policy as it appears in the headers: 1 to 64 characters
/// of `A-Z a-z 0-9 - _ . :` (so it never needs escaping in a structured-field
/// string).
///
/// ```
/// use tenure_http::PolicyName;
/// assert_eq!(PolicyName::new("per-ip")?.as_str(), "per-ip");
/// assert!(PolicyName::new("no \"quotes\"").is_err());
/// assert!(PolicyName::new("").is_err());
/// # Ok::<(), tenure_http::InvalidPolicyName>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyName(String);

/// A policy name with characters outside the allowed set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidPolicyName(pub String);

impl fmt::Display for InvalidPolicyName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid rate-limit policy name {:?}: use 1 to 64 characters of A-Z a-z 0-9 - _ . :",
            self.0
        )
    }
}

impl std::error::Error for InvalidPolicyName {}

impl PolicyName {
    /// Checks and wraps a name.
    pub fn new(name: &str) -> Result<Self, InvalidPolicyName> {
        let ok = (1..=64).contains(&name.len())
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':'));
        if ok {
            Ok(PolicyName(name.to_owned()))
        } else {
            Err(InvalidPolicyName(name.to_owned()))
        }
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Default for PolicyName {
    fn default() -> Self {
        PolicyName("default".to_owned())
    }
}

/// Whole seconds, rounded up.
pub(crate) fn ceil_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

/// `"name";q=60;w=60`.
pub fn policy_value(name: &PolicyName, policy: QuotaPolicy) -> HeaderValue {
    let window = ceil_secs(policy.window).max(1);
    number_value(format!("\"{}\";q={};w={window}", name.0, policy.limit))
}

/// `"name";r=12;t=41`.
pub fn ratelimit_value(name: &PolicyName, decision: &Decision) -> HeaderValue {
    // Written by hand: this runs on every response.
    let mut out = Vec::with_capacity(name.0.len() + 2 * MAX_DIGITS + 8);
    out.push(b'"');
    out.extend_from_slice(name.0.as_bytes());
    out.extend_from_slice(b"\";r=");
    push_decimal(&mut out, decision.remaining);
    out.extend_from_slice(b";t=");
    push_decimal(&mut out, ceil_secs(decision.reset_after));
    // Only a checked policy name, digits, quotes, `;` and `=`: always valid.
    HeaderValue::from_maybe_shared(bytes::Bytes::from(out))
        .unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// The most decimal digits of a `u64`.
const MAX_DIGITS: usize = 20;

/// Appends `n` in decimal.
fn push_decimal(out: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; MAX_DIGITS];
    let mut at = MAX_DIGITS;
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[at..]);
}

/// `n` as a header value.
fn decimal_value(n: u64) -> HeaderValue {
    let mut out = Vec::with_capacity(MAX_DIGITS);
    push_decimal(&mut out, n);
    HeaderValue::from_maybe_shared(bytes::Bytes::from(out))
        .unwrap_or_else(|_| HeaderValue::from_static("0"))
}

/// The seconds a refused client should wait: the limiter's `retry_after` (or,
/// without one, its reset time), rounded up, at least 1 — `Retry-After: 0`
/// invites a retry storm.
pub fn retry_after_secs(decision: &Decision) -> u64 {
    ceil_secs(decision.retry_after.unwrap_or(decision.reset_after)).max(1)
}

fn number_value(s: String) -> HeaderValue {
    // Only ASCII digits, quotes, `;`, `=` and a checked policy name: always valid.
    HeaderValue::try_from(s).unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// Which header fields the middleware writes.
#[derive(Debug, Clone)]
pub(crate) struct HeaderStyle {
    pub(crate) name: PolicyName,
    pub(crate) policy: Option<HeaderValue>,
    pub(crate) legacy: bool,
}

impl HeaderStyle {
    /// Writes the rate-limit fields of `decision` into `headers`, replacing any
    /// the inner service set.
    pub(crate) fn write(&self, decision: &Decision, now: SystemTime, headers: &mut HeaderMap) {
        headers.reserve(5); // grown once, not field by field
        if let Some(policy) = &self.policy {
            headers.insert(RATELIMIT_POLICY, policy.clone());
        }
        headers.insert(RATELIMIT, ratelimit_value(&self.name, decision));
        if self.legacy {
            let reset = now
                .checked_add(decision.reset_after)
                .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                .map_or(0, ceil_secs);
            headers.insert(X_RATELIMIT_LIMIT, decimal_value(decision.limit));
            headers.insert(X_RATELIMIT_REMAINING, decimal_value(decision.remaining));
            headers.insert(X_RATELIMIT_RESET, decimal_value(reset));
        }
        if !decision.allowed {
            headers.insert(
                http::header::RETRY_AFTER,
                HeaderValue::from(retry_after_secs(decision)),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draft_syntax() {
        let name = PolicyName::default();
        let p = QuotaPolicy {
            limit: 60,
            window: Duration::from_secs(60),
        };
        assert_eq!(policy_value(&name, p), "\"default\";q=60;w=60");
        let v = Decision::allowed(60, 12, Duration::from_millis(40_001));
        assert_eq!(ratelimit_value(&name, &v), "\"default\";r=12;t=41");
        let sub_second = QuotaPolicy {
            limit: 5,
            window: Duration::from_millis(200),
        };
        assert_eq!(policy_value(&name, sub_second), "\"default\";q=5;w=1");
    }

    #[test]
    fn decimals_are_written_whole() {
        for n in [0, 7, 10, 99, 1_000_000, u64::MAX] {
            assert_eq!(decimal_value(n), HeaderValue::from(n));
        }
    }

    #[test]
    fn retry_after_rounds_up_and_is_never_zero() {
        let r = |retry: u64| Decision::refused(1, Duration::ZERO, Duration::from_millis(retry));
        assert_eq!(retry_after_secs(&r(0)), 1);
        assert_eq!(retry_after_secs(&r(1)), 1);
        assert_eq!(retry_after_secs(&r(1000)), 1);
        assert_eq!(retry_after_secs(&r(1001)), 2);
        let mut no_retry = r(0);
        no_retry.retry_after = None;
        no_retry.reset_after = Duration::from_millis(2500);
        assert_eq!(retry_after_secs(&no_retry), 3);
    }

    #[test]
    fn legacy_fields_are_switchable_and_reset_is_unix_seconds() {
        let mut style = HeaderStyle {
            name: PolicyName::new("ip").expect("name"),
            policy: None,
            legacy: true,
        };
        let now = UNIX_EPOCH + Duration::from_secs(1_000);
        let v = Decision::refused(60, Duration::from_millis(30_500), Duration::from_secs(2));
        let mut h = HeaderMap::new();
        style.write(&v, now, &mut h);
        assert_eq!(h[X_RATELIMIT_LIMIT], "60");
        assert_eq!(h[X_RATELIMIT_REMAINING], "0");
        assert_eq!(h[X_RATELIMIT_RESET], "1031");
        assert_eq!(h[http::header::RETRY_AFTER], "2");
        assert_eq!(h[RATELIMIT], "\"ip\";r=0;t=31");
        assert!(!h.contains_key(RATELIMIT_POLICY));

        style.legacy = false;
        let mut h = HeaderMap::new();
        style.write(&Decision::allowed(60, 1, Duration::ZERO), now, &mut h);
        assert!(!h.contains_key(X_RATELIMIT_RESET) && !h.contains_key(http::header::RETRY_AFTER));
        assert_eq!(h[RATELIMIT], "\"ip\";r=1;t=0");
    }
}
