//! The primitives on lease rows ([`PostgresLeaseClient`], `?lock=lease`): a semaphore as slot
//! rows, an election as the name's lease row plus a term row. No read-write lock (see the
//! module docs of `sync`).

use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use tokio_postgres::types::{ToSql, Type};

use crate::core::acquire::{Ask, Attempts, Grant, OnAbandon, Wakeup, granted, late};
use crate::core::driver::Primitives;
use crate::core::error::{Error, Operation, Result};
use crate::core::guard::{HeldLock, Lease, LockGuard, extended_by};
use crate::core::kind::Backend;
use crate::core::options::{LockOptions, ttl_millis};
use crate::core::outcome::TryAcquire;
use crate::core::sync::{Election, Leader, LeaderChanges, Semaphore, SemaphoreProvider};
use crate::core::token::LockToken;
use crate::postgres::Timed;
use crate::postgres::lease::{
    NameReleases, PostgresLeaseClient, REMAINING, Remark, add_columns, marking, marking_ms,
};
use crate::postgres::params::validate_pg_key;
use crate::postgres::{is_create_race, unexpected};

const TEXT: Type = Type::TEXT;
const INT8: Type = Type::INT8;
const INT4: Type = Type::INT4;

/// A semaphore's slots: one row per slot ever taken, with the holder's token and expiry, the
/// number of permits the holder asked for, and the waiters' mark ([`marking`]; added to a table
/// made before it).
static CREATE_PERMITS: LazyLock<String> = LazyLock::new(|| {
    format!(
        "CREATE TABLE IF NOT EXISTS leasehold_permits (
    key text NOT NULL,
    slot int NOT NULL,
    token text,
    expires_at timestamptz NOT NULL,
    permits int NOT NULL,
    wait_until timestamptz,
    PRIMARY KEY (key, slot)
);
{}",
        add_columns("leasehold_permits", &["wait_until"])
    )
});

/// One attempt at a permit: picks a slot that looked free (at random, so that competing
/// attempts rarely pick the same one) and takes it only if it is still free under the row
/// lock (`ON CONFLICT DO UPDATE … WHERE`, evaluated on the row's latest version). One row:
/// the other number of permits the live holders use (a conflict: nothing is taken), whether
/// a slot looked free, the slot taken (NULL: none), the ms until the first held permit
/// expires, and whether a slot was found free since (see [`PERMIT_ACQUIRE_WAITING`]).
static PERMIT_ACQUIRE: LazyLock<String> = LazyLock::new(|| permit_acquire(false));

/// [`PERMIT_ACQUIRE`] for a waiter: when no slot looked free, the waiter marks the slots
/// ([`marking`], `$5` its ms), and the last column says whether one was free at its latest
/// version (freed after the statement's snapshot: look again).
static PERMIT_ACQUIRE_WAITING: LazyLock<String> = LazyLock::new(|| permit_acquire(true));

fn permit_acquire(waiting: bool) -> String {
    let (mark, freed) = match waiting {
        true => (
            format!(
                ",\n{}",
                marking(
                    "leasehold_permits",
                    "NOT EXISTS (SELECT 1 FROM cand)",
                    5,
                    Remark::Always
                )
            ),
            "(SELECT coalesce(bool_or(free), false) FROM m)",
        ),
        false => (String::new(), "false"),
    };
    format!(
        "\
WITH live AS (SELECT slot, permits FROM leasehold_permits
               WHERE key = $1 AND token IS NOT NULL AND expires_at > clock_timestamp()),
other AS (SELECT min(permits) AS theirs FROM live WHERE permits <> $4),
cand AS (SELECT g AS slot FROM generate_series(1, $4) AS g
          WHERE (SELECT theirs FROM other) IS NULL
            AND NOT EXISTS (SELECT 1 FROM live WHERE live.slot = g)
          ORDER BY random() LIMIT 1),
ins AS (INSERT INTO leasehold_permits AS t (key, slot, token, expires_at, permits)
        SELECT $1, slot, $2, clock_timestamp() + $3 * interval '1 millisecond', $4 FROM cand
        ON CONFLICT (key, slot) DO UPDATE
           SET token = EXCLUDED.token, expires_at = EXCLUDED.expires_at, permits = EXCLUDED.permits
         WHERE t.token IS NULL OR t.expires_at <= clock_timestamp()
        RETURNING slot){mark}
SELECT (SELECT theirs FROM other), EXISTS (SELECT 1 FROM cand), (SELECT slot FROM ins),
       (SELECT (extract(epoch FROM min(expires_at) - clock_timestamp()) * 1000)::bigint
          FROM leasehold_permits
         WHERE key = $1 AND token IS NOT NULL AND expires_at > clock_timestamp()),
       {freed}"
    )
}

