//! The connection a [`RedisClient`](crate::redis::RedisClient) talks through: the library's
//! batching connection (a standalone server over plain TCP), one of the `redis` crate's
//! multiplexed async connections, a Redis Cluster connection, or a connection that follows a
//! Sentinel-monitored primary.

use std::sync::{Arc, RwLock};

use redis::aio::{
    ConnectionLike, ConnectionManager, ConnectionManagerConfig, MultiplexedConnection,
};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, SingleNodeRoutingInfo, SlotAddr};
use redis::sentinel::SentinelClient;
use redis::{Cmd, Pipeline, RedisFuture, RedisResult, Value};

use crate::redis::batching::BatchingConnection;

/// A cheap-to-clone handle on one multiplexed connection (per node, on a cluster).
///
/// Every clone shares the same socket(s), so commands sent through clones reach a server in the
/// order they were sent. The library relies on that: a compensating release sent after an
/// abandoned acquisition always arrives after it (on a cluster: on the key's node, whose
/// connection all clones share).
#[derive(Clone)]
#[non_exhaustive]
pub enum ClientConnection {
    /// A [`ConnectionManager`], which reconnects after a failure (what [`RedisClient::connect`]
    /// builds for a standalone server).
    ///
    /// [`RedisClient::connect`]: crate::redis::RedisClient::connect
    Manager(ConnectionManager),
    /// A plain [`MultiplexedConnection`] owned by the caller.
    Multiplexed(MultiplexedConnection),
    /// The library's own connection to a standalone server over plain TCP, which batches the
    /// commands of concurrent tasks into one write (what [`RedisClient::connect`] builds for a
    /// `redis://` URL); it too reconnects after a failure.
    ///
    /// [`RedisClient::connect`]: crate::redis::RedisClient::connect
    Batching(BatchingConnection),
    /// A Redis Cluster connection: each command goes to the master of its key's slot, following
    /// `MOVED`/`ASK` redirections and topology changes.
    Cluster(ClusterConnection),
    /// The current primary of a Sentinel-monitored set, re-resolved through the sentinels when
    /// the primary stops answering or turns out to be a replica (after a failover).
    Sentinel(SentinelConnection),
}

impl std::fmt::Debug for ClientConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ClientConnection::Manager(_) => "ClientConnection::Manager",
            ClientConnection::Multiplexed(_) => "ClientConnection::Multiplexed",
            ClientConnection::Batching(_) => "ClientConnection::Batching",
            ClientConnection::Cluster(_) => "ClientConnection::Cluster",
            ClientConnection::Sentinel(_) => "ClientConnection::Sentinel",
        })
    }
}

impl From<ConnectionManager> for ClientConnection {
    fn from(c: ConnectionManager) -> Self {
        ClientConnection::Manager(c)
    }
}

impl From<MultiplexedConnection> for ClientConnection {
    fn from(c: MultiplexedConnection) -> Self {
        ClientConnection::Multiplexed(c)
    }
}

impl From<BatchingConnection> for ClientConnection {
    fn from(c: BatchingConnection) -> Self {
        ClientConnection::Batching(c)
    }
}

impl From<ClusterConnection> for ClientConnection {
    fn from(c: ClusterConnection) -> Self {
        ClientConnection::Cluster(c)
    }
}

impl From<SentinelConnection> for ClientConnection {
    fn from(c: SentinelConnection) -> Self {
        ClientConnection::Sentinel(c)
    }
}

impl ClientConnection {
    /// Whether this is a cluster connection.
    pub fn is_cluster(&self) -> bool {
        matches!(self, ClientConnection::Cluster(_))
    }

    /// Sends `pipe` to the master that owns `key`'s slot as one request on one connection (on a
    /// cluster; elsewhere there is only one server), and returns every reply. For pipelines
    /// that end in a keyless command whose meaning depends on the connection, such as `WAIT`
    /// after a write of `key`: a retry after a redirection or a lost connection repeats the
    /// whole pipeline, never the keyless command alone.
    pub(crate) async fn pipeline_on_key_master(
        &mut self,
        key: &str,
        pipe: Pipeline,
    ) -> RedisResult<Vec<Value>> {
        let count = pipe.len();
        match self {
            ClientConnection::Cluster(c) => {
                let route = Route::new(crate::redis::slot::key_slot(key), SlotAddr::Master);
                c.route_pipeline(pipe, 0, count, SingleNodeRoutingInfo::SpecificNode(route))
                    .await
            }
            other => pipe.query_async(other).await,
        }
    }
}

