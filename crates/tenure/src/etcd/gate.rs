//! Gates (semaphores, read-write leases) on etcd: one *member* key per
//! holder or waiter, `{prefix}{key}\0permit\0p{N}.{token}` (semaphore) or
//! `{prefix}{key}\0rw\0{r|w}{token}` (read-write lease), bound to an etcd
//! lease of its own, so it expires on the cluster's clock when its owner
//! stops refreshing it.
//!
//! Members are ordered by create revision, which is their order of arrival.
//! A member is admitted when the members created before it leave room for
//! it: a writer when there are none, a reader when none of them is a
//! writer, a permit of N when fewer than N. Members only ever leave the part
//! of the order before a member, so an admitted member stays admitted until
//! it leaves: at every revision the admitted members obey the rule. This is
//! the read-write recipe of ZooKeeper and etcd, decided on one consistent
//! read (the transaction that creates the member, or one range read), so
//! two writers can never both see themselves first.
//!
//! A member lives on an etcd lease of the holder's TTL while admitted, and
//! on a lease of the lease line's place lifetime (1 s, or etcd's minimum
//! lease TTL if that is longer) while it waits: a refused waiter moves its member to such a lease, an
//! admitted one back to a TTL lease at its next look (the key stays, so its
//! create revision — its place and fence — too). A waiter refreshes its
//! lease at every look (every heartbeat), so a waiter that is killed leaves
//! within its place lifetime plus etcd's expiry sweep, whether it was still
//! waiting or admitted without having looked since. A single attempt that
//! is not admitted revokes its member at once. The fence is the
//! member's create revision: a writer's is above every member created
//! before it, so above every fence handed out before it. Waiters are woken
//! by deletions in the gate's range (a member leaving) and look again.

use std::time::Duration;

use async_trait::async_trait;

use super::EtcdStore;
use super::api::etcdserverpb::compare::CompareResult;
use super::api::etcdserverpb::range_request::{SortOrder, SortTarget};
use super::api::etcdserverpb::{Compare, PutRequest, RangeRequest, RequestOp, TxnRequest};
use super::api::mvccpb::KeyValue;
use super::api::mvccpb::event::EventType;
use super::holder::{self, holder_key};
use super::keys::{etcd_ttl_secs, permits_prefix, range_end, rw_prefix};
use super::lease::Granted;
use crate::error::Result;
use crate::fence::Fence;
use crate::gate::{GateAsk, GateHolder, GateKind, GateStatus, GateStore, Mode, Request};
use crate::lease::{
    AcquireReply, ExtendReply, LeaseStore, PLACE_LIFETIME, QueuePlace, ReleaseOutcome,
    ReleaseWatch, valid_until,
};
use crate::token::OwnerToken;

/// One member of a gate, read back in creation order.
struct Member {
    key: Vec<u8>,
    mode: Mode,
    kv: KeyValue,
}

/// The mode a member's name (after the gate's prefix) says: `r…`, `w…` or
/// `p{N}.…`; `None` for a name tenure did not write.
fn parse_mode(rest: &[u8]) -> Option<Mode> {
    match rest.first()? {
        b'r' => Some(Mode::Read),
        b'w' => Some(Mode::Write),
        b'p' => {
            let digits = rest.get(1..)?.split(|b| *b == b'.').next()?;
            let n = std::str::from_utf8(digits).ok()?.parse().ok()?;
            Some(Mode::Permit(n))
        }
        _ => None,
    }
}

/// Whether the member at `at` is admitted for `mode`, given the members
/// created before it.
fn admitted(members: &[Member], at: usize, mode: Mode) -> bool {
    let earlier = &members[..at];
    match mode {
        Mode::Write => earlier.is_empty(),
        Mode::Read => earlier.iter().all(|m| m.mode == Mode::Read),
        Mode::Permit(n) => earlier.len() < n.get() as usize,
    }
}

/// The start of a member's name after the gate's prefix.
fn mode_tag(mode: Mode) -> String {
    match mode {
        Mode::Read => "r".into(),
        Mode::Write => "w".into(),
        Mode::Permit(n) => format!("p{n}."),
    }
}

