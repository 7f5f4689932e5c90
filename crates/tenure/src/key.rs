//! Validation of user-supplied keys.

use std::borrow::Cow;

use crate::error::{Error, Result};

/// The longest key tenure accepts, in bytes. Redis allows far more, but a key this
/// long is almost always a bug (a request body used as a key), and every byte is
/// repeated in several storage keys.
pub const MAX_KEY_LEN: usize = 1024;

/// Checks a user key: not empty, at most [`MAX_KEY_LEN`] bytes, no control
/// characters (they make logs and `redis-cli` sessions unreadable).
pub fn validate_key(key: &str) -> Result<()> {
    // Printable ASCII (the usual key) needs no UTF-8 decoding to check.
    let printable = |b: &u8| (0x20..0x7f).contains(b);
    if !key.is_empty() && key.len() <= MAX_KEY_LEN && key.as_bytes().iter().all(printable) {
        return Ok(());
    }
    let reason = if key.is_empty() {
        "must not be empty".to_string()
    } else if key.len() > MAX_KEY_LEN {
        format!("is {} bytes long, the limit is {MAX_KEY_LEN}", key.len())
    } else if key.chars().any(char::is_control) {
        "must not contain control characters".to_string()
    } else {
        return Ok(());
    };
    Err(Error::InvalidKey {
        key: shorten(key),
        reason,
    })
}

/// A user key as it goes between the braces of a Redis hash tag
/// (`prefix{KEY}`, `prefix{KEY}:fence`, …), so that every storage key of one user
/// key lands in the same Redis Cluster slot.
///
/// Redis hashes the text between the first `{` and the first `}` after it, and
/// the whole key when that text is empty. A key starting with `}` would give an
/// empty tag, so each of its storage keys would be hashed whole, into different
/// slots. Such a key gets a `\` in front; so does a key starting with `\`, which
/// keeps the mapping one-to-one (`}x` → `\}x`, `\}x` → `\\}x`). Every other key
/// is used as it is, so the layout of existing keys does not change.
#[cfg_attr(not(feature = "redis"), allow(dead_code))]
pub(crate) fn hash_tag(key: &str) -> Cow<'_, str> {
    if key.starts_with('}') || key.starts_with('\\') {
        Cow::Owned(format!("\\{key}"))
    } else {
        Cow::Borrowed(key)
    }
}

/// The first 64 characters of a key, for error messages.
pub(crate) fn shorten(key: &str) -> String {
    if key.chars().count() <= 64 {
        key.to_string()
    } else {
        let head: String = key.chars().take(64).collect();
        format!("{head}…")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_empty_huge_and_control_keys() {
        assert!(matches!(validate_key(""), Err(Error::InvalidKey { .. })));
        let huge = "k".repeat(MAX_KEY_LEN + 1);
        let err = validate_key(&huge).expect_err("huge key");
        let msg = err.to_string();
        assert!(msg.contains("1025 bytes"), "{msg}");
        assert!(msg.len() < 200, "message must not repeat a huge key: {msg}");
        assert!(validate_key("a\nb").is_err());
        assert!(
            validate_key("a\u{7f}b").is_err(),
            "DEL is a control character"
        );
        assert!(validate_key("a\u{85}b").is_err(), "so is NEL (C1)");
        assert!(
            validate_key("ключ:42").is_ok(),
            "non-ASCII letters are fine"
        );
        assert!(validate_key("orders:42").is_ok());
        assert!(validate_key(&"k".repeat(MAX_KEY_LEN)).is_ok());
    }
}
