//! The scripts that write a lease's fence counter, with the store's fence
//! retention in their text (`local fence_retention_ms = '…'`, the first code
//! line of `scripts/lease_settings.lua`, `scripts/quorum_fence.lua` and
//! `scripts/quorum_extend.lua`): a counter expires when no grant has touched
//! it for that long, and the clock floor keeps later fences above it (see
//! `docs/leases.md`, "Fences"). The scripts that take a fence also carry the
//! unit of the clock floor (`local fence_floor_unit = 'us'`, next in
//! `scripts/lease_settings.lua`): microseconds on one master, whole seconds on
//! the nodes of a quorum (see `fence::floor`). Both are settings of a store
//! for its whole life, so they are baked into its scripts rather than sent
//! with every call: the scripts' arguments stay as they are, and a quorum
//! node's scripts differ from a single master's (their own SHA1). So does
//! the command that publishes release notifications (see `publish`).

use std::sync::{Arc, LazyLock, OnceLock};
use std::time::Duration;

use redis::Script;

use super::keys::millis;
use super::publish::Publish;
use crate::fence::FloorUnit;

/// The line of every counter-writing script that names the retention.
const DEFAULT_LINE: &str = "local fence_retention_ms = '86400000'";

/// The line of every fence-taking script that names the floor's unit, as
/// written (microseconds), and as a quorum node runs it.
const MICROS_LINE: &str = "local fence_floor_unit = 'us'";
const SECONDS_LINE: &str = "local fence_floor_unit = 'seconds'";

/// A script and its text (the text goes by `EVAL` where a call needs it).
/// The script's SHA1 is computed at its first call, not when the store is
/// made: a one-shot process runs two or three of these scripts, and hashing
/// every one of them would cost it more than a round trip.
#[derive(Debug)]
pub(super) struct LuaScript {
    script: OnceLock<Script>,
    source: String,
}

impl LuaScript {
    /// `source` with the retention line set to `retention_ms`.
    #[cfg(feature = "quorum")]
    fn new(source: &str, retention_ms: u64) -> Self {
        Self::from_source(with_retention(source, retention_ms))
    }

    /// A script that takes fences (`scripts/lease_settings.lua` first): the
    /// retention line set to `retention_ms`, the floor's unit to `unit`,
    /// publishing with `publish`.
    fn floored(source: &str, retention_ms: u64, unit: FloorUnit, publish: Publish) -> Self {
        debug_assert!(source.contains(MICROS_LINE), "no floor unit line");
        let source = publish.apply(&with_retention(source, retention_ms));
        Self::from_source(match unit {
            FloorUnit::Micros => source,
            FloorUnit::WholeSeconds => source.replacen(MICROS_LINE, SECONDS_LINE, 1),
        })
    }

    fn from_source(source: String) -> Self {
        LuaScript {
            script: OnceLock::new(),
            source,
        }
    }

    /// The script and its text, as the store's script runners take them.
    pub(super) fn pair(&self) -> (&Script, &str) {
        let script = self.script.get_or_init(|| Script::new(&self.source));
        (script, &self.source)
    }
}

/// `source` with the retention line set to `retention_ms`.
fn with_retention(source: &str, retention_ms: u64) -> String {
    debug_assert!(source.contains(DEFAULT_LINE), "no retention line");
    let line = format!("local fence_retention_ms = '{retention_ms}'");
    source.replacen(DEFAULT_LINE, &line, 1)
}

/// Every script that writes a fence counter, for one retention, one unit of
/// the clock floor and one way of publishing release notifications.
#[derive(Debug)]
pub(super) struct CounterScripts {
    /// The retention they carry.
    #[cfg(feature = "quorum")]
    retention: Duration,
    /// `scripts/lease_acquire.lua`.
    pub(super) acquire: LuaScript,
    /// `scripts/lease_release.lua` (a hand-off takes a fence).
    pub(super) release: LuaScript,
    /// `scripts/lease_wait.lua`.
    pub(super) wait: LuaScript,
    /// `scripts/lease_leave.lua` (a hand-off takes a fence).
    pub(super) leave: LuaScript,
    /// `scripts/lease_keep.lua` (a hand-off takes a fence).
    pub(super) keep: LuaScript,
    /// `scripts/quorum_fence.lua`.
    #[cfg(feature = "quorum")]
    pub(super) raise: LuaScript,
    /// `scripts/quorum_extend.lua`.
    #[cfg(feature = "quorum")]
    pub(super) take: LuaScript,
}

