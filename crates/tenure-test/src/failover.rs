//! A Redis master with one replica, and a failover to the replica.

use std::time::{Duration, Instant};

use crate::{Proxy, RedisServer, RedisServerBuilder};

/// A master and a replica that replicates through a [`Proxy`] (so the
/// replication link can be cut), with clients going through a second proxy
/// (`front`) that [`failover`](Self::failover) points at the replica.
///
/// ```no_run
/// let mut pair = tenure_test::ReplicatedRedis::start(tenure_test::RedisServer::builder());
/// println!("clients connect to {}", pair.url());
/// pair.failover(); // cut link, REPLICAOF NO ONE on the replica, clients moved
/// ```
#[derive(Debug)]
pub struct ReplicatedRedis {
    /// The first master (after a failover: the old master, still running).
    pub master: RedisServer,
    /// The replica (after a failover: the new master).
    pub replica: RedisServer,
    /// The replication link, replica → master.
    pub link: Proxy,
    /// Where clients connect; it leads to the current master.
    pub front: Proxy,
    failed_over: bool,
}

impl ReplicatedRedis {
    /// Starts a master from `builder`, a replica of it (same settings), and
    /// waits until the replica is in sync.
    ///
    /// # Panics
    /// When the replica does not sync within 10 s.
    pub fn start(builder: RedisServerBuilder) -> Self {
        let master = builder.clone().start();
        let link = Proxy::start(&master.addr());
        let replica = builder
            .args([
                "--replicaof".to_string(),
                "127.0.0.1".to_string(),
                link.port().to_string(),
            ])
            .start();
        let front = Proxy::start(&master.addr());
        let pair = ReplicatedRedis {
            master,
            replica,
            link,
            front,
            failed_over: false,
        };
        pair.wait_in_sync(Duration::from_secs(10));
        pair
    }

    /// `redis://…` of the front proxy: the current master for clients.
    pub fn url(&self) -> String {
        self.front.url()
    }

    /// Whether [`failover`](Self::failover) ran.
    pub fn failed_over(&self) -> bool {
        self.failed_over
    }

    /// Cuts the replication link, promotes the replica (`REPLICAOF NO ONE`)
    /// and moves the clients to it (their connections are reset). Writes the
    /// replica had not received are lost, as in a real asynchronous failover.
    pub fn failover(&mut self) {
        self.link.cut();
        let _ = self.replica.command("REPLICAOF NO ONE");
        self.front.retarget(&self.replica.addr());
        self.failed_over = true;
    }

    /// Undoes a failover for the next round: the old master becomes a replica
    /// of nothing again and clients go back to it, the old replica is emptied
    /// and replicates from it again.
    pub fn reset(&mut self) {
        if !self.failed_over {
            return;
        }
        self.front.retarget(&self.master.addr());
        self.link.restore();
        let _ = self
            .replica
            .command(&format!("REPLICAOF 127.0.0.1 {}", self.link.port()));
        self.failed_over = false;
        self.wait_in_sync(Duration::from_secs(10));
    }

    fn wait_in_sync(&self, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            let info = self.replica.command("INFO replication").unwrap_or_default();
            if info.contains("master_link_status:up") {
                return;
            }
            assert!(Instant::now() < deadline, "replica did not sync: {info}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}
