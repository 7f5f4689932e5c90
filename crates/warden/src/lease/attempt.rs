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
//! else's. Nothing blocks in `Drop`.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;

use crate::backend::{AcquireReply, LeaseBackend};
use crate::error::{Error, Result};
use crate::token::OwnerToken;

type Reply = Result<AcquireReply>;

/// Sends one acquire request for `token` and returns its answer; if this future
/// is dropped before the answer arrives, a grant that arrives later is undone.
pub(super) async fn acquire(
    backend: Arc<dyn LeaseBackend>,
    key: String,
    token: OwnerToken,
    ttl: Duration,
) -> Reply {
    let (tx, rx) = oneshot::channel::<Reply>();
    let mut waiting = Waiting {
        rx,
        backend: Arc::clone(&backend),
        key: key.clone(),
        token: token.clone(),
        answered: false,
    };
    tokio::spawn(async move {
        let reply = backend.try_acquire(&key, &token, ttl).await;
        // A failure that may have happened after the store applied the
        // request (a timeout, a reset connection) may have left a grant. (The
        // quorum and the replica check undo their own grants.)
        let maybe_applied = matches!(
            &reply,
            Err(Error::Timeout { .. } | Error::Unreachable { .. } | Error::Backend { .. })
        );
        let unclaimed = match tx.send(reply) {
            Ok(()) => false,
            Err(reply) => matches!(reply, Ok(AcquireReply::Acquired { .. })),
        };
        if unclaimed || maybe_applied {
            undo(&*backend, &key, &token).await;
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

async fn undo(backend: &dyn LeaseBackend, key: &str, token: &OwnerToken) {
    match backend.release(key, token).await {
        Ok(outcome) => {
            tracing::debug!(key, ?outcome, "undid an acquire nobody waited for");
        }
        Err(e) => {
            tracing::warn!(key, error = %e, "undoing an abandoned acquire failed; its TTL will free the key");
        }
    }
}

/// The caller's side: undoes an answer that arrived but was never read.
struct Waiting {
    rx: oneshot::Receiver<Reply>,
    backend: Arc<dyn LeaseBackend>,
    key: String,
    token: OwnerToken,
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
        if let Ok(Ok(AcquireReply::Acquired { .. })) = self.rx.try_recv()
            && let Ok(handle) = tokio::runtime::Handle::try_current()
        {
            let (backend, key, token) = (
                Arc::clone(&self.backend),
                self.key.clone(),
                self.token.clone(),
            );
            handle.spawn(async move { undo(&*backend, &key, &token).await });
        }
    }
}
