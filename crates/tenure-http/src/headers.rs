//! The rate-limit header fields and the problem bodies.
//!
//! - `RateLimit-Policy: "default";q=60;w=60` and `RateLimit: "default";r=12;t=41`
//!   in the syntax of draft-ietf-httpapi-ratelimit-headers-11 (structured-field
//!   lists of a quoted policy name with integer parameters);
//! - legacy `X-RateLimit-Limit`, `X-RateLimit-Remaining` and `X-RateLimit-Reset`
//!   (Unix time in seconds), written only when asked for;
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
    d.as_secs().saturating_add(u64::from(d.subsec_nanos() > 0))
}

/// `"name";q=60;w=60`.
pub fn policy_value(name: &PolicyName, policy: QuotaPolicy) -> HeaderValue {
    let window = ceil_secs(policy.window).max(1);
    number_value(format!("\"{}\";q={};w={window}", name.0, policy.limit))
}

/// The longest `RateLimit` value: a 64-byte name, two 20-digit numbers and
/// `"";r=;t=`.
const MAX_RATELIMIT_LEN: usize = 64 + 2 * 20 + 8;

/// `"name";r=12;t=41`.
pub fn ratelimit_value(name: &PolicyName, decision: &Decision) -> HeaderValue {
    ratelimit_value_after(&ratelimit_prefix(name), decision)
}

/// `"name";r=`, the start of every `RateLimit` value of a policy.
fn ratelimit_prefix(name: &PolicyName) -> Vec<u8> {
    format!("\"{}\";r=", name.0).into_bytes()
}

