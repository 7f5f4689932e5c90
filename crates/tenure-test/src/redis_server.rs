//! A `redis-server` child process bound to 127.0.0.1 on a free port.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::free_port;

/// Environment variable naming the `redis-server` binary to run.
pub const REDIS_SERVER_ENV: &str = "TENURE_REDIS_SERVER";

/// How long [`RedisServer::start`] waits for the server to answer `PING`.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(10);

/// Configuration for a [`RedisServer`]; [`RedisServer::builder`] creates it.
#[derive(Debug, Clone, Default)]
#[must_use]
pub struct RedisServerBuilder {
    persistent: bool,
    extra_args: Vec<String>,
    /// Sentinel mode, with this configuration file content.
    sentinel: Option<String>,
}

impl RedisServerBuilder {
    /// Keeps data across restarts with an append-only file fsynced on every write
    /// (`appendonly yes`, `appendfsync always`). Off by default (`--save ""`).
    pub fn persistent(mut self, on: bool) -> Self {
        self.persistent = on;
        self
    }

    /// Adds raw `redis-server` arguments, e.g. `["--replicaof", "127.0.0.1", "6379"]`.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.extra_args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Runs a sentinel (`redis-server sentinel.conf --sentinel`) with `config`
    /// as its configuration file (e.g. `sentinel monitor …` lines), written to
    /// the server's directory before its first start. The sentinel rewrites it
    /// as it learns (a restart keeps what it learned).
    pub fn sentinel(mut self, config: impl Into<String>) -> Self {
        self.sentinel = Some(config.into());
        self
    }

    /// Starts the server on a free port and waits until it answers `PING`.
    ///
    /// # Panics
    /// When no server could be started: a test cannot go on without it.
    pub fn start(self) -> RedisServer {
        let mut dir = tempfile::Builder::new()
            .prefix("tenure-redis-")
            .tempdir()
            .expect("create a temporary directory for redis-server");
        let mut last_error = String::new();
        for _ in 0..5 {
            let port = free_port();
            let mut server = RedisServer {
                config: self.clone(),
                port,
                dir,
                child: None,
                clock_offset: 0,
            };
            match server.spawn() {
                Ok(()) => return server,
                Err(e) => {
                    last_error = e;
                    dir = server.take_dir();
                }
            }
        }
        panic!("could not start redis-server: {last_error}");
    }
}

/// A running `redis-server`, stopped (SIGKILL) when dropped.
#[derive(Debug)]
pub struct RedisServer {
    config: RedisServerBuilder,
    port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
    /// Total clock offset set by [`jump_clock`](Self::jump_clock), in seconds.
    clock_offset: i64,
}

impl RedisServer {
    /// Starts a non-persistent server (`--save "" --appendonly no`).
    pub fn start() -> Self {
        Self::builder().start()
    }

    /// A builder for servers with persistence or extra arguments.
    pub fn builder() -> RedisServerBuilder {
        RedisServerBuilder::default()
    }

    /// The port the server listens on (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// `127.0.0.1:PORT`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The process id, while the server runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The server's working directory (data files, log).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// What a forward jump of the server's wall clock by `seconds` does to its
    /// data: every key with a TTL expires `seconds` earlier (those with less
    /// left are deleted at once), in one atomic script. Redis expires keys by
    /// its wall clock, so this is an NTP step on the server's host as the
    /// lease keys see it. (Running Debian's jemalloc-linked `redis-server` under
    /// libfaketime hangs at start, libfaketime issue #130, so the jump is
    /// applied to the keys rather than to the clock.) Offsets add up.
    ///
    /// # Errors
    /// When the server does not answer.
    pub fn jump_clock(&mut self, seconds: u32) -> std::io::Result<String> {
        self.clock_offset += i64::from(seconds);
        let ms = u64::from(seconds) * 1000;
        self.command(&format!(
            "EVAL \"local n=0 for _,k in ipairs(redis.call('KEYS','*')) do \
             local t=redis.call('PTTL',k) if t>0 then n=n+1 \
             if t<=tonumber(ARGV[1]) then redis.call('DEL',k) \
             else redis.call('PEXPIRE',k,t-tonumber(ARGV[1])) end end end return n\" 0 {ms}"
        ))
    }

    /// The total of [`jump_clock`](Self::jump_clock) so far, in seconds.
    pub fn clock_offset(&self) -> i64 {
        self.clock_offset
    }

    /// Sends SIGSTOP: the process freezes, its sockets stay open.
    pub fn pause(&self) {
        self.signal(Signal::SIGSTOP);
    }

    /// Sends SIGCONT after [`pause`](Self::pause).
    pub fn resume(&self) {
        self.signal(Signal::SIGCONT);
    }

