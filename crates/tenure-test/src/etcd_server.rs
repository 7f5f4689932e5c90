//! Real `etcd` members on free loopback ports: a single member or a cluster.

use std::fs::File;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::disk::LoopDisk;
use crate::{TlsCerts, free_port};

/// Environment variable naming the `etcd` binary to run.
pub const ETCD_ENV: &str = "TENURE_ETCD";

/// How long [`EtcdCluster::start`] waits for every member to report healthy.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(20);

/// Raft timing of the test members. Shorter than etcd's defaults (100 ms / 1 s)
/// so a leader election after a kill takes a fraction of a second, yet loose
/// enough that a busy two-core machine does not trigger spurious elections.
const HEARTBEAT_MS: u32 = 20;
const ELECTION_MS: u32 = 200;

/// One `etcd` process of an [`EtcdCluster`].
#[derive(Debug)]
pub struct EtcdMember {
    name: String,
    client_port: u16,
    peer_port: u16,
    data_dir: PathBuf,
    log_path: PathBuf,
    child: Option<Child>,
    tls: Option<MemberTls>,
}

/// A member's TLS client port, next to its plain one (which the harness
/// keeps using for health checks).
#[derive(Debug, Clone)]
struct MemberTls {
    port: u16,
    cert: PathBuf,
    key: PathBuf,
    /// The CA that client certificates must be signed by, when the member
    /// checks them (`--client-cert-auth`).
    client_ca: Option<PathBuf>,
}

