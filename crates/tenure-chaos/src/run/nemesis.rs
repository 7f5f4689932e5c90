//! The nemesis: what it acts on, and how it injects and heals each fault.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tenure_test::nemesis::{Fault, FaultKind, Rng};
use tenure_test::{
    Direction, EtcdCluster, FakeClock, Partition, PostgresServer, Proxy, RedisCluster,
    RedisSentinels, RedisServer, ReplicatedRedis,
};

use super::stores::cluster_master;
use super::{MS, Settings};
use crate::history::{Event, History, Kind, Op};
use crate::workload::Shared;

/// What the nemesis acts on.
pub(super) struct Targets {
    pub(super) servers: Vec<RedisServer>,
    pub(super) proxies: Vec<Proxy>,
    pub(super) pair: Option<ReplicatedRedis>,
    pub(super) pg: Option<PostgresServer>,
    pub(super) etcd: Option<EtcdCluster>,
    pub(super) cluster: Option<RedisCluster>,
    pub(super) sentinels: Option<RedisSentinels>,
    /// Live `tenure run` processes, per client slot.
    pub(super) procs: Arc<Mutex<Vec<Option<LiveProc>>>>,
    pub(super) clock: Option<FakeClock>,
    pub(super) shared: Option<Arc<Shared>>,
    /// Whether client faults hit `tenure run` processes (else threads).
    pub(super) processes: bool,
    pub(super) history: History,
    pub(super) rng: Rng,
    pub(super) ttl: Duration,
}

/// A running `tenure run` process of a client slot.
#[derive(Debug, Clone)]
pub(super) struct LiveProc {
    pub(super) pid: u32,
    /// The key it acquires.
    pub(super) key: String,
    /// When it was started (waiters are served in this order).
    pub(super) since: Instant,
}

/// The history marks of one fault, and its waits (cut short by `stop`).
pub(super) struct Marks<'a> {
    history: History,
    note: &'static str,
    target: u64,
    stop: &'a AtomicBool,
}

impl Marks<'_> {
    pub(super) fn start(&self) {
        self.history.record(
            &Event::new("nemesis", Op::Fault, Kind::Info)
                .note(self.note)
                .value(self.target),
        );
    }

    /// Starts the fault on lease key `key` (what it aimed at).
    pub(super) fn start_on(&self, key: &str) {
        self.history.record(
            &Event::new("nemesis", Op::Fault, Kind::Info)
                .note(self.note)
                .value(self.target)
                .key(key),
        );
    }

    /// Records how the fault was made, or why it was not.
    pub(super) fn say(&self, what: impl Into<String>) {
        self.history
            .record(&Event::new("nemesis", Op::Config, Kind::Info).note(format!(
                "{}: {}",
                self.note,
                what.into()
            )));
    }

    pub(super) fn heal(&self) {
        self.history
            .record(&Event::new("nemesis", Op::Heal, Kind::Info).note(self.note));
    }

    pub(super) fn wait(&self, d: Duration) {
        sleep_unless(self.stop, d);
    }

    /// A fault that lasts `d`: start, `act`, wait, `undo`, heal.
    pub(super) fn lasting(&self, d: Duration, act: impl FnOnce(), undo: impl FnOnce()) {
        self.start();
        act();
        self.wait(d);
        undo();
        self.heal();
    }

    /// A fault that is over at once (its effects may last): start, `act`,
    /// heal, then wait `d` before the next.
    pub(super) fn instant(&self, d: Duration, act: impl FnOnce()) {
        self.start();
        act();
        self.heal();
        self.wait(d);
    }
}

fn wipe(dir: &Path) {
    for name in ["appendonlydir", "appendonly.aof", "dump.rdb"] {
        let p = dir.join(name);
        let _ = std::fs::remove_dir_all(&p);
        let _ = std::fs::remove_file(&p);
    }
}

