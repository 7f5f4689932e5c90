//! The waiting line of a lease on etcd: waiters are served in the order they
//! stood in line, by create revision, as with etcd's own concurrency mutex.
//!
//! - **A place** is the key `{lease key}\0line\0{token}`, bound to the
//!   etcd lease this process's places share (see `place_lease.rs`), with
//!   etcd's shortest TTL, one second; its create revision is its position.
//!   The waiters' heartbeats (every 250 ms) keep that lease alive, whichever
//!   finds it due, so a waiter that is killed loses its place within about a
//!   second and a half (the TTL plus etcd's expiry sweep), whatever the
//!   lease's TTL; a waiter whose wait ends (or is cancelled) deletes it at
//!   once.
//! - **The holder's etcd lease**, with the lease's TTL (rounded up to whole
//!   seconds), is granted when the waiter stands in line and kept alive by
//!   its looks (by a heartbeat, once a quarter of its TTL has passed): a
//!   look that takes the lease binds the key to it.
//! - **A look** is one transaction: if the lease key does not exist, our place
//!   is still there, and every place in the line was created no earlier than
//!   ours (etcd's range compares hold for every key in the range), it creates
//!   the lease key on our etcd lease (and the holder record), deletes our
//!   place and reads the fence back; otherwise it reads our place and the one
//!   just ahead of it. The waiter's holder etcd lease becomes the holder's, and
//!   the look's keep-alive of it, sent with the transaction, is what lets the
//!   holder count its validity from the look.
//! - **The first look** grants the holder's etcd lease (and the places'
//!   lease, when this process has none) and, in one transaction, takes the
//!   lease when it is free with nobody in line, else puts our place at the
//!   end.
//! - **A plain acquire** (`try_acquire`) does not jump a line that is not
//!   empty: it creates the key only when nobody stands in line. A line whose
//!   first waiter died frees itself when that waiter's TTL runs out.
//! - **Waking** is filtered in this process (see `turn.rs`): one etcd watch
//!   per line per process (see `line_watch.rs`) feeds every waiter's view,
//!   which wakes it only on the lease key's deletion when it is first in
//!   line, or on the deletion of the place just ahead of it (or of its own).
//!   When the line's watch is open already, a waiter joins it before its
//!   first look, which then stands it in line: no second look.
//! - **Quiet looks**: the lease layer looks every 250 ms on its own. While
//!   the watch lives and nothing has concerned the waiter since its last
//!   look, such a look is answered here (held, same place) without a
//!   transaction: it could only find what the last one found. It only sends
//!   the keep-alives that are due (the places' lease, the holder's).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::api::etcdserverpb::compare::CompareResult;
use super::api::etcdserverpb::range_request::{SortOrder, SortTarget};
use super::api::etcdserverpb::{
    Compare, PutRequest, RangeRequest, RequestOp, TxnRequest, TxnResponse,
};
use super::conn::map_error;
use super::holder::{self, holder_key};
use super::keys::{companions_end, line_prefix, permit_key, range_end};
use super::lease::{EtcdStore, Granted, first_kv, lease_not_found};
use super::line_watch::WaiterId;
use super::lock;
use super::turn::{Standing, Turn};
use crate::error::{Error, Result};
use crate::lease::{
    AcquireReply, HolderInfo, QueuePlace, ReleaseOutcome, ReleaseWatch, valid_until,
};
use crate::token::OwnerToken;

/// What one waiter's look answers: the reply and its place, if any.
type Looked = (AcquireReply, Option<QueuePlace>);

/// A waiter's place, as the lease layer keeps it between looks:
/// `{place's etcd lease} {its ttl in seconds} {create revision} {holder's
/// etcd lease} {its ttl in seconds}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Place {
    /// The short etcd lease the place is bound to.
    granted: Granted,
    rev: i64,
    /// The etcd lease a look that takes the lease binds it to.
    holder: Granted,
}

