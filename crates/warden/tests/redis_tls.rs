//! Redis over TLS (`rediss://`) and ACL users, against real redis-server
//! processes.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use warden::redis::{RedisOptions, RedisStore};
use warden::{ReleaseOutcome, Warden};
use warden_test::RedisServer;

/// Redis 7 gives a new ACL user no channel: the release script's PUBLISH is
/// refused. A release notification is best-effort, so the release itself must
/// still report `Released` and the key be gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_succeeds_for_a_user_without_channel_rights() {
    let server = RedisServer::start();
    let url = server.acl_user("app", "s3cret", "~warden:* resetchannels +@all");
    let store = RedisStore::connect(
        &url,
        RedisOptions::default().timeout(Duration::from_secs(2)),
    )
    .await
    .unwrap();
    let warden = Warden::with_backend(store);
    let guard = warden
        .lease("acl")
        .ttl(Duration::from_secs(30))
        .try_acquire()
        .await
        .unwrap()
        .into_guard()
        .unwrap();
    assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
    assert_eq!(server.command("EXISTS warden:{acl}").unwrap().trim(), ":0");
}
