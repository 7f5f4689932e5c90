//! One acquire request that cleans up after itself.
//!
//! A caller may stop waiting for an acquire at any `.await` (a
//! `tokio::time::timeout`, a `select!`, a dropped task), and a backend may give
//! up on its own (a response timeout) — while the request is already on its way
//! and will still be granted. Such a grant has no guard: nobody renews or
//! releases it, and the key stays taken until its TTL runs out (up to days).
//!
//! So the request runs in a task of its own that always sees the answer. When
//! the caller is gone by then, or the request failed in a way that may still
//! have been applied, the task releases the key with the attempt's own owner
//! token — which can only ever delete this attempt's grant, never someone
//! else's. Nothing blocks in `Drop`. A waiter's look in a store's waiting line
//! ([`turn`]) is undone the same way, by leaving the line (which also passes on
//! a lease handed to it).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;

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
/// is dropped before the answer arrives, a grant that arrives later is undone.
pub(super) async fn acquire(
    backend: Arc<dyn LeaseStore>,
    key: String,
    token: OwnerToken,
    ttl: Duration,
    holder: Option<Arc<HolderInfo>>,
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
    backend: Arc<dyn LeaseStore>,
    key: String,
    token: OwnerToken,
    ttl: Duration,
    holder: Option<Arc<HolderInfo>>,
    place: Option<QueuePlace>,
) -> Reply {
    send(backend, key, token, ttl, holder, Ask::Turn(place)).await
}

/// Sends `ask`; `holder` is what a grant records (see
/// [`Lease::record_holder`](super::Lease::record_holder)).
async fn send(
    backend: Arc<dyn LeaseStore>,
    key: String,
    token: OwnerToken,
    ttl: Duration,
    holder: Option<Arc<HolderInfo>>,
    ask: Ask,
) -> Reply {
    let (tx, rx) = oneshot::channel::<Reply>();
    let mut waiting = Waiting {
        rx,
        backend: Arc::clone(&backend),
        key: key.clone(),
        token: token.clone(),
        ask: ask.clone(),
        answered: false,
    };
    tokio::spawn(async move {
        let holder = holder.as_deref();
        let sent = backend.clock().now();
        let reply = match &ask {
            Ask::Acquire => backend
                .try_acquire(&key, &token, ttl, holder)
                .await
                .map(|r| (r, None)),
            Ask::Turn(place) => {
                backend
                    .wait_turn(&key, &token, ttl, holder, place.as_ref())
                    .await
            }
        };
        let reply = confirm_late(&*backend, &key, &token, ttl, sent, reply).await;
        // A failure that may have happened after the store applied the
        // request (a timeout, a reset connection, a grant that came too late)
        // may have left a grant. (The quorum and the replica check undo their
        // own grants.)
        let maybe_applied = matches!(
            &reply,
            Err(Error::Timeout { .. } | Error::Unreachable { .. } | Error::Backend { .. })
        );
        let unclaimed = match tx.send(reply) {
            Ok(()) => None,
            Err(Ok((reply, place))) => left_behind(&ask, &reply, place),
            Err(Err(_)) => None,
        };
        if let Some(ask) = unclaimed {
            undo(&*backend, &key, &token, &ask).await;
        } else if maybe_applied {
            undo_unknown(&*backend, &key, &token, ttl, &ask).await;
        }
    });
    let reply = (&mut waiting.rx).await;
    waiting.answered = true;
    reply.unwrap_or_else(|_| {
        Err(Error::Backend {
            backend: waiting.backend.describe(),
            op: "acquire",
            key: waiting.key.clone(),
            cause: "the acquire task ended without an answer (runtime shutting down?)".into(),
        })
    })
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

/// What an answer nobody read leaves to undo: a grant, or a place in line.
fn left_behind(ask: &Ask, reply: &AcquireReply, place: Option<QueuePlace>) -> Option<Ask> {
    match (ask, reply) {
        (Ask::Acquire, AcquireReply::Acquired { .. }) => Some(Ask::Acquire),
        (Ask::Acquire, _) => None,
        (Ask::Turn(asked), _) => Some(Ask::Turn(place.or_else(|| asked.clone()))),
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

async fn undo(backend: &dyn LeaseStore, key: &str, token: &OwnerToken, ask: &Ask) {
    match take_back(backend, key, token, ask).await {
        Ok(outcome) => {
            tracing::debug!(key, ?outcome, "undid an acquire nobody waited for");
        }
        Err(e) => {
            tracing::warn!(key, error = %e, "undoing an abandoned acquire failed; its TTL will free the key");
        }
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

/// The caller's side: undoes an answer that arrived but was never read.
struct Waiting {
    rx: oneshot::Receiver<Reply>,
    backend: Arc<dyn LeaseStore>,
    key: String,
    token: OwnerToken,
    ask: Ask,
    answered: bool,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if self.answered {
            return;
        }
        // After `close`, either the task's send fails (and the task undoes the
        // grant itself) or the answer is already here and undone below.
        self.rx.close();
        if let Ok(Ok((reply, place))) = self.rx.try_recv()
            && let Some(ask) = left_behind(&self.ask, &reply, place)
            && let Ok(handle) = tokio::runtime::Handle::try_current()
        {
            let (backend, key, token) = (
                Arc::clone(&self.backend),
                self.key.clone(),
                self.token.clone(),
            );
            handle.spawn(async move { undo(&*backend, &key, &token, &ask).await });
        }
    }
}
