use std::time::{Duration, Instant};

use crate::core::driver::Driver;
use crate::core::error::Error;
use crate::core::options::LockOptions;

use super::lifetime::{lease_lifetime, silence_bound, validity_from};
use super::sql::{try_acquire_sql, wait_acquire_sql};
use super::{PostgresClient, PostgresLeaseClient};

#[test]
fn the_silence_bound_is_the_earlier_of_keepalive_and_user_timeout() {
    let s = Duration::from_secs;
    // Unset (0): Linux's defaults, 7200 + 75 x 9 s.
    assert_eq!(silence_bound(0, 0, 0, 0), s(7875));
    assert_eq!(silence_bound(3, 1, 2, 0), s(5));
    assert_eq!(silence_bound(3, 1, 2, 4000), s(4));
    assert_eq!(silence_bound(3, 1, 2, 60_000), s(5));
    assert_eq!(silence_bound(-1, 10, 0, -5), s(7200 + 90));
    assert_eq!(lease_lifetime(s(60), s(5)), s(5));
    assert_eq!(lease_lifetime(s(2), s(5)), s(2));
    let now = Instant::now();
    assert!(validity_from(now, s(60), s(5)) <= now + s(5));
}

#[test]
fn the_acquiring_statements_check_before_they_lock() {
    for event in [false, true] {
        for sql in [try_acquire_sql(event), wait_acquire_sql(event)] {
            let check = sql.find("AS mine").unwrap();
            let lock = sql.find("advisory_lock(").unwrap();
            assert!(check < lock, "{sql}");
            assert!(sql.contains("WHEN c.moved OR c.mine THEN false"));
        }
    }
}

/// The acquiring statement's own check (review 2026-12-02, U3): a server session that already
/// holds the key (one a pooler handed over with another client's lock; the connect check now
/// refuses poolers, so this is the second line) is never granted it again, although advisory
/// locks are reentrant; and that sign latches the client. Reproduced on a direct connection by
/// letting one of the client's own idle sessions take the key behind its back.
#[tokio::test]
async fn a_server_session_that_already_holds_the_key_is_never_granted_it_again() {
    let Some(pg) = leasehold_harness::postgres_for_test() else {
        return;
    };
    let client = PostgresClient::connect(&pg.url()).await.unwrap();
    let aside = client.take_session().await.unwrap();
    let handed = client.take_session().await.unwrap();
    handed
        .client
        .execute(
            "SELECT pg_advisory_lock(hashtextextended('handed', 0))",
            &[],
        )
        .await
        .unwrap();
    client.put_back(handed);
    let opts = LockOptions::new(Duration::from_secs(30)).fencing(true);
    match client.try_acquire("handed", &opts).await {
        Err(Error::Topology { reason }) => assert!(reason.contains("already held"), "{reason}"),
        other => panic!("expected a Topology error, got {other:?}"),
    }
    let again = client.try_acquire("unrelated", &opts).await;
    assert!(matches!(again, Err(Error::Topology { .. })), "{again:?}");
    let fence = aside
        .client
        .query_opt(
            "SELECT fence FROM leasehold_locks WHERE key = 'handed'",
            &[],
        )
        .await
        .unwrap();
    assert!(fence.is_none(), "no fencing number was drawn");
}

/// Lease rows prepare their statements on a connection whose server session is its own (the
/// server lists them in the session's `pg_prepared_statements`), and prepare nothing through a
/// pooler, whose startup announces a key of its own (through PgBouncer 1.18 in transaction
/// mode a named statement would land on other server sessions: `postgres_backend`'s
/// `lease_rows_work_through_a_transaction_pooler` fails if they prepare there).
#[tokio::test]
async fn lease_rows_prepare_their_statements_only_on_a_session_of_their_own() {
    let Some(pg) = leasehold_harness::postgres_for_test() else {
        return;
    };
    let direct = PostgresLeaseClient::connect(&pg.url()).await.unwrap();
    let opts = LockOptions::new(Duration::from_secs(30));
    let held = direct
        .try_acquire("prepared", &opts)
        .await
        .unwrap()
        .acquired()
        .unwrap();
    held.extend(Duration::from_secs(30)).await.unwrap();
    held.release().await.unwrap();
    let conn = direct.conn().await.unwrap();
    assert!(conn.prepares());
    let listed: Vec<String> = conn
        .query("SELECT statement FROM pg_prepared_statements", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    for part in [
        "INSERT INTO leasehold_leases",
        "UPDATE leasehold_leases l",
        "UPDATE leasehold_leases SET expires_at",
    ] {
        assert!(
            listed.iter().any(|s| s.contains(part)),
            "{part:?} prepared: {listed:?}"
        );
    }

    let Some(bouncer) =
        leasehold_harness::pgbouncer_for_test(&pg, &leasehold_harness::PgBouncerOptions::new())
    else {
        return;
    };
    let pooled = PostgresLeaseClient::connect(&bouncer.url()).await.unwrap();
    let held = pooled
        .try_acquire("pooled-unnamed", &opts)
        .await
        .unwrap()
        .acquired()
        .unwrap();
    held.release().await.unwrap();
    assert!(!pooled.conn().await.unwrap().prepares());
}
