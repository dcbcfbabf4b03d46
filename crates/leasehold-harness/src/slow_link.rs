//! A loopback TCP relay in front of a real server that can hold the server's replies back.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::{self, JoinHandle};
use std::time::Duration;

/// A relay on a free 127.0.0.1 port to a real server: requests go through at once, replies
/// are held back by [`SlowLink::set_reply_delay`] (zero at first). It models a server whose
/// replies come late, e.g. one that processed a command and then stalled before answering, or
/// a congested network path, without touching the server itself.
///
/// Each chunk of reply bytes waits the delay set when it was read, so the server has already
/// applied the command (the key, its TTL) when the client is still waiting. Dropping the
/// `SlowLink` stops accepting; relayed connections end when either side closes.
#[derive(Debug)]
pub struct SlowLink {
    addr: SocketAddr,
    delay_ms: Arc<AtomicU64>,
    requests: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl SlowLink {
    /// Starts relaying from a free loopback port to `upstream`.
    pub fn start(upstream: SocketAddr) -> std::io::Result<SlowLink> {
        let listener = TcpListener::bind(("127.0.0.1", 0))?;
        let addr = listener.local_addr()?;
        let delay_ms = Arc::new(AtomicU64::new(0));
        let requests = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (delay_ms, stop) = (Arc::clone(&delay_ms), Arc::clone(&stop));
            let requests = Arc::clone(&requests);
            thread::Builder::new()
                .name(format!("slow-link-{}", addr.port()))
                .spawn(move || {
                    for client in listener.incoming() {
                        if stop.load(Ordering::SeqCst) {
                            break;
                        }
                        let Ok(client) = client else { continue };
                        let Ok(server) = TcpStream::connect(upstream) else {
                            let _ = client.shutdown(Shutdown::Both);
                            continue;
                        };
                        let _ = client.set_nodelay(true);
                        let _ = server.set_nodelay(true);
                        relay(client, server, Arc::clone(&delay_ms), Arc::clone(&requests));
                    }
                })?
        };
        Ok(SlowLink {
            addr,
            delay_ms,
            requests,
            stop,
            thread: Some(thread),
        })
    }

    /// `redis://127.0.0.1:PORT/` of the relay.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.addr.port())
    }

    /// The relay's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// How many chunks of request bytes were relayed to the server so far, over every
    /// connection. A client sends each request (or pipeline) in one write, so this counts its
    /// round trips, give or take a request split by the socket.
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::SeqCst)
    }

    /// Holds every reply chunk read from now on back by `delay` before passing it on.
    pub fn set_reply_delay(&self, delay: Duration) {
        self.delay_ms
            .store(delay.as_millis() as u64, Ordering::SeqCst);
    }
}

/// Two threads per connection: requests straight through, replies after the delay.
fn relay(client: TcpStream, server: TcpStream, delay_ms: Arc<AtomicU64>, requests: Arc<AtomicU64>) {
    let (Ok(mut client_r), Ok(mut server_w)) = (client.try_clone(), server.try_clone()) else {
        return;
    };
    let (mut server_r, mut client_w) = (server, client);
    thread::spawn(move || {
        copy(&mut client_r, &mut server_w, None, Some(&requests));
        let _ = server_w.shutdown(Shutdown::Write);
    });
    thread::spawn(move || {
        copy(&mut server_r, &mut client_w, Some(&delay_ms), None);
        let _ = client_w.shutdown(Shutdown::Write);
    });
}

fn copy(
    from: &mut TcpStream,
    to: &mut TcpStream,
    delay_ms: Option<&AtomicU64>,
    chunks: Option<&AtomicU64>,
) {
    let mut buf = [0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if let Some(chunks) = chunks {
            chunks.fetch_add(1, Ordering::SeqCst);
        }
        if let Some(delay) = delay_ms
            .map(|d| d.load(Ordering::SeqCst))
            .filter(|d| *d > 0)
        {
            thread::sleep(Duration::from_millis(delay));
        }
        if to.write_all(&buf[..n]).is_err() {
            return;
        }
    }
}

impl Drop for SlowLink {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect(self.addr);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
