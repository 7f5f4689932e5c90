//! Key layout and TTL mapping on etcd.
//!
//! Lease `orders:42` is the key `{prefix}orders:42`. What belongs to it sits
//! right after it, behind a NUL byte — which no tenure key contains (control
//! characters are refused), so it never collides with another lease's key:
//!
//! - `{prefix}orders:42\0holder`: who holds the lease (see `holder.rs`);
//! - `{prefix}orders:42\0record`: the fenced record (election id, run-once
//!   result);
//! - `{prefix}orders:42\0permit\0{token}`: one key per semaphore permit;
//! - `{prefix}orders:42\0line\0{token}`: one key per waiter in the lease's
//!   waiting line (see `line.rs`).
//!
//! So the range `[lease key, lease key + "\x01")` holds a lease and everything
//! next to it, and one watch over it sees them all.

use std::time::Duration;

/// The etcd key of lease `key` under `prefix`: `tenure/lease/orders:42`.
pub(crate) fn lease_key(prefix: &str, key: &str) -> String {
    format!("{prefix}{key}")
}

/// The etcd key of the fenced record next to the lease key `lease_key`.
pub(crate) fn record_key(lease_key: &str) -> String {
    format!("{lease_key}\0record")
}

/// The prefix of the permit keys of the semaphore on `lease_key`.
pub(crate) fn permits_prefix(lease_key: &str) -> String {
    format!("{lease_key}\0permit\0")
}

/// The prefix of the member keys (holders and waiters) of the read-write
/// lease on `lease_key`.
pub(crate) fn rw_prefix(lease_key: &str) -> String {
    format!("{lease_key}\0rw\0")
}

/// What follows a lease key in the names of its waiting line's places.
const LINE: &str = "\0line\0";

/// The prefix of the waiting line's places of the lease key `lease_key`.
pub(crate) fn line_prefix(lease_key: &str) -> String {
    format!("{lease_key}{LINE}")
}

/// The lease key of a place in a waiting line (a key under [`line_prefix`]);
/// `None` for any other key. Lease keys contain no NUL.
pub(crate) fn lease_of_place(etcd_key: &[u8]) -> Option<&[u8]> {
    let mark = LINE.as_bytes();
    let at = etcd_key.windows(mark.len()).position(|w| w == mark)?;
    Some(&etcd_key[..at])
}

/// The permit key of `token` under `permits_prefix`.
pub(crate) fn permit_key(permits_prefix: &str, token: &str) -> String {
    format!("{permits_prefix}{token}")
}

/// The end of the range of keys starting with `prefix` (etcd's `range_end`):
/// the prefix with its last byte raised by one. Only used on prefixes that
/// end in a NUL byte or a lease key's own end, so no byte is ever `0xff`.
pub(crate) fn range_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    // All 0xff (cannot happen for UTF-8 text): the whole key space after it.
    vec![0]
}

/// The end of the range holding lease key `lease_key` and its companions
/// (record, permits): `lease_key` followed by `\x01`.
pub(crate) fn companions_end(lease_key: &str) -> Vec<u8> {
    let mut end = lease_key.as_bytes().to_vec();
    end.push(1);
    end
}

/// A fence as it starts a record's value: 20 decimal digits, zero-padded, so
/// that etcd's byte-wise comparison of values orders records by fence (a
/// `u64` has at most 20 digits).
pub(crate) fn fence_digits(fence: u128) -> String {
    format!("{fence:020}")
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
    fn a_place_names_its_lease_key_and_no_other_companion_does() {
        let lease = lease_key("tenure/lease/", "a");
        let place = permit_key(&line_prefix(&lease), "ff00");
        assert_eq!(lease_of_place(place.as_bytes()), Some(lease.as_bytes()));
        for other in [
            lease.clone(),
            record_key(&lease),
            permit_key(&permits_prefix(&lease), "ff00"),
        ] {
            assert_eq!(lease_of_place(other.as_bytes()), None, "{other:?}");
        }
    }

    #[test]
    fn companions_sort_between_the_lease_key_and_its_range_end() {
        let lease = lease_key("tenure/lease/", "a");
        let end = companions_end(&lease);
        for companion in [
            lease.clone(),
            record_key(&lease),
            permit_key(&permits_prefix(&lease), "ff00"),
            permit_key(&line_prefix(&lease), "ff00"),
        ] {
            assert!(companion.as_bytes() >= lease.as_bytes());
            assert!(companion.as_bytes() < end.as_slice(), "{companion:?}");
        }
        // Another lease whose key extends this one is outside the range.
        let other = lease_key("tenure/lease/", "a:b");
        assert!(other.as_bytes() >= end.as_slice());
        assert_eq!(range_end("ab\0"), b"ab\x01");
        // The line and the permits do not overlap.
        assert!(
            range_end(&permits_prefix(&lease)).as_slice() <= line_prefix(&lease).as_bytes()
                || range_end(&line_prefix(&lease)).as_slice() <= permits_prefix(&lease).as_bytes()
        );
        assert_eq!(range_end("a"), b"b");
    }

    #[test]
    fn fence_digits_order_like_fences() {
        assert_eq!(fence_digits(7), "00000000000000000007");
        let max = fence_digits(u128::from(u64::MAX) + 1);
        assert_eq!(max.len(), 20);
        assert!(fence_digits(9) < fence_digits(10));
        assert!(fence_digits(u128::from(u64::MAX)) < max);
    }

    #[test]
    fn remaining_ttl_is_an_upper_bound() {
        assert_eq!(ttl_left(0, 1), Some(Duration::from_secs(1)));
        assert_eq!(ttl_left(4, 30), Some(Duration::from_secs(5)));
        assert_eq!(ttl_left(30, 30), Some(Duration::from_secs(30)));
        assert_eq!(ttl_left(-1, 30), None);
    }
}
