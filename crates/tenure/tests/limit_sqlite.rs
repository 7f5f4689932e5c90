//! The limiter contract on the SQLite store, plus what only a shared file can
//! show: several handles (as several processes would) share one budget, and the
//! budget survives reopening the file.

#![allow(clippy::unwrap_used)]

mod limit_common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use limit_common::*;
use tenure::Coordinator;
use tenure::limit::{Algorithm, Quota};

async fn open(dir: &tempfile::TempDir) -> Coordinator {
    Coordinator::sqlite(dir.path().join("tenure.db"))
        .await
        .unwrap()
}

macro_rules! on_sqlite {
    ($($check:ident),* $(,)?) => {
        $(
            #[tokio::test]
            async fn $check() {
                let dir = tempfile::tempdir().unwrap();
                limit_common::$check(&open(&dir).await).await;
            }
        )*
    };
}

on_sqlite!(
    bad_input_is_a_clear_error,
    compound_policies_commit_all_or_nothing,
    peek_takes_nothing,
    costs_take_several_units,
    keys_are_independent,
    sliding_log_records_rejections_only_when_asked,
    window_boundaries,
    refunds_never_exceed_the_capacity,
    quota_changes_keep_the_state,
    reset_forgets_a_key,
    reservations_book_in_order,
);

/// Eight tasks reserve at once on one file: they proceed in booking order,
/// one interval apart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_reservers_proceed_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let tenure = open(&dir).await;
    for alg in [Algorithm::Gcra, Algorithm::TokenBucket] {
        limit_common::concurrent_reservers_proceed_in_order(&tenure, alg).await;
    }
}

/// Two handles on one file (two connections, as two processes would have),
/// eight tasks each: never more admitted than the limit, for every algorithm.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handles_on_one_file_share_one_budget() {
    const LIMIT: u32 = 40;
    let dir = tempfile::tempdir().unwrap();
    let handles = [open(&dir).await, open(&dir).await];
    for alg in Algorithm::ALL {
        let key = format!("shared:{alg}");
        let admitted = Arc::new(AtomicU64::new(0));
        let mut tasks = Vec::new();
        for i in 0..16 {
            let limiter = handles[i % 2].limiter(Quota::per_day(nz(LIMIT)), alg);
            let (key, admitted) = (key.clone(), Arc::clone(&admitted));
            tasks.push(tokio::spawn(async move {
                for _ in 0..6 {
                    if limiter.check(&key).await.unwrap().allowed {
                        admitted.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        // 96 requests for 40 units a day. A run straddling midnight UTC lets a
        // fixed or sliding window start over, which shows as more than 40.
        let got = admitted.load(Ordering::Relaxed);
        assert!(got <= u64::from(LIMIT) * 2, "{alg}: {got}");
        if got != u64::from(LIMIT) {
            let day = 86_400_000_000;
            let now = handles[0].limits().now().await.unwrap().as_micros();
            assert!(now % day < 60_000_000, "{alg}: admitted {got} of {LIMIT}");
        }
    }
}

#[tokio::test]
async fn the_budget_survives_reopening_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let quota = Quota::per_day(nz(3));
    {
        let limiter = open(&dir).await.limiter(quota, Algorithm::FixedWindow);
        for _ in 0..2 {
            assert!(take(&limiter, "k", 1, 0).await.allowed);
        }
    }
    let limiter = open(&dir).await.limiter(quota, Algorithm::FixedWindow);
    let d = take(&limiter, "k", 1, 1_000).await;
    assert!(d.allowed && d.remaining == 0, "{d:?}");
    assert!(!take(&limiter, "k", 1, 2_000).await.allowed);
}

#[tokio::test]
async fn the_limiter_clock_is_wall_time_and_never_goes_back() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (open(&dir).await, open(&dir).await);
    let wall = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros();
    let t1 = a.limits().now().await.unwrap().as_micros();
    let t2 = b.limits().now().await.unwrap().as_micros();
    let t3 = a.limits().now().await.unwrap().as_micros();
    assert!(t1 <= t2 && t2 <= t3, "{t1} {t2} {t3}");
    // Anchored on the wall clock when this file first needed it: within a
    // minute of it unless someone set the clock meanwhile.
    let skew = u128::from(t1).abs_diff(wall);
    assert!(skew < 60_000_000, "limiter clock {t1} vs wall {wall}");
}