impl Place {
    fn parse(place: &QueuePlace) -> Option<Place> {
        let mut parts = place.as_str().split(' ');
        let mut number = || parts.next()?.parse::<i64>().ok();
        let (id, ttl_secs, rev) = (number()?, number()?, number()?);
        let holder = Granted {
            id: number()?,
            ttl_secs: number()?,
        };
        Some(Place {
            granted: Granted { id, ttl_secs },
            rev,
            holder,
        })
    }

    fn queued(self) -> QueuePlace {
        QueuePlace::new(format!(
            "{} {} {} {} {}",
            self.granted.id, self.granted.ttl_secs, self.rev, self.holder.id, self.holder.ttl_secs
        ))
    }
}

/// The keys a waiter's transactions touch.
struct LineKeys {
    lease: String,
    prefix: String,
    end: Vec<u8>,
    place: String,
}

impl LineKeys {
    fn new(store: &EtcdStore, key: &str, token: &OwnerToken) -> LineKeys {
        let lease = store.lease_key(key);
        let prefix = line_prefix(&lease);
        LineKeys {
            end: range_end(&prefix),
            place: permit_key(&prefix, token.as_str()),
            prefix,
            lease,
        }
    }

    /// Where `token`'s view of this line is kept.
    fn waiter<'a>(&'a self, token: &'a OwnerToken) -> WaiterId<'a> {
        WaiterId {
            lease: &self.lease,
            prefix: &self.prefix,
            place: &self.place,
            token: token.as_str(),
        }
    }
}

/// Compares true when nobody stands in the line `[prefix, end)` (on an empty
/// range etcd compares against a key that does not exist: revision 0).
pub(super) fn nobody_in_line(prefix: &str, end: &[u8]) -> Compare {
    Compare::create_revision(prefix, CompareResult::Equal, 0).with_range(end.to_vec())
}

/// The places of the line `[prefix, end)` by create revision, `limit` of them.
fn by_arrival(prefix: &str, end: &[u8], order: SortOrder, limit: i64) -> RangeRequest {
    RangeRequest::new(prefix)
        .with_range(end.to_vec())
        .with_sort(SortTarget::Create, order)
        .with_limit(limit)
}

/// Reads the first waiter in the line of `storage_key`.
pub(super) fn first_in_line(storage_key: &str) -> RequestOp {
    let prefix = line_prefix(storage_key);
    let end = range_end(&prefix);
    RequestOp::get(by_arrival(&prefix, &end, SortOrder::Ascend, 1))
}

/// Counts the places in the line of `storage_key`.
pub(super) fn count_in_line(storage_key: &str) -> RequestOp {
    let prefix = line_prefix(storage_key);
    let end = range_end(&prefix);
    RequestOp::get(RangeRequest::new(prefix).with_range(end).with_count_only())
}

/// What a grant writes: the lease key holding `token` on etcd lease `lease`
/// (read back for its create revision, the fence) and, with `holder`, its
/// record beside it on the same lease.
pub(super) fn take(
    storage_key: &str,
    token: &OwnerToken,
    lease: i64,
    holder: Option<&HolderInfo>,
) -> Vec<RequestOp> {
    let mut ops = vec![
        RequestOp::put(PutRequest::new(storage_key, token.as_str()).with_lease(lease)),
        RequestOp::get(RangeRequest::new(storage_key)),
    ];
    if let Some(h) = holder {
        let record = PutRequest::new(holder_key(storage_key), holder::encode(h));
        ops.push(RequestOp::put(record.with_lease(lease)));
    }
    ops
}

