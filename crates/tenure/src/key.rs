//! Validation of user-supplied keys.

use std::borrow::Cow;

use crate::error::{Error, Result};

/// The longest key tenure accepts, in bytes. Redis allows far more, but a key this
/// long is almost always a bug (a request body used as a key), and every byte is
/// repeated in several storage keys.
pub const MAX_KEY_LEN: usize = 1024;

/// Checks a user key: not empty, at most [`MAX_KEY_LEN`] bytes, no control
/// characters (they make logs and `redis-cli` sessions unreadable).
#[inline]
pub fn validate_key(key: &str) -> Result<()> {
    // Printable ASCII (the usual key) needs no UTF-8 decoding to check.
    if !key.is_empty() && key.len() <= MAX_KEY_LEN && printable_ascii(key.as_bytes()) {
        return Ok(());
    }
    check_unusual(key)
}

/// [`validate_key`] for a key that is empty, long or not printable ASCII:
/// out of line, so that the usual key's check stays a few instructions.
#[cold]
#[inline(never)]
fn check_unusual(key: &str) -> Result<()> {
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

/// Whether every byte is printable ASCII (0x20..=0x7e), eight bytes at a time.
#[inline]
fn printable_ascii(bytes: &[u8]) -> bool {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGH: u64 = u64::from_ne_bytes([0x80; 8]);
    // A byte is flagged when it has its high bit set, is below 0x20 or is
    // 0x7f (a zero byte of `w ^ 0x7f…`). A borrow can flag a byte above a
    // flagged one, never a word without one.
    let bad = |w: u64| {
        let del = w ^ (0x7f * ONES);
        (w | w.wrapping_sub(0x20 * ONES) | del.wrapping_sub(ONES) & !del) & HIGH
    };
    let word = |chunk: &[u8]| {
        let mut word = [b'a'; 8]; // a short key is padded with printable bytes
        word[..chunk.len()].copy_from_slice(chunk);
        u64::from_ne_bytes(word)
    };
    let Some(last) = bytes.len().checked_sub(8) else {
        return bad(word(bytes)) == 0;
    };
    let whole = |chunk: &[u8]| <[u8; 8]>::try_from(chunk).map_or(HIGH, u64::from_ne_bytes);
    if bytes.len() <= 24 {
        // Every IP key: three words (overlapping when shorter), no loop.
        let middle = last.min(8);
        let (a, b) = (whole(&bytes[..8]), whole(&bytes[middle..middle + 8]));
        return (bad(a) | bad(b) | bad(whole(&bytes[last..]))) == 0;
    }
    let mut words = bytes.chunks_exact(8);
    let mut flags = 0;
    for chunk in &mut words {
        flags |= bad(whole(chunk));
    }
    // The last bytes: the last whole word again, overlapping.
    flags |= bad(whole(&bytes[last..]));
    flags == 0
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
    fn printable_ascii_agrees_with_the_byte_by_byte_check() {
        // Both ways of checking: three words up to 24 bytes, a loop beyond.
        for len in 1..=33 {
            for at in 0..len {
                for b in 0..=255u8 {
                    let mut key = vec![b'k'; len];
                    key[at] = b;
                    let expected = key.iter().all(|b| (0x20..0x7f).contains(b));
                    assert_eq!(
                        printable_ascii(&key),
                        expected,
                        "byte {b:#x} at {at} of {len}"
                    );
                }
            }
        }
        assert!(printable_ascii(b""));
    }

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
