//! A loopback port that refuses every connection and stays refused for the
//! test's lifetime: the address of a server that is down.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};

use socket2::{Domain, Socket, Type};

/// A port bound on 127.0.0.1 without listening: a connection to it is
/// refused at once, like one to a killed server. Unlike the port of a killed
/// server, it cannot be taken by another test's server while this value lives
/// (a port in use is never handed out by a bind to port 0), and a client's
/// connection to it cannot pick it as its own local port and connect to
/// itself.
#[derive(Debug)]
pub struct ClosedPort {
    _socket: Socket,
    port: u16,
}

impl ClosedPort {
    /// Binds a free port and holds it.
    ///
    /// # Panics
    /// When the machine cannot bind a loopback port.
    pub fn new() -> ClosedPort {
        let socket =
            Socket::new(Domain::IPV4, Type::STREAM, None).expect("a TCP socket on a test machine");
        let any = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0));
        socket.bind(&any.into()).expect("binding 127.0.0.1:0");
        let port = socket
            .local_addr()
            .ok()
            .and_then(|a| a.as_socket())
            .map(|a| a.port())
            .expect("a bound socket has a port");
        ClosedPort {
            _socket: socket,
            port,
        }
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn redis_url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

impl Default for ClosedPort {
    fn default() -> Self {
        ClosedPort::new()
    }
}

#[cfg(test)]
mod tests {
    use super::ClosedPort;

    #[test]
    fn a_connection_to_a_closed_port_is_refused() {
        let closed = ClosedPort::new();
        let err = std::net::TcpStream::connect(("127.0.0.1", closed.port()))
            .expect_err("nothing listens");
        assert_eq!(err.kind(), std::io::ErrorKind::ConnectionRefused);
        let taken = std::net::TcpListener::bind(("127.0.0.1", closed.port()));
        assert!(taken.is_err(), "the port is held");
    }
}
