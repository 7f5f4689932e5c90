//! The clock of the in-process limit store: the processor's counter by
//! default, tokio's clock on request (see [`MemoryLimits::tokio_clock`]).
//!
//! [`MemoryLimits::tokio_clock`]: super::MemoryLimits::tokio_clock

use std::sync::OnceLock;
use std::time::Duration;

/// Where a [`MemoryLimits`](super::MemoryLimits) reads the time elapsed since
/// it was made.
#[derive(Debug, Clone)]
pub(super) enum StoreClock {
    /// `quanta`'s clock: the processor's time-stamp counter, scaled to
    /// nanoseconds, where the processor says it ticks at a constant rate
    /// (invariant TSC), otherwise the OS's monotonic clock. Reading the
    /// counter takes a few nanoseconds where the C library's
    /// `clock_gettime` orders its read behind a fence.
    Counter {
        clock: quanta::Clock,
        origin: quanta::Instant,
    },
    /// tokio's `Instant`: `tokio::time::pause` and `advance` apply.
    Tokio { origin: tokio::time::Instant },
}

impl StoreClock {
    /// The counter, read from now on. The first one made in a process
    /// detects and calibrates the counter against the OS clock, once (about
    /// 0.6 ms on a 2-core virtual machine; `quanta` gives it at most 200 ms).
    pub(super) fn counter() -> Self {
        // One clock for the process: making one asks the processor whether
        // its counter is invariant (`CPUID`, which a virtual machine may trap
        // at some microseconds a time), so only the first store asks.
        static COUNTER: OnceLock<quanta::Clock> = OnceLock::new();
        let clock = COUNTER.get_or_init(quanta::Clock::new).clone();
        let origin = clock.now();
        StoreClock::Counter { clock, origin }
    }

    /// tokio's clock, read from now on.
    pub(super) fn tokio() -> Self {
        StoreClock::Tokio {
            origin: tokio::time::Instant::now(),
        }
    }

    /// The time since the clock was made (zero if a reading went behind its
    /// origin).
    #[inline]
    pub(super) fn elapsed(&self) -> Duration {
        match self {
            StoreClock::Counter { clock, origin } => clock.now().saturating_duration_since(*origin),
            StoreClock::Tokio { origin } => {
                tokio::time::Instant::now().saturating_duration_since(*origin)
            }
        }
    }
}