impl EtcdMember {
    /// The member's name in the cluster (`m0`, `m1`, …).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `127.0.0.1:PORT` of the client API.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.client_port)
    }

    /// The client port.
    pub fn port(&self) -> u16 {
        self.client_port
    }

    /// `127.0.0.1:PORT` of the TLS client API, for a member started with
    /// [`EtcdCluster::start_tls`].
    pub fn tls_addr(&self) -> Option<String> {
        self.tls.as_ref().map(|t| format!("127.0.0.1:{}", t.port))
    }

    /// The process id, while the member runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The member's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// Whether the member answers `/health` with `true` (it sees a leader).
    pub fn is_healthy(&self) -> bool {
        http(&self.addr(), "GET", "/health", "").is_ok_and(|body| body.contains("\"true\""))
    }

    /// The member's raft id and the raft id of the leader it sees, read from
    /// the JSON gateway's `/v3/maintenance/status`.
    fn ids(&self) -> Option<(String, String)> {
        let body = http(&self.addr(), "POST", "/v3/maintenance/status", "{}").ok()?;
        let member = json_field(&body, "member_id")?;
        let leader = json_field(&body, "leader")?;
        Some((member, leader))
    }

    fn signal(&self, signal: Signal) {
        if let Some(pid) = self.pid() {
            let pid = i32::try_from(pid).expect("pid fits i32");
            kill(Pid::from_raw(pid), signal).expect("signal etcd");
        }
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            // A stopped process must be resumed to die cleanly on some kernels.
            let _ = kill(
                Pid::from_raw(i32::try_from(child.id()).unwrap_or(i32::MAX)),
                Signal::SIGCONT,
            );
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn spawn(&mut self, initial_cluster: &str, token: &str) -> Result<(), String> {
        let binary = std::env::var(ETCD_ENV).unwrap_or_else(|_| "etcd".to_string());
        let client = format!("http://127.0.0.1:{}", self.client_port);
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let log = File::options()
            .create(true)
            .append(true)
            .open(&self.log_path)
            .map_err(|e| format!("open {}: {e}", self.log_path.display()))?;
        let log2 = log.try_clone().map_err(|e| e.to_string())?;
        let mut command = Command::new(&binary);
        let mut listen = client.clone();
        if let Some(tls) = &self.tls {
            listen = format!("{client},https://127.0.0.1:{}", tls.port);
            command
                .arg("--cert-file")
                .arg(&tls.cert)
                .arg("--key-file")
                .arg(&tls.key);
            if let Some(ca) = &tls.client_ca {
                command
                    .arg("--client-cert-auth")
                    .arg("--trusted-ca-file")
                    .arg(ca);
            }
        }
        let child = command
            .args(["--name", &self.name])
            .arg("--data-dir")
            .arg(&self.data_dir)
            .args(["--listen-client-urls", &listen])
            .args(["--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer])
            .args(["--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", initial_cluster])
            .args(["--initial-cluster-state", "new"])
            .args(["--initial-cluster-token", token])
            .args(["--heartbeat-interval", &HEARTBEAT_MS.to_string()])
            .args(["--election-timeout", &ELECTION_MS.to_string()])
            // etcd refuses to start on architectures it does not officially
            // support unless told; tests run wherever the package installs.
            .env("ETCD_UNSUPPORTED_ARCH", std::env::consts::ARCH)
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(log2))
            .spawn()
            .map_err(|e| format!("spawn {binary}: {e} (install etcd-server or set {ETCD_ENV})"))?;
        self.child = Some(child);
        Ok(())
    }

    fn exited(&mut self) -> Option<String> {
        match self.child.as_mut().map(Child::try_wait) {
            Some(Ok(Some(status))) => {
                self.child = None;
                Some(format!(
                    "etcd member {} exited with {status}: {}",
                    self.name,
                    self.log()
                ))
            }
            _ => None,
        }
    }
}

/// Real `etcd` processes forming one cluster on 127.0.0.1, each with its own
/// client and peer port and data directory; all killed (SIGKILL) on drop.
///
/// ```no_run
/// let cluster = tenure_test::EtcdCluster::start(3);
/// println!("connect to {}", cluster.url()); // etcd://127.0.0.1:P1,127.0.0.1:P2,…
/// let mut cluster = cluster;
/// let leader = cluster.leader().expect("a leader");
/// cluster.kill(leader); // kill -9 the leader member
/// ```
#[derive(Debug)]
pub struct EtcdCluster {
    members: Vec<EtcdMember>,
    initial_cluster: String,
    token: String,
    /// Per member, its own filesystem (see [`start_on_disks`](Self::start_on_disks)).
    disks: Vec<LoopDisk>,
    /// Why the members have no disks of their own, when that was asked for.
    no_disks: Option<String>,
    // Last: removed after the processes are gone.
    dir: tempfile::TempDir,
}

/// How a member's disk stall was made (see [`EtcdCluster::stall_disk`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiskStall {
    /// The member's own filesystem was frozen (`fsfreeze`): writes and fsyncs
    /// block, the process and its sockets run on.
    Frozen,
    /// The member has no filesystem of its own: it was frozen (SIGSTOP) instead.
    Paused,
}

impl EtcdCluster {
    /// One member.
    pub fn single() -> Self {
        Self::start(1)
    }

    /// Starts `size` members and waits until every one reports healthy.
    ///
    /// # Panics
    /// When the cluster could not be started: a test cannot go on without it.
    pub fn start(size: usize) -> Self {
        Self::start_with(size, None, false, false)
    }

    /// Like [`start`](Self::start), each member's data directory on an ext4
    /// filesystem of its own (a loop-mounted image), so that
    /// [`stall_disk`](Self::stall_disk) can freeze one member's disk. Where
    /// that cannot be done (not root, no loop devices), the members share the
    /// temporary directory and [`no_disks`](Self::no_disks) says why.
    ///
    /// # Panics
    /// When the cluster could not be started.
    pub fn start_on_disks(size: usize) -> Self {
        Self::start_with(size, None, false, true)
    }

    /// Why [`start_on_disks`](Self::start_on_disks) gave the members no disks
    /// of their own (`None` when it did, or was not asked to).
    pub fn no_disks(&self) -> Option<&str> {
        self.no_disks.as_deref()
    }

