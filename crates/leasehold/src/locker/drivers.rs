//! The backends' registrations (in the manner of sqlx's drivers): URL schemes and connect
//! functions, which [`Locker::connect`] walks.

use std::future::ready;

use futures_util::future::BoxFuture;

use super::Locker;
use crate::core::driver::Driver;
use crate::core::error::{Error, Result};
use crate::core::options::ClientOptions;
use crate::redis::client::RedisClient;
use crate::redlock::{Redlock, RedlockOptions};

/// How a registered backend connects: to `url`, with `options`.
type Connect = for<'a> fn(&'a str, ClientOptions) -> BoxFuture<'a, Result<Locker>>;

/// A connect function's future: the client `connecting` makes, as a [`Locker`].
fn locker_of<'a, D: Driver>(
    connecting: impl Future<Output = Result<D>> + Send + 'a,
) -> BoxFuture<'a, Result<Locker>> {
    Box::pin(async move { Ok(Locker::of(connecting.await?)) })
}

/// A backend's registration (in the manner of sqlx's drivers): its name, the URL schemes it
/// serves, the cargo feature it needs, and how it connects (`None`: not compiled in).
/// [`Locker::connect`] walks [`DRIVERS`]; nothing else in the workspace keeps a table of
/// schemes ([`Locker::backend_of`] answers for the CLI and the bindings).
pub(super) struct Registration {
    pub(super) name: &'static str,
    pub(super) schemes: &'static [&'static str],
    pub(super) feature: Option<&'static str>,
    pub(super) connect: Option<Connect>,
}

/// Every backend, in the order messages list their schemes.
pub(super) const DRIVERS: &[Registration] = &[
    Registration {
        name: "redis",
        schemes: &[
            "redis",
            "rediss",
            "valkey",
            "valkeys",
            "redis+unix",
            "unix",
            "redis-cluster",
            "rediss-cluster",
            "valkey-cluster",
            "valkeys-cluster",
            "redis-sentinel",
            "rediss-sentinel",
            "valkey-sentinel",
            "valkeys-sentinel",
        ],
        feature: None,
        connect: Some(|url, options| locker_of(RedisClient::connect_with(url, options))),
    },
    Registration {
        name: "redlock",
        schemes: &["redlock", "rediss-redlock"],
        feature: None,
        connect: Some(|url, _| {
            Box::pin(async move {
                let nodes = crate::redlock::node_urls(url)?;
                let nodes: Vec<&str> = nodes.iter().map(String::as_str).collect();
                Ok(Locker::of(
                    Redlock::connect(&nodes, RedlockOptions::default()).await?,
                ))
            })
        }),
    },
    Registration {
        name: "etcd",
        schemes: &["etcd", "etcds"],
        feature: Some("etcd"),
        #[cfg(feature = "etcd")]
        connect: Some(|url, options| {
            locker_of(crate::etcd::EtcdClient::connect_with(url, options))
        }),
        #[cfg(not(feature = "etcd"))]
        connect: None,
    },
    Registration {
        name: "postgres",
        schemes: &["postgres", "postgresql"],
        feature: Some("postgres"),
        #[cfg(feature = "postgres")]
        connect: Some(|url, options| {
            Box::pin(async move {
                use crate::postgres::{PostgresClient, PostgresLeaseClient, wants_lease_rows};
                Ok(match wants_lease_rows(url)? {
                    true => Locker::of(PostgresLeaseClient::connect_with(url, options).await?),
                    false => Locker::of(PostgresClient::connect_with(url, options).await?),
                })
            })
        }),
        #[cfg(not(feature = "postgres"))]
        connect: None,
    },
    Registration {
        name: "memory",
        schemes: &["memory"],
        feature: None,
        connect: Some(|url, _| locker_of(ready(crate::memory::MemoryClient::connect(url)))),
    },
    Registration {
        name: "file",
        schemes: &["file"],
        feature: None,
        #[cfg(unix)]
        connect: Some(|url, _| locker_of(ready(crate::file::FileClient::connect(url)))),
        #[cfg(not(unix))]
        connect: None,
    },
];

/// The registration serving `url`'s scheme.
///
/// # Errors
/// [`Error::InvalidArgument`] for a URL without a scheme or with one no backend serves.
pub(super) fn registration(url: &str) -> Result<&'static Registration> {
    let known = || {
        DRIVERS
            .iter()
            .flat_map(|d| d.schemes.iter().copied())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let redacted = crate::core::url::redact(url);
    let Some((scheme, _)) = url.split_once("://") else {
        let reason = format!("{redacted:?} has no scheme (expected one of: {})", known());
        return Err(Error::invalid("url", reason));
    };
    let scheme = scheme.to_ascii_lowercase();
    DRIVERS
        .iter()
        .find(|d| d.schemes.contains(&scheme.as_str()))
        .ok_or_else(|| {
            let reason = format!(
                "unknown scheme {scheme:?} in {redacted:?} (expected one of: {})",
                known()
            );
            Error::invalid("url", reason)
        })
}
