//! Test support for tenure: real servers, started for real, and real faults.
//!
//! [`RedisServer`] spawns `redis-server` on a free loopback port with its own
//! temporary directory, waits until it answers `PING`, and stops it on drop. When
//! the test thread is panicking, the server's log is printed to stderr so a failed
//! test shows what Redis saw.
//!
//! The binary is `redis-server` from `PATH`, or the path in the
//! `TENURE_REDIS_SERVER` environment variable. [`PostgresServer`] does the same
//! for a throwaway PostgreSQL cluster. [`Proxy`] sits between a client and a
//! server on loopback and delays (with jitter), partitions one way, cuts or
//! redirects their traffic. [`EtcdCluster`] starts real `etcd` members (one, or
//! a cluster of three) with their own ports and data directories (`etcd` from
//! `PATH`, or the path in `TENURE_ETCD`).
//!
//! [`RedisCluster`] is a Redis Cluster of masters with one replica each;
//! [`RedisSentinels`] a master, a replica and three sentinels.
//!
//! For fault injection: [`ReplicatedRedis`] is a master with a replica and a
//! failover; [`RedisServer::jump_clock`] is a server clock step as its keys see
//! it; [`FakeClock`] makes a client process's wall clock jump; [`process`]
//! pauses, resumes and kills process trees; [`nemesis`] draws a fault
//! schedule from a seed. [`tcp_connections_to`] lists this process's
//! connections to a port with their socket options.
//!
//! ```no_run
//! let server = tenure_test::RedisServer::start();
//! println!("connect to {}", server.url());
//! server.pause();  // SIGSTOP: the process hangs, connections stay open
//! server.resume(); // SIGCONT
//! ```

mod closed_port;
mod cluster;
mod disk;
mod etcd_server;
mod failover;
mod fake_clock;
pub mod nemesis;
mod port;
mod postgres_server;
pub mod process;
mod proxy;
mod redis_server;
mod sentinel;
mod sockets;
mod tls;

pub use closed_port::ClosedPort;
pub use cluster::RedisCluster;
pub use etcd_server::{DiskStall, ETCD_ENV, EtcdCluster, EtcdMember};
pub use failover::ReplicatedRedis;
pub use fake_clock::{FakeClock, LIBFAKETIME_ENV, libfaketime};
pub use port::free_port;
pub use postgres_server::{PG_BIN_ENV, PostgresServer};
pub use proxy::{Direction, MAX_PROXY_CONNECTIONS, Partition, Proxy};
pub use redis_server::{REDIS_SERVER_ENV, RedisServer, RedisServerBuilder};
pub use sentinel::{RedisSentinels, SENTINEL_MASTER};
pub use sockets::{TcpConnection, tcp_connections_to};
pub use tls::{TlsCerts, TlsRedis};
