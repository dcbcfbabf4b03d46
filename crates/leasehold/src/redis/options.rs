//! [`RedisOptions`]: what a [`RedisClient`](crate::redis::RedisClient) takes beyond the options every
//! backend takes.

use std::time::Duration;

use crate::core::options::ClientOptions;
use crate::redis::strategy::{ExtendStrategy, ReleaseStrategy};

/// Options for a [`RedisClient`](crate::redis::RedisClient): the [`ClientOptions`] of every backend,
/// and what only Redis and Valkey have (release and extend strategies, release
/// notifications). A `ClientOptions` converts into it with the Redis defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisOptions {
    pub(crate) client: ClientOptions,
    pub(crate) release: ReleaseStrategy,
    pub(crate) extend: ExtendStrategy,
    pub(crate) notify_waiters: bool,
    pub(crate) track_waiters: bool,
    pub(crate) batch_commands: bool,
}

impl Default for RedisOptions {
    /// The [`ClientOptions`] defaults, strategies detected from the server, release
    /// notifications on.
    fn default() -> Self {
        ClientOptions::default().into()
    }
}

impl From<ClientOptions> for RedisOptions {
    fn from(client: ClientOptions) -> Self {
        RedisOptions {
            client,
            release: ReleaseStrategy::Auto,
            extend: ExtendStrategy::Auto,
            notify_waiters: true,
            track_waiters: true,
            batch_commands: true,
        }
    }
}

impl RedisOptions {
    /// The defaults.
    pub fn new() -> Self {
        Self::default()
    }

    /// Release notifications (default on): every release publishes the key on
    /// [`release_channel`](crate::redis::release_channel) in the same round trip, and waiting
    /// acquisitions subscribe to it (one shared subscriber connection per client) so they retry
    /// as soon as the lock is released instead of at their next poll (see `src/redis/waiting`).
    /// Where waiters track their keys ([`track_waiters`](Self::track_waiters), on by default on
    /// one server), the plain lock's releases publish nothing: the key's deletion wakes them.
    /// Off: releases are one bare command, waiters poll.
    pub fn notify_waiters(mut self, on: bool) -> Self {
        self.notify_waiters = on;
        self
    }

    /// Waiters woken by the server's key tracking (default on, where notifications are on):
    /// on one server (standalone or Sentinel), a waiting client's subscriber connection turns
    /// on `CLIENT TRACKING` and reads the key it waits for, and the server tells it when the
    /// key is deleted, expires or changes. A release of a plain lock is then its one
    /// token-checked delete, with no `PUBLISH`. Other primitives' releases, and every release
    /// on a Cluster (where tracking is per node), still publish. It needs `+hello` and
    /// `+client|tracking` in an ACL rule; without them the client publishes as before.
    ///
    /// A waiter in another client then wakes one round trip later than a message would wake it
    /// (its client reads the key to confirm it is gone); waiters in the releasing client are
    /// woken at once.
    ///
    /// Off: the plain lock's releases publish, as they did before tracking, for waiters that
    /// do not track (earlier leasehold builds, a client whose ACL refuses tracking); with it
    /// on, such waiters still wake, but at their next poll (the backoff, or the holder's
    /// remaining lease).
    pub fn track_waiters(mut self, on: bool) -> Self {
        self.track_waiters = on;
        self
    }

    /// The library's batching connection for a standalone `redis://` URL (default on): the
    /// commands of concurrent tasks share one socket and go out together in one write
    /// ([`BatchingConnection`](crate::redis::BatchingConnection)). Off: the `redis` crate's
    /// `ConnectionManager`, as TLS, Unix sockets, Cluster and Sentinel always use. A Redlock's
    /// nodes turn it off (see `redlock::nodes`).
    pub fn batch_commands(mut self, on: bool) -> Self {
        self.batch_commands = on;
        self
    }

    /// Forces a release strategy instead of the fastest one the server offers. Connecting fails
    /// if the server lacks it.
    pub fn release_strategy(mut self, strategy: ReleaseStrategy) -> Self {
        self.release = strategy;
        self
    }

    /// Forces an extend strategy instead of the fastest one the server offers.
    pub fn extend_strategy(mut self, strategy: ExtendStrategy) -> Self {
        self.extend = strategy;
        self
    }

    /// [`ClientOptions::connect_timeout`].
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.client = self.client.connect_timeout(timeout);
        self
    }

    /// [`ClientOptions::response_timeout`].
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.client = self.client.response_timeout(timeout);
        self
    }

    /// [`ClientOptions::tls_ca_file`].
    pub fn tls_ca_file(mut self, path: impl Into<std::path::PathBuf>) -> Self {
        self.client = self.client.tls_ca_file(path);
        self
    }

    /// [`ClientOptions::tls_cert_file`].
    pub fn tls_cert_file(mut self, path: impl Into<std::path::PathBuf>) -> Self {
        self.client = self.client.tls_cert_file(path);
        self
    }

    /// [`ClientOptions::tls_key_file`].
    pub fn tls_key_file(mut self, path: impl Into<std::path::PathBuf>) -> Self {
        self.client = self.client.tls_key_file(path);
        self
    }
}
