//! A RESP server that answers badly on purpose: a test peer for a client's parsing, timeouts
//! and error classification.

use std::io::{BufReader, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use rand::SeedableRng;
use rand::rngs::StdRng;

use crate::resp::RespValue;

mod replies;

use replies::{After, Source, grant_in};

/// How a [`HostileServer`] behaves: the seed (or the script of choices) that decides each
/// reply, how many replies are honest, and how slow a slow one is.
#[derive(Debug, Clone)]
pub struct HostileOptions {
    seed: u64,
    honest_percent: u32,
    slow: Duration,
    script: Option<Arc<[u8]>>,
    fixed: Vec<(String, Vec<u8>)>,
}

impl HostileOptions {
    /// Replies chosen by a random generator seeded with `seed` (each connection has its own,
    /// derived from the seed and the connection's number), half of them honest, slow replies
    /// 1 s late.
    pub fn new(seed: u64) -> Self {
        HostileOptions {
            seed,
            honest_percent: 50,
            slow: Duration::from_secs(1),
            script: None,
            fixed: Vec::new(),
        }
    }

    /// The share of replies (0..=100 percent) that are honest: correct for their command, so
    /// a client gets past its handshake and reaches the commands under test.
    pub fn honest_percent(mut self, percent: u32) -> Self {
        self.honest_percent = percent.min(100);
        self
    }

    /// How late a slow reply comes (set it beyond the client's response timeout).
    pub fn slow(mut self, delay: Duration) -> Self {
        self.slow = delay;
        self
    }

    /// Answers every command named `name` with `reply`, exactly, instead of choosing: for tests
    /// of one reply. Case-insensitive; a second word names the first argument (`"SCRIPT LOAD"`,
    /// or `"SET k"` for a `SET` of the key `k`). Several answers to one name are given in turn,
    /// the last one from then on. An empty reply closes the connection without one.
    pub fn answer(mut self, name: &str, reply: &[u8]) -> Self {
        self.fixed.push((name.to_ascii_uppercase(), reply.to_vec()));
        self
    }

    /// Choices read from `bytes` (a fuzzer's input) instead of the random generator, one byte
    /// per choice, shared by all connections in the order they make them; once they run out,
    /// every reply is honest.
    pub fn script(mut self, bytes: &[u8]) -> Self {
        self.script = Some(bytes.into());
        self
    }
}

/// What kind of reply a [`HostileServer`] gave to one command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ReplyKind {
    /// A correct reply for the command (a grant, a refusal, a count, ...).
    Honest,
    /// Bytes that are not RESP: an unknown type byte, a non-numeric or impossible length, a
    /// missing CRLF, a length that does not match the payload, nesting hundreds deep.
    Malformed,
    /// The first bytes of a reply, then the connection closed.
    TruncatedClose,
    /// The first bytes of a reply, then nothing more (the connection stays open, unread).
    TruncatedHang,
    /// A very large bulk string or array (sent in full), or a huge declared length (then
    /// nothing more).
    Oversized,
    /// A well-formed reply of a type the command never returns (RESP3 types included).
    WrongType,
    /// The honest reply, after [`HostileOptions::slow`].
    Slow,
    /// The connection closed without a reply.
    Closed,
    /// No reply: the connection hangs since an earlier truncated reply.
    Ignored,
    /// The reply given with [`HostileOptions::answer`].
    Fixed,
}

/// What a reply granted, judged from the bytes sent: a reply that really is a grant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grant {
    /// `+OK` to `SET key value NX ...`.
    Set,
    /// `[1, number]` (an array of two integers, RESP2) to a script (`EVAL`, `EVALSHA`,
    /// `FCALL`): what leasehold's acquire scripts answer when they take the lock.
    Script {
        /// The second integer (the fencing number, or 0 without fencing).
        number: i64,
    },
}