/// `RateLimit`'s value after its `prefix`, written on the stack: this runs on
/// every response, and the one allocation is the value's own.
fn ratelimit_value_after(prefix: &[u8], decision: &Decision) -> HeaderValue {
    let mut buf = [0u8; MAX_RATELIMIT_LEN];
    let mut len = prefix.len().min(MAX_RATELIMIT_LEN - 2 * 20 - 3);
    buf[..len].copy_from_slice(&prefix[..len]);
    len = write_decimal(&mut buf, len, decision.remaining);
    buf[len..len + 3].copy_from_slice(b";t=");
    len = write_decimal(&mut buf, len + 3, ceil_secs(decision.reset_after));
    // Only a checked policy name, digits, quotes, `;` and `=`: always valid.
    HeaderValue::from_bytes(&buf[..len]).unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// Writes `n` in decimal into `buf` at `at`, digit by digit (no call for a
/// handful of bytes), and returns where it ends. `buf` has room for 20 digits
/// after `at`.
fn write_decimal(buf: &mut [u8; MAX_RATELIMIT_LEN], at: usize, mut n: u64) -> usize {
    let mut digits = 1;
    let mut rest = n / 10;
    while rest > 0 {
        rest /= 10;
        digits += 1;
    }
    let end = (at + digits).min(MAX_RATELIMIT_LEN);
    for slot in buf[at..end].iter_mut().rev() {
        *slot = b'0' + (n % 10) as u8;
        n /= 10;
    }
    end
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

/// Which rate-limit fields the middleware writes, and the values that do not
/// change from response to response, built once per layer (a clone of a
/// `HeaderValue` only counts a reference).
#[derive(Debug, Clone)]
pub(crate) struct HeaderStyle {
    /// `"name";r=`, the start of every `RateLimit` value.
    prefix: Vec<u8>,
    /// `RateLimit-Policy`, when the limiter advertises a policy.
    policy: Option<HeaderValue>,
    /// The policy's limit and its `X-RateLimit-Limit` value.
    limit: Option<(u64, HeaderValue)>,
    /// `RateLimit-Policy` and `RateLimit`.
    standard: bool,
    /// `X-RateLimit-Limit`, `-Remaining` and `-Reset`.
    legacy: bool,
}

impl HeaderStyle {
    /// The fields for `policy` (if the limiter advertises one) under `name`:
    /// the standard pair when `standard`, the legacy three when `legacy`.
    pub(crate) fn new(
        name: PolicyName,
        policy: Option<QuotaPolicy>,
        standard: bool,
        legacy: bool,
    ) -> Self {
        HeaderStyle {
            policy: policy.map(|p| policy_value(&name, p)),
            limit: policy.map(|p| (p.limit, HeaderValue::from(p.limit))),
            prefix: ratelimit_prefix(&name),
            standard,
            legacy,
        }
    }

    /// Whether any rate-limit field goes on an admitted response.
    pub(crate) fn any(&self) -> bool {
        self.standard || self.legacy
    }

    /// Writes the rate-limit fields of `decision` into `headers`, replacing any
    /// the inner service set; a refusal gets `Retry-After` whatever the style.
    pub(crate) fn write(&self, decision: &Decision, headers: &mut HeaderMap) {
        self.write_at(decision, SystemTime::now, headers);
    }

    /// [`write`](Self::write) with the clock for `X-RateLimit-Reset`, read
    /// only when that field is written.
    pub(crate) fn write_at(
        &self,
        decision: &Decision,
        now: impl FnOnce() -> SystemTime,
        headers: &mut HeaderMap,
    ) {
        let count = 2 * usize::from(self.standard)
            + 3 * usize::from(self.legacy)
            + usize::from(!decision.allowed);
        if !headers.is_empty() {
            // Grown once, not field by field. An empty map needs no call: its
            // first insertion makes room for six fields.
            headers.reserve(count);
        }
        if self.standard {
            if let Some(policy) = &self.policy {
                headers.insert(RATELIMIT_POLICY, policy.clone());
            }
            headers.insert(RATELIMIT, ratelimit_value_after(&self.prefix, decision));
        }
        if self.legacy {
            self.write_legacy(decision, now(), headers);
        }
        if !decision.allowed {
            headers.insert(
                http::header::RETRY_AFTER,
                HeaderValue::from(retry_after_secs(decision)),
            );
        }
    }

    fn write_legacy(&self, decision: &Decision, now: SystemTime, headers: &mut HeaderMap) {
        let reset = now
            .checked_add(decision.reset_after)
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map_or(0, ceil_secs);
        let limit = match &self.limit {
            Some((limit, value)) if *limit == decision.limit => value.clone(),
            _ => HeaderValue::from(decision.limit),
        };
        headers.insert(X_RATELIMIT_LIMIT, limit);
        headers.insert(X_RATELIMIT_REMAINING, HeaderValue::from(decision.remaining));
        headers.insert(X_RATELIMIT_RESET, HeaderValue::from(reset));
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
    fn the_longest_values_are_written_whole() {
        let name = PolicyName::new(&"n".repeat(64)).expect("name");
        let mut v = Decision::allowed(u64::MAX, u64::MAX, Duration::MAX);
        let text = ratelimit_value(&name, &v);
        let want = format!("\"{}\";r={};t={}", "n".repeat(64), u64::MAX, u64::MAX);
        assert_eq!(text, want.as_str());
        v.remaining = 0;
        v.reset_after = Duration::ZERO;
        assert_eq!(
            ratelimit_value(&PolicyName::default(), &v),
            "\"default\";r=0;t=0"
        );
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
    fn legacy_fields_are_opt_in_and_reset_is_unix_seconds() {
        let p = QuotaPolicy {
            limit: 60,
            window: Duration::from_secs(60),
        };
        let name = || PolicyName::new("ip").expect("name");
        let now = || UNIX_EPOCH + Duration::from_secs(1_000);
        let v = Decision::refused(60, Duration::from_millis(30_500), Duration::from_secs(2));
        let mut h = HeaderMap::new();
        HeaderStyle::new(name(), Some(p), true, true).write_at(&v, now, &mut h);
        assert_eq!(h[X_RATELIMIT_LIMIT], "60");
        assert_eq!(h[X_RATELIMIT_REMAINING], "0");
        assert_eq!(h[X_RATELIMIT_RESET], "1031");
        assert_eq!(h[http::header::RETRY_AFTER], "2");
        assert_eq!(h[RATELIMIT], "\"ip\";r=0;t=31");
        assert_eq!(h[RATELIMIT_POLICY], "\"ip\";q=60;w=60");
        assert_eq!(h.len(), 6);

        // A decision of another limit (a compound limiter) is written as is.
        let mut h = HeaderMap::new();
        let other = Decision::allowed(7, 3, Duration::ZERO);
        HeaderStyle::new(name(), Some(p), false, true).write_at(&other, now, &mut h);
        assert_eq!(h[X_RATELIMIT_LIMIT], "7");
        assert_eq!(h.len(), 3);

        // The standard pair alone; the clock is not read.
        let mut h = HeaderMap::new();
        let standard = HeaderStyle::new(name(), Some(p), true, false);
        let unread = || -> SystemTime { panic!("the clock was read") };
        standard.write_at(&Decision::allowed(60, 1, Duration::ZERO), unread, &mut h);
        assert_eq!(h.len(), 2);
        assert_eq!(h[RATELIMIT], "\"ip\";r=1;t=0");
        assert!(h.contains_key(RATELIMIT_POLICY));
    }

    #[test]
    fn with_headers_off_a_refusal_still_says_when_to_retry() {
        let off = HeaderStyle::new(PolicyName::default(), None, false, false);
        assert!(!off.any());
        let mut h = HeaderMap::new();
        off.write(&Decision::allowed(60, 1, Duration::ZERO), &mut h);
        assert!(h.is_empty());
        let v = Decision::refused(60, Duration::from_secs(30), Duration::from_millis(1_500));
        off.write(&v, &mut h);
        assert_eq!(h.len(), 1);
        assert_eq!(h[http::header::RETRY_AFTER], "2");
    }
}
