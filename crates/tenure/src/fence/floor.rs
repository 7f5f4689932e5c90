//! The clock floor of fences: every store hands out `max(last fence + 1,
//! its clock)`, so a store that lost its counters or went back to older ones
//! (a restart without persistence, a failover to a replica that missed
//! writes, a counter dropped by its retention) still hands out a fence above
//! every fence handed out before — as long as the clock that grants next is
//! not behind the clock that granted the last fence by more than the time
//! between the two grants (one store: its clock has not stepped back by more
//! than the time since its last fence; a failover: the new master's clock
//! against the old one's). If it is, fences may repeat; a fenced resource
//! that checks the acquisition id ([`FenceStamp`](super::FenceStamp)) still
//! refuses the second holder's equal fence.
//!
//! # The unit: [`FloorUnit`]
//!
//! **One master per key** (a Redis master, Sentinel, a Redis Cluster, SQLite,
//! memory) floors by the clock in **microseconds**. Every fence is then at
//! most the clock of its grant (a key's grants are at least a script call
//! apart, far more than a microsecond), so a counter that is behind — a
//! replica promoted within the same second as grants it never received —
//! still goes on above every fence the old master handed out. A floor in
//! whole seconds would repeat them (the fault suite saw it under Sentinel).
//!
//! **The nodes of a quorum** floor by **whole seconds × 10⁶** while a counter
//! lives: they compute their fences independently and a won ballot settles
//! on their maximum, with a second round trip only when a majority did not
//! grant that same maximum; in microseconds no two nodes would ever agree,
//! in whole seconds they do whenever their counters agree and their clocks
//! read the same second. A **missing** counter there starts at the clock in
//! milliseconds × 1000: in whole seconds, a node restarted within the second
//! of its last grant would hand out that second's fences again, while every
//! fence handed out before is at most the clock of its grant and a restart
//! takes longer than a millisecond. A quorum node that comes back with an
//! *older* counter of the same second is excluded by the quorum's own
//! assumption (no node loses an acknowledged write, `docs/quorum.md`).
//!
//! The unit is a property of the store for its whole life, so it is chosen
//! where the store is built, not passed with every grant: the Rust stores
//! call [`next_fence`] with their unit; on Redis it is baked into the script
//! text next to the fence retention (`local fence_floor_unit = 'us'` in
//! `redis/scripts/lease_settings.lua`, replaced with `'seconds'` for a quorum
//! node by `redis/counter.rs`), so the scripts' arguments — shared with the
//! waiting line's scripts — stay as they are, and a single master's scripts
//! and a quorum node's are distinct scripts (their own SHA1).

use std::time::{SystemTime, UNIX_EPOCH};

/// Microseconds in a second.
const SECOND_US: u64 = 1_000_000;

/// The clock floor a store's fences use (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FloorUnit {
    /// The clock in microseconds: one master per key (a Redis master,
    /// Sentinel, a Redis Cluster, SQLite, memory).
    Micros,
    /// The clock in whole seconds × 10⁶ while a counter lives (milliseconds
    /// × 1000 for a missing one): the nodes of a quorum, which must agree.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    WholeSeconds,
}

/// The fence after `last` (the counter; `None` when there is none) at
/// `now_us`, the store's wall clock in microseconds since the Unix epoch,
/// floored in `unit`. `None` when the counter cannot grow (at `u64::MAX`).
pub(crate) fn next_fence(last: Option<u64>, now_us: u64, unit: FloorUnit) -> Option<u64> {
    match (last, unit) {
        (None, FloorUnit::Micros) => Some(now_us),
        (None, FloorUnit::WholeSeconds) => Some(now_us / 1000 * 1000),
        (Some(last), FloorUnit::Micros) => Some(last.checked_add(1)?.max(now_us)),
        (Some(last), FloorUnit::WholeSeconds) => {
            Some(last.checked_add(1)?.max(now_us / SECOND_US * SECOND_US))
        }
    }
}

/// This host's wall clock in microseconds since the Unix epoch (0 before it).
pub(crate) fn wall_clock_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_764_673_200_123_456;

    #[test]
    fn a_missing_counter_starts_at_the_clock_in_milliseconds() {
        assert_eq!(
            next_fence(None, NOW, FloorUnit::WholeSeconds),
            Some(1_764_673_200_123_000)
        );
    }

    #[test]
    fn a_living_counter_is_floored_by_the_second() {
        assert_eq!(
            next_fence(Some(17), NOW, FloorUnit::WholeSeconds),
            Some(1_764_673_200_000_000)
        );
        let same_second = 1_764_673_200_123_000;
        assert_eq!(
            next_fence(Some(same_second), NOW, FloorUnit::WholeSeconds),
            Some(same_second + 1)
        );
        let ahead = NOW + 5 * SECOND_US; // raised by a quorum, or a clock stepped back
        assert_eq!(
            next_fence(Some(ahead), NOW, FloorUnit::WholeSeconds),
            Some(ahead + 1)
        );
        assert_eq!(
            next_fence(Some(u64::MAX), NOW, FloorUnit::WholeSeconds),
            None
        );
    }

    #[test]
    fn a_single_master_floors_by_the_microsecond() {
        assert_eq!(next_fence(None, NOW, FloorUnit::Micros), Some(NOW));
        assert_eq!(next_fence(Some(17), NOW, FloorUnit::Micros), Some(NOW));
        assert_eq!(next_fence(Some(NOW), NOW, FloorUnit::Micros), Some(NOW + 1));
        assert_eq!(next_fence(Some(u64::MAX), NOW, FloorUnit::Micros), None);
    }

    #[test]
    fn a_counter_set_back_within_the_second_goes_on_above_its_fences() {
        // A replica promoted within the second of the grants it missed: its
        // counter is behind them, its clock a little ahead.
        let handed_out = [NOW, NOW + 1, NOW + 40];
        let behind = Some(NOW - 500_000);
        let next = next_fence(behind, NOW + 200, FloorUnit::Micros).unwrap();
        assert!(handed_out.iter().all(|&f| f < next), "{next}");
        // In whole seconds it repeats the first of them.
        let next = next_fence(behind, NOW + 200, FloorUnit::WholeSeconds).unwrap();
        assert!(next <= NOW, "{next}");
    }

    #[test]
    fn a_lost_counter_goes_on_above_the_fences_of_its_millisecond() {
        // Grants within one millisecond, then the counter is lost.
        let mut last = None;
        let mut fences = Vec::new();
        for us in 0..5 {
            let f = next_fence(last, NOW + us, FloorUnit::WholeSeconds).unwrap();
            fences.push(f);
            last = Some(f);
        }
        let after_restart = next_fence(None, NOW + 1000, FloorUnit::WholeSeconds).unwrap();
        assert!(
            fences.iter().all(|&f| f < after_restart),
            "{fences:?} {after_restart}"
        );
    }
}
