//! Listing the leases of one Redis master: `SCAN` over tenure's key layout.
//!
//! A lease key is `PREFIX{TAG}` — the prefix, the user key between braces (see
//! [`keys`](super::keys)), nothing after the closing brace. Every other name
//! of a lease (`…}:fence`, `…}:holder`, the channels) and the rate-limit keys
//! (`…}:limit:…`) have a suffix, so a key ending in `}` right after its tag is
//! a lease key; `SCAN … MATCH PREFIX{TAG*}` finds them, and each is then read
//! with [`status`](crate::lease::store::LeaseStore::status).

use crate::error::{Error, Result};
use crate::key::hash_tag;
use crate::lease::{LeaseStatus, LeaseStore};

use super::lease::RedisStore;

/// Keys asked for per `SCAN` step.
const SCAN_COUNT: u32 = 1000;

impl RedisStore {
    /// The held leases whose user key starts with `prefix`, in key order.
    pub(super) async fn list_leases(&self, prefix: &str) -> Result<Vec<(String, LeaseStatus)>> {
        // SCAN walks one node: on a cluster it would miss the other masters'
        // leases and look complete.
        if matches!(self.conn().origin(), super::conn::Origin::Cluster(_)) {
            return Err(Error::Config {
                url: self.describe(),
                reason: "a Redis Cluster cannot list its leases (SCAN walks one node);                          ask each master with a redis:// URL"
                    .into(),
            });
        }
        let keys = self.scan_user_keys(prefix, "").await?;
        let mut held = Vec::with_capacity(keys.len());
        for key in keys {
            match self.status(&key).await {
                Ok(status) if status.held => held.push((key, status)),
                Ok(_) => {}
                // Someone else's data under tenure's name: not a lease.
                Err(Error::WrongType { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(held)
    }
}

impl RedisStore {
    /// The user keys starting with `prefix` of the Redis keys
    /// `PREFIX{TAG}SUFFIX` on this node (`suffix` empty: the lease keys), in
    /// key order: a `SCAN` walk.
    pub(super) async fn scan_user_keys(&self, prefix: &str, suffix: &str) -> Result<Vec<String>> {
        let store_prefix = self.prefix();
        let pattern = format!(
            "{}{{{}*}}{suffix}",
            glob_escape(store_prefix),
            glob_escape(&hash_tag(prefix))
        );
        let mut cursor = "0".to_string();
        let mut keys = Vec::new();
        loop {
            let mut cmd = redis::cmd("SCAN");
            cmd.arg(&cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(SCAN_COUNT);
            let (next, found): (String, Vec<String>) = self
                .conn()
                .call("list", prefix, |mut c| async move {
                    cmd.query_async(&mut c).await
                })
                .await?;
            keys.extend(
                found
                    .iter()
                    .filter_map(|k| user_key(store_prefix, k.strip_suffix(suffix)?))
                    .filter(|k| k.starts_with(prefix)),
            );
            if next == "0" {
                break;
            }
            cursor = next;
        }
        // SCAN may return a key twice.
        keys.sort();
        keys.dedup();
        Ok(keys)
    }
}

/// The user key of a lease key `PREFIX{TAG}`, or `None` for any other name.
pub(super) fn user_key(store_prefix: &str, redis_key: &str) -> Option<String> {
    let tag = redis_key
        .strip_prefix(store_prefix)?
        .strip_prefix('{')?
        .strip_suffix('}')?;
    // The names with a suffix end in a word, not in `}`; but a user key may
    // itself contain `}:fence`-like text, so the tag is checked by mapping it
    // back: only a tag that `hash_tag` produces is a lease key.
    let key = match tag.strip_prefix('\\') {
        Some(rest) if rest.starts_with('}') || rest.starts_with('\\') => rest,
        Some(_) => return None,
        None if tag.starts_with('}') => return None,
        None => tag,
    };
    (hash_tag(key) == tag && !key.is_empty()).then(|| key.to_string())
}

/// `text` with the glob characters of `SCAN MATCH` escaped.
pub(super) fn glob_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redis::keys::Keys;

    #[test]
    fn only_lease_keys_map_back_to_user_keys() {
        let keys = Keys::new("tenure:");
        for key in ["orders:42", "}x", "\\y", "a}b", "x}:fence"] {
            assert_eq!(
                user_key("tenure:", &keys.lease(key)).as_deref(),
                Some(key),
                "{key}"
            );
            assert_eq!(user_key("tenure:", &keys.fence(key)), None, "{key}");
            assert_eq!(user_key("tenure:", &keys.holder(key)), None, "{key}");
        }
        assert_eq!(user_key("tenure:", "tenure:resource:r"), None);
        assert_eq!(user_key("other:", "tenure:{k}"), None);
        assert_eq!(user_key("tenure:", "tenure:{}"), None);
    }

    #[test]
    fn glob_characters_are_escaped() {
        assert_eq!(glob_escape("a*b?[c]\\"), "a\\*b\\?\\[c\\]\\\\");
        assert_eq!(glob_escape("tenure:"), "tenure:");
    }
}