impl EtcdStore {
    /// The prefix of the member keys of a gate.
    fn gate_prefix(&self, kind: GateKind, key: &str) -> String {
        let lease = self.lease_key(key);
        match kind {
            GateKind::Semaphore => permits_prefix(&lease),
            GateKind::ReadWrite => rw_prefix(&lease),
        }
    }

    fn member_key(&self, mode: Mode, key: &str, token: &OwnerToken) -> String {
        let prefix = self.gate_prefix(mode.kind(), key);
        format!("{prefix}{}{}", mode_tag(mode), token.as_str())
    }

    /// The members of a gate in creation order, from a range read of its
    /// prefix (holder records left out).
    fn members(prefix: &str, kvs: Vec<KeyValue>) -> Vec<Member> {
        let mut members: Vec<Member> = kvs
            .into_iter()
            .filter_map(|kv| {
                let rest = kv.key.get(prefix.len()..)?;
                if rest.contains(&0) {
                    return None; // a holder record
                }
                let mode = parse_mode(rest)?;
                Some(Member {
                    key: kv.key.clone(),
                    mode,
                    kv,
                })
            })
            .collect();
        members.sort_by_key(|m| m.kv.create_revision);
        members
    }

    fn by_creation(prefix: &str) -> RangeRequest {
        RangeRequest::new(prefix)
            .with_range(range_end(prefix))
            .with_sort(SortTarget::Create, SortOrder::Ascend)
    }

    /// The puts of our member (and its holder record) on etcd lease `id`.
    fn member_puts(member: &str, ask: &GateAsk<'_>, id: i64) -> Vec<RequestOp> {
        let mut ops = vec![RequestOp::put(
            PutRequest::new(member, ask.token.as_str()).with_lease(id),
        )];
        if let Some(info) = ask.holder {
            ops.push(RequestOp::put(
                PutRequest::new(holder_key(member), holder::encode(info)).with_lease(id),
            ));
        }
        ops
    }

    /// Moves our member (created at revision `rev`) from etcd lease `from`
    /// to a fresh one of `ttl`; `None` when the member is gone. The key
    /// stays, so its place and fence do. Kept on `from` when etcd grants the
    /// same TTL (a TTL at etcd's minimum).
    async fn rebind(
        &self,
        key: &str,
        member: &str,
        ask: &GateAsk<'_>,
        rev: i64,
        from: Granted,
        ttl: Duration,
    ) -> Result<Option<Granted>> {
        let to = self.grant("look", key, ttl).await?;
        if to.ttl_secs == from.ttl_secs {
            self.revoke_in_background(to.id);
            return Ok(Some(from));
        }
        let txn = TxnRequest::new()
            .when([Compare::create_revision(member, CompareResult::Equal, rev)])
            .and_then(Self::member_puts(member, ask, to.id));
        let moved = match self.txn("look", key, txn).await {
            Ok(reply) => reply.succeeded,
            Err(e) => {
                // Its fate is unknown: the member keeps whichever lease
                // lives; the other is revoked.
                self.revoke_in_background(to.id);
                return Err(e);
            }
        };
        let (keep, drop) = if moved { (to, from) } else { (from, to) };
        self.revoke_in_background(drop.id);
        if !moved {
            self.forget(member, ask.token);
            return Ok(None);
        }
        self.remember(member, ask.token, keep);
        Ok(Some(keep))
    }

    /// Creates our member on a fresh etcd lease (with the holder record) and
    /// reads the gate, in one transaction.
    async fn join(
        &self,
        key: &str,
        member: &str,
        ask: &GateAsk<'_>,
    ) -> Result<(Granted, Vec<KeyValue>)> {
        let granted = self.grant("look", key, ask.ttl).await?;
        let prefix = self.gate_prefix(ask.mode.kind(), key);
        let mut ops = Self::member_puts(member, ask, granted.id);
        ops.push(RequestOp::get(Self::by_creation(&prefix)));
        match self.txn("look", key, TxnRequest::new().and_then(ops)).await {
            Ok(reply) => Ok((granted, reply.reads().into_iter().flatten().collect())),
            Err(e) => {
                // Its fate is unknown; revoking the lease undoes it if it applied.
                self.revoke_in_background(granted.id);
                Err(e)
            }
        }
    }

