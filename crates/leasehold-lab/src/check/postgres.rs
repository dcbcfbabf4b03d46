//! `--backend postgres`: the lock on a PostgreSQL server of its own (session advisory locks,
//! the fencing counters in the table `leasehold_locks`), and its fault: `restart` (an
//! immediate shutdown and a start: every session ends, and with it every lock, at once; the
//! counters are durable).
//!
//! The workers get the server's `postgres://` URL; it never changes (a restart keeps the
//! port). With `--pooler pgbouncer` the URL is a PgBouncer's in front of the server
//! (`pool_mode=transaction`) with `?lock=lease`: lease rows, since session locks are refused
//! through a transaction pooler; a restart of the server behind it ends PgBouncer's server
//! connections, which it opens again.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use leasehold::Locker;
use leasehold_harness::{PgBouncer, PgBouncerOptions, Postgres};

use super::servers::{inspect_holder, publish_urls};

/// A PostgreSQL server holding the lock, and a client of it for the coordinator's lookups.
pub(crate) struct PgLock {
    server: Postgres,
    /// The pooler in front of it (`--pooler pgbouncer`), kept running as long as the server.
    _pooler: Option<PgBouncer>,
    /// Asks who holds the lock (`inspect`), for the `pause` and `kill` faults.
    locker: Locker,
    /// The file the workers read the URL from.
    pub(crate) urls_file: PathBuf,
}

impl PgLock {
    /// Starts the server (not the register's: a separate one), and with `pooler` a PgBouncer
    /// in front of it, connects and publishes the URL.
    pub(crate) async fn start(urls_file: PathBuf, pooler: bool) -> anyhow::Result<Self> {
        let server = tokio::task::block_in_place(Postgres::start)
            .context("cannot start the lock's PostgreSQL (run scripts/install-servers)")?;
        let (pooler, url) = if pooler {
            let bouncer = tokio::task::block_in_place(|| {
                PgBouncer::start(&server, &PgBouncerOptions::new())
            })
            .context("cannot start PgBouncer in front of the lock's PostgreSQL (run scripts/install-servers)")?;
            let url = format!("{}?lock=lease", bouncer.url());
            (Some(bouncer), url)
        } else {
            (None, server.url())
        };
        let locker = Locker::connect(&url)
            .await
            .with_context(|| format!("cannot connect to the lock's PostgreSQL at {url}"))?;
        publish_urls(&urls_file, &[url])?;
        Ok(PgLock {
            server,
            _pooler: pooler,
            locker,
            urls_file,
        })
    }

    /// The token of the session that holds the advisory lock (of the lease row's holder).
    pub(crate) async fn holder_token(&self) -> Option<String> {
        inspect_holder(&self.locker).await
    }

    /// Injects `restart`; returns the kind and `[0]`.
    pub(crate) async fn inject(
        &mut self,
        kind: &str,
        _ttl: Duration,
    ) -> anyhow::Result<(String, Vec<usize>)> {
        let server = &mut self.server;
        tokio::task::block_in_place(|| server.restart())
            .context("cannot restart the lock's PostgreSQL")?;
        Ok((kind.to_string(), vec![0]))
    }
}
