//! For store implementers: what a store provides for gates (semaphores and
//! read-write leases). Users need none of it.

use std::fmt::Debug;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use super::Mode;
use crate::error::Result;
use crate::fence::Fence;
use crate::lease::{
    AcquireReply, ExtendReply, Holder, HolderInfo, QueuePlace, ReleaseOutcome, ReleaseWatch,
};
use crate::token::OwnerToken;

/// Which family of gates a key belongs to: a semaphore and a read-write
/// lease of the same key are different gates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum GateKind {
    /// An expiring semaphore ([`Semaphore`](crate::semaphore::Semaphore)).
    Semaphore,
    /// A read-write lease ([`RwLease`](crate::rwlease::RwLease)).
    ReadWrite,
}

impl GateKind {
    /// A short name for key layouts and messages: `permits` or `rw`.
    pub fn name(self) -> &'static str {
        match self {
            GateKind::Semaphore => "permits",
            GateKind::ReadWrite => "rw",
        }
    }
}

/// One look at a gate by a would-be holder.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct GateAsk<'a> {
    /// The asker's owner token (the same for every look of one wait).
    pub token: &'a OwnerToken,
    /// What it asks for.
    pub mode: Mode,
    /// The TTL of the grant (and of its place in line).
    pub ttl: Duration,
    /// Whether to stand in line when refused (a waiter) or not (one attempt).
    pub stand: bool,
    /// What to record about the holder, if anything.
    pub holder: Option<&'a HolderInfo>,
    /// The place the asker's last look returned, if any.
    pub place: Option<&'a QueuePlace>,
}

impl<'a> GateAsk<'a> {
    /// A look by `token` for `mode` with `ttl`, not standing in line and
    /// recording no holder.
    pub fn new(token: &'a OwnerToken, mode: Mode, ttl: Duration) -> Self {
        GateAsk {
            token,
            mode,
            ttl,
            stand: false,
            holder: None,
            place: None,
        }
    }
}

/// What is recorded about a holder of a gate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct HolderRecord {
    pub(crate) host: String,
    pub(crate) pid: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) label: Option<String>,
}

impl From<&HolderInfo> for HolderRecord {
    fn from(info: &HolderInfo) -> Self {
        HolderRecord {
            host: info.host.clone(),
            pid: info.pid,
            label: info.label.clone(),
        }
    }
}

impl HolderRecord {
    pub(crate) fn report(&self, held_for: Option<Duration>) -> Holder {
        let mut info = HolderInfo::this_process();
        info.host.clone_from(&self.host);
        info.pid = self.pid;
        info.label.clone_from(&self.label);
        Holder::new(info, held_for)
    }
}

/// One holder of a gate, as [`GateStore::status`] reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct GateHolder {
    /// What it holds.
    pub mode: Mode,
    /// The fence of its grant.
    pub fence: Fence,
    /// Its remaining TTL.
    pub ttl_left: Duration,
    /// Who it is, when it recorded itself; never the owner token.
    pub holder: Option<Holder>,
}

/// A read-only view of a gate.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct GateStatus {
    /// The last fence handed out, if any.
    pub fence: Option<Fence>,
    /// The holders, in the order they were granted.
    pub holders: Vec<GateHolder>,
    /// What the waiters in line ask for, first in line first.
    pub waiting: Vec<Mode>,
    /// Where the store keeps the gate (e.g. the Redis key).
    pub storage_key: String,
}

/// What a store provides for gates. Every call is atomic on the store.
///
/// A gate is a set of holders and a waiting line in arrival order under one
/// key: see [`gate`](crate::gate) for the rules every store applies.
#[async_trait]
pub trait GateStore: Debug + Send + Sync + 'static {
    /// One look: claims a grant made to `ask.token` while it waited, grants
    /// when nobody waits and `ask.mode` fits beside the holders, else keeps
    /// (or, with `ask.stand`, takes) the asker's place in line. The place
    /// returned is the asker's while it waits.
    async fn look(&self, key: &str, ask: GateAsk<'_>)
    -> Result<(AcquireReply, Option<QueuePlace>)>;

    /// Resets the TTL of `token`'s grant (of `mode`) if it still holds one.
    async fn extend(
        &self,
        mode: Mode,
        key: &str,
        token: &OwnerToken,
        ttl: Duration,
    ) -> Result<ExtendReply>;

    /// Gives back `token`'s grant (of `mode`) or its place in line, and
    /// admits the waiters that fit now.
    async fn release(&self, mode: Mode, key: &str, token: &OwnerToken) -> Result<ReleaseOutcome>;

    /// Reads the gate without changing it.
    async fn status(&self, kind: GateKind, key: &str) -> Result<GateStatus>;

    /// Starts watching the gate: for grants to `token`, or (`None`) for
    /// every change. A store that cannot push gives a polling watch.
    async fn watch(&self, kind: GateKind, key: &str, token: Option<&OwnerToken>) -> ReleaseWatch;

    /// The gates of `kind` held now whose key starts with `prefix`, in key
    /// order. The default refuses with [`Error::Config`](crate::Error::Config).
    async fn list(&self, kind: GateKind, prefix: &str) -> Result<Vec<(String, GateStatus)>> {
        let _ = (kind, prefix);
        Err(crate::Error::Config {
            url: self.describe_gates(),
            reason: "this store cannot list its gates".into(),
        })
    }

    /// A short description for messages.
    fn describe_gates(&self) -> String;
}
