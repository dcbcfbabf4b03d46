//! A listener that never answers.

use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::{self, JoinHandle};

/// A TCP listener on 127.0.0.1 that accepts connections and never answers (for "server
/// hangs" tests): clients connect fine, then wait forever for a reply. Accepted connections
/// stay open until the `SilentServer` is dropped; dropping it stops the listener.
#[derive(Debug)]
pub struct SilentServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    accepted: Arc<AtomicUsize>,
    thread: Option<JoinHandle<()>>,
}

impl SilentServer {
    /// Binds a free loopback port and starts accepting in a background thread.
    pub fn start() -> std::io::Result<SilentServer> {
        let listener = TcpListener::bind(("127.0.0.1", 0))?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let accepted = Arc::new(AtomicUsize::new(0));
        let thread = {
            let stop = Arc::clone(&stop);
            let accepted = Arc::clone(&accepted);
            thread::Builder::new()
                .name(format!("silent-server-{}", addr.port()))
                .spawn(move || {
                    let mut held = Vec::new();
                    for conn in listener.incoming() {
                        if stop.load(Ordering::SeqCst) {
                            break;
                        }
                        if let Ok(conn) = conn {
                            accepted.fetch_add(1, Ordering::SeqCst);
                            held.push(conn);
                        }
                    }
                    for conn in held {
                        let _ = conn.shutdown(Shutdown::Both);
                    }
                })?
        };
        Ok(SilentServer {
            addr,
            stop,
            accepted,
            thread: Some(thread),
        })
    }

    /// The listening port.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// `redis://127.0.0.1:PORT/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.addr.port())
    }

    /// How many connections were accepted so far.
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for SilentServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the blocking accept() so the thread sees the flag.
        let _ = TcpStream::connect(self.addr);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
