//! The register of `leasehold-lab check`: the resource the lock protects, which refuses stale
//! fencing numbers. Two kinds:
//!
//! * **redis**: a hash `register` (`value`, `fence`, `writer`) on its own redis/valkey server,
//!   checked by the library's [`FencedStore`] scripts.
//! * **postgres**: one row of a real PostgreSQL table,
//!   `register(id int primary key, value bigint, fence bigint, holder text)`, `id = 1`, checked
//!   by a conditional `UPDATE`. PostgreSQL is a database that knows nothing of the lock: it
//!   shows that fencing works at an ordinary resource, with one SQL condition.
//!
//! Both apply the same rule (see `leasehold::fencing`): a number is accepted if it is greater
//! than the highest the register has seen, or equal to it *from the same holder*; a lower
//! number, or the same number from another holder, is refused. The register stores a hash of
//! the holder's lock token, never the token (a token is a capability to release the lock):
//! SHA-1 hex on redis (the library's scripts), SHA-256 hex on PostgreSQL (computed by
//! PostgreSQL's built-in `sha256`).

use std::fmt;
use std::str::FromStr;

use anyhow::{Context, bail};
use leasehold::redis::FencedStore;
use leasehold::{Fence, FencedRead};
use redis::aio::ConnectionManager;

/// The redis key of the register (a hash), as `leasehold-lab check` has always used.
pub(crate) const REDIS_KEY: &str = "register";

/// Which kind of server holds the register.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RegisterKind {
    /// A redis/valkey hash, checked by [`FencedStore`].
    Redis,
    /// A PostgreSQL row, checked by a conditional `UPDATE`.
    Postgres,
}

impl RegisterKind {
    /// The name on the command line: `redis` or `postgres`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            RegisterKind::Redis => "redis",
            RegisterKind::Postgres => "postgres",
        }
    }
}

impl fmt::Display for RegisterKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for RegisterKind {
    type Err = anyhow::Error;

    /// Parses `redis` or `postgres`.
    fn from_str(s: &str) -> anyhow::Result<Self> {
        match s {
            "redis" => Ok(RegisterKind::Redis),
            "postgres" => Ok(RegisterKind::Postgres),
            other => bail!("unknown register {other:?} (have: redis, postgres)"),
        }
    }
}

/// The outcome of a read of the register.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReadOutcome {
    /// The register's value (for a fenced read: the number is now claimed by this holder).
    Value(u64),
    /// The fenced read was refused: the register has seen `highest` (greater, or equal from
    /// another holder).
    Rejected {
        /// The highest fencing number the register has seen.
        highest: u64,
    },
}

/// A connection to the register.
pub(crate) enum Register {
    /// A redis/valkey hash at [`REDIS_KEY`].
    Redis {
        /// For the plain (unfenced) commands.
        conn: ConnectionManager,
        /// For the fenced read and write (the library's scripts), on the same connection.
        store: FencedStore,
    },
    /// The row `id = 1` of the PostgreSQL table `register`.
    Postgres {
        /// The client; its connection runs on a spawned task.
        client: tokio_postgres::Client,
    },
}

// -- PostgreSQL ---------------------------------------------------------------------------
//
// `holder` is `encode(sha256(convert_to(token, 'UTF8')), 'hex')`, computed by PostgreSQL so the
// table never contains a token. The condition
//     fence < $1 OR (fence = $1 AND holder = hash($2))
// is the issue's `WHERE fence <= $number` made strict for two holders that got the same number
// (a lock counter that lost its last increment in a failover or a restart): an equal number is
// accepted only from the holder that claimed it first.

/// Creates the table and (re)sets the row to value 0, fence 0, no holder.
const PG_INIT: &str = "\
CREATE TABLE IF NOT EXISTS register (
    id int PRIMARY KEY,
    value bigint NOT NULL,
    fence bigint NOT NULL,
    holder text NOT NULL
);
INSERT INTO register (id, value, fence, holder) VALUES (1, 0, 0, '')
    ON CONFLICT (id) DO UPDATE SET value = 0, fence = 0, holder = ''";

/// Fenced read: claims `$1` for holder `$2` and returns the value, or no row if refused.
const PG_READ_FENCED: &str = "\
UPDATE register
   SET fence = $1, holder = encode(sha256(convert_to($2::text, 'UTF8')), 'hex')
 WHERE id = 1
   AND (fence < $1 OR (fence = $1 AND holder = encode(sha256(convert_to($2::text, 'UTF8')), 'hex')))
RETURNING value";

