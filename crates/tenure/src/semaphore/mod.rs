//! Expiring semaphores: up to N holders of one key at once, each permit a lease.
//!
//! A permit is acquired, renewed and released like a lease — one atomic script
//! (Redis) or transaction (SQLite, etcd) each — so it has a TTL, the watchdog, the
//! lost signal and a fence: [`Semaphore::lease`] returns an ordinary
//! [`Lease`] whose guards are permits. Fences are strictly increasing per
//! semaphore (one counter for all its permits). A crashed holder's permit
//! expires with its TTL. The number of permits is given with each acquisition:
//! changing it applies to new acquisitions, which are admitted only while
//! fewer than the new N permits are held, so once the old holders are gone
//! never more than the new N hold. Waiters are woken by releases on Redis,
//! etcd and in memory, and poll on SQLite; woken waiters race (permits have no
//! waiting line).
//!
//! On a quorum of Redis masters semaphores are refused with
//! [`Error::InvalidArgument`](crate::Error::InvalidArgument) naming an
//! alternative store: a permit count split across independent masters would
//! need its own majority protocol.
//!
//! # What a semaphore does not guarantee
//!
//! At most N holders *by the holders' own local deadlines*, as for leases: a
//! holder paused past its TTL may still act after its permit was given to
//! another. Fences order acquisitions of the semaphore; with N > 1 several
//! current holders have different fences, so a fenced resource fits one
//! permit's work, not the set.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> tenure::Result<()> {
//! use std::num::NonZeroU32;
//! use std::time::Duration;
//!
//! let tenure = tenure::Coordinator::memory();
//! let slots = tenure.semaphore("encoders", NonZeroU32::new(2).unwrap())?;
//! let lease = slots.lease().ttl(Duration::from_secs(10)).watchdog(true);
//! let a = lease.try_acquire().await?.expect("permit 1");
//! let b = lease.try_acquire().await?.expect("permit 2");
//! assert!(lease.try_acquire().await?.is_none()); // full
//! assert!(b.fence() > a.fence());
//! a.release().await?;
//! assert!(lease.try_acquire().await?.is_some());
//! # Ok(()) }
//! ```

use std::fmt::Debug;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::error::Result;
use crate::fence::Fence;
use crate::lease::{
    AcquireReply, ExtendReply, HolderInfo, Lease, LeaseStatus, LeaseStore, ReleaseOutcome,
    ReleaseWatch,
};
use crate::token::OwnerToken;

/// What a store provides for semaphores. Every call is atomic on the store.
#[async_trait]
pub trait SemaphoreStore: Debug + Send + Sync + 'static {
    /// Takes a permit of `key` for `token` unless `permits` are held already;
    /// on success increments the semaphore's fence counter and returns it.
    /// `Held` carries the time until the soonest permit expires.
    async fn acquire_permit(
        &self,
        key: &str,
        token: &OwnerToken,
        ttl: Duration,
        permits: NonZeroU32,
    ) -> Result<AcquireReply>;

    /// Resets the TTL of `token`'s permit if it is still held.
    async fn extend_permit(
        &self,
        key: &str,
        token: &OwnerToken,
        ttl: Duration,
    ) -> Result<ExtendReply>;

    /// Gives `token`'s permit back, and wakes waiters.
    async fn release_permit(&self, key: &str, token: &OwnerToken) -> Result<ReleaseOutcome>;

    /// How many permits are held now, and the last fence.
    async fn permits_held(&self, key: &str) -> Result<(u32, Option<Fence>)>;

    /// Starts watching `key` for permit releases.
    async fn watch_permits(&self, key: &str) -> ReleaseWatch;

    /// A short description for messages.
    fn describe_semaphores(&self) -> String;
}

/// An expiring semaphore on one key; see the [module docs](self).
#[derive(Debug, Clone)]
pub struct Semaphore {
    key: String,
    permits: NonZeroU32,
    store: Arc<dyn SemaphoreStore>,
}

impl Semaphore {
    pub(crate) fn new(store: Arc<dyn SemaphoreStore>, key: String, permits: NonZeroU32) -> Self {
        Semaphore {
            key,
            permits,
            store,
        }
    }

    /// The number of permits new acquisitions are admitted against.
    pub fn permits(&self) -> NonZeroU32 {
        self.permits
    }

    /// A lease description whose guards are permits of this semaphore: set
    /// its TTL and watchdog, then acquire, wait, renew and release as with
    /// any lease.
    pub fn lease(&self) -> Lease {
        let adapter = Permits {
            store: Arc::clone(&self.store),
            permits: self.permits,
        };
        Lease::new(Arc::new(adapter), self.key.clone())
    }

    /// How many permits are held now.
    pub async fn held(&self) -> Result<u32> {
        crate::key::validate_key(&self.key)?;
        Ok(self.store.permits_held(&self.key).await?.0)
    }
}

/// A semaphore seen as a lease store: the lease layer's guard, watchdog,
/// waiting and clean-up of abandoned attempts work on permits unchanged.
#[derive(Debug)]
struct Permits {
    store: Arc<dyn SemaphoreStore>,
    permits: NonZeroU32,
}

#[async_trait]
impl LeaseStore for Permits {
    async fn try_acquire(
        &self,
        key: &str,
        token: &OwnerToken,
        ttl: Duration,
        // Permits record no holder (see `Lease::record_holder`).
        _holder: Option<&HolderInfo>,
    ) -> Result<AcquireReply> {
        self.store
            .acquire_permit(key, token, ttl, self.permits)
            .await
    }

    async fn extend(&self, key: &str, token: &OwnerToken, ttl: Duration) -> Result<ExtendReply> {
        self.store.extend_permit(key, token, ttl).await
    }

    async fn release(&self, key: &str, token: &OwnerToken) -> Result<ReleaseOutcome> {
        self.store.release_permit(key, token).await
    }

    async fn status(&self, key: &str) -> Result<LeaseStatus> {
        let (held, fence) = self.store.permits_held(key).await?;
        Ok(LeaseStatus {
            held: held >= self.permits.get(),
            ttl_left: None,
            fence,
            storage_key: format!("{key} (semaphore, {held} of {} held)", self.permits),
            holder: None,
            waiters: None,
        })
    }

    async fn watch_releases(&self, key: &str) -> ReleaseWatch {
        self.store.watch_permits(key).await
    }

    fn describe(&self) -> String {
        self.store.describe_semaphores()
    }
}
