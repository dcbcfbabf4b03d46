//! A multiplexed connection to one standalone server over plain TCP that sends every command
//! the tasks queued meanwhile in one `write`, and reads the replies itself.
//!
//! **Why not the `redis` crate's own.** With many tasks locking at once (W2 in bench/README),
//! the client was the bound: each command through the crate's multiplexed connection is a
//! buffer of its own, a message to its connection task and a flush, and the replies go through
//! a general-purpose parser. Here a command is appended to one shared buffer under a lock, and
//! the writer task writes whatever accumulated. Measured on this project's 2-core machine (64
//! tasks, `try_acquire` and `release` on distinct keys, Redis 8.6): the client's CPU per lock
//! cycle fell from about 9.5 us to 7.7 us and the server's from 4.5 us to 3.1 us (fewer, fuller
//! reads and writes on both sides); W2 from 0.73 to 0.81-0.89 x the crate's bare `SET`/`DEL`.
//! A lone command, or one behind a single command in flight (the handoff inside one client: a
//! release's delete, then the woken waiter's attempt), skips the writer task: its own task
//! writes it at once (`Queue::write_through`).
//!
//! **What it keeps of the crate's.** Commands are encoded by the crate (`Cmd`, `Pipeline`) and
//! replies are the crate's [`Value`], so scripts, their `NOSCRIPT` fallback and every reader of
//! a reply work unchanged. A pipeline's replies are read as the crate reads them: `offset`
//! skipped, `count` returned, server errors in place.
//!
//! **Order.** Every clone shares one socket, and a command is appended to the shared buffer at
//! the first poll of its future (while the link is up), so commands reach the server in the
//! order their futures were first polled, as `core::queued::queued_then` relies on.
//!
//! **Failures.** A failed read or write, or a command unanswered for the response timeout,
//! ends the socket: every command waiting on it fails with an I/O error (ambiguous: it may have
//! been applied), and the next command connects again (as the crate's `ConnectionManager`
//! does). A stuck server cannot hold a command longer than the response timeout.

mod resp;

use std::collections::VecDeque;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::{Cmd, Pipeline, RedisError, RedisResult, Value};
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::{Notify, oneshot};

/// A cheap-to-clone handle on one batching connection to a standalone server (see the module
/// docs); what [`RedisClient::connect`](crate::redis::RedisClient::connect) uses for a
/// `redis://` URL (plain TCP, RESP2).
#[derive(Clone)]
pub struct BatchingConnection {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for BatchingConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatchingConnection")
            .field("host", &self.shared.host)
            .field("port", &self.shared.port)
            .field("db", &self.shared.db)
            .finish_non_exhaustive()
    }
}

/// What every clone shares: where to connect, and the current socket.
struct Shared {
    host: String,
    port: u16,
    db: i64,
    username: Option<String>,
    password: Option<String>,
    connect_timeout: Duration,
    response_timeout: Duration,
    /// The runtime the connection was made on, where a new socket is opened (a command may be
    /// polled on a thread outside any runtime).
    runtime: tokio::runtime::Handle,
    link: Mutex<Option<Arc<Wire>>>,
    /// Held while a new socket is opened, so that concurrent commands open one.
    connecting: tokio::sync::Mutex<()>,
    /// How many attempts to open a socket ended, and the last one's I/O failure, if it failed
    /// so.
    last_open: Mutex<(u64, Option<(io::ErrorKind, String)>)>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        if let Some(wire) = self.link.get_mut().ok().and_then(Option::take) {
            wire.fail(io::ErrorKind::NotConnected, "the client was dropped");
        }
    }
}

/// One socket: the commands queued for it and those waiting for their replies.
struct Wire {
    queue: Mutex<Queue>,
    /// Wakes the writer task when a command is queued and it is not writing.
    writer: Notify,
    failed: AtomicBool,
}

