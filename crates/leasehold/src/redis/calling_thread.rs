//! Round trips on the calling thread's own socket, inside [`blocking_call`].
//!
//! A standalone client opened by URL keeps, per thread that makes [`blocking_call`]s, one
//! synchronous connection of the `redis` crate (opened on the thread's first such call, with the
//! client's URL, credentials and timeouts). A command that thread sends while it polls the
//! call's future goes out and is read back there, blocking, as redis-py does: no runtime thread
//! is woken, and the reply wakes nobody. Everything else keeps the client's shared multiplexed
//! connection: tasks on the runtime's threads (renewals, the cleanup of an abandoned attempt,
//! background releases), the subscriber, a Cluster, Sentinel and a caller's own connection.
//!
//! **Why safety does not depend on the route.** Every lock command is token-checked, and a call
//! sends its next command only after the reply to the one before, so commands of one call reach
//! the server in order whichever socket they take. The rest is about the sockets themselves:
//! - *A reply is never taken for another command's.* A socket whose round trip failed (an I/O
//!   error, a timeout, a reply it could not read) is closed, not kept: its late reply could
//!   otherwise answer the next command. Only a whole reply (a server error among them) keeps it.
//! - *An abandoned attempt is given back.* A command is written when the call hands it over and
//!   its reply read at the call's next poll. A call dropped in between closes the socket (the
//!   reply is never read); a reply that is lost (timeout, broken connection) makes the attempt
//!   ambiguous. Either way the give-back travels on the shared connection, which may reach the
//!   server before the attempt only if the server had not yet read the attempt from the closed
//!   socket; then the lock stays until its TTL, as with a broken shared connection.
//! - *Order across sockets.* Commands one call sends reach the server in order (each waits for
//!   the reply before it). Commands of different threads, or of a thread and the runtime, travel
//!   on different sockets, ordered only in time: a fair release's early handoff (`redis::fair`)
//!   lets the new holder send its release or extend only after the release's reply, and an
//!   extend that overtook it anyway would report the lease lost, never grant it twice.
//!
//! [`blocking_call`]: crate::blocking_call

use std::cell::RefCell;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use redis::{Cmd, ConnectionLike as _, Pipeline, RedisFuture, RedisResult, Value};

use crate::redis::connection::{ClientConnection, checked_reply, unreadable};

/// After a thread failed to open its socket, how long its calls take the shared connection
/// before it tries again (a server that is down must not cost every call a connect attempt).
const RETRY_OPEN_AFTER: Duration = Duration::from_secs(1);

/// Where a client's calling threads open their sockets.
#[derive(Debug)]
pub(crate) struct CallerSockets {
    client: redis::Client,
    connect_timeout: Duration,
    response_timeout: Duration,
}

/// One thread's socket for one client.
struct Socket {
    owner: Weak<CallerSockets>,
    /// `None` after a failed open, until `retry_at`.
    conn: Option<redis::Connection>,
    retry_at: Instant,
}

/// This thread's sockets, and the process they were opened in.
struct Sockets {
    pid: u32,
    open: Vec<Socket>,
}

thread_local! {
    static SOCKETS: RefCell<Sockets> = RefCell::new(Sockets {
        pid: std::process::id(),
        open: Vec::new(),
    });
}

impl CallerSockets {
    pub(crate) fn new(
        client: redis::Client,
        connect_timeout: Duration,
        response_timeout: Duration,
    ) -> Arc<Self> {
        Arc::new(CallerSockets {
            client,
            connect_timeout,
            response_timeout,
        })
    }

    /// `cmd` written on this thread's socket, if the thread is inside a blocking call (`None`:
    /// take the shared connection); its reply is read when the returned future is polled again.
    ///
    /// The write happens now and the read on the next poll (the future wakes itself at once),
    /// not in one go: a caller that polls once to put its command on the wire before doing
    /// something else (a plain release, which then wakes its client's waiters,
    /// `RedisClient::release_raw`) still gets that gap.
    pub(crate) fn command(self: &Arc<Self>, cmd: &Cmd) -> Option<CallerReply> {
        let mut conn = self.ready()?;
        Some(match conn.send_packed_command(&cmd.get_packed_command()) {
            // A write that failed may have sent part of the command: the socket is closed.
            Err(e) => CallerReply::Failed(e),
            Ok(()) => CallerReply::Sent {
                owner: self.clone(),
                conn,
                polled: false,
            },
        })
    }

