//! W1's floor on etcd and PostgreSQL (issue 32, target 7): the raw client doing a lock's round
//! trips with no lock logic, beside leasehold through the one lock API in WB.
//!
//! - **etcd**: one `Txn` to take the key (`If(CreateRevision(key) == 0) Then(Put(key, lease))`,
//!   on one lease granted before the run, as a session's) and one to release it
//!   (`If(Value(key) == v) Then(Delete(key))`).
//! - **PostgreSQL session locks**: `pg_try_advisory_lock` and `pg_advisory_unlock` on
//!   `hashtextextended(key, 0)`, prepared, on one connection. Beside it, a reference: the same
//!   with the key's fencing number drawn in the granting statement (the counter row upserted
//!   only if granted, on a table of the floor's own), the least a fenced session lock's server
//!   does: what a fencing number costs, with no lock logic. And that fenced floor with each
//!   statement appending its event as leasehold's recording statements do (an insert into a
//!   history table of the floor's own, shaped as `leasehold_history`, and the key's trim to
//!   the default cap and retention), the least an event riding in the statement costs: what
//!   the machine allows recording the history (issue 32, target 3). And leasehold's own two
//!   statements sent raw (`leasehold::internal::postgres`), prepared: what the server charges
//!   for all that makes a session lock a fenced lease that refuses a pooler (the fence, the
//!   checks that the session is the one it started on and does not hold the key already, the
//!   idle limit, the keepalive reads), with no client logic: the library's own share is the rest.
//! - **PostgreSQL lease rows**: one `INSERT … ON CONFLICT … DO UPDATE … WHERE expired
//!   RETURNING fence` and one token-checked `UPDATE`, on a table of the floor's own, prepared,
//!   as leasehold sends them on a connection of its own (through a pooler it sends them
//!   unnamed). Beside it, a reference: the same two statements each appending its event and
//!   trimming the key's, as leasehold's recording lease rows do (the history table above):
//!   what the machine allows a lease row's history (issue 32, target 3).

use std::time::Duration;

use anyhow::Context;

use super::stats::Summary;
use super::workloads::{measure_cycles, warm_ups};

/// W1's floor on etcd at `endpoints` (`host:port,…`).
pub(crate) async fn w1_etcd(
    endpoints: String,
    cycles: u64,
    prefix: String,
) -> anyhow::Result<(Summary, Vec<(f64, f64)>)> {
    use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp};
    let endpoints: Vec<String> = endpoints.split(',').map(str::to_string).collect();
    let client = etcd_client::Client::connect(&endpoints, None)
        .await
        .context("connecting to etcd")?;
    // Longer than the run: the floor does not keep it alive.
    let lease = client.lease_client().grant(600, None).await?.id();
    let (summary, cdf) = measure_cycles(cycles, warm_ups(cycles), &prefix, |key| {
        let mut kv = client.kv_client();
        async move {
            let take = Txn::new()
                .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
                .and_then([TxnOp::put(
                    key.clone(),
                    "v",
                    Some(PutOptions::new().with_lease(lease)),
                )]);
            anyhow::ensure!(kv.txn(take).await?.succeeded(), "distinct key busy");
            let release = Txn::new()
                .when([Compare::value(key.clone(), CompareOp::Equal, "v")])
                .and_then([TxnOp::delete(key, None)]);
            anyhow::ensure!(kv.txn(release).await?.succeeded(), "not held");
            Ok(())
        }
    })
    .await?;
    client.lease_client().revoke(lease).await?;
    Ok((
        summary.with("requests", "Txn put-if-absent + Txn delete-if-value"),
        cdf,
    ))
}

/// Which of W1's PostgreSQL floors.
#[derive(Debug, Clone, Copy)]
pub(crate) enum PgFloor {
    /// Session advisory locks, bare.
    Advisory,
    /// Session advisory locks drawing a fencing number when granted.
    FencedAdvisory,
    /// [`PgFloor::FencedAdvisory`], each statement appending its event and trimming the key's.
    FencedAdvisoryHistory,
    /// Session advisory locks through leasehold's own statements, sent raw.
    SessionStatements,
    /// [`PgFloor::SessionStatements`] through the statements that append their events.
    SessionStatementsHistory,
    /// Lease rows.
    LeaseRows,
    /// [`PgFloor::LeaseRows`], each statement appending its event and trimming the key's.
    LeaseRowsHistory,
}

/// The fenced floor's granting statement: the advisory lock, the fence row's upsert if granted
/// (`i`), then `{event}` (CTEs, each starting with a comma, or nothing).
const FENCED_TAKE: &str = "\
WITH l AS (SELECT pg_try_advisory_lock(hashtextextended($1, 0)) AS got),
i AS (INSERT INTO leasehold_floor_fences AS t (key, fence, holder)
      SELECT $1, 1, 'v' FROM l WHERE l.got
      ON CONFLICT (key) DO UPDATE SET fence = t.fence + 1, holder = EXCLUDED.holder
      RETURNING fence){event}
