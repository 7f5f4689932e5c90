//! A scenario: servers, clients, a nemesis executing a seeded schedule, and
//! the final checks (orphan keys, final values) written to the history.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use warden_test::nemesis::{Fault, FaultKind, FaultSpec, Plan, Rng, schedule};
use warden_test::{
    Direction, FakeClock, Partition, PostgresServer, Proxy, RedisServer, ReplicatedRedis,
};

use crate::check::{Report, check};
use crate::history::{self, Event, History, Kind, Op, now_ns};
use crate::resource::{Resource, pg_setup};
use crate::store::StoreSpec;
use crate::workload::{Shared, client_thread, resource_names};

/// The set-ups of the scorecard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    /// `warden run` processes on one SQLite file.
    Sqlite,
    /// One Redis master (`appendfsync always`).
    Redis,
    /// A master and a replica; writes wait for the replica's acknowledgement.
    Replicated,
    /// A quorum of 3 independent masters.
    Quorum3,
    /// A quorum of 5 independent masters.
    Quorum5,
}

impl Scenario {
    /// Every scenario, in scorecard order.
    pub const ALL: [Scenario; 5] = [
        Scenario::Sqlite,
        Scenario::Redis,
        Scenario::Replicated,
        Scenario::Quorum3,
        Scenario::Quorum5,
    ];

    /// Its name on the command line and in the scorecard.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Sqlite => "sqlite-processes",
            Scenario::Redis => "redis-master",
            Scenario::Replicated => "redis-master-replica-acks",
            Scenario::Quorum3 => "quorum-3",
            Scenario::Quorum5 => "quorum-5",
        }
    }

    /// The scenario named `name`.
    pub fn from_name(name: &str) -> Option<Scenario> {
        Scenario::ALL.into_iter().find(|s| s.name() == name)
    }

    fn nodes(self) -> usize {
        match self {
            Scenario::Quorum3 => 3,
            Scenario::Quorum5 => 5,
            Scenario::Sqlite => 0,
            _ => 1,
        }
    }
}

/// Settings of one run.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Which set-up.
    pub scenario: Scenario,
    /// Every random choice follows from it.
    pub seed: u64,
    /// How long the nemesis schedules faults.
    pub duration: Duration,
    /// Concurrent clients (threads, or `warden run` processes for SQLite).
    pub clients: usize,
    /// Lease keys.
    pub keys: u64,
    /// Lease TTL.
    pub ttl: Duration,
    /// Whether fenced resources check the fence (off: the checker must object).
    pub fence_check: bool,
    /// Also protect a PostgreSQL row with the fence pattern (and fault it).
    pub postgres: bool,
    /// Only these faults (all of the scenario's when `None`).
    pub only: Option<Vec<FaultKind>>,
    /// Where the history goes.
    pub out_dir: PathBuf,
    /// The `warden` binary (SQLite scenario).
    pub warden_bin: Option<PathBuf>,
}

/// The result of a run.
#[derive(Debug)]
pub struct RunResult {
    /// The checker's report.
    pub report: Report,
    /// The history file.
    pub history: PathBuf,
    /// The faults the nemesis scheduled.
    pub scheduled: usize,
    /// `redis-server --version`.
    pub redis_version: String,
}

const MS: Duration = Duration::from_millis(1);

