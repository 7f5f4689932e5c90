//! The holder record on etcd: a second key beside the lease key, bound to the
//! same etcd lease (so it expires with it), written in the acquire
//! transaction only when the lease records its holder and deleted by the
//! release transaction.
//!
//! Its name is the lease key followed by `\0holder`: a user key never holds a
//! control character (see [`validate_key`](crate::validate_key)), so no lease
//! key can be a holder key. Its value is JSON —
//! `{"host","pid","label","since_ms"}` — with the holder's wall clock at the
//! acquisition (etcd has no clock to read), never the owner token.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::lease::{Holder, HolderInfo, elapsed_ms};

/// What follows the lease key in the name of its holder record.
const SUFFIX: &str = "\0holder";

/// The etcd key of the holder record of the lease key `storage_key`.
pub(super) fn holder_key(storage_key: &str) -> String {
    format!("{storage_key}{SUFFIX}")
}

/// Whether an etcd key is a holder record (not a lease key).
pub(super) fn is_holder_key(etcd_key: &[u8]) -> bool {
    etcd_key.contains(&0)
}

/// The record of `holder`, stamped with this host's wall clock now.
pub(super) fn encode(holder: &HolderInfo) -> String {
    serde_json::json!({
        "host": holder.host,
        "pid": holder.pid,
        "label": holder.label,
        "since_ms": wall_ms(),
    })
    .to_string()
}

/// The holder from a record, held for the time since its stamp on this
/// host's wall clock; `None` for a record tenure cannot read.
pub(super) fn decode(record: &[u8]) -> Option<Holder> {
    let value: serde_json::Value = serde_json::from_slice(record).ok()?;
    let info = HolderInfo {
        host: value.get("host")?.as_str()?.to_string(),
        pid: u32::try_from(value.get("pid")?.as_u64()?).ok()?,
        label: value
            .get("label")
            .and_then(|l| l.as_str())
            .map(str::to_string),
    };
    let since = value.get("since_ms").and_then(serde_json::Value::as_i64);
    let held_for = since.and_then(|s| elapsed_ms(s, wall_ms()));
    Some(Holder::new(info, held_for))
}

/// Milliseconds since the Unix epoch on this host's wall clock (0 before it).
fn wall_ms() -> i64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO);
    i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_reads_back_without_the_token() {
        let info = HolderInfo::this_process().with_label("job 7");
        let record = encode(&info);
        let holder = decode(record.as_bytes()).expect("readable");
        assert_eq!((holder.host, holder.pid), (info.host, info.pid));
        assert_eq!(holder.label.as_deref(), Some("job 7"));
        assert!(holder.held_for.is_some_and(|d| d < Duration::from_secs(60)));
        assert_eq!(decode(b"not json"), None);
        assert_eq!(decode(br#"{"host":"h"}"#), None);
        assert!(is_holder_key(holder_key("tenure/lease/k").as_bytes()));
        assert!(!is_holder_key(b"tenure/lease/k"));
    }
}
