//! [`HeaderKey`]: one bucket per value of a header, such as an API key.

use http::HeaderName;

use super::{KeyExtractor, RequestHead};

/// The longest key a built-in extractor produces from a header value, in bytes;
/// longer values count as no key at all.
pub const MAX_HEADER_KEY_LEN: usize = 256;
/// Keys requests by a header value, e.g. an API key: `key:<value>`.
///
/// A missing header, or a value that is empty, longer than
/// [`MAX_HEADER_KEY_LEN`] or not visible ASCII, is no key.
///
/// ```
/// use tenure_http::{HeaderKey, KeyExtractor, RequestHead};
/// let key = HeaderKey::new(http::HeaderName::from_static("x-api-key"));
/// let req = http::Request::get("/").header("x-api-key", "k-123").body(()).unwrap();
/// assert_eq!(key.extract(&RequestHead::new(&req)).as_deref(), Some("key:k-123"));
/// let req = http::Request::get("/").body(()).unwrap();
/// assert_eq!(key.extract(&RequestHead::new(&req)), None);
/// ```
#[derive(Debug, Clone)]
pub struct HeaderKey {
    name: HeaderName,
    prefix: String,
}

impl HeaderKey {
    /// Reads header `name`; keys are prefixed with `key:`.
    pub fn new(name: HeaderName) -> Self {
        HeaderKey {
            name,
            prefix: "key:".to_owned(),
        }
    }

    /// Uses another prefix, so two header extractors do not share buckets.
    #[must_use]
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }
}

impl KeyExtractor for HeaderKey {
    fn extract(&self, head: &RequestHead<'_>) -> Option<String> {
        let value = head.headers.get(&self.name)?.to_str().ok()?.trim();
        let usable = !value.is_empty()
            && value.len() <= MAX_HEADER_KEY_LEN
            && value.bytes().all(|b| b.is_ascii_graphic() || b == b' ');
        usable.then(|| format!("{}{value}", self.prefix))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::test_support::{key, req};

    #[test]
    fn header_key_refuses_unusable_values() {
        let e = HeaderKey::new(HeaderName::from_static("x-api-key")).prefix("api:");
        let long = vec![b'a'; MAX_HEADER_KEY_LEN + 1];
        for bad in [&b""[..], b"   ", &long, b"a\tb", b"\xc3\xa9"] {
            let r = req("1.1.1.1:1", &[("x-api-key", bad)]);
            assert_eq!(key(&e, &r), None, "{bad:?}");
        }
        let r = req("1.1.1.1:1", &[("x-api-key", b" abc ")]);
        assert_eq!(key(&e, &r).as_deref(), Some("api:abc"));
    }
}
