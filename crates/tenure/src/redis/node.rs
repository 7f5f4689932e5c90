//! [`RedisStore`] as a quorum node: the [`QuorumNode`] operations a
//! [`QuorumStore`](crate::quorum::QuorumStore) runs on each of its masters, and
//! the quorum-only scripts (`scripts/quorum_fence.lua`,
//! `scripts/quorum_extend.lua`).

use std::sync::LazyLock;
use std::time::Duration;

use async_trait::async_trait;
use redis::Script;

use super::keys::millis;
use super::lease::RedisStore;
use super::options::RedisOptions;
use crate::error::Result;
use crate::lease::{
    AcquireReply, HolderInfo, LeaseStatus, LeaseStore, ReleaseOutcome, ReleaseWatch,
};
use crate::quorum::node::{Ballot, NodeStatus, QuorumNode, Renewal};
use crate::token::OwnerToken;

pub(super) const RAISE_FENCE_LUA: &str = include_str!("scripts/quorum_fence.lua");
pub(super) const EXTEND_LUA: &str = include_str!("scripts/quorum_extend.lua");
const RELEASE_LUA: &str = include_str!("scripts/quorum_release.lua");
static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(RELEASE_LUA));

impl RedisStore {
    /// A store for one quorum node at `url`, without connecting. Its scripts go
    /// by `EVALSHA`, but none is sent again after a `NOSCRIPT` (an
    /// extend-or-take retried after the release could take the node); see
    /// [`quorum_scripts`](RedisStore::quorum_scripts).
    pub(crate) fn quorum_node(url: &str, options: RedisOptions) -> Result<RedisStore> {
        Ok(RedisStore::lazy(url, options)?.quorum_scripts())
    }

    /// Deletes one node's part of a quorum lease if it holds `token`; with
    /// `wake`, wakes every waiter (a quorum has no waiting line: its waiters
    /// race). An undo does not wake them: that would only make the next vote
    /// split too.
    async fn release_vote(&self, key: &str, token: &OwnerToken, wake: bool) -> Result<bool> {
        let channel = self.keys().released(key);
        let args = [token.as_str(), &channel, if wake { "1" } else { "0" }];
        let keys = [self.keys().lease(key)];
        let script = (&*RELEASE, RELEASE_LUA);
        let released: i64 = match self.run_script("release", script, &keys, &args).await {
            // Not run, and the store has forgotten the script: a release may
            // go again at once (later than the vote it undoes is safe).
            Err(e) if super::lease::is_noscript(&e) => {
                self.run_script("release", script, &keys, &args).await?
            }
            reply => reply?,
        };
        Ok(released == 1)
    }
}

#[async_trait]
impl QuorumNode for RedisStore {
    async fn ping(&self) -> Result<()> {
        self.conn()
            .call("connect", "", |mut c| async move {
                redis::cmd("PING").query_async::<()>(&mut c).await
            })
            .await
    }

    async fn vote(
        &self,
        key: &str,
        token: &OwnerToken,
        ttl: Duration,
        holder: Option<&HolderInfo>,
    ) -> Result<Ballot> {
        Ok(match self.try_acquire(key, token, ttl, holder).await? {
            AcquireReply::Acquired { fence, .. } => Ballot::Granted(fence.get()),
            AcquireReply::Held { ttl_left } => Ballot::Held(ttl_left),
        })
    }

    async fn undo(&self, key: &str, token: &OwnerToken) -> Result<bool> {
        self.release_vote(key, token, false).await
    }

    async fn raise_fence(&self, key: &str, token: &OwnerToken, fence: u64) -> Result<bool> {
        let keys = self.keys().lease_and_fence(key);
        let args = [token.as_str(), &fence.to_string()];
        let script = self.counters().raise.pair();
        let raised: i64 = match self.run_script("raise fence", script, &keys, &args).await {
            // Not run, and the store has forgotten the script (a restarted
            // node): the raise may go again at once, later is as good — it
            // only ever raises the counter while the key holds our token —
            // and a won ballot is not refused for a node's script cache.
            Err(e) if super::lease::is_noscript(&e) => {
                self.run_script("raise fence", script, &keys, &args).await?
            }
            reply => reply?,
        };
        Ok(raised >= 0 && raised.unsigned_abs() >= fence)
    }

    async fn extend_or_take(
        &self,
        key: &str,
        token: &OwnerToken,
        ttl: Duration,
        fence: u64,
        may_take: bool,
    ) -> Result<Renewal> {
        let keys = self.keys().lease_fence_holder(key);
        let args = [
            token.as_str(),
            &millis(ttl).to_string(),
            &fence.to_string(),
            if may_take { "1" } else { "0" },
        ];
        let code: i64 = self
            .run_script("extend", self.counters().take.pair(), &keys, &args)
            .await?;
        Ok(match code {
            1 => Renewal::Extended,
            2 => Renewal::Taken,
            _ => Renewal::NotOurs,
        })
    }

    async fn release(&self, key: &str, token: &OwnerToken) -> Result<ReleaseOutcome> {
        Ok(if self.release_vote(key, token, true).await? {
            ReleaseOutcome::Released
        } else {
            ReleaseOutcome::NotHeld
        })
    }

    async fn status(&self, key: &str) -> Result<NodeStatus> {
        // The owner is read right behind the status on the same connection;
        // a change of holder in between could only misattribute this node.
        let lease_key = self.keys().lease(key);
        let get = lease_key.clone();
        let owner = self.conn().call("status", &lease_key, |mut c| async move {
            redis::cmd("GET")
                .arg(get)
                .query_async::<Option<String>>(&mut c)
                .await
        });
        let (lease, owner) = tokio::join!(LeaseStore::status(self, key), owner);
        let lease: LeaseStatus = lease?;
        // A lease key that is not a string was refused by the status read.
        Ok(NodeStatus {
            owner: owner?.filter(|_| lease.held),
            lease,
        })
    }

    async fn watch_releases(&self, key: &str) -> ReleaseWatch {
        // No marker in line: a node's releases wake every watcher anyway.
        self.watch_channel(key, None, false).await
    }

    fn storage_key(&self, key: &str) -> String {
        self.keys().lease(key)
    }

    fn name(&self) -> String {
        self.describe()
    }
}
