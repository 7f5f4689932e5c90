//! The holder hash on Redis: `tenure:{key}:holder`, written by the acquire
//! script (or the look that claims a lease handed to a waiter) only when the
//! lease records its holder, renewed by extend with the lease key, and read
//! by `status`. A release leaves it to its TTL: it costs the release no
//! command, and a freed or handed-over lease never shows it (see below).
//!
//! | field | content |
//! |---|---|
//! | `host`, `pid`, `label` | what the holder recorded (`label` only if given) |
//! | `fence` | the fence of the acquisition that wrote it |
//! | `since_s`, `since_us` | the server's `TIME` at the acquisition |
//!
//! The owner token is never written here: the lease key's value stays the
//! plain token other clients expect. The hash is reported only while the
//! lease is held and its `fence` is the key's fence counter, so the record of
//! a released, handed-over or expired lease, or of a key deleted behind
//! tenure's back (a `DEL` from `redis-cli`), is never shown for the next
//! tenure holder (a client that does not count fences is not told apart).

use crate::fence::Fence;
use crate::lease::{Holder, HolderInfo, elapsed_ms};

/// The fields `status` reads, in this order (`HMGET`).
pub(super) const FIELDS: [&str; 6] = ["host", "pid", "label", "fence", "since_s", "since_us"];

/// The acquire script's holder arguments (`ARGV[3..]`): none when nothing is
/// recorded.
pub(super) fn acquire_args(holder: Option<&HolderInfo>) -> Vec<String> {
    let Some(h) = holder else {
        return Vec::new();
    };
    let mut args = vec![h.host.clone(), h.pid.to_string()];
    args.extend(h.label.clone());
    args
}

/// The holder from the `HMGET` of [`FIELDS`], if it belongs to the lease
/// whose fence counter is `fence`; `now` is the server's `TIME`.
pub(super) fn read(
    fields: &[Option<String>],
    fence: Option<Fence>,
    now: (i64, i64),
) -> Option<Holder> {
    let [host, pid, label, written, since_s, since_us] = fields else {
        return None;
    };
    let written: u64 = written.as_deref()?.parse().ok()?;
    if Some(written) != fence.map(|f| f.get()) {
        return None;
    }
    let pid = pid.as_deref()?.parse().ok()?;
    let since = millis_of(since_s.as_deref()?, since_us.as_deref()?);
    let held_for = since.and_then(|s| elapsed_ms(s, now.0.saturating_mul(1000) + now.1 / 1000));
    let info = HolderInfo {
        host: host.clone()?,
        pid,
        label: label.clone(),
    };
    Some(Holder::new(info, held_for))
}

/// Milliseconds of a `TIME` reading stored as two decimal fields.
fn millis_of(secs: &str, micros: &str) -> Option<i64> {
    let (s, us): (i64, i64) = (secs.parse().ok()?, micros.parse().ok()?);
    Some(s.checked_mul(1000)? + us / 1000)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn some(v: &[&str]) -> Vec<Option<String>> {
        v.iter()
            .map(|s| (!s.is_empty()).then(|| s.to_string()))
            .collect()
    }

    #[test]
    fn a_record_is_read_for_its_own_fence_only() {
        let fields = some(&["web-1", "4242", "POST /x", "7", "100", "250000"]);
        let now = (101, 0);
        let h = read(&fields, Some(Fence::new(7)), now).expect("holder");
        assert_eq!((h.host.as_str(), h.pid), ("web-1", 4242));
        assert_eq!(h.label.as_deref(), Some("POST /x"));
        assert_eq!(h.held_for, Some(Duration::from_millis(750)));
        assert_eq!(read(&fields, Some(Fence::new(8)), now), None);
        assert_eq!(read(&fields, None, now), None);
        let unlabelled = some(&["web-1", "1", "", "7", "100", "0"]);
        assert_eq!(
            read(&unlabelled, Some(Fence::new(7)), now).and_then(|h| h.label),
            None
        );
        assert_eq!(read(&some(&["", "", "", "", "", ""]), None, now), None);
        let garbage = some(&["h", "not a pid", "", "7", "1", "0"]);
        assert_eq!(read(&garbage, Some(Fence::new(7)), now), None);
    }

    #[test]
    fn arguments_are_empty_without_a_holder() {
        assert!(acquire_args(None).is_empty());
        let h = HolderInfo::this_process().with_label("l");
        assert_eq!(acquire_args(Some(&h)).len(), 3);
    }
}
