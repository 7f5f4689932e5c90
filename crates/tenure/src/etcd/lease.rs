//! The lease store on etcd: etcd leases, transactions and watches.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::watch;
use tonic::Status;

use super::api::etcdserverpb::compare::CompareResult;
use super::api::etcdserverpb::{
    Compare, RangeRequest, RequestOp, ResponseOp, TxnRequest, TxnResponse, WatchCreateRequest,
};
use super::api::mvccpb::event::EventType;
use super::api::mvccpb::{Event, KeyValue};
use super::client::Watch;
use super::conn::EtcdConn;
use super::holder::{self, holder_key, is_holder_key};
use super::keys::{
    companions_end, etcd_ttl_secs, lease_key, lease_of_place, line_prefix, range_end, record_key,
    ttl_left,
};
use super::line;
use super::line_watch::LineWatches;
use super::options::{EtcdOptions, EtcdUrl};
use super::place_lease::PlaceLease;
use crate::error::{Error, Result};
use crate::fence::Fence;
use crate::lease::{
    AcquireReply, ExtendReply, HolderInfo, LeaseStatus, LeaseStore, QueuePlace, ReleaseOutcome,
    ReleaseWatch, valid_until,
};
use crate::token::OwnerToken;

/// Leases on an etcd cluster.
///
/// Each acquisition is an etcd lease with the TTL (rounded up to whole seconds)
/// and one transaction that creates the key only if absent, bound to that lease;
/// the fence is the key's create revision. See the [module docs](super) for the
/// semantics and limits.
#[derive(Clone)]
pub struct EtcdStore {
    pub(super) conn: EtcdConn,
    prefix: String,
    /// The etcd lease behind each of our acquisitions, by (storage key, token):
    /// extend and release need it. A miss (another process's store, a handle
    /// rebuilt) is answered by reading the key.
    leases: Arc<Mutex<HashMap<(String, String), Granted>>>,
    /// The waiting lines this process watches, and its waiters' views of
    /// them.
    pub(super) lines: LineWatches,
    /// The etcd lease this handle's places in line are bound to.
    pub(super) places: PlaceLease,
    /// Revokes running in the background, for [`LeaseStore::close`].
    background: tokio_util::task::TaskTracker,
}

/// An etcd lease we granted for one acquisition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Granted {
    pub(super) id: i64,
    /// The TTL etcd granted, in seconds (etcd may raise a short TTL to its
    /// minimum).
    pub(super) ttl_secs: i64,
}

