//! URLs as tenure shows them: without credentials. Shared by every store
//! and by the handle's errors, whichever stores are compiled in.

/// Strips credentials from a URL for messages and logs: everything between
/// `://` and the *last* `@` (a password may contain `@`, `,`, `?` or `%2C`; hiding
/// a little too much is harmless), and every query parameter value (the query
/// is shown as `?…`).
pub(crate) fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let rest = match rest.rfind('@') {
        Some(at) => format!("***@{}", &rest[at + 1..]),
        None => rest.to_string(),
    };
    match rest.split_once('?') {
        Some((head, _query)) => format!("{scheme}://{head}?…"),
        None => format!("{scheme}://{rest}"),
    }
}