    /// Kills the process with SIGKILL and waits for it; data not yet on disk is lost.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Kills the server (SIGKILL) and starts it again on the same port and
    /// directory, so a persistent server reloads its data.
    pub fn restart(&mut self) {
        self.kill();
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        // The port can linger briefly after the kill; retry until it binds.
        loop {
            match self.spawn() {
                Ok(()) => return,
                Err(e) if Instant::now() > deadline => panic!("restart redis-server: {e}"),
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }

    /// Starts the server again after [`kill`](Self::kill), same port and directory.
    pub fn start_again(&mut self) {
        if self.child.is_none() {
            self.restart();
        }
    }

    /// Sends one command in the inline protocol and returns the raw reply.
    /// Handy for `DEBUG SLEEP`, `CONFIG SET` or `FLUSHALL` in tests.
    pub fn command(&self, inline: &str) -> std::io::Result<String> {
        let mut stream = TcpStream::connect(self.addr())?;
        stream.set_read_timeout(Some(Duration::from_secs(5)))?;
        stream.write_all(format!("{inline}\r\n").as_bytes())?;
        let mut buf = [0u8; 4096];
        let n = stream.read(&mut buf)?;
        Ok(String::from_utf8_lossy(&buf[..n]).into_owned())
    }

    /// Creates (or resets) the ACL user `name` with `password` and the given
    /// ACL `rules` (e.g. `"~tenure:* +@all"`), and returns a `redis://` URL that
    /// logs in as that user. Panics when the server refuses the rules.
    pub fn acl_user(&self, name: &str, password: &str, rules: &str) -> String {
        let reply = self
            .command(&format!("ACL SETUSER {name} reset on >{password} {rules}"))
            .expect("send ACL SETUSER");
        assert!(reply.starts_with("+OK"), "ACL SETUSER {name}: {reply}");
        format!("redis://{name}:{password}@{}", self.addr())
    }

    fn signal(&self, signal: Signal) {
        if let Some(pid) = self.pid() {
            let pid = i32::try_from(pid).expect("pid fits i32");
            kill(Pid::from_raw(pid), signal).expect("signal redis-server");
        }
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("redis.log")
    }

    fn take_dir(self) -> tempfile::TempDir {
        let mut me = self;
        me.kill();
        // Replace the directory with a throwaway so Drop has something to remove.
        let placeholder = tempfile::tempdir().expect("create a temporary directory");
        std::mem::replace(&mut me.dir, placeholder)
    }

    fn spawn(&mut self) -> Result<(), String> {
        let binary = std::env::var(REDIS_SERVER_ENV).unwrap_or_else(|_| "redis-server".to_string());
        let mut cmd = Command::new(&binary);
        if let Some(config) = &self.config.sentinel {
            let path = self.dir.path().join("sentinel.conf");
            if !path.exists() {
                std::fs::write(&path, config).map_err(|e| format!("write sentinel.conf: {e}"))?;
            }
            cmd.arg(path).arg("--sentinel");
        }
        cmd.arg("--port")
            .arg(self.port.to_string())
            .arg("--bind")
            .arg("127.0.0.1")
            .arg("--dir")
            .arg(self.dir.path())
            .arg("--logfile")
            .arg(self.log_path())
            .arg("--daemonize")
            .arg("no")
            .arg("--protected-mode")
            .arg("no");
        if self.config.sentinel.is_some() {
            // A sentinel keeps no data.
        } else if self.config.persistent {
            cmd.args([
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
                "--save",
                "",
            ]);
        } else {
            cmd.args(["--save", "", "--appendonly", "no"]);
        }
        cmd.args(&self.config.extra_args);
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let child = cmd.spawn().map_err(|e| {
            format!("spawn {binary}: {e} (install redis-server or set {REDIS_SERVER_ENV})")
        })?;
        self.child = Some(child);
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        loop {
            if self
                .command("PING")
                // A server started with `--requirepass` answers -NOAUTH: up too.
                .is_ok_and(|reply| reply.starts_with("+PONG") || reply.starts_with("-NOAUTH"))
            {
                return Ok(());
            }
            if let Some(Ok(Some(status))) = self.child.as_mut().map(Child::try_wait) {
                self.child = None;
                return Err(format!("redis-server exited with {status}: {}", self.log()));
            }
            if Instant::now() > deadline {
                self.kill();
                return Err(format!("redis-server did not answer PING: {}", self.log()));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "---- redis-server log (port {}) ----\n{}---- end of log ----",
                self.port,
                self.log()
            );
        }
        if self.child.is_some() {
            // A paused process must be resumed to die cleanly on some kernels.
            self.signal(Signal::SIGCONT);
        }
        self.kill();
    }
}