SELECT fence FROM i";

/// The history floor's table: `leasehold_history`'s columns and index.
const HISTORY_TABLE: &str = "\
CREATE TABLE IF NOT EXISTS leasehold_floor_history (
    id bigserial PRIMARY KEY,
    key text NOT NULL,
    at timestamptz NOT NULL DEFAULT clock_timestamp(),
    kind text NOT NULL,
    fencing bigint,
    holder text,
    owner text,
    detail text
);
CREATE INDEX IF NOT EXISTS leasehold_floor_history_key_id ON leasehold_floor_history (key, id)";

/// CTEs appending a `kind` event for key `$1` (fencing number `fence`) for each row of
/// `source`, then trimming the key's events past the retention or beyond the cap of the
/// library's default [`leasehold::HistoryOptions`] (the W1 lockers' own), as a recording
/// leasehold statement does.
fn event(source: &str, kind: &str, fence: &str) -> String {
    let history = leasehold::HistoryOptions::default();
    let (retention_ms, cap) = (
        history.retention_period().as_millis(),
        history.events_per_key(),
    );
    format!(
        ",
h AS (INSERT INTO leasehold_floor_history (key, kind, fencing, holder, owner)
      SELECT $1, '{kind}', {fence}, 'v', 'o' FROM {source} RETURNING id),
ht AS (DELETE FROM leasehold_floor_history
        WHERE EXISTS (SELECT 1 FROM h) AND key = $1
          AND (at < clock_timestamp() - {retention_ms}::bigint * interval '1 millisecond'
               OR id <= (SELECT id FROM leasehold_floor_history WHERE key = $1
                          ORDER BY id DESC OFFSET {cap} - 1 LIMIT 1)))"
    )
}