    /// `pipeline`'s replies `offset..offset + count` on this thread's socket, as
    /// [`command`](Self::command).
    pub(crate) fn pipeline(
        self: &Arc<Self>,
        pipeline: &Pipeline,
        offset: usize,
        count: usize,
    ) -> Option<RedisResult<Vec<Value>>> {
        self.round_trip(|conn| {
            conn.req_packed_commands(&pipeline.get_packed_pipeline(), offset, count)
        })
    }

    fn round_trip<T>(
        self: &Arc<Self>,
        send: impl FnOnce(&mut redis::Connection) -> RedisResult<T>,
    ) -> Option<RedisResult<T>> {
        let mut conn = self.ready()?;
        let result = send(&mut conn);
        self.after(conn, &result);
        Some(result)
    }

    /// This thread's socket, taken out for a round trip (nothing stays borrowed while the thread
    /// blocks), if the thread is inside a blocking call and has or can open one.
    fn ready(self: &Arc<Self>) -> Option<redis::Connection> {
        if !crate::core::calling_thread::in_blocking_call() {
            return None;
        }
        self.take()
    }

    /// Puts `conn` back after a round trip that ended with `result`, if it is in step: after a
    /// whole reply (a server's refusal among them). Any other error may leave a reply unread on
    /// it, so it is closed.
    fn after<T>(self: &Arc<Self>, conn: redis::Connection, result: &RedisResult<T>) {
        let in_step = match result {
            Ok(_) => true,
            Err(e) => matches!(e.kind(), redis::ErrorKind::Server(_)) && conn.is_open(),
        };
        if in_step {
            self.put_back(conn);
        }
    }

    /// This thread's socket for this client, opened if it has none (`None` if it cannot be
    /// opened now).
    fn take(self: &Arc<Self>) -> Option<redis::Connection> {
        let found = SOCKETS.try_with(|s| {
            let mut sockets = s.borrow_mut();
            // A forked child's copies of its parent's sockets: the clients they belong to
            // refuse use in a child (the Python package checks), so none is read here; they are
            // forgotten, not closed, so nothing of the child's touches the parent's sessions.
            if sockets.pid != std::process::id() {
                sockets.pid = std::process::id();
                std::mem::forget(std::mem::take(&mut sockets.open));
            }
            sockets.open.retain(|s| s.owner.strong_count() > 0);
            let mine = sockets
                .open
                .iter()
                .position(|s| std::ptr::eq(s.owner.as_ptr(), Arc::as_ptr(self)));
            mine.map(|i| sockets.open.swap_remove(i))
        });
        // At the thread's end (its sockets dropped): the shared connection.
        let found = found.ok()?;
        match found {
            Some(Socket {
                conn: Some(conn), ..
            }) => Some(conn),
            Some(failed) if failed.retry_at > Instant::now() => {
                self.remember(failed);
                None
            }
            _ => match self.open() {
                Ok(conn) => Some(conn),
                Err(e) => {
                    tracing::debug!(error = %e, "no socket of its own for this thread: the shared connection carries its calls");
                    self.remember(Socket {
                        owner: Arc::downgrade(self),
                        conn: None,
                        retry_at: Instant::now() + RETRY_OPEN_AFTER,
                    });
                    None
                }
            },
        }
    }

    fn open(&self) -> RedisResult<redis::Connection> {
        let conn = self
            .client
            .get_connection_with_timeout(self.connect_timeout)?;
        conn.set_read_timeout(Some(self.response_timeout))?;
        conn.set_write_timeout(Some(self.response_timeout))?;
        Ok(conn)
    }

    fn put_back(self: &Arc<Self>, conn: redis::Connection) {
        self.remember(Socket {
            owner: Arc::downgrade(self),
            conn: Some(conn),
            retry_at: Instant::now(),
        });
    }