impl EtcdStore {
    /// One look of a waiter in line (see [`LeaseStore::wait_turn`]): from its
    /// place, or, without one (or when it was lost), standing in line anew
    /// at the end.
    ///
    /// [`LeaseStore::wait_turn`]: crate::lease::LeaseStore::wait_turn
    pub(super) async fn look_in_line(
        &self,
        key: &str,
        token: &OwnerToken,
        ttl: Duration,
        holder: Option<&HolderInfo>,
        place: Option<&QueuePlace>,
    ) -> Result<Looked> {
        let keys = LineKeys::new(self, key, token);
        if let Some(place) = place.and_then(Place::parse) {
            // Nothing concerned us since the last look: it would find the
            // lease held or someone ahead, as that one did. Only the places'
            // and the holder's etcd leases may need a refresh.
            if self.stays(key, &keys, token, place).await {
                let held = AcquireReply::Held { ttl_left: None };
                return Ok((held, Some(place.queued())));
            }
            if let Some(looked) = self.look(key, &keys, token, ttl, holder, place).await? {
                return Ok(looked);
            }
        }
        self.stand_in_line(key, &keys, token, ttl, holder).await
    }

    /// The first look: takes the lease when it is free with nobody in line,
    /// else puts our place at the end of the line.
    async fn stand_in_line(
        &self,
        key: &str,
        keys: &LineKeys,
        token: &OwnerToken,
        ttl: Duration,
        holder: Option<&HolderInfo>,
    ) -> Result<Looked> {
        let (start, sent) = (crate::clock::now(), Instant::now());
        let (held, placed, reply) = self.join_line(key, keys, token, ttl, holder).await?;
        if reply.succeeded {
            let fence = self.created_fence(&keys.lease, first_kv(reply.responses))?;
            self.remember(&keys.lease, token, held);
            let valid_until = valid_until(start, ttl);
            return Ok((AcquireReply::Acquired { fence, valid_until }, None));
        }
        let as_of = reply.revision();
        let mut reads = reply.reads().into_iter();
        let mine = reads
            .next()
            .and_then(|kvs| kvs.into_iter().next())
            .ok_or_else(|| vanished(&keys.place))?;
        let rev = mine.create_revision;
        // The two newest places: ours, and the one ahead of it. (A place kept
        // from an earlier stand may not be the newest; then we do not know
        // who is ahead, and count ourselves first: at worst woken for
        // nothing.)
        let newest = reads.next().unwrap_or_default();
        let ahead = match newest.as_slice() {
            [first, second, ..] if first.create_revision == rev => Some(second.key.clone()),
            _ => None,
        };
        self.stands(keys, token, Standing { as_of, ahead }, Some(sent));
        let place = Place {
            granted: placed,
            rev,
            holder: held,
        };
        Ok((AcquireReply::Held { ttl_left: None }, Some(place.queued())))
    }

