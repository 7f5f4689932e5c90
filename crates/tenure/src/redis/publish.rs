//! How the lease scripts publish release notifications: plain `PUBLISH`, or
//! sharded `SPUBLISH` on a Redis Cluster whose servers have it (Redis 7).
//!
//! A cluster forwards a plain `PUBLISH` over its bus to every node, whatever
//! the channel, so every hand-off costs a message to each node of the
//! cluster. A sharded `SPUBLISH` goes to the channel's slot only: its master
//! and that master's replicas. Every channel of a lease shares the lease's
//! hash tag, so it lives in the lease's slot and the script that hands over
//! publishes on its own master. The choice is made once, when the store
//! connects; the scripts carry it in their text (`local PUBLISH = 'PUBLISH'`
//! in `scripts/lease_line_basics.lua`), and the release subscriber subscribes
//! sharded channels too.

use super::conn::{Origin, RedisConn};

/// The line of `scripts/lease_line_basics.lua` that names the publish command.
pub(super) const PLAIN_LINE: &str = "local PUBLISH = 'PUBLISH'";

/// How release notifications are published.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) enum Publish {
    /// `PUBLISH` / `SUBSCRIBE`: one server, Sentinel, a quorum node, or a
    /// cluster of servers older than Redis 7.
    #[default]
    Plain,
    /// `SPUBLISH` / `SSUBSCRIBE`: a Redis Cluster of Redis 7 or later.
    Sharded,
}

impl Publish {
    /// Sharded on a Redis Cluster that knows `SPUBLISH`, else plain (also
    /// when the server cannot be asked: plain works everywhere).
    pub(super) async fn detect(conn: &RedisConn) -> Publish {
        if !matches!(conn.origin(), Origin::Cluster(_)) {
            return Publish::Plain;
        }
        if conn.knows_command("SPUBLISH").await {
            Publish::Sharded
        } else {
            Publish::Plain
        }
    }

    /// Whether notifications are sharded.
    pub(super) fn is_sharded(self) -> bool {
        self == Publish::Sharded
    }

    /// `source` publishing with this command (unchanged when it does not
    /// publish, or publishes plainly).
    pub(super) fn apply(self, source: &str) -> String {
        match self {
            Publish::Plain => source.to_string(),
            Publish::Sharded => source.replacen(PLAIN_LINE, "local PUBLISH = 'SPUBLISH'", 1),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_scripts_name_the_publish_command_once() {
        for source in [
            super::super::lease::RELEASE_LUA,
            super::super::queue::WAIT_LUA,
            super::super::queue::LEAVE_LUA,
            super::super::keeper::KEEP_LUA,
        ] {
            assert_eq!(source.matches(PLAIN_LINE).count(), 1);
            let sharded = Publish::Sharded.apply(source);
            assert!(!sharded.contains(PLAIN_LINE));
            assert!(!sharded.contains("'PUBLISH'"), "a plain PUBLISH is left");
        }
    }
}
