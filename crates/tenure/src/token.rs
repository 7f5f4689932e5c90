//! Owner tokens: who holds a lease.

use std::fmt;

use crate::error::Result;
use crate::random;

/// A random 128-bit owner token, stored as the lease key's value.
///
/// It is drawn from a cryptographically secure generator (ChaCha12, one per
/// thread, seeded by the operating system's RNG and seeded again in a forked
/// child) and written as 32 lowercase hex digits, so other clients that
/// follow the common convention (a unique string as the value of the lock
/// key) interoperate with tenure on the same key. It is never printed: its
/// `Debug` shows only a prefix.
#[derive(Clone, PartialEq, Eq)]
pub struct OwnerToken(String);

impl OwnerToken {
    /// Draws a fresh token. Fails only when the operating system's RNG
    /// cannot seed this thread's generator.
    pub fn generate() -> Result<Self> {
        let bytes = random::draw()?;
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let mut hex = [0u8; 32];
        for (pair, b) in hex.chunks_exact_mut(2).zip(bytes) {
            pair[0] = DIGITS[usize::from(b >> 4)];
            pair[1] = DIGITS[usize::from(b & 0xf)];
        }
        // Bytes, then one copy: pushing chars one by one cost more than the
        // draw itself. (Hex digits are always UTF-8; the lossy arm never runs.)
        Ok(OwnerToken(match String::from_utf8(hex.to_vec()) {
            Ok(hex) => hex,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        }))
    }

    /// Whether `s` has the form of a token (32 lowercase hex digits).
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) fn looks_like(s: &str) -> bool {
        s.len() == 32 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    }

    /// A token read back from a store (the value of a held lease key), for a
    /// forced release; never one a caller made up.
    #[cfg_attr(
        not(any(feature = "redis", feature = "sqlite", feature = "etcd")),
        allow(dead_code)
    )]
    pub(crate) fn from_stored(stored: String) -> Self {
        OwnerToken(stored)
    }

    /// The token as stored.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for OwnerToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "OwnerToken({}…)", &self.0[..6])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_unique_128_bit_hex() {
        let a = OwnerToken::generate().expect("rng");
        let b = OwnerToken::generate().expect("rng");
        assert_ne!(a, b);
        assert_eq!(a.as_str().len(), 32);
        assert!(a.as_str().chars().all(|c| c.is_ascii_hexdigit()));
        assert!(!format!("{a:?}").contains(a.as_str()));
        assert!(OwnerToken::looks_like(a.as_str()));
        assert!(!OwnerToken::looks_like("1") && !OwnerToken::looks_like("record"));
    }
}
