//! The lease layer's clean-up in the background: the undos of requests
//! dropped in flight or failed with an unknown fate ([`attempt`](super::attempt)),
//! the releases of guards dropped without `release` and the leaving of a
//! waiting line by a waiter dropped in it. They are counted, so that
//! [`Coordinator::close`](crate::Coordinator::close) can wait for them
//! before a short-lived process ends: an exiting runtime drops its tasks,
//! and what such a task was to delete then stays for its TTL.
//!
//! The count is the process's, not one handle's: `close` waits for every
//! handle's clean-up. Each ends by itself: an undo within a minute (see
//! `undo_unknown`), a release or a leave with its one store call.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::runtime::Handle;
use tokio::sync::Notify;

/// Clean-up tasks spawned and not yet ended (or dropped).
static RUNNING: AtomicUsize = AtomicUsize::new(0);

/// Woken when the last running clean-up task ends.
static ENDED: Notify = Notify::const_new();

/// Runs `task` on `handle`, counted until it ends or its runtime drops it.
pub(super) fn spawn(handle: &Handle, task: impl Future<Output = ()> + Send + 'static) {
    let counted = Counted::new();
    handle.spawn(async move {
        let _counted = counted;
        task.await;
    });
}

/// Waits until no clean-up task is running.
pub(crate) async fn wait() {
    loop {
        let ended = ENDED.notified();
        tokio::pin!(ended);
        // Registered before the count is read: an end in between still wakes it.
        ended.as_mut().enable();
        if RUNNING.load(Ordering::SeqCst) == 0 {
            return;
        }
        ended.await;
    }
}

/// One running task in [`RUNNING`], for as long as it lives.
struct Counted;

impl Counted {
    fn new() -> Self {
        RUNNING.fetch_add(1, Ordering::SeqCst);
        Counted
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        if RUNNING.fetch_sub(1, Ordering::SeqCst) == 1 {
            ENDED.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn wait_returns_once_every_task_has_ended() {
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        spawn(&Handle::current(), async move {
            let _ = rx.await;
        });
        let waiting = tokio::spawn(wait());
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished(), "a task still runs");
        tx.send(()).unwrap();
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("wait ends after the task")
            .unwrap();
    }

    #[test]
    fn a_task_dropped_with_its_runtime_is_no_longer_counted() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        spawn(runtime.handle(), std::future::pending());
        drop(runtime);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        runtime.block_on(async {
            tokio::time::timeout(Duration::from_secs(5), wait())
                .await
                .expect("nothing left to wait for");
        });
    }
}