impl std::fmt::Debug for EtcdStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdStore")
            .field("endpoints", &self.conn.display())
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl EtcdStore {
    /// Connects to the cluster named by an `etcd://` or `etcds://` (TLS) URL
    /// (`etcd[s]://[user[:password]@]host:2379[,host:2379…]`) and checks that
    /// it answers. User and password in the URL take precedence over
    /// [`EtcdOptions::user`].
    pub async fn connect(url: &str, options: EtcdOptions) -> Result<Self> {
        let parsed = EtcdUrl::parse(url)?;
        if options.prefix.is_empty() {
            return Err(Error::invalid(
                "prefix",
                "an empty prefix would mix tenure's keys with everything else in etcd",
            ));
        }
        let conn = EtcdConn::connect(&parsed, &options).await?;
        Ok(EtcdStore {
            conn,
            prefix: options.prefix,
            leases: Arc::new(Mutex::new(HashMap::new())),
            lines: LineWatches::default(),
            places: PlaceLease::default(),
            background: tokio_util::task::TaskTracker::new(),
        })
    }

    /// The etcd key of lease `key`.
    pub fn lease_key(&self, key: &str) -> String {
        lease_key(&self.prefix, key)
    }

    /// Grants an etcd lease of `ttl` rounded up to whole seconds.
    pub(super) async fn grant(
        &self,
        op: &'static str,
        key: &str,
        ttl: Duration,
    ) -> Result<Granted> {
        let secs = etcd_ttl_secs(ttl);
        let grant = self
            .conn
            .call(op, key, |c| async move { c.lease_grant(secs).await })
            .await?;
        Ok(Granted {
            id: grant.id,
            ttl_secs: grant.ttl,
        })
    }

    pub(super) fn remember(&self, storage_key: &str, token: &OwnerToken, granted: Granted) {
        self.map().insert(
            (storage_key.to_string(), token.as_str().to_string()),
            granted,
        );
    }

    pub(super) fn forget(&self, storage_key: &str, token: &OwnerToken) -> Option<Granted> {
        self.map()
            .remove(&(storage_key.to_string(), token.as_str().to_string()))
    }

    pub(super) fn recall(&self, storage_key: &str, token: &OwnerToken) -> Option<Granted> {
        self.map()
            .get(&(storage_key.to_string(), token.as_str().to_string()))
            .copied()
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Granted>> {
        self.leases.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Revokes lease `id` and waits for etcd's answer: its keys go now
    /// rather than at its TTL. A failure only means the TTL frees them.
    pub(super) async fn revoke(&self, id: i64) {
        revoke(&self.conn, id).await;
    }

    /// Revokes a lease without waiting (see [`revoke`](Self::revoke));
    /// [`LeaseStore::close`] waits for it.
    pub(super) fn revoke_in_background(&self, id: i64) {
        let conn = self.conn.clone();
        self.background
            .spawn(async move { revoke(&conn, id).await });
    }

    /// Reads the key; `None` when absent.
    pub(super) async fn get(
        &self,
        op: &'static str,
        storage_key: &str,
    ) -> Result<Option<KeyValue>> {
        let read = RangeRequest::new(storage_key);
        let reply = self
            .conn
            .call(op, storage_key, |c| {
                let read = read.clone();
                async move { c.range(read).await }
            })
            .await?;
        Ok(reply.kvs.into_iter().next())
    }

    /// The remaining TTL of lease `id` (an upper bound, see [`ttl_left`]).
    pub(super) async fn lease_ttl_left(
        &self,
        op: &'static str,
        key: &str,
        id: i64,
    ) -> Result<Option<Duration>> {
        if id == 0 {
            // A key written without a lease (not by tenure) never expires.
            return Ok(None);
        }
        let (left, granted) = self.time_to_live(op, key, id).await?;
        Ok(ttl_left(left, granted))
    }

    /// etcd's remaining and granted TTL of lease `id`, in seconds.
    async fn time_to_live(&self, op: &'static str, key: &str, id: i64) -> Result<(i64, i64)> {
        let reply = self
            .conn
            .call(op, key, |c| async move { c.lease_time_to_live(id).await })
            .await?;
        Ok((reply.ttl, reply.granted_ttl))
    }

    /// Our lease on `storage_key`: remembered, or read from the key when it
    /// still holds `token`.
    async fn our_lease(
        &self,
        op: &'static str,
        storage_key: &str,
        token: &OwnerToken,
    ) -> Result<Option<Granted>> {
        if let Some(g) = self.recall(storage_key, token) {
            return Ok(Some(g));
        }
        match self.get(op, storage_key).await? {
            Some(kv) if kv.value == token.as_str().as_bytes() && kv.lease != 0 => {
                let id = kv.lease;
                let (_, ttl_secs) = self.time_to_live(op, storage_key, id).await?;
                Ok(Some(Granted { id, ttl_secs }))
            }
            _ => Ok(None),
        }
    }

    /// Renews the etcd lease behind `storage_key` (a lease key or a permit
    /// key) if the key still holds `token` on it; `key` names it in errors.
    pub(super) async fn extend_key(
        &self,
        key: &str,
        storage_key: &str,
        token: &OwnerToken,
        ttl: Duration,
    ) -> Result<ExtendReply> {
        let start = crate::clock::now();
        let Some(granted) = self.our_lease("extend", storage_key, token).await? else {
            return Ok(ExtendReply::NotHeld);
        };
        // Refresh the lease and check that the key still holds our token bound
        // to it, both sent at once. A live lease keeps every key bound to it,
        // so "the key holds our token on our lease" plus "the lease was
        // refreshed at `start` or later" means the key stays ours until at
        // least `start + TTL` on the cluster. An expired lease is never
        // revived: etcd refuses keep-alives of a lease it has ended.
        let id = granted.id;
        let keep_alive = self.keep_alive("extend", key, id);
        let check = TxnRequest::new().when([
            Compare::value(storage_key, CompareResult::Equal, token.as_str()),
            Compare::lease(storage_key, CompareResult::Equal, id),
        ]);
        let still_ours = self.txn("extend", key, check);
        let (alive, ours) = tokio::join!(keep_alive, still_ours);
        if !alive? || !ours?.succeeded {
            self.forget(storage_key, token);
            self.revoke_in_background(id);
            return Ok(ExtendReply::NotHeld);
        }
        // etcd renews to the granted TTL, which may be longer than asked (whole
        // seconds, etcd's minimum); the holder counts only what it asked for.
        let granted_ttl = Duration::from_secs(u64::try_from(granted.ttl_secs).unwrap_or(0));
        Ok(ExtendReply::Extended {
            valid_until: valid_until(start, ttl.min(granted_ttl)),
        })
    }

    /// Refreshes etcd lease `id`: `false` when etcd has ended it (it is never
    /// revived).
    pub(super) async fn keep_alive(&self, op: &'static str, key: &str, id: i64) -> Result<bool> {
        self.conn
            .call(op, key, |c| async move {
                match c.lease_keep_alive(id).await {
                    Err(e) if lease_not_found(&e) => Ok(false),
                    other => other,
                }
            })
            .await
    }

    /// Runs one transaction.
    pub(super) async fn txn(
        &self,
        op: &'static str,
        key: &str,
        txn: TxnRequest,
    ) -> Result<TxnResponse> {
        self.conn
            .call(op, key, |c| {
                let txn = txn.clone();
                async move { c.txn(txn).await }
            })
            .await
    }

    /// Deletes `storage_key` (a lease key or a permit key) and its holder
    /// record if it holds `token`, and ends its etcd lease; `key` names it in
    /// errors.
    pub(super) async fn release_key(
        &self,
        key: &str,
        storage_key: &str,
        token: &OwnerToken,
    ) -> Result<ReleaseOutcome> {
        let remembered = self.recall(storage_key, token);
        // Delete the key only if it holds our token; read it first within the
        // same transaction to learn its lease when we do not remember it.
        let txn = TxnRequest::new()
            .when([Compare::value(
                storage_key,
                CompareResult::Equal,
                token.as_str(),
            )])
            .and_then([
                RequestOp::get(RangeRequest::new(storage_key)),
                RequestOp::delete(storage_key),
                RequestOp::delete(holder_key(storage_key)),
            ]);
        let reply = self.txn("release", key, txn).await?;
        self.forget(storage_key, token);
        let succeeded = reply.succeeded;
        let lease = remembered
            .map(|g| g.id)
            .or_else(|| first_kv(reply.responses).map(|kv| kv.lease))
            .filter(|id| *id != 0);
        if let Some(id) = lease {
            // Revoking only ends our own lease (the key is gone already): no
            // need to wait for it.
            self.revoke_in_background(id);
        }
        Ok(if succeeded {
            ReleaseOutcome::Released
        } else {
            ReleaseOutcome::NotHeld
        })
    }

    /// The fence of the key our transaction just created: its create revision.
    pub(super) fn created_fence(&self, storage_key: &str, kv: Option<KeyValue>) -> Result<Fence> {
        let wrong = |detail: String| Error::WrongType {
            key: storage_key.to_string(),
            detail,
        };
        let kv = kv.ok_or_else(|| wrong("the key vanished within its own transaction".into()))?;
        let fence = u64::try_from(kv.create_revision)
            .map_err(|_| wrong(format!("create revision {}", kv.create_revision)))?;
        Ok(Fence::new(fence))
    }
}

impl EtcdStore {
    /// The status of a key that exists, with its holder record if any.
    async fn held_status(
        &self,
        key: &str,
        kv: KeyValue,
        record: Option<KeyValue>,
    ) -> Result<LeaseStatus> {
        let fence = u64::try_from(kv.create_revision).ok().map(Fence::new);
        let mut status = LeaseStatus::free(self.lease_key(key), fence);
        status.held = true;
        status.ttl_left = self.lease_ttl_left("status", key, kv.lease).await?;
        // A record on another etcd lease belongs to an earlier holder.
        status.holder = record
            .filter(|r| r.lease == kv.lease)
            .and_then(|r| holder::decode(&r.value));
        Ok(status)
    }
}

/// Creates `storage_key` holding `token` bound to etcd lease `lease` only if
/// the key does not exist (create revision 0) and nobody stands in its
/// waiting line (a plain attempt does not jump the line), and reads it back
/// in the same transaction for its create revision; otherwise reads the
/// holder's key, or when there is none the first waiter's place. With
/// `holder`, its record is written beside the key, on the same lease.
fn create_if_absent(
    storage_key: &str,
    token: &OwnerToken,
    lease: i64,
    holder: Option<&HolderInfo>,
) -> TxnRequest {
    let prefix = line_prefix(storage_key);
    TxnRequest::new()
        .when([
            Compare::create_revision(storage_key, CompareResult::Equal, 0),
            line::nobody_in_line(&prefix, &range_end(&prefix)),
        ])
        .and_then(line::take(storage_key, token, lease, holder))
        .or_else([
            RequestOp::get(RangeRequest::new(storage_key)),
            line::first_in_line(storage_key),
        ])
}

/// The first key-value of the first read among a transaction's responses.
pub(super) fn first_kv(responses: Vec<ResponseOp>) -> Option<KeyValue> {
    responses
        .into_iter()
        .filter_map(ResponseOp::into_range)
        .find_map(|range| range.kvs.into_iter().next())
}

/// Whether `e` says that a lease is gone (expired or revoked).
pub(super) fn lease_not_found(e: &Status) -> bool {
    e.message().contains("requested lease not found")
}

#[async_trait]
impl LeaseStore for EtcdStore {
    async fn close(&self) {
        self.background.close();
        self.background.wait().await;
        self.background.reopen();
    }

    async fn try_acquire(
        &self,
        key: &str,
        token: &OwnerToken,
        ttl: Duration,
        holder: Option<&HolderInfo>,
    ) -> Result<AcquireReply> {
        let start = crate::clock::now();
        let storage_key = self.lease_key(key);
        let granted = self.grant("acquire", key, ttl).await?;
        let txn = create_if_absent(&storage_key, token, granted.id, holder);
        let reply = match self.txn("acquire", key, txn).await {
            Ok(reply) => reply,
            Err(e) => {
                // The transaction's fate is unknown: if it created the key, the
                // key is bound to this lease, so revoking it undoes the attempt.
                // No guard exists yet, so nobody believes in it.
                self.revoke_in_background(granted.id);
                return Err(e);
            }
        };
        let won = reply.succeeded;
        let kv = first_kv(reply.responses);
        if won {
            let fence = self.created_fence(&storage_key, kv)?;
            self.remember(&storage_key, token, granted);
            return Ok(AcquireReply::Acquired {
                fence,
                valid_until: valid_until(start, ttl),
            });
        }
        // Held: our lease has no key; end it now rather than at its TTL.
        self.revoke_in_background(granted.id);
        // The holder's TTL, or while the key is free the first waiter's (who
        // takes it next, or loses its place when that runs out).
        let ttl_left = match kv {
            Some(kv) => self.lease_ttl_left("acquire", key, kv.lease).await?,
            // Neither key nor line cannot happen within one transaction that
            // found one of them; treat it as "expiring now" so the caller
            // retries.
            None => Some(Duration::ZERO),
        };
        Ok(AcquireReply::Held { ttl_left })
    }

    async fn extend(&self, key: &str, token: &OwnerToken, ttl: Duration) -> Result<ExtendReply> {
        self.extend_key(key, &self.lease_key(key), token, ttl).await
    }

    async fn release(&self, key: &str, token: &OwnerToken) -> Result<ReleaseOutcome> {
        self.release_key(key, &self.lease_key(key), token).await
    }

    async fn holder_token(&self, key: &str) -> Result<Option<OwnerToken>> {
        let storage_key = self.lease_key(key);
        let read =
            TxnRequest::new().and_then([RequestOp::get(RangeRequest::new(storage_key.as_str()))]);
        let reply = self.txn("holder_token", key, read).await?;
        let value = reply
            .responses
            .into_iter()
            .next()
            .and_then(ResponseOp::into_range)
            .and_then(|g| g.kvs.into_iter().next())
            .and_then(|kv| String::from_utf8(kv.value).ok());
        Ok(value.map(OwnerToken::from_stored))
    }

    async fn status(&self, key: &str) -> Result<LeaseStatus> {
        let storage_key = self.lease_key(key);
        // One read-only transaction: the key, its holder record and the
        // number of places in its waiting line.
        let reads = TxnRequest::new().and_then([
            RequestOp::get(RangeRequest::new(storage_key.as_str())),
            RequestOp::get(RangeRequest::new(holder_key(&storage_key))),
            line::count_in_line(&storage_key),
        ]);
        let mut replies = self.txn("status", key, reads).await?.responses.into_iter();
        let mut next = || replies.next().and_then(ResponseOp::into_range);
        let (kv, record, line) = (next(), next(), next());
        let kv = kv.and_then(|g| g.kvs.into_iter().next());
        let record = record.and_then(|g| g.kvs.into_iter().next());
        let waiters = line.and_then(|g| u64::try_from(g.count).ok());
        let mut status = match kv {
            Some(kv) => self.held_status(key, kv, record).await?,
            // etcd keeps no fence once the key is gone: the next holder's
            // create revision will be larger than any before it anyway.
            None => LeaseStatus::free(storage_key, None),
        };
        status.waiters = waiters;
        Ok(status)
    }

    async fn list(&self, prefix: &str) -> Result<Vec<(String, LeaseStatus)>> {
        let start = self.lease_key(prefix);
        let range = RangeRequest::new(start.as_str()).with_range(range_end(&start));
        let reply = self
            .conn
            .call("list", prefix, |c| {
                let range = range.clone();
                async move { c.range(range).await }
            })
            .await?;
        let mut records: HashMap<Vec<u8>, KeyValue> = HashMap::new();
        // The places in each lease's waiting line, counted as `status` does.
        let mut waiting: HashMap<Vec<u8>, u64> = HashMap::new();
        let mut leases = Vec::new();
        for kv in reply.kvs {
            if let Some(lease_key) = lease_of_place(&kv.key) {
                *waiting.entry(lease_key.to_vec()).or_default() += 1;
            } else if is_holder_key(&kv.key) {
                records.insert(kv.key.clone(), kv);
            } else {
                leases.push(kv);
            }
        }
        let mut held = Vec::with_capacity(leases.len());
        for kv in leases {
            let Some(key) = std::str::from_utf8(&kv.key)
                .ok()
                .and_then(|k| k.strip_prefix(self.prefix.as_str()))
                .map(str::to_string)
            else {
                continue;
            };
            let record = records.remove(holder_key(&self.lease_key(&key)).as_bytes());
            let waiters = waiting.get(&kv.key).copied().unwrap_or(0);
            let mut status = self.held_status(&key, kv, record).await?;
            status.waiters = Some(waiters);
            held.push((key, status));
        }
        Ok(held)
    }

    async fn watch_releases(&self, key: &str) -> ReleaseWatch {
        // The lease key and its record: a delete of the lease key is a
        // release or an expiry, a write of the record a new leader's id
        // (so election observers are pushed both). Waiters coming and going
        // in the line wake nobody here.
        let storage_key = self.lease_key(key);
        let record = record_key(&storage_key);
        let end = companions_end(&storage_key);
        let lease = storage_key.clone();
        self.watch_range(key, &storage_key, end, move |event| {
            let Some(changed) = event.kv.as_ref().map(|kv| kv.key.as_slice()) else {
                return false;
            };
            match event.r#type() {
                EventType::Delete => changed == lease.as_bytes() || changed == record.as_bytes(),
                EventType::Put => changed == record.as_bytes(),
            }
        })
        .await
    }

    async fn wait_turn(
        &self,
        key: &str,
        token: &OwnerToken,
        ttl: Duration,
        holder: Option<&HolderInfo>,
        place: Option<&QueuePlace>,
    ) -> Result<(AcquireReply, Option<QueuePlace>)> {
        self.look_in_line(key, token, ttl, holder, place).await
    }

    async fn leave_line(
        &self,
        key: &str,
        token: &OwnerToken,
        place: Option<&QueuePlace>,
    ) -> Result<ReleaseOutcome> {
        self.leave(key, token, place).await
    }

    async fn watch_turn(&self, key: &str, token: &OwnerToken) -> ReleaseWatch {
        self.watch_for_turn(key, token).await
    }

    fn ready_turn_watch(&self, key: &str, token: &OwnerToken) -> Option<ReleaseWatch> {
        self.ready_watch_for_turn(key, token)
    }

    fn describe(&self) -> String {
        self.conn.display().to_string()
    }

    fn kind(&self) -> std::borrow::Cow<'static, str> {
        crate::telemetry::store_kind(self.conn.display())
    }
}