    /// Keeps `socket` as this thread's for its client, unless the thread has one already (a
    /// second command of one call opened it while the first was in flight): one is enough. At
    /// the thread's end (its sockets already dropped), `socket` is dropped too.
    fn remember(&self, socket: Socket) {
        let _ = SOCKETS.try_with(|s| {
            let mut sockets = s.borrow_mut();
            let mine = |s: &Socket| std::ptr::eq(s.owner.as_ptr(), socket.owner.as_ptr());
            if !sockets.open.iter().any(mine) {
                sockets.open.push(socket);
            }
        });
    }
}

/// A command's reply on the calling thread's socket: read (blocking) on the second poll, the
/// first having only woken the task (see [`CallerSockets::command`]). Dropped before its read,
/// it closes the socket, whose reply would otherwise answer the thread's next command.
pub(crate) enum CallerReply {
    /// The write failed (the socket is closed).
    Failed(redis::RedisError),
    /// Written; the reply is still on the socket.
    Sent {
        owner: Arc<CallerSockets>,
        conn: redis::Connection,
        polled: bool,
    },
    /// Its reply or its error was handed out.
    Ended,
}

impl std::future::Future for CallerReply {
    type Output = RedisResult<Value>;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<RedisResult<Value>> {
        use std::task::Poll;
        let this = self.get_mut();
        match std::mem::replace(this, CallerReply::Ended) {
            CallerReply::Failed(e) => Poll::Ready(Err(e)),
            CallerReply::Sent {
                owner,
                conn,
                polled: false,
            } => {
                *this = CallerReply::Sent {
                    owner,
                    conn,
                    polled: true,
                };
                cx.waker().wake_by_ref();
                Poll::Pending
            }
            CallerReply::Sent {
                owner, mut conn, ..
            } => {
                // As the redis crate's own round trip: pushes (RESP3) are not replies.
                let reply = loop {
                    match conn.recv_response() {
                        Ok(Value::Push { .. }) => continue,
                        other => break other,
                    }
                };
                owner.after(conn, &reply);
                Poll::Ready(reply)
            }
            CallerReply::Ended => Poll::Ready(Err(redis::RedisError::from((
                redis::ErrorKind::Client,
                "polled after it ended",
            )))),
        }
    }
}

/// The connection a client's lock operations take: this thread's own socket inside a
/// [`blocking_call`](crate::blocking_call) (a standalone client opened by URL), the shared
/// connection otherwise.
#[derive(Clone)]
pub(crate) struct RoutedConnection {
    shared: ClientConnection,
    caller: Option<Arc<CallerSockets>>,
}

impl RoutedConnection {
    pub(crate) fn new(shared: ClientConnection, caller: Option<Arc<CallerSockets>>) -> Self {
        RoutedConnection { shared, caller }
    }

    /// The shared connection alone (for commands routed by node, such as a cluster's `SCAN`).
    pub(crate) fn into_shared(self) -> ClientConnection {
        self.shared
    }

    /// [`ClientConnection::pipeline_on_key_master`], routed (one server, so one socket, either
    /// way).
    pub(crate) async fn pipeline_on_key_master(
        &mut self,
        key: &str,
        pipe: Pipeline,
    ) -> RedisResult<Vec<Value>> {
        match self.shared.is_cluster() {
            true => self.shared.pipeline_on_key_master(key, pipe).await,
            false => pipe.query_async(self).await,
        }
    }
}

// The route is chosen when the command is handed to the connection, which happens while the
// thread polls the call (`query_async`, `invoke_async` and `Pipeline::query_async` are async
// functions): the thread that chooses is the thread that polls. The shared route adds nothing
// to the command's future (no box around the connection's own).
impl redis::aio::ConnectionLike for RoutedConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self.caller.as_ref().and_then(|c| c.command(cmd)) {
            Some(reply) => {
                crate::core::metrics::round_trip();
                Box::pin(async move { checked_reply(cmd, reply.await) })
            }
            None => self.shared.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        let caller = self.caller.as_ref();
        match caller.and_then(|c| c.pipeline(pipeline, offset, count)) {
            Some(replies) => {
                crate::core::metrics::round_trip();
                Box::pin(std::future::ready(replies.map_err(unreadable)))
            }
            None => self.shared.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        self.shared.get_db()
    }
}
