//! A Redis Cluster of real `redis-server` processes on loopback: masters with
//! one replica each, made with `redis-cli --cluster create`.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::{Proxy, RedisServer, RedisServerBuilder, free_port};

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
    /// Per node, when started with [`start_proxied`](Self::start_proxied): the
    /// proxies its clients (and replicas) and its cluster bus peers reach it by.
    proxies: Vec<NodeProxies>,
}

/// The two proxies in front of one node.
#[derive(Debug)]
struct NodeProxies {
    client: Proxy,
    bus: Proxy,
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
        Self::launch(masters, &builder, node_timeout, false)
    }

    /// Like [`start_with`](Self::start_with), every node announcing a
    /// [`Proxy`] for its client port and one for its cluster bus port, so that
    /// [`partition`](Self::partition) can cut a node off from its clients, its
    /// replicas and the bus messages of its peers (what reaches it; the
    /// messages it sends on its own connections still go out).
    ///
    /// # Panics
    /// As [`start_with`](Self::start_with).
    pub fn start_proxied(
        masters: usize,
        builder: &RedisServerBuilder,
        node_timeout: Duration,
    ) -> Self {
        Self::launch(masters, builder, node_timeout, true)
    }

    fn launch(
        masters: usize,
        builder: &RedisServerBuilder,
        node_timeout: Duration,
        proxied: bool,
    ) -> Self {
        assert!(masters >= 3, "Redis Cluster needs at least 3 masters");
        let mut proxies = Vec::new();
        let nodes: Vec<RedisServer> = (0..masters * 2)
            .map(|_| {
                let bus_port = free_port();
                let mut args = vec![
                    "--cluster-enabled".to_string(),
                    "yes".to_string(),
                    "--cluster-config-file".to_string(),
                    "nodes.conf".to_string(),
                    "--cluster-node-timeout".to_string(),
                    node_timeout.as_millis().to_string(),
                    "--cluster-port".to_string(),
                    bus_port.to_string(),
                    // A replica takes over however long its link was down.
                    "--cluster-replica-validity-factor".to_string(),
                    "0".to_string(),
                ];
                if proxied {
                    // The node's port is known once it runs: the client proxy
                    // is pointed at it then.
                    let p = NodeProxies {
                        client: Proxy::start("127.0.0.1:1"),
                        bus: Proxy::start(&format!("127.0.0.1:{bus_port}")),
                    };
                    args.extend([
                        "--cluster-announce-ip".to_string(),
                        "127.0.0.1".to_string(),
                        "--cluster-announce-port".to_string(),
                        p.client.port().to_string(),
                        "--cluster-announce-bus-port".to_string(),
                        p.bus.port().to_string(),
                    ]);
                    proxies.push(p);
                }
                let node = builder.clone().args(args).start();
                if let Some(p) = proxies.last().filter(|_| proxied) {
                    p.client.retarget(&node.addr());
                }
                node
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
        let cluster = RedisCluster {
            nodes,
            masters,
            proxies,
        };
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

    /// `redis+cluster://127.0.0.1:P1,127.0.0.1:P2,…` with the masters as seeds
    /// (their client proxies in a proxied cluster).
    pub fn url(&self) -> String {
        let seeds: Vec<String> = (0..self.masters)
            .map(|i| match self.proxies.get(i) {
                Some(p) => p.client.addr(),
                None => self.nodes[i].addr(),
            })
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
        self.try_master_of(key)
            .unwrap_or_else(|| panic!("no master serves the slot of {key}"))
    }

    /// The index of the node serving `key`'s slot as master now, if a live
    /// node says which (none does during a failover).
    pub fn try_master_of(&self, key: &str) -> Option<usize> {
        let slot: u16 = self
            .try_query(&["CLUSTER", "KEYSLOT", key])?
            .trim_start_matches(':')
            .trim()
            .parse()
            .ok()?;
        let nodes = self.try_query(&["CLUSTER", "NODES"])?;
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
                if let Some(i) = port.and_then(|p| self.index_of_port(p)) {
                    return Some(i);
                }
            }
        }
        None
    }

    /// The node whose client port (or client proxy's port) is `port`.
    fn index_of_port(&self, port: u16) -> Option<usize> {
        self.nodes
            .iter()
            .position(|n| n.port() == port)
            .or_else(|| self.proxies.iter().position(|p| p.client.port() == port))
    }

    /// Kills node `index` with SIGKILL (kill -9): what it had not replicated is lost.
    pub fn kill(&mut self, index: usize) {
        self.nodes[index].kill();
    }

    /// Starts node `index` again after [`kill`](Self::kill), on the same port
    /// with its data and `nodes.conf` (a killed master rejoins as a replica
    /// of the one promoted in its place).
    pub fn start_again(&mut self, index: usize) {
        self.nodes[index].start_again();
        if let Some(p) = self.proxies.get(index) {
            p.client.retarget(&self.nodes[index].addr());
        }
    }

    /// The nodes that are masters now, as the first live node sees them (in
    /// node order).
    pub fn masters_now(&self) -> Vec<usize> {
        let nodes = self.try_query(&["CLUSTER", "NODES"]).unwrap_or_default();
        let mut masters: Vec<usize> = nodes
            .lines()
            .filter_map(|line| {
                let f: Vec<&str> = line.split_whitespace().collect();
                if f.len() < 9 || !f[2].contains("master") || f[2].contains("fail") {
                    return None;
                }
                let port = f[1].split(['@', ',']).next()?.rsplit(':').next()?;
                self.index_of_port(port.parse().ok()?)
            })
            .collect();
        masters.sort_unstable();
        masters
    }

    /// Cuts node `index` off (proxied clusters only): its clients' and
    /// replicas' connections and its peers' bus connections are reset and new
    /// ones refused, until [`heal`](Self::heal).
    pub fn partition(&self, index: usize) {
        if let Some(p) = self.proxies.get(index) {
            p.client.cut();
            p.bus.cut();
        }
    }

    /// Ends [`partition`](Self::partition) of node `index`.
    pub fn heal(&self, index: usize) {
        if let Some(p) = self.proxies.get(index) {
            p.client.restore();
            p.bus.restore();
        }
    }

    /// The client-side proxy of node `index` (proxied clusters only), for
    /// latency and one-way partitions.
    pub fn proxy(&self, index: usize) -> Option<&Proxy> {
        self.proxies.get(index).map(|p| &p.client)
    }

    /// Moves the slot of `key` from its master to the next master (in node
    /// order), keys included, as `redis-cli --cluster reshard` would:
    /// `SETSLOT … IMPORTING/MIGRATING`, `MIGRATE` of every key, then
    /// `SETSLOT … NODE` on both. Returns the slot.
    ///
    /// # Errors
    /// When a step is refused (the error names it); the slot may then be left
    /// half-migrated, which clients see as `ASK` redirections.
    pub fn migrate_slot_of(&self, key: &str) -> Result<u16, String> {
        let slot: u16 = self
            .try_query(&["CLUSTER", "KEYSLOT", key])
            .unwrap_or_default()
            .trim_start_matches(':')
            .trim()
            .parse()
            .map_err(|_| "CLUSTER KEYSLOT answered no number".to_string())?;
        let from = self
            .try_master_of(key)
            .ok_or("no master serves the slot now")?;
        let masters = self.masters_now();
        let to = masters
            .iter()
            .copied()
            .find(|m| *m > from)
            .or_else(|| masters.first().copied())
            .filter(|m| *m != from)
            .ok_or("no other master to move the slot to")?;
        let (src, dst) = (self.nodes[from].addr(), self.nodes[to].addr());
        let id = |addr: &str| query(addr, &["CLUSTER", "MYID"]).map_err(|e| e.to_string());
        let (src_id, dst_id) = (id(&src)?, id(&dst)?);
        let s = slot.to_string();
        let step = |addr: &str, args: &[&str]| -> Result<String, String> {
            let reply = query(addr, args).map_err(|e| format!("{}: {e}", args.join(" ")))?;
            if reply.starts_with('-') {
                Err(format!("{}: {reply}", args.join(" ")))
            } else {
                Ok(reply)
            }
        };
        step(&dst, &["CLUSTER", "SETSLOT", &s, "IMPORTING", &src_id])?;
        step(&src, &["CLUSTER", "SETSLOT", &s, "MIGRATING", &dst_id])?;
        let (host, port) = dst.rsplit_once(':').ok_or("a node address has no port")?;
        loop {
            let keys = keys_in_slot(&src, &s)?;
            if keys.is_empty() {
                break;
            }
            let mut args = vec!["MIGRATE", host, port, "", "0", "5000", "REPLACE", "KEYS"];
            args.extend(keys.iter().map(String::as_str));
            step(&src, &args)?;
        }
        step(&dst, &["CLUSTER", "SETSLOT", &s, "NODE", &dst_id])?;
        step(&src, &["CLUSTER", "SETSLOT", &s, "NODE", &dst_id])?;
        Ok(slot)
    }

    /// Waits until every live node reports `cluster_state:ok` and every slot
    /// is served by a live master (after a kill: until a replica took over).
    ///
    /// # Panics
    /// When that takes longer than 30 s.
    pub fn wait_until_ok(&self) {
        assert!(
            self.wait_ok_within(READY_TIMEOUT),
            "the cluster is not ok after {READY_TIMEOUT:?}: {}",
            self.query(&["CLUSTER", "NODES"])
        );
    }

    /// Like [`wait_until_ok`](Self::wait_until_ok), for at most `within`;
    /// whether the cluster is ok.
    pub fn wait_ok_within(&self, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        loop {
            let ok = self.nodes.iter().filter(|n| n.pid().is_some()).all(|n| {
                query(&n.addr(), &["CLUSTER", "INFO"]).is_ok_and(|info| {
                    info.contains("cluster_state:ok") && info.contains("cluster_slots_ok:16384")
                })
            });
            if ok {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Sends `args` to the first live node and returns the raw reply (a bulk
    /// reply read whole).
    ///
    /// # Panics
    /// When no node answers.
    pub fn query(&self, args: &[&str]) -> String {
        self.try_query(args).expect("a live cluster node answers")
    }

    /// Like [`query`](Self::query); `None` when no node answers.
    pub fn try_query(&self, args: &[&str]) -> Option<String> {
        self.nodes
            .iter()
            .filter(|n| n.pid().is_some())
            .find_map(|n| query(&n.addr(), args).ok())
    }
}

/// The keys of `slot` on the node at `addr` (up to 100 at a time).
fn keys_in_slot(addr: &str, slot: &str) -> Result<Vec<String>, String> {
    let reply = query_raw(addr, &["CLUSTER", "GETKEYSINSLOT", slot, "100"])
        .map_err(|e| format!("CLUSTER GETKEYSINSLOT: {e}"))?;
    // *N\r\n$len\r\nkey\r\n…: every other line after the header is a key.
    Ok(reply
        .split("\r\n")
        .skip(1)
        .skip(1)
        .step_by(2)
        .filter(|k| !k.is_empty())
        .map(str::to_string)
        .collect())
}

/// Sends one command as a RESP array and reads the whole reply: a bulk
/// string's content, or the first line of any other reply.
fn query(addr: &str, args: &[&str]) -> std::io::Result<String> {
    exchange(addr, args, |text| {
        let (head, body) = text.split_once("\r\n")?;
        match head.strip_prefix('$').map(str::parse::<usize>) {
            Some(Ok(len)) if body.len() >= len => Some(body[..len].to_string()),
            Some(Ok(_)) => None,
            _ => Some(head.to_string()),
        }
    })
}

/// Sends one command whose reply is an array of bulk strings and returns the
/// raw reply once every element has arrived.
fn query_raw(addr: &str, args: &[&str]) -> std::io::Result<String> {
    exchange(addr, args, |text| {
        let (head, _) = text.split_once("\r\n")?;
        let elements = head
            .strip_prefix('*')
            .and_then(|c| c.parse::<usize>().ok())
            .unwrap_or(0);
        (text.matches("\r\n").count() > 2 * elements).then(|| text.to_string())
    })
}

/// Sends one command as a RESP array and reads until `done` makes an answer
/// of the reply so far, or the node closes (then the whole reply).
fn exchange(
    addr: &str,
    args: &[&str],
    done: impl Fn(&str) -> Option<String>,
) -> std::io::Result<String> {
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
        if let Some(answer) = done(&String::from_utf8_lossy(&reply)) {
            return Ok(answer);
        }
    }
    Ok(String::from_utf8_lossy(&reply).into_owned())
}