/// W1's floor on PostgreSQL at `url`.
pub(crate) async fn w1_postgres(
    url: String,
    cycles: u64,
    prefix: String,
    floor: PgFloor,
) -> anyhow::Result<(Summary, Vec<(f64, f64)>)> {
    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .context("connecting to PostgreSQL")?;
    let conn = tokio::spawn(connection);
    let unlock = "SELECT 1 WHERE pg_advisory_unlock(hashtextextended($1, 0))";
    if matches!(
        floor,
        PgFloor::FencedAdvisory | PgFloor::FencedAdvisoryHistory
    ) {
        client
            .batch_execute(
                "CREATE TABLE IF NOT EXISTS leasehold_floor_fences (key text PRIMARY KEY, \
                 fence bigint NOT NULL, holder text)",
            )
            .await?;
    }
    let (take, release) = match floor {
        PgFloor::LeaseRows | PgFloor::LeaseRowsHistory => {
            client
                .batch_execute(
                    "CREATE TABLE IF NOT EXISTS leasehold_floor_leases (key text PRIMARY KEY, \
                     token text, expires_at timestamptz NOT NULL, fence bigint NOT NULL)",
                )
                .await?;
            let (take, release) = (
                "INSERT INTO leasehold_floor_leases AS t (key, token, expires_at, fence)
                 SELECT $1, 'v', n + interval '10 seconds', 1 FROM clock_timestamp() AS n
                 ON CONFLICT (key) DO UPDATE SET token = EXCLUDED.token,
                     expires_at = EXCLUDED.expires_at, fence = t.fence + 1
                  WHERE t.token IS NULL OR t.expires_at <= clock_timestamp()
                 RETURNING fence",
                "UPDATE leasehold_floor_leases SET token = NULL
                  WHERE key = $1 AND token = 'v' AND expires_at > clock_timestamp()
                 RETURNING key",
            );
            match floor {
                PgFloor::LeaseRowsHistory => {
                    client.batch_execute(HISTORY_TABLE).await?;
                    (
                        format!(
                            "WITH a AS ({take}){} SELECT fence FROM a",
                            event("a", "acquired", "a.fence")
                        ),
                        format!(
                            "WITH r AS ({release}){} SELECT 1 FROM r",
                            event("r", "released", "$2")
                        ),
                    )
                }
                _ => (take.to_string(), release.to_string()),
            }
        }
        PgFloor::FencedAdvisory => (FENCED_TAKE.replace("{event}", ""), unlock.to_string()),
        PgFloor::FencedAdvisoryHistory => {
            client.batch_execute(HISTORY_TABLE).await?;
            (
                FENCED_TAKE.replace("{event}", &event("i", "acquired", "i.fence")),
                format!(
                    "WITH u AS (SELECT pg_advisory_unlock(hashtextextended($1, 0)) AS unlocked),
                     r AS (SELECT 1 FROM u WHERE u.unlocked){}
                     SELECT 1 FROM r",
                    event("r", "released", "$2")
                ),
            )
        }
        PgFloor::Advisory => (
            "SELECT 1 WHERE pg_try_advisory_lock(hashtextextended($1, 0))".to_string(),
            unlock.to_string(),
        ),
        PgFloor::SessionStatements | PgFloor::SessionStatementsHistory => {
            let recording = matches!(floor, PgFloor::SessionStatementsHistory);
            let [tables, take, release] =
                leasehold::internal::postgres::session_lock_statements(recording);
            client.batch_execute(&tables).await?;
            (take, release)
        }
    };
    // Prepared, as leasehold prepares both kinds on a connection of its own.
    let (take, release) = (
        client.prepare(&take).await?,
        client.prepare(&release).await?,
    );
    let history = matches!(
        floor,
        PgFloor::FencedAdvisoryHistory | PgFloor::LeaseRowsHistory
    );
    // leasehold's session statements: the token, the TTL (ms, as text) and the session's
    // server process, as a session sends them; recording, the event's holder and owner and the
    // default cap and retention (the W1 lockers' own).
    let session = match floor {
        PgFloor::SessionStatements | PgFloor::SessionStatementsHistory => {
            let pid: i32 = client
                .query_one("SELECT pg_backend_pid()", &[])
                .await?
                .get(0);
            let defaults = leasehold::HistoryOptions::default();
            let event = matches!(floor, PgFloor::SessionStatementsHistory).then(|| {
                (
                    "v".to_string(),
                    "o".to_string(),
                    defaults.retention_period().as_millis() as i64,
                    defaults.events_per_key() as i64,
                )
            });
            Some(("v", "10000".to_string(), pid, event))
        }
        _ => None,
    };
    let (summary, cdf) = measure_cycles(cycles, warm_ups(cycles), &prefix, |key| {
        let (client, take, release, session) = (&client, &take, &release, &session);
        async move {
            type Param<'a> = &'a (dyn tokio_postgres::types::ToSql + Sync);
            if let Some((token, ttl, pid, event)) = session {
                // One row: moved, mine, the fencing number (NULL: not granted), the keepalive
                // settings; then one row whose first column says it unlocked.
                let mut params: Vec<Param<'_>> = vec![&key, token, ttl, pid];
                let mut again: Vec<Param<'_>> = vec![&key];
                if let Some((holder, owner, retention, cap)) = event {
                    params.extend([holder as Param<'_>, owner, retention, cap, &true]);
                    again.extend([holder as Param<'_>, owner, retention, cap]);
                }
                let took = client.query_one(take, &params).await?;
                let fence: Option<i64> = took.get(2);
                anyhow::ensure!(fence.is_some(), "distinct key busy");
                if event.is_some() {
                    again.push(&fence);
                }
                let released = client.query_one(release, &again).await?;
                anyhow::ensure!(released.get::<_, bool>(0), "not held");
                return Ok(());
            }
            let took = client.query_opt(take, &[&key]).await?;
            let released = match (history, &took) {
                (true, Some(row)) => {
                    let fence: i64 = row.get(0);
                    client.query_opt(release, &[&key, &fence]).await?
                }
                _ => client.query_opt(release, &[&key]).await?,
            };
            anyhow::ensure!(took.is_some(), "distinct key busy");
            anyhow::ensure!(released.is_some(), "not held");
            Ok(())
        }
    })
    .await?;
    drop(client);
    let _ = tokio::time::timeout(Duration::from_secs(5), conn).await;
    let what = match floor {
        PgFloor::LeaseRows => "INSERT ON CONFLICT + UPDATE, prepared",
        PgFloor::LeaseRowsHistory => {
            "the lease-row floor's statements, each inserting its event and trimming the key's \
             (the default cap and retention), prepared"
        }
        PgFloor::FencedAdvisory => {
            "pg_try_advisory_lock with the fence row's upsert + pg_advisory_unlock, prepared"
        }
        PgFloor::FencedAdvisoryHistory => {
            "the fenced floor's statements, each inserting its event and trimming the key's \
             (the default cap and retention), prepared"
        }
        PgFloor::Advisory => "pg_try_advisory_lock + pg_advisory_unlock, prepared",
        PgFloor::SessionStatements => "leasehold's session lock statements, raw, prepared",
        PgFloor::SessionStatementsHistory => {
            "leasehold's session lock statements appending their events, raw, prepared"
        }
    };
    Ok((summary.with("statements", what), cdf))
}
