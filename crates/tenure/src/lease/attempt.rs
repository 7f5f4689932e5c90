//! One acquire request that cleans up after itself.
//!
//! A caller may stop waiting for an acquire at any `.await` (a
//! `tokio::time::timeout`, a `select!`, a dropped task), and a backend may give
//! up on its own (a response timeout) — while the request is already on its way
//! and will still be granted. Such a grant has no guard: nobody renews or
//! releases it, and the key stays taken until its TTL runs out (up to days).
//!
//! So the request runs in the caller's future with a [`Pending`] beside it.
//! When that future is dropped before the answer arrives, `Pending`'s `Drop`
//! starts the undo: a release with the attempt's own owner token — which can
//! only ever delete this attempt's grant, never someone else's — sent after
//! the request (on Redis, behind it on the same connection). The fate of a
//! request dropped in flight is unknown, so the undo is repeated until it
//! removes a grant or has answered "not held" a few times, spaced out
//! ([`undo_unknown`]). A request that failed in a way that may still have been
//! applied (a timeout, a reset connection) is undone the same way. Nothing
//! blocks in `Drop`, and the common path — an answer read by its caller —
//! spawns nothing. A waiter's look in a store's waiting line ([`turn`]) is
//! undone the same way, by leaving the line (which also passes on a lease
//! handed to it).

use std::sync::Arc;
use std::time::Duration;

use super::cleanup;
use super::holder::HolderInfo;
use super::store::{AcquireReply, ExtendReply, LeaseStore, QueuePlace, ReleaseOutcome};
use crate::error::{Error, Result};
use crate::token::OwnerToken;

type Reply = Result<(AcquireReply, Option<QueuePlace>)>;

/// What an attempt asks the store.
#[derive(Debug, Clone)]
enum Ask {
    /// One [`try_acquire`](LeaseStore::try_acquire).
    Acquire,
    /// One [`wait_turn`](LeaseStore::wait_turn) from the given place.
    Turn(Option<QueuePlace>),
}

/// Sends one acquire request for `token` and returns its answer; if this future
/// is dropped before the answer arrives, a grant is undone.
pub(super) async fn acquire(
    backend: &Arc<dyn LeaseStore>,
    key: &Arc<str>,
    token: &OwnerToken,
    ttl: Duration,
    holder: Option<&HolderInfo>,
) -> Result<AcquireReply> {
    Ok(send(backend, key, token, ttl, holder, Ask::Acquire)
        .await?
        .0)
}

/// Sends one look of a waiter in line ([`wait_turn`](LeaseStore::wait_turn))
/// and returns its answer and the waiter's new place; if this future is
/// dropped before the answer arrives, the waiter leaves the line (passing on
/// a lease handed to it).
pub(super) async fn turn(
    backend: &Arc<dyn LeaseStore>,
    key: &Arc<str>,
    token: &OwnerToken,
    ttl: Duration,
    holder: Option<&HolderInfo>,
    place: Option<QueuePlace>,
) -> Reply {
    send(backend, key, token, ttl, holder, Ask::Turn(place)).await
}

/// Sends `ask`; `holder` is what a grant records (see
/// [`Lease::record_holder`](super::Lease::record_holder)).
async fn send(
    backend: &Arc<dyn LeaseStore>,
    key: &Arc<str>,
    token: &OwnerToken,
    ttl: Duration,
    holder: Option<&HolderInfo>,
    ask: Ask,
) -> Reply {
    let mut pending = Pending {
        backend,
        key,
        token,
        ttl,
        ask,
        answered: false,
    };
    let sent = backend.clock().now();
    let reply = pending.request(holder).await;
    let reply = pending.confirm_late(sent, reply).await;
    pending.answered = true;
    // A failure that may have happened after the store applied the request
    // (a timeout, a reset connection, a grant that came too late) may have
    // left a grant. (The quorum and the replica check undo their own grants.)
    if matches!(
        &reply,
        Err(Error::Timeout { .. } | Error::Unreachable { .. } | Error::Backend { .. })
    ) {
        pending.undo_in_background();
    }
    reply
}

/// An acquire request on its way: what undoing it needs, borrowed from the
/// caller (shared handles are cloned only for an undo, so a request that is
/// answered touches no reference count).
struct Pending<'a> {
    backend: &'a Arc<dyn LeaseStore>,
    key: &'a Arc<str>,
    token: &'a OwnerToken,
    ttl: Duration,
    ask: Ask,
    /// Set once the caller has the answer: nothing is left to undo then.
    answered: bool,
}