/// Release, and the notification for waiters (on the lease rows' channel) if one marked the
/// slot ([`marking`]), in one statement.
const PERMIT_RELEASE: &str = "\
WITH r AS (
  UPDATE leasehold_permits SET token = NULL
   WHERE key = $1 AND token = $2 AND expires_at > clock_timestamp()
  RETURNING key, wait_until > clock_timestamp() AS waited)
SELECT CASE WHEN waited THEN pg_notify('leasehold_release', key) END FROM r";

const PERMIT_EXTEND: &str = "\
UPDATE leasehold_permits SET expires_at = clock_timestamp() + $3 * interval '1 millisecond'
 WHERE key = $1 AND token = $2 AND expires_at > clock_timestamp()";

const PERMIT_HOLDERS: &str = "\
SELECT count(*) FROM leasehold_permits
 WHERE key = $1 AND token IS NOT NULL AND expires_at > clock_timestamp()";

/// The terms of elections on lease rows: the fencing number of each win and the winner's id,
/// written in the winning statement.
const CREATE_TERMS: &str = "CREATE TABLE IF NOT EXISTS leasehold_lease_terms (
    key text PRIMARY KEY,
    term bigint NOT NULL,
    leader_id text NOT NULL
)";

/// The lease rows' acquiring upsert, and the term row in the same statement, announced on the
/// lease rows' channel (for [`Election::watch`]). One row: the term (NULL: busy) and the ms the
/// holder's lease still runs. A leader has no hold: `hold_until` left by a plain lock of the
/// name taken with `min_hold` is cleared, or the leader's resignation would keep the row.
///
/// A leader's row is marked for good (`wait_until = 'infinity'`, see [`marking`]): its release
/// (a resignation, a leader given up) is always announced, which the watch hears, campaigners
/// or not. A campaign that finds the row busy marks it as any waiter does (`$5` its ms), for a
/// name a plain lock holds.
static ELECT: LazyLock<String> = LazyLock::new(|| {
    format!(
        "\
WITH a AS (
  INSERT INTO leasehold_leases AS t (key, token, expires_at, fence, wait_until)
  VALUES ($1, $2, clock_timestamp() + $3 * interval '1 millisecond', 1, 'infinity')
  ON CONFLICT (key) DO UPDATE
     SET token = EXCLUDED.token, expires_at = EXCLUDED.expires_at, fence = t.fence + 1,
         hold_until = NULL, wait_until = 'infinity'
   WHERE t.token IS NULL OR t.expires_at <= clock_timestamp()
  RETURNING fence),
e AS (
  INSERT INTO leasehold_lease_terms AS t (key, term, leader_id) SELECT $1, fence, $4 FROM a
  ON CONFLICT (key) DO UPDATE SET term = EXCLUDED.term, leader_id = EXCLUDED.leader_id
  RETURNING term),
n AS (SELECT pg_notify('leasehold_release', $1) FROM e),
{}
SELECT (SELECT term FROM e), (SELECT count(*) FROM n), {REMAINING}",
        marking(
            "leasehold_leases",
            "NOT EXISTS (SELECT 1 FROM a)",
            5,
            Remark::UnlessLasting
        )
    )
});

/// The live lease row of `$1` (ms left, fencing number) and its term row.
const LEADER: &str = "\
SELECT (extract(epoch FROM l.expires_at - clock_timestamp()) * 1000)::bigint, l.fence,
       t.term, t.leader_id
  FROM leasehold_leases l LEFT JOIN leasehold_lease_terms t ON t.key = l.key
 WHERE l.key = $1 AND l.token IS NOT NULL AND l.expires_at > clock_timestamp()";

fn millis(ms: Option<i64>) -> Option<Duration> {
    ms.map(|ms| Duration::from_millis(ms.max(0) as u64))
}

impl PostgresLeaseClient {
    /// Creates a table once per handle (`cell`), accepting a concurrent creation.
    async fn create_once(&self, cell: &tokio::sync::OnceCell<()>, sql: &str) -> Result<()> {
        cell.get_or_try_init(|| async {
            let conn = self.conn().await?;
            match self
                .timed(Operation::Connect, conn.batch_execute(sql))
                .await
            {
                Err(e) if !is_create_race(&e) => Err(e),
                _ => Ok(()),
            }
        })
        .await
        .map(drop)
    }

    /// One statement whose parameters are `(value, type)`; one row.
    async fn row(
        &self,
        op: Operation,
        sql: &'static str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<tokio_postgres::Row> {
        let conn = self.conn().await?;
        self.timed(op, conn.query_one(sql, params)).await
    }
}