    /// Stalls member `i`'s disk: its filesystem is frozen, so every write and
    /// fsync blocks until [`unstall_disk`](Self::unstall_disk); without a
    /// filesystem of its own the member is paused instead. Says which.
    pub fn stall_disk(&mut self, i: usize) -> DiskStall {
        match self.disks.get_mut(i).map(LoopDisk::freeze) {
            Some(Ok(())) => DiskStall::Frozen,
            _ => {
                self.pause(i);
                DiskStall::Paused
            }
        }
    }

    /// Ends [`stall_disk`](Self::stall_disk) of member `i`.
    pub fn unstall_disk(&mut self, i: usize) {
        match self.disks.get_mut(i) {
            Some(disk) => disk.thaw(),
            None => self.resume(i),
        }
    }

    /// Starts `size` members that also serve TLS clients with `certs`' server
    /// certificate on a second port ([`tls_url`](Self::tls_url)); with
    /// `client_auth`, they accept only clients with a certificate signed by
    /// `certs`' CA.
    ///
    /// # Panics
    /// When the cluster could not be started.
    pub fn start_tls(size: usize, certs: &TlsCerts, client_auth: bool) -> Self {
        Self::start_with(size, Some(certs), client_auth, false)
    }

    fn start_with(size: usize, certs: Option<&TlsCerts>, client_auth: bool, disks: bool) -> Self {
        assert!(size > 0, "a cluster has at least one member");
        let mut last_error = String::new();
        // Ports found free may be taken by someone else before etcd binds them.
        for _ in 0..5 {
            match Self::try_start(size, certs, client_auth, disks) {
                Ok(cluster) => return cluster,
                Err(e) => last_error = e,
            }
        }
        panic!("could not start an etcd cluster of {size}: {last_error}");
    }

