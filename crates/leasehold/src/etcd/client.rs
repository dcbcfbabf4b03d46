//! The client, [`EtcdClient`], and its public API.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use etcd_client as ec;

use crate::core::driver::{Driver, Kind};
use crate::core::error::{Error, Operation, Result};
use crate::core::guard::LockGuard;
use crate::core::history::{HistoryEvent, HistoryKind, HistoryOptions};
use crate::core::kind::Backend;
use crate::core::options::{ClientOptions, LockOptions};
use crate::core::outcome::{LockState, TryAcquire};
use crate::core::token::LockToken;

use super::acquire::Queue;
use super::error::{connect_error, never_sent, timeout_error};
use super::history::EtcdHistory;
use super::keep_alive::KeepAlives;
use super::keys::{check_key, entry_key};
use super::request::retries_for;
use super::session::Sessions;
use super::spare::SpareLeases;
use super::url::parse_url;

/// HTTP/2 keep-alive pings on busy connections (etcd refuses pings more often than every 5 s).
const H2_PING_INTERVAL: Duration = Duration::from_secs(10);

/// The TLS settings of `etcds://`: the private CA (else the system's roots) and the client
/// certificate, if any.
fn tls_options(options: &ClientOptions) -> Result<ec::TlsOptions> {
    crate::core::tls::ensure_crypto_provider();
    let mut tls = ec::TlsOptions::new();
    tls = match &options.tls_ca_file {
        Some(path) => {
            tls.ca_certificate(ec::Certificate::from_pem(crate::core::tls::read_ca(path)?))
        }
        None => tls.with_native_roots(),
    };
    if let Some(id) = crate::core::tls::options_identity(options)? {
        tls = tls.identity(ec::Identity::from_pem(id.cert, id.key));
    }
    Ok(tls)
}

/// A lock client on an etcd v3 cluster.
///
/// Cheap to clone (clones share the gRPC connections and the lease sessions). See the
/// [module docs](super) for the design and what it guarantees.
#[derive(Clone)]
pub struct EtcdClient {
    pub(super) inner: Arc<Inner>,
    /// Set in a [`Locker`](crate::Locker) that records history: a plain lock's acquiring and
    /// releasing transactions put their events (`etcd::history`).
    pub(super) history: Option<Arc<EtcdHistory>>,
}

pub(super) struct Inner {
    pub(super) etcd: ec::Client,
    pub(super) endpoints: Vec<String>,
    user: Option<String>,
    pub(super) response_timeout: Duration,
    pub(super) sessions: Arc<Sessions>,
    /// The one keep-alive stream of the client (all clones, all sessions).
    pub(super) keep_alives: Arc<KeepAlives>,
    /// Leases of their own released locks left, for the next ones (`etcd::spare`).
    pub(super) spares: SpareLeases,
}

impl std::fmt::Debug for EtcdClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdClient")
            .field("endpoints", &self.inner.endpoints)
            .field("user", &self.inner.user)
            .field("response_timeout", &self.inner.response_timeout)
            .finish_non_exhaustive()
    }
}

