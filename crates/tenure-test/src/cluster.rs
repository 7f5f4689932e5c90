//! A Redis Cluster of real `redis-server` processes on loopback: masters with
//! one replica each, made with `redis-cli --cluster create`.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::{RedisServer, RedisServerBuilder, free_port};

/// How long [`RedisCluster::start`] waits for the cluster to serve every slot.
const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// A Redis Cluster of `masters` masters with one replica each, every node a
/// [`RedisServer`] on 127.0.0.1 (client port and cluster bus port both free
/// ports), stopped when dropped.
///
/// `cluster-node-timeout` is short (default 1000 ms) so that a killed master's
/// replica is promoted within a few seconds.
///
/// ```no_run
/// let mut cluster = tenure_test::RedisCluster::start(3);
/// println!("connect to {}", cluster.url()); // redis+cluster://127.0.0.1:p1,…
/// let master = cluster.master_of("{orders:42}");
/// cluster.kill(master);                     // kill -9
/// cluster.wait_until_ok();                  // its replica took over
/// ```
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
    masters: usize,
}

impl RedisCluster {
    /// Starts `masters` masters and as many replicas, non-persistent, with a
    /// node timeout of 1000 ms.
    ///
    /// # Panics
    /// When the servers do not start or the cluster is not ready in 30 s.
    pub fn start(masters: usize) -> Self {
        Self::start_with(masters, RedisServer::builder(), Duration::from_millis(1000))
    }

    /// Like [`start`](Self::start), every node built from `builder` (e.g.
    /// persistent) with `cluster-node-timeout` `node_timeout`.
    ///
    /// # Panics
    /// When the servers do not start, `redis-cli --cluster create` fails or the
    /// cluster is not ready in 30 s.
    pub fn start_with(masters: usize, builder: RedisServerBuilder, node_timeout: Duration) -> Self {
        assert!(masters >= 3, "Redis Cluster needs at least 3 masters");
        let nodes: Vec<RedisServer> = (0..masters * 2)
            .map(|_| {
                builder
                    .clone()
                    .args([
                        "--cluster-enabled".to_string(),
                        "yes".to_string(),
                        "--cluster-config-file".to_string(),
                        "nodes.conf".to_string(),
                        "--cluster-node-timeout".to_string(),
                        node_timeout.as_millis().to_string(),
                        "--cluster-port".to_string(),
                        free_port().to_string(),
                        // A replica takes over however long its link was down.
                        "--cluster-replica-validity-factor".to_string(),
                        "0".to_string(),
                    ])
                    .start()
            })
            .collect();
        let output = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(nodes.iter().map(RedisServer::addr))
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .output()
            .expect("run redis-cli --cluster create (install redis-tools)");
        assert!(
            output.status.success(),
            "redis-cli --cluster create: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        let cluster = RedisCluster { nodes, masters };
        cluster.wait_until_ok();
        cluster.wait_for_replicas();
        cluster
    }

    /// Waits until every master has a replica in sync (`WAIT` would count it).
    fn wait_for_replicas(&self) {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let synced = self.nodes.iter().all(|n| {
                query(&n.addr(), &["INFO", "replication"]).is_ok_and(|info| {
                    info.contains("master_link_status:up")
                        || (info.contains("role:master") && !info.contains("connected_slaves:0"))
                })
            });
            if synced {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the replicas are not in sync after {READY_TIMEOUT:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `redis+cluster://127.0.0.1:P1,127.0.0.1:P2,…` with the masters as seeds.
    pub fn url(&self) -> String {
        let seeds: Vec<String> = self.nodes[..self.masters]
            .iter()
            .map(RedisServer::addr)
            .collect();
        format!("redis+cluster://{}", seeds.join(","))
    }

    /// Every node, masters first as created (roles change after a failover).
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// The node at `index`, e.g. to pause it or send it a command.
    pub fn node(&self, index: usize) -> &RedisServer {
        &self.nodes[index]
    }

    /// The index of the node serving `key`'s slot as master now.
    ///
    /// # Panics
    /// When no live node answers or none serves the slot.
    pub fn master_of(&self, key: &str) -> usize {
        let slot: u16 = self
            .query(&["CLUSTER", "KEYSLOT", key])
            .trim_start_matches(':')
            .trim()
            .parse()
            .expect("CLUSTER KEYSLOT answers an integer");
        let nodes = self.query(&["CLUSTER", "NODES"]);
        for line in nodes.lines() {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() < 9 || !fields[2].contains("master") || fields[2].contains("fail") {
                continue;
            }
            let serves = fields[8..].iter().any(|range| {
                let (low, high) = range.split_once('-').unwrap_or((range, range));
                matches!((low.parse::<u16>(), high.parse::<u16>()), (Ok(l), Ok(h)) if l <= slot && slot <= h)
            });
            if serves {
                let port = fields[1]
                    .split(['@', ','])
                    .next()
                    .and_then(|a| a.rsplit(':').next())
                    .and_then(|p| p.parse::<u16>().ok());
                if let Some(i) = self.nodes.iter().position(|n| Some(n.port()) == port) {
                    return i;
                }
            }
        }
        panic!("no master serves slot {slot}:\n{nodes}");
    }

    /// Kills node `index` with SIGKILL (kill -9): what it had not replicated is lost.
    pub fn kill(&mut self, index: usize) {
        self.nodes[index].kill();
    }

    /// Waits until every live node reports `cluster_state:ok` and every slot
    /// is served by a live master (after a kill: until a replica took over).
    ///
    /// # Panics
    /// When that takes longer than 30 s.
    pub fn wait_until_ok(&self) {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let ok = self.nodes.iter().filter(|n| n.pid().is_some()).all(|n| {
                query(&n.addr(), &["CLUSTER", "INFO"]).is_ok_and(|info| {
                    info.contains("cluster_state:ok") && info.contains("cluster_slots_ok:16384")
                })
            });
            if ok {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the cluster is not ok after {READY_TIMEOUT:?}: {}",
                self.query(&["CLUSTER", "NODES"])
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Sends `args` to the first live node and returns the raw reply (a bulk
    /// reply read whole).
    ///
    /// # Panics
    /// When no node answers.
    pub fn query(&self, args: &[&str]) -> String {
        self.nodes
            .iter()
            .filter(|n| n.pid().is_some())
            .find_map(|n| query(&n.addr(), args).ok())
            .expect("a live cluster node answers")
    }
}

/// Sends one command as a RESP array and reads the whole reply: a bulk
/// string's content, or the first line of any other reply.
fn query(addr: &str, args: &[&str]) -> std::io::Result<String> {
    let mut stream = TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut request = format!("*{}\r\n", args.len());
    for a in args {
        request.push_str(&format!("${}\r\n{a}\r\n", a.len()));
    }
    stream.write_all(request.as_bytes())?;
    let mut reply = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            break;
        }
        reply.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&reply);
        let Some((head, body)) = text.split_once("\r\n") else {
            continue;
        };
        match head.strip_prefix('$').map(str::parse::<usize>) {
            Some(Ok(len)) if body.len() >= len => return Ok(body[..len].to_string()),
            Some(Ok(_)) => continue,
            _ => return Ok(head.to_string()),
        }
    }
    Ok(String::from_utf8_lossy(&reply).into_owned())
}