/// Fenced write of `$3` with number `$1` from holder `$2`: one row iff accepted.
const PG_WRITE_FENCED: &str = "\
UPDATE register
   SET value = $3, fence = $1, holder = encode(sha256(convert_to($2::text, 'UTF8')), 'hex')
 WHERE id = 1
   AND (fence < $1 OR (fence = $1 AND holder = encode(sha256(convert_to($2::text, 'UTF8')), 'hex')))";

/// Unfenced write (what `--no-fencing` does): whoever writes, wins.
const PG_WRITE: &str = "UPDATE register SET value = $1 WHERE id = 1";

/// The value, for plain reads.
const PG_VALUE: &str = "SELECT value FROM register WHERE id = 1";

/// The highest number seen, to report a refusal.
const PG_FENCE: &str = "SELECT fence FROM register WHERE id = 1";

/// A `u64` as a PostgreSQL `bigint`.
fn to_bigint(n: u64, what: &str) -> anyhow::Result<i64> {
    i64::try_from(n).with_context(|| format!("{what} {n} does not fit in a PostgreSQL bigint"))
}

/// A PostgreSQL `bigint` from the register as a `u64`.
fn from_bigint(n: i64, what: &str) -> anyhow::Result<u64> {
    u64::try_from(n).with_context(|| format!("the register holds a negative {what} ({n})"))
}

/// The register's value as the worker parses it: missing or unparsable counts as 0.
fn parse_value(bytes: &[u8]) -> u64 {
    String::from_utf8_lossy(bytes).parse::<u64>().unwrap_or(0)
}

impl Register {
    /// Connects to the register's server at `url` (`redis://...` or `postgres://...`). The
    /// worker and the coordinator each call this.
    pub(crate) async fn connect(kind: RegisterKind, url: &str) -> anyhow::Result<Register> {
        match kind {
            RegisterKind::Redis => {
                let conn = redis::Client::open(url)
                    .with_context(|| format!("bad register URL {url:?}"))?
                    .get_connection_manager()
                    .await
                    .context("cannot connect to the redis register")?;
                Ok(Register::Redis {
                    store: FencedStore::new(conn.clone()),
                    conn,
                })
            }
            RegisterKind::Postgres => {
                let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
                    .await
                    .context("cannot connect to the PostgreSQL register")?;
                tokio::spawn(async move {
                    if let Err(e) = connection.await {
                        tracing::warn!("PostgreSQL register connection: {e}");
                    }
                });
                Ok(Register::Postgres { client })
            }
        }
    }

    /// Creates the register with value 0 and fence 0 (the coordinator, once, before the
    /// workers start). On redis: `HSET register value 0 fence 0`.
    pub(crate) async fn init(&mut self) -> anyhow::Result<()> {
        match self {
            Register::Redis { conn, .. } => {
                let _: i64 = redis::cmd("HSET")
                    .arg(REDIS_KEY)
                    .arg("value")
                    .arg(0)
                    .arg("fence")
                    .arg(0)
                    .query_async(conn)
                    .await
                    .context("cannot initialise the redis register")?;
            }
            Register::Postgres { client } => client
                .batch_execute(PG_INIT)
                .await
                .context("cannot initialise the PostgreSQL register")?,
        }
        Ok(())
    }

    /// Reads the value.
    ///
    /// With `Some(fence)`, a fenced read: it is refused like a write if the number is stale
    /// (lower than the highest seen, or equal to it from another token), and otherwise it
    /// *claims* the number at the register, so that from now on a write or read with a lower
    /// number, or the same number from another token, is refused. `None` is a plain unfenced
    /// read, which never claims anything.
    pub(crate) async fn read(&mut self, fence: Option<&Fence>) -> anyhow::Result<ReadOutcome> {
        match (self, fence) {
            (Register::Redis { store, .. }, None) => Ok(ReadOutcome::Value(
                store
                    .read(REDIS_KEY)
                    .await?
                    .map_or(0, |v| parse_value(&v.value)),
            )),
            (Register::Redis { store, .. }, Some(fence)) => {
                Ok(match store.read_fenced(REDIS_KEY, fence).await? {
                    FencedRead::Accepted(v) => {
                        ReadOutcome::Value(v.as_deref().map_or(0, parse_value))
                    }
                    FencedRead::Rejected { highest } => ReadOutcome::Rejected { highest },
                })
            }
            (register @ Register::Postgres { .. }, None) => {
                Ok(ReadOutcome::Value(register.value().await?))
            }
            (Register::Postgres { client }, Some(fence)) => {
                let number = to_bigint(fence.number(), "the fencing number")?;
                let row = client
                    .query_opt(PG_READ_FENCED, &[&number, &fence.token().expose()])
                    .await
                    .context("fenced read of the PostgreSQL register")?;
                match row {
                    Some(row) => Ok(ReadOutcome::Value(from_bigint(row.try_get(0)?, "value")?)),
                    None => Ok(ReadOutcome::Rejected {
                        highest: pg_fence(client).await?,
                    }),
                }
            }
        }
    }

