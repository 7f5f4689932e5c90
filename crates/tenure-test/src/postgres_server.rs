//! A throwaway PostgreSQL cluster bound to 127.0.0.1 on a free port.

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::unistd::{Gid, Uid, User, chown};

use crate::free_port;

/// Environment variable naming the directory holding `initdb` and `postgres`.
pub const PG_BIN_ENV: &str = "TENURE_PG_BIN";

const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);

/// A PostgreSQL server with its own data directory, killed on drop.
///
/// `initdb` and `postgres` come from `$TENURE_PG_BIN`, `PATH`, or Debian's
/// `/usr/lib/postgresql/<version>/bin`. PostgreSQL refuses to run as root, so
/// when the tests run as root the cluster runs as the `postgres` user (or
/// `nobody`). Authentication is `trust` on loopback; fsync is off.
///
/// ```no_run
/// let pg = tenure_test::PostgresServer::start();
/// println!("connect to {}", pg.url()); // postgres://postgres@127.0.0.1:PORT/postgres
/// ```
#[derive(Debug)]
pub struct PostgresServer {
    port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
    bin: PathBuf,
    owner: Option<(Uid, Gid)>,
}

fn bin_dir() -> Option<PathBuf> {
    if let Ok(dir) = std::env::var(PG_BIN_ENV) {
        return Some(PathBuf::from(dir));
    }
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .find(|p| p.join("initdb").is_file() && p.join("postgres").is_file())
    });
    if on_path.is_some() {
        return on_path;
    }
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
        .filter(|p| p.join("postgres").is_file())
        .collect();
    versions.sort();
    versions.pop()
}

/// The user the cluster runs as: ourselves unless we are root.
fn run_as() -> Option<(Uid, Gid)> {
    if !Uid::effective().is_root() {
        return None;
    }
    let user = User::from_name("postgres")
        .ok()
        .flatten()
        .or_else(|| User::from_name("nobody").ok().flatten())
        .expect("running as root needs a 'postgres' or 'nobody' user for PostgreSQL");
    Some((user.uid, user.gid))
}

impl PostgresServer {
    /// Creates a cluster and starts it; waits until it accepts connections.
    ///
    /// # Panics
    /// When PostgreSQL is not installed or does not start: the test cannot go on.
    pub fn start() -> Self {
        let bin = bin_dir().unwrap_or_else(|| {
            panic!("PostgreSQL not found: install postgresql or set {PG_BIN_ENV}")
        });
        let dir = tempfile::Builder::new()
            .prefix("tenure-pg-")
            .tempdir()
            .expect("create a temporary directory for PostgreSQL");
        let owner = run_as();
        let as_owner = |cmd: &mut Command| {
            if let Some((uid, gid)) = owner {
                use std::os::unix::process::CommandExt;
                cmd.uid(uid.as_raw()).gid(gid.as_raw());
            }
        };
        if let Some((uid, gid)) = owner {
            chown(dir.path(), Some(uid), Some(gid)).expect("chown the PostgreSQL directory");
        }
        let data = dir.path().join("data");
        let mut initdb = Command::new(bin.join("initdb"));
        initdb
            .arg("-D")
            .arg(&data)
            .args([
                "-U",
                "postgres",
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        as_owner(&mut initdb);
        let out = initdb.output().expect("run initdb");
        assert!(
            out.status.success(),
            "initdb failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut server = PostgresServer {
            port: 0,
            dir,
            child: None,
            bin,
            owner,
        };
        for _ in 0..5 {
            server.port = free_port();
            if server.spawn() {
                return server;
            }
            server.kill();
        }
        panic!("PostgreSQL did not start: {}", server.log());
    }

    /// The port (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `postgres://postgres@127.0.0.1:PORT/postgres`.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// Kills the server (SIGKILL).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The postmaster's process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Freezes the postmaster and every backend (SIGSTOP): connections stay
    /// open, queries hang.
    pub fn pause(&self) {
        if let Some(pid) = self.pid() {
            crate::process::pause_tree(pid);
        }
    }

    /// Resumes after [`pause`](Self::pause) (SIGCONT).
    pub fn resume(&self) {
        if let Some(pid) = self.pid() {
            crate::process::resume_tree(pid);
        }
    }

    /// Crashes the server (SIGKILL to the postmaster and its backends) and starts
    /// it again on the same port and data directory: committed data survives
    /// (the cluster runs with fsync off, but the OS keeps the page cache).
    ///
    /// # Panics
    /// When it does not come back within 30 s.
    pub fn restart(&mut self) {
        if let Some(pid) = self.pid() {
            crate::process::kill_tree(pid);
        }
        self.kill();
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        while Instant::now() < deadline {
            if self.spawn() {
                return;
            }
            self.kill();
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("PostgreSQL did not restart: {}", self.log());
    }

    fn spawn(&mut self) -> bool {
        let log = std::fs::File::create(self.log_path()).expect("create the PostgreSQL log");
        if let Some((uid, gid)) = self.owner {
            chown(&self.log_path(), Some(uid), Some(gid)).expect("chown the log");
        }
        let mut cmd = Command::new(self.bin.join("postgres"));
        cmd.arg("-D")
            .arg(self.dir.path().join("data"))
            .args(["-p", &self.port.to_string(), "-h", "127.0.0.1", "-F"])
            .arg("-k")
            .arg(dir_str(self.dir.path()))
            .args(["-c", "max_connections=200"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        if let Some((uid, gid)) = self.owner {
            use std::os::unix::process::CommandExt;
            cmd.uid(uid.as_raw()).gid(gid.as_raw());
        }
        self.child = Some(cmd.spawn().expect("spawn postgres"));
        self.wait_ready()
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("postgres.log")
    }

    fn wait_ready(&mut self) -> bool {
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        while Instant::now() < deadline {
            if let Some(Ok(Some(_))) = self.child.as_mut().map(Child::try_wait) {
                return false;
            }
            let ready = self.log().contains("ready to accept connections")
                && TcpStream::connect(("127.0.0.1", self.port)).is_ok();
            if ready {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }
}

fn dir_str(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        if let Some(pid) = self.pid() {
            // Backends of a paused or crashed cluster must not outlive the test.
            crate::process::kill_tree(pid);
        }
        if std::thread::panicking() {
            eprintln!(
                "---- postgres log (port {}) ----\n{}---- end ----",
                self.port,
                self.log()
            );
        }
        self.kill();
    }
}
