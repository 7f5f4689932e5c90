//! The scripts that write a lease's fence counter, with the store's fence
//! retention in their text (`local fence_retention_ms = '…'`, the first code
//! line of `scripts/lease_fence.lua`, `scripts/quorum_fence.lua` and
//! `scripts/quorum_extend.lua`): a counter expires when no grant has touched
//! it for that long, and the clock floor keeps later fences above it (see
//! `docs/leases.md`, "Fences").

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use redis::Script;

use super::keys::millis;

/// The line of every counter-writing script that names the retention.
const DEFAULT_LINE: &str = "local fence_retention_ms = '86400000'";

/// A script and its text (the text goes by `EVAL` where a call needs it).
#[derive(Debug)]
pub(super) struct LuaScript {
    script: Script,
    source: String,
}

impl LuaScript {
    /// `source` with the retention line set to `retention_ms`.
    fn new(source: &str, retention_ms: u64) -> Self {
        debug_assert!(source.contains(DEFAULT_LINE), "no retention line");
        let line = format!("local fence_retention_ms = '{retention_ms}'");
        let source = source.replacen(DEFAULT_LINE, &line, 1);
        LuaScript {
            script: Script::new(&source),
            source,
        }
    }

    /// The script and its text, as the store's script runners take them.
    pub(super) fn pair(&self) -> (&Script, &str) {
        (&self.script, &self.source)
    }
}

/// Every script that writes a fence counter, for one retention.
#[derive(Debug)]
pub(super) struct CounterScripts {
    /// `scripts/lease_acquire.lua`.
    pub(super) acquire: LuaScript,
    /// `scripts/lease_release.lua` (a hand-off takes a fence).
    pub(super) release: LuaScript,
    /// `scripts/lease_wait.lua`.
    pub(super) wait: LuaScript,
    /// `scripts/lease_leave.lua` (a hand-off takes a fence).
    pub(super) leave: LuaScript,
    /// `scripts/quorum_fence.lua`.
    #[cfg(feature = "quorum")]
    pub(super) raise: LuaScript,
    /// `scripts/quorum_extend.lua`.
    #[cfg(feature = "quorum")]
    pub(super) take: LuaScript,
}

/// The scripts of the default retention, shared by every store that keeps it.
static DEFAULT: LazyLock<Arc<CounterScripts>> = LazyLock::new(|| {
    Arc::new(CounterScripts::build(millis(
        super::options::DEFAULT_FENCE_RETENTION,
    )))
});

impl CounterScripts {
    /// The scripts for a fence retention of `retention`.
    pub(super) fn for_retention(retention: Duration) -> Arc<Self> {
        let ms = millis(retention);
        if ms == millis(super::options::DEFAULT_FENCE_RETENTION) {
            return Arc::clone(&DEFAULT);
        }
        Arc::new(Self::build(ms))
    }

    fn build(ms: u64) -> Self {
        CounterScripts {
            acquire: LuaScript::new(super::lease::ACQUIRE_LUA, ms),
            release: LuaScript::new(super::lease::RELEASE_LUA, ms),
            wait: LuaScript::new(super::queue::WAIT_LUA, ms),
            leave: LuaScript::new(super::queue::LEAVE_LUA, ms),
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
        let scripts = CounterScripts::for_retention(Duration::from_secs(90));
        for s in [
            &scripts.acquire,
            &scripts.release,
            &scripts.wait,
            &scripts.leave,
        ] {
            assert!(s.source.contains("local fence_retention_ms = '90000'"));
            assert!(!s.source.contains(DEFAULT_LINE));
        }
    }
}
