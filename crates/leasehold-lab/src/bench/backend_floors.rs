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
//!   does: what a fencing number costs, with no lock logic.
//! - **PostgreSQL lease rows**: one `INSERT … ON CONFLICT … DO UPDATE … WHERE expired
//!   RETURNING fence` and one token-checked `UPDATE`, on a table of the floor's own, prepared,
//!   as leasehold sends them on a connection of its own (through a pooler it sends them
//!   unnamed).

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
    /// Lease rows.
    LeaseRows,
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
    let (take, release) = match floor {
        PgFloor::LeaseRows => {
            client
                .batch_execute(
                    "CREATE TABLE IF NOT EXISTS leasehold_floor_leases (key text PRIMARY KEY, \
                     token text, expires_at timestamptz NOT NULL, fence bigint NOT NULL)",
                )
                .await?;
            (
                "INSERT INTO leasehold_floor_leases AS t (key, token, expires_at, fence)
                 SELECT $1, 'v', n + interval '10 seconds', 1 FROM clock_timestamp() AS n
                 ON CONFLICT (key) DO UPDATE SET token = EXCLUDED.token,
                     expires_at = EXCLUDED.expires_at, fence = t.fence + 1
                  WHERE t.token IS NULL OR t.expires_at <= clock_timestamp()
                 RETURNING fence",
                "UPDATE leasehold_floor_leases SET token = NULL
                  WHERE key = $1 AND token = 'v' AND expires_at > clock_timestamp()
                 RETURNING key",
            )
        }
        PgFloor::FencedAdvisory => {
            client
                .batch_execute(
                    "CREATE TABLE IF NOT EXISTS leasehold_floor_fences (key text PRIMARY KEY, \
                     fence bigint NOT NULL, holder text)",
                )
                .await?;
            (
                "WITH l AS (SELECT pg_try_advisory_lock(hashtextextended($1, 0)) AS got)
                 INSERT INTO leasehold_floor_fences AS t (key, fence, holder)
                 SELECT $1, 1, 'v' FROM l WHERE l.got
                 ON CONFLICT (key) DO UPDATE SET fence = t.fence + 1, holder = EXCLUDED.holder
                 RETURNING fence",
                unlock,
            )
        }
        PgFloor::Advisory => (
            "SELECT 1 WHERE pg_try_advisory_lock(hashtextextended($1, 0))",
            unlock,
        ),
    };
    // Prepared, as leasehold prepares both kinds on a connection of its own.
    let (take, release) = (client.prepare(take).await?, client.prepare(release).await?);
    let (summary, cdf) = measure_cycles(cycles, warm_ups(cycles), &prefix, |key| {
        let (client, take, release) = (&client, &take, &release);
        async move {
            let took = client.query_opt(take, &[&key]).await?.is_some();
            let released = client.query_opt(release, &[&key]).await?.is_some();
            anyhow::ensure!(took, "distinct key busy");
            anyhow::ensure!(released, "not held");
            Ok(())
        }
    })
    .await?;
    drop(client);
    let _ = tokio::time::timeout(Duration::from_secs(5), conn).await;
    let what = match floor {
        PgFloor::LeaseRows => "INSERT ON CONFLICT + UPDATE, prepared",
        PgFloor::FencedAdvisory => {
            "pg_try_advisory_lock with the fence row's upsert + pg_advisory_unlock, prepared"
        }
        PgFloor::Advisory => "pg_try_advisory_lock + pg_advisory_unlock, prepared",
    };
    Ok((summary.with("statements", what), cdf))
}
