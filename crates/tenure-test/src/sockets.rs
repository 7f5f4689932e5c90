//! The TCP connections of this process, as the kernel has them: which server
//! each one goes to and how it is set, so a test can check what a client
//! library did with its sockets without reaching into the library.

use std::net::SocketAddr;

use rustix::process::{PidfdFlags, PidfdGetfdFlags, getpid, pidfd_getfd, pidfd_open};

/// One TCP connection of this process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TcpConnection {
    /// The descriptor's number in this process.
    pub fd: i32,
    /// The address it is connected to.
    pub peer: SocketAddr,
    /// Whether `TCP_NODELAY` is set (Nagle's algorithm off).
    pub nodelay: bool,
}

/// This process's open TCP connections to `port` (any address). Each
/// descriptor is looked at through a duplicate taken with `pidfd_getfd`
/// (Linux 5.6 or later), which leaves the original untouched.
///
/// # Panics
/// When this process cannot open a pidfd of itself, list `/proc/self/fd` or
/// duplicate a descriptor of its own (a kernel before 5.6, or a sandbox that
/// forbids `pidfd_getfd`): a test then fails with the reason.
pub fn tcp_connections_to(port: u16) -> Vec<TcpConnection> {
    let me = pidfd_open(getpid(), PidfdFlags::empty()).expect("pidfd of this process");
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc/self/fd").expect("list /proc/self/fd") {
        let Ok(entry) = entry else { continue };
        let Some(fd) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
            continue;
        };
        let is_socket = std::fs::read_link(entry.path())
            .is_ok_and(|target| target.to_string_lossy().starts_with("socket:"));
        if !is_socket {
            continue;
        }
        let copy = match pidfd_getfd(&me, fd, PidfdGetfdFlags::empty()) {
            Ok(copy) => copy,
            // Closed since it was listed.
            Err(rustix::io::Errno::BADF) => continue,
            // A kernel before 5.6, or a sandbox that forbids the call.
            Err(e) => panic!("cannot look at this process's sockets (pidfd_getfd: {e})"),
        };
        let peer = rustix::net::getpeername(&copy)
            .ok()
            .flatten()
            .and_then(|addr| SocketAddr::try_from(addr).ok());
        let Some(peer) = peer.filter(|p| p.port() == port) else {
            continue;
        };
        if let Ok(nodelay) = rustix::net::sockopt::tcp_nodelay(&copy) {
            found.push(TcpConnection { fd, peer, nodelay });
        }
    }
    found
}