impl EtcdClient {
    /// Connects to `url` with default [`ClientOptions`]:
    /// `etcd://[user:password@]host:port[,host:port...]` (port 2379 by default; user and
    /// password percent-decoded; with them, etcd authentication is used), or `etcds://…` for
    /// TLS to every member.
    ///
    /// # Errors
    /// As [`EtcdClient::connect_with`].
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(url, ClientOptions::default()).await
    }

    /// Connects to `url` and checks, within the connect timeout, that a member answers (and,
    /// with credentials, that they are accepted). Every later request is bounded by the
    /// response timeout.
    ///
    /// With `etcds://`, the members' certificates must chain to
    /// [`ClientOptions::tls_ca_file`] (else to the system's roots) and name the host of the
    /// URL; [`ClientOptions::tls_cert_file`] and [`ClientOptions::tls_key_file`] give the client
    /// certificate that etcd's `--client-cert-auth` asks for (mutual TLS). With `etcd://` these
    /// files are not used.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a malformed URL or unreadable TLS files;
    /// [`Error::Authentication`] for refused credentials, or a client certificate the members
    /// refuse (or none, where they ask for one); [`Error::Connection`] (`op: Connect`, not
    /// ambiguous) if no member answers in time, or a member's certificate fails the check.
    pub async fn connect_with(url: &str, options: ClientOptions) -> Result<Self> {
        let parsed = parse_url(url)?;
        let connect_timeout = options.connect_timeout;
        let response_timeout = options.response_timeout;
        let mut connect = ec::ConnectOptions::new()
            .with_connect_timeout(connect_timeout)
            .with_keep_alive(
                H2_PING_INTERVAL,
                response_timeout.max(Duration::from_secs(1)),
            )
            .with_keep_alive_while_idle(false)
            // A member cut off from the leader refuses (and ends streams) instead of hanging.
            .with_require_leader(true);
        let (tls, with_identity) = (parsed.tls, options.tls_cert_file.is_some());
        if tls {
            connect = connect.with_tls(tls_options(&options)?);
        }
        if let Some((name, password)) = &parsed.user {
            connect = connect
                .with_user(name.clone(), password.clone())
                .with_auto_token_refresh(true);
        }
        let endpoints = parsed.endpoints.clone();
        let keep_alive_connect = connect.clone();
        let tries = retries_for(endpoints.len());
        let probe = async move {
            let mut tried = 0;
            loop {
                tried += 1;
                // With credentials, this authenticates (a round trip); without, it connects
                // lazily. Then a status request must reach a member.
                let result = async {
                    let etcd = ec::Client::connect(&endpoints, Some(connect.clone())).await?;
                    etcd.maintenance_client().status().await?;
                    Ok::<_, ec::Error>(etcd)
                }
                .await;
                match result {
                    Ok(etcd) => return Ok(etcd),
                    // Refused by one member: another may answer.
                    Err(e) if never_sent(&e) && tried < tries => {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                    Err(e) => return Err(connect_error(e, tls, with_identity)),
                }
            }
        };
        let etcd = tokio::time::timeout(connect_timeout, probe)
            .await
            .map_err(|_| timeout_error(Operation::Connect, false))??;
        tracing::debug!(endpoints = ?parsed.endpoints, "leasehold connected to etcd");
        Ok(EtcdClient {
            inner: Arc::new(Inner {
                endpoints: parsed.endpoints.clone(),
                user: parsed.user.map(|(name, _)| name),
                response_timeout,
                sessions: Arc::new(tokio::sync::Mutex::new(HashMap::new())),
                spares: SpareLeases::default(),
                keep_alives: Arc::new(KeepAlives::new(
                    etcd.clone(),
                    parsed.endpoints.clone(),
                    keep_alive_connect,
                )),
                etcd,
            }),
            history: None,
        })
    }

    /// This client, its plain locks' acquiring and releasing transactions putting their
    /// history events as `options` say (a clone sharing the connections and sessions: the
    /// [`Locker`](crate::Locker) that records history drives it).
    pub(crate) fn recording(&self, options: &HistoryOptions) -> EtcdClient {
        EtcdClient {
            inner: self.inner.clone(),
            history: Some(super::history::recorder(self, options)),
        }
    }

    /// The history events of a plain lock's transactions, with `options`: `None` when this
    /// client does not record, or for a lock taken with `min_hold` (whose events its locker
    /// appends).
    pub(super) fn records_lock(&self, options: &LockOptions) -> Option<&Arc<EtcdHistory>> {
        self.history
            .as_ref()
            .filter(|_| options.min_hold_bound().is_none())
    }

    /// The member URLs (`http://host:port`, `https://host:port` for `etcds://`) this client
    /// talks to.
    pub fn endpoints(&self) -> &[String] {
        &self.inner.endpoints
    }
}

#[async_trait::async_trait]
impl Driver for EtcdClient {
    /// One attempt to take `key`, without waiting: one transaction that writes our entry only
    /// if the lock has no holder and no waiter (so nothing is written, and nothing needs
    /// cleaning up, when it is busy). Plus a lease grant first, unless the lock is
    /// auto-extended (then it uses the session lease of its TTL).
    ///
    /// **Cancellation.** If the future is dropped, or the reply is lost, after the request was
    /// sent, the entry (if it was written) is deleted in the background, token-checked; if
    /// etcd does not confirm that, the session deletes it at its next renewals
    /// (auto-extended), or it dies with its own lease.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a bad key or TTL (before any round trip);
    /// [`Error::Unsupported`] with [`LockOptions::replica_ack`]; [`Error::ExpiredOnArrival`];
    /// [`Error::Connection`] (ambiguous once the transaction was sent),
    /// [`Error::PermissionDenied`], [`Error::Authentication`], [`Error::Server`].
    async fn try_acquire(&self, key: &str, options: &LockOptions) -> Result<TryAcquire> {
        let secs = self.check_request(key, options)?;
        let entry = |token: &LockToken| entry_key(key, token);
        self.try_queue(&Queue::lock(key, &entry), options, secs)
            .await
    }

