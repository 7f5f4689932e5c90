//! A master, a replica and three Redis Sentinels on loopback.

use std::time::{Duration, Instant};

use crate::{RedisServer, RedisServerBuilder};

/// The name the sentinels monitor the master under.
pub const SENTINEL_MASTER: &str = "tenure-master";

/// How long [`RedisSentinels::start`] and the waits below may take.
const WAIT: Duration = Duration::from_secs(30);

/// A master, one replica and three sentinels (quorum 2), each a real
/// `redis-server` on 127.0.0.1, stopped on drop. The sentinels declare the
/// master down after 1000 ms without an answer, so a killed master is
/// replaced within a few seconds.
///
/// ```no_run
/// let mut group = tenure_test::RedisSentinels::start();
/// println!("connect to {}", group.url()); // redis+sentinel://…/tenure-master
/// group.master.kill();                    // kill -9
/// group.wait_for_failover();              // the replica is the master now
/// ```
#[derive(Debug)]
pub struct RedisSentinels {
    /// The first master (after a failover: dead, or a replica once restarted).
    pub master: RedisServer,
    /// Its replica (after a failover: the master).
    pub replica: RedisServer,
    /// The three sentinels.
    pub sentinels: Vec<RedisServer>,
}

impl RedisSentinels {
    /// Starts the group and waits until the replica is in sync and every
    /// sentinel knows the replica and the other sentinels.
    ///
    /// # Panics
    /// When a server does not start or the group is not ready in 30 s.
    pub fn start() -> Self {
        Self::start_with(RedisServer::builder())
    }

    /// Like [`start`](Self::start), master and replica built from `builder`.
    ///
    /// # Panics
    /// As [`start`](Self::start).
    pub fn start_with(builder: RedisServerBuilder) -> Self {
        let master = builder.clone().start();
        let replica = builder
            .args([
                "--replicaof".to_string(),
                "127.0.0.1".to_string(),
                master.port().to_string(),
            ])
            .start();
        let config = format!(
            "sentinel monitor {SENTINEL_MASTER} 127.0.0.1 {port} 2\n\
             sentinel down-after-milliseconds {SENTINEL_MASTER} 1000\n\
             sentinel failover-timeout {SENTINEL_MASTER} 5000\n\
             sentinel parallel-syncs {SENTINEL_MASTER} 1\n",
            port = master.port()
        );
        let sentinels = (0..3)
            .map(|_| RedisServer::builder().sentinel(config.clone()).start())
            .collect();
        let group = RedisSentinels {
            master,
            replica,
            sentinels,
        };
        group.wait_for("the sentinels to see the replica and each other", |g| {
            g.sentinels.iter().all(|s| {
                let replicas = s
                    .command(&format!("SENTINEL REPLICAS {SENTINEL_MASTER}"))
                    .unwrap_or_default();
                let peers = s
                    .command(&format!("SENTINEL SENTINELS {SENTINEL_MASTER}"))
                    .unwrap_or_default();
                replicas.starts_with("*1") && peers.starts_with("*2")
            }) && g
                .replica
                .command("INFO replication")
                .is_ok_and(|i| i.contains("master_link_status:up"))
        });
        group
    }

    /// `redis+sentinel://127.0.0.1:S1,127.0.0.1:S2,127.0.0.1:S3/tenure-master`.
    pub fn url(&self) -> String {
        let sentinels: Vec<String> = self.sentinels.iter().map(RedisServer::addr).collect();
        format!("redis+sentinel://{}/{SENTINEL_MASTER}", sentinels.join(","))
    }

    /// The master's address as the first answering sentinel reports it.
    pub fn reported_master(&self) -> Option<String> {
        self.sentinels.iter().find_map(|s| {
            let reply = s
                .command(&format!(
                    "SENTINEL get-master-addr-by-name {SENTINEL_MASTER}"
                ))
                .ok()?;
            // *2\r\n$9\r\n127.0.0.1\r\n$5\r\n12345\r\n
            let parts: Vec<&str> = reply.split("\r\n").collect();
            (parts.len() >= 5).then(|| format!("{}:{}", parts[2], parts[4]))
        })
    }

    /// Waits until the sentinels report the replica as the master and it
    /// answers as one (after the master was killed or paused).
    ///
    /// # Panics
    /// When that takes longer than 30 s.
    pub fn wait_for_failover(&self) {
        let replica = self.replica.addr();
        self.wait_for("the replica to be promoted", |g| {
            g.reported_master().as_deref() == Some(replica.as_str())
                && g.replica
                    .command("ROLE")
                    .is_ok_and(|r| r.contains("master"))
        });
    }

    fn wait_for(&self, what: &str, done: impl Fn(&Self) -> bool) {
        let deadline = Instant::now() + WAIT;
        while !done(self) {
            assert!(Instant::now() < deadline, "waited {WAIT:?} for {what}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}
