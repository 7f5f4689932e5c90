//! A maximum hold (`Lease::max_hold`): the watchdog renews until then and no
//! longer, the guard reports the loss with its cause (`LossCause::MaxHold`,
//! `cause = "max_hold"` in the "lease lost" event and the losses metric), and
//! the key lapses with its TTL. On a fake deadline clock, so no test waits
//! for the hold itself.

#![allow(clippy::unwrap_used, missing_docs)]

use std::time::Duration;

use tenure::clock::FakeClock;
use tenure::memory::MemoryStore;
use tenure::{Coordinator, Error, LeaseGuard, LossCause};

const TTL: Duration = Duration::from_secs(30);
const MAX_HOLD: Duration = Duration::from_secs(60);

fn jumping() -> (Coordinator, FakeClock) {
    let clock = FakeClock::new();
    clock.advance(Duration::from_secs(1000));
    let store = MemoryStore::with_clock(clock.clone());
    (Coordinator::with_backend(store), clock)
}

/// Waits (at most 5 s of real time) until `key`'s TTL left is above `above`:
/// the watchdog renewed it on the fake clock.
async fn renewed(w: &Coordinator, key: &str, above: Duration) -> bool {
    let until = tokio::time::Instant::now() + Duration::from_secs(5);
    while tokio::time::Instant::now() < until {
        let ttl_left = w.status(key).await.unwrap().ttl_left;
        if ttl_left.is_some_and(|t| t > above) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

/// Moves the fake clock on by `step` and waits for the watchdog to renew
/// `key` (the renewal is due every ttl/3).
async fn step_and_renew(w: &Coordinator, clock: &FakeClock, key: &str, step: Duration) {
    clock.advance(step);
    assert!(renewed(w, key, TTL - step).await, "{key} not renewed");
}

/// Takes `key` with [`MAX_HOLD`] and moves the fake clock on by it: the
/// guard is lost (waited for, at most 5 s of real time). Returns what the
/// test keeps alive to its end.
async fn lost_to_max_hold(key: &str) -> (Coordinator, FakeClock, LeaseGuard) {
    let (w, clock) = jumping();
    let guard = w.lease(key).max_hold(MAX_HOLD).acquire().await.unwrap();
    clock.advance(MAX_HOLD);
    tokio::time::timeout(Duration::from_secs(5), guard.lost().wait())
        .await
        .expect("lost");
    (w, clock, guard)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchdog_renews_until_the_max_hold_then_reports_the_loss() {
    let (w, clock) = jumping();
    let bounded = w
        .lease("mh")
        .ttl(TTL)
        .max_hold(MAX_HOLD)
        .acquire()
        .await
        .unwrap();
    let unbounded = w.lease("free").ttl(TTL).acquire().await.unwrap();
    // 50 s in 10 s steps: renewed all along, nothing lost.
    for _ in 0..5 {
        step_and_renew(&w, &clock, "mh", Duration::from_secs(11)).await;
        assert!(renewed(&w, "free", TTL - Duration::from_secs(11)).await);
        assert!(!bounded.is_lost());
        assert_eq!(bounded.loss_cause(), None);
    }
    // Past the maximum hold (55 s + 10 s > 60 s): lost, and why.
    clock.advance(Duration::from_secs(10));
    tokio::time::timeout(Duration::from_secs(5), bounded.lost().wait())
        .await
        .expect("the lost signal fires at the maximum hold");
    assert!(bounded.is_lost());
    assert_eq!(bounded.loss_cause(), Some(LossCause::MaxHold));
    assert_eq!(bounded.lost().cause(), Some(LossCause::MaxHold));
    assert_eq!(bounded.remaining(), Duration::ZERO);
    // No renewal any more, while the lease without a maximum hold is renewed.
    let ttl_left = |key: &'static str| {
        let w = w.clone();
        async move { w.status(key).await.unwrap().ttl_left.unwrap_or_default() }
    };
    let left = ttl_left("mh").await;
    let step = Duration::from_secs(11);
    step_and_renew(&w, &clock, "free", step).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        ttl_left("mh").await <= left - step,
        "renewed past the max hold"
    );
    assert!(!unbounded.is_lost());
    assert_eq!(unbounded.loss_cause(), None);
    unbounded.release().await.unwrap();
    // And the key lapses with its TTL.
    clock.advance(left - step + Duration::from_millis(1));
    assert!(!w.status("mh").await.unwrap().held);
    let ran = bounded.run(std::future::pending::<()>()).await;
    assert!(matches!(ran, Err(Error::LeaseLost { .. })), "{ran:?}");
}

#[tokio::test(flavor = "current_thread")]
async fn without_renewal_the_max_hold_is_checked_by_whoever_asks() {
    let (w, clock) = jumping();
    let guard = w
        .lease("mh:manual")
        .ttl(Duration::from_secs(120))
        .watchdog(false)
        .max_hold(MAX_HOLD)
        .acquire()
        .await
        .unwrap();
    clock.advance(MAX_HOLD - Duration::from_secs(1));
    assert!(!guard.is_lost());
    // A manual renewal before the end is fine; it does not move the end.
    assert!(matches!(
        guard.extend().await.unwrap(),
        tenure::ExtendOutcome::Extended { .. }
    ));
    clock.advance(Duration::from_secs(1));
    // No task needs to run: the check itself sees the end.
    assert!(guard.is_lost());
    assert_eq!(guard.loss_cause(), Some(LossCause::MaxHold));
    assert_eq!(
        guard.extend().await.unwrap(),
        tenure::ExtendOutcome::NotHeld
    );
}

#[tokio::test(flavor = "current_thread")]
async fn a_set_reports_the_max_hold_of_its_keys() {
    let (w, clock) = jumping();
    let set = w
        .lease_all(["mh:a", "mh:b"])
        .ttl(Duration::from_secs(120))
        .max_hold(MAX_HOLD)
        .acquire()
        .await
        .unwrap();
    assert!(!set.is_lost());
    clock.advance(MAX_HOLD);
    assert!(set.is_lost());
    assert_eq!(set.loss_cause(), Some(LossCause::MaxHold));
    assert_eq!(set.lost().cause(), Some(LossCause::MaxHold));
}

#[tokio::test(flavor = "current_thread")]
async fn a_zero_max_hold_is_refused() {
    let w = Coordinator::memory();
    let refused = w
        .lease("mh:zero")
        .max_hold(Duration::ZERO)
        .try_acquire()
        .await
        .unwrap_err();
    assert!(
        matches!(&refused, Error::InvalidArgument { .. })
            && refused.to_string().contains("max_hold"),
        "{refused}"
    );
    assert!(!w.status("mh:zero").await.unwrap().held);
}

/// The "lease lost" warning carries `cause=max_hold`.
#[tokio::test(flavor = "current_thread")]
async fn the_lost_event_names_the_max_hold() {
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Buffer {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let buffer = Buffer::default();
    let writer = buffer.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_max_level(tracing::Level::WARN)
        .with_ansi(false)
        .finish();
    let _default = tracing::subscriber::set_default(subscriber);
    let _lost = lost_to_max_hold("mh:event").await;
    let text = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
    let line = text
        .lines()
        .find(|l| l.contains("lease lost"))
        .unwrap_or_else(|| panic!("no lost event in {text:?}"));
    assert!(line.contains("max_hold"), "{line}");
}

/// The losses counter counts it under `cause="max_hold"`.
#[cfg(feature = "metrics")]
#[tokio::test(flavor = "current_thread")]
async fn the_losses_metric_names_the_max_hold() {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};

    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);
    let _lost = lost_to_max_hold("mh:metric").await;
    let counted: u64 = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter(|(key, ..)| key.key().name() == tenure::telemetry::names::LEASE_LOSSES)
        .filter(|(key, ..)| {
            key.key()
                .labels()
                .any(|l| l.key() == "cause" && l.value() == "max_hold")
        })
        .map(|(.., value)| match value {
            DebugValue::Counter(n) => n,
            _ => 0,
        })
        .sum();
    assert_eq!(counted, 1);
}