/// The scripts of the default retention, publishing plainly, shared by every
/// store that keeps them: one master's (floored in microseconds), a quorum
/// node's (in whole seconds). Each is built when a store first needs it.
static DEFAULT: [LazyLock<Arc<CounterScripts>>; 2] = [
    LazyLock::new(|| default_scripts(FloorUnit::Micros)),
    LazyLock::new(|| default_scripts(FloorUnit::WholeSeconds)),
];

fn default_scripts(unit: FloorUnit) -> Arc<CounterScripts> {
    let retention = super::options::DEFAULT_FENCE_RETENTION;
    Arc::new(CounterScripts::build(retention, unit, Publish::Plain))
}

impl CounterScripts {
    /// The scripts for a fence retention of `retention`, fences floored in
    /// `unit`, and release notifications published with `publish`.
    pub(super) fn for_store(retention: Duration, unit: FloorUnit, publish: Publish) -> Arc<Self> {
        let default_retention = millis(super::options::DEFAULT_FENCE_RETENTION);
        if millis(retention) == default_retention && publish == Publish::Plain {
            let i = usize::from(unit == FloorUnit::WholeSeconds);
            return Arc::clone(&DEFAULT[i]);
        }
        Arc::new(Self::build(retention, unit, publish))
    }

    /// The retention these scripts carry.
    #[cfg(feature = "quorum")]
    pub(super) fn retention(&self) -> Duration {
        self.retention
    }

    fn build(retention: Duration, unit: FloorUnit, publish: Publish) -> Self {
        let ms = millis(retention);
        let floored = |source| LuaScript::floored(source, ms, unit, publish);
        CounterScripts {
            #[cfg(feature = "quorum")]
            retention,
            acquire: floored(super::lease::ACQUIRE_LUA),
            release: floored(super::lease::RELEASE_LUA),
            wait: floored(super::queue::WAIT_LUA),
            leave: floored(super::queue::LEAVE_LUA),
            keep: floored(super::keeper::KEEP_LUA),
            #[cfg(feature = "quorum")]
            raise: LuaScript::new(super::node::RAISE_FENCE_LUA, ms),
            #[cfg(feature = "quorum")]
            take: LuaScript::new(super::node::EXTEND_LUA, ms),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_counter_script_carries_the_retention() {
        let scripts =
            CounterScripts::for_store(Duration::from_secs(90), FloorUnit::Micros, Publish::Plain);
        for s in [
            &scripts.acquire,
            &scripts.release,
            &scripts.wait,
            &scripts.leave,
            &scripts.keep,
        ] {
            assert!(s.source.contains("local fence_retention_ms = '90000'"));
            assert!(!s.source.contains(DEFAULT_LINE));
        }
    }

    #[test]
    fn a_quorum_nodes_scripts_floor_in_whole_seconds() {
        for retention in [
            super::super::options::DEFAULT_FENCE_RETENTION,
            Duration::from_secs(90),
        ] {
            let one = CounterScripts::for_store(retention, FloorUnit::Micros, Publish::Plain);
            let node =
                CounterScripts::for_store(retention, FloorUnit::WholeSeconds, Publish::Plain);
            for (one, node) in [
                (&one.acquire, &node.acquire),
                (&one.release, &node.release),
                (&one.wait, &node.wait),
                (&one.leave, &node.leave),
                (&one.keep, &node.keep),
            ] {
                assert!(one.source.contains(MICROS_LINE) && !one.source.contains(SECONDS_LINE));
                assert!(node.source.contains(SECONDS_LINE) && !node.source.contains(MICROS_LINE));
                assert_ne!(one.pair().0.get_hash(), node.pair().0.get_hash());
            }
        }
    }
}