    /// The first look's transaction, on fresh etcd leases (granted again
    /// once when the places' lease turns out to have ended).
    async fn join_line(
        &self,
        key: &str,
        keys: &LineKeys,
        token: &OwnerToken,
        ttl: Duration,
        holder: Option<&HolderInfo>,
    ) -> Result<(Granted, Granted, TxnResponse)> {
        let mut tries = 2;
        loop {
            tries -= 1;
            let (held, placed) = self.grant_both(key, ttl).await?;
            let txn = join_txn(keys, token, holder, held.id, placed.id);
            self.looks(keys, token);
            let joined = self.txn_on_lease("wait", key, txn).await;
            if !matches!(joined, Ok(Some(_))) {
                // Its fate is unknown (or it named an ended lease): a lease
                // key it wrote is bound to the holder's etcd lease, revoked
                // here; a place it wrote is swept.
                self.revoke_in_background(held.id);
                self.sweep_place(key, &keys.place);
            }
            match joined {
                Ok(Some(reply)) => return Ok((held, placed, reply)),
                Ok(None) if tries > 0 => continue,
                Ok(None) => {
                    // Twice: a cluster in trouble (a leader change revoking
                    // leases); worth trying again later.
                    let ended = tonic::Status::unavailable("etcd ended a fresh lease at once");
                    return Err(map_error(self.conn.display(), "wait", key, ended));
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// The holder's etcd lease (the lease's TTL), granted, and the places'
    /// lease of this process (see `place_lease.rs`), at once; the holder's
    /// is not left behind on an error.
    async fn grant_both(&self, key: &str, ttl: Duration) -> Result<(Granted, Granted)> {
        let (held, placed) = tokio::join!(self.grant("wait", key, ttl), self.place_lease(key));
        match (held, placed) {
            (Ok(held), Ok(placed)) => Ok((held, placed)),
            (Ok(g), Err(e)) => {
                self.revoke_in_background(g.id);
                Err(e)
            }
            (Err(e), _) => Err(e),
        }
    }

    /// A look from our place: `None` when the place is gone (its etcd lease
    /// ran out), so the waiter stands in line again.
    async fn look(
        &self,
        key: &str,
        keys: &LineKeys,
        token: &OwnerToken,
        ttl: Duration,
        holder: Option<&HolderInfo>,
        place: Place,
    ) -> Result<Option<Looked>> {
        let (start, sent) = (crate::clock::now(), Instant::now());
        let txn = look_txn(keys, token, holder, place);
        self.looks(keys, token);
        // The keep-alives keep the place (when the places' lease is due)
        // and the holder's etcd lease; when
        // the look takes the lease, the latter is the holder's until at least
        // a TTL after `start`: it lived when the transaction bound the key to
        // it, and etcd never revives an ended lease.
        let (reply, placed, held) = tokio::join!(
            self.txn_on_lease("wait", key, txn),
            self.keep_places(key, place.granted.id),
            self.keep_alive("wait", key, place.holder.id)
        );
        let Some(reply) = reply? else {
            return Ok(None);
        };
        if reply.succeeded {
            return match held {
                Ok(true) => {
                    let fence = self.created_fence(&keys.lease, first_kv(reply.responses))?;
                    self.remember(&keys.lease, token, place.holder);
                    let valid_until = valid_until(start, ttl);
                    Ok(Some((AcquireReply::Acquired { fence, valid_until }, None)))
                }
                // The etcd lease ended right after the transaction: the key
                // went with it.
                Ok(false) => Ok(None),
                // Not known to last: not ours to believe in. The caller's
                // undo leaves the line, deleting the key.
                Err(e) => Err(e),
            };
        }
        let alive = match (placed, held) {
            (Ok(placed), Ok(held)) => Ok(placed && held),
            (Err(e), _) | (_, Err(e)) => Err(e),
        };
        let refreshed = match alive {
            Ok(true) => Some(sent),
            Ok(false) => return Ok(None),
            Err(e) => {
                tracing::debug!(key, error = %e, "refreshing a place in line failed; the next look tries again");
                None
            }
        };
        let as_of = reply.revision();
        let Some(ahead) = still_in_line(reply, &keys.place) else {
            return Ok(None);
        };
        self.stands(keys, token, Standing { as_of, ahead }, refreshed);
        let held = AcquireReply::Held { ttl_left: None };
        Ok(Some((held, Some(place.queued()))))
    }

    /// Leaves the line of `key`: deletes our place, and the lease key too when
    /// a look we never heard back from took it; ends the holder's etcd lease.
    /// When that fails, the holder's etcd lease is revoked all the same and
    /// the place is swept.
    pub(super) async fn leave(
        &self,
        key: &str,
        token: &OwnerToken,
        place: Option<&QueuePlace>,
    ) -> Result<ReleaseOutcome> {
        let keys = LineKeys::new(self, key, token);
        let txn = TxnRequest::new()
            .when([Compare::value(
                keys.lease.as_str(),
                CompareResult::Equal,
                token.as_str(),
            )])
            .and_then([
                RequestOp::get(RangeRequest::new(keys.lease.as_str())),
                RequestOp::delete(keys.lease.as_str()),
                RequestOp::delete(holder_key(&keys.lease)),
                RequestOp::delete(keys.place.as_str()),
            ])
            .or_else([
                RequestOp::get(RangeRequest::new(keys.place.as_str())),
                RequestOp::delete(keys.place.as_str()),
            ]);
        let place = place.and_then(Place::parse);
        let reply = match self.txn("leave", key, txn).await {
            Ok(reply) => reply,
            Err(e) => {
                if let Some(p) = place {
                    self.revoke_in_background(p.holder.id);
                }
                self.sweep_place(key, &keys.place);
                return Err(e);
            }
        };
        let succeeded = reply.succeeded;
        self.forget(&keys.lease, token);
        let leases = match place {
            Some(p) => vec![p.holder.id],
            None => first_kv(reply.responses)
                .map(|kv| kv.lease)
                .into_iter()
                .collect(),
        };
        for id in leases.into_iter().filter(|id| *id != 0) {
            self.revoke_in_background(id);
        }
        Ok(if succeeded {
            ReleaseOutcome::Released
        } else {
            ReleaseOutcome::NotHeld
        })
    }

    /// A watch that wakes `token`'s waiter when it may be its turn (see
    /// `turn.rs`): a share of the line's watch in this process, opened when
    /// there is none (see `line_watch.rs`); it polls when etcd does not
    /// confirm the watch.
    pub(super) async fn watch_for_turn(&self, key: &str, token: &OwnerToken) -> ReleaseWatch {
        let keys = LineKeys::new(self, key, token);
        let id = keys.waiter(token);
        if let Some(joined) = self.lines.join_open(&id) {
            return joined;
        }
        match self
            .open_watch(key, &keys.lease, companions_end(&keys.lease))
            .await
        {
            Some(stream) => self.lines.join_or_install(&id, stream),
            None => ReleaseWatch::polling(),
        }
    }

    /// A share of the line's watch when this process has one open (no round
    /// trip), else `None`.
    pub(super) fn ready_watch_for_turn(
        &self,
        key: &str,
        token: &OwnerToken,
    ) -> Option<ReleaseWatch> {
        let keys = LineKeys::new(self, key, token);
        self.lines.join_open(&keys.waiter(token))
    }

    /// `token`'s view of its line, while its watch lives.
    fn turn(&self, keys: &LineKeys, token: &OwnerToken) -> Option<Arc<Mutex<Turn>>> {
        self.lines.turn(&keys.lease, token.as_str())
    }

    /// Tells `token`'s watch, if any, that a look is about to be sent.
    fn looks(&self, keys: &LineKeys, token: &OwnerToken) {
        if let Some(turn) = self.turn(keys, token) {
            lock(&turn).looks();
        }
    }

    /// Tells `token`'s watch, if any, where the waiter stands now and when
    /// its place was last refreshed.
    fn stands(
        &self,
        keys: &LineKeys,
        token: &OwnerToken,
        standing: Standing,
        refreshed: Option<Instant>,
    ) {
        if let Some(turn) = self.turn(keys, token) {
            lock(&turn).stands(standing, refreshed);
        }
    }

    /// The heartbeat of a waiter that nothing concerned since its last look:
    /// it keeps the places' lease alive when that is due, and its holder's
    /// etcd lease when that was refreshed more than a quarter of its TTL ago,
    /// without a transaction. `false` when the waiter is concerned, or a
    /// lease ended or could not be refreshed (then it looks).
    async fn stays(&self, key: &str, keys: &LineKeys, token: &OwnerToken, place: Place) -> bool {
        let Some(turn) = self.turn(keys, token) else {
            return false;
        };
        if !lock(&turn).is_undisturbed() {
            return false;
        }
        if !matches!(self.keep_places(key, place.granted.id).await, Ok(true)) {
            return false;
        }
        let ttl = Duration::from_secs(u64::try_from(place.holder.ttl_secs).unwrap_or(0));
        if lock(&turn).is_quiet(ttl / 4) {
            return true;
        }
        let sent = Instant::now();
        let held = self.keep_alive("wait", key, place.holder.id).await;
        let alive = matches!(held, Ok(true));
        if alive {
            lock(&turn).refreshed(sent);
        }
        alive
    }

    /// Runs `txn`; `None` when it names an etcd lease that is gone.
    async fn txn_on_lease(
        &self,
        op: &'static str,
        key: &str,
        txn: TxnRequest,
    ) -> Result<Option<TxnResponse>> {
        self.conn
            .call(op, key, |c| {
                let txn = txn.clone();
                async move {
                    match c.txn(txn).await {
                        Ok(reply) => Ok(Some(reply)),
                        Err(e) if lease_not_found(&e) => Ok(None),
                        Err(e) => Err(e),
                    }
                }
            })
            .await
    }
}

/// The first look, on the fresh etcd leases `lease` (the holder's) and
/// `place` (the place's): if the lease key does not exist and nobody stands
/// in line, take the lease; else put our place at the end and read it and
/// the newest two places (ours, and the one ahead).
fn join_txn(
    keys: &LineKeys,
    token: &OwnerToken,
    holder: Option<&HolderInfo>,
    lease: i64,
    place: i64,
) -> TxnRequest {
    let newest_two = by_arrival(&keys.prefix, &keys.end, SortOrder::Descend, 2);
    TxnRequest::new()
        .when([
            Compare::create_revision(keys.lease.as_str(), CompareResult::Equal, 0),
            nobody_in_line(&keys.prefix, &keys.end),
        ])
        .and_then(take(&keys.lease, token, lease, holder))
        .or_else([
            RequestOp::put(PutRequest::new(keys.place.as_str(), "").with_lease(place)),
            RequestOp::get(RangeRequest::new(keys.place.as_str())),
            RequestOp::get(newest_two),
        ])
}

/// One look from `place`: if the lease key does not exist, our place is
/// still there and no place in line was created before ours, take the lease
/// (on the waiter's holder etcd lease) and delete the place; else read our place and
/// the one just ahead of it.
fn look_txn(
    keys: &LineKeys,
    token: &OwnerToken,
    holder: Option<&HolderInfo>,
    place: Place,
) -> TxnRequest {
    let mut grant = take(&keys.lease, token, place.holder.id, holder);
    grant.push(RequestOp::delete(keys.place.as_str()));
    // Revisions start at 1, and a place is a write: `rev - 1` is at least 1
    // (0 would mean "no bound").
    let before = (place.rev - 1).max(1);
    let ahead =
        by_arrival(&keys.prefix, &keys.end, SortOrder::Descend, 1).with_max_create_revision(before);
    TxnRequest::new()
        .when([
            Compare::create_revision(keys.lease.as_str(), CompareResult::Equal, 0),
            Compare::create_revision(keys.place.as_str(), CompareResult::Equal, place.rev),
            // Holds for every place in the line (ours included): nobody
            // stood in line before us.
            Compare::create_revision(keys.prefix.as_str(), CompareResult::Greater, place.rev - 1)
                .with_range(keys.end.clone()),
        ])
        .and_then(grant)
        .or_else([
            RequestOp::get(RangeRequest::new(keys.place.as_str())),
            RequestOp::get(ahead),
        ])
}

/// From a look that did not take the lease: `None` when our place is gone,
/// else the key of the place just ahead of ours (`None` inside when we are
/// first).
fn still_in_line(reply: TxnResponse, place_key: &str) -> Option<Option<Vec<u8>>> {
    let mut reads = reply.reads().into_iter();
    if reads.next().is_none_or(|kvs| kvs.is_empty()) {
        return None;
    }
    let ahead = reads
        .next()
        .and_then(|kvs| kvs.into_iter().next())
        .map(|kv| kv.key)
        .filter(|k| k.as_slice() != place_key.as_bytes());
    Some(ahead)
}

/// A place that is not there right after its own transaction wrote it.
fn vanished(place_key: &str) -> Error {
    Error::WrongType {
        key: place_key.escape_default().to_string(),
        detail: "the place in line vanished within its own transaction".into(),
    }
}