impl Primitives for PostgresLeaseClient {
    fn check_name(&self, name: &str) -> Result<()> {
        validate_pg_key(name)
    }

    /// A semaphore of `permits` permits on `name` (no round trip): `permits` slot rows in
    /// `leasehold_permits`, each a lease with a token and an expiry.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a bad name or `permits` outside
    /// 1 ..= [`MAX_PERMITS`](crate::MAX_PERMITS).
    fn semaphore(&self, name: &str, permits: u32) -> Result<Semaphore> {
        let provider = RowSemaphore(Arc::new(RowSemaphoreInner {
            client: self.clone(),
            name: name.to_string(),
            permits,
            table: tokio::sync::OnceCell::new(),
        }));
        Ok(Semaphore::new(
            Backend::PostgresLease,
            name,
            permits,
            provider,
        ))
    }

    /// An election on `name` (no round trip): the lease row of `name` and a term row.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a bad name.
    fn election(&self, name: &str) -> Result<Election> {
        let provider = RowElection {
            client: self.clone(),
            name: name.to_string(),
            table: tokio::sync::OnceCell::new(),
        };
        Ok(Election::new(Backend::PostgresLease, name, provider))
    }
}

/// A semaphore as slot rows (see the module docs).
#[derive(Debug, Clone)]
pub(crate) struct RowSemaphore(Arc<RowSemaphoreInner>);

#[derive(Debug)]
pub(crate) struct RowSemaphoreInner {
    client: PostgresLeaseClient,
    name: String,
    permits: u32,
    /// The permits table exists (created by this handle's first attempt).
    table: tokio::sync::OnceCell<()>,
}

impl RowSemaphore {
    fn check(&self, options: &LockOptions) -> Result<()> {
        // The handle checked the options against the one option table (`core::sync`).
        options.validate()
    }

    /// A token-checked statement on the name's permits (a release, an extend): `NotHeld` when
    /// it touched no row (the token holds no live permit).
    async fn token_checked(
        &self,
        op: Operation,
        sql: &'static str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<()> {
        let s = &self.0;
        let conn = s.client.conn().await?;
        match s.client.timed(op, conn.execute(sql, params)).await? {
            0 => Err(Error::NotHeld {
                key: s.name.clone(),
            }),
            _ => Ok(()),
        }
    }

    /// One attempt; a slot that looked free but was taken meanwhile by another attempt is
    /// followed by another look, so a free permit is not reported busy. `waiting`: a waiter's
    /// attempt, which marks the slots when none looked free ([`PERMIT_ACQUIRE_WAITING`]), and
    /// looks again if one was freed meanwhile; if every look (`permits` + 1) lost its slot, it
    /// answers a lease that ends now (the shortest pause), having marked nothing.
    async fn attempt(&self, options: &LockOptions, waiting: bool) -> Result<TryAcquire> {
        let s = &self.0;
        s.client.create_once(&s.table, &CREATE_PERMITS).await?;
        let ttl = options.ttl();
        let ttl_ms = ttl.as_millis() as i64;
        let permits = s.permits as i32;
        let mark_ms = marking_ms(options);
        let sql = match waiting {
            true => PERMIT_ACQUIRE_WAITING.as_str(),
            false => PERMIT_ACQUIRE.as_str(),
        };
        for _ in 0..=s.permits {
            let token = options.new_token();
            let token_text = token.expose();
            let started = Instant::now();
            // Until the reply says what happened, a slot may be ours: given back if we never
            // learn (a dropped future, a lost reply), as for a lock's row.
            let mut unknown = OnAbandon::new("lease-row permit", || {
                let (semaphore, token) = (self.clone(), token.clone());
                async move {
                    let _ = SemaphoreProvider::release(&semaphore, &token).await;
                }
            });
            let params: [(&(dyn ToSql + Sync), Type); 5] = [
                (&s.name, TEXT),
                (&token_text, TEXT),
                (&ttl_ms, INT8),
                (&permits, INT4),
                (&mark_ms, INT8),
            ];
            let params = &params[..if waiting { 5 } else { 4 }];
            let row = s.client.row(Operation::Acquire, sql, params);
            let row = row.await?;
            unknown.disarm();
            drop(unknown);
            let bad = unexpected(Operation::Acquire);
            let theirs: Option<i32> = row.try_get(0).map_err(&bad)?;
            let looked_free: bool = row.try_get(1).map_err(&bad)?;
            let slot: Option<i32> = row.try_get(2).map_err(&bad)?;
            let remaining: Option<i64> = row.try_get(3).map_err(&bad)?;
            let freed_since: bool = row.try_get(4).map_err(&bad)?;
            if let Some(theirs) = theirs {
                return Err(Error::Conflict {
                    key: s.name.clone(),
                    detail: format!(
                        "the semaphore is held with {theirs} permits; this client asked for {}",
                        s.permits
                    ),
                });
            }
            if slot.is_some() {
                if late(&s.name, started, ttl) {
                    let _ = SemaphoreProvider::release(self, &token).await;
                    return Err(Error::ExpiredOnArrival {
                        key: s.name.clone(),
                        elapsed: started.elapsed(),
                        ttl,
                    });
                }
                let lease = Lease::new(&s.name, token, None, started, ttl);
                let held: Arc<dyn HeldLock> = Arc::new(self.clone());
                if options.auto_extend_enabled() {
                    crate::core::renew::keep_alive(held.clone(), lease.clone(), options);
                }
                return Ok(TryAcquire::Acquired(LockGuard::new(held, lease)));
            }
            // None looked free: busy, unless the waiter's mark found a slot freed since the
            // snapshot (its release may have gone unannounced: look again).
            if !looked_free && !freed_since {
                return Ok(TryAcquire::Busy {
                    remaining: millis(remaining),
                });
            }
        }
        // Every look lost its slot to another attempt (or found one freed since its snapshot):
        // a waiter marked no slot in its last look, so their releases may go unannounced. Its
        // pause is the shortest (a lease said to end now), not the backoff.
        Ok(TryAcquire::Busy {
            remaining: waiting.then_some(Duration::ZERO),
        })
    }
}

