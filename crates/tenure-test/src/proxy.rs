//! A TCP proxy on loopback that can delay or cut traffic, for network faults in
//! tests (a slow node, a cut replication link, a one-way partition, a moved
//! server after a failover).

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

/// Most connections a proxy carries at once; further ones are closed at once.
pub const MAX_PROXY_CONNECTIONS: usize = 64;

/// How often idle forwarding threads look at the stop flag.
const POLL: Duration = Duration::from_millis(50);

/// One direction of a proxied connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// From the client that connected to the proxy towards the server (requests).
    ToServer,
    /// From the server back to the client (replies).
    ToClient,
}

/// What a one-way partition does to the traffic of its direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Partition {
    /// Bytes are read and thrown away: the sender believes they were delivered.
    /// The connection's byte stream is corrupted for good, so it is reset when
    /// the partition heals.
    Drop,
    /// Bytes are not read: they queue in the kernel's buffers and the sender
    /// eventually blocks; they are delivered in order once the partition heals.
    Stall,
}

/// Per-chunk latency: `base` plus a uniform random share of `jitter`, drawn
/// once per connection and again for every chunk.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Latency {
    base: Duration,
    jitter: Duration,
}

#[derive(Debug)]
struct Shared {
    target: Mutex<SocketAddr>,
    delay: Mutex<Duration>,
    latency: Mutex<Latency>,
    /// One-way partitions in force, by direction (index: `dir_index`).
    partition: Mutex<[Option<Partition>; 2]>,
    /// State of the jitter generator; each new connection draws its seed here.
    seed: Mutex<u64>,
    cut: AtomicBool,
    stop: AtomicBool,
    active: AtomicUsize,
    /// A clone of both sockets of every live connection, to reset them on `cut`.
    sockets: Mutex<Vec<TcpStream>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn dir_index(d: Direction) -> usize {
    match d {
        Direction::ToServer => 0,
        Direction::ToClient => 1,
    }
}

/// SplitMix64: a tiny deterministic generator for jitter (seeded per proxy).
fn next_random(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Shared {
    fn reset_all(&self) {
        for s in lock(&self.sockets).drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
    }
}

/// A TCP proxy from a free port on 127.0.0.1 to a target address, run by plain
/// threads (one acceptor, two per connection, at most
/// [`MAX_PROXY_CONNECTIONS`] connections). Dropping it closes every connection
/// and stops the threads.
///
/// ```no_run
/// use std::time::Duration;
/// let server = tenure_test::RedisServer::start();
/// let proxy = tenure_test::Proxy::start(&server.addr());
/// println!("connect to {} instead", proxy.url());
/// proxy.delay(Duration::from_millis(500)); // every chunk waits 500 ms
/// proxy.cut();                             // reset connections, refuse new ones
/// proxy.restore();                         // forward again
/// ```
#[derive(Debug)]
pub struct Proxy {
    shared: Arc<Shared>,
    addr: SocketAddr,
    acceptor: Option<JoinHandle<()>>,
}

impl Proxy {
    /// Starts a proxy to `target` (`host:port`).
    ///
    /// # Panics
    /// When the target cannot be resolved or no loopback port can be bound: a test
    /// cannot go on without it.
    pub fn start(target: &str) -> Proxy {
        use std::net::ToSocketAddrs;
        let target = target
            .to_socket_addrs()
            .ok()
            .and_then(|mut a| a.next())
            .unwrap_or_else(|| panic!("proxy target {target:?} does not resolve"));
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        let addr = listener.local_addr().expect("local address of the proxy");
        let shared = Arc::new(Shared {
            target: Mutex::new(target),
            delay: Mutex::new(Duration::ZERO),
            latency: Mutex::new(Latency::default()),
            partition: Mutex::new([None, None]),
            seed: Mutex::new(u64::from(addr.port())),
            cut: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            active: AtomicUsize::new(0),
            sockets: Mutex::new(Vec::new()),
        });
        let acceptor = {
            let shared = Arc::clone(&shared);
            std::thread::spawn(move || accept_loop(&listener, &shared))
        };
        Proxy {
            shared,
            addr,
            acceptor: Some(acceptor),
        }
    }

    /// The proxy's port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// `127.0.0.1:PORT`.
    pub fn addr(&self) -> String {
        self.addr.to_string()
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://{}", self.addr)
    }

    /// Delays every chunk of data, in both directions, by `delay` (zero: none).
    pub fn delay(&self, delay: Duration) {
        *lock(&self.shared.delay) = delay;
    }

    /// Delays every chunk, in both directions, by `base` plus a random share of
    /// `jitter` (uniform in `0..=jitter`), drawn for each chunk from a generator
    /// seeded by [`seed`](Self::seed). Chunks of one direction stay in order.
    /// Zero for both: no latency. Adds to [`delay`](Self::delay).
    pub fn latency(&self, base: Duration, jitter: Duration) {
        *lock(&self.shared.latency) = Latency { base, jitter };
    }

    /// Seeds the jitter generator, so a run's delays follow from its seed.
    pub fn seed(&self, seed: u64) {
        *lock(&self.shared.seed) = seed;
    }

    /// Partitions one direction only: traffic the other way flows on. With
    /// [`Partition::Drop`] the bytes are lost (the connections are reset on
    /// [`heal`](Self::heal)); with [`Partition::Stall`] they wait and arrive
    /// late. New connections are accepted and partitioned the same way.
    pub fn partition(&self, direction: Direction, how: Partition) {
        lock(&self.shared.partition)[dir_index(direction)] = Some(how);
    }

    /// Ends every one-way partition. Connections that lost bytes to a dropping
    /// partition are reset (their byte stream is no longer a valid protocol
    /// stream); stalled ones deliver what waited.
    pub fn heal(&self) {
        let dropped = {
            let mut p = lock(&self.shared.partition);
            let dropped = p.contains(&Some(Partition::Drop));
            *p = [None, None];
            dropped
        };
        if dropped {
            self.shared.reset_all();
        }
    }

    /// Sends new connections to `target` (`host:port`) and resets the open
    /// ones: clients reconnect to the new server, as after a failover.
    ///
    /// # Panics
    /// When `target` does not resolve.
    pub fn retarget(&self, target: &str) {
        use std::net::ToSocketAddrs;
        let target = target
            .to_socket_addrs()
            .ok()
            .and_then(|mut a| a.next())
            .unwrap_or_else(|| panic!("proxy target {target:?} does not resolve"));
        *lock(&self.shared.target) = target;
        self.shared.reset_all();
    }

    /// Resets every open connection and closes new ones as soon as they are
    /// accepted, until [`restore`](Self::restore): a cut link.
    pub fn cut(&self) {
        self.shared.cut.store(true, Ordering::SeqCst);
        self.shared.reset_all();
    }

    /// Forwards new connections again after [`cut`](Self::cut).
    pub fn restore(&self) {
        self.shared.cut.store(false, Ordering::SeqCst);
    }

    /// Connections being forwarded now.
    pub fn connections(&self) -> usize {
        self.shared.active.load(Ordering::SeqCst)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.reset_all();
        // Wake the acceptor blocked in accept().
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(t) = self.acceptor.take() {
            let _ = t.join();
        }
    }
}

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>) {
    for client in listener.incoming() {
        if shared.stop.load(Ordering::SeqCst) {
            return;
        }
        let Ok(client) = client else { continue };
        if shared.cut.load(Ordering::SeqCst)
            || shared.active.load(Ordering::SeqCst) >= MAX_PROXY_CONNECTIONS
        {
            let _ = client.shutdown(Shutdown::Both);
            continue;
        }
        let target = *lock(&shared.target);
        let Ok(server) = TcpStream::connect_timeout(&target, Duration::from_secs(2)) else {
            let _ = client.shutdown(Shutdown::Both);
            continue;
        };
        let _ = client.set_nodelay(true);
        let _ = server.set_nodelay(true);
        let clones = (client.try_clone(), server.try_clone());
        let (Ok(client2), Ok(server2)) = clones else {
            continue;
        };
        {
            let mut sockets = lock(&shared.sockets);
            sockets.retain(|s| s.peer_addr().is_ok());
            if let (Ok(a), Ok(b)) = (client.try_clone(), server.try_clone()) {
                sockets.push(a);
                sockets.push(b);
            }
        }
        shared.active.fetch_add(1, Ordering::SeqCst);
        let done = Arc::new(AtomicUsize::new(0));
        let conn_seed = {
            let mut seed = lock(&shared.seed);
            next_random(&mut seed)
        };
        for (dir, from, to) in [
            (Direction::ToServer, client, server),
            (Direction::ToClient, server2, client2),
        ] {
            let (shared, done) = (Arc::clone(shared), Arc::clone(&done));
            let seed = conn_seed ^ dir_index(dir) as u64;
            std::thread::spawn(move || {
                pump(from, to, &shared, dir, seed);
                if done.fetch_add(1, Ordering::SeqCst) == 1 {
                    shared.active.fetch_sub(1, Ordering::SeqCst);
                }
            });
        }
    }
}

/// Copies `from` to `to` until either side closes, the link is cut or the proxy
/// stops.
fn pump(mut from: TcpStream, mut to: TcpStream, shared: &Shared, dir: Direction, seed: u64) {
    let _ = from.set_read_timeout(Some(POLL));
    let mut buf = [0u8; 16 * 1024];
    let mut rng = seed;
    // This connection's own share of the jitter, on top of each chunk's share.
    let conn_share = next_random(&mut rng);
    loop {
        if shared.stop.load(Ordering::SeqCst) || shared.cut.load(Ordering::SeqCst) {
            break;
        }
        let partition = lock(&shared.partition)[dir_index(dir)];
        if partition == Some(Partition::Stall) {
            // Do not read: the bytes wait in the kernel until the partition heals.
            std::thread::sleep(Duration::from_millis(5));
            continue;
        }
        let n = match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => continue,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        // A partition set while this read was under way applies to its bytes.
        let mut dropped = false;
        loop {
            match lock(&shared.partition)[dir_index(dir)] {
                Some(Partition::Drop) => dropped = true,
                Some(Partition::Stall)
                    if !shared.stop.load(Ordering::SeqCst)
                        && !shared.cut.load(Ordering::SeqCst) =>
                {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                }
                _ => {}
            }
            break;
        }
        if dropped {
            continue; // read and lost
        }
        let mut delay = *lock(&shared.delay);
        let latency = *lock(&shared.latency);
        if !latency.jitter.is_zero() || !latency.base.is_zero() {
            let span = u64::try_from(latency.jitter.as_micros()).unwrap_or(u64::MAX / 4);
            let share = if span == 0 {
                0
            } else {
                // Half the connection's own draw, half this chunk's: connections
                // differ, and chunks of one connection vary.
                (conn_share % (span + 1)) / 2 + (next_random(&mut rng) % (span + 1)) / 2
            };
            delay += latency.base + Duration::from_micros(share);
        }
        if !delay.is_zero() {
            std::thread::sleep(delay);
        }
        if shared.cut.load(Ordering::SeqCst) || to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}
