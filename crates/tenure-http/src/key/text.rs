//! [`Key`]: a bucket's key as the middleware carries it — kept inline, with no
//! heap allocation, when it is short (every IP key is), on the heap otherwise.

use std::borrow::Borrow;
use std::fmt::{self, Write as _};
use std::hash::{Hash, Hasher};
use std::ops::Deref;

use arrayvec::ArrayString;

/// The most bytes kept inline: `ip:` and any IPv6 network in CIDR notation
/// (`ip:ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255/128`) fit.
const INLINE: usize = 62;

/// A request's key, as [`KeyExtractor::key`](super::KeyExtractor::key) returns
/// it: a string that lives inline when it is at most 62 bytes long, so keying
/// by IP address allocates nothing. It reads as a `&str` (it dereferences to
/// one) and converts from and into `String`.
///
/// ```
/// use std::fmt::Write as _;
/// use tenure_http::Key;
/// let mut key = Key::default();
/// write!(key, "ip:{}", std::net::Ipv4Addr::new(192, 0, 2, 1)).unwrap();
/// assert_eq!(&*key, "ip:192.0.2.1");
/// assert_eq!(key, Key::from("ip:192.0.2.1"));
/// assert_eq!(String::from(key), "ip:192.0.2.1");
/// ```
#[derive(Clone)]
pub struct Key(Repr);

#[derive(Clone)]
enum Repr {
    Inline(ArrayString<INLINE>),
    Heap(String),
}

impl Key {
    /// The key as a string slice.
    pub fn as_str(&self) -> &str {
        match &self.0 {
            Repr::Inline(s) => s,
            Repr::Heap(s) => s,
        }
    }

    /// Appends `s`, moving the key to the heap once it outgrows the inline
    /// buffer.
    pub fn push_str(&mut self, s: &str) {
        match &mut self.0 {
            Repr::Inline(inline) => {
                if inline.try_push_str(s).is_err() {
                    let mut heap = String::with_capacity(inline.len() + s.len());
                    heap.push_str(inline);
                    heap.push_str(s);
                    self.0 = Repr::Heap(heap);
                }
            }
            Repr::Heap(heap) => heap.push_str(s),
        }
    }
}

impl Key {
    /// Appends the IPv4 key `ip:a.b.c.d` to an empty key, straight into its
    /// inline buffer: each octet is one fixed 4-byte copy from [`OCTETS`] (no
    /// formatting, no digit-by-digit pushes), its padding cut off after it.
    /// Always inlined, and written through `&mut`: the key is then built in
    /// the place its caller returns it from, not copied there.
    #[inline(always)]
    pub(crate) fn push_ipv4(&mut self, octets: [u8; 4]) {
        let Repr::Inline(text) = &mut self.0 else {
            return self.push_ipv4_slow(octets);
        };
        // `ip:255.255.255.255.` is 19 bytes: every push fits an empty key.
        let _ = text.try_push_str("ip:");
        for (i, octet) in octets.into_iter().enumerate() {
            let at = usize::from(octet) * 4;
            let kept = text.len() + octet_digits(octet) + usize::from(i < 3);
            let _ = text.try_push_str(&OCTETS[at..at + 4]);
            text.truncate(kept);
        }
    }

    /// [`push_ipv4`](Self::push_ipv4) on a key already on the heap.
    #[cold]
    #[inline(never)]
    fn push_ipv4_slow(&mut self, octets: [u8; 4]) {
        let _ = write!(self, "ip:{}", std::net::Ipv4Addr::from(octets));
    }
}

/// The decimal digits of an octet.
fn octet_digits(octet: u8) -> usize {
    1 + usize::from(octet >= 10) + usize::from(octet >= 100)
}

/// Every octet's decimal digits and a dot, padded with spaces to 4 bytes:
/// `"0.  1.  2.  …255."`, octet `n` at byte `4 n`.
const OCTETS: &str = match std::str::from_utf8(&octet_table()) {
    Ok(text) => text,
    Err(_) => panic!("the octet table is ASCII"),
};

const fn octet_table() -> [u8; 1024] {
    let mut table = [b' '; 1024];
    let mut n = 0;
    while n < 256 {
        let (at, octet) = (n * 4, n as u8);
        let mut i = at;
        if octet >= 100 {
            table[i] = b'0' + octet / 100;
            i += 1;
        }
        if octet >= 10 {
            table[i] = b'0' + octet / 10 % 10;
            i += 1;
        }
        table[i] = b'0' + octet % 10;
        table[i + 1] = b'.';
        n += 1;
    }
    table
}

impl Default for Key {
    /// The empty key, inline.
    #[inline]
    fn default() -> Self {
        Key(Repr::Inline(ArrayString::new()))
    }
}

impl fmt::Write for Key {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.push_str(s);
        Ok(())
    }
}

impl Deref for Key {
    type Target = str;

    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for Key {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl Borrow<str> for Key {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl From<&str> for Key {
    /// Copies `s`, inline when it fits.
    fn from(s: &str) -> Self {
        let mut key = Key::default();
        key.push_str(s);
        key
    }
}

impl From<String> for Key {
    /// Takes `s` as it is (no copy).
    fn from(s: String) -> Self {
        Key(Repr::Heap(s))
    }
}

impl From<Key> for String {
    fn from(key: Key) -> Self {
        match key.0 {
            Repr::Heap(s) => s,
            Repr::Inline(s) => s.as_str().to_owned(),
        }
    }
}

impl PartialEq for Key {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for Key {}

impl PartialEq<str> for Key {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for Key {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl Hash for Key {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_keys_stay_inline_and_long_ones_move_to_the_heap_intact() {
        let longest_ip = "ip:ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255/128";
        assert!(matches!(Key::from(longest_ip).0, Repr::Inline(_)));
        let mut key = Key::from("k:");
        let long = "é".repeat(40); // multi-byte characters across the boundary
        key.push_str(&long);
        assert!(matches!(key.0, Repr::Heap(_)));
        assert_eq!(key.as_str(), format!("k:{long}"));
        key.push_str("!");
        assert!(key.ends_with("é!"));
        let exact = "x".repeat(INLINE);
        assert_eq!(Key::from(exact.as_str()).as_str(), exact);
        assert_eq!(String::from(Key::from("a")), "a");
        assert_eq!(Key::from(String::from("a")), Key::from("a"));
    }
}
