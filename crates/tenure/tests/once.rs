//! Run once on every store: one run, one recorded result, failures, limits,
//! retention, bad input.

#![allow(clippy::unwrap_used, missing_docs)]

mod recipes_common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use recipes_common::Fixture;
use tenure::Error;
use tenure::once::OnceOutcome;

async fn later_callers_get_the_recorded_result(fx: &Fixture) {
    let once = fx.tenure.once("once:later");
    let first = once
        .run(|fence| async move { Ok::<_, String>(vec![fence.get(), 7]) })
        .await
        .unwrap();
    let OnceOutcome::Ran {
        fence,
        result: Ok(value),
        recorded: true,
    } = first
    else {
        panic!("{first:?}")
    };
    assert_eq!(value, vec![fence.get(), 7]);
    let again = once
        .run(|_| async { Ok::<Vec<u64>, String>(vec![0]) })
        .await
        .unwrap();
    assert_eq!(
        again,
        OnceOutcome::Recorded {
            fence,
            result: Ok(vec![fence.get(), 7])
        }
    );
    // Bytes read back the same record.
    let bytes = once
        .run_bytes(|_| async { Ok(b"not run".to_vec()) })
        .await
        .unwrap();
    assert!(matches!(bytes, OnceOutcome::Recorded { result: Ok(b), .. } if b.ends_with(b"7]")));
}

