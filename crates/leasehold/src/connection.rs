//! The connection a [`LockClient`](crate::LockClient) talks through: one of the `redis` crate's
//! multiplexed async connections, ours or the caller's.

use redis::aio::{ConnectionLike, ConnectionManager, MultiplexedConnection};
use redis::{Cmd, Pipeline, RedisFuture, Value};

/// A cheap-to-clone handle on one multiplexed connection.
///
/// Every clone shares the same socket, so commands sent through clones reach the server in the
/// order they were sent. The library relies on that: a compensating release sent after an
/// abandoned acquisition always arrives after it.
#[derive(Clone)]
#[non_exhaustive]
pub enum ClientConnection {
    /// A [`ConnectionManager`], which reconnects after a failure (what [`LockClient::connect`]
    /// builds).
    ///
    /// [`LockClient::connect`]: crate::LockClient::connect
    Manager(ConnectionManager),
    /// A plain [`MultiplexedConnection`] owned by the caller.
    Multiplexed(MultiplexedConnection),
}

impl std::fmt::Debug for ClientConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ClientConnection::Manager(_) => "ClientConnection::Manager",
            ClientConnection::Multiplexed(_) => "ClientConnection::Multiplexed",
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

impl ConnectionLike for ClientConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            ClientConnection::Manager(c) => c.req_packed_command(cmd),
            ClientConnection::Multiplexed(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            ClientConnection::Manager(c) => c.req_packed_commands(pipeline, offset, count),
            ClientConnection::Multiplexed(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            ClientConnection::Manager(c) => c.get_db(),
            ClientConnection::Multiplexed(c) => c.get_db(),
        }
    }
}