/// The faults a scenario draws, with their durations.
pub fn plan(s: &Settings) -> Plan {
    let ttl = s.ttl;
    let nodes = s.scenario.nodes();
    let short = (50 * MS, ttl / 2);
    let long = (100 * MS, ttl * 2 + 500 * MS);
    let mut f = Vec::new();
    let clients = s.clients;
    match s.scenario {
        Scenario::Sqlite => {
            f.push(
                FaultSpec::new(FaultKind::ClientPause, clients, (ttl + 200 * MS, ttl * 3))
                    .weight(2),
            );
            f.push(FaultSpec::new(FaultKind::ClientKill, clients, short).weight(2));
            f.push(FaultSpec::new(FaultKind::ClientClockJump, clients, long).weight(2));
        }
        Scenario::Redis | Scenario::Quorum3 | Scenario::Quorum5 => {
            f.push(FaultSpec::new(FaultKind::Latency, nodes, long).weight(2));
            for k in [
                FaultKind::PartitionToServerDrop,
                FaultKind::PartitionToServerStall,
                FaultKind::PartitionToClientDrop,
                FaultKind::PartitionToClientStall,
            ] {
                f.push(FaultSpec::new(k, nodes, long));
            }
            f.push(FaultSpec::new(FaultKind::ServerPause, nodes, long).weight(2));
            f.push(FaultSpec::new(FaultKind::ServerRestartPersistent, nodes, short).weight(2));
            f.push(FaultSpec::new(
                FaultKind::ServerRestartVolatile,
                nodes,
                short,
            ));
            f.push(FaultSpec::new(FaultKind::ServerClockJump, nodes, long));
            f.push(
                FaultSpec::new(FaultKind::ClientPause, clients, (ttl + 200 * MS, ttl * 3))
                    .weight(2),
            );
        }
        Scenario::Replicated => {
            f.push(FaultSpec::new(FaultKind::Latency, 1, long).weight(2));
            for k in [
                FaultKind::PartitionToServerDrop,
                FaultKind::PartitionToServerStall,
                FaultKind::PartitionToClientDrop,
                FaultKind::PartitionToClientStall,
            ] {
                f.push(FaultSpec::new(k, 1, long));
            }
            f.push(FaultSpec::new(FaultKind::ServerPause, 1, long).weight(2));
            f.push(FaultSpec::new(FaultKind::ReplicationCut, 1, long).weight(2));
            f.push(FaultSpec::new(FaultKind::Failover, 1, long).weight(2));
            f.push(
                FaultSpec::new(FaultKind::ClientPause, clients, (ttl + 200 * MS, ttl * 3))
                    .weight(2),
            );
        }
    }
    if s.postgres {
        f.push(FaultSpec::new(FaultKind::ResourcePause, 1, long));
        f.push(FaultSpec::new(FaultKind::ResourceRestart, 1, short));
    }
    if let Some(only) = &s.only {
        f.retain(|spec| only.contains(&spec.kind));
    }
    Plan {
        run_for: s.duration,
        gap: (100 * MS, 600 * MS),
        faults: f,
    }
}

/// What the nemesis acts on.
struct Targets {
    servers: Vec<RedisServer>,
    proxies: Vec<Proxy>,
    pair: Option<ReplicatedRedis>,
    pg: Option<PostgresServer>,
    /// Live `warden run` process ids, per client slot.
    procs: Arc<Mutex<Vec<Option<u32>>>>,
    clock: Option<FakeClock>,
    shared: Option<Arc<Shared>>,
    history: History,
    rng: Rng,
    ttl: Duration,
}

fn wipe(dir: &Path) {
    for name in ["appendonlydir", "appendonly.aof", "dump.rdb"] {
        let p = dir.join(name);
        let _ = std::fs::remove_dir_all(&p);
        let _ = std::fs::remove_file(&p);
    }
}

impl Targets {
    fn server(&mut self, i: usize) -> Option<&mut RedisServer> {
        match &mut self.pair {
            Some(pair) => Some(&mut pair.master),
            None => self.servers.get_mut(i),
        }
    }

    fn proxy(&self, i: usize) -> Option<&Proxy> {
        match &self.pair {
            Some(pair) => Some(&pair.front),
            None => self.proxies.get(i),
        }
    }

