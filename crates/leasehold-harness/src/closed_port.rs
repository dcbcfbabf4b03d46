//! A loopback port where nothing listens, and which nothing else can take.

use std::os::fd::{AsRawFd, OwnedFd};

use nix::sys::socket::{AddressFamily, SockFlag, SockType, SockaddrIn, bind, getsockname, socket};

/// A TCP port on 127.0.0.1 that refuses every connection for as long as this value lives.
///
/// The port is bound by a socket that never listens: a connection to it is refused at once,
/// and the kernel hands the port to no one else meanwhile. A port bound, noted and let go (the
/// usual trick) is free for the next `bind(0)` of any process, so a test expecting "connection
/// refused" could reach another test's server there instead.
#[derive(Debug)]
pub struct ClosedPort {
    /// Kept open: the port stays ours, and refuses connections, until this is dropped.
    _socket: OwnedFd,
    port: u16,
}

impl ClosedPort {
    /// Binds a fresh loopback port, without listening on it.
    ///
    /// # Panics
    /// If the machine has no loopback port to bind (a test cannot go on without one).
    pub fn new() -> ClosedPort {
        let socket = socket(
            AddressFamily::Inet,
            SockType::Stream,
            SockFlag::SOCK_CLOEXEC,
            None,
        )
        .expect("a TCP socket");
        bind(socket.as_raw_fd(), &SockaddrIn::new(127, 0, 0, 1, 0)).expect("bind 127.0.0.1:0");
        let port = getsockname::<SockaddrIn>(socket.as_raw_fd())
            .expect("the bound address")
            .port();
        ClosedPort {
            _socket: socket,
            port,
        }
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:<port>/`.
    pub fn redis_url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port())
    }
}

impl Default for ClosedPort {
    fn default() -> Self {
        ClosedPort::new()
    }
}
