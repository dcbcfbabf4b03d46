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
    /// as soon as the lock is released instead of at their next poll (see `src/redis/waiting.rs`).
    /// Off: releases are one bare command, waiters poll.
    pub fn notify_waiters(mut self, on: bool) -> Self {
        self.notify_waiters = on;
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
