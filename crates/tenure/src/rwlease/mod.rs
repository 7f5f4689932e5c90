//! Read-write leases: many readers or one writer per key.
//!
//! [`RwLease::read`] and [`RwLease::write`] return ordinary [`Lease`]
//! descriptions whose guards are shared (read) or exclusive (write) grants of
//! one key: set the TTL and watchdog, then acquire, wait, renew and release
//! as with any lease. Each guard has the lost signal and a fence.
//!
//! - **Never a writer with anyone else.** A writer is granted only when
//!   nobody holds the key; readers only while no writer does.
//! - **Writers are not starved.** Waiters stand in one line in arrival order
//!   (see [`gate`](crate::gate)): a writer waiting for readers to leave
//!   blocks the readers that come after it, so it waits only for the readers
//!   that were there before it.
//! - **Fences.** One counter per key, floored by the store's clock as a
//!   lease's (a store that lost its data goes on above every earlier fence);
//!   every grant, read or write, takes the next value. A writer's fence is above every fence handed out before it,
//!   and a reader's fence is above the fence of every writer granted before
//!   it. A resource that remembers the fence of the last write it accepted
//!   can therefore refuse a reader that started before that writer (its
//!   fence is lower) while it accepts readers that came after.
//! - **No upgrade, no downgrade.** A reader that needs to write releases its
//!   read grant and asks for a write grant (a new fence, behind whoever
//!   waits); there is no in-place upgrade, so two readers cannot deadlock
//!   waiting to upgrade.
//!
//! Stores: SQLite, one Redis master (and a Sentinel's master), a Redis
//! Cluster (the gate of a key is one key, so one slot), etcd and memory. A
//! quorum of Redis masters refuses with
//! [`Error::Unsupported`](crate::Error::Unsupported): a shared grant split
//! across independent masters would need its own majority protocol.
//!
//! # What a read-write lease does not guarantee
//!
//! As for every lease: exclusion *by the holders' own local deadlines*. A
//! holder paused past its TTL may act after its grant was given to a writer;
//! only a check at the resource (the fences above) catches that. FIFO order
//! covers waiters; a waiter killed in line delays those behind it by about a
//! second (its place lives a second after its last look), whatever its TTL.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> tenure::Result<()> {
//! use std::time::Duration;
//!
//! let tenure = tenure::Coordinator::memory();
//! let config = tenure.rw_lease("config")?;
//! let read = config.read().ttl(Duration::from_secs(10));
//! let a = read.try_acquire().await?.expect("readers share");
//! let b = read.try_acquire().await?.expect("readers share");
//! assert!(config.write().try_acquire().await?.is_none()); // readers hold
//! let read_fence = b.fence();
//! a.release().await?;
//! b.release().await?;
//! let w = config.write().try_acquire().await?.expect("free now");
//! assert!(w.fence() > read_fence); // above every earlier fence
//! # Ok(()) }
//! ```

use std::sync::Arc;

use crate::error::Result;
use crate::gate::{Gate, GateKind, GateStatus, GateStore, Mode};
use crate::lease::Lease;

/// A read-write lease on one key; see the [module docs](self).
#[derive(Debug, Clone)]
pub struct RwLease {
    key: String,
    store: Arc<dyn GateStore>,
}

impl RwLease {
    pub(crate) fn new(store: Arc<dyn GateStore>, key: String) -> Self {
        RwLease { key, store }
    }

    /// The key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// A lease description whose guards are shared (read) grants.
    pub fn read(&self) -> Lease {
        self.lease(Mode::Read)
    }

    /// A lease description whose guards are the exclusive (write) grant.
    pub fn write(&self) -> Lease {
        self.lease(Mode::Write)
    }

    fn lease(&self, mode: Mode) -> Lease {
        let gate = Gate::new(Arc::clone(&self.store), mode);
        Lease::new(Arc::new(gate), self.key.clone())
    }

    /// Who holds the key now (readers or the writer, with their fences and
    /// recorded holders) and what the waiters ask for.
    pub async fn status(&self) -> Result<GateStatus> {
        crate::key::validate_key(&self.key)?;
        self.store.status(GateKind::ReadWrite, &self.key).await
    }
}
