//! The background task of a guard: renews the lease (when asked to) and fires the
//! lost signal when renewal fails or the local deadline passes.

use std::sync::{Arc, Weak};
use std::time::Duration;

use super::guard::{Loss, Shared};
use super::store::ExtendReply;

/// After a failed renewal, retry this often (bounded by the interval).
const RETRY_AFTER_ERROR: Duration = Duration::from_millis(100);

/// The longest the monitor (and any wait on the deadline) sleeps before
/// re-reading the deadline clock. tokio's timers run on a clock that stops
/// while the host is suspended, the deadline clock does not: after a resume,
/// a timer set for the deadline would fire as late as the suspend was long.
pub(super) const SLICE: Duration = Duration::from_millis(100);

/// Spawns the monitor. It holds only a `Weak` reference, so it ends with the
/// guard; it also ends at once when the guard's stop token fires.
pub(super) fn spawn(shared: &Arc<Shared>, renew_every: Option<Duration>) {
    let weak = Arc::downgrade(shared);
    let stop = shared.stop.clone();
    tokio::spawn(async move {
        tokio::select! {
            () = stop.cancelled() => {}
            () = watch(weak, renew_every) => {}
        }
    });
}

async fn watch(weak: Weak<Shared>, renew_every: Option<Duration>) {
    let Some(mut next_renewal) = weak
        .upgrade()
        .map(|s| renew_every.map(|every| s.now() + every))
    else {
        return;
    };
    loop {
        let Some(shared) = weak.upgrade() else {
            return;
        };
        let now = shared.now();
        let deadline = shared.deadline();
        if now >= deadline {
            shared.mark_lost(Loss::Deadline);
            return;
        }
        let (Some(every), Some(due)) = (renew_every, next_renewal) else {
            // No renewal: sleep towards the deadline (a manual extend may move it).
            drop(shared);
            tokio::time::sleep(deadline.saturating_duration_since(now).min(SLICE)).await;
            continue;
        };
        if now < due {
            drop(shared);
            let wake = due.min(deadline);
            tokio::time::sleep(wake.saturating_duration_since(now).min(SLICE)).await;
            continue;
        }
        // Bound the call by the validity left: an answer after the deadline is
        // worthless, and the loop above fires the signal at the deadline.
        let budget = deadline.saturating_duration_since(now);
        let reply = tokio::time::timeout(budget, shared.extend()).await;
        match reply {
            Ok(Ok(reply)) => {
                let lost = matches!(reply, ExtendReply::NotHeld);
                let _ = shared.apply(reply);
                if lost {
                    return;
                }
                next_renewal = Some(now + every);
            }
            Ok(Err(e)) => {
                tracing::warn!(key = %shared.key, error = %e, "lease renewal failed; retrying until the deadline");
                next_renewal = Some(shared.now() + RETRY_AFTER_ERROR.min(every));
            }
            Err(_elapsed) => {
                // The extend was cut short, before it could count itself.
                crate::telemetry::renewal(|| shared.backend.describe(), "error");
                next_renewal = Some(shared.now());
            }
        }
    }
}