    /// Injects `f`, waits its duration, heals it. Records both ends.
    fn inject(&mut self, f: &Fault, stop: &AtomicBool) {
        let h = self.history.clone();
        let note = f.kind.name();
        let start = || {
            h.record(
                &Event::new("nemesis", Op::Fault, Kind::Info)
                    .note(note)
                    .value(f.target as u64),
            )
        };
        let heal = || h.record(&Event::new("nemesis", Op::Heal, Kind::Info).note(note));
        let wait = |d: Duration| sleep_unless(stop, d);
        match f.kind {
            FaultKind::Latency => {
                let seed = self.rng.next_u64();
                if let Some(p) = self.proxy(f.target) {
                    p.seed(seed);
                    // Below the validity: latency the lease must tolerate.
                    p.latency(5 * MS, self.ttl / 10);
                    start();
                    wait(f.duration);
                    p.latency(Duration::ZERO, Duration::ZERO);
                    heal();
                }
            }
            FaultKind::PartitionToServerDrop
            | FaultKind::PartitionToServerStall
            | FaultKind::PartitionToClientDrop
            | FaultKind::PartitionToClientStall => {
                let (dir, how) = match f.kind {
                    FaultKind::PartitionToServerDrop => (Direction::ToServer, Partition::Drop),
                    FaultKind::PartitionToServerStall => (Direction::ToServer, Partition::Stall),
                    FaultKind::PartitionToClientDrop => (Direction::ToClient, Partition::Drop),
                    _ => (Direction::ToClient, Partition::Stall),
                };
                if let Some(p) = self.proxy(f.target) {
                    start();
                    p.partition(dir, how);
                    wait(f.duration);
                    p.heal();
                    heal();
                }
            }
            FaultKind::ServerPause => {
                if let Some(s) = self.server(f.target) {
                    start();
                    s.pause();
                    wait(f.duration);
                    s.resume();
                    heal();
                }
            }
            FaultKind::ServerRestartPersistent | FaultKind::ServerRestartVolatile => {
                let volatile = f.kind == FaultKind::ServerRestartVolatile;
                if let Some(s) = self.server(f.target) {
                    start();
                    s.kill();
                    if volatile {
                        wipe(s.dir());
                    }
                    wait(f.duration);
                    s.start_again();
                    heal();
                }
            }
            FaultKind::ServerClockJump => {
                let secs = u32::try_from(f.duration.as_millis() / 1000 + 1).unwrap_or(1);
                if let Some(s) = self.server(f.target) {
                    start();
                    let _ = s.jump_clock(secs);
                    heal();
                    wait(f.duration);
                }
            }
            FaultKind::Failover => {
                if let Some(pair) = &mut self.pair {
                    start();
                    pair.failover();
                    wait(f.duration);
                    // The old master becomes the replica of the new one.
                    pair.reset();
                    heal();
                }
            }
            FaultKind::ReplicationCut => {
                if let Some(pair) = &self.pair {
                    start();
                    pair.link.cut();
                    wait(f.duration);
                    pair.link.restore();
                    heal();
                }
            }
            FaultKind::ClientPause => {
                if let Some(sh) = &self.shared {
                    // Tasks freeze themselves at their next write (and record it).
                    if let Some(slot) = sh.freezes.get(f.target) {
                        slot.store(
                            u64::try_from(f.duration.as_millis()).unwrap_or(0),
                            Ordering::SeqCst,
                        );
                    }
                    wait(f.duration);
                } else if let Some(pid) = self.live_proc(f.target) {
                    start();
                    warden_test::process::pause_tree(pid);
                    wait(f.duration);
                    warden_test::process::resume_tree(pid);
                    heal();
                }
            }
            FaultKind::ClientKill => {
                if let Some(pid) = self.live_proc(f.target) {
                    start();
                    warden_test::process::kill_tree(pid);
                    heal();
                    wait(f.duration);
                }
            }
            FaultKind::ClientClockJump => {
                if let Some(clock) = &mut self.clock {
                    let secs = i64::try_from(self.rng.below(7200)).unwrap_or(0) - 3600;
                    start();
                    let _ = clock.jump(secs);
                    wait(f.duration);
                    let _ = clock.jump(-secs);
                    heal();
                }
            }
            FaultKind::ResourcePause => {
                if let Some(pg) = &self.pg {
                    start();
                    pg.pause();
                    wait(f.duration);
                    pg.resume();
                    heal();
                }
            }
            FaultKind::ResourceRestart => {
                if let Some(pg) = &mut self.pg {
                    start();
                    pg.restart();
                    heal();
                    wait(f.duration);
                }
            }
        }
    }

