//! Connecting a [`RedisClient`], and detecting what the server offers.

use std::sync::{Arc, OnceLock};

use crate::core::error::{Error, Operation, Result};
use crate::redis::calling_thread::CallerSockets;
use crate::redis::connection::ClientConnection;
use crate::redis::endpoint::Endpoint;
use crate::redis::options::RedisOptions;
use crate::redis::server::ServerInfo;
use crate::redis::waiting::Notifier;

use super::{ClientInner, RedisClient};

fn timeout_error(op: Operation, what: &str) -> Error {
    Error::Connection {
        op,
        ambiguous: false,
        source: std::io::Error::new(std::io::ErrorKind::TimedOut, what.to_string()).into(),
    }
}

impl RedisClient {
    /// Connects to `url` with default [`RedisOptions`]. Any form [`Endpoint::parse`] accepts:
    /// `redis://[user:password@]host:port/db` (also `valkey://`, and `rediss://` for TLS) for
    /// one server, `redis-cluster://host:port[,host:port…]` for a Redis Cluster,
    /// `redis-sentinel://host:port[,host:port…]#master` for a Sentinel-monitored primary.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a malformed URL, [`Error::Authentication`] for refused
    /// credentials, [`Error::Topology`] when the server is not what the URL says (a cluster
    /// URL to a server without cluster support, a plain URL to a cluster node, an unknown
    /// Sentinel master name), [`Error::Connection`] if no server can be reached or none answers
    /// within the connect timeout (5 s by default).
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(url, RedisOptions::default()).await
    }

    /// Connects to `url` with the given options ([`RedisOptions`], or the
    /// [`ClientOptions`](crate::ClientOptions) every backend takes).
    ///
    /// # Errors
    /// As [`RedisClient::connect`]; also [`Error::InvalidArgument`] when a forced strategy is not
    /// offered by the server.
    pub async fn connect_with(url: &str, options: impl Into<RedisOptions>) -> Result<Self> {
        Self::connect_to(&Endpoint::parse(url)?, options).await
    }

    /// Connects to a Redis Cluster through one or more of its nodes (`redis://host:port/`).
    /// Every key a lock operation touches lives in the lock key's slot (see `src/redis/slot`).
    ///
    /// # Errors
    /// As [`RedisClient::connect`].
    pub async fn connect_cluster<S: AsRef<str>>(
        seeds: &[S],
        options: impl Into<RedisOptions>,
    ) -> Result<Self> {
        let seeds = seeds.iter().map(|s| s.as_ref().to_string());
        Self::connect_to(&Endpoint::cluster(seeds), options).await
    }

    /// Connects to the primary that the sentinels (`redis://host:port/`) name `master`, and
    /// follows it through failovers.
    ///
    /// # Errors
    /// As [`RedisClient::connect`].
    pub async fn connect_sentinel<S: AsRef<str>>(
        sentinels: &[S],
        master: &str,
        options: impl Into<RedisOptions>,
    ) -> Result<Self> {
        let sentinels = sentinels.iter().map(|s| s.as_ref().to_string());
        Self::connect_to(&Endpoint::sentinel(sentinels, master), options).await
    }

    /// Connects to `endpoint`.
    ///
    /// # Errors
    /// As [`RedisClient::connect`].
    pub async fn connect_to(endpoint: &Endpoint, options: impl Into<RedisOptions>) -> Result<Self> {
        let options = options.into();
        let bound = options.client.connect_timeout;
        let root_cert = crate::redis::topology::read_tls_files(&options.client)?;
        // Boxed: the connection futures of every topology nest deep enough to overflow the
        // compiler's layout depth limit in callers that embed this one.
        // A standalone server's calling threads may open sockets of their own
        // (`redis::calling_thread`).
        let caller = match endpoint {
            Endpoint::Standalone(url) => Some(CallerSockets::new(
                crate::redis::topology::client_for(url, &root_cert)?,
                options.client.connect_timeout,
                options.client.response_timeout,
            )),
            _ => None,
        };
        let connect = Box::pin(async {
            let (conn, source) = crate::redis::topology::open(
                endpoint,
                &options.client,
                root_cert,
                options.batch_commands,
            )
            .await?;
            let notifier = options
                .notify_waiters
                .then(|| Notifier::new(source, options.client.connect_timeout));
            Self::build(conn, options, notifier, caller).await
        });
        // The client's own timeouts bound each step; this bounds them all together.
        tokio::time::timeout(bound, connect)
            .await
            .map_err(|_| timeout_error(Operation::Connect, "no answer within the connect timeout"))?
            .map_err(crate::core::tls::client_certificate_refusal)
    }

    /// Wraps a connection the caller already has (a [`redis::aio::ConnectionManager`] or
    /// [`redis::aio::MultiplexedConnection`]), detecting the server's capabilities once.
    ///
    /// ```no_run
    /// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
    /// let client = redis::Client::open("redis://127.0.0.1:6379/")?;
    /// let manager = client.get_connection_manager().await?;
    /// let locks = leasehold::redis::RedisClient::from_connection(manager).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// Releases still publish notifications (unless turned off), but this client's own waiters
    /// poll: waking them needs a subscriber connection, which only [`RedisClient::connect`] can
    /// open (it knows the URL).
    ///
    /// # Errors
    /// [`Error::Connection`] or [`Error::Authentication`] if detection fails.
    pub async fn from_connection(conn: impl Into<ClientConnection>) -> Result<Self> {
        Self::with_connection(conn, RedisOptions::default()).await
    }

    /// As [`RedisClient::from_connection`], with options (forced strategies; the timeouts are
    /// the connection's own).
    ///
    /// # Errors
    /// As [`RedisClient::from_connection`]; [`Error::InvalidArgument`] when a forced strategy is
    /// not offered by the server.
    pub async fn with_connection(
        conn: impl Into<ClientConnection>,
        options: impl Into<RedisOptions>,
    ) -> Result<Self> {
        Self::build(conn.into(), options.into(), None, None).await
    }

    async fn build(
        mut conn: ClientConnection,
        options: RedisOptions,
        notifier: Option<Notifier>,
        caller: Option<Arc<CallerSockets>>,
    ) -> Result<Self> {
        let probe_tracking = notifier.is_some() && options.notify_waiters && options.track_waiters;
        let server = ServerInfo::detect(&mut conn, probe_tracking).await?;
        if server.cluster_enabled && !conn.is_cluster() {
            return Err(Error::Topology {
                reason: format!(
                    "the server ({server}) is a Redis Cluster node: connect with \
                     redis-cluster://host:port (the CLI: --cluster), or keys of other slots \
                     would be refused with MOVED"
                ),
            });
        }
        let release = server.release_strategy(options.release)?;
        let extend = server.extend_strategy(options.extend)?;
        let notify_waiters = options.notify_waiters && server.can_publish;
        if options.notify_waiters && !server.can_publish {
            tracing::info!("PUBLISH not allowed on leasehold's channels (ACL): waiters will poll");
        }
        let waiters_track = probe_tracking && notify_waiters && server.can_track;
        if probe_tracking && !server.can_track && !conn.is_cluster() {
            tracing::info!(
                "HELLO or CLIENT TRACKING not allowed (ACL): plain releases publish, and this \
                 client's waiters are woken by those messages"
            );
        }
        let notifier = notifier
            .filter(|_| notify_waiters)
            .map(|n| n.tracking(waiters_track));
        tracing::debug!(%server, %release, %extend, "leasehold connected");
        Ok(RedisClient {
            inner: Arc::new(ClientInner {
                conn,
                caller,
                server,
                release,
                extend,
                renewer: OnceLock::new(),
                renewal_stats: Arc::default(),
                notify_waiters,
                notifier,
            }),
            history: None,
        })
    }
}