/// A waiter for a permit, as the acquisition engine drives it.
impl Attempts for RowSemaphore {
    fn name(&self) -> &str {
        &self.0.name
    }

    async fn attempt(&self, options: &LockOptions, ask: Ask) -> Result<TryAcquire> {
        RowSemaphore::attempt(self, options, ask.wait.is_some()).await
    }

    fn wakes(&self) -> bool {
        true
    }

    async fn wakeups(&self) -> Option<Box<dyn Wakeup>> {
        self.0.client.wakeups(&self.0.name).await
    }
}

/// A held permit, as its guard sees it.
impl HeldLock for RowSemaphore {
    fn release<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, Result<()>> {
        Box::pin(SemaphoreProvider::release(self, lease.token()))
    }

    fn extend<'a>(&'a self, lease: &'a Lease, ttl: Duration) -> BoxFuture<'a, Result<Instant>> {
        Box::pin(extended_by(
            ttl,
            SemaphoreProvider::extend(self, lease.token(), ttl),
        ))
    }
}

#[async_trait::async_trait]
impl crate::core::sync::SemaphoreProvider for RowSemaphore {
    async fn try_acquire(&self, options: &LockOptions) -> Result<TryAcquire> {
        self.check(options)?;
        self.attempt(options, false).await
    }

    /// Waits for a permit through the acquisition engine, woken by a release of one (`LISTEN`).
    async fn acquire(&self, options: &LockOptions) -> Result<LockGuard> {
        self.check(options)?;
        crate::core::acquire::wait(self, options, options.wait_bound()).await
    }

    async fn release(&self, token: &LockToken) -> Result<()> {
        let params: [(&(dyn ToSql + Sync), Type); 2] =
            [(&self.0.name, TEXT), (&token.expose(), TEXT)];
        self.token_checked(Operation::Release, PERMIT_RELEASE, &params)
            .await
    }

    async fn extend(&self, token: &LockToken, ttl: Duration) -> Result<()> {
        let ttl_ms = ttl_millis(ttl)? as i64;
        let params: [(&(dyn ToSql + Sync), Type); 3] = [
            (&self.0.name, TEXT),
            (&token.expose(), TEXT),
            (&ttl_ms, INT8),
        ];
        self.token_checked(Operation::Extend, PERMIT_EXTEND, &params)
            .await
    }

    async fn holders(&self) -> Result<u32> {
        let s = &self.0;
        s.client.create_once(&s.table, &CREATE_PERMITS).await?;
        let row = s
            .client
            .row(Operation::Inspect, PERMIT_HOLDERS, &[(&s.name, TEXT)])
            .await?;
        let n: i64 = row.try_get(0).map_err(unexpected(Operation::Inspect))?;
        Ok(u32::try_from(n).unwrap_or(u32::MAX))
    }
}

/// An election on the lease row of its name and a term row (see the module docs).
#[derive(Debug)]
pub(crate) struct RowElection {
    client: PostgresLeaseClient,
    name: String,
    /// The terms table exists (created by this handle's first call).
    table: tokio::sync::OnceCell<()>,
}

