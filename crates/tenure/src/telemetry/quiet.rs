//! Without the `metrics` feature every metric point is an empty inline
//! function: the store kinds are never computed and nothing is linked.

use std::borrow::Cow;
use std::time::Duration;

#[inline(always)]
pub(crate) fn acquisition(_: impl FnOnce() -> Cow<'static, str>, _: &'static str, _: Stopwatch) {}

#[inline(always)]
pub(crate) fn hold(_: impl FnOnce() -> Cow<'static, str>, _: tokio::time::Instant) {}

/// Where a latency metric starts: nothing to read without metrics.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Stopwatch;

/// Starts a latency metric's stopwatch (without metrics, reads no clock).
#[inline(always)]
pub(crate) fn stopwatch() -> Stopwatch {
    Stopwatch
}

/// A stopwatch started at a reading taken anyway.
#[inline(always)]
pub(crate) fn stopwatch_at(_: tokio::time::Instant) -> Stopwatch {
    Stopwatch
}

#[inline(always)]
pub(crate) fn renewal(_: impl FnOnce() -> Cow<'static, str>, _: &'static str) {}

#[inline(always)]
pub(crate) fn loss(_: impl FnOnce() -> Cow<'static, str>, _: &'static str) {}

#[inline(always)]
pub(crate) fn handoff(_: impl FnOnce() -> Cow<'static, str>, _: Duration) {}

#[inline(always)]
pub(crate) fn limit_decision(_: impl FnOnce() -> Cow<'static, str>, _: &'static str) {}

#[inline(always)]
pub(crate) fn limit_store(_: impl FnOnce() -> Cow<'static, str>, _: Duration) {}

#[cfg(feature = "quorum")]
#[inline(always)]
pub(crate) fn quorum_reply(_: &str, _: &'static str, _: &'static str) {}
