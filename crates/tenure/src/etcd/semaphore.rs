//! Expiring semaphores on etcd: one key per permit,
//! `{prefix}{key}\0permit\0{token}`, bound to an etcd lease of its own, so a
//! permit is acquired, renewed and released exactly like a lease.
//!
//! Taking a permit is one transaction that creates the permit key and reads
//! the semaphore's first N permit keys by create revision: the new permit is
//! admitted when it is among them, that is when fewer than N permits were
//! created before it and are still there. Otherwise its etcd lease is revoked
//! (which deletes the key). The fence is the permit key's create revision.
//!
//! This never admits more than N: if N + 1 admitted permits existed at once,
//! the newest of them would have read the N older ones (they were created
//! before it and are still there) and refused itself. A refused attempt's
//! key is visible to others until its revocation, so two attempts racing for
//! the last permit may both be refused; waiters are woken by that revocation
//! and try again.

use std::num::NonZeroU32;
use std::time::Duration;

use async_trait::async_trait;

use super::EtcdStore;
use super::api::etcdserverpb::range_request::{SortOrder, SortTarget};
use super::api::etcdserverpb::{PutRequest, RangeRequest, RequestOp, TxnRequest};
use super::api::mvccpb::KeyValue;
use super::api::mvccpb::event::EventType;
use super::keys::{permit_key, permits_prefix, range_end};
use crate::error::Result;
use crate::fence::Fence;
use crate::lease::{
    AcquireReply, ExtendReply, LeaseStore, ReleaseOutcome, ReleaseWatch, valid_until,
};
use crate::semaphore::SemaphoreStore;
use crate::token::OwnerToken;

impl EtcdStore {
    /// The prefix of the permit keys of semaphore `key`.
    pub fn permits_prefix(&self, key: &str) -> String {
        permits_prefix(&self.lease_key(key))
    }

    fn permit_key(&self, key: &str, token: &OwnerToken) -> String {
        permit_key(&self.permits_prefix(key), token.as_str())
    }

    /// Creates `permit` holding `token` on etcd lease `lease` and reads the
    /// semaphore's first `permits` permit keys by create revision, in one
    /// transaction.
    async fn put_permit(
        &self,
        key: &str,
        permit: &str,
        token: &OwnerToken,
        lease: i64,
        permits: NonZeroU32,
    ) -> Result<Vec<KeyValue>> {
        let prefix = self.permits_prefix(key);
        let first_n = by_creation(&prefix, SortOrder::Ascend, i64::from(permits.get()));
        let txn = TxnRequest::new().and_then([
            RequestOp::put(PutRequest::new(permit, token.as_str()).with_lease(lease)),
            RequestOp::get(first_n),
        ]);
        let reply = self.txn("acquire permit", key, txn).await?;
        Ok(reply.reads().into_iter().flatten().collect())
    }

    /// A permit not among the first: its etcd lease is revoked at once (its
    /// key counts against every other attempt until it is gone), and the
    /// holder is told when the oldest permit runs out.
    async fn refuse_permit(&self, key: &str, id: i64, first: &[KeyValue]) -> Result<AcquireReply> {
        if let Err(e) = self
            .conn
            .call("acquire permit", key, |c| async move {
                c.lease_revoke(id).await
            })
            .await
        {
            tracing::debug!(lease = id, error = %e, "revoking a refused permit failed; its TTL will end it");
        }
        // The oldest permit's lease runs out first or with the others: by then
        // at least one permit is free.
        let ttl_left = match first.first() {
            Some(oldest) => {
                self.lease_ttl_left("acquire permit", key, oldest.lease)
                    .await?
            }
            None => Some(Duration::ZERO),
        };
        Ok(AcquireReply::Held { ttl_left })
    }
}

/// The permit keys under `prefix`, sorted by create revision.
fn by_creation(prefix: &str, order: SortOrder, limit: i64) -> RangeRequest {
    RangeRequest::new(prefix)
        .with_range(range_end(prefix))
        .with_sort(SortTarget::Create, order)
        .with_limit(limit)
}

#[async_trait]
impl SemaphoreStore for EtcdStore {
    async fn acquire_permit(
        &self,
        key: &str,
        token: &OwnerToken,
        ttl: Duration,
        permits: NonZeroU32,
    ) -> Result<AcquireReply> {
        let start = crate::clock::now();
        let permit = self.permit_key(key, token);
        let granted = self.grant("acquire permit", key, ttl).await?;
        let first = match self
            .put_permit(key, &permit, token, granted.id, permits)
            .await
        {
            Ok(first) => first,
            Err(e) => {
                // Its fate is unknown; revoking the lease undoes it if it applied.
                self.revoke_in_background(granted.id);
                return Err(e);
            }
        };
        if let Some(ours) = first.iter().find(|kv| kv.key == permit.as_bytes()) {
            let fence = self.created_fence(&permit, Some(ours.clone()))?;
            self.remember(&permit, token, granted);
            return Ok(AcquireReply::Acquired {
                fence,
                valid_until: valid_until(start, ttl),
            });
        }
        self.refuse_permit(key, granted.id, &first).await
    }

    async fn extend_permit(
        &self,
        key: &str,
        token: &OwnerToken,
        ttl: Duration,
    ) -> Result<ExtendReply> {
        self.extend_key(key, &self.permit_key(key, token), token, ttl)
            .await
    }

    async fn release_permit(&self, key: &str, token: &OwnerToken) -> Result<ReleaseOutcome> {
        self.release_key(key, &self.permit_key(key, token), token)
            .await
    }

    async fn permits_held(&self, key: &str) -> Result<(u32, Option<Fence>)> {
        let prefix = self.permits_prefix(key);
        // The count of the whole range, and its newest key for the last fence.
        let newest = by_creation(&prefix, SortOrder::Descend, 1);
        let reply = self
            .conn
            .call("count permits", key, |c| {
                let newest = newest.clone();
                async move { c.range(newest).await }
            })
            .await?;
        let held = u32::try_from(reply.count).unwrap_or(u32::MAX);
        let fence = reply
            .kvs
            .first()
            .and_then(|kv| u64::try_from(kv.create_revision).ok())
            .map(Fence::new);
        Ok((held, fence))
    }

    async fn watch_permits(&self, key: &str) -> ReleaseWatch {
        // A deleted permit key is a release, an expiry or a refused attempt
        // going away: any of them may free a place.
        let prefix = self.permits_prefix(key);
        self.watch_range(key, &prefix, range_end(&prefix), |event| {
            event.r#type() == EventType::Delete
        })
        .await
    }

    fn describe_semaphores(&self) -> String {
        self.describe()
    }
}