/// One command a [`HostileServer`] received, and what it answered.
#[derive(Debug, Clone)]
pub struct Exchange {
    /// The connection's number (0 for the first accepted).
    pub connection: usize,
    /// The command's arguments, name first.
    pub command: Vec<Vec<u8>>,
    /// What kind of reply it got.
    pub kind: ReplyKind,
    /// The reply's first bytes (up to 256).
    pub reply: Vec<u8>,
    /// The reply's full length in bytes.
    pub reply_len: usize,
    /// Whether the reply, as sent in full, is a grant for the command.
    pub grant: Option<Grant>,
    /// Whether the client may have read a reply in time: all of it was sent at once and the
    /// connection went on (a malformed reply too: the bytes that follow may complete it into a
    /// value, as `+OK` without its CRLF and the next reply's `-ERR ...` make `OK-ERR ...`).
    /// False when no reply can have been read: truncated, closed, slow, hung, or malformed
    /// and then closed.
    pub answered: bool,
}

impl Exchange {
    /// The command's name, upper case.
    pub fn name(&self) -> String {
        self.command
            .first()
            .map(|n| String::from_utf8_lossy(n).to_ascii_uppercase())
            .unwrap_or_default()
    }

    /// The `i`-th argument as text (0 is the name).
    pub fn arg(&self, i: usize) -> Option<String> {
        self.command
            .get(i)
            .map(|a| String::from_utf8_lossy(a).into_owned())
    }
}

impl std::fmt::Display for Exchange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let args: Vec<String> = self
            .command
            .iter()
            .map(|a| {
                let a = String::from_utf8_lossy(a);
                if a.chars().count() > 40 {
                    format!("{}…", a.chars().take(40).collect::<String>())
                } else {
                    a.into_owned()
                }
            })
            .collect();
        write!(
            f,
            "#{} {} -> {:?} {:?}{}",
            self.connection,
            args.join(" "),
            self.kind,
            String::from_utf8_lossy(&self.reply),
            if self.reply_len > self.reply.len() {
                format!("… ({} bytes)", self.reply_len)
            } else {
                String::new()
            }
        )?;
        if let Some(g) = self.grant {
            write!(f, " [grant {g:?}]")?;
        }
        Ok(())
    }
}

/// A TCP listener on 127.0.0.1 that speaks RESP badly on purpose: it parses every command a
/// client sends (pipelines included) and answers each with a reply chosen by its
/// [`HostileOptions`]: honest, malformed, truncated (then closed or hung), oversized, wrongly
/// typed, slow, or none at all (closed). Every exchange is logged ([`HostileServer::log`]), so
/// a test can hold the client's verdict against what it was really told.
///
/// Honest replies imitate a Redis 7.4 server that answers for itself, without keeping data:
/// an acquisition may be granted or refused, a release may find the key or not, scripts get
/// replies of the shapes leasehold's scripts return.
///
/// Dropping it closes every connection and stops the listener.
#[derive(Debug)]
pub struct HostileServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

#[derive(Debug)]
struct Shared {
    options: HostileOptions,
    stop: AtomicBool,
    accepted: AtomicUsize,
    /// The script's read position ([`HostileOptions::script`]).
    script_pos: AtomicUsize,
    /// How many commands each [`HostileOptions::answer`] name has answered.
    fixed_uses: Mutex<std::collections::HashMap<String, usize>>,
    log: Mutex<Vec<Exchange>>,
    /// A handle on every accepted connection, to close them all on drop.
    streams: Mutex<Vec<TcpStream>>,
}

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl HostileServer {
    /// Binds a free loopback port and starts serving in background threads.
    pub fn start(options: HostileOptions) -> std::io::Result<HostileServer> {
        let listener = TcpListener::bind(("127.0.0.1", 0))?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            options,
            stop: AtomicBool::new(false),
            accepted: AtomicUsize::new(0),
            script_pos: AtomicUsize::new(0),
            fixed_uses: Mutex::default(),
            log: Mutex::new(Vec::new()),
            streams: Mutex::new(Vec::new()),
        });
        let thread = {
            let shared = Arc::clone(&shared);
            thread::Builder::new()
                .name(format!("hostile-server-{}", addr.port()))
                .spawn(move || accept_loop(listener, shared))?
        };
        Ok(HostileServer {
            addr,
            shared,
            thread: Some(thread),
        })
    }

    /// `redis://127.0.0.1:PORT/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.addr.port())
    }

    /// How many exchanges were logged so far (a mark for [`HostileServer::log_since`]).
    pub fn log_len(&self) -> usize {
        locked(&self.shared.log).len()
    }

    /// Every exchange so far, in the order the replies were chosen.
    pub fn log(&self) -> Vec<Exchange> {
        self.log_since(0)
    }

    /// The exchanges after the first `mark`.
    pub fn log_since(&self, mark: usize) -> Vec<Exchange> {
        locked(&self.shared.log)
            .get(mark..)
            .map(<[Exchange]>::to_vec)
            .unwrap_or_default()
    }
}

