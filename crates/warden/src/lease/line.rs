//! A waiter's stand in a store's waiting line, for one
//! [`Lease::acquire_within`](super::Lease::acquire_within).
//!
//! The waiter keeps one owner token for the whole wait (its place in line is
//! keyed by it) and a watch that wakes when the lease is handed to that token.
//! A wait that ends without the lease leaves the line; a wait that is
//! cancelled (its future dropped) leaves it in the background, passing on a
//! lease that was handed to it meanwhile. Nothing blocks in `Drop`.

use std::sync::Arc;
use std::time::Duration;

use super::attempt;
use super::holder::HolderInfo;
use super::release_watch::ReleaseWatch;
use super::store::{AcquireReply, LeaseStore, QueuePlace};
use crate::error::Result;
use crate::token::OwnerToken;

pub(super) struct Line {
    backend: Arc<dyn LeaseStore>,
    key: String,
    token: OwnerToken,
    place: Option<QueuePlace>,
    watch: ReleaseWatch,
    standing: bool,
    looked: bool,
}

impl Line {
    /// Starts watching for a hand-off to a fresh token; the first
    /// [`look`](Self::look) takes the place in line.
    pub(super) async fn join(backend: Arc<dyn LeaseStore>, key: &str) -> Result<Line> {
        let token = OwnerToken::generate()?;
        let watch = backend.watch_turn(key, &token).await;
        Ok(Line {
            backend,
            key: key.to_string(),
            token,
            place: None,
            watch,
            standing: true,
            looked: false,
        })
    }

    /// One look: the lease when it is this waiter's turn, else its place is
    /// kept (or taken). A grant records `holder`, if any.
    pub(super) async fn look(
        &mut self,
        ttl: Duration,
        holder: Option<Arc<HolderInfo>>,
    ) -> Result<AcquireReply> {
        if self.looked && self.place.is_none() {
            // A store without a line keeps no place: each look is a plain
            // attempt, and gets a fresh token so a late clean-up of an earlier
            // one (a quorum undoing a lost vote) can never delete this grant.
            self.token = OwnerToken::generate()?;
        }
        self.looked = true;
        let (reply, place) = attempt::turn(
            Arc::clone(&self.backend),
            self.key.clone(),
            self.token.clone(),
            ttl,
            holder,
            self.place.clone(),
        )
        .await?;
        match reply {
            AcquireReply::Acquired { .. } => self.standing = false,
            AcquireReply::Held { .. } => self.place = place,
        }
        Ok(reply)
    }

    /// The token this waiter stands in line with.
    pub(super) fn token(&self) -> &OwnerToken {
        &self.token
    }

    /// Whether the store keeps a place for this waiter (a store without a
    /// line keeps none: its waiters race).
    pub(super) fn has_place(&self) -> bool {
        self.place.is_some()
    }

    /// The watch that wakes this waiter.
    pub(super) fn watch(&mut self) -> &mut ReleaseWatch {
        &mut self.watch
    }

    /// Leaves the line now (best effort: a place left behind dies after its
    /// TTL).
    pub(super) async fn leave(mut self) {
        self.standing = false;
        if self.place.is_some() {
            leave(&*self.backend, &self.key, &self.token, self.place.as_ref()).await;
        }
    }
}

async fn leave(
    backend: &dyn LeaseStore,
    key: &str,
    token: &OwnerToken,
    place: Option<&QueuePlace>,
) {
    if let Err(e) = backend.leave_line(key, token, place).await {
        tracing::debug!(key, error = %e, "leaving the waiting line failed; the place dies after its TTL");
    }
}

impl Drop for Line {
    fn drop(&mut self) {
        if !self.standing || self.place.is_none() {
            return;
        }
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (backend, key, token, place) = (
            Arc::clone(&self.backend),
            self.key.clone(),
            self.token.clone(),
            self.place.clone(),
        );
        handle.spawn(async move { leave(&*backend, &key, &token, place.as_ref()).await });
    }
}