impl Pending<'_> {
    /// Sends the request and waits for its answer.
    async fn request(&self, holder: Option<&HolderInfo>) -> Reply {
        let (backend, key, token, ttl) = (&**self.backend, self.key, self.token, self.ttl);
        match &self.ask {
            Ask::Acquire => backend
                .try_acquire(key, token, ttl, holder)
                .await
                .map(|r| (r, None)),
            Ask::Turn(place) => {
                backend
                    .wait_turn(key, token, ttl, holder, place.as_ref())
                    .await
            }
        }
    }

    /// Confirms a grant that arrived too late ([`confirm_late`]).
    async fn confirm_late(&self, sent: crate::clock::Moment, reply: Reply) -> Reply {
        confirm_late(&**self.backend, self.key, self.token, self.ttl, sent, reply).await
    }

    /// Undoes a request of unknown fate from a task of its own, which
    /// [`Coordinator::close`](crate::Coordinator::close) waits for (best
    /// effort: without a runtime, the TTL frees the key).
    fn undo_in_background(&self) {
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (backend, key, token) = (
            Arc::clone(self.backend),
            Arc::clone(self.key),
            self.token.clone(),
        );
        let (ttl, ask) = (self.ttl, self.ask.clone());
        cleanup::spawn(&handle, async move {
            undo_unknown(&*backend, &key, &token, ttl, &ask).await;
        });
    }
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        if !self.answered {
            self.undo_in_background();
        }
    }
}

/// A grant whose validity was already over when its reply arrived (a server
/// that froze after running the request, a stalled link) is never handed
/// out as it is: an extend with the same token — tokens are never reused —
/// confirms it, its validity counting from the extend's send. When the key
/// no longer holds the token, or the extend too comes back too late, the
/// attempt failed: it becomes an [`Error::Timeout`] (transient, so a wait
/// retries it within its budget) and the caller undoes whatever is left.
async fn confirm_late(
    backend: &dyn LeaseStore,
    key: &str,
    token: &OwnerToken,
    ttl: Duration,
    sent: crate::clock::Moment,
    reply: Reply,
) -> Reply {
    let clock = backend.clock();
    let Ok((AcquireReply::Acquired { fence, valid_until }, place)) = reply else {
        return reply;
    };
    if valid_until > clock.now() {
        return Ok((AcquireReply::Acquired { fence, valid_until }, place));
    }
    tracing::debug!(key, "the grant arrived after its validity; confirming it");
    match backend.extend(key, token, ttl).await? {
        ExtendReply::Extended { valid_until } if valid_until > clock.now() => {
            Ok((AcquireReply::Acquired { fence, valid_until }, place))
        }
        _ => Err(Error::Timeout {
            backend: backend.describe(),
            op: "acquire",
            key: key.to_string(),
            after: clock.now().saturating_duration_since(sent),
        }),
    }
}

/// Undoes what `ask` may have left: releases a grant, or leaves the line
/// (which passes on a lease handed to `token`).
async fn take_back(
    backend: &dyn LeaseStore,
    key: &str,
    token: &OwnerToken,
    ask: &Ask,
) -> Result<ReleaseOutcome> {
    match ask {
        Ask::Acquire => backend.release(key, token).await,
        Ask::Turn(place) => backend.leave_line(key, token, place.as_ref()).await,
    }
}

/// Undoes a request whose fate is unknown (it timed out, the connection
/// broke). The request may still be sitting in a frozen server's socket, on a
/// connection the client has already replaced — so a release on the new
/// connection can run *before* the grant. The release is therefore repeated:
/// while it fails (the server is still away), and a few times after it first
/// answers "not held", spaced out so that requests queued on other connections
/// have run by then. Each try is a compare-and-delete with this attempt's own
/// token, harmless to everyone else. After the TTL there is nothing to undo;
/// and after [`UNDO_WINDOW`] the task gives up too, so that a waiter retrying
/// against a store that is down for long does not pile up undo traffic (a
/// grant applied by a server frozen for longer than that lasts until its TTL).
async fn undo_unknown(
    backend: &dyn LeaseStore,
    key: &str,
    token: &OwnerToken,
    ttl: Duration,
    ask: &Ask,
) {
    let give_up = tokio::time::Instant::now() + ttl.min(UNDO_WINDOW);
    let mut pause = UNDO_FIRST_PAUSE;
    let mut not_held = 0;
    loop {
        match take_back(backend, key, token, ask).await {
            Ok(ReleaseOutcome::Released) => {
                tracing::debug!(key, "undid a grant of a failed acquire");
                return;
            }
            Ok(_) => {
                not_held += 1;
                if not_held >= UNDO_CONFIRMATIONS {
                    return;
                }
            }
            Err(e) if !e.is_transient() => {
                tracing::warn!(key, error = %e, "undoing a failed acquire failed; its TTL will free the key");
                return;
            }
            Err(_) => {}
        }
        if tokio::time::Instant::now() + pause >= give_up {
            return;
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(UNDO_MAX_PAUSE);
    }
}

/// First pause between undo tries of a request with an unknown fate.
const UNDO_FIRST_PAUSE: Duration = Duration::from_millis(100);

/// Longest pause between undo tries.
const UNDO_MAX_PAUSE: Duration = Duration::from_secs(5);

/// How long a request with an unknown fate is undone at most.
const UNDO_WINDOW: Duration = Duration::from_secs(60);

/// "Not held" answers after which a request with an unknown fate is taken as
/// never applied (spread over 100 + 200 ms after the first answer).
const UNDO_CONFIRMATIONS: u32 = 3;
