//! Opening the connection an [`Endpoint`] names: one server, a cluster, or a Sentinel-monitored
//! primary; with TLS where the URL says so, trusting a private CA where the options name one.

use std::path::Path;
use std::time::Duration;

use redis::TlsCertificates;
use redis::aio::ConnectionManagerConfig;
use redis::sentinel::{SentinelClientBuilder, SentinelServerType};

use crate::core::error::{Error, Operation, Result};
use crate::core::options::ClientOptions;
use crate::redis::batching::BatchingConnection;
use crate::redis::connection::{ClientConnection, SentinelConnection};
use crate::redis::endpoint::Endpoint;

/// Where the subscriber connection goes.
pub(crate) enum SubscriberSource {
    /// One server.
    Client(redis::Client),
    /// The current primary of a Sentinel set (asked again each time the subscriber reconnects).
    Sentinel(crate::redis::connection::SentinelConnection),
    /// A cluster: one RESP3 cluster connection with sharded subscriptions.
    Cluster {
        seeds: Vec<String>,
        /// The private CA and the client certificate, if any.
        root_cert: Option<TlsCertificates>,
        connect_timeout: Duration,
    },
}

/// Reads the private CA file, if one was given: it must exist and hold a PEM certificate.
pub(crate) fn read_ca_file(path: Option<&Path>) -> Result<Option<Vec<u8>>> {
    let Some(path) = path else { return Ok(None) };
    let bytes = std::fs::read(path).map_err(|e| {
        Error::invalid(
            "TLS CA file",
            format!("cannot read {}: {e}", path.display()),
        )
    })?;
    if !String::from_utf8_lossy(&bytes).contains("-----BEGIN CERTIFICATE-----") {
        return Err(Error::invalid(
            "TLS CA file",
            format!("{} holds no PEM certificate", path.display()),
        ));
    }
    Ok(Some(bytes))
}

/// The options' private CA and client certificate (mutual TLS), if any.
pub(crate) fn read_tls_files(options: &ClientOptions) -> Result<Option<TlsCertificates>> {
    let root_cert = read_ca_file(options.tls_ca_file.as_deref())?;
    let client_tls = crate::core::tls::read_identity(
        options.tls_cert_file.as_deref(),
        options.tls_key_file.as_deref(),
    )?
    .map(|id| redis::ClientTlsConfig {
        client_cert: id.cert,
        client_key: id.key,
    });
    Ok(
        (root_cert.is_some() || client_tls.is_some()).then_some(TlsCertificates {
            client_tls,
            root_cert,
        }),
    )
}

fn certificates(root_cert: &Option<TlsCertificates>) -> Option<TlsCertificates> {
    root_cert.clone()
}

/// A `redis::Client` for one server URL, with the private CA and client certificate if any.
pub(crate) fn client_for(url: &str, root_cert: &Option<TlsCertificates>) -> Result<redis::Client> {
    let bad = |e: redis::RedisError| Error::invalid("url", e.to_string());
    match certificates(root_cert) {
        Some(certs) if is_tls_url(url) => redis::Client::build_with_tls(url, certs).map_err(bad),
        _ => redis::Client::open(url).map_err(bad),
    }
}

fn is_tls_url(url: &str) -> bool {
    let u = url.to_ascii_lowercase();
    u.starts_with("rediss://") || u.starts_with("valkeys://")
}

fn manager_config(options: &ClientOptions) -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_connection_timeout(Some(options.connect_timeout))
        .set_response_timeout(Some(options.response_timeout))
        .set_number_of_retries(1)
}

/// Builds a cluster client for `seeds`; `resp3_pushes` makes it a subscriber connection that
/// delivers sharded messages there.
pub(crate) fn cluster_client(
    seeds: &[String],
    root_cert: &Option<TlsCertificates>,
    connect_timeout: std::time::Duration,
    response_timeout: std::time::Duration,
    resp3_pushes: Option<impl redis::aio::AsyncPushSender>,
) -> Result<redis::cluster::ClusterClient> {
    let mut builder = redis::cluster::ClusterClientBuilder::new(seeds.to_vec())
        .connection_timeout(connect_timeout)
        .response_timeout(response_timeout)
        .retries(2)
        .min_retry_wait(50)
        .max_retry_wait(500);
    if let Some(certs) = certificates(root_cert) {
        builder = builder.certs(certs);
    }
    if let Some(tx) = resp3_pushes {
        builder = builder
            .use_protocol(redis::ProtocolVersion::RESP3)
            .push_sender(tx);
    }
    builder
        .build()
        .map_err(|e| Error::invalid("url", e.to_string()))
}