impl RowElection {
    /// One campaign statement: the lease row and the term row (`options` renew it).
    async fn attempt(&self, id: &str, options: &LockOptions) -> Result<TryAcquire> {
        let ttl_ms = options.ttl().as_millis() as i64;
        let mark_ms = marking_ms(options);
        granted(
            &self.name,
            options,
            options.new_token(),
            async |token| {
                let mut unknown = self.client.unknown_attempt(&self.name, token);
                let row = self
                    .client
                    .row(
                        Operation::Acquire,
                        ELECT.as_str(),
                        &[
                            (&self.name, TEXT),
                            (&token.expose(), TEXT),
                            (&ttl_ms, INT8),
                            (&id, TEXT),
                            (&mark_ms, INT8),
                        ],
                    )
                    .await?;
                unknown.disarm();
                let bad = unexpected(Operation::Acquire);
                let term: Option<i64> = row.try_get(0).map_err(&bad)?;
                let remaining: Option<i64> = row.try_get(2).map_err(&bad)?;
                Ok(match term {
                    Some(term) => Grant::Taken(term as u64),
                    None => Grant::Busy {
                        remaining: millis(remaining),
                    },
                })
            },
            async |token| {
                let _ = self.client.give_back(&self.name, token).await;
            },
            |token, term, started| {
                let lease = Lease::new(&self.name, token, Some(term), started, options.ttl());
                self.client.guard(lease, options, false)
            },
        )
        .await
    }
}

/// A candidate of a [`RowElection`], as the acquisition engine drives it.
struct Campaign<'a> {
    election: &'a RowElection,
    id: &'a str,
}

impl Attempts for Campaign<'_> {
    fn name(&self) -> &str {
        &self.election.name
    }

    async fn attempt(&self, options: &LockOptions, _: Ask) -> Result<TryAcquire> {
        self.election.attempt(self.id, options).await
    }

    fn wakes(&self) -> bool {
        true
    }

    async fn wakeups(&self) -> Option<Box<dyn Wakeup>> {
        self.election.client.wakeups(&self.election.name).await
    }
}

#[async_trait::async_trait]
impl crate::core::sync::ElectionProvider for RowElection {
    /// Waits for the name's lease row through the acquisition engine, woken by a release
    /// (`LISTEN`), for as long as the handle set (for ever without a wait:
    /// `Election::campaign`).
    async fn campaign(&self, id: &str, options: &LockOptions) -> Result<LockGuard> {
        self.client.check(&self.name, options)?;
        let options = options.clone().fencing(true).auto_extend(true);
        self.client.create_once(&self.table, CREATE_TERMS).await?;
        let campaign = Campaign { election: self, id };
        crate::core::acquire::wait(&campaign, &options, options.wait_bound()).await
    }

    async fn leader(&self) -> Result<Option<Leader>> {
        self.client.create_once(&self.table, CREATE_TERMS).await?;
        let conn = self.client.conn().await?;
        let params: [(&(dyn ToSql + Sync), Type); 1] = [(&self.name, TEXT)];
        let Some(row) = self
            .client
            .timed(Operation::Inspect, conn.query_opt(LEADER, &params))
            .await?
        else {
            return Ok(None);
        };
        let bad = unexpected(Operation::Inspect);
        let ms: Option<i64> = row.try_get(0).map_err(&bad)?;
        let fence: i64 = row.try_get(1).map_err(&bad)?;
        let term: Option<i64> = row.try_get(2).map_err(&bad)?;
        let id: Option<String> = row.try_get(3).map_err(&bad)?;
        match (term, id) {
            (Some(term), Some(id)) if term == fence => Ok(Some(Leader {
                id,
                term: term as u64,
                ttl: millis(ms),
            })),
            _ => Err(Error::Conflict {
                key: self.name.clone(),
                detail: "the election's lease row is held, but not by a campaign (a plain lock?)"
                    .into(),
            }),
        }
    }

    /// A leader elected or resigning is announced on the lease rows' channel (`LISTEN`; through
    /// a transaction pooler announcements may be lost, and the watch polls).
    async fn changes(&self) -> Option<Box<dyn LeaderChanges>> {
        let announcements = self.client.releases_of(&self.name).await?;
        Some(Box::new(announcements) as Box<dyn LeaderChanges>)
    }
}

/// The announcements of one election: its name's releases and wins.
impl LeaderChanges for NameReleases {
    fn mark_seen(&mut self) {
        NameReleases::mark_seen(self);
    }

    fn changed(&mut self) -> BoxFuture<'_, ()> {
        Box::pin(self.next())
    }
}
