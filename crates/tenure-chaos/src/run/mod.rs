//! A scenario: servers, clients, a nemesis executing a seeded schedule, and
//! the final checks (orphan keys, final values) written to the history.

mod finals;
mod nemesis;
mod plan;
mod procs;
mod stores;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use tenure_test::nemesis::{FaultKind, Rng, schedule};
use tenure_test::{
    EtcdCluster, FakeClock, PostgresServer, Proxy, RedisCluster, RedisSentinels, RedisServer,
    ReplicatedRedis,
};

use self::nemesis::Targets;
pub use self::plan::plan;
use self::procs::{ProcCtx, proc_slot};
use crate::check::{Report, check};
use crate::history::{self, Event, History, Kind, Op, now_ns};
use crate::resource::pg_setup;
use crate::store::StoreSpec;
use crate::workload::{Role, Shared, client_thread, resource_names, rw_keys, set_keys};

/// The set-ups of the scorecard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    /// `tenure run` processes on one SQLite file.
    Sqlite,
    /// One Redis master (`appendfsync always`).
    Redis,
    /// A master and a replica; writes wait for the replica's acknowledgement.
    Replicated,
    /// A quorum of 3 independent masters.
    Quorum3,
    /// A quorum of 5 independent masters.
    Quorum5,
    /// An etcd cluster of 3 members, each behind a client proxy and on a
    /// disk of its own.
    Etcd3,
    /// A Redis Cluster of 3 masters with a replica each, every node behind
    /// proxies (clients, replicas and the cluster bus).
    Cluster,
    /// A Redis master and replica watched by 3 Sentinels.
    Sentinel,
    /// `tenure run` processes waiting in one key's line on one Redis master
    /// (TTL 5 s), their head waiter killed while it waits.
    Line,
}

impl Scenario {
    /// Every scenario, in scorecard order.
    pub const ALL: [Scenario; 9] = [
        Scenario::Sqlite,
        Scenario::Redis,
        Scenario::Replicated,
        Scenario::Quorum3,
        Scenario::Quorum5,
        Scenario::Etcd3,
        Scenario::Cluster,
        Scenario::Sentinel,
        Scenario::Line,
    ];