    fn try_start(
        size: usize,
        certs: Option<&TlsCerts>,
        client_auth: bool,
        disks: bool,
    ) -> Result<Self, String> {
        // etcd preallocates 64 MB of write-ahead log per member and fsyncs every
        // commit: in memory (tmpfs, where the system has one) that costs neither
        // disk space nor seconds, and a killed member still finds its data.
        let shm = Path::new("/dev/shm");
        let builder = {
            let mut b = tempfile::Builder::new();
            b.prefix("tenure-etcd-");
            b
        };
        let dir = if shm.is_dir() {
            builder.tempdir_in(shm)
        } else {
            builder.tempdir()
        }
        .map_err(|e| format!("create a temporary directory: {e}"))?;
        let (own, no_disks) = if disks {
            match member_disks(dir.path(), size) {
                Ok(d) => (d, None),
                Err(e) => (Vec::new(), Some(e)),
            }
        } else {
            (Vec::new(), None)
        };
        let mut ports = std::collections::HashSet::new();
        let mut members = Vec::with_capacity(size);
        for i in 0..size {
            let mut port = || loop {
                let p = free_port();
                if ports.insert(p) {
                    return p;
                }
            };
            let (client_port, peer_port) = (port(), port());
            let tls = certs.map(|certs| MemberTls {
                port: port(),
                cert: certs.path("server.pem"),
                key: certs.path("server.key"),
                client_ca: client_auth.then(|| certs.path("ca.pem")),
            });
            members.push(EtcdMember {
                tls,
                name: format!("m{i}"),
                client_port,
                peer_port,
                data_dir: own
                    .get(i)
                    .map_or_else(|| dir.path().to_path_buf(), |d| d.path().to_path_buf())
                    .join(format!("m{i}.etcd")),
                log_path: dir.path().join(format!("m{i}.log")),
                child: None,
            });
        }
        let initial_cluster = members
            .iter()
            .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer_port))
            .collect::<Vec<_>>()
            .join(",");
        let token = format!(
            "tenure-test-{}-{}",
            std::process::id(),
            members[0].client_port
        );
        let mut cluster = EtcdCluster {
            members,
            initial_cluster,
            token,
            disks: own,
            no_disks,
            dir,
        };
        for i in 0..size {
            let (ic, token) = (cluster.initial_cluster.clone(), cluster.token.clone());
            cluster.members[i].spawn(&ic, &token)?;
        }
        cluster.wait_healthy_members(None)?;
        Ok(cluster)
    }

    /// Waits until every running member (or only `only`) answers healthy.
    fn wait_healthy_members(&mut self, only: Option<usize>) -> Result<(), String> {
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        loop {
            let mut all = true;
            for (i, m) in self.members.iter_mut().enumerate() {
                if only.is_some_and(|o| o != i) || m.child.is_none() {
                    continue;
                }
                if let Some(e) = m.exited() {
                    return Err(e);
                }
                all &= m.is_healthy();
            }
            if all {
                return Ok(());
            }
            if Instant::now() > deadline {
                let logs: String = self.members.iter().map(EtcdMember::log).collect();
                return Err(format!("etcd did not become healthy: {logs}"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The number of members.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether the cluster has no members (never true).
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Member `i`.
    pub fn member(&self, i: usize) -> &EtcdMember {
        &self.members[i]
    }

    /// `etcd://127.0.0.1:P1,127.0.0.1:P2,…` with every member's client address.
    pub fn url(&self) -> String {
        format!("etcd://{}", self.endpoints().join(","))
    }

    /// `etcds://127.0.0.1:T1,…` with every member's TLS client address, for a
    /// cluster started with [`start_tls`](Self::start_tls).
    ///
    /// # Panics
    /// When the cluster serves no TLS.
    pub fn tls_url(&self) -> String {
        let addrs: Vec<String> = self
            .members
            .iter()
            .map(|m| m.tls_addr().expect("a cluster started with start_tls"))
            .collect();
        format!("etcds://{}", addrs.join(","))
    }

    /// The client addresses, `127.0.0.1:PORT` each.
    pub fn endpoints(&self) -> Vec<String> {
        self.members.iter().map(EtcdMember::addr).collect()
    }

    /// The index of the member that is leader, as the running members see it;
    /// `None` while there is none (an election is going on).
    pub fn leader(&self) -> Option<usize> {
        let ids: Vec<Option<(String, String)>> = self
            .members
            .iter()
            .map(|m| m.child.as_ref().and_then(|_| m.ids()))
            .collect();
        let leader = ids.iter().flatten().map(|(_, l)| l.clone()).next()?;
        ids.iter()
            .position(|id| id.as_ref().is_some_and(|(me, _)| *me == leader))
    }

    /// Waits (up to 10 s) for a leader among the running members.
    ///
    /// # Panics
    /// When no leader appears in time.
    pub fn wait_for_leader(&self) -> usize {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(l) = self.leader() {
                return l;
            }
            assert!(Instant::now() < deadline, "no etcd leader within 10 s");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits (up to 20 s) until every running member reports healthy (sees a
    /// leader), e.g. after [`resume`](Self::resume).
    ///
    /// # Panics
    /// When the cluster does not recover in time.
    pub fn wait_healthy(&mut self) {
        if let Err(e) = self.wait_healthy_members(None) {
            panic!("{e}");
        }
    }

    /// Kills member `i` with SIGKILL and waits for it.
    pub fn kill(&mut self, i: usize) {
        self.members[i].kill();
    }

    /// Starts member `i` again after [`kill`](Self::kill), same ports and data
    /// directory, and waits until it is healthy.
    ///
    /// # Panics
    /// When it does not come back.
    pub fn restart(&mut self, i: usize) {
        self.members[i].kill();
        let (ic, token) = (self.initial_cluster.clone(), self.token.clone());
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        // The ports can linger briefly after the kill; retry until they bind.
        loop {
            let started = self.members[i]
                .spawn(&ic, &token)
                .and_then(|()| self.wait_healthy_members(Some(i)));
            match started {
                Ok(()) => return,
                Err(e) if Instant::now() > deadline => panic!("restart etcd member {i}: {e}"),
                Err(_) => {
                    self.members[i].kill();
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        }
    }

    /// SIGSTOP member `i`: it freezes, its sockets stay open. Returns once
    /// every thread of it has stopped (read from `/proc` where there is one):
    /// a signal takes effect asynchronously, and a member still running for a
    /// few milliseconds could commit what a test expects it to refuse.
    pub fn pause(&self, i: usize) {
        let member = &self.members[i];
        member.signal(Signal::SIGSTOP);
        let Some(pid) = member.pid() else { return };
        let deadline = Instant::now() + Duration::from_secs(2);
        while !all_threads_stopped(pid) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// SIGCONT member `i` after [`pause`](Self::pause).
    pub fn resume(&self, i: usize) {
        self.members[i].signal(Signal::SIGCONT);
    }

    /// The cluster's working directory (data directories, logs).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for m in &self.members {
                eprintln!(
                    "---- etcd member {} log (client port {}) ----\n{}---- end of log ----",
                    m.name,
                    m.client_port,
                    tail(&m.log(), 40)
                );
            }
        }
        for m in &mut self.members {
            m.kill();
        }
    }
}

/// One ext4 filesystem per member under `dir` (images of 256 MiB, sparse:
/// etcd preallocates 64 MB of write-ahead log).
fn member_disks(dir: &Path, size: usize) -> Result<Vec<LoopDisk>, String> {
    (0..size)
        .map(|i| {
            LoopDisk::create(
                &dir.join(format!("m{i}.img")),
                &dir.join(format!("m{i}.disk")),
                256,
            )
        })
        .collect()
}

/// Whether every thread of `pid` is stopped (state `T`); `true` where `/proc`
/// cannot tell.
fn all_threads_stopped(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return true;
    };
    tasks.flatten().all(|task| {
        std::fs::read_to_string(task.path().join("stat")).map_or(true, |stat| {
            // The state follows the command name, which is in parentheses.
            stat.rsplit_once(')')
                .and_then(|(_, rest)| rest.trim_start().chars().next())
                .is_none_or(|state| state == 'T' || state == 't')
        })
    })
}

/// The last `n` lines of `log`.
fn tail(log: &str, n: usize) -> String {
    let lines: Vec<&str> = log.lines().collect();
    let start = lines.len().saturating_sub(n);
    lines[start..].iter().map(|l| format!("{l}\n")).collect()
}

/// One HTTP/1.0 request to the member's client port; returns the body.
fn http(addr: &str, method: &str, path: &str, body: &str) -> std::io::Result<String> {
    let mut stream = TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    stream.set_write_timeout(Some(Duration::from_secs(2)))?;
    write!(
        stream,
        "{method} {path} HTTP/1.0\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )?;
    let mut reply = String::new();
    stream.read_to_string(&mut reply)?;
    Ok(reply
        .split_once("\r\n\r\n")
        .map_or(String::new(), |(_, b)| b.to_string()))
}

/// The string or number value of `"name":` in a flat JSON reply.
fn json_field(body: &str, name: &str) -> Option<String> {
    let at = body.find(&format!("\"{name}\""))?;
    let rest = body[at + name.len() + 2..].trim_start().strip_prefix(':')?;
    let value: String = rest
        .trim_start()
        .trim_start_matches('"')
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    (!value.is_empty()).then_some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_three_member_cluster_elects_a_new_leader_after_a_kill() {
        let mut cluster = EtcdCluster::start(3);
        assert_eq!(cluster.endpoints().len(), 3);
        assert!(cluster.url().starts_with("etcd://127.0.0.1:"));
        let leader = cluster.wait_for_leader();
        cluster.kill(leader);
        let next = cluster.wait_for_leader();
        assert_ne!(next, leader);
        cluster.restart(leader);
        assert!(cluster.member(leader).is_healthy());
    }
}