impl Drop for HostileServer {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        for s in locked(&self.shared.streams).iter() {
            let _ = s.shutdown(Shutdown::Both);
        }
        // Wake the blocking accept() so the thread sees the flag.
        let _ = TcpStream::connect(self.addr);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    let mut threads = Vec::new();
    for conn in listener.incoming() {
        if shared.stop.load(Ordering::SeqCst) {
            break;
        }
        let Ok(conn) = conn else { continue };
        let id = shared.accepted.fetch_add(1, Ordering::SeqCst);
        let Ok(handle) = conn.try_clone() else {
            continue;
        };
        locked(&shared.streams).push(handle);
        let shared = Arc::clone(&shared);
        let spawned = thread::Builder::new()
            .name(format!("hostile-conn-{id}"))
            .spawn(move || Connection::new(id, &shared).serve(conn));
        threads.extend(spawned.ok());
    }
    for s in locked(&shared.streams).iter() {
        let _ = s.shutdown(Shutdown::Both);
    }
    for t in threads {
        let _ = t.join();
    }
}

struct Connection<'a> {
    id: usize,
    shared: &'a Shared,
    src: Source<'a>,
    /// The client switched to RESP3 (an honest `HELLO 3`).
    resp3: bool,
}

impl<'a> Connection<'a> {
    fn new(id: usize, shared: &'a Shared) -> Self {
        let src = match &shared.options.script {
            Some(bytes) => Source::Script {
                bytes,
                pos: &shared.script_pos,
            },
            None => Source::Rng(Box::new(StdRng::seed_from_u64(
                shared
                    .options
                    .seed
                    .wrapping_add((id as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)),
            ))),
        };
        Connection {
            id,
            shared,
            src,
            resp3: false,
        }
    }

    fn stopped(&self) -> bool {
        self.shared.stop.load(Ordering::SeqCst)
    }

    fn serve(mut self, stream: TcpStream) {
        let Ok(read_half) = stream.try_clone() else {
            return;
        };
        let mut reader = BufReader::new(read_half);
        let mut writer = stream;
        let mut hanging = false;
        while let Some(command) = read_command(&mut reader) {
            if self.stopped() {
                return;
            }
            if hanging {
                self.record(command, ReplyKind::Ignored, &[], false, false);
                continue;
            }
            let (kind, bytes, after) = match self.fixed(&command) {
                Some(reply) if reply.is_empty() => (ReplyKind::Fixed, reply, After::Close),
                Some(reply) => (ReplyKind::Fixed, reply, After::Continue),
                None => {
                    let honest = self.src.honest(&mut self.resp3, &command);
                    self.choose(honest)
                }
            };
            let complete = matches!(after, After::Continue);
            // Logged before a slow reply's delay: the log's order is the order of the commands.
            self.record(
                command,
                kind,
                &bytes,
                complete,
                complete && kind != ReplyKind::Slow,
            );
            if kind == ReplyKind::Slow && !self.sleep(self.shared.options.slow) {
                return;
            }
            if writer
                .write_all(&bytes)
                .and_then(|()| writer.flush())
                .is_err()
            {
                return;
            }
            match after {
                After::Continue => {}
                After::Close => {
                    let _ = writer.shutdown(Shutdown::Both);
                    return;
                }
                After::Hang => hanging = true,
            }
        }
    }