impl Targets {
    /// Nothing yet but PostgreSQL: the store's servers are added as they start.
    pub(super) fn new(
        s: &Settings,
        pg: Option<PostgresServer>,
        history: History,
        rng: Rng,
    ) -> Self {
        Targets {
            servers: Vec::new(),
            proxies: Vec::new(),
            pair: None,
            pg,
            etcd: None,
            cluster: None,
            sentinels: None,
            procs: Arc::new(Mutex::new(vec![None; s.clients])),
            clock: None,
            shared: None,
            processes: s.scenario.processes(),
            history,
            rng,
            ttl: s.ttl,
        }
    }

    pub(super) fn server(&mut self, i: usize) -> Option<&mut RedisServer> {
        match &mut self.pair {
            Some(pair) => Some(&mut pair.master),
            None => self.servers.get_mut(i),
        }
    }

    fn proxy(&self, i: usize) -> Option<&Proxy> {
        if let Some(c) = &self.cluster {
            return cluster_master(c, i).and_then(|m| c.proxy(m));
        }
        match &self.pair {
            Some(pair) => Some(&pair.front),
            None => self.proxies.get(i),
        }
    }

    fn live_proc(&self, slot: usize) -> Option<u32> {
        let procs = self.procs.lock().unwrap_or_else(|e| e.into_inner());
        procs.get(slot).cloned().flatten().map(|p| p.pid)
    }

    /// Injects each of `faults` at its time, then waits out `duration`. A
    /// schedule that overran `duration` (faults that waited for the store to
    /// settle) ends there: the faults left are recorded as not injected.
    pub(super) fn nemesis(&mut self, faults: &[Fault], duration: Duration, stop: &AtomicBool) {
        let t0 = Instant::now();
        for (i, f) in faults.iter().enumerate() {
            let now = t0.elapsed();
            if now >= duration {
                self.history
                    .record(&Event::new("nemesis", Op::Config, Kind::Info).note(format!(
                        "the schedule overran the run: {} faults not injected",
                        faults.len() - i
                    )));
                break;
            }
            if f.at > now {
                sleep_unless(stop, f.at - now);
            }
            self.inject(f, stop);
        }
        let now = t0.elapsed();
        if duration > now {
            sleep_unless(stop, duration - now);
        }
    }

    /// Injects `f`, waits its duration, heals it. Records both ends.
    fn inject(&mut self, f: &Fault, stop: &AtomicBool) {
        let m = Marks {
            history: self.history.clone(),
            note: f.kind.name(),
            target: f.target as u64,
            stop,
        };
        let (i, d) = (f.target, f.duration);
        match f.kind {
            FaultKind::Latency => self.latency(i, d, &m),
            FaultKind::PartitionToServerDrop
            | FaultKind::PartitionToServerStall
            | FaultKind::PartitionToClientDrop
            | FaultKind::PartitionToClientStall => self.partition(f.kind, i, d, &m),
            FaultKind::ServerPause => self.server_pause(i, d, &m),
            FaultKind::ServerRestartPersistent | FaultKind::ServerRestartVolatile => {
                self.restart(f.kind == FaultKind::ServerRestartVolatile, i, d, &m);
            }
            FaultKind::ServerClockJump => self.server_clock_jump(i, d, &m),
            FaultKind::Failover => self.failover(d, &m),
            FaultKind::ReplicationCut => {
                if let Some(pair) = &self.pair {
                    m.lasting(d, || pair.link.cut(), || pair.link.restore());
                }
            }
            FaultKind::ClientPause => self.client_pause(i, d, &m),
            FaultKind::ClientKill => {
                if let Some(pid) = self.live_proc(i) {
                    m.instant(d, || tenure_test::process::kill_tree(pid));
                }
            }
            FaultKind::ClientClockJump => self.client_clock_jump(d, &m),
            FaultKind::ResourcePause => {
                if let Some(pg) = &self.pg {
                    m.lasting(d, || pg.pause(), || pg.resume());
                }
            }
            FaultKind::ResourceRestart => {
                if let Some(pg) = &mut self.pg {
                    m.instant(d, || pg.restart());
                }
            }
            FaultKind::LeaderKill => self.leader_kill(d, &m),
            FaultKind::DiskStall => self.disk_stall(i, d, &m),
            FaultKind::MasterKill => self.master_kill(i, d, &m),
            FaultKind::MasterPartition => self.master_partition(i, d, &m),
            FaultKind::SlotMigration => self.slot_migration(i, d, &m),
            FaultKind::WaiterKill => self.waiter_kill(d, &m),
        }
    }