struct Queue {
    /// Encoded commands not yet written.
    out: Vec<u8>,
    /// The commands sent or queued, in order, awaiting their replies.
    waiting: VecDeque<Waiting>,
    /// Whether the writer task has been woken and not yet found `out` empty.
    writing: bool,
    /// The failure that ended the socket, if it did.
    failed: Option<(io::ErrorKind, &'static str)>,
    /// The socket's writing half, shared with the writer task; taken when the socket ends (the
    /// writer's copy, the last, then closes it).
    socket: Option<Arc<OwnedWriteHalf>>,
}

/// The most commands in flight, the new one included, for the new one to be written by its own
/// task ([`Queue::write_through`]) rather than by the writer task: a lone command, or one
/// behind a single command in flight. The second is the handoff inside one client: a release's
/// delete is on the wire and the waiter it woke sends its attempt (`queued_then`); through the
/// writer task, that attempt waited for the writer's wake-up and a scheduling round. With more
/// in flight, more commands are likely ready to join a batch, which the writer task gathers.
const WRITTEN_THROUGH: usize = 2;

/// One request (a command or a pipeline) awaiting its replies.
struct Waiting {
    /// Replies to read past before this request's own (a pipeline's `offset`).
    skip: usize,
    /// How many replies it returns.
    want: usize,
    /// A transaction (`MULTI` ... `EXEC`): a server error among its skipped replies (a command
    /// the server refused to queue) fails it, as the crate's connections fail it.
    transaction: bool,
    refused: Option<redis::ServerError>,
    replies: Vec<Value>,
    sent: Instant,
    reply: oneshot::Sender<RedisResult<Replies>>,
}

enum Replies {
    One(Value),
    Many(Vec<Value>),
}

impl BatchingConnection {
    /// Connects to `info`'s server, which must be a plain TCP address (`redis://`), and sends
    /// its `AUTH` and `SELECT` as the crate would.
    pub(crate) async fn connect(
        info: &redis::ConnectionInfo,
        connect_timeout: Duration,
        response_timeout: Duration,
    ) -> RedisResult<Self> {
        let redis::ConnectionAddr::Tcp(host, port) = info.addr() else {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "a batching connection is plain TCP",
            )
            .into());
        };
        let settings = info.redis_settings();
        let connection = BatchingConnection {
            shared: Arc::new(Shared {
                host: host.clone(),
                port: *port,
                db: settings.db(),
                username: settings.username().map(str::to_string),
                password: settings.password().map(str::to_string),
                connect_timeout,
                response_timeout,
                runtime: tokio::runtime::Handle::try_current()
                    .map_err(|e| RedisError::from(io::Error::other(e)))?,
                link: Mutex::new(None),
                connecting: tokio::sync::Mutex::new(()),
                last_open: Mutex::new((0, None)),
            }),
        };
        connection.wire().await?;
        Ok(connection)
    }

    /// Sends one command; its reply (a server error as [`Value::ServerError`], as the crate's
    /// connections return it).
    pub async fn send_packed_command(&self, cmd: &Cmd) -> RedisResult<Value> {
        let wire = self.wire().await?;
        match wire
            .request(|out| cmd.write_packed_command(out), 0, 1, false)
            .await?
        {
            Replies::One(value) => Ok(value),
            Replies::Many(mut values) => Ok(values.pop().unwrap_or(Value::Nil)),
        }
    }

    /// Sends `pipeline` in one write; its replies past the first `offset`, `count` of them.
    pub async fn send_packed_commands(
        &self,
        pipeline: &Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        let packed = pipeline.get_packed_pipeline();
        let transaction = pipeline.is_transaction();
        let wire = self.wire().await?;
        match wire
            .request(
                |out| out.extend_from_slice(&packed),
                offset,
                count,
                transaction,
            )
            .await?
        {
            Replies::One(value) => Ok(vec![value]),
            Replies::Many(values) => Ok(values),
        }
    }

    /// The database the connection selected.
    pub fn get_db(&self) -> i64 {
        self.shared.db
    }

    /// The current socket, or a new one if there is none or it failed.
    ///
    /// Commands that find no socket share one attempt to open it: those that waited while it
    /// failed get its error, as the crate's `ConnectionManager` fails every command waiting on
    /// its reconnection, instead of each trying (and waiting) in turn.
    async fn wire(&self) -> RedisResult<Arc<Wire>> {
        if let Some(wire) = self.current() {
            return Ok(wire);
        }
        let seen = lock(&self.shared.last_open).0;
        let _connecting = self.shared.connecting.lock().await;
        if let Some(wire) = self.current() {
            return Ok(wire);
        }
        if let (done, Some((kind, why))) = &*lock(&self.shared.last_open)
            && *done != seen
        {
            return Err(io::Error::new(*kind, why.clone()).into());
        }
        // On the runtime, and to the end even if this command is dropped meanwhile: the socket
        // is stored for the next command.
        let shared = self.shared.clone();
        self.shared
            .runtime
            .spawn(async move {
                let bound = shared.connect_timeout;
                let opened = match tokio::time::timeout(bound, open_retrying(&shared)).await {
                    Ok(opened) => opened,
                    Err(_) => Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "no connection within the connect timeout",
                    )
                    .into()),
                };
                let mut last = lock(&shared.last_open);
                last.0 += 1;
                last.1 = match &opened {
                    Ok(wire) => {
                        *lock(&shared.link) = Some(wire.clone());
                        None
                    }
                    Err(e) => io_failure(e).map(|kind| (kind, e.to_string())),
                };
                opened
            })
            .await
            .map_err(|e| RedisError::from(io::Error::other(e)))?
    }

    fn current(&self) -> Option<Arc<Wire>> {
        lock(&self.shared.link)
            .as_ref()
            .filter(|w| !w.failed.load(Ordering::Acquire))
            .cloned()
    }
}

