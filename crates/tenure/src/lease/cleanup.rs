//! The lease layer's clean-up in the background: the undos of requests
//! dropped in flight or failed with an unknown fate ([`attempt`](super::attempt)),
//! the releases of guards dropped without `release`, the leaving of a
//! waiting line by a waiter dropped in it, and a store's removal of what a
//! dropped watch put in the store (a Redis observer's marker). They are tracked, so that
//! [`Coordinator::close`](crate::Coordinator::close) can wait for them
//! before a short-lived process ends: an exiting runtime drops its tasks,
//! and what such a task was to delete then stays for its TTL.
//!
//! The tracker is the process's, not one handle's: `close` waits for every
//! handle's clean-up. Each ends by itself: an undo within a minute (see
//! `undo_unknown`), a release, a leave or a removal with its one store call.

use std::future::Future;
use std::sync::LazyLock;

use tokio::runtime::Handle;
use tokio_util::task::TaskTracker;

/// The clean-up tasks spawned and not yet ended (or dropped with their
/// runtime). Closed once and for good: a closed tracker still takes new
/// tasks, and its `wait` returns whenever none is left.
static CLEANUP: LazyLock<TaskTracker> = LazyLock::new(|| {
    let tracker = TaskTracker::new();
    tracker.close();
    tracker
});

/// Runs `task` on `handle`, tracked until it ends or its runtime drops it.
pub(crate) fn spawn(handle: &Handle, task: impl Future<Output = ()> + Send + 'static) {
    CLEANUP.spawn_on(task, handle);
}

/// Waits until no clean-up task is running.
pub(crate) async fn wait() {
    CLEANUP.wait().await;
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
