//! Keeping passwords out of everything tenure prints.
//!
//! The library redacts the URLs it names in errors and descriptions; this is
//! the command line's second line of defence. Before anything is parsed, the
//! secrets of every URL on the command line and in `TENURE_BACKEND` are
//! collected, and every line tenure prints (messages, `-v` logs, the strings
//! inside its JSON) has them replaced by `***` — also the pieces a wrong split
//! at `,`, `@` or `?` could have cut a password into. tenure's own JSON
//! structure (field names, numbers, `true`) is never scrubbed.

use std::io::Write;
use std::sync::OnceLock;

static SECRETS: OnceLock<Vec<String>> = OnceLock::new();

/// Pieces shorter than this are not scrubbed on their own: they would mangle
/// ordinary words (the whole password still is).
const MIN_PIECE: usize = 3;

/// Collects the secrets of `values` (command-line arguments and environment
/// values); only the first call counts.
pub fn collect<I: IntoIterator<Item = String>>(values: I) {
    let mut found: Vec<String> = Vec::new();
    for value in values {
        // One URL at a time: a list's userinfo must not run into the next URL.
        for url in crate::store::split_urls(&value) {
            secrets_of(url, &mut found);
        }
    }
    found.sort_by_key(|s| std::cmp::Reverse(s.len()));
    found.dedup();
    let _ = SECRETS.set(found);
}

/// `text` with every collected secret replaced by `***`.
pub fn scrub(text: &str) -> String {
    let mut out = text.to_string();
    for secret in SECRETS.get().map_or(&[][..], Vec::as_slice) {
        if out.contains(secret.as_str()) {
            out = out.replace(secret.as_str(), "***");
        }
    }
    out
}

/// `value` with every collected secret replaced by `***` in its strings only:
/// field names, numbers and `true`/`false` are tenure's own and never contain
/// a secret, so the JSON stays valid and keeps its fields.
pub fn scrub_json(value: &serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match value {
        Value::String(s) => Value::String(scrub(s)),
        Value::Array(items) => Value::Array(items.iter().map(scrub_json).collect()),
        Value::Object(fields) => Value::Object(
            fields
                .iter()
                .map(|(name, v)| (name.clone(), scrub_json(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

fn secrets_of(value: &str, found: &mut Vec<String>) {
    // Userinfo: between `scheme://` and the last `@` (a password may hold `@`).
    if let Some(start) = value.find("://").map(|i| i + 3)
        && let Some(at) = value[start..].rfind('@')
    {
        let userinfo = &value[start..start + at];
        let password = userinfo.split_once(':').map_or(userinfo, |(_, p)| p);
        add(userinfo, found);
        add(password, found);
    }
    // `password=` anywhere (a query parameter), up to `&` or the end.
    let lower = value.to_ascii_lowercase();
    for (i, _) in lower.match_indices("password=") {
        let rest = &value[i + "password=".len()..];
        let end = rest.find('&').unwrap_or(rest.len());
        add(&rest[..end], found);
    }
}

fn add(secret: &str, found: &mut Vec<String>) {
    for form in [secret.to_string(), percent_decode(secret)] {
        if form.is_empty() {
            continue;
        }
        for piece in form.split([',', '@', '?', '&', '/', '#', ';', ':', '=']) {
            if piece.len() >= MIN_PIECE {
                found.push(piece.to_string());
            }
        }
        found.push(form);
    }
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Standard error through [`scrub`], for the log subscriber.
pub struct ScrubbedStderr;

impl Write for ScrubbedStderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let clean = scrub(&String::from_utf8_lossy(buf));
        std::io::stderr().lock().write_all(clean.as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().lock().flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_and_their_pieces_are_found() {
        let mut found = Vec::new();
        secrets_of(
            "redis://u:p%2Cw@ss,word@h:1/0?password=zzz9&x=1",
            &mut found,
        );
        for s in [
            "u:p%2Cw@ss,word",
            "p%2Cw@ss,word",
            "p,w@ss,word",
            "word",
            "zzz9",
            "p%2Cw",
        ] {
            assert!(found.iter().any(|f| f == s), "{s} missing from {found:?}");
        }
        let mut list = Vec::new();
        for url in crate::store::split_urls("redis://:pw9,x@h:1,redis://:other@h:2") {
            secrets_of(url, &mut list);
        }
        assert!(list.iter().any(|f| f == "pw9,x") && list.iter().any(|f| f == "other"));
        assert!(!list.iter().any(|f| f == "redis" || f == "h:1"), "{list:?}");
        let mut none = Vec::new();
        secrets_of("redis://h:1/0", &mut none);
        secrets_of("sqlite:/tmp/a.db", &mut none);
        assert!(none.is_empty(), "{none:?}");
    }
}
