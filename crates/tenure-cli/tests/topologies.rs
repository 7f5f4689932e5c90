//! `tenure --backend redis+cluster://…` against a real Redis Cluster (3
//! masters, 1 replica each) and `redis+sentinel://…` against a real Sentinel
//! group: a command runs under the lease with its fence, the lease is gone
//! after, and (on the cluster) a second `tenure run` on the same key sees it
//! held while the first runs.

#![allow(clippy::unwrap_used)]

mod common;

use common::{Sandbox, output, stderr};
use tenure_test::{RedisCluster, RedisSentinels};

#[test]
fn run_on_a_cluster_holds_the_lease_and_releases_it() {
    let sandbox = Sandbox::new();
    let cluster = RedisCluster::start(3);
    let url = cluster.url();
    let out = output(sandbox.tenure().args([
        "--backend",
        &url,
        "run",
        "--key",
        "job",
        "--",
        "sh",
        "-c",
        "echo \"fence=$TENURE_FENCE\"",
    ]));
    assert!(out.status.success(), "{:?}: {}", out.status, stderr(&out));
    let printed = String::from_utf8_lossy(&out.stdout);
    let fence = printed.trim().strip_prefix("fence=").unwrap_or_default();
    assert!(fence.parse::<u64>().is_ok_and(|f| f > 1), "{printed}");
    // The lease key lives on the master of its slot; EXISTS there is 0.
    let master = cluster.master_of("tenure:{job}");
    assert_eq!(
        cluster
            .node(master)
            .command("EXISTS tenure:{job}")
            .unwrap()
            .trim(),
        ":0"
    );
    assert_eq!(
        cluster
            .node(master)
            .command("GET tenure:{job}:fence")
            .unwrap()
            .trim(),
        "$1\r\n1"
    );
    // While one run holds the key, a second one with no wait exits 75.
    let mut holder = sandbox
        .tenure()
        .args(["--backend", &url, "run", "--key", "job", "--", "sleep", "3"])
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    loop {
        let held = cluster.node(master).command("EXISTS tenure:{job}").unwrap();
        if held.trim() == ":1" {
            break;
        }
        assert!(
            start.elapsed().as_secs() < 10,
            "the holder never took the lease"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let second = output(sandbox.tenure().args([
        "--backend",
        &url,
        "run",
        "--key",
        "job",
        "-n",
        "--",
        "true",
    ]));
    assert_eq!(second.status.code(), Some(75), "{}", stderr(&second));
    assert!(holder.wait().unwrap().success());
}

#[test]
fn run_through_sentinel_uses_the_master_it_names() {
    let sandbox = Sandbox::new();
    let group = RedisSentinels::start();
    let url = group
        .url()
        .replace("redis+sentinel://", "redis+sentinel://:pw,with@comma@");
    group
        .master
        .command("CONFIG SET requirepass pw,with@comma")
        .unwrap();
    group
        .replica
        .command("CONFIG SET masterauth pw,with@comma")
        .unwrap();
    let out = output(sandbox.tenure().args([
        "--backend",
        &url,
        "run",
        "--key",
        "job",
        "--",
        "sh",
        "-c",
        "echo \"fence=$TENURE_FENCE\"",
    ]));
    assert!(out.status.success(), "{:?}: {}", out.status, stderr(&out));
    let printed = String::from_utf8_lossy(&out.stdout);
    let fence = printed.trim().strip_prefix("fence=").unwrap_or_default();
    assert!(fence.parse::<u64>().is_ok_and(|f| f > 1), "{printed}");
    // The fence counter is on the master the sentinels name.
    let cli = std::process::Command::new("redis-cli")
        .args([
            "-p",
            &group.master.port().to_string(),
            "--no-auth-warning",
            "-a",
            "pw,with@comma",
        ])
        .args(["GET", "tenure:{job}:fence"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&cli.stdout).trim(), fence);
    // A wrong master name: exit 69, naming it, never the password.
    let wrong = output(sandbox.tenure().args([
        "--backend",
        &url.replace("/tenure-master", "/nobody"),
        "run",
        "--key",
        "job",
        "--",
        "true",
    ]));
    assert_eq!(wrong.status.code(), Some(69), "{}", stderr(&wrong));
    assert!(stderr(&wrong).contains("nobody"), "{}", stderr(&wrong));
    assert!(!stderr(&wrong).contains("with@comma"), "{}", stderr(&wrong));
}