async fn concurrent_callers_run_it_once_and_all_get_its_result(fx: &Fixture) {
    let runs = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..20 {
        let once = fx.tenure.once("once:concurrent");
        let runs = Arc::clone(&runs);
        tasks.push(tokio::spawn(async move {
            once.run(|fence| async move {
                runs.fetch_add(1, Ordering::SeqCst);
                // Long enough for every other caller to find it running.
                tokio::time::sleep(Duration::from_millis(200)).await;
                Ok::<_, String>(format!("done by {fence}"))
            })
            .await
            .unwrap()
        }));
    }
    let mut results = Vec::new();
    let mut ran = 0;
    for t in tasks {
        let outcome = t.await.unwrap();
        if matches!(outcome, OnceOutcome::Ran { .. }) {
            ran += 1;
        }
        results.push(outcome.into_result().unwrap().unwrap());
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(ran, 1);
    results.dedup();
    assert_eq!(results.len(), 1, "{results:?}");
}

async fn failures_are_not_recorded_unless_asked(fx: &Fixture) {
    let once = fx.tenure.once("once:fail");
    let failed = once
        .run(|_| async { Err::<u32, _>("boom".to_string()) })
        .await
        .unwrap();
    assert!(matches!(
        failed,
        OnceOutcome::Ran { result: Err(ref e), recorded: false, .. } if e == "boom"
    ));
    // The next caller runs it again, and its success is recorded.
    let ok = once.run(|_| async { Ok::<u32, String>(5) }).await.unwrap();
    assert!(matches!(
        ok,
        OnceOutcome::Ran {
            result: Ok(5),
            recorded: true,
            ..
        }
    ));

    let cached = fx.tenure.once("once:fail-cached").cache_failures(true);
    let failed = cached
        .run(|_| async { Err::<u32, _>("boom".to_string()) })
        .await
        .unwrap();
    assert!(matches!(failed, OnceOutcome::Ran { recorded: true, .. }));
    let again = cached
        .run(|_| async { Ok::<u32, String>(5) })
        .await
        .unwrap();
    assert!(matches!(again, OnceOutcome::Recorded { result: Err(ref e), .. } if e == "boom"));
}

async fn oversized_results_are_refused_and_not_recorded(fx: &Fixture) {
    let once = fx.tenure.once("once:big").max_result(64);
    let e = once
        .run_bytes(|_| async { Ok(vec![b'x'; 100]) })
        .await
        .unwrap_err();
    assert!(
        matches!(&e, Error::InvalidArgument { what: "result", reason } if reason.contains("101 bytes exceed the limit of 64")),
        "{e}"
    );
    // Nothing was recorded and the lease was given back: the next caller runs.
    let small = once
        .run_bytes(|_| async { Ok(b"ok".to_vec()) })
        .await
        .unwrap();
    assert!(matches!(small, OnceOutcome::Ran { recorded: true, .. }));
}

async fn results_expire_after_their_retention(fx: &Fixture) {
    let once = fx
        .tenure
        .once("once:retain")
        .retain(Duration::from_millis(200));
    let first = once.run(|_| async { Ok::<u8, u8>(1) }).await.unwrap();
    let OnceOutcome::Ran { fence, .. } = first else {
        panic!("{first:?}")
    };
    // Past the retention the record is gone for sure — on etcd within its
    // expiry delay (whole-second TTLs, the expiry sweep).
    tokio::time::sleep(Duration::from_millis(300)).await;
    let deadline = tokio::time::Instant::now() + fx.expiry;
    loop {
        let second = once.run(|_| async { Ok::<u8, u8>(2) }).await.unwrap();
        match second {
            OnceOutcome::Ran {
                fence: f,
                result: Ok(2),
                ..
            } if f > fence => break,
            OnceOutcome::Recorded { .. } if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            other => panic!("{other:?}"),
        }
    }
}

async fn a_busy_run_is_reported_after_the_wait(fx: &Fixture) {
    let key = "once:busy";
    let holder = fx
        .tenure
        .lease(key)
        .watchdog(false)
        .ttl(Duration::from_secs(10));
    let guard = holder.attempt().await.unwrap().into_guard().unwrap();
    let outcome = fx
        .tenure
        .once(key)
        .wait(Duration::from_millis(50))
        .run(|_| async { Ok::<u8, u8>(1) })
        .await
        .unwrap();
    assert!(
        matches!(outcome, OnceOutcome::Busy { ttl_left: Some(_) }),
        "{outcome:?}"
    );
    guard.release().await.unwrap();
}

async fn bad_settings_are_refused(fx: &Fixture) {
    let run = |once: tenure::once::Once| async move {
        once.run_bytes(|_| async { Ok(Vec::new()) })
            .await
            .unwrap_err()
    };
    let e = run(fx.tenure.once("once:bad").retain(Duration::ZERO)).await;
    assert!(
        matches!(
            e,
            Error::InvalidArgument {
                what: "retention",
                ..
            }
        ),
        "{e}"
    );
    let e = run(fx.tenure.once("once:bad").max_result(0)).await;
    assert!(
        matches!(
            e,
            Error::InvalidArgument {
                what: "max_result",
                ..
            }
        ),
        "{e}"
    );
    let e = run(fx.tenure.once("")).await;
    assert!(matches!(e, Error::InvalidKey { .. }), "{e}");
}

on_store!(memory: later_callers_get_the_recorded_result, concurrent_callers_run_it_once_and_all_get_its_result,
    failures_are_not_recorded_unless_asked, oversized_results_are_refused_and_not_recorded,
    results_expire_after_their_retention, a_busy_run_is_reported_after_the_wait, bad_settings_are_refused);
on_store!(sqlite: later_callers_get_the_recorded_result, concurrent_callers_run_it_once_and_all_get_its_result,
    failures_are_not_recorded_unless_asked, oversized_results_are_refused_and_not_recorded,
    results_expire_after_their_retention, a_busy_run_is_reported_after_the_wait, bad_settings_are_refused);
on_store!(redis: later_callers_get_the_recorded_result, concurrent_callers_run_it_once_and_all_get_its_result,
    failures_are_not_recorded_unless_asked, oversized_results_are_refused_and_not_recorded,
    results_expire_after_their_retention, a_busy_run_is_reported_after_the_wait, bad_settings_are_refused);
#[cfg(feature = "etcd")]
on_store!(etcd: later_callers_get_the_recorded_result, concurrent_callers_run_it_once_and_all_get_its_result,
    failures_are_not_recorded_unless_asked, oversized_results_are_refused_and_not_recorded,
    results_expire_after_their_retention, a_busy_run_is_reported_after_the_wait, bad_settings_are_refused);

/// Foreign data in any key of a run-once operation (the lease, its fence
/// counter, the result's record): running is an error naming the key, the
/// operation does not run, and the data is left as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_once_key_of_a_foreign_type_is_refused_and_left_alone_on_redis() {
    let fx = recipes_common::redis().await;
    let tenure = &fx.tenure;
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = &runs;
    recipes_common::foreign_keys_are_refused(
        fx.server.as_ref().unwrap(),
        "once:foreign",
        "\u{1f}once",
        |name| async move {
            tenure
                .once(name)
                .run_bytes(|_| async move {
                    counted.fetch_add(1, Ordering::SeqCst);
                    Ok(Vec::new())
                })
                .await
                .unwrap_err()
        },
    )
    .await;
    assert_eq!(
        runs.load(Ordering::SeqCst),
        0,
        "an operation ran on foreign data"
    );
    // An election's record on the same key is kept apart: the operation runs
    // and the leader's record stays as it was.
    let leadership = fx
        .tenure
        .election("once:elected")
        .try_campaign("a")
        .await
        .unwrap()
        .unwrap();
    leadership.resign().await.unwrap();
    let ran = fx
        .tenure
        .once("once:elected")
        .run_bytes(|_| async { Ok(Vec::new()) })
        .await
        .unwrap();
    assert!(matches!(ran, OnceOutcome::Ran { .. }), "{ran:?}");
    let record = fx
        .tenure
        .records()
        .unwrap()
        .get_record("once:elected")
        .await
        .unwrap();
    assert_eq!(record.map(|r| r.value), Some(b"a".to_vec()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quorum_is_refused_naming_the_alternative() {
    let fx = recipes_common::quorum().await;
    let e = fx
        .tenure
        .once("once:quorum")
        .run_bytes(|_| async { Ok(Vec::new()) })
        .await
        .unwrap_err();
    assert!(
        matches!(&e, Error::InvalidArgument { what: "store", reason } if reason.contains("one Redis master")),
        "{e}"
    );
}