    /// Writes `value`. With `Some(fence)`, a fenced write: `false` if the register refused it
    /// (the number is stale, by the same rule as [`Register::read`]); on success the register
    /// remembers the number and holder. With `None`, an unconditional write (what
    /// `--no-fencing` does), which always returns `true`.
    pub(crate) async fn write(
        &mut self,
        fence: Option<&Fence>,
        value: u64,
    ) -> anyhow::Result<bool> {
        match (self, fence) {
            (Register::Redis { conn, .. }, None) => {
                let _: i64 = redis::cmd("HSET")
                    .arg(REDIS_KEY)
                    .arg("value")
                    .arg(value)
                    .query_async(conn)
                    .await
                    .context("write of the redis register")?;
                Ok(true)
            }
            (Register::Redis { store, .. }, Some(fence)) => {
                Ok(store.write(REDIS_KEY, fence, value).await?.is_accepted())
            }
            (Register::Postgres { client }, None) => {
                let value = to_bigint(value, "the value")?;
                let rows = client
                    .execute(PG_WRITE, &[&value])
                    .await
                    .context("write of the PostgreSQL register")?;
                if rows != 1 {
                    bail!("the PostgreSQL register has no row (not initialised)");
                }
                Ok(true)
            }
            (Register::Postgres { client }, Some(fence)) => {
                let number = to_bigint(fence.number(), "the fencing number")?;
                let value = to_bigint(value, "the value")?;
                let rows = client
                    .execute(PG_WRITE_FENCED, &[&number, &fence.token().expose(), &value])
                    .await
                    .context("fenced write of the PostgreSQL register")?;
                Ok(rows == 1)
            }
        }
    }

    /// The register's current value (0 if a redis register was never written, as the
    /// coordinator has always counted it).
    pub(crate) async fn value(&mut self) -> anyhow::Result<u64> {
        match self {
            Register::Redis { conn, .. } => {
                let value: Option<Vec<u8>> = redis::cmd("HGET")
                    .arg(REDIS_KEY)
                    .arg("value")
                    .query_async(conn)
                    .await
                    .context("read of the redis register")?;
                Ok(value.as_deref().map_or(0, parse_value))
            }
            Register::Postgres { client } => {
                let row = client
                    .query_opt(PG_VALUE, &[])
                    .await
                    .context("read of the PostgreSQL register")?
                    .context("the PostgreSQL register has no row (not initialised)")?;
                from_bigint(row.try_get(0)?, "value")
            }
        }
    }
}

