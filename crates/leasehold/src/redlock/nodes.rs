//! The nodes: their connections (opened on first use), labels and URLs.

use std::time::Duration;

use crate::core::error::{Error, Result};
use crate::redis::client::RedisClient;
use crate::redis::options::RedisOptions;

pub(super) struct Node {
    pub(super) label: String,
    pub(super) url: String,
    pub(super) client: tokio::sync::OnceCell<RedisClient>,
}

impl Node {
    /// The node's client, connecting on first use (a node that is down when the Redlock is
    /// created is retried at every operation).
    pub(super) async fn client(&self, timeout: Duration) -> Result<&RedisClient> {
        self.client
            .get_or_try_init(|| {
                // Each node has its own reconnecting connection. Release notifications are off:
                // Redlock waiters retry by backoff, and a release stays one command per node.
                // The crate's ConnectionManager, not the batching connection: nothing measured
                // favours a change (bench/results/issue32-target5-w4-floor.md, session 19).
                // Through node crashes (tests/redlock.rs, fencing through crashes) both leave
                // grants on restarted nodes alike, and a Redlock fan-out is no faster on the
                // batching connection (each node's operation is a task of its own either way).
                let options = RedisOptions::new()
                    .connect_timeout(timeout.max(Duration::from_millis(1)))
                    .notify_waiters(false)
                    .batch_commands(false);
                RedisClient::connect_with(&self.url, options)
            })
            .await
    }
}

/// `host:port` of a URL, without scheme or credentials.
pub(super) fn node_label(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
    rest.split(['/', '?']).next().unwrap_or(rest).to_string()
}

/// The node URLs a `redlock://[user:password@]host:port,host:port,…[/db]` URL names (one
/// `redis://` URL per node, `rediss://` for `rediss-redlock://`; the credentials and database
/// apply to every node; the port defaults to 6379).
///
/// # Errors
/// [`Error::InvalidArgument`] for another scheme, no host, or a bad port.
pub fn node_urls(url: &str) -> Result<Vec<String>> {
    let tls = match url.split_once("://") {
        Some((s, _)) if s.eq_ignore_ascii_case("redlock") => false,
        Some((s, _)) if s.eq_ignore_ascii_case("rediss-redlock") => true,
        _ => {
            return Err(Error::invalid(
                "url",
                format!("{url:?} is not a redlock:// or rediss-redlock:// URL"),
            ));
        }
    };
    let rest = url.split_once("://").map_or("", |(_, r)| r);
    let (auth, hosts, db, _) = crate::core::url::split_multi_host(rest);
    let hosts = crate::core::url::parse_hosts(hosts, 6379)
        .map_err(|e| Error::invalid("url", format!("redlock URL: {e}")))?;
    let scheme = if tls { "rediss" } else { "redis" };
    let auth = auth.map(|a| format!("{a}@")).unwrap_or_default();
    let db = db.filter(|d| !d.is_empty()).unwrap_or("0");
    Ok(hosts
        .into_iter()
        .map(|h| format!("{scheme}://{auth}{h}/{db}"))
        .collect())
}
