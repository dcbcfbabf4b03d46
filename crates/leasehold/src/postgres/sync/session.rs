//! The primitives on session advisory locks ([`PostgresClient`]): semaphore, read-write lock,
//! election. See the module docs of `sync` for the protocols and their guarantees.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use super::advisory::{AdvisoryLock, Ask, count_sql, slots_held_sql};
use crate::core::acquire::{self, Attempts};
use crate::core::driver::Primitives;
use crate::core::error::{Error, Operation, Result};
use crate::core::guard::LockGuard;
use crate::core::kind::Backend;
use crate::core::options::LockOptions;
use crate::core::outcome::TryAcquire;
use crate::core::sync::Side;
use crate::core::sync::{Election, Leader, RwLock, Semaphore};
use crate::core::token::LockToken;
use crate::postgres::Timed;
use crate::postgres::client::PostgresClient;
use crate::postgres::params::validate_pg_key;
use crate::postgres::session::granted_or_busy;
use crate::postgres::unexpected;

impl PostgresClient {
    /// The limit every session primitive adds to the one option table (which the handle
    /// checked): a TTL the idle limit can hold.
    fn check_primitive(&self, options: &LockOptions) -> Result<()> {
        options.validate()?;
        if options.ttl() > Duration::from_millis(i32::MAX as u64) {
            return Err(Error::invalid(
                "ttl",
                "PostgreSQL's idle_session_timeout holds at most 24.8 days",
            ));
        }
        Ok(())
    }
}

impl Primitives for PostgresClient {
    fn check_name(&self, name: &str) -> Result<()> {
        validate_pg_key(name)
    }

    /// A semaphore of `permits` permits on `name` (no round trip): `permits` advisory locks,
    /// one per slot (see the module docs).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a bad name or `permits` outside
    /// 1 ..= [`MAX_PERMITS`](crate::MAX_PERMITS).
    fn semaphore(&self, name: &str, permits: u32) -> Result<Semaphore> {
        let provider = PgSemaphore {
            client: self.clone(),
            name: name.to_string(),
            permits,
        };
        Ok(Semaphore::new(Backend::Postgres, name, permits, provider))
    }

    /// A read-write lock on `name` (no round trip): readers share the advisory lock of `name`
    /// (`pg_advisory_lock_shared`), the writer holds it alone, as a plain lock does.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a bad name.
    fn rwlock(&self, name: &str) -> Result<RwLock> {
        let provider = PgRwLock {
            client: self.clone(),
            name: name.to_string(),
        };
        Ok(RwLock::new(Backend::Postgres, name, provider))
    }

    /// An election on `name` (no round trip): the advisory lock of `name` and a term row.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a bad name.
    fn election(&self, name: &str) -> Result<Election> {
        let provider = PgElection {
            client: self.clone(),
            name: name.to_string(),
            terms: tokio::sync::OnceCell::new(),
        };
        Ok(Election::new(Backend::Postgres, name, provider))
    }
}

/// A semaphore as `permits` advisory locks (see the module docs).
#[derive(Debug, Clone)]
pub(crate) struct PgSemaphore {
    client: PostgresClient,
    name: String,
    permits: u32,
}

fn is_permit(lock: AdvisoryLock) -> bool {
    lock.seed > 0
}

impl PgSemaphore {
    fn check(&self, options: &LockOptions) -> Result<()> {
        self.client.check_primitive(options)
    }
}

/// A semaphore's waiter, as the acquisition engine drives it. Each attempt tries every slot
/// once; while all are held and the caller waits, it then waits in one slot's server queue (a
/// different slot each round, so a waiter is not stuck behind one long holder) for a backoff
/// delay, never past the time left. Not fair: a permit freed in another slot meanwhile goes to
/// whoever scans first.
struct SlotScan<'a> {
    semaphore: &'a PgSemaphore,
    /// Attempts so far: the backoff's exponent, and which slot's queue is next.
    rounds: AtomicU32,
}