    /// Refreshes the member we stand in line with and reads the gate; `None`
    /// when the member is gone (its TTL ran out).
    async fn stay(
        &self,
        key: &str,
        member: &str,
        ask: &GateAsk<'_>,
    ) -> Result<Option<(Granted, Vec<KeyValue>)>> {
        let Some(granted) = self.recall(member, ask.token) else {
            return Ok(None);
        };
        if !self.keep_alive("look", key, granted.id).await? {
            self.forget(member, ask.token);
            return Ok(None);
        }
        let prefix = self.gate_prefix(ask.mode.kind(), key);
        let read = Self::by_creation(&prefix);
        let reply = self
            .conn
            .call("look", key, |c| {
                let read = read.clone();
                async move { c.range(read).await }
            })
            .await?;
        if !reply.kvs.iter().any(|kv| kv.key == member.as_bytes()) {
            self.forget(member, ask.token);
            self.revoke_in_background(granted.id);
            return Ok(None);
        }
        Ok(Some((granted, reply.kvs)))
    }
}

#[async_trait]
impl GateStore for EtcdStore {
    async fn look(
        &self,
        key: &str,
        ask: GateAsk<'_>,
    ) -> Result<(AcquireReply, Option<QueuePlace>)> {
        let request = Request::look(&ask);
        let member = self.member_key(ask.mode, key, ask.token);
        let stayed = match ask.place {
            Some(_) => self.stay(key, &member, &ask).await?,
            None => None,
        };
        let (granted, kvs) = match stayed {
            Some(found) => found,
            None => self.join(key, &member, &ask).await?,
        };
        let prefix = self.gate_prefix(request.kind, key);
        let members = Self::members(&prefix, kvs);
        let at = members.iter().position(|m| m.key == member.as_bytes());
        let rev = at.map(|at| members[at].kv.create_revision);
        if let Some(at) = at
            && admitted(&members, at, ask.mode)
        {
            let fence = self.created_fence(&member, Some(members[at].kv.clone()))?;
            self.remember(&member, ask.token, granted);
            // Admitted while on a place's lease: the grant gets its TTL.
            let moved = if granted.ttl_secs < etcd_ttl_secs(ask.ttl) {
                let rev = members[at].kv.create_revision;
                self.rebind(key, &member, &ask, rev, granted, ask.ttl)
                    .await?
            } else {
                Some(granted)
            };
            let Some(granted) = moved else {
                return Ok((AcquireReply::Held { ttl_left: None }, None));
            };
            let granted_ttl = Duration::from_secs(u64::try_from(granted.ttl_secs).unwrap_or(0));
            return Ok((
                AcquireReply::Acquired {
                    fence,
                    valid_until: valid_until(request.sent, ask.ttl.min(granted_ttl)),
                },
                None,
            ));
        }
        if ask.stand
            && let Some(rev) = rev
        {
            // While it waits, the member lives for the place lifetime.
            self.remember(&member, ask.token, granted);
            let moved = if granted.ttl_secs >= etcd_ttl_secs(ask.ttl) {
                self.rebind(key, &member, &ask, rev, granted, PLACE_LIFETIME)
                    .await?
            } else {
                Some(granted)
            };
            let Some(granted) = moved else {
                return Ok((AcquireReply::Held { ttl_left: None }, None));
            };
            let place = QueuePlace::new(granted.id.to_string());
            return Ok((AcquireReply::Held { ttl_left: None }, Some(place)));
        }
        self.forget(&member, ask.token);
        // The oldest member leaves first or with the others.
        let oldest = members.iter().find(|m| m.key != member.as_bytes());
        let ttl_left = async {
            match oldest {
                Some(m) => self.lease_ttl_left("look", key, m.kv.lease).await,
                None => Ok(Some(Duration::ZERO)),
            }
        };
        // Our member goes before the refusal is answered: left to a task, it
        // would outlive a process that exits at once, and count ahead of
        // every later member for its TTL.
        let (ttl_left, ()) = tokio::join!(ttl_left, self.revoke(granted.id));
        Ok((
            AcquireReply::Held {
                ttl_left: ttl_left?,
            },
            None,
        ))
    }

