//! The loopback ports of a [`Server`](super::Server), reserved so that no other server of this
//! process takes them.

use std::net::TcpListener;

use super::Mode;
use super::options::ServerOptions;
use crate::HarnessError;

/// The ports of one server: the main one, and the optional TLS and cluster-bus ports.
#[derive(Debug, Clone, Copy)]
pub(super) struct Ports {
    pub(super) port: u16,
    pub(super) tls: Option<u16>,
    pub(super) bus: Option<u16>,
}

impl Ports {
    /// Reserves the ports a server of `mode` with `opts` needs.
    pub(super) fn reserve(mode: &Mode, opts: &ServerOptions) -> Result<Ports, HarnessError> {
        let mut ports = Ports {
            port: free_port()?,
            tls: None,
            bus: None,
        };
        if opts.tls.is_some() {
            match free_port() {
                Ok(p) => ports.tls = Some(p),
                Err(e) => {
                    ports.release();
                    return Err(e);
                }
            }
        }
        if mode == &Mode::ClusterNode {
            match free_port() {
                Ok(p) => ports.bus = Some(p),
                Err(e) => {
                    ports.release();
                    return Err(e);
                }
            }
        }
        Ok(ports)
    }

    pub(super) fn release(self) {
        release_port(self.port);
        for port in [self.tls, self.bus].into_iter().flatten() {
            release_port(port);
        }
    }
}

/// Ports owned by a live `Server` of this process, also while that server is killed or stopped:
/// a test that kills a node must not find another test's server answering on its port.
static RESERVED: std::sync::Mutex<std::collections::BTreeSet<u16>> =
    std::sync::Mutex::new(std::collections::BTreeSet::new());

/// A port that was free a moment ago and that no live `Server` of this process owns; it stays
/// reserved until [`release_port`].
pub(crate) fn free_port() -> Result<u16, HarnessError> {
    // Kept bound while we pick, so the kernel hands out different ports meanwhile.
    let mut held = Vec::new();
    loop {
        let listener = TcpListener::bind(("127.0.0.1", 0))?;
        let port = listener.local_addr()?.port();
        let mut reserved = RESERVED.lock().unwrap_or_else(|p| p.into_inner());
        if reserved.insert(port) {
            return Ok(port);
        }
        drop(reserved);
        held.push(listener);
    }
}

/// Gives back a port from [`free_port`].
pub(crate) fn release_port(port: u16) {
    RESERVED
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(&port);
}