    fn live_proc(&self, slot: usize) -> Option<u32> {
        let procs = self.procs.lock().unwrap_or_else(|e| e.into_inner());
        procs.get(slot).copied().flatten()
    }
}

/// Sleeps `d`, waking early when `stop` is set.
fn sleep_unless(stop: &AtomicBool, d: Duration) {
    let end = Instant::now() + d;
    while !stop.load(Ordering::SeqCst) {
        let now = Instant::now();
        if now >= end {
            return;
        }
        std::thread::sleep((end - now).min(20 * MS));
    }
}

/// The version line of `redis-server`.
pub fn redis_version() -> String {
    let bin =
        std::env::var(warden_test::REDIS_SERVER_ENV).unwrap_or_else(|_| "redis-server".into());
    Command::new(bin)
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| {
            let s = String::from_utf8_lossy(&o.stdout).into_owned();
            s.split_whitespace()
                .find_map(|w| w.strip_prefix("v=").map(str::to_string))
        })
        .unwrap_or_else(|| "unknown".into())
}

fn rt() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())
}

/// Runs one scenario and checks its history. The history file is kept in
/// `settings.out_dir` (named after scenario and seed).
///
/// # Errors
/// When the set-up fails (a server does not start, the history cannot be written).
pub fn run(s: &Settings) -> Result<RunResult, String> {
    std::fs::create_dir_all(&s.out_dir).map_err(|e| e.to_string())?;
    let path = s
        .out_dir
        .join(format!("history-{}-{}.jsonl", s.scenario.name(), s.seed));
    let _ = std::fs::remove_file(&path);
    let history = History::append(&path).map_err(|e| e.to_string())?;
    let mut rng = Rng::new(s.seed);
    let faults = schedule(rng.next_u64(), &plan(s));
    let mut cfg = Event::new("checker", Op::Config, Kind::Info).note(s.scenario.name());
    cfg.value = Some(u64::try_from(s.ttl.as_millis()).unwrap_or(0));
    cfg.fence = Some(s.seed);
    history.record(&cfg);

    // The protected resources live on servers the nemesis leaves alone, except
    // PostgreSQL (resource faults).
    let resource = RedisServer::start();
    let pg = s.postgres.then(PostgresServer::start);
    let keys: Vec<String> = (0..s.keys).map(|i| format!("k{i}")).collect();
    if let Some(pg) = &pg {
        let names: Vec<String> = keys
            .iter()
            .flat_map(|k| resource_names(k, true))
            .filter(|n| n.ends_with("/pg"))
            .collect();
        rt()?.block_on(pg_setup(&pg.url(), &names))?;
    }

    let tmp = tempfile_dir()?;
    let mut targets = Targets {
        servers: Vec::new(),
        proxies: Vec::new(),
        pair: None,
        pg,
        procs: Arc::new(Mutex::new(vec![None; s.clients])),
        clock: None,
        shared: None,
        history: history.clone(),
        rng: rng.fork(),
        ttl: s.ttl,
    };
    let store = match s.scenario {
        Scenario::Sqlite => StoreSpec::Url(format!("sqlite:{}", tmp.join("warden.db").display())),
        Scenario::Replicated => {
            let pair = ReplicatedRedis::start(RedisServer::builder().persistent(true));
            let url = pair.url();
            targets.pair = Some(pair);
            StoreSpec::Replicated(url)
        }
        Scenario::Redis | Scenario::Quorum3 | Scenario::Quorum5 => {
            for _ in 0..s.scenario.nodes() {
                let server = RedisServer::builder().persistent(true).start();
                targets.proxies.push(Proxy::start(&server.addr()));
                targets.servers.push(server);
            }
            let urls: Vec<String> = targets.proxies.iter().map(Proxy::url).collect();
            if s.scenario == Scenario::Redis {
                StoreSpec::Url(urls[0].clone())
            } else {
                StoreSpec::Quorum(urls)
            }
        }
    };

    let stop = Arc::new(AtomicBool::new(false));
    let start_ns = now_ns();
    let mut handles = Vec::new();
    if s.scenario == Scenario::Sqlite {
        targets.clock = FakeClock::new(&tmp);
        let bin = s
            .warden_bin
            .clone()
            .ok_or("the SQLite scenario needs the warden binary (--warden-bin)")?;
        let me = std::env::current_exe().map_err(|e| e.to_string())?;
        for slot in 0..s.clients {
            let ctx = ProcCtx {
                slot,
                warden: bin.clone(),
                me: me.clone(),
                store: store.clone(),
                resource_url: resource.url(),
                pg_url: targets.pg.as_ref().map(PostgresServer::url),
                history_path: path.clone(),
                history: history.clone(),
                keys: s.keys,
                ttl: s.ttl,
                fence_check: s.fence_check,
                procs: Arc::clone(&targets.procs),
                clock: targets.clock.clone(),
                stop: Arc::clone(&stop),
            };
            let mut crng = rng.fork();
            handles.push(std::thread::spawn(move || proc_slot(&ctx, &mut crng)));
        }
    } else {
        let shared = Arc::new(Shared {
            store: store.clone(),
            resource_url: resource.url(),
            pg_url: targets.pg.as_ref().map(PostgresServer::url),
            keys: s.keys,
            ttl: s.ttl,
            hold_max: s.ttl / 4,
            fence_check: s.fence_check,
            history: history.clone(),
            stop: AtomicBool::new(false),
            freezes: (0..s.clients).map(|_| AtomicU64::new(0)).collect(),
            start_ns,
        });
        targets.shared = Some(Arc::clone(&shared));
        for id in 0..s.clients {
            let (sh, crng) = (Arc::clone(&shared), rng.fork());
            handles.push(std::thread::spawn(move || client_thread(id, &sh, crng)));
        }
    }

    // The nemesis, on this thread.
    let t0 = Instant::now();
    for f in &faults {
        let now = t0.elapsed();
        if f.at > now {
            sleep_unless(&stop, f.at - now);
        }
        targets.inject(f, &stop);
    }
    let now = t0.elapsed();
    if s.duration > now {
        sleep_unless(&stop, s.duration - now);
    }
    stop.store(true, Ordering::SeqCst);
    if let Some(sh) = &targets.shared {
        sh.stop.store(true, Ordering::SeqCst);
    }
    for h in handles {
        let _ = h.join();
    }

    // Every client stopped: after TTL + ε no lease key may still be held.
    let epsilon = Duration::from_millis(500);
    std::thread::sleep(s.ttl + epsilon);
    let rt = rt()?;
    rt.block_on(async {
        match store.connect().await {
            Ok(w) => {
                for k in &keys {
                    match w.status(k).await {
                        Ok(st) if st.held => history.record(
                            &Event::new("checker", Op::Orphan, Kind::Ok)
                                .key(k)
                                .note(format!("{:?}", st.ttl_left)),
                        ),
                        Ok(_) => {}
                        Err(e) => history.record(
                            &Event::new("checker", Op::Orphan, Kind::Info)
                                .key(k)
                                .note(e.to_string()),
                        ),
                    }
                }
            }
            Err(e) => {
                history.record(&Event::new("checker", Op::Orphan, Kind::Info).note(e.to_string()))
            }
        }
        // The final value of every resource.
        let mut res: Vec<(String, Resource)> = Vec::new();
        if let Ok(r) = Resource::redis(&resource.url(), s.fence_check).await {
            res.push(("redis".into(), r));
        }
        if let Ok(r) = Resource::redis(&resource.url(), false).await {
            res.push(("control".into(), r));
        }
        if let Some(pg) = &targets.pg {
            res.push(("pg".into(), Resource::postgres(&pg.url(), true)));
        }
        for k in &keys {
            for (kind, r) in &mut res {
                let name = format!("{k}/{kind}");
                if let Ok(v) = r.read(&name).await {
                    history.record(
                        &Event::new("checker", Op::Final, Kind::Ok)
                            .key(&name)
                            .value(v),
                    );
                }
            }
        }
    });
    drop(targets);
    let (events, bad) = history::read(&path).map_err(|e| e.to_string())?;
    let report = check(&events, bad);
    let _ = std::fs::remove_dir_all(&tmp);
    Ok(RunResult {
        report,
        history: path,
        scheduled: faults.len(),
        redis_version: redis_version(),
    })
}

