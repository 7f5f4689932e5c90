//! The host clock SQLite leases expire on.
//!
//! Expiry instants are stored in the database and compared by *other processes*,
//! so the clock must be shared by every process on the host and must not jump when
//! someone sets the wall clock (NTP steps, `date -s`, a VM resuming with a stale
//! clock). It must also be the clock of every holder's *local* deadline (the
//! lost-lease signal): with the store and the holders on one clock, a suspend can
//! never make the store hand a lease to someone else while its holder still
//! believes, by its own deadline, that it is alone.
//!
//! So the store reads exactly the clock of [`crate::clock::SystemClock`]:
//!
//! - Linux: `CLOCK_BOOTTIME` (system-wide, never steps, keeps counting during
//!   suspend). Until this version the store used `CLOCK_MONOTONIC`, which stops
//!   during suspend, while holders used `std::time::Instant` (the same clock).
//!   Rows written that way are recognised by their untagged boot id and still
//!   read on `CLOCK_MONOTONIC`, so a lease held across an upgrade keeps its
//!   expiry.
//! - macOS: `CLOCK_MONOTONIC`, which there counts sleep (the store always used
//!   it; holders used `std::time::Instant`, which stops during sleep, and now
//!   use `CLOCK_MONOTONIC` too).
//! - Other Unix systems: `CLOCK_MONOTONIC` on both sides.
//! - Elsewhere there is no clock shared by all processes that tenure can read,
//!   so the store falls back on the wall clock (a wall-clock step then shortens
//!   or lengthens the leases held at that moment), and holders use
//!   `std::time::Instant`.
//!
//! The clocks start over at boot, so every expiry instant is stored with the
//! boot id (`/proc/sys/kernel/random/boot_id`): a lease written during another
//! boot is expired. As a second guard (and the only one where no boot id exists),
//! a lease whose remaining time exceeds its own TTL is expired too — that only
//! happens when the clock went backwards.

use std::sync::Arc;

use crate::duration::micros_i64;

/// Where Linux publishes a random id that changes at every boot.
const BOOT_ID_PATH: &str = "/proc/sys/kernel/random/boot_id";

/// A reading of the host clock: which boot, and microseconds on the store
/// clock of that boot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HostTime {
    /// The boot id, tagged with the clock where it changed (see [`boot_id`]).
    pub(crate) boot: Arc<str>,
    pub(crate) us: i64,
    /// The bare boot id and a `CLOCK_MONOTONIC` reading, for rows written by
    /// versions that stored `CLOCK_MONOTONIC` expiries (Linux only).
    pub(crate) legacy: Option<(Arc<str>, i64)>,
}

impl HostTime {
    /// Milliseconds on the store clock (lease expiries are stored in ms).
    pub(crate) fn ms(&self) -> i64 {
        self.us / 1000
    }

    /// Milliseconds "now" for a row stamped with `boot`: on the store clock when
    /// the row is of this boot and clock, on `CLOCK_MONOTONIC` when it is a
    /// legacy row of this boot, `None` when it is of another boot.
    pub(crate) fn ms_for(&self, boot: &str) -> Option<i64> {
        if boot == &*self.boot {
            return Some(self.ms());
        }
        match &self.legacy {
            Some((bare, us)) if boot == &**bare => Some(us / 1000),
            _ => None,
        }
    }

    /// Reads the host clock (and, on Linux, the legacy clock).
    pub(crate) fn read(boot: &Arc<str>, bare_boot: &Arc<str>) -> Result<Self, String> {
        Ok(HostTime {
            boot: Arc::clone(boot),
            us: store_us()?,
            legacy: legacy_us()?.map(|us| (Arc::clone(bare_boot), us)),
        })
    }
}

/// The boot id of this host, read once per backend.
pub(crate) fn bare_boot_id() -> Arc<str> {
    match read_line(BOOT_ID_PATH) {
        Some(id) if !id.trim().is_empty() => id.trim().into(),
        // No boot id (not Linux, or /proc not mounted): the "remaining time
        // exceeds the TTL" rule alone detects a restarted clock.
        _ => "unknown".into(),
    }
}