    fn latency(&mut self, i: usize, d: Duration, m: &Marks<'_>) {
        let seed = self.rng.next_u64();
        if let Some(p) = self.proxy(i) {
            p.seed(seed);
            // Below the validity: latency the lease must tolerate.
            p.latency(5 * MS, self.ttl / 10);
            m.start();
            m.wait(d);
            p.latency(Duration::ZERO, Duration::ZERO);
            m.heal();
        }
    }

    fn partition(&self, kind: FaultKind, i: usize, d: Duration, m: &Marks<'_>) {
        let (dir, how) = match kind {
            FaultKind::PartitionToServerDrop => (Direction::ToServer, Partition::Drop),
            FaultKind::PartitionToServerStall => (Direction::ToServer, Partition::Stall),
            FaultKind::PartitionToClientDrop => (Direction::ToClient, Partition::Drop),
            _ => (Direction::ToClient, Partition::Stall),
        };
        if let Some(p) = self.proxy(i) {
            m.lasting(d, || p.partition(dir, how), || p.heal());
        }
    }

    fn restart(&mut self, volatile: bool, i: usize, d: Duration, m: &Marks<'_>) {
        if let Some(s) = self.server(i) {
            m.start();
            s.kill();
            if volatile {
                wipe(s.dir());
            }
            m.wait(d);
            s.start_again();
            m.heal();
        }
    }

    fn server_clock_jump(&mut self, i: usize, d: Duration, m: &Marks<'_>) {
        let secs = u32::try_from(d.as_millis() / 1000 + 1).unwrap_or(1);
        if let Some(s) = self.server(i) {
            m.instant(d, || {
                let _ = s.jump_clock(secs);
            });
        }
    }

    fn failover(&mut self, d: Duration, m: &Marks<'_>) {
        if let Some(pair) = &mut self.pair {
            m.start();
            pair.failover();
            m.wait(d);
            // The old master becomes the replica of the new one.
            pair.reset();
            m.heal();
        }
    }

    fn client_pause(&self, i: usize, d: Duration, m: &Marks<'_>) {
        if self.processes {
            if let Some(pid) = self.live_proc(i) {
                m.lasting(
                    d,
                    || tenure_test::process::pause_tree(pid),
                    || tenure_test::process::resume_tree(pid),
                );
            }
        } else if let Some(sh) = &self.shared {
            // Tasks freeze themselves at their next write (and record it).
            if let Some(slot) = sh.freezes.get(i) {
                slot.store(u64::try_from(d.as_millis()).unwrap_or(0), Ordering::SeqCst);
            }
            m.wait(d);
        }
    }

    fn client_clock_jump(&mut self, d: Duration, m: &Marks<'_>) {
        if let Some(clock) = &mut self.clock {
            let secs = i64::try_from(self.rng.below(7200)).unwrap_or(0) - 3600;
            m.start();
            let _ = clock.jump(secs);
            m.wait(d);
            let _ = clock.jump(-secs);
            m.heal();
        }
    }
}

/// Sleeps `d`, waking early when `stop` is set.
pub(super) fn sleep_unless(stop: &AtomicBool, d: Duration) {
    let end = Instant::now() + d;
    while !stop.load(Ordering::SeqCst) {
        let now = Instant::now();
        if now >= end {
            return;
        }
        std::thread::sleep((end - now).min(20 * MS));
    }
}
