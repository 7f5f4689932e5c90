//! The clock of local lease deadlines.
//!
//! A holder's deadline is compared with the *store's* expiry, and the store's
//! clock keeps running while this host is suspended (a Redis server on another
//! machine certainly does). So deadlines are read on a clock that counts
//! suspended time too, never on one that stops:
//!
//! | OS | [`SystemClock`] reads | counts suspend |
//! |----|-----------------------|----------------|
//! | Linux, Android | `CLOCK_BOOTTIME` | yes |
//! | macOS, iOS | `CLOCK_MONOTONIC` (unlike `std::time::Instant`, which stops) | yes |
//! | other Unix | `CLOCK_MONOTONIC` | depends on the OS |
//! | elsewhere | `std::time::Instant` | depends on the OS |
//!
//! None of these clocks step when someone sets the wall clock. The SQLite store
//! expires leases on exactly this clock too (see
//! [`SqliteStore`](crate::sqlite::SqliteStore)), so a holder and the store
//! agree on every OS.
//!
//! Time is injected: a backend tells the lease layer which [`Clock`] its
//! deadlines are on ([`LeaseStore::clock`](crate::lease::store::LeaseStore::clock)),
//! and [`FakeClock`] lets a test jump forward as a suspend would.

use std::fmt::Debug;
use std::ops::{Add, Sub};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A reading of a [`Clock`]: the time elapsed since the clock's origin. Only
/// readings of the same clock can be compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Moment(Duration);

impl Moment {
    /// The reading `since_origin` after the clock's origin.
    pub const fn from_origin(since_origin: Duration) -> Self {
        Moment(since_origin)
    }

    /// The time since the clock's origin.
    pub const fn since_origin(self) -> Duration {
        self.0
    }

    /// `self - earlier`, or zero when `earlier` is later.
    pub fn saturating_duration_since(self, earlier: Moment) -> Duration {
        self.0.saturating_sub(earlier.0)
    }
}

impl Add<Duration> for Moment {
    type Output = Moment;
    /// Saturates instead of overflowing.
    fn add(self, d: Duration) -> Moment {
        Moment(self.0.saturating_add(d))
    }
}

impl Sub<Duration> for Moment {
    type Output = Moment;
    /// Saturates at the origin.
    fn sub(self, d: Duration) -> Moment {
        Moment(self.0.saturating_sub(d))
    }
}

/// A source of [`Moment`]s that never goes backwards.
pub trait Clock: Debug + Send + Sync + 'static {
    /// The current reading.
    fn now(&self) -> Moment;
}

/// The host clock described in the [module docs](self): counts suspended time
/// where the OS allows, never steps.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Moment {
        now()
    }
}

/// The current reading of [`SystemClock`].
pub fn now() -> Moment {
    Moment(system_since_origin())
}

#[cfg(any(target_os = "linux", target_os = "android"))]
const SYSTEM_CLOCK_ID: nix::time::ClockId = nix::time::ClockId::CLOCK_BOOTTIME;

#[cfg(all(unix, not(any(target_os = "linux", target_os = "android"))))]
const SYSTEM_CLOCK_ID: nix::time::ClockId = nix::time::ClockId::CLOCK_MONOTONIC;

/// The name of the system clock, for messages and docs.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(crate) const SYSTEM_CLOCK_NAME: &str = "CLOCK_BOOTTIME";
/// The name of the system clock, for messages and docs.
#[cfg(all(unix, not(any(target_os = "linux", target_os = "android"))))]
pub(crate) const SYSTEM_CLOCK_NAME: &str = "CLOCK_MONOTONIC";
/// The name of the system clock, for messages and docs.
#[cfg(not(unix))]
pub(crate) const SYSTEM_CLOCK_NAME: &str = "std::time::Instant";

/// Reads the system clock; `Err` only if the kernel refuses (it does not for
/// these clock ids on the supported systems).
#[cfg(unix)]
pub(crate) fn try_system_since_origin() -> Result<Duration, String> {
    let t = nix::time::clock_gettime(SYSTEM_CLOCK_ID)
        .map_err(|e| format!("clock_gettime({SYSTEM_CLOCK_NAME}) failed: {e}"))?;
    let secs = u64::try_from(t.tv_sec()).unwrap_or(0);
    let nanos = u32::try_from(t.tv_nsec()).unwrap_or(0);
    Ok(Duration::new(secs, nanos))
}

#[cfg(not(unix))]
pub(crate) fn try_system_since_origin() -> Result<Duration, String> {
    use std::sync::OnceLock;
    static ORIGIN: OnceLock<std::time::Instant> = OnceLock::new();
    Ok(ORIGIN.get_or_init(std::time::Instant::now).elapsed())
}

/// Reads the system clock. Should the kernel ever refuse (it does not for these
/// clock ids), a clock that stood still would let deadlines never pass, so the
/// reading falls back on `std::time::Instant` progress, which at least moves.
fn system_since_origin() -> Duration {
    use std::sync::OnceLock;
    static FALLBACK: OnceLock<(std::time::Instant, Duration)> = OnceLock::new();
    match try_system_since_origin() {
        Ok(d) => d,
        Err(e) => {
            tracing::error!(error = %e, "the system clock cannot be read; using std::time::Instant");
            let (at, base) = FALLBACK.get_or_init(|| (std::time::Instant::now(), Duration::ZERO));
            *base + at.elapsed()
        }
    }
}

/// A clock that moves only when told to: for tests that simulate a suspend
/// (a jump forward) without waiting for it. Clones share the same time.
///
/// ```
/// use std::time::Duration;
/// use tenure::clock::{Clock, FakeClock};
///
/// let clock = FakeClock::new();
/// let before = clock.now();
/// clock.advance(Duration::from_secs(3600)); // "the laptop slept for an hour"
/// assert_eq!(clock.now().saturating_duration_since(before), Duration::from_secs(3600));
/// ```
#[derive(Debug, Clone, Default)]
pub struct FakeClock(Arc<Mutex<Duration>>);

impl FakeClock {
    /// A clock at its origin.
    pub fn new() -> Self {
        Self::default()
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        let mut t = self.0.lock().unwrap_or_else(|e| e.into_inner());
        *t = t.saturating_add(by);
    }
}

impl Clock for FakeClock {
    fn now(&self) -> Moment {
        Moment(*self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_system_clock_moves_forward_with_std_instant() {
        let (a, s) = (now(), std::time::Instant::now());
        std::thread::sleep(Duration::from_millis(20));
        let (b, e) = (now(), s.elapsed());
        let moved = b.saturating_duration_since(a);
        // Without a suspend, both clocks measure the same interval.
        assert!(moved >= Duration::from_millis(20), "{moved:?}");
        assert!(moved <= e + Duration::from_millis(5), "{moved:?} vs {e:?}");
    }
}