/// The kind of I/O failure `e` is, as the library classifies it (refused: never sent; timed
/// out; else a dropped connection), or `None` for a server's refusal (a wrong password).
fn io_failure(e: &RedisError) -> Option<io::ErrorKind> {
    if e.is_connection_refusal() {
        Some(io::ErrorKind::ConnectionRefused)
    } else if e.is_timeout() {
        Some(io::ErrorKind::TimedOut)
    } else if e.is_io_error() {
        Some(io::ErrorKind::ConnectionReset)
    } else {
        None
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while holding these locks leaves nothing half-done that matters more than
    // failing every later command would.
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// After a failed attempt to open a socket, the pause before the one more it makes.
const REOPEN_PAUSE: Duration = Duration::from_millis(100);

/// [`open`], and once more after [`REOPEN_PAUSE`] if it failed to connect: a server that is
/// restarting (after a crash, or a failover) is back within a moment. The crate's
/// `ConnectionManager` did the same with this library's settings (one retry, 100 ms at least):
/// without it, a command that found a restarting node refused gave up at once, and the lock it
/// was giving back stayed on that node for its TTL.
async fn open_retrying(shared: &Shared) -> RedisResult<Arc<Wire>> {
    match open(shared).await {
        Err(e) if e.is_io_error() => {
            tokio::time::sleep(REOPEN_PAUSE).await;
            open(shared).await
        }
        other => other,
    }
}

/// Opens a socket, starts its reader and writer, and authenticates and selects through it.
async fn open(shared: &Shared) -> RedisResult<Arc<Wire>> {
    let stream = TcpStream::connect((shared.host.as_str(), shared.port)).await?;
    stream.set_nodelay(true)?;
    let (read, write) = stream.into_split();
    let write = Arc::new(write);
    let wire = Arc::new(Wire {
        queue: Mutex::new(Queue {
            out: Vec::with_capacity(4096),
            waiting: VecDeque::new(),
            writing: false,
            failed: None,
            socket: Some(write.clone()),
        }),
        writer: Notify::new(),
        failed: AtomicBool::new(false),
    });
    tokio::spawn(write_loop(wire.clone(), write));
    tokio::spawn(read_loop(wire.clone(), read, shared.response_timeout));
    let handshake = async {
        let send = |cmd: Cmd| {
            let wire = &wire;
            async move {
                match wire
                    .request(|out| cmd.write_packed_command(out), 0, 1, false)
                    .await?
                {
                    Replies::One(Value::ServerError(e)) => Err(RedisError::from(e)),
                    _ => Ok(()),
                }
            }
        };
        if let Some(password) = &shared.password {
            let mut auth = redis::cmd("AUTH");
            if let Some(user) = &shared.username {
                auth.arg(user);
            }
            auth.arg(password);
            send(auth).await?;
        }
        if shared.db != 0 {
            let mut select = redis::cmd("SELECT");
            select.arg(shared.db);
            send(select).await?;
        }
        RedisResult::Ok(())
    };
    if let Err(e) = handshake.await {
        wire.fail(
            io::ErrorKind::NotConnected,
            "the connection's set-up failed",
        );
        return Err(e);
    }
    Ok(wire)
}

impl Wire {
    /// Queues what `encode` writes, expecting `skip + want` replies, and awaits them.
    async fn request(
        &self,
        encode: impl FnOnce(&mut Vec<u8>),
        skip: usize,
        want: usize,
        transaction: bool,
    ) -> RedisResult<Replies> {
        let (tx, rx) = oneshot::channel();
        let (wake, failed) = {
            let mut queue = lock(&self.queue);
            if let Some((kind, why)) = queue.failed {
                // Failed since this socket was taken: nothing was sent.
                return Err(io::Error::new(kind, why).into());
            }
            encode(&mut queue.out);
            queue.waiting.push_back(Waiting {
                skip,
                want,
                transaction,
                refused: None,
                replies: Vec::new(),
                sent: Instant::now(),
                reply: tx,
            });
            let failed = if !queue.writing && queue.waiting.len() <= WRITTEN_THROUGH {
                queue.write_through()
            } else {
                None
            };
            let wake = !queue.out.is_empty() && !std::mem::replace(&mut queue.writing, true);
            (wake, failed)
        };
        if let Some(e) = failed {
            self.fail(io_kind(&e), "writing to the server failed");
        } else if wake {
            self.writer.notify_one();
        }
        match rx.await {
            Ok(replies) => replies,
            Err(_) => {
                Err(io::Error::new(io::ErrorKind::ConnectionAborted, "the connection ended").into())
            }
        }
    }

    /// Ends the socket: every waiting command fails with `kind`, and the tasks stop.
    fn fail(&self, kind: io::ErrorKind, why: &'static str) {
        self.failed.store(true, Ordering::Release);
        let waiting = {
            let mut queue = lock(&self.queue);
            if queue.failed.is_some() {
                return;
            }
            queue.failed = Some((kind, why));
            queue.out = Vec::new();
            queue.socket = None;
            std::mem::take(&mut queue.waiting)
        };
        self.writer.notify_one();
        for w in waiting {
            let _ = w.reply.send(Err(io::Error::new(kind, why).into()));
        }
    }
}

impl Queue {
    /// Writes a command from the task that sends it (the writer task idle, at most
    /// [`WRITTEN_THROUGH`] in flight), as much of it as the socket takes now: no writer task to
    /// wake and wait for (waking it could also wake a parked worker thread, which a trace showed
    /// taking 13 us of a release's send on this project's 2-core machine). W1 (one task) went
    /// from 126 to 116 us p50 with it, W2 (64 tasks) stayed at its floor. What the socket did
    /// not take stays first in `out` for the writer task. Order holds: the writer is idle
    /// (`writing` is false only once it found `out` empty, so `out` holds this command alone)
    /// and the queue stays locked, so nothing else writes to the socket meanwhile. Commands
    /// with more in flight go through the writer task, which batches them. Returns the write's
    /// failure, if it failed (the caller ends the socket).
    fn write_through(&mut self) -> Option<io::Error> {
        let socket = self.socket.as_ref()?;
        match write_now(socket, &self.out) {
            Ok(n) => {
                self.out.drain(..n);
                None
            }
            Err(e) => Some(e),
        }
    }
}

/// Writes whatever the commands queued, one write per batch. On being woken while other
/// commands are in flight, it first lets the tasks that are ready run, so that their commands
/// join this write: that is where the batches come from.
async fn write_loop(wire: Arc<Wire>, socket: Arc<OwnedWriteHalf>) {
    let mut out = Vec::with_capacity(4096);
    loop {
        wire.writer.notified().await;
        // Others in flight: more are likely ready to queue. A lone command (one task locking
        // at a time) goes out at once instead, a scheduling round sooner.
        if lock(&wire.queue).waiting.len() > 1 {
            tokio::task::yield_now().await;
        }
        loop {
            {
                let mut queue = lock(&wire.queue);
                if queue.failed.is_some() {
                    return;
                }
                if queue.out.is_empty() {
                    queue.writing = false;
                    break;
                }
                std::mem::swap(&mut queue.out, &mut out);
            }
            if let Err(e) = write_all(&socket, &out).await {
                wire.fail(io_kind(&e), "writing to the server failed");
                return;
            }
            out.clear();
            if out.capacity() > 1 << 20 {
                out = Vec::with_capacity(4096);
            }
        }
    }
}

/// `buf`, all of it, through the socket shared with [`Queue::write_through`].
async fn write_all(socket: &OwnedWriteHalf, mut buf: &[u8]) -> io::Result<()> {
    while !buf.is_empty() {
        match write_now(socket, buf)? {
            0 => socket.writable().await?,
            n => buf = &buf[n..],
        }
    }
    Ok(())
}

/// As much of `buf` (not empty) as the socket takes without waiting: 0 bytes if it is full,
/// an error if it took none while ready (closed) or failed.
fn write_now(socket: &OwnedWriteHalf, buf: &[u8]) -> io::Result<usize> {
    match socket.try_write(buf) {
        Ok(0) => Err(io::ErrorKind::WriteZero.into()),
        Ok(n) => Ok(n),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(0),
        Err(e) => Err(e),
    }
}

fn io_kind(e: &io::Error) -> io::ErrorKind {
    match e.kind() {
        // Classified as a dropped connection (ambiguous) by the library.
        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => io::ErrorKind::ConnectionReset,
        kind => kind,
    }
}

/// Reads replies and hands each to the request it answers, in order; ends the socket when the
/// oldest request has waited for the response timeout.
async fn read_loop(wire: Arc<Wire>, mut socket: OwnedReadHalf, response_timeout: Duration) {
    let mut buf: Vec<u8> = Vec::with_capacity(16 * 1024);
    let mut start = 0;
    let mut done: Vec<(oneshot::Sender<RedisResult<Replies>>, RedisResult<Replies>)> = Vec::new();
    let deadline = tokio::time::sleep(response_timeout);
    tokio::pin!(deadline);
    loop {
        if buf.capacity() - buf.len() < 4096 {
            buf.drain(..start);
            start = 0;
            buf.reserve(16 * 1024);
        }
        tokio::select! {
            biased;
            read = socket.read_buf(&mut buf) => match read {
                Ok(0) => {
                    wire.fail(io::ErrorKind::UnexpectedEof, "the server closed the connection");
                    return;
                }
                Err(e) => {
                    wire.fail(io_kind(&e), "reading from the server failed");
                    return;
                }
                Ok(_) => {}
            },
            () = &mut deadline => {
                if wire.failed.load(Ordering::Acquire) {
                    // Ended from the writer's side or by the client's drop.
                    return;
                }
                let oldest = lock(&wire.queue).waiting.front().map(|w| w.sent);
                let now = Instant::now();
                match oldest {
                    Some(sent) if now.duration_since(sent) >= response_timeout => {
                        wire.fail(io::ErrorKind::TimedOut, "no reply within the response timeout");
                        return;
                    }
                    Some(sent) => deadline.as_mut().reset((sent + response_timeout).into()),
                    None => deadline.as_mut().reset((now + response_timeout).into()),
                }
                continue;
            }
        }
        let mut queue = lock(&wire.queue);
        loop {
            let value = match resp::parse(&buf[start..]) {
                Ok(Some((value, took))) => {
                    start += took;
                    value
                }
                Ok(None) => break,
                Err(why) => {
                    drop(queue);
                    tracing::warn!("leasehold: unreadable reply from the server: {why}");
                    wire.fail(
                        io::ErrorKind::InvalidData,
                        "an unreadable reply from the server",
                    );
                    return;
                }
            };
            let Some(front) = queue.waiting.front_mut() else {
                drop(queue);
                wire.fail(io::ErrorKind::InvalidData, "a reply to no command");
                return;
            };
            if front.skip > 0 {
                front.skip -= 1;
                if let (true, None, Value::ServerError(e)) =
                    (front.transaction, &front.refused, &value)
                {
                    front.refused = Some(e.clone());
                }
            } else if front.want == 1 && front.replies.is_empty() && front.refused.is_none() {
                let w = queue.waiting.pop_front().expect("the front is there");
                done.push((w.reply, Ok(Replies::One(value))));
                continue;
            } else {
                front.replies.push(value);
            }
            if front.skip == 0 && front.replies.len() >= front.want {
                let w = queue.waiting.pop_front().expect("the front is there");
                let result = match w.refused {
                    Some(e) => Err(e.into()),
                    None => Ok(Replies::Many(w.replies)),
                };
                done.push((w.reply, result));
            }
        }
        drop(queue);
        if start == buf.len() {
            buf.clear();
            start = 0;
        }
        for (reply, result) in done.drain(..) {
            let _ = reply.send(result);
        }
    }
}

#[cfg(test)]
mod tests;