fn tempfile_dir() -> Result<PathBuf, String> {
    let base =
        std::env::temp_dir().join(format!("warden-chaos-{}-{}", std::process::id(), now_ns()));
    std::fs::create_dir_all(&base).map_err(|e| e.to_string())?;
    Ok(base)
}

/// One slot of `warden run` processes, started one after the other.
struct ProcCtx {
    slot: usize,
    warden: PathBuf,
    me: PathBuf,
    store: StoreSpec,
    resource_url: String,
    pg_url: Option<String>,
    history_path: PathBuf,
    history: History,
    keys: u64,
    ttl: Duration,
    fence_check: bool,
    procs: Arc<Mutex<Vec<Option<u32>>>>,
    clock: Option<FakeClock>,
    stop: Arc<AtomicBool>,
}

fn proc_slot(c: &ProcCtx, rng: &mut Rng) {
    let StoreSpec::Url(url) = &c.store else {
        return;
    };
    let me = format!("s{}", c.slot);
    let mut n = 0u64;
    while !c.stop.load(Ordering::SeqCst) {
        n += 1;
        let key = format!("k{}", rng.below(c.keys));
        let ttl_ms = c.ttl.as_millis();
        let hold_ms = rng.below(u64::try_from(ttl_ms / 4).unwrap_or(1));
        let mut cmd = Command::new(&c.warden);
        cmd.args(["--backend", url, "run", "--key", &key])
            .args([
                "--ttl",
                &format!("{ttl_ms}ms"),
                "--wait",
                &format!("{ttl_ms}ms"),
            ])
            .args(["--grace", &format!("{}ms", ttl_ms / 4)])
            .arg("--")
            // The writer must not run on the jumped clock: the history's clock is its own.
            .args(["env", "-u", "LD_PRELOAD"])
            .arg(&c.me)
            .args(["rmw", "--history"])
            .arg(&c.history_path)
            .args(["--resource", &c.resource_url, "--client", &me])
            .args([
                "--lease",
                &format!("{me}-{n}"),
                "--hold-ms",
                &hold_ms.to_string(),
            ]);
        if let Some(pg) = &c.pg_url {
            cmd.args(["--pg", pg]);
        }
        if !c.fence_check {
            cmd.arg("--no-fence-check");
        }
        if let Some(clock) = &c.clock {
            clock.apply(&mut cmd);
        }
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        c.history
            .record(&Event::new(&me, Op::Acquire, Kind::Invoke).key(&key));
        let mut child = match cmd.spawn() {
            Ok(ch) => ch,
            Err(e) => {
                c.history.record(
                    &Event::new(&me, Op::Acquire, Kind::Info)
                        .key(&key)
                        .note(e.to_string()),
                );
                std::thread::sleep(Duration::from_millis(200));
                continue;
            }
        };
        set_slot(&c.procs, c.slot, Some(child.id()));
        let status = child.wait();
        set_slot(&c.procs, c.slot, None);
        match status.map(|s| s.code()) {
            Ok(Some(0)) => {}
            Ok(Some(75)) => c
                .history
                .record(&Event::new(&me, Op::Acquire, Kind::Fail).key(&key)),
            Ok(code) => c.history.record(
                &Event::new(&me, Op::Acquire, Kind::Info)
                    .key(&key)
                    .note(format!("exit {code:?}")),
            ),
            Err(e) => c.history.record(
                &Event::new(&me, Op::Acquire, Kind::Info)
                    .key(&key)
                    .note(e.to_string()),
            ),
        }
    }
}

