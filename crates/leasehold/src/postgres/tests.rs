use std::time::{Duration, Instant};

use crate::core::driver::Driver;
use crate::core::error::Error;
use crate::core::options::LockOptions;

use super::PostgresClient;
use super::lifetime::{lease_lifetime, silence_bound, validity_from};
use super::sql::{try_acquire_sql, wait_acquire_sql};

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
