//! `--backend postgres`: the lock on a PostgreSQL server of its own (session advisory locks,
//! the fencing counters in the table `leasehold_locks`), and its fault: `restart` (an
//! immediate shutdown and a start: every session ends, and with it every lock, at once; the
//! counters are durable).
//!
//! The workers get the server's `postgres://` URL; it never changes (a restart keeps the
//! port). With `--pooler pgbouncer` the URL is a PgBouncer's in front of the server
//! (`--pool-mode transaction` or `session`, `server_lifetime = 1`: server connections closed
//! and opened again all the time), by default with `?lock=lease`: lease rows. `--pg-lock
//! session` keeps session locks, which a transaction pooler must make the library refuse; a
//! restart of the server behind it ends PgBouncer's server connections, which it opens again.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use leasehold::Locker;
use leasehold_harness::{PgBouncer, PgBouncerOptions, PoolMode, Postgres};

use super::servers::{inspect_holder, publish_urls};
use crate::cli::CheckArgs;

/// Whether the workers lock with lease rows (`--pg-lock lease`, the default behind a pooler)
/// rather than session advisory locks.
pub(crate) fn lease_rows(args: &CheckArgs) -> bool {
    match args.pg_lock.as_deref() {
        Some(lock) => lock == "lease",
        None => args.pooler.is_some(),
    }
}

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
    /// Starts the server (not the register's: a separate one), and with `--pooler` a PgBouncer
    /// in front of it (`--pool-mode`, a 1 s `server_lifetime`), connects and publishes the URL
    /// (lease rows or session locks: [`lease_rows`]).
    pub(crate) async fn start(urls_file: PathBuf, args: &CheckArgs) -> anyhow::Result<Self> {
        let server = tokio::task::block_in_place(Postgres::start)
            .context("cannot start the lock's PostgreSQL (run scripts/install-servers)")?;
        let (pooler, base) = if args.pooler.is_some() {
            let mode = match args.pool_mode.as_str() {
                "session" => PoolMode::Session,
                _ => PoolMode::Transaction,
            };
            // Server connections live 1 s; after a restart of PostgreSQL, PgBouncer tries to
            // log in again after 1 s, not its default 15 (the run would mostly wait).
            let options = PgBouncerOptions::new()
                .pool_mode(mode)
                .setting("server_lifetime", "1")
                .setting("server_login_retry", "1");
            let bouncer = tokio::task::block_in_place(|| PgBouncer::start(&server, &options))
                .context("cannot start PgBouncer in front of the lock's PostgreSQL (run scripts/install-servers)")?;
            let url = bouncer.url();
            (Some(bouncer), url)
        } else {
            (None, server.url())
        };
        let url = if lease_rows(args) {
            format!("{base}?lock=lease")
        } else {
            base
        };
        // The coordinator asks the server itself, with the workers' kind of lock: session
        // locks through a transaction pooler are refused (the workers' refusals are the
        // point of such a run), and the server knows the truth anyway.
        let direct = if lease_rows(args) {
            format!("{}?lock=lease", server.url())
        } else {
            server.url()
        };
        let locker = Locker::connect(&direct)
            .await
            .with_context(|| format!("cannot connect to the lock's PostgreSQL at {direct}"))?;
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