fn set_slot(procs: &Mutex<Vec<Option<u32>>>, slot: usize, pid: Option<u32>) {
    let mut p = procs.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(s) = p.get_mut(slot) {
        *s = pid;
    }
}

/// The writer run by `warden run` in the SQLite scenario: one read-modify-write
/// of every resource with `WARDEN_FENCE`, recorded in the history.
#[derive(Debug, Clone)]
pub struct RmwArgs {
    /// The history file (appended).
    pub history: PathBuf,
    /// The resource Redis.
    pub resource: String,
    /// PostgreSQL, if used.
    pub pg: Option<String>,
    /// The spawning slot's client name.
    pub client: String,
    /// The acquisition's id.
    pub lease: String,
    /// Pause between the reads and the writes.
    pub hold: Duration,
    /// Whether fenced resources check the fence.
    pub fence_check: bool,
}

/// Runs the writer (see [`RmwArgs`]).
///
/// # Errors
/// When the history cannot be opened or `WARDEN_FENCE` / `WARDEN_KEY` are missing.
pub fn rmw(a: &RmwArgs) -> Result<(), String> {
    let h = History::append(&a.history).map_err(|e| e.to_string())?;
    let fence: u64 = std::env::var("WARDEN_FENCE")
        .ok()
        .and_then(|f| f.parse().ok())
        .ok_or("WARDEN_FENCE missing or not a number")?;
    let key = std::env::var("WARDEN_KEY").map_err(|_| "WARDEN_KEY missing")?;
    let me = &a.client;
    let lease = &a.lease;
    h.record(
        &Event::new(me, Op::Acquire, Kind::Ok)
            .key(&key)
            .held(fence, lease),
    );
    let rt = rt()?;
    rt.block_on(async {
        let mut res: Vec<(String, Resource)> = Vec::new();
        match Resource::redis(&a.resource, a.fence_check).await {
            Ok(r) => res.push(("redis".into(), r)),
            Err(e) => h.record(&Event::new(me, Op::Read, Kind::Info).note(e)),
        }
        if let Ok(r) = Resource::redis(&a.resource, false).await {
            res.push(("control".into(), r));
        }
        if let Some(pg) = &a.pg {
            res.push(("pg".into(), Resource::postgres(pg, a.fence_check)));
        }
        let mut reads = HashMap::new();
        for (kind, r) in &mut res {
            let name = format!("{key}/{kind}");
            h.record(
                &Event::new(me, Op::Read, Kind::Invoke)
                    .key(&name)
                    .held(fence, lease),
            );
            match r.read(&name).await {
                Ok(v) => {
                    h.record(
                        &Event::new(me, Op::Read, Kind::Ok)
                            .key(&name)
                            .held(fence, lease)
                            .value(v),
                    );
                    reads.insert(kind.clone(), v);
                }
                Err(e) => h.record(&Event::new(me, Op::Read, Kind::Info).key(&name).note(e)),
            }
        }
        tokio::time::sleep(a.hold).await;
        for (kind, r) in &mut res {
            let Some(v) = reads.get(kind.as_str()).copied() else {
                continue;
            };
            let name = format!("{key}/{kind}");
            let mut e = Event::new(me, Op::Write, Kind::Invoke)
                .key(&name)
                .held(fence, lease)
                .value(v + 1);
            e.read = Some(v);
            h.record(&e);
            let done = match r.write(&name, fence, v + 1).await {
                Ok(crate::resource::Outcome::Applied) => Event::new(me, Op::Write, Kind::Ok),
                Ok(crate::resource::Outcome::Refused) => Event::new(me, Op::Write, Kind::Fail),
                Err(err) => Event::new(me, Op::Write, Kind::Info).note(err),
            };
            h.record(&done.key(&name).held(fence, lease));
        }
    });
    let mut e = Event::new(me, Op::Release, Kind::Invoke)
        .key(&key)
        .held(fence, lease);
    e.until = Some(e.t);
    h.record(&e);
    Ok(())
}
