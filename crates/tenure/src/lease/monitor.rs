//! The background task of a guard: renews the lease (when asked to) and fires the
//! lost signal when renewal fails or the local deadline passes.

use std::sync::{Arc, Weak};
use std::time::Duration;

use super::guard::{LossCause, Shared};
use super::store::{DriftMargin, ExtendReply};
use crate::clock::Moment;

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

/// When the next renewal is due: when the validity left has shrunk by one
/// renewal interval, counted from the deadline the store actually granted
/// (`lead` before it) rather than from when the answer came back. A slow
/// acquire or renewal has spent part of the validity already: then the next
/// renewal is due sooner, or at once.
fn due(shared: &Shared, lead: Duration) -> Moment {
    shared.deadline() - lead
}

async fn watch(weak: Weak<Shared>, renew_every: Option<Duration>) {
    // How long before the deadline a renewal is due: the validity of a fresh
    // grant minus one interval.
    let Some((mut next_renewal, lead)) = weak.upgrade().map(|s| {
        let lead =
            renew_every.map(|every| DriftMargin::default().validity(s.ttl).saturating_sub(every));
        (lead.map(|lead| due(&s, lead)), lead)
    }) else {
        return;
    };
    loop {
        let Some(shared) = weak.upgrade() else {
            return;
        };
        let now = shared.now();
        let deadline = shared.deadline();
        // Past the maximum hold: no more renewals, and the holder is told.
        if shared.hold_over(now) {
            shared.mark_lost(LossCause::MaxHold);
            return;
        }
        if now >= deadline {
            shared.mark_lost(LossCause::Deadline);
            return;
        }
        // Wake at the end of the maximum hold too.
        let deadline_or_hold = shared.end();
        let (Some(every), Some(lead), Some(due_at)) = (renew_every, lead, next_renewal) else {
            // No renewal: sleep towards the deadline (a manual extend may move it).
            drop(shared);
            tokio::time::sleep(deadline_or_hold.saturating_duration_since(now).min(SLICE)).await;
            continue;
        };
        if now < due_at {
            drop(shared);
            let wake = due_at.min(deadline_or_hold);
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
                // At most one interval from now: a store that grants less
                // than asked is renewed sooner, never later.
                next_renewal = Some(due(&shared, lead).min(now + every));
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
