//! Every acquire attempt carries a fresh owner token, so a late clean-up of an
//! earlier attempt can never delete a later grant.

#![allow(clippy::unwrap_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tenure::Coordinator;
use tenure::lease::store::{AcquireReply, ExtendReply, LeaseStore, OwnerToken, ReleaseWatch};
use tenure::lease::{HolderInfo, LeaseStatus, ReleaseOutcome};
use tenure::memory::MemoryStore;

/// The memory backend, recording the token of every acquire attempt.
#[derive(Debug, Clone, Default)]
struct Recording {
    inner: MemoryStore,
    tokens: Arc<Mutex<Vec<String>>>,
}

#[async_trait]
impl LeaseStore for Recording {
    async fn try_acquire(
        &self,
        key: &str,
        token: &OwnerToken,
        ttl: Duration,
        holder: Option<&HolderInfo>,
    ) -> tenure::Result<AcquireReply> {
        self.tokens.lock().unwrap().push(token.as_str().to_string());
        self.inner.try_acquire(key, token, ttl, holder).await
    }
    async fn extend(
        &self,
        key: &str,
        token: &OwnerToken,
        ttl: Duration,
    ) -> tenure::Result<ExtendReply> {
        self.inner.extend(key, token, ttl).await
    }
    async fn release(&self, key: &str, token: &OwnerToken) -> tenure::Result<ReleaseOutcome> {
        self.inner.release(key, token).await
    }
    async fn status(&self, key: &str) -> tenure::Result<LeaseStatus> {
        self.inner.status(key).await
    }
    async fn watch_releases(&self, key: &str) -> ReleaseWatch {
        // Poll, so the waiter makes several attempts.
        let _ = key;
        ReleaseWatch::polling()
    }
    fn describe(&self) -> String {
        "recording memory".into()
    }
}

#[tokio::test]
async fn each_attempt_uses_a_fresh_owner_token() {
    let backend = Recording::default();
    let tenure = Coordinator::with_backend(backend.clone());
    let lease = tenure
        .lease("tokens")
        .watchdog(false)
        .ttl(Duration::from_millis(300));
    let holder = lease.attempt().await.unwrap().into_guard().unwrap();
    let got = lease.attempt_within(Duration::from_secs(5)).await.unwrap();
    assert!(got.is_acquired());
    drop(holder);
    let tokens = backend.tokens.lock().unwrap().clone();
    assert!(tokens.len() >= 3, "the waiter retried: {}", tokens.len());
    let mut unique = tokens.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(
        unique.len(),
        tokens.len(),
        "a token was reused across attempts"
    );
}