/// The highest fencing number the PostgreSQL register has seen.
async fn pg_fence(client: &tokio_postgres::Client) -> anyhow::Result<u64> {
    let row = client
        .query_opt(PG_FENCE, &[])
        .await
        .context("read of the PostgreSQL register's fence")?
        .context("the PostgreSQL register has no row (not initialised)")?;
    from_bigint(row.try_get(0)?, "fence")
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasehold::LockToken;
    use leasehold_harness::{Postgres, Server, ServerOptions};

    /// A redis/valkey server for a test, or `None` (skipping) if none is installed and the
    /// full matrix is not required.
    fn redis_server() -> Option<Server> {
        match leasehold_harness::discover().into_iter().next() {
            Some(bin) => Some(Server::start(&bin, &ServerOptions::new()).unwrap()),
            None if leasehold_harness::require_full_matrix() => {
                panic!("no redis/valkey server found (run scripts/install-servers)")
            }
            None => {
                eprintln!("skipping: no redis/valkey server found (run scripts/install-servers)");
                None
            }
        }
    }

    fn fence(number: u64, token: &LockToken) -> Fence {
        Fence::new(number, token.clone())
    }

    /// The same story on both kinds of register.
    async fn stale_fences_are_refused(reg: &mut Register) {
        let a = LockToken::random();
        let b = LockToken::random();
        reg.init().await.unwrap();
        assert_eq!(reg.value().await.unwrap(), 0);

        assert_eq!(
            reg.read(Some(&fence(5, &a))).await.unwrap(),
            ReadOutcome::Value(0)
        );
        assert!(reg.write(Some(&fence(5, &a)), 1).await.unwrap());
        // A lower number is refused, for reads and writes.
        assert_eq!(
            reg.read(Some(&fence(4, &b))).await.unwrap(),
            ReadOutcome::Rejected { highest: 5 }
        );
        assert!(!reg.write(Some(&fence(4, &b)), 7).await.unwrap());
        // The same number from another holder (a counter that lost an increment) too.
        assert!(!reg.write(Some(&fence(5, &b)), 9).await.unwrap());
        assert_eq!(
            reg.read(Some(&fence(5, &b))).await.unwrap(),
            ReadOutcome::Rejected { highest: 5 }
        );
        // A higher number claims the register at the read: A's number is stale from then on.
        assert_eq!(
            reg.read(Some(&fence(6, &b))).await.unwrap(),
            ReadOutcome::Value(1)
        );
        assert!(!reg.write(Some(&fence(5, &a)), 2).await.unwrap());
        assert_eq!(reg.value().await.unwrap(), 1);
        // The holder of the claimed number may read and write again with it.
        assert_eq!(
            reg.read(Some(&fence(6, &b))).await.unwrap(),
            ReadOutcome::Value(1)
        );
        assert!(reg.write(Some(&fence(6, &b)), 2).await.unwrap());
        assert_eq!(reg.value().await.unwrap(), 2);

        // Unfenced: a plain write always lands, a plain read claims nothing.
        assert!(reg.write(None, 42).await.unwrap());
        assert_eq!(reg.value().await.unwrap(), 42);
        assert_eq!(reg.read(None).await.unwrap(), ReadOutcome::Value(42));
        assert_eq!(
            reg.read(Some(&fence(6, &a))).await.unwrap(),
            ReadOutcome::Rejected { highest: 6 }
        );

        // init resets value and fence.
        reg.init().await.unwrap();
        assert_eq!(reg.value().await.unwrap(), 0);
        assert_eq!(
            reg.read(Some(&fence(1, &a))).await.unwrap(),
            ReadOutcome::Value(0)
        );
    }

    #[tokio::test]
    async fn redis_register_refuses_stale_fences() {
        let Some(server) = redis_server() else {
            return;
        };
        let mut reg = Register::connect(RegisterKind::Redis, &server.url())
            .await
            .unwrap();
        stale_fences_are_refused(&mut reg).await;
    }

    #[tokio::test]
    async fn postgres_register_refuses_stale_fences() {
        let Some(pg) = leasehold_harness::postgres_for_test() else {
            return;
        };
        let mut reg = Register::connect(RegisterKind::Postgres, &pg.url())
            .await
            .unwrap();
        stale_fences_are_refused(&mut reg).await;
    }

    /// Two connections (the coordinator and a worker) share one PostgreSQL register, and the
    /// table holds a hash of the token, never the token.
    #[tokio::test]
    async fn postgres_register_is_shared_and_keeps_no_token() {
        let Some(pg) = leasehold_harness::postgres_for_test() else {
            return;
        };
        let mut coordinator = connect_pg(&pg).await;
        let mut worker = connect_pg(&pg).await;
        coordinator.init().await.unwrap();
        let token = LockToken::random();
        assert!(worker.write(Some(&fence(3, &token)), 17).await.unwrap());
        assert_eq!(coordinator.value().await.unwrap(), 17);

        let Register::Postgres { client } = &coordinator else {
            unreachable!()
        };
        let row = client
            .query_one("SELECT fence, holder FROM register WHERE id = 1", &[])
            .await
            .unwrap();
        let (number, holder): (i64, String) = (row.get(0), row.get(1));
        assert_eq!(number, 3);
        assert!(
            !holder.contains(token.expose()),
            "the token is in the table"
        );
        assert_eq!(holder.len(), 64, "a SHA-256 hex digest: {holder}");
        assert!(holder.bytes().all(|b| b.is_ascii_hexdigit()));

        // Numbers beyond bigint are an error, not a wrap-around.
        let huge = Fence::new(u64::MAX, token.clone());
        assert!(worker.write(Some(&huge), 1).await.is_err());
        assert!(worker.read(Some(&huge)).await.is_err());
        assert!(worker.write(None, u64::MAX).await.is_err());
        assert_eq!(coordinator.value().await.unwrap(), 17);
    }

    async fn connect_pg(pg: &Postgres) -> Register {
        Register::connect(RegisterKind::Postgres, &pg.url())
            .await
            .unwrap()
    }

    #[test]
    fn kinds_parse() {
        assert_eq!(
            "redis".parse::<RegisterKind>().unwrap(),
            RegisterKind::Redis
        );
        assert_eq!(
            "postgres".parse::<RegisterKind>().unwrap(),
            RegisterKind::Postgres
        );
        assert!("mysql".parse::<RegisterKind>().is_err());
        for kind in [RegisterKind::Redis, RegisterKind::Postgres] {
            assert_eq!(kind.to_string().parse::<RegisterKind>().unwrap(), kind);
        }
    }
}