impl EtcdStore {
    /// Watches the keys in `[start, end)` and wakes waiters on every event
    /// `wakes` picks. Falls back to polling when etcd does not confirm the
    /// watch; the task (and the etcd watch) ends with the last waiter.
    pub(super) async fn watch_range(
        &self,
        key: &str,
        start: &str,
        end: Vec<u8>,
        wakes: impl Fn(&Event) -> bool + Send + 'static,
    ) -> ReleaseWatch {
        let Some(mut stream) = self.open_watch(key, start, end).await else {
            return ReleaseWatch::polling();
        };
        let (tx, rx) = watch::channel(0u64);
        let task = tokio::spawn(async move {
            while let Ok(Some(reply)) = stream.message().await {
                if reply.canceled {
                    break;
                }
                if reply.events.iter().any(&wakes) {
                    tx.send_modify(|n| *n = n.wrapping_add(1));
                }
            }
            // Dropping `tx` makes the watch fall back to polling.
        });
        ReleaseWatch::from_channel(rx, Some(Box::new(AbortOnDrop(task.abort_handle()))))
    }

    /// Opens an etcd watch on the keys in `[start, end)` and waits for etcd
    /// to confirm it; `None` when it does not.
    pub(super) async fn open_watch(&self, key: &str, start: &str, end: Vec<u8>) -> Option<Watch> {
        let create = WatchCreateRequest {
            key: start.as_bytes().to_vec(),
            range_end: end,
            ..WatchCreateRequest::default()
        };
        let opened = self
            .conn
            .call("watch", key, |c| {
                let create = create.clone();
                async move {
                    let mut stream = c.watch(create).await?;
                    // Wait for etcd to confirm the watch: from then on, no
                    // event in the range can be missed.
                    let first = stream.message().await?;
                    Ok((stream, first.is_some_and(|r| r.created)))
                }
            })
            .await;
        match opened {
            Ok((stream, true)) => Some(stream),
            Ok((_, false)) | Err(_) => None,
        }
    }
}

/// Revokes etcd lease `id` on `conn`; a failure is logged (the lease's TTL
/// ends it).
async fn revoke(conn: &EtcdConn, id: i64) {
    if let Err(e) = conn
        .call("revoke", "", |c| async move { c.lease_revoke(id).await })
        .await
    {
        tracing::debug!(lease = id, error = %e, "revoking an etcd lease failed; its TTL will end it");
    }
}

/// Ends the watch task (and so the etcd watch) when nobody waits any more.
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
