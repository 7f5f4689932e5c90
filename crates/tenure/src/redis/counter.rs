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
use super::publish::Publish;

/// The line of every counter-writing script that names the retention.
const DEFAULT_LINE: &str = "local fence_retention_ms = '86400000'";

/// A script and its text (the text goes by `EVAL` where a call needs it).
#[derive(Debug)]
pub(super) struct LuaScript {
    script: Script,
    source: String,
}

impl LuaScript {
    /// `source` with the retention line set to `retention_ms`, publishing
    /// with `publish`.
    fn new(source: &str, retention_ms: u64, publish: Publish) -> Self {
        debug_assert!(source.contains(DEFAULT_LINE), "no retention line");
        let line = format!("local fence_retention_ms = '{retention_ms}'");
        let source = publish.apply(&source.replacen(DEFAULT_LINE, &line, 1));
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

/// Every script that writes a fence counter, for one retention and one way
/// of publishing release notifications.
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

/// The scripts of the default retention, publishing plainly, shared by
/// every store that keeps them.
static DEFAULT: LazyLock<Arc<CounterScripts>> = LazyLock::new(|| {
    Arc::new(CounterScripts::build(
        millis(super::options::DEFAULT_FENCE_RETENTION),
        Publish::Plain,
    ))
});

impl CounterScripts {
    /// The scripts for a fence retention of `retention`, publishing with
    /// `publish`.
    pub(super) fn for_retention(retention: Duration, publish: Publish) -> Arc<Self> {
        let ms = millis(retention);
        if ms == millis(super::options::DEFAULT_FENCE_RETENTION) && publish == Publish::Plain {
            return Arc::clone(&DEFAULT);
        }
        Arc::new(Self::build(ms, publish))
    }

    fn build(ms: u64, publish: Publish) -> Self {
        let script = |source| LuaScript::new(source, ms, publish);
        CounterScripts {
            acquire: script(super::lease::ACQUIRE_LUA),
            release: script(super::lease::RELEASE_LUA),
            wait: script(super::queue::WAIT_LUA),
            leave: script(super::queue::LEAVE_LUA),
            #[cfg(feature = "quorum")]
            raise: script(super::node::RAISE_FENCE_LUA),
            #[cfg(feature = "quorum")]
            take: script(super::node::EXTEND_LUA),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_counter_script_carries_the_retention() {
        let scripts = CounterScripts::for_retention(Duration::from_secs(90), Publish::Plain);
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
