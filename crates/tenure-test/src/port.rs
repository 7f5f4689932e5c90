//! Loopback ports for the servers of a test, each reserved for the whole life
//! of the test process.
//!
//! A test that kills a server and starts it again on the same port, or points a
//! client at the port of a server that is down, needs that port to stay its
//! own while nothing listens on it. A port found by binding port 0 does not:
//! the kernel may hand it to another test's server, or to a client connection
//! as its local port, as soon as it is free. So ports come from a range below
//! the kernel's ephemeral range (never chosen for a client's local port), and
//! each is reserved across processes by an exclusive `flock` on a file named
//! after it, held until the process exits (tests run one per process).

use std::fs::{File, OpenOptions};
use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

use nix::fcntl::{Flock, FlockArg};

/// The first port of the reserved range.
const FIRST: u16 = 10_000;
/// How many ports the range holds: up to 19 999, below Linux's default
/// ephemeral range (32 768 and up) and below the cluster bus ports that
/// `redis-server` would derive by adding 10 000.
const COUNT: u32 = 10_000;

/// The next candidate, as an offset into the range.
static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);
/// The locks of the ports this process reserved, held until it exits.
static HELD: Mutex<Vec<Flock<File>>> = Mutex::new(Vec::new());

/// Returns a TCP port on 127.0.0.1 that is free and reserved for this process.
///
/// No other process of the test harness is handed the port while this one
/// runs, so a server can be killed and restarted on it, and a port whose
/// server is down stays down. Falls back to a port found by binding port 0
/// (free a moment ago, not reserved) when the whole range is taken.
pub fn free_port() -> u16 {
    for _ in 0..COUNT {
        let port = FIRST + u16::try_from(next_offset() % COUNT).unwrap_or(0);
        if let Some(lock) = reserve(port) {
            HELD.lock().unwrap_or_else(|e| e.into_inner()).push(lock);
            return port;
        }
    }
    any_free_port()
}

/// The next offset to try: processes start at different points of the range
/// (from their pid), then walk it one port at a time.
fn next_offset() -> u32 {
    let start = std::process::id().wrapping_mul(7_919) % COUNT;
    let _ = NEXT.compare_exchange(u32::MAX, start, Ordering::Relaxed, Ordering::Relaxed);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Locks `port`'s file without waiting, then checks that the port can be
/// bound now (nothing else on the machine listens on it).
fn reserve(port: u16) -> Option<Flock<File>> {
    let dir = lock_dir();
    std::fs::create_dir_all(&dir).ok()?;
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join(format!("{port}.lock")))
        .ok()?;
    let lock = Flock::lock(file, FlockArg::LockExclusiveNonblock).ok()?;
    TcpListener::bind(("127.0.0.1", port)).ok()?;
    Some(lock)
}

/// Where the lock files live: one directory per user in the system's
/// temporary directory.
fn lock_dir() -> PathBuf {
    let uid = nix::unistd::getuid();
    std::env::temp_dir().join(format!("tenure-test-ports-{uid}"))
}

/// A port that was free a moment ago, found by binding port 0.
fn any_free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("binding 127.0.0.1:0 must work on a test machine")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_distinct_in_range_and_locked_against_other_takers() {
        let a = free_port();
        let b = free_port();
        assert_ne!(a, b);
        for port in [a, b] {
            assert!((FIRST..FIRST + 10_000).contains(&port), "{port}");
            // Another taker (a second open file description, as another
            // process would have) cannot lock a reserved port.
            assert!(
                reserve(port).is_none(),
                "port {port} could be reserved twice"
            );
        }
    }

    #[test]
    fn a_port_stays_reserved_after_its_server_is_gone() {
        let port = free_port();
        let listener = TcpListener::bind(("127.0.0.1", port)).expect("bind the reserved port");
        drop(listener);
        assert!(reserve(port).is_none());
        let others: Vec<u16> = (0..50).map(|_| free_port()).collect();
        assert!(!others.contains(&port), "{port} handed out again");
    }
}