    /// The reply fixed for `command` by [`HostileOptions::answer`], if any.
    fn fixed(&self, command: &[Vec<u8>]) -> Option<Vec<u8>> {
        let word = |i: usize| {
            command
                .get(i)
                .map(|a| String::from_utf8_lossy(a).to_ascii_uppercase())
                .unwrap_or_default()
        };
        let (name, sub) = (word(0), format!("{} {}", word(0), word(1)));
        let fixed = &self.shared.options.fixed;
        let (first, _) = fixed.iter().find(|(n, _)| *n == name || *n == sub)?;
        let answers: Vec<&Vec<u8>> = fixed
            .iter()
            .filter(|(n, _)| n == first)
            .map(|(_, r)| r)
            .collect();
        let mut uses = locked(&self.shared.fixed_uses);
        let used = uses.entry(first.clone()).or_default();
        let reply = answers[(*used).min(answers.len() - 1)].clone();
        *used += 1;
        Some(reply)
    }

    /// Sleeps `d` in short steps; false if the server stopped meanwhile.
    fn sleep(&self, d: Duration) -> bool {
        let step = Duration::from_millis(10);
        let mut left = d;
        while !left.is_zero() {
            if self.stopped() {
                return false;
            }
            let now = left.min(step);
            thread::sleep(now);
            left -= now;
        }
        !self.stopped()
    }

    fn record(
        &self,
        command: Vec<Vec<u8>>,
        kind: ReplyKind,
        bytes: &[u8],
        complete: bool,
        answered: bool,
    ) {
        let grant = if complete {
            grant_in(&command, bytes)
        } else {
            None
        };
        locked(&self.shared.log).push(Exchange {
            connection: self.id,
            command,
            kind,
            reply: bytes[..bytes.len().min(256)].to_vec(),
            reply_len: bytes.len(),
            grant,
            answered,
        });
    }

    /// The reply to give, from the honest one.
    fn choose(&mut self, honest: Vec<u8>) -> (ReplyKind, Vec<u8>, After) {
        if self.src.below(100) < self.shared.options.honest_percent as usize {
            return (ReplyKind::Honest, honest, After::Continue);
        }
        match self.src.below(7) {
            0 => {
                let close = self.src.one_in(2);
                let (bytes, ends) = self.src.malformed(&honest);
                // One that runs into the next reply ends the connection (see `malformed`).
                let after = if close || !ends {
                    After::Close
                } else {
                    After::Continue
                };
                (ReplyKind::Malformed, bytes, after)
            }
            1 | 2 => {
                let cut = if honest.len() > 1 {
                    self.src.below(honest.len() - 1) + 1
                } else {
                    0
                };
                let mut bytes = honest[..cut].to_vec();
                if bytes.is_empty() {
                    bytes.extend_from_slice(b"$5\r\nab");
                }
                if self.src.one_in(2) {
                    (ReplyKind::TruncatedClose, bytes, After::Close)
                } else {
                    (ReplyKind::TruncatedHang, bytes, After::Hang)
                }
            }
            3 => self.src.oversized(),
            4 => (ReplyKind::WrongType, self.src.wrong_type(), After::Continue),
            5 => (ReplyKind::Slow, honest, After::Continue),
            _ => (ReplyKind::Closed, Vec::new(), After::Close),
        }
    }
}

/// Reads one command (an array of bulk strings); `None` once the connection is closed or the
/// bytes are not a command.
fn read_command(reader: &mut BufReader<TcpStream>) -> Option<Vec<Vec<u8>>> {
    let value = RespValue::read(reader).ok()?;
    value
        .as_array()?
        .iter()
        .map(|a| a.as_bytes().map(<[u8]>::to_vec))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_script_of_zeros_is_honest() {
        let shared = Shared {
            options: HostileOptions::new(0).script(&[]),
            stop: AtomicBool::new(false),
            accepted: AtomicUsize::new(0),
            script_pos: AtomicUsize::new(0),
            fixed_uses: Mutex::default(),
            log: Mutex::new(Vec::new()),
            streams: Mutex::new(Vec::new()),
        };
        let mut c = Connection::new(0, &shared);
        let (kind, bytes, _) = c.choose(b"+OK\r\n".to_vec());
        assert_eq!((kind, bytes), (ReplyKind::Honest, b"+OK\r\n".to_vec()));
    }
}
