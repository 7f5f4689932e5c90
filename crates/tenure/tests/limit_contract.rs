//! The limiter contract, run on every store: the in-process one here, Redis in
//! `limit_redis.rs` (which calls the same functions through `mod common`).

mod limit_common;

use limit_common::*;
use tenure::Coordinator;
use tenure::limit::Algorithm;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_never_admits_more_than_the_limit_under_concurrency() {
    let w = Coordinator::memory();
    for alg in Algorithm::ALL {
        concurrent_requests_never_exceed_the_limit(&w, alg).await;
    }
}

#[tokio::test]
async fn memory_bad_input_is_a_clear_error() {
    bad_input_is_a_clear_error(&Coordinator::memory()).await;
}

#[tokio::test]
async fn memory_compound_policies_commit_all_or_nothing() {
    compound_policies_commit_all_or_nothing(&Coordinator::memory()).await;
}

#[tokio::test]
async fn memory_peek_takes_nothing() {
    peek_takes_nothing(&Coordinator::memory()).await;
}

#[tokio::test]
async fn memory_costs_take_several_units() {
    costs_take_several_units(&Coordinator::memory()).await;
}

#[tokio::test]
async fn memory_keys_are_independent() {
    keys_are_independent(&Coordinator::memory()).await;
}

#[tokio::test]
async fn memory_sliding_log_records_rejections_only_when_asked() {
    sliding_log_records_rejections_only_when_asked(&Coordinator::memory()).await;
}

#[tokio::test]
async fn memory_window_boundaries() {
    window_boundaries(&Coordinator::memory()).await;
}

#[tokio::test]
async fn memory_refunds_never_exceed_the_capacity() {
    refunds_never_exceed_the_capacity(&Coordinator::memory()).await;
}

#[tokio::test]
async fn memory_quota_changes_keep_the_state() {
    quota_changes_keep_the_state(&Coordinator::memory()).await;
}

#[tokio::test]
async fn memory_reset_forgets_a_key() {
    reset_forgets_a_key(&Coordinator::memory()).await;
}

#[tokio::test]
async fn memory_reservations_book_in_order() {
    reservations_book_in_order(&Coordinator::memory()).await;
}
