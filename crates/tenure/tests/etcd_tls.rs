//! `etcds://`: TLS to a real etcd whose CA and certificates are made at test
//! time with `openssl`; wrong or missing certificates are clear errors.

#![cfg(feature = "etcd")]
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use tenure::etcd::EtcdOptions;
use tenure::{Coordinator, Error};
use tenure_test::{EtcdCluster, TlsCerts};

/// Connecting must end within the budgets (1 s connect + 2 s call) plus slack.
const BOUND: Duration = Duration::from_secs(6);

fn with_ca(certs: &TlsCerts, ca: &str) -> EtcdOptions {
    EtcdOptions::default().ca_file(certs.path(ca))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_and_recipes_work_over_tls_with_the_servers_ca() {
    let certs = TlsCerts::generate();
    let etcd = EtcdCluster::start_tls(1, &certs, false);
    let tenure = Coordinator::connect_etcd(&etcd.tls_url(), with_ca(&certs, "ca.pem"))
        .await
        .unwrap();
    let guard = tenure
        .lease("tls:lease")
        .watchdog(false)
        .attempt()
        .await
        .unwrap()
        .into_guard()
        .expect("free");
    assert!(tenure.status("tls:lease").await.unwrap().held);
    guard.release().await.unwrap();
    let election = tenure.election("tls:elect");
    let leader = election.try_campaign("a").await.unwrap().expect("elected");
    let now = election.leader().await.unwrap().unwrap();
    assert_eq!((now.id.as_deref(), now.term), (Some("a"), leader.term()));
    leader.resign().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_ca_is_a_clear_error_within_the_budget() {
    let certs = TlsCerts::generate();
    let etcd = EtcdCluster::start_tls(1, &certs, false);
    let start = Instant::now();
    let e = Coordinator::connect_etcd(&etcd.tls_url(), with_ca(&certs, "other-ca.pem"))
        .await
        .unwrap_err();
    assert!(start.elapsed() < BOUND, "took {:?}", start.elapsed());
    let text = e.to_string();
    assert!(
        text.contains("certificate") && text.contains("etcds://127.0.0.1"),
        "{text}"
    );
    // Plain gRPC against the TLS port fails too, rather than hanging.
    let plain = etcd.tls_url().replacen("etcds", "etcd", 1);
    let start = Instant::now();
    assert!(Coordinator::connect(&plain).await.is_err());
    assert!(start.elapsed() < BOUND, "took {:?}", start.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_that_check_clients_need_the_client_certificate() {
    let certs = TlsCerts::generate();
    let etcd = EtcdCluster::start_tls(1, &certs, true);
    let e = Coordinator::connect_etcd(&etcd.tls_url(), with_ca(&certs, "ca.pem"))
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::Unreachable { .. } | Error::Backend { .. } | Error::Timeout { .. }
        ),
        "{e}"
    );
    let options =
        with_ca(&certs, "ca.pem").client_cert(certs.path("client.pem"), certs.path("client.key"));
    let tenure = Coordinator::connect_etcd(&etcd.tls_url(), options)
        .await
        .unwrap();
    let sem = tenure
        .semaphore("tls:sem", std::num::NonZeroU32::new(2).unwrap())
        .unwrap();
    let permit = sem
        .lease()
        .watchdog(false)
        .attempt()
        .await
        .unwrap()
        .into_guard();
    assert!(permit.is_some());
    assert_eq!(sem.held().await.unwrap(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_certificate_settings_are_configuration_errors() {
    let certs = TlsCerts::generate();
    // Certificates with a plain URL: refused before any connection.
    let e = Coordinator::connect_etcd("etcd://127.0.0.1:1", with_ca(&certs, "ca.pem"))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, Error::Config { reason, .. } if reason.contains("etcds://")),
        "{e}"
    );
    // An unreadable CA file is named.
    let missing = certs.path("nope.pem");
    let e = Coordinator::connect_etcd(
        "etcds://127.0.0.1:1",
        EtcdOptions::default().ca_file(&missing),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(&e, Error::Config { reason, .. } if reason.contains("nope.pem")),
        "{e}"
    );
}
