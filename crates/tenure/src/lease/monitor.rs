//! The background task of a guard: renews the lease (when asked to) and fires the
//! lost signal when renewal fails or the local deadline passes.

use std::sync::{Arc, Weak};
use std::time::Duration;

use super::guard::{LossCause, Shared};
use super::line::CLAIM_LEAD;
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
/// guard; it also ends at once when the guard's stop token fires. With
/// `unclaimed`, its first renewal claims a lease handed over for the claim
/// window only (whether or not it renews after that).
pub(super) fn spawn(shared: &Arc<Shared>, renew_every: Option<Duration>, unclaimed: bool) {
    let weak = Arc::downgrade(shared);
    let stop = shared.stop.token();
    tokio::spawn(async move {
        tokio::select! {
            () = stop.cancelled() => {}
            () = watch(weak, renew_every, unclaimed) => {}
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

/// The renewal schedule of a guard: its interval and how long before the
/// deadline a renewal is due (the validity of a fresh grant minus one
/// interval).
#[derive(Clone, Copy)]
struct Schedule {
    every: Duration,
    lead: Duration,
}

impl Schedule {
    fn of(shared: &Shared, renew_every: Option<Duration>) -> Option<Schedule> {
        renew_every.map(|every| Schedule {
            every,
            lead: DriftMargin::default()
                .validity(shared.ttl)
                .saturating_sub(every),
        })
    }

    /// After a renewal at `now`: at most one interval from now, so a store
    /// that grants less than asked is renewed sooner, never later.
    fn next(self, shared: &Shared, now: Moment) -> Moment {
        due(shared, self.lead).min(now + self.every)
    }
}

/// When the first renewal of a guard renewed every `renew_every` is due; with
/// `unclaimed` (a lease handed over for the claim window only), the claim,
/// [`CLAIM_LEAD`] before the window ends, whether or not it renews after.
pub(super) fn first_renewal(
    shared: &Shared,
    renew_every: Option<Duration>,
    unclaimed: bool,
) -> Option<Moment> {
    if unclaimed {
        return Some(due(shared, CLAIM_LEAD));
    }
    Schedule::of(shared, renew_every).map(|sc| due(shared, sc.lead))
}

async fn watch(weak: Weak<Shared>, renew_every: Option<Duration>, unclaimed: bool) {
    let Some((schedule, mut next_renewal)) = weak.upgrade().map(|s| {
        let schedule = Schedule::of(&s, renew_every);
        (schedule, first_renewal(&s, renew_every, unclaimed))
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
        let Some(due_at) = next_renewal else {
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
                next_renewal = schedule.map(|sc| sc.next(&shared, now));
            }
            Ok(Err(e)) => {
                tracing::warn!(key = %shared.key, error = %e, "lease renewal failed; retrying until the deadline");
                let retry =
                    schedule.map_or(RETRY_AFTER_ERROR, |sc| RETRY_AFTER_ERROR.min(sc.every));
                next_renewal = Some(shared.now() + retry);
            }
            Err(_elapsed) => {
                // The extend was cut short, before it could count itself.
                crate::telemetry::renewal(|| shared.backend.kind(), "error");
                next_renewal = Some(shared.now());
            }
        }
    }
}
