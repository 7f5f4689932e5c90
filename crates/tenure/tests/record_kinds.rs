//! Run-once results and election records on the same key are kept apart, on
//! every store that keeps records: a leader's id is never replayed as a
//! recorded result, and an election never erases a recorded result.

#![allow(clippy::unwrap_used)]

mod recipes_common;

use tenure::Coordinator;
use tenure::once::OnceOutcome;

async fn records_of_once_and_elect_are_apart(tenure: &Coordinator) {
    // A leader whose id looks like a recorded success ('o', status 'k', …).
    let leader = tenure
        .election("shared")
        .try_campaign("ok-leader")
        .await
        .unwrap();
    leader.expect("nobody leads").resign().await.unwrap();
    let ran = tenure
        .once("shared")
        .run_bytes(|_| async { Ok(b"ran".to_vec()) })
        .await
        .unwrap();
    assert!(
        matches!(&ran, OnceOutcome::Ran { result: Ok(r), .. } if r == b"ran"),
        "the leader's record was taken for a result: {ran:?}"
    );

    // An election on a key whose result is recorded keeps the result.
    let leader = tenure.election("shared").try_campaign("b").await.unwrap();
    leader.expect("nobody leads").resign().await.unwrap();
    let again = tenure
        .once("shared")
        .run_bytes(|_| async { Ok(b"ran twice".to_vec()) })
        .await
        .unwrap();
    assert!(
        matches!(&again, OnceOutcome::Recorded { result: Ok(r), .. } if r == b"ran"),
        "the election erased the recorded result: {again:?}"
    );
}

#[tokio::test]
async fn apart_on_memory() {
    records_of_once_and_elect_are_apart(&recipes_common::memory().await.tenure).await;
}

#[tokio::test]
async fn apart_on_sqlite() {
    records_of_once_and_elect_are_apart(&recipes_common::sqlite().await.tenure).await;
}

#[tokio::test]
async fn apart_on_redis() {
    records_of_once_and_elect_are_apart(&recipes_common::redis().await.tenure).await;
}

#[cfg(feature = "etcd")]
#[tokio::test]
async fn apart_on_etcd() {
    records_of_once_and_elect_are_apart(&recipes_common::etcd().await.tenure).await;
}
