//! A TCP proxy on loopback that can delay or cut traffic, for network faults in
//! tests (a slow node, a cut replication link).

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

#[derive(Debug)]
struct Shared {
    target: SocketAddr,
    delay: Mutex<Duration>,
    cut: AtomicBool,
    stop: AtomicBool,
    active: AtomicUsize,
    /// A clone of both sockets of every live connection, to reset them on `cut`.
    sockets: Mutex<Vec<TcpStream>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
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
/// let server = warden_test::RedisServer::start();
/// let proxy = warden_test::Proxy::start(&server.addr());
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
            target,
            delay: Mutex::new(Duration::ZERO),
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
        let Ok(server) = TcpStream::connect_timeout(&shared.target, Duration::from_secs(2)) else {
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
        for (from, to) in [(client, server), (server2, client2)] {
            let (shared, done) = (Arc::clone(shared), Arc::clone(&done));
            std::thread::spawn(move || {
                pump(from, to, &shared);
                if done.fetch_add(1, Ordering::SeqCst) == 1 {
                    shared.active.fetch_sub(1, Ordering::SeqCst);
                }
            });
        }
    }
}

/// Copies `from` to `to` until either side closes, the link is cut or the proxy
/// stops.
fn pump(mut from: TcpStream, mut to: TcpStream, shared: &Shared) {
    let _ = from.set_read_timeout(Some(POLL));
    let mut buf = [0u8; 16 * 1024];
    loop {
        if shared.stop.load(Ordering::SeqCst) || shared.cut.load(Ordering::SeqCst) {
            break;
        }
        let n = match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => continue,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        let delay = *lock(&shared.delay);
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
