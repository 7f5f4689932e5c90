//! The clock of the in-process limit store: the processor's counter by
//! default, tokio's clock on request (see [`MemoryLimits::tokio_clock`]).
//!
//! [`MemoryLimits::tokio_clock`]: super::MemoryLimits::tokio_clock

use std::sync::OnceLock;

use crate::limit::Timestamp;

/// What a [`MemoryLimits`](super::MemoryLimits) reads its time on, started
/// at the wall-clock time it was made, so that windows line up with the Unix
/// epoch as on Redis.
#[derive(Debug, Clone)]
pub(super) struct StoreClock {
    source: Source,
    /// The wall-clock time when the clock was started.
    origin_wall: Timestamp,
}

/// The monotonic source of a [`StoreClock`], with its reading at the start.
#[derive(Debug, Clone)]
enum Source {
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
    /// The counter, started now. The first one made in a process detects and
    /// calibrates the counter against the OS clock, once (about 0.6 ms on a
    /// 2-core virtual machine; `quanta` gives it at most 200 ms).
    pub(super) fn counter() -> Self {
        // One clock for the process: making one asks the processor whether
        // its counter is invariant (`CPUID`, which a virtual machine may trap
        // at some microseconds a time), so only the first store asks.
        static COUNTER: OnceLock<quanta::Clock> = OnceLock::new();
        let clock = COUNTER.get_or_init(quanta::Clock::new).clone();
        let origin = clock.now();
        Self::started(Source::Counter { clock, origin })
    }

    /// tokio's clock, started now.
    pub(super) fn tokio() -> Self {
        let origin = tokio::time::Instant::now();
        Self::started(Source::Tokio { origin })
    }

    fn started(source: Source) -> Self {
        StoreClock {
            source,
            origin_wall: Timestamp::now_wall(),
        }
    }

    /// The time now: the wall-clock start plus what the source counted since
    /// (nothing if a reading went behind its start).
    #[inline]
    pub(super) fn now(&self) -> Timestamp {
        let elapsed = match &self.source {
            Source::Counter { clock, origin } => clock.now().saturating_duration_since(*origin),
            Source::Tokio { origin } => {
                tokio::time::Instant::now().saturating_duration_since(*origin)
            }
        };
        self.origin_wall.plus(elapsed)
    }
}