/// The first line of the small file at `path` (at most 64 bytes are read):
/// one read of a /proc file, where `read_to_string` would also ask for its
/// size (which /proc does not know) and read three times.
fn read_line(path: &str) -> Option<String> {
    use std::io::Read;
    let mut file = std::fs::File::open(path).ok()?;
    let mut buf = [0u8; 64];
    let mut len = 0;
    while len < buf.len() && !buf[..len].contains(&b'\n') {
        match file.read(&mut buf[len..]) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    let line = buf[..len].split(|&b| b == b'\n').next().unwrap_or_default();
    String::from_utf8(line.to_vec()).ok()
}

/// The boot id of the host, as rows are stamped with it.
#[cfg(test)]
pub(crate) fn boot_id() -> Arc<str> {
    boot_id_of(&bare_boot_id())
}

/// The boot id rows are stamped with, from the bare one (`bare`). On Linux it
/// carries the clock's name, because the store clock changed there (from
/// `CLOCK_MONOTONIC`): a row with the bare id is a legacy row (see
/// [`HostTime::ms_for`]).
pub(crate) fn boot_id_of(bare: &Arc<str>) -> Arc<str> {
    if cfg!(any(target_os = "linux", target_os = "android")) {
        format!("{bare}/boottime").into()
    } else {
        Arc::clone(bare)
    }
}

/// Microseconds on the store clock: the deadline clock of the lease layer.
#[cfg(unix)]
pub(crate) fn store_us() -> Result<i64, String> {
    let d = crate::clock::try_system_since_origin()?;
    Ok(micros_i64(d))
}

/// Microseconds on the store clock. Without a system-wide monotonic clock, the
/// wall clock is the only time all processes share; a wall-clock step then
/// shortens or lengthens the leases that are held at that moment.
#[cfg(not(unix))]
pub(crate) fn store_us() -> Result<i64, String> {
    wall_us()
}

/// `CLOCK_MONOTONIC` microseconds, where older versions stored expiries on it
/// while the store clock is now another one.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn legacy_us() -> Result<Option<i64>, String> {
    use nix::time::{ClockId, clock_gettime};
    let now = clock_gettime(ClockId::CLOCK_MONOTONIC)
        .map_err(|e| format!("clock_gettime(CLOCK_MONOTONIC) failed: {e}"))?;
    Ok(Some(
        now.tv_sec()
            .saturating_mul(1_000_000)
            .saturating_add(now.tv_nsec() / 1000),
    ))
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn legacy_us() -> Result<Option<i64>, String> {
    Ok(None)
}

/// Microseconds since the Unix epoch on the wall clock.
pub(crate) fn wall_us() -> Result<i64, String> {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|e| format!("wall clock before 1970: {e}"))?;
    Ok(micros_i64(since))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_store_clock_moves_forward() {
        let a = store_us().expect("clock");
        std::thread::sleep(std::time::Duration::from_millis(20));
        let b = store_us().expect("clock");
        assert!(b - a >= 20_000, "{a} -> {b}");
    }

    #[test]
    fn boot_id_is_stable_within_a_boot() {
        assert_eq!(boot_id(), boot_id());
        assert!(!boot_id().is_empty());
    }

    #[test]
    fn read_line_gives_the_first_line_of_at_most_64_bytes() {
        let dir = tempfile::tempdir().expect("dir");
        let file = |name: &str, text: &[u8]| {
            let path = dir.path().join(name);
            std::fs::write(&path, text).expect("write");
            path.to_str().expect("utf-8 path").to_owned()
        };
        let id = "6f1c2a8e-0b7d-4c1e-9a55-3d2f1e0c9b71";
        assert_eq!(
            read_line(&file("id", format!("{id}\n").as_bytes())).as_deref(),
            Some(id)
        );
        assert_eq!(read_line(&file("two", b"a\nb\n")).as_deref(), Some("a"));
        assert_eq!(read_line(&file("empty", b"")).as_deref(), Some(""));
        let long = "x".repeat(100);
        assert_eq!(
            read_line(&file("long", long.as_bytes())),
            Some("x".repeat(64))
        );
        assert_eq!(read_line(&file("bytes", b"\xff\xfe\n")), None);
        assert_eq!(
            read_line(&dir.path().join("missing").to_string_lossy()),
            None
        );
        if std::path::Path::new(BOOT_ID_PATH).exists() {
            let whole = std::fs::read_to_string(BOOT_ID_PATH).expect("boot id");
            assert_eq!(read_line(BOOT_ID_PATH).as_deref(), Some(whole.trim()));
        }
    }

    #[test]
    fn the_store_clock_is_the_deadline_clock() {
        // Read in this order, the deadline clock can only be ahead.
        let store = store_us().expect("clock");
        let deadline = crate::clock::now().since_origin().as_micros();
        let store = u128::try_from(store).expect("positive");
        assert!(
            deadline >= store && deadline - store < 50_000,
            "{store} vs {deadline}"
        );
    }
}
