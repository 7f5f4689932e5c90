//! The faults of the replicated stores — an etcd cluster, a Redis Cluster, a
//! Sentinel group — and of the waiting line: which member or master each one
//! hits, and how it is made and healed.

use std::time::{Duration, Instant};

use tenure_test::{DiskStall, RedisCluster, RedisSentinels, RedisServer};

use super::nemesis::{Marks, Targets};
use super::{CLUSTER_NODE_TIMEOUT, MS};

/// How long a healed fault waits for the store to be whole again (a cluster
/// serving every slot, a restarted node replicating) before the next one.
const SETTLE: Duration = Duration::from_secs(15);

/// The Redis key of lease `k{i}` (its slot is the one the lease lives in).
fn lease_key(i: usize) -> String {
    format!("tenure:{{k{i}}}")
}

/// The `i`-th master of `c` now (round robin over the masters).
pub(super) fn cluster_master(c: &RedisCluster, i: usize) -> Option<usize> {
    let masters = c.masters_now();
    (!masters.is_empty()).then(|| masters[i % masters.len()])
}

/// The server of the Sentinel group the sentinels report as master.
fn sentinel_master(g: &mut RedisSentinels) -> Option<&mut RedisServer> {
    let addr = g.reported_master()?;
    if g.master.addr() == addr {
        Some(&mut g.master)
    } else if g.replica.addr() == addr {
        Some(&mut g.replica)
    } else {
        None
    }
}

/// Whether the old master at `back` has settled: it is the master again (it
/// came back before a failover) or replicates from the new one.
fn sentinel_settled(g: &RedisSentinels, back: &str) -> bool {
    let Some(master) = g.reported_master() else {
        return false;
    };
    if master == back {
        return true;
    }
    let old = if g.master.addr() == back {
        &g.master
    } else {
        &g.replica
    };
    old.command("INFO replication")
        .is_ok_and(|i| i.contains("master_link_status:up"))
}

/// Polls `done` every 50 ms for at most `within`; whether it held.
fn wait_for(within: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    while !done() {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(50 * MS);
    }
    true
}

impl Targets {
    /// SIGSTOP / SIGCONT of an etcd member, a Redis Cluster master, the
    /// Sentinel group's master, or a Redis server.
    pub(super) fn server_pause(&mut self, i: usize, d: Duration, m: &Marks<'_>) {
        if let Some(etcd) = &self.etcd {
            m.lasting(d, || etcd.pause(i), || etcd.resume(i));
        } else if let Some(c) = &self.cluster {
            if let Some(node) = cluster_master(c, i) {
                let s = c.node(node);
                m.lasting(d, || s.pause(), || s.resume());
            }
        } else if let Some(g) = &mut self.sentinels {
            if let Some(s) = sentinel_master(g) {
                m.lasting(d, || s.pause(), || s.resume());
            }
        } else if let Some(s) = self.server(i) {
            m.lasting(d, || s.pause(), || s.resume());
        }
    }

    /// kill -9 of the etcd leader; it is restarted after `d` (and waited for).
    pub(super) fn leader_kill(&mut self, d: Duration, m: &Marks<'_>) {
        let Some(etcd) = &mut self.etcd else { return };
        let Some(leader) = etcd.leader() else {
            m.say("no leader to kill");
            return;
        };
        m.start();
        etcd.kill(leader);
        m.wait(d);
        etcd.restart(leader);
        m.heal();
    }

    /// An etcd member's filesystem frozen for `d` (see [`DiskStall`]).
    pub(super) fn disk_stall(&mut self, i: usize, d: Duration, m: &Marks<'_>) {
        let Some(etcd) = &mut self.etcd else { return };
        m.start();
        if etcd.stall_disk(i) == DiskStall::Paused {
            m.say("no disk of its own: the member was paused");
        }
        m.wait(d);
        etcd.unstall_disk(i);
        m.heal();
    }

    /// kill -9 of the master of lease `k{i}` (Redis Cluster) or of the
    /// Sentinel group's master, restarted after `d`: when `d` outlasts the
    /// failure detection its replica has been promoted, and it rejoins as a
    /// replica.
    pub(super) fn master_kill(&mut self, i: usize, d: Duration, m: &Marks<'_>) {
        if let Some(c) = &mut self.cluster {
            let key = lease_key(i);
            let Some(node) = c.try_master_of(&key) else {
                m.say("no master serves the slot");
                return;
            };
            m.start_on(&format!("k{i}"));
            c.kill(node);
            m.wait(d);
            c.start_again(node);
            if !c.wait_ok_within(SETTLE) {
                m.say("the cluster is not ok yet");
            }
            m.heal();
        } else if let Some(g) = &mut self.sentinels {
            let Some(s) = sentinel_master(g) else {
                m.say("the sentinels report no master");
                return;
            };
            m.start();
            s.kill();
            m.wait(d);
            s.start_again();
            let back = s.addr();
            // The sentinels turn the old master into a replica of the new one.
            if !wait_for(SETTLE, || sentinel_settled(g, &back)) {
                m.say("the group has not settled yet");
            }
            m.heal();
        }
    }

    /// The master of lease `k{i}` cut off from its clients, its replica and
    /// the cluster bus for `d`; past the node timeout its replica is promoted.
    pub(super) fn master_partition(&mut self, i: usize, d: Duration, m: &Marks<'_>) {
        let Some(c) = &self.cluster else { return };
        let Some(node) = c.try_master_of(&lease_key(i)) else {
            m.say("no master serves the slot");
            return;
        };
        m.start_on(&format!("k{i}"));
        c.partition(node);
        m.wait(d);
        c.heal(node);
        if d > CLUSTER_NODE_TIMEOUT && !c.wait_ok_within(SETTLE) {
            m.say("the cluster is not ok yet");
        }
        m.heal();
    }

    /// The slot of lease `k{i}` moved to another master, keys and all, while
    /// clients hold and acquire it; then a pause of `d`.
    pub(super) fn slot_migration(&mut self, i: usize, d: Duration, m: &Marks<'_>) {
        let Some(c) = &self.cluster else { return };
        m.start_on(&format!("k{i}"));
        if let Err(e) = c.migrate_slot_of(&lease_key(i)) {
            m.say(e);
        }
        m.heal();
        m.wait(d);
    }

    /// kill -9 of the first waiter in a key's line while it waits (a `tenure
    /// run` that has not started its command while another one holds the
    /// key); looked for during up to `d`.
    pub(super) fn waiter_kill(&mut self, d: Duration, m: &Marks<'_>) {
        let mut head = None;
        wait_for(d, || {
            head = self.head_waiter();
            head.is_some()
        });
        let Some((pid, key)) = head else {
            m.say("no waiter in line");
            return;
        };
        m.start_on(&key);
        tenure_test::process::kill_tree(pid);
        m.heal();
        m.wait(d);
    }

    /// The `tenure run` process first in line on a held key: the oldest of
    /// those without a child (the command starts once the lease is held)
    /// on a key another process holds.
    fn head_waiter(&self) -> Option<(u32, String)> {
        let procs = self.procs.lock().unwrap_or_else(|e| e.into_inner());
        let live: Vec<_> = procs.iter().flatten().cloned().collect();
        drop(procs);
        let holds = |pid: u32| !tenure_test::process::descendants(pid).is_empty();
        let held: Vec<&str> = live
            .iter()
            .filter(|p| holds(p.pid))
            .map(|p| p.key.as_str())
            .collect();
        live.iter()
            .filter(|p| held.contains(&p.key.as_str()) && !holds(p.pid))
            .min_by_key(|p| p.since)
            .map(|p| (p.pid, p.key.clone()))
    }
}