    /// Its name on the command line and in the scorecard.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Sqlite => "sqlite-processes",
            Scenario::Redis => "redis-master",
            Scenario::Replicated => "redis-master-replica-acks",
            Scenario::Quorum3 => "quorum-3",
            Scenario::Quorum5 => "quorum-5",
            Scenario::Etcd3 => "etcd-3",
            Scenario::Cluster => "redis-cluster",
            Scenario::Sentinel => "redis-sentinel",
            Scenario::Line => "redis-line",
        }
    }

    /// The scenario named `name`.
    pub fn from_name(name: &str) -> Option<Scenario> {
        Scenario::ALL.into_iter().find(|s| s.name() == name)
    }

    /// Whether its store has read-write leases (a quorum refuses them).
    pub fn read_write(self) -> bool {
        !matches!(self, Scenario::Quorum3 | Scenario::Quorum5)
    }

    fn nodes(self) -> usize {
        match self {
            Scenario::Quorum3 | Scenario::Etcd3 | Scenario::Cluster => 3,
            Scenario::Quorum5 => 5,
            Scenario::Sqlite => 0,
            _ => 1,
        }
    }

    /// Whether its clients are `tenure run` processes (else threads).
    pub fn processes(self) -> bool {
        matches!(self, Scenario::Sqlite | Scenario::Line)
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
    /// Concurrent clients (threads, or `tenure run` processes for SQLite).
    pub clients: usize,
    /// Clients taking lease sets over random overlapping keys (threads,
    /// beside the others; 0 for none).
    pub set_clients: usize,
    /// Clients taking read-write leases as readers or writers (threads; 0
    /// where the store has none, a quorum).
    pub rw_clients: usize,
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
    /// The `tenure` binary (SQLite scenario).
    pub tenure_bin: Option<PathBuf>,
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

/// The Redis Cluster scenario's `cluster-node-timeout`: a master cut off for
/// longer is replaced by its replica.
pub(crate) const CLUSTER_NODE_TIMEOUT: Duration = Duration::from_millis(1000);

/// The version line of `redis-server`.
pub fn redis_version() -> String {
    let bin =
        std::env::var(tenure_test::REDIS_SERVER_ENV).unwrap_or_else(|_| "redis-server".into());
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

/// A single-threaded runtime for the blocking parts.
pub(crate) fn rt() -> Result<tokio::runtime::Runtime, String> {
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
    let (path, history) = open_history(s)?;
    let mut rng = Rng::new(s.seed);
    let faults = schedule(rng.next_u64(), &plan(s));
    record_config(&history, s);

    // The protected resources live on servers the nemesis leaves alone, except
    // PostgreSQL (resource faults).
    let resource = RedisServer::start();
    let pg = s.postgres.then(PostgresServer::start);
    let keys: Vec<String> = (0..s.keys).map(|i| format!("k{i}")).collect();
    if let Some(pg) = &pg {
        setup_pg(pg, &keys)?;
    }

    let tmp = tempfile_dir()?;
    let mut targets = Targets::new(s, pg, history.clone(), rng.fork());
    let store = start_store(s, &tmp, &mut targets);
    let stop = Arc::new(AtomicBool::new(false));
    let launch = Launch {
        s,
        store: &store,
        resource_url: resource.url(),
        history: &history,
        path: &path,
        stop: &stop,
    };
    let handles = launch.clients(&mut targets, &tmp, &mut rng)?;
    targets.nemesis(&faults, s.duration, &stop);
    stop.store(true, Ordering::SeqCst);
    if let Some(sh) = &targets.shared {
        sh.stop.store(true, Ordering::SeqCst);
    }
    for h in handles {
        let _ = h.join();
    }
    let keys = finals::Keys {
        leases: keys,
        sets: if s.set_clients > 0 {
            set_keys()
        } else {
            Vec::new()
        },
        rw: if s.rw_clients > 0 {
            rw_keys()
        } else {
            Vec::new()
        },
    };
    finals::record(
        s,
        &store,
        &keys,
        &launch.resource_url,
        targets.pg.as_ref(),
        &history,
    )?;
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

/// The history's first event: the scenario, the TTL (ms) and the seed.
fn record_config(history: &History, s: &Settings) {
    let mut cfg = Event::new("checker", Op::Config, Kind::Info).note(s.scenario.name());
    cfg.value = Some(u64::try_from(s.ttl.as_millis()).unwrap_or(0));
    cfg.fence = Some(s.seed);
    history.record(&cfg);
}

/// Creates the fence-pattern rows of `keys` in PostgreSQL.
fn setup_pg(pg: &PostgresServer, keys: &[String]) -> Result<(), String> {
    let names: Vec<String> = keys
        .iter()
        .flat_map(|k| resource_names(k, true))
        .filter(|n| n.ends_with("/pg"))
        .collect();
    rt()?.block_on(pg_setup(&pg.url(), &names))
}

/// Creates the history file of `s` afresh in its output directory.
fn open_history(s: &Settings) -> Result<(PathBuf, History), String> {
    std::fs::create_dir_all(&s.out_dir).map_err(|e| e.to_string())?;
    let path = s
        .out_dir
        .join(format!("history-{}-{}.jsonl", s.scenario.name(), s.seed));
    let _ = std::fs::remove_file(&path);
    let history = History::append(&path).map_err(|e| e.to_string())?;
    Ok((path, history))
}

/// Starts the lease store of `s` (its servers go to `targets`).
fn start_store(s: &Settings, tmp: &Path, targets: &mut Targets) -> StoreSpec {
    match s.scenario {
        Scenario::Sqlite => StoreSpec::Url(format!("sqlite:{}", tmp.join("tenure.db").display())),
        Scenario::Replicated => {
            let pair = ReplicatedRedis::start(RedisServer::builder().persistent(true));
            let url = pair.url();
            targets.pair = Some(pair);
            StoreSpec::Replicated(url)
        }
        Scenario::Etcd3 => {
            let etcd = EtcdCluster::start_on_disks(3);
            if let Some(why) = etcd.no_disks() {
                targets.history.record(
                    &Event::new("nemesis", Op::Config, Kind::Info)
                        .note(format!("disk-stall pauses the member instead: {why}")),
                );
            }
            targets.proxies = etcd.endpoints().iter().map(|a| Proxy::start(a)).collect();
            targets.etcd = Some(etcd);
            let addrs: Vec<String> = targets.proxies.iter().map(Proxy::addr).collect();
            StoreSpec::Url(format!("etcd://{}", addrs.join(",")))
        }
        Scenario::Cluster => {
            let cluster = RedisCluster::start_proxied(
                3,
                &RedisServer::builder().persistent(true),
                CLUSTER_NODE_TIMEOUT,
            );
            let url = cluster.url();
            targets.cluster = Some(cluster);
            StoreSpec::Url(url)
        }
        Scenario::Sentinel => {
            let group = RedisSentinels::start_with(RedisServer::builder().persistent(true));
            let url = group.url();
            targets.sentinels = Some(group);
            StoreSpec::Url(url)
        }
        Scenario::Line => {
            let server = RedisServer::builder().persistent(true).start();
            let url = server.url();
            targets.servers.push(server);
            StoreSpec::Url(url)
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
    }
}

/// What the clients of a run are started with.
struct Launch<'a> {
    s: &'a Settings,
    store: &'a StoreSpec,
    resource_url: String,
    history: &'a History,
    path: &'a Path,
    stop: &'a Arc<AtomicBool>,
}

impl Launch<'_> {
    /// Starts the clients: `tenure run` process slots for SQLite and the
    /// line, threads otherwise; the lease-set and read-write clients are
    /// threads beside them.
    fn clients(
        &self,
        targets: &mut Targets,
        tmp: &Path,
        rng: &mut Rng,
    ) -> Result<Vec<JoinHandle<()>>, String> {
        let start_ns = now_ns();
        let s = self.s;
        let mut roles = Vec::new();
        if s.scenario.processes() {
            if s.scenario == Scenario::Sqlite {
                targets.clock = FakeClock::new(tmp);
            }
        } else {
            roles.extend(std::iter::repeat_n(Role::Lease, s.clients));
        }
        roles.extend(std::iter::repeat_n(Role::Set, s.set_clients));
        roles.extend(std::iter::repeat_n(Role::ReadWrite, s.rw_clients));
        let mut handles = self.threads(targets, &roles, start_ns, rng);
        if s.scenario.processes() {
            handles.extend(self.processes(targets, rng)?);
        }
        Ok(handles)
    }

    fn processes(&self, targets: &Targets, rng: &mut Rng) -> Result<Vec<JoinHandle<()>>, String> {
        let s = self.s;
        let bin = s
            .tenure_bin
            .clone()
            .ok_or("a scenario of `tenure run` processes needs the tenure binary (--tenure-bin)")?;
        let me = writer_bin()?;
        let mut handles = Vec::new();
        for slot in 0..s.clients {
            let ctx = ProcCtx {
                slot,
                tenure: bin.clone(),
                me: me.clone(),
                store: self.store.clone(),
                resource_url: self.resource_url.clone(),
                pg_url: targets.pg.as_ref().map(PostgresServer::url),
                history_path: self.path.to_path_buf(),
                history: self.history.clone(),
                keys: s.keys,
                ttl: s.ttl,
                fence_check: s.fence_check,
                procs: Arc::clone(&targets.procs),
                clock: targets.clock.clone(),
                stop: Arc::clone(self.stop),
            };
            let mut crng = rng.fork();
            handles.push(std::thread::spawn(move || proc_slot(&ctx, &mut crng)));
        }
        Ok(handles)
    }

    /// One thread per client of `roles` (their ids index the freezes).
    fn threads(
        &self,
        targets: &mut Targets,
        roles: &[Role],
        start_ns: u64,
        rng: &mut Rng,
    ) -> Vec<JoinHandle<()>> {
        let s = self.s;
        let shared = Arc::new(Shared {
            store: self.store.clone(),
            resource_url: self.resource_url.clone(),
            pg_url: targets.pg.as_ref().map(PostgresServer::url),
            keys: s.keys,
            ttl: s.ttl,
            hold_max: s.ttl / 4,
            fence_check: s.fence_check,
            history: self.history.clone(),
            stop: AtomicBool::new(false),
            freezes: roles.iter().map(|_| AtomicU64::new(0)).collect(),
            start_ns,
        });
        targets.shared = Some(Arc::clone(&shared));
        roles
            .iter()
            .enumerate()
            .map(|(id, &role)| {
                let (sh, crng) = (Arc::clone(&shared), rng.fork());
                std::thread::spawn(move || client_thread(id, role, &sh, crng))
            })
            .collect()
    }
}

/// The binary whose `rmw` subcommand the `tenure run` processes run: this
/// one, or — from a test of this crate — the `tenure-chaos` cargo built for it.
fn writer_bin() -> Result<PathBuf, String> {
    let me = std::env::current_exe().map_err(|e| e.to_string())?;
    if me.file_stem().is_some_and(|s| s == "tenure-chaos") {
        return Ok(me);
    }
    me.parent()
        .and_then(Path::parent)
        .map(|dir| dir.join("tenure-chaos"))
        .filter(|bin| bin.is_file())
        .ok_or_else(|| format!("no tenure-chaos binary next to {}", me.display()))
}

fn tempfile_dir() -> Result<PathBuf, String> {
    let base =
        std::env::temp_dir().join(format!("tenure-chaos-{}-{}", std::process::id(), now_ns()));
    std::fs::create_dir_all(&base).map_err(|e| e.to_string())?;
    Ok(base)
}
