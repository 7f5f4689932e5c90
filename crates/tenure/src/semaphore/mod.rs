//! Expiring semaphores: up to N holders of one key at once, each permit a lease.
//!
//! A permit is acquired, renewed and released like a lease — one atomic script
//! (Redis) or transaction (SQLite, etcd) each — so it has a TTL, the watchdog, the
//! lost signal and a fence: [`Semaphore::lease`] returns an ordinary
//! [`Lease`] whose guards are permits. Fences are strictly increasing per
//! semaphore (one counter for all its permits) and floored by the store's
//! clock as a lease's, so a store that lost its data goes on above them. A crashed holder's permit
//! expires with its TTL. The number of permits is given with each acquisition:
//! changing it applies to new acquisitions, which are admitted only while
//! fewer than the new N permits are held, so once the old holders are gone
//! never more than the new N hold.
//!
//! # Fairness
//!
//! Waiters are served in arrival order on every store: they stand in one line
//! per semaphore (see [`gate`](crate::gate)), and a freed permit goes to the
//! first waiter in line, never to a newcomer or a single
//! [`try_acquire`](crate::Lease::try_acquire) while someone waits. A waiter
//! that dies in line (killed, cut off) holds up those behind it for about a
//! second, whatever its TTL (its place lives a second after its last look). Waiters are woken by the grant on Redis and in memory, by a
//! member leaving on etcd, and poll on SQLite. The permit count stays exact when holders are killed
//! (their permits expire with their TTL) and across restarts of the holders;
//! on SQLite and etcd the permits survive a restart of the store, on a
//! Redis master they live as long as its data.
//!
//! On a quorum of Redis masters semaphores are refused with
//! [`Error::Unsupported`](crate::Error::Unsupported) naming an
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

use std::num::NonZeroU32;
use std::sync::Arc;

use crate::error::Result;
use crate::gate::{Gate, GateKind, GateStatus, GateStore, Mode};
use crate::lease::Lease;

/// An expiring semaphore on one key; see the [module docs](self).
#[derive(Debug, Clone)]
pub struct Semaphore {
    key: String,
    permits: NonZeroU32,
    store: Arc<dyn GateStore>,
}

impl Semaphore {
    pub(crate) fn new(store: Arc<dyn GateStore>, key: String, permits: NonZeroU32) -> Self {
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
        let gate = Gate::new(Arc::clone(&self.store), Mode::Permit(self.permits));
        Lease::new(Arc::new(gate), self.key.clone())
    }

    /// How many permits are held now.
    pub async fn held(&self) -> Result<u32> {
        let status = self.status().await?;
        Ok(u32::try_from(status.holders.len()).unwrap_or(u32::MAX))
    }

    /// The holders (with their fences and recorded holders) and the waiters.
    pub async fn status(&self) -> Result<GateStatus> {
        crate::key::validate_key(&self.key)?;
        self.store.status(GateKind::Semaphore, &self.key).await
    }
}
