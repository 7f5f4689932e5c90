//! Key layout and TTL mapping on etcd.

use std::time::Duration;

/// The etcd key of lease `key` under `prefix`: `warden/lease/orders:42`.
pub(crate) fn lease_key(prefix: &str, key: &str) -> String {
    format!("{prefix}{key}")
}

/// The etcd lease TTL for a requested TTL: whole seconds, rounded *up*.
///
/// etcd counts lease TTLs in seconds. Rounding up keeps the key on the cluster
/// at least as long as asked, while the holder's local deadline still comes
/// from the requested TTL (minus the drift margin): the holder stops believing
/// in a 300 ms lease after ~295 ms, and nobody else can take the key before
/// etcd expires it a second (plus etcd's expiry sweep) later. Rounding down
/// would let etcd hand the key to someone else while the holder still
/// believes in it.
pub(crate) fn etcd_ttl_secs(ttl: Duration) -> i64 {
    let secs = ttl
        .as_secs()
        .saturating_add(u64::from(ttl.subsec_nanos() > 0));
    i64::try_from(secs.max(1)).unwrap_or(i64::MAX)
}

/// The remaining TTL etcd reports (`TimeToLive`, whole seconds, rounded down)
/// as an upper bound: the lease expires within `reported + 1 s`, capped by the
/// granted TTL. `None` for a negative report (the lease is gone).
pub(crate) fn ttl_left(reported_secs: i64, granted_secs: i64) -> Option<Duration> {
    let reported = u64::try_from(reported_secs).ok()?;
    let granted = u64::try_from(granted_secs).unwrap_or(0);
    let bound = (reported + 1).min(granted.max(reported));
    Some(Duration::from_secs(bound))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttls_round_up_to_whole_seconds() {
        assert_eq!(etcd_ttl_secs(Duration::from_millis(10)), 1);
        assert_eq!(etcd_ttl_secs(Duration::from_millis(1000)), 1);
        assert_eq!(etcd_ttl_secs(Duration::from_millis(1001)), 2);
        assert_eq!(etcd_ttl_secs(Duration::from_secs(30)), 30);
        assert_eq!(etcd_ttl_secs(Duration::MAX), i64::MAX);
    }

    #[test]
    fn remaining_ttl_is_an_upper_bound() {
        assert_eq!(ttl_left(0, 1), Some(Duration::from_secs(1)));
        assert_eq!(ttl_left(4, 30), Some(Duration::from_secs(5)));
        assert_eq!(ttl_left(30, 30), Some(Duration::from_secs(30)));
        assert_eq!(ttl_left(-1, 30), None);
    }
}