impl Attempts for SlotScan<'_> {
    fn name(&self) -> &str {
        &self.semaphore.name
    }

    async fn attempt(&self, options: &LockOptions, ask: acquire::Ask) -> Result<TryAcquire> {
        let s = self.semaphore;
        let round = self.rounds.fetch_add(1, Ordering::Relaxed);
        let scan = s
            .client
            .advisory_attempt(&s.name, Ask::AnySlot(s.permits), options, None)
            .await?;
        let Some(left) = ask.wait.filter(|_| scan.is_none()) else {
            return Ok(granted_or_busy(scan));
        };
        let slice = options.backoff_policy().delay(round).min(left);
        let slot = Ask::Slot(round % s.permits + 1);
        // The backoff was spent in the slot's queue: a zero remaining lease makes the
        // engine's pause before the next scan its shortest.
        let waited = TryAcquire::Busy {
            remaining: Some(Duration::ZERO),
        };
        match s
            .client
            .advisory_attempt(&s.name, slot, options, Some(slice))
            .await
        {
            Ok(Some(guard)) => Ok(TryAcquire::Acquired(guard)),
            Ok(None) => Ok(waited),
            // The next scan, on a new session, tells.
            Err(e @ (Error::Connection { .. } | Error::ExpiredOnArrival { .. })) => {
                tracing::debug!(name = %s.name, error = %e, "waiting for a slot failed; retrying");
                Ok(waited)
            }
            Err(e) => Err(e),
        }
    }

    /// A session that died: it was closed, which ended anything it was granted.
    fn retries(&self, e: &Error) -> bool {
        matches!(e, Error::Connection { .. })
    }
}

fn count(row: &tokio_postgres::Row) -> Result<u32> {
    let n: i64 = row.try_get(0).map_err(|e| Error::UnexpectedReply {
        op: Operation::Inspect,
        detail: e.to_string(),
    })?;
    Ok(u32::try_from(n).unwrap_or(u32::MAX))
}

#[async_trait::async_trait]
impl crate::core::sync::SemaphoreProvider for PgSemaphore {
    async fn try_acquire(&self, options: &LockOptions) -> Result<TryAcquire> {
        self.check(options)?;
        let scan = self
            .client
            .advisory_attempt(&self.name, Ask::AnySlot(self.permits), options, None)
            .await?;
        Ok(granted_or_busy(scan))
    }

    /// Tries every slot; while all are held, waits in one slot's queue (a different slot each
    /// round) for a backoff delay, then tries every slot again: [`SlotScan`], through the
    /// acquisition engine.
    async fn acquire(&self, options: &LockOptions) -> Result<LockGuard> {
        self.check(options)?;
        let scan = SlotScan {
            semaphore: self,
            rounds: AtomicU32::new(0),
        };
        crate::core::acquire::wait(&scan, options, options.wait_bound()).await
    }

    async fn release(&self, token: &LockToken) -> Result<()> {
        self.client
            .release_advisory(&self.name, token, is_permit)
            .await
    }

    async fn extend(&self, token: &LockToken, ttl: Duration) -> Result<()> {
        self.client
            .extend_advisory(&self.name, token, ttl, is_permit)
            .await
    }

    async fn holders(&self) -> Result<u32> {
        let permits = self.permits.to_string();
        let row = self
            .client
            .query_pooled(
                Operation::Inspect,
                &slots_held_sql(),
                &[&self.name, &permits],
            )
            .await?;
        count(&row)
    }
}

/// A read-write lock on the advisory lock of its name (see the module docs).
#[derive(Debug, Clone)]
pub(crate) struct PgRwLock {
    client: PostgresClient,
    name: String,
}

fn is_reader(lock: AdvisoryLock) -> bool {
    lock.shared
}

fn is_writer(lock: AdvisoryLock) -> bool {
    !lock.shared && lock.seed == 0
}

impl PgRwLock {
    /// The advisory lock a side asks for, and how to tell a held one.
    fn ask(side: Side) -> (Ask<'static>, fn(AdvisoryLock) -> bool) {
        match side {
            Side::Read => (Ask::Read, is_reader),
            Side::Write => (Ask::Write, is_writer),
        }
    }
}

#[async_trait::async_trait]
impl crate::core::sync::RwLockProvider for PgRwLock {
    async fn try_take(&self, side: Side, options: &LockOptions) -> Result<TryAcquire> {
        self.client.check_primitive(options)?;
        let (ask, _) = Self::ask(side);
        let guard = self
            .client
            .advisory_attempt(&self.name, ask, options, None)
            .await?;
        Ok(granted_or_busy(guard))
    }

