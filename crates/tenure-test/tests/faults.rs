//! The fault tools themselves, against real redis-server processes.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use tenure_test::{Direction, Partition, Proxy, RedisServer, ReplicatedRedis};

/// Sends an inline command on `s` and waits up to `wait` for a reply.
fn ask(s: &mut TcpStream, cmd: &str, wait: Duration) -> Option<String> {
    s.write_all(format!("{cmd}\r\n").as_bytes()).ok()?;
    s.set_read_timeout(Some(wait)).ok()?;
    let mut buf = [0u8; 512];
    match s.read(&mut buf) {
        Ok(n) if n > 0 => Some(String::from_utf8_lossy(&buf[..n]).into_owned()),
        _ => None,
    }
}

/// A connection through `proxy` that has answered a PING.
fn ponged(proxy: &Proxy) -> TcpStream {
    let mut c = TcpStream::connect(proxy.addr()).expect("connect to the proxy");
    assert_eq!(
        ask(&mut c, "PING", Duration::from_secs(2)).as_deref(),
        Some("+PONG\r\n")
    );
    c
}

#[test]
fn dropped_replies_leave_requests_applied() {
    let server = RedisServer::start();
    let proxy = Proxy::start(&server.addr());
    let mut c = ponged(&proxy);
    proxy.partition(Direction::ToClient, Partition::Drop);
    // The request goes through, the reply is lost.
    assert_eq!(ask(&mut c, "SET k v", Duration::from_millis(500)), None);
    assert_eq!(server.command("GET k").unwrap(), "$1\r\nv\r\n");
    proxy.heal();
    // The stream lost bytes: it is reset, a new connection works.
    assert_eq!(ask(&mut c, "PING", Duration::from_secs(1)), None);
    ponged(&proxy);
}

#[test]
fn stalled_requests_arrive_after_the_heal() {
    let server = RedisServer::start();
    let proxy = Proxy::start(&server.addr());
    let mut c = ponged(&proxy);
    proxy.partition(Direction::ToServer, Partition::Stall);
    assert_eq!(ask(&mut c, "SET k v", Duration::from_millis(500)), None);
    assert_eq!(
        server.command("GET k").unwrap(),
        "$-1\r\n",
        "held back, not applied"
    );
    proxy.heal();
    c.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let mut buf = [0u8; 64];
    let n = c.read(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"+OK\r\n");
    assert_eq!(server.command("GET k").unwrap(), "$1\r\nv\r\n");
}

#[test]
fn latency_delays_each_direction_and_jitter_varies_per_connection() {
    let server = RedisServer::start();
    let proxy = Proxy::start(&server.addr());
    proxy.seed(7);
    proxy.latency(Duration::from_millis(60), Duration::from_millis(200));
    let mut rtts = Vec::new();
    for _ in 0..4 {
        let mut c = TcpStream::connect(proxy.addr()).unwrap();
        let t = Instant::now();
        assert!(ask(&mut c, "PING", Duration::from_secs(5)).is_some());
        rtts.push(t.elapsed());
    }
    // Both directions wait at least the base latency.
    assert!(
        rtts.iter().all(|r| *r >= Duration::from_millis(120)),
        "{rtts:?}"
    );
    // Jitter: not every connection waits the same (the base alone would).
    let spread = rtts
        .iter()
        .max()
        .unwrap()
        .saturating_sub(*rtts.iter().min().unwrap());
    assert!(spread >= Duration::from_millis(5), "{rtts:?}");
}

#[test]
fn a_server_clock_jump_expires_keys_early() {
    let mut server = RedisServer::start();
    assert!(
        server
            .command("SET k v PX 60000")
            .unwrap()
            .starts_with("+OK")
    );
    assert!(
        server
            .command("SET k2 v PX 200000")
            .unwrap()
            .starts_with("+OK")
    );
    assert!(server.command("SET forever v").unwrap().starts_with("+OK"));
    assert_eq!(server.jump_clock(120).unwrap(), ":2\r\n");
    assert_eq!(
        server.command("GET k").unwrap(),
        "$-1\r\n",
        "expired by the jump"
    );
    let left: u64 = server.command("PTTL k2").unwrap()[1..]
        .trim()
        .parse()
        .unwrap();
    assert!(left <= 80_000 && left > 70_000, "{left}");
    assert_eq!(server.command("GET forever").unwrap(), "$1\r\nv\r\n");
    assert_eq!(server.clock_offset(), 120);
}

#[test]
fn a_client_clock_jump_moves_only_the_wall_clock() {
    let dir = tempfile::tempdir().unwrap();
    let Some(mut clock) = tenure_test::FakeClock::new(dir.path()) else {
        panic!("libfaketime missing: scripts/test.sh installs Debian's faketime");
    };
    let date = |clock: &tenure_test::FakeClock| {
        let mut cmd = std::process::Command::new("date");
        cmd.arg("+%s");
        clock.apply(&mut cmd);
        let out = cmd.output().unwrap();
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse::<i64>()
            .unwrap()
    };
    let before = date(&clock);
    clock.jump(86_400).unwrap();
    let after = date(&clock);
    assert!((after - before - 86_400).abs() < 60, "{before} -> {after}");
}

#[test]
fn failover_moves_clients_to_the_promoted_replica() {
    let mut pair = ReplicatedRedis::start(RedisServer::builder());
    let mut c = TcpStream::connect(pair.front.addr()).unwrap();
    assert!(
        ask(&mut c, "SET a 1", Duration::from_secs(2))
            .unwrap()
            .starts_with("+OK")
    );
    pair.failover();
    assert!(
        pair.replica
            .command("INFO replication")
            .unwrap()
            .contains("role:master")
    );
    let mut c = TcpStream::connect(pair.front.addr()).unwrap();
    assert!(
        ask(&mut c, "SET b 2", Duration::from_secs(2))
            .unwrap()
            .starts_with("+OK")
    );
    assert_eq!(pair.replica.command("GET b").unwrap(), "$1\r\n2\r\n");
    assert_eq!(
        pair.master.command("GET b").unwrap(),
        "$-1\r\n",
        "the old master is cut off"
    );
    pair.reset();
    assert_eq!(
        pair.replica.command("GET b").unwrap(),
        "$-1\r\n",
        "resynced from the master"
    );
}

#[test]
fn pause_tree_freezes_a_process_and_its_children() {
    let mut child = std::process::Command::new("sh")
        .args(["-c", "sleep 30 & sleep 30; wait"])
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let kids = tenure_test::process::descendants(child.id());
    assert_eq!(kids.len(), 2, "{kids:?}");
    tenure_test::process::pause_tree(child.id());
    let state = |pid: u32| {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        stat.rsplit_once(')')
            .and_then(|(_, r)| r.trim().chars().next())
    };
    // A signal is delivered asynchronously: wait (bounded) for the state to show it.
    for p in std::iter::once(child.id()).chain(kids.iter().copied()) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while state(p) != Some('T') && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(state(p), Some('T'), "pid {p} stopped");
    }
    tenure_test::process::kill_tree(child.id());
    let _ = child.wait();
}