impl ConnectionLike for ClientConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        crate::core::metrics::round_trip();
        // One box per command: the standalone connections' own sends run inside this future
        // (their `req_packed_command` only boxes the same send once more).
        let reply = match self {
            ClientConnection::Manager(c) => {
                return Box::pin(
                    async move { checked_reply(cmd, c.send_packed_command(cmd).await) },
                );
            }
            ClientConnection::Multiplexed(c) => {
                return Box::pin(
                    async move { checked_reply(cmd, c.send_packed_command(cmd).await) },
                );
            }
            ClientConnection::Batching(c) => {
                return Box::pin(
                    async move { checked_reply(cmd, c.send_packed_command(cmd).await) },
                );
            }
            ClientConnection::Cluster(c) => c.req_packed_command(cmd),
            ClientConnection::Sentinel(c) => c.req_packed_command(cmd),
        };
        Box::pin(async move { checked_reply(cmd, reply.await) })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        crate::core::metrics::round_trip();
        let replies = match self {
            ClientConnection::Manager(c) => {
                return Box::pin(async move {
                    let replies = c.send_packed_commands(pipeline, offset, count).await;
                    replies.map_err(unreadable)
                });
            }
            ClientConnection::Multiplexed(c) => {
                return Box::pin(async move {
                    let replies = c.send_packed_commands(pipeline, offset, count).await;
                    replies.map_err(unreadable)
                });
            }
            ClientConnection::Batching(c) => {
                return Box::pin(async move {
                    let replies = c.send_packed_commands(pipeline, offset, count).await;
                    replies.map_err(unreadable)
                });
            }
            ClientConnection::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
            ClientConnection::Sentinel(c) => c.req_packed_commands(pipeline, offset, count),
        };
        Box::pin(async move { replies.await.map_err(unreadable) })
    }

    fn get_db(&self) -> i64 {
        match self {
            ClientConnection::Manager(c) => c.get_db(),
            ClientConnection::Multiplexed(c) => c.get_db(),
            ClientConnection::Batching(c) => c.get_db(),
            ClientConnection::Cluster(c) => c.get_db(),
            ClientConnection::Sentinel(c) => c.get_db(),
        }
    }
}

/// `cmd`'s reply as it came out of a connection, checked: unreadable bytes are an I/O error
/// ([`unreadable`]), and `SCRIPT LOAD` must answer the script's hash ([`check_script_hash`]).
pub(crate) fn checked_reply(cmd: &Cmd, reply: RedisResult<Value>) -> RedisResult<Value> {
    let reply = reply.map_err(unreadable)?;
    match script_load_body(cmd) {
        Some(body) => check_script_hash(body, reply),
        None => Ok(reply),
    }
}

/// A reply the connection could not read as RESP, as the I/O error it is.
///
/// The redis crate reports bytes that are not RESP (a bad type byte, a bad length, a reply cut
/// short by a closed connection) with the same `ErrorKind::Parse` as a well-formed reply of an
/// unexpected type, which the library reports as [`Error::UnexpectedReply`](crate::Error), not
/// ambiguous. But coming out of the connection, before any conversion, it means the command was
/// sent and no readable answer came back (the connection is dropped): the server may have
/// applied it, so it must be an ambiguous [`Error::Connection`](crate::Error).
pub(crate) fn unreadable(e: redis::RedisError) -> redis::RedisError {
    if e.kind() != redis::ErrorKind::Parse {
        return e;
    }
    std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        format!("unreadable reply from the server: {e}"),
    )
    .into()
}

/// The script of a `SCRIPT LOAD` command (the one `Script::invoke_async` sends after
/// `NOSCRIPT`).
fn script_load_body(cmd: &Cmd) -> Option<&str> {
    let mut args = cmd.args_iter().map(|a| match a {
        redis::Arg::Simple(bytes) => Some(bytes),
        _ => None,
    });
    let is = |arg: Option<Option<&[u8]>>, word: &[u8]| {
        arg.flatten().is_some_and(|a| a.eq_ignore_ascii_case(word))
    };
    if !is(args.next(), b"SCRIPT") || !is(args.next(), b"LOAD") {
        return None;
    }
    std::str::from_utf8(args.next()??).ok()
}

/// `SCRIPT LOAD`'s reply, if it is the script's hash; an error otherwise.
///
/// The redis crate compares that reply with the script's hash in a `debug_assert_eq!`: in a
/// debug build, a server (or a proxy) answering anything else made the client *panic*. Checked
/// here first, it is an ordinary error ([`Error::UnexpectedReply`](crate::Error)).
fn check_script_hash(body: &str, reply: Value) -> RedisResult<Value> {
    let expected = redis::Script::new(body);
    let expected = expected.get_hash();
    let ok = match &reply {
        Value::BulkString(b) => b == expected.as_bytes(),
        Value::SimpleString(s) => s == expected,
        Value::VerbatimString { text, .. } => text == expected,
        // A refusal is for the caller to report as such.
        Value::ServerError(_) => true,
        _ => false,
    };
    if ok {
        return Ok(reply);
    }
    Err(redis::RedisError::from((
        redis::ErrorKind::UnexpectedReturnType,
        "SCRIPT LOAD did not answer the script's hash",
        format!("expected {expected}, got {reply:?}"),
    )))
}