    /// Takes `key`, waiting until `options.wait_bound()` (one attempt, like
    /// [`Locker::try_acquire`](crate::Locker::try_acquire), if none was set or it is zero).
    ///
    /// Waiting is a queue (see the [module docs](super)): our entry is written once, and we
    /// watch only the entry just ahead of ours, so locks are granted in arrival order and a
    /// release wakes one waiter. Connection errors are ridden out (with the backoff of the
    /// options) until the deadline. If the session's lease is lost while we wait, our place is
    /// lost with it and we queue again.
    ///
    /// **Cancellation.** Dropping the future deletes our entry in the background
    /// (token-checked); if etcd does not confirm that, the session deletes it at its next
    /// renewals.
    ///
    /// # Errors
    /// [`Error::NotAcquired`] at the deadline; otherwise as [`Locker::try_acquire`](crate::Locker::try_acquire).
    async fn acquire(&self, key: &str, options: &LockOptions) -> Result<LockGuard> {
        let secs = self.check_request(key, options)?;
        let entry = |token: &LockToken| entry_key(key, token);
        self.acquire_in(
            &Queue::lock(key, &entry),
            options,
            secs,
            options.wait_bound(),
        )
        .await
    }

    /// Releases `key` if `token` holds it (or waits for it): one transaction,
    /// `If(Value(entry) == token) Then(Delete(entry))`. Needs no state from the acquiring
    /// process.
    ///
    /// # Errors
    /// [`Error::NotHeld`] if there is no such entry; connection and server errors.
    async fn release(&self, key: &str, token: &LockToken) -> Result<()> {
        check_key(key)?;
        let entry = entry_key(key, token);
        let Some(log) = &self.history else {
            return self.release_entry(key, entry, token, None).await;
        };
        let event = HistoryEvent::of_holder(HistoryKind::Released, token);
        let rider = log.rider(key, &event, false).await.ok();
        self.release_entry(key, entry, token, rider.map(|r| (&**log, r)))
            .await
    }

    /// Gives `key`'s entry for `token` a fresh lease of `ttl` (rounded up to whole seconds):
    /// a lease grant, then `If(Value(entry) == token) Then(Put(entry, lease))`. The entry keeps
    /// its revision (fencing number and place). The old lease is left to expire (it may be a
    /// session lease other locks share). Needs no state from the acquiring process.
    ///
    /// # Errors
    /// [`Error::NotHeld`] if there is no such entry; [`Error::InvalidArgument`] for a bad TTL;
    /// connection and server errors.
    async fn extend(&self, key: &str, token: &LockToken, ttl: Duration) -> Result<()> {
        check_key(key)?;
        self.extend_entry(key, entry_key(key, token), token, ttl)
            .await
    }

    /// Who holds `key` (the token of its first entry), the remaining TTL of that entry's lease
    /// (whole seconds, as etcd reports it) and its fencing number (the entry's create
    /// revision); all `None` when the lock is free. Two round trips (the entry, then its
    /// lease).
    ///
    /// # Errors
    /// Connection and server errors.
    async fn inspect(&self, key: &str) -> Result<LockState> {
        check_key(key)?;
        let Some(first) = self.first_entry(key).await? else {
            return Ok(LockState::new(key.to_string(), None, None, None));
        };
        let ttl = self.lease_ttl(first.lease()).await?;
        Ok(LockState::new(
            key.to_string(),
            Some(String::from_utf8_lossy(first.value()).into_owned()),
            ttl,
            Some(first.create_revision() as u64),
        ))
    }

    /// Always [`Error::Unsupported`]: etcd's fencing numbers are its revisions, which only move
    /// up and cannot be raised on request.
    ///
    /// # Errors
    /// [`Error::Unsupported`]; [`Error::InvalidArgument`] for a bad key.
    async fn raise_fencing_counter(&self, key: &str, _at_least: u64) -> Result<u64> {
        check_key(key)?;
        Err(Error::Unsupported {
            backend: "etcd",
            what: "raising a fencing counter (etcd's fencing numbers are its revisions)".into(),
        })
    }
}

impl EtcdClient {
    /// A read of `key` with `options` (an `Inspect`, bounded by the response timeout).
    pub(super) async fn read(
        &self,
        key: &[u8],
        options: ec::GetOptions,
    ) -> Result<ec::GetResponse> {
        self.request(Operation::Inspect, false, || {
            let mut kv = self.inner.etcd.kv_client();
            let (key, options) = (key.to_vec(), options.clone());
            async move { kv.get(key, Some(options)).await }
        })
        .await
    }

    /// A lease's remaining TTL (`None` for no lease, or one already gone).
    pub(super) async fn lease_ttl(&self, id: i64) -> Result<Option<Duration>> {
        if id == 0 {
            return Ok(None);
        }
        let lease = self
            .request(Operation::Inspect, false, || {
                let mut leases = self.inner.etcd.lease_client();
                async move { leases.time_to_live(id, None).await }
            })
            .await?;
        Ok((lease.ttl() >= 0).then(|| Duration::from_secs(lease.ttl() as u64)))
    }
}

impl Kind for EtcdClient {
    fn kind(&self) -> Backend {
        Backend::Etcd
    }
}
