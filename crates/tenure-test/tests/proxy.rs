//! The fault-injecting TCP proxy: forwards, delays, cuts, restores, stops.

#![allow(clippy::unwrap_used, missing_docs)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use tenure_test::{Proxy, RedisServer};

fn ping(addr: &str) -> std::io::Result<String> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.write_all(b"PING\r\n")?;
    let mut buf = [0u8; 64];
    let n = s.read(&mut buf)?;
    Ok(String::from_utf8_lossy(&buf[..n]).into_owned())
}

#[test]
fn forwards_delays_cuts_and_restores() {
    let server = RedisServer::start();
    let proxy = Proxy::start(&server.addr());
    assert_eq!(ping(&proxy.addr()).unwrap(), "+PONG\r\n");

    proxy.delay(Duration::from_millis(200));
    let start = Instant::now();
    assert_eq!(ping(&proxy.addr()).unwrap(), "+PONG\r\n");
    // One delay per direction.
    assert!(
        start.elapsed() >= Duration::from_millis(400),
        "{:?}",
        start.elapsed()
    );
    proxy.delay(Duration::ZERO);

    let mut open = TcpStream::connect(proxy.addr()).unwrap();
    open.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    proxy.cut();
    let mut buf = [0u8; 16];
    let _ = open.write_all(b"PING\r\n");
    assert!(
        matches!(open.read(&mut buf), Ok(0) | Err(_)),
        "a cut connection is closed"
    );
    let refused = match ping(&proxy.addr()) {
        Err(_) => true,
        Ok(reply) => reply.is_empty(),
    };
    assert!(refused, "new connections are closed while cut");

    proxy.restore();
    assert_eq!(ping(&proxy.addr()).unwrap(), "+PONG\r\n");
    let addr = proxy.addr();
    drop(proxy);
    assert!(ping(&addr).is_err(), "a dropped proxy no longer listens");
}
