//! The harness starts real servers and stops them.

#![allow(clippy::unwrap_used)]

use std::net::TcpStream;

use tenure_test::{PostgresServer, RedisServer};

#[test]
fn redis_server_starts_pauses_restarts_and_stops() {
    let mut server = RedisServer::start();
    assert!(server.command("PING").unwrap().starts_with("+PONG"));
    server.command("SET k v").unwrap();
    server.restart();
    assert!(
        server.command("GET k").unwrap().starts_with("$-1"),
        "no persistence by default"
    );
    let port = server.port();
    drop(server);
    assert!(
        TcpStream::connect(("127.0.0.1", port)).is_err(),
        "stopped on drop"
    );
}

#[test]
fn persistent_redis_keeps_data_across_kill_9() {
    let mut server = RedisServer::builder().persistent(true).start();
    server.command("SET k v").unwrap();
    server.restart();
    assert!(server.command("GET k").unwrap().contains('v'));
}

#[test]
fn postgres_server_accepts_connections() {
    let pg = PostgresServer::start();
    assert!(TcpStream::connect(("127.0.0.1", pg.port())).is_ok());
    assert!(pg.url().starts_with("postgres://postgres@127.0.0.1:"));
    let port = pg.port();
    drop(pg);
    assert!(TcpStream::connect(("127.0.0.1", port)).is_err());
}