/// Makes sure rustls has a process-wide crypto provider: ring, unless the application installed
/// another one first (then that one stays). Without it, a build in which a dependency also
/// enables rustls' aws-lc-rs feature would panic at the first TLS connection.
fn ensure_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Losing a race to another installer is fine: some provider is installed either way.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// Opens the lock connection for `endpoint`, and says where the subscriber for release
/// notifications connects.
pub(crate) async fn open(
    endpoint: &Endpoint,
    options: &ClientOptions,
    root_cert: Option<TlsCertificates>,
    batching: bool,
) -> Result<(ClientConnection, SubscriberSource)> {
    if endpoint.uses_tls() {
        ensure_crypto_provider();
    }
    match endpoint {
        Endpoint::Standalone(url) => {
            let client = client_for(url, &root_cert)?;
            let info = client.get_connection_info();
            // Plain TCP with RESP2: the library's batching connection. TLS, a Unix socket or
            // RESP3 stay on the crate's connection manager.
            if batching
                && matches!(info.addr(), redis::ConnectionAddr::Tcp(..))
                && info.redis_settings().protocol() == redis::ProtocolVersion::RESP2
            {
                let conn = BatchingConnection::connect(
                    info,
                    options.connect_timeout,
                    options.response_timeout,
                )
                .await
                .map_err(|e| Error::from_redis(Operation::Connect, e))?;
                return Ok((conn.into(), SubscriberSource::Client(client)));
            }
            let manager = client
                .get_connection_manager_with_config(manager_config(options))
                .await
                .map_err(|e| Error::from_redis(Operation::Connect, e))?;
            Ok((manager.into(), SubscriberSource::Client(client)))
        }
        Endpoint::Cluster(seeds) => {
            if seeds.is_empty() {
                return Err(Error::invalid(
                    "url",
                    "a cluster needs at least one seed node",
                ));
            }
            let client = cluster_client(
                seeds,
                &root_cert,
                options.connect_timeout,
                options.response_timeout,
                None::<tokio::sync::mpsc::UnboundedSender<redis::PushInfo>>,
            )?;
            let conn = client
                .get_async_connection()
                .await
                .map_err(|e| cluster_connect_error(seeds, e))?;
            Ok((
                ClientConnection::Cluster(conn),
                SubscriberSource::Cluster {
                    seeds: seeds.clone(),
                    root_cert,
                    connect_timeout: options.connect_timeout,
                },
            ))
        }
        Endpoint::Sentinel {
            sentinels,
            master,
            db,
            username,
            password,
            tls,
        } => {
            if sentinels.is_empty() {
                return Err(Error::invalid(
                    "url",
                    "Sentinel needs at least one sentinel",
                ));
            }
            let mut addrs = Vec::new();
            for s in sentinels {
                let info = redis::IntoConnectionInfo::into_connection_info(s.as_str())
                    .map_err(|e| Error::invalid("url", format!("sentinel {s:?}: {e}")))?;
                addrs.push(info.addr().clone());
            }
            let mut builder =
                SentinelClientBuilder::new(addrs, master.as_str(), SentinelServerType::Master)
                    .map_err(|e| Error::invalid("url", e.to_string()))?
                    .set_client_to_redis_db(*db);
            if let Some(u) = username {
                builder = builder.set_client_to_redis_username(u);
            }
            if let Some(p) = password {
                builder = builder.set_client_to_redis_password(p);
            }
            if *tls {
                builder = builder.set_client_to_redis_tls_mode(redis::TlsMode::Secure);
                if let Some(certs) = certificates(&root_cert) {
                    builder = builder.set_client_to_redis_certificates(certs);
                }
            }
            let sentinel = builder
                .build()
                .map_err(|e| Error::invalid("url", e.to_string()))?;
            let conn = SentinelConnection::connect(sentinel, manager_config(options))
                .await
                .map_err(|e| sentinel_connect_error(master, e))?;
            Ok((
                ClientConnection::Sentinel(conn.clone()),
                SubscriberSource::Sentinel(conn),
            ))
        }
    }
}

fn cluster_connect_error(seeds: &[String], e: redis::RedisError) -> Error {
    let text = e.to_string();
    if text.contains("cluster support disabled") || text.contains("cluster mode is not enabled") {
        return Error::Topology {
            reason: format!(
                "{} is not a Redis Cluster node (the server has cluster support disabled); \
                 connect to it with redis:// instead",
                seeds.join(", ")
            ),
        };
    }
    Error::from_redis(Operation::Connect, e)
}

fn sentinel_connect_error(master: &str, e: redis::RedisError) -> Error {
    if e.kind() == redis::ErrorKind::MasterNameNotFoundBySentinel {
        return Error::Topology {
            reason: format!("no sentinel knows a master named {master:?}: {e}"),
        };
    }
    Error::from_redis(Operation::Connect, e)
}
