//! The host clock SQLite leases expire on.
//!
//! Expiry instants are stored in the database and compared by *other processes*,
//! so the clock must be shared by every process on the host and must not jump when
//! someone sets the wall clock (NTP steps, `date -s`, a VM resuming with a stale
//! clock). Two Linux clocks qualify:
//!
//! - `CLOCK_MONOTONIC`: system-wide, never steps, stops while the machine is
//!   suspended;
//! - `CLOCK_BOOTTIME`: the same, but keeps counting during suspend.
//!
//! warden uses `CLOCK_MONOTONIC`, because it is the clock behind
//! `std::time::Instant` and so behind every holder's *local* lease deadline (the
//! lost-lease signal). With the store and the holders on one clock, a suspend can
//! never make the store hand a lease to someone else while its holder still
//! believes, by its own deadline, that it is alone. (With `CLOCK_BOOTTIME` a
//! long suspend would expire every lease in the store while each holder's local
//! deadline, measured on `CLOCK_MONOTONIC`, had not moved.)
//!
//! Both clocks start over at boot, so every expiry instant is stored with the
//! boot id (`/proc/sys/kernel/random/boot_id`): a lease written during another
//! boot is expired. As a second guard (and the only one where no boot id exists),
//! a lease whose remaining time exceeds its own TTL is expired too — that only
//! happens when the clock went backwards.

use std::sync::Arc;

/// Where Linux publishes a random id that changes at every boot.
const BOOT_ID_PATH: &str = "/proc/sys/kernel/random/boot_id";

/// A reading of the host clock: which boot, and microseconds on the monotonic
/// clock of that boot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HostTime {
    pub(crate) boot: Arc<str>,
    pub(crate) us: i64,
}

impl HostTime {
    /// Milliseconds on the monotonic clock (lease expiries are stored in ms).
    pub(crate) fn ms(&self) -> i64 {
        self.us / 1000
    }
}

/// The boot id of this host, read once per backend.
pub(crate) fn boot_id() -> Arc<str> {
    match std::fs::read_to_string(BOOT_ID_PATH) {
        Ok(id) if !id.trim().is_empty() => id.trim().into(),
        // No boot id (not Linux, or /proc not mounted): the "remaining time
        // exceeds the TTL" rule alone detects a restarted clock.
        _ => "unknown".into(),
    }
}

/// Microseconds on the host's monotonic clock.
#[cfg(unix)]
pub(crate) fn monotonic_us() -> Result<i64, String> {
    use nix::time::{ClockId, clock_gettime};
    let now = clock_gettime(ClockId::CLOCK_MONOTONIC)
        .map_err(|e| format!("clock_gettime(CLOCK_MONOTONIC) failed: {e}"))?;
    Ok(now
        .tv_sec()
        .saturating_mul(1_000_000)
        .saturating_add(now.tv_nsec() / 1000))
}

/// Microseconds on the host's monotonic clock. Without a system-wide monotonic
/// clock, the wall clock is the only time all processes share; a wall-clock step
/// then shortens or lengthens the leases that are held at that moment.
#[cfg(not(unix))]
pub(crate) fn monotonic_us() -> Result<i64, String> {
    wall_us()
}

/// Microseconds since the Unix epoch on the wall clock.
pub(crate) fn wall_us() -> Result<i64, String> {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|e| format!("wall clock before 1970: {e}"))?;
    Ok(i64::try_from(since.as_micros()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_monotonic_clock_moves_forward() {
        let a = monotonic_us().expect("clock");
        std::thread::sleep(std::time::Duration::from_millis(20));
        let b = monotonic_us().expect("clock");
        assert!(b - a >= 20_000, "{a} -> {b}");
    }

    #[test]
    fn boot_id_is_stable_within_a_boot() {
        assert_eq!(boot_id(), boot_id());
        assert!(!boot_id().is_empty());
    }
}