    async fn extend(
        &self,
        mode: Mode,
        key: &str,
        token: &OwnerToken,
        ttl: Duration,
    ) -> Result<ExtendReply> {
        self.extend_key(key, &self.member_key(mode, key, token), token, ttl)
            .await
    }

    async fn release(&self, mode: Mode, key: &str, token: &OwnerToken) -> Result<ReleaseOutcome> {
        self.release_key(key, &self.member_key(mode, key, token), token)
            .await
    }

    async fn status(&self, kind: GateKind, key: &str) -> Result<GateStatus> {
        let prefix = self.gate_prefix(kind, key);
        let read = Self::by_creation(&prefix);
        let reply = self
            .conn
            .call("status", key, |c| {
                let read = read.clone();
                async move { c.range(read).await }
            })
            .await?;
        let records: Vec<(Vec<u8>, Vec<u8>)> = reply
            .kvs
            .iter()
            .map(|kv| (kv.key.clone(), kv.value.clone()))
            .collect();
        let members = Self::members(&prefix, reply.kvs);
        let mut status = GateStatus {
            storage_key: prefix.replace('\0', "\\0"),
            ..GateStatus::default()
        };
        for (at, m) in members.iter().enumerate() {
            if !admitted(&members, at, m.mode) {
                status.waiting.push(m.mode);
                continue;
            }
            let record_key = holder_key(&String::from_utf8_lossy(&m.key));
            let holder = records
                .iter()
                .find(|(k, _)| k == record_key.as_bytes())
                .and_then(|(_, v)| holder::decode(v));
            let ttl_left = self
                .lease_ttl_left("status", key, m.kv.lease)
                .await?
                .unwrap_or_default();
            let fence = u64::try_from(m.kv.create_revision).unwrap_or(0);
            status.fence = Some(Fence::new(fence)).max(status.fence);
            status.holders.push(GateHolder {
                mode: m.mode,
                fence: Fence::new(fence),
                ttl_left,
                holder,
            });
        }
        Ok(status)
    }

    async fn watch(&self, kind: GateKind, key: &str, _token: Option<&OwnerToken>) -> ReleaseWatch {
        // A member leaving (released, expired, refused) may admit the
        // members after it.
        let prefix = self.gate_prefix(kind, key);
        self.watch_range(key, &prefix, range_end(&prefix), |event| {
            event.r#type() == EventType::Delete
        })
        .await
    }

    async fn list(&self, kind: GateKind, prefix: &str) -> Result<Vec<(String, GateStatus)>> {
        let start = self.lease_key(prefix);
        let range = RangeRequest::new(start.as_str())
            .with_range(range_end(&start))
            .with_keys_only();
        let reply = self
            .conn
            .call("list", prefix, |c| {
                let range = range.clone();
                async move { c.range(range).await }
            })
            .await?;
        let store_prefix = self.lease_key("");
        let infix = self.gate_prefix(kind, "");
        let infix = infix.strip_prefix(store_prefix.as_str()).unwrap_or(&infix);
        let mut keys: Vec<String> = reply
            .kvs
            .iter()
            .filter_map(|kv| {
                let name = std::str::from_utf8(&kv.key).ok()?;
                let rest = name.strip_prefix(store_prefix.as_str())?;
                let (key, _) = rest.split_once(infix)?;
                Some(key.to_string())
            })
            .collect();
        keys.sort();
        keys.dedup();
        let mut held = Vec::new();
        for key in keys {
            let status = GateStore::status(self, kind, &key).await?;
            if !status.holders.is_empty() {
                held.push((key, status));
            }
        }
        Ok(held)
    }

    fn describe_gates(&self) -> String {
        LeaseStore::describe(self)
    }
}