/// A connection to the current primary of a Sentinel-monitored set.
///
/// It holds a [`ConnectionManager`] to the primary the sentinels named. When a request fails
/// with a connection error, or the server answers `READONLY` (the old primary came back as a
/// replica), it asks the sentinels again and, if they name another primary, switches every clone
/// to a new connection to it. The failed request is not replayed here: the lock operations that
/// are safe to repeat (token-checked release and extend) retry once themselves, and reach the
/// new primary.
#[derive(Clone)]
pub struct SentinelConnection {
    shared: Arc<SentinelShared>,
}

struct SentinelShared {
    sentinel: tokio::sync::Mutex<SentinelClient>,
    current: RwLock<Current>,
    config: ConnectionManagerConfig,
}

#[derive(Clone)]
struct Current {
    generation: u64,
    addr: String,
    client: redis::Client,
    manager: ConnectionManager,
}

impl SentinelConnection {
    /// Asks the sentinels for the primary and connects to it.
    pub(crate) async fn connect(
        mut sentinel: SentinelClient,
        config: ConnectionManagerConfig,
    ) -> RedisResult<Self> {
        let client = sentinel.async_get_client().await?;
        let addr = client.get_connection_info().addr().to_string();
        let manager = client
            .get_connection_manager_with_config(config.clone())
            .await?;
        Ok(SentinelConnection {
            shared: Arc::new(SentinelShared {
                sentinel: tokio::sync::Mutex::new(sentinel),
                current: RwLock::new(Current {
                    generation: 0,
                    addr,
                    client,
                    manager,
                }),
                config,
            }),
        })
    }

    fn current(&self) -> Current {
        self.shared
            .current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The address of the primary this connection talks to now (`host:port`).
    pub fn primary_addr(&self) -> String {
        self.current().addr
    }

    /// A client for the current primary (the subscriber for release notifications opens its
    /// own connection with it).
    pub(crate) fn current_client(&self) -> redis::Client {
        self.current().client
    }

    /// Asks the sentinels for the primary again after a failure seen on connection
    /// `generation`; switches if they name another one. A failure seen by many requests at once
    /// causes one switch: later ones find the generation moved on.
    async fn refresh(&self, generation: u64) {
        let mut sentinel = self.shared.sentinel.lock().await;
        if self.current().generation != generation {
            return;
        }
        let client = match sentinel.async_get_client().await {
            Ok(c) => c,
            Err(e) => {
                tracing::debug!(error = %e, "sentinels did not name a primary");
                return;
            }
        };
        let addr = client.get_connection_info().addr().to_string();
        if addr == self.current().addr {
            return; // same primary: its ConnectionManager reconnects by itself
        }
        match client
            .get_connection_manager_with_config(self.shared.config.clone())
            .await
        {
            Ok(manager) => {
                tracing::info!(primary = %addr, "sentinels named a new primary; switching");
                let mut current = self
                    .shared
                    .current
                    .write()
                    .unwrap_or_else(|p| p.into_inner());
                *current = Current {
                    generation: generation + 1,
                    addr,
                    client,
                    manager,
                };
            }
            Err(e) => tracing::debug!(error = %e, %addr, "cannot connect to the new primary yet"),
        }
    }
}

/// Whether a failure means the primary may have moved.
fn primary_may_have_moved(error: &redis::RedisError) -> bool {
    error.is_io_error()
        || error.is_connection_dropped()
        || error.is_connection_refusal()
        || error.is_timeout()
        || matches!(error.code(), Some("READONLY") | Some("MASTERDOWN"))
}

fn reply_says_readonly(values: &[Value]) -> bool {
    values
        .iter()
        .any(|v| matches!(v, Value::ServerError(e) if e.code() == "READONLY"))
}

impl ConnectionLike for SentinelConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let Current {
                generation,
                mut manager,
                ..
            } = self.current();
            let reply = manager.req_packed_command(cmd).await;
            let moved = match &reply {
                Err(e) => primary_may_have_moved(e),
                Ok(v) => reply_says_readonly(std::slice::from_ref(v)),
            };
            if moved {
                self.refresh(generation).await;
            }
            reply
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let Current {
                generation,
                mut manager,
                ..
            } = self.current();
            let reply = manager.req_packed_commands(pipeline, offset, count).await;
            let moved = match &reply {
                Err(e) => primary_may_have_moved(e),
                Ok(v) => reply_says_readonly(v),
            };
            if moved {
                self.refresh(generation).await;
            }
            reply
        })
    }

    fn get_db(&self) -> i64 {
        self.current().manager.get_db()
    }
}
