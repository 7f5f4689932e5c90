//! Without a `tracing` subscriber, tenure's spans cost what a disabled
//! callsite costs: their fields, the store's description included, are not
//! computed. This holds also when another crate of the program turns on
//! `tracing`'s `log` feature (axum's default `tower-log` does, and this
//! crate's tests build with it): a disabled span then offers its fields to
//! the `log` crate, and only a logger that takes the record formats them.
//! With the `metrics` feature, each metric point's `store` label is the
//! store's `kind`, which tenure's stores answer without describing
//! themselves (the wrappers below pass it on from the store they wrap).

#![allow(clippy::unwrap_used)]

use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use tenure::Coordinator;
use tenure::lease::store::{AcquireReply, ExtendReply, LeaseStore, OwnerToken, ReleaseWatch};
use tenure::lease::{HolderInfo, LeaseStatus, ReleaseOutcome};
use tenure::limit::store::{LimitRequest, LimitStore};
use tenure::limit::{Algorithm, Decision, Limiter, Quota, Timestamp};
use tenure::memory::{MemoryLimits, MemoryStore};

/// How often a store was asked to describe itself.
type Described = Arc<AtomicU32>;

/// The memory lease store, counting the calls of `describe`.
#[derive(Debug, Default)]
struct Leases {
    inner: MemoryStore,
    described: Described,
}

#[async_trait]
impl LeaseStore for Leases {
    async fn try_acquire(
        &self,
        key: &str,
        token: &OwnerToken,
        ttl: Duration,
        holder: Option<&HolderInfo>,
    ) -> tenure::Result<AcquireReply> {
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
        self.inner.watch_releases(key).await
    }
    fn describe(&self) -> String {
        self.described.fetch_add(1, Ordering::SeqCst);
        self.inner.describe()
    }
    fn kind(&self) -> Cow<'static, str> {
        self.inner.kind()
    }
}

/// The memory limit store, counting the calls of `describe` (and never
/// deciding inline, so every check goes the store's way, in its span).
#[derive(Debug)]
struct Limits {
    inner: MemoryLimits,
    described: Described,
}

#[async_trait]
impl LimitStore for Limits {
    async fn apply(&self, request: &LimitRequest<'_>) -> tenure::Result<Vec<Decision>> {
        LimitStore::apply(&self.inner, request).await
    }
    async fn now(&self) -> tenure::Result<Timestamp> {
        LimitStore::now(&self.inner).await
    }
    fn describe(&self) -> String {
        self.described.fetch_add(1, Ordering::SeqCst);
        self.inner.describe()
    }
    fn kind(&self) -> Cow<'static, str> {
        self.inner.kind()
    }
}

#[tokio::test]
async fn lease_spans_compute_no_field_without_a_subscriber() {
    let described = Described::default();
    let tenure = Coordinator::with_backend(Leases {
        inner: MemoryStore::default(),
        described: Arc::clone(&described),
    });
    let lease = tenure.lease("orders").ttl(Duration::from_secs(10));
    let guard = lease.attempt().await.unwrap().into_guard().unwrap();
    assert!(matches!(
        guard.extend().await.unwrap(),
        tenure::ExtendOutcome::Extended { .. }
    ));
    guard.release().await.unwrap();
    let waited = lease.attempt_within(Duration::from_secs(1)).await.unwrap();
    drop(waited.into_guard().unwrap());
    assert_eq!(
        described.load(Ordering::SeqCst),
        0,
        "the store was described for spans nobody records, or for a metric label"
    );
}

#[tokio::test]
async fn limit_spans_compute_no_field_without_a_subscriber() {
    let described = Described::default();
    let store = Limits {
        inner: MemoryLimits::default(),
        described: Arc::clone(&described),
    };
    let quota = Quota::new(10, Duration::from_secs(1)).unwrap();
    let limiter = Limiter::new(store, quota, Algorithm::Gcra);
    assert!(limiter.check("api:alice").await.unwrap().allowed);
    assert_eq!(
        described.load(Ordering::SeqCst),
        0,
        "the store was described for spans nobody records, or for a metric label"
    );
}