    async fn take(&self, side: Side, options: &LockOptions) -> Result<LockGuard> {
        self.client.check_primitive(options)?;
        let (ask, _) = Self::ask(side);
        self.client
            .advisory_wait(&self.name, ask, options, options.wait_bound())
            .await
    }

    async fn release(&self, side: Side, token: &LockToken) -> Result<()> {
        let (_, holds) = Self::ask(side);
        self.client.release_advisory(&self.name, token, holds).await
    }

    async fn extend(&self, side: Side, token: &LockToken, ttl: Duration) -> Result<()> {
        let (_, holds) = Self::ask(side);
        self.client
            .extend_advisory(&self.name, token, ttl, holds)
            .await
    }

    async fn readers(&self) -> Result<u32> {
        let row = self
            .client
            .query_pooled(
                Operation::Inspect,
                &count_sql("ShareLock"),
                &[&self.name, "0"],
            )
            .await?;
        count(&row)
    }
}

/// The table of election terms on session locks: the fencing number drawn at each win and the
/// winner's id, written in the winning statement.
const CREATE_TERMS: &str = "CREATE TABLE IF NOT EXISTS leasehold_terms (
    key text PRIMARY KEY,
    term bigint NOT NULL,
    leader_id text NOT NULL
)";

/// The leader: whether a session holds `$1`'s exclusive advisory lock, the fencing counter, and
/// the term row.
const LEADER: &str = "\
SELECT EXISTS (SELECT 1 FROM pg_locks l
                WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
                  AND l.mode = 'ExclusiveLock'
                  AND l.classid::bigint = ((hashtextextended($1, 0) >> 32) & 4294967295)
                  AND l.objid::bigint = (hashtextextended($1, 0) & 4294967295)),
       (SELECT fence FROM leasehold_locks WHERE key = $1),
       (SELECT term FROM leasehold_terms WHERE key = $1),
       (SELECT leader_id FROM leasehold_terms WHERE key = $1)";

/// An election on the advisory lock of its name and a term row (see the module docs).
#[derive(Debug)]
pub(crate) struct PgElection {
    client: PostgresClient,
    name: String,
    /// The terms table exists (created by this handle's first call).
    terms: tokio::sync::OnceCell<()>,
}

impl PgElection {
    async fn ensure_terms(&self) -> Result<()> {
        self.terms
            .get_or_try_init(|| self.create_terms())
            .await
            .map(drop)
    }

    async fn create_terms(&self) -> Result<()> {
        let session = self.client.take_session().await?;
        let created = self
            .client
            .timed(
                Operation::Connect,
                session.client.batch_execute(CREATE_TERMS),
            )
            .await;
        self.client.put_back(session);
        match created {
            Err(e) if !crate::postgres::is_create_race(&e) => Err(e),
            _ => Ok(()),
        }
    }
}

#[async_trait::async_trait]
impl crate::core::sync::ElectionProvider for PgElection {
    async fn campaign(&self, id: &str, options: &LockOptions) -> Result<LockGuard> {
        self.client.check_primitive(options)?;
        let options = options.clone().fencing(true).auto_extend(true);
        self.ensure_terms().await?;
        // The handle set the wait (for ever without one: `Election::campaign`).
        self.client
            .advisory_wait(&self.name, Ask::Lead(id), &options, options.wait_bound())
            .await
    }

    async fn leader(&self) -> Result<Option<Leader>> {
        self.ensure_terms().await?;
        let row = self
            .client
            .query_pooled(Operation::Inspect, LEADER, &[&self.name])
            .await?;
        let bad = unexpected(Operation::Inspect);
        let held: bool = row.try_get(0).map_err(&bad)?;
        let fence: Option<i64> = row.try_get(1).map_err(&bad)?;
        let term: Option<i64> = row.try_get(2).map_err(&bad)?;
        let id: Option<String> = row.try_get(3).map_err(&bad)?;
        if !held {
            return Ok(None);
        }
        match (term, id) {
            (Some(term), Some(id)) if fence == Some(term) => Ok(Some(Leader {
                id,
                term: term as u64,
                ttl: None,
            })),
            _ => Err(Error::Conflict {
                key: self.name.clone(),
                detail: "the election's lock is held, but not by a campaign (a plain lock or a \
                         writer?)"
                    .into(),
            }),
        }
    }
}
