//! `tenure --backend etcd://…`: the real binary on a real etcd.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::{
    Sandbox, alive, assert_one_line_error, concurrent_runs_take_turns, output, pid_in, stderr,
    stdout, wait_for_file,
};
use nix::sys::signal::{Signal, kill};
use tenure_test::EtcdCluster;

/// Six concurrent `tenure run` on one key take turns: no two commands
/// overlap, and fences (etcd create revisions) increase in the order the runs
/// got the lease.
#[test]
fn concurrent_runs_on_etcd_take_turns_with_increasing_fences() {
    let etcd = EtcdCluster::single();
    let sandbox = Sandbox::new();
    concurrent_runs_take_turns(&sandbox, &etcd.url(), 6, "0.1");
}

/// A `tenure run` frozen (SIGSTOP) past its TTL: etcd expires its lease, the
/// next run gets the key with a larger fence, and the woken tenure kills its
/// command and exits 76 — it never reports a lone run.
#[test]
fn a_tenure_frozen_past_its_ttl_on_etcd_loses_to_a_higher_fence_and_exits_76() {
    let etcd = EtcdCluster::single();
    let sandbox = Sandbox::new();
    let marker = sandbox.path("child");
    let fence_file = sandbox.path("fence");
    let script = format!(
        "echo $TENURE_FENCE > {f}; trap 'exit 143' TERM; echo $$ > {m}; sleep 30 & wait",
        f = fence_file.display(),
        m = marker.display()
    );
    let mut first = sandbox.start(&[
        "--backend",
        &etcd.url(),
        "run",
        "--key",
        "job",
        "--ttl",
        "1s",
        "--grace",
        "300ms",
        "--",
        "sh",
        "-c",
        &script,
    ]);
    let child = pid_in(&marker);
    let first_fence: u64 = wait_for_file(&fence_file, Duration::from_secs(5))
        .trim()
        .parse()
        .unwrap();
    kill(first.pid(), Signal::SIGSTOP).unwrap();
    // Frozen, it cannot renew: once etcd expires the lease another run gets it.
    let second = output(
        sandbox
            .tenure()
            .args([
                "--backend",
                &etcd.url(),
                "run",
                "--key",
                "job",
                "--wait",
                "10s",
            ])
            .args(["--", "sh", "-c", "echo $TENURE_FENCE"]),
    );
    kill(first.pid(), Signal::SIGCONT).unwrap();
    assert_eq!(second.status.code(), Some(0), "{}", stderr(&second));
    let second_fence: u64 = stdout(&second).trim().parse().unwrap();
    assert!(
        second_fence > first_fence,
        "{second_fence} after {first_fence}"
    );
    let status = first.wait(Duration::from_secs(15));
    assert_eq!(status.code(), Some(76), "{}", first.stderr());
    assert!(!alive(child), "the command outlived its lease");
}

#[test]
fn dead_endpoints_exit_69_and_bad_urls_64_never_showing_the_password() {
    let s = Sandbox::new();
    let dead = format!("etcd://root:hunter2@127.0.0.1:{}", tenure_test::free_port());
    let start = std::time::Instant::now();
    let err = assert_one_line_error(
        &s,
        &["--backend", &dead, "run", "--key", "k", "--", "true"],
        69,
        "unreachable",
    );
    assert!(!err.contains("hunter2"), "{err}");
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    let err = assert_one_line_error(
        &s,
        &["--backend", &dead, "status", "--key", "k"],
        69,
        "unreachable",
    );
    assert!(!err.contains("hunter2"), "{err}");
    let err = assert_one_line_error(
        &s,
        &[
            "--backend",
            "etcd://root:hunter2@h1:port",
            "status",
            "--key",
            "k",
        ],
        64,
        "bad port",
    );
    assert!(!err.contains("hunter2"), "{err}");
}

#[test]
fn rate_limits_on_etcd_are_refused_naming_redis_and_sqlite() {
    let etcd = EtcdCluster::single();
    let s = Sandbox::new();
    let err = assert_one_line_error(
        &s,
        &[
            "--backend",
            &etcd.url(),
            "limit",
            "--key",
            "k",
            "--rate",
            "5/s",
        ],
        64,
        "not kept in etcd",
    );
    assert!(err.contains("redis://") && err.contains("sqlite:"), "{err}");
    let status = output(
        s.tenure()
            .args(["--backend", &etcd.url(), "status", "--key", "k"]),
    );
    assert_eq!(status.status.code(), Some(75), "free: {}", stderr(&status));
}

/// `etcds://` with etcdctl's certificate options: the test CA works (a run
/// and `tenure status`), another CA is exit 69 with one line naming the
/// certificate problem.
#[test]
fn etcds_with_cacert_runs_and_a_wrong_ca_exits_69() {
    let certs = tenure_test::TlsCerts::generate();
    let etcd = EtcdCluster::start_tls(1, &certs, true);
    let s = Sandbox::new();
    let ca = certs.path("ca.pem").display().to_string();
    let (cert, key) = (
        certs.path("client.pem").display().to_string(),
        certs.path("client.key").display().to_string(),
    );
    let tls = [
        "--backend",
        &etcd.tls_url(),
        "--cacert",
        &ca,
        "--tls-cert",
        &cert,
        "--tls-key",
        &key,
    ];
    let out = output(s.tenure().args(tls).args([
        "run",
        "--key",
        "tls",
        "--",
        "sh",
        "-c",
        "echo $TENURE_FENCE",
    ]));
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).trim().parse::<u64>().is_ok(),
        "{}",
        stdout(&out)
    );
    let out = output(s.tenure().args(tls).args(["status", "--key", "tls"]));
    assert_eq!(out.status.code(), Some(75), "free: {}", stderr(&out));
    // The same three files from the environment.
    let out = output(
        s.tenure()
            .env("TENURE_CACERT", &ca)
            .env("TENURE_TLS_CERT", &cert)
            .env("TENURE_TLS_KEY", &key)
            .args(["--backend", &etcd.tls_url(), "status", "--key", "tls"]),
    );
    assert_eq!(out.status.code(), Some(75), "free: {}", stderr(&out));
    // A certificate without its key is a usage error, from either source.
    assert_one_line_error(
        &s,
        &["--tls-cert", &cert, "status", "--key", "tls"],
        64,
        "--tls-key",
    );
    let out = output(s.tenure().env("TENURE_TLS_CERT", &cert).args([
        "--backend",
        &etcd.tls_url(),
        "status",
        "--key",
        "tls",
    ]));
    assert_eq!(out.status.code(), Some(64), "{}", stderr(&out));

    let other = certs.path("other-ca.pem").display().to_string();
    let start = std::time::Instant::now();
    let err = assert_one_line_error(
        &s,
        &[
            "--backend",
            &etcd.tls_url(),
            "--cacert",
            &other,
            "--tls-cert",
            &cert,
            "--tls-key",
            &key,
            "status",
            "--key",
            "tls",
        ],
        69,
        "certificate",
    );
    assert!(err.contains("etcds://"), "{err}");
    assert!(
        start.elapsed() < Duration::from_secs(6),
        "{:?}",
        start.elapsed()
    );
}
