//! Lease-row waiters of one client: one woken per release, through one `LISTEN` connection.

use leasehold::Locker;
use leasehold_harness::postgres_for_test;

use super::{LISTENING, held_row, lease_url, patient, refused_after_listening, sessions, until};

/// A statement-level trigger on the leases' table counting the statements that insert into it:
/// every acquiring statement (a one-try upsert, a waiter's, taken or busy), and nothing else a
/// lock sends (its release and extend only update). Counted in the statement's own transaction.
const COUNT_ATTEMPTS: &str = "
    CREATE TABLE attempts_counted (n bigint NOT NULL);
    INSERT INTO attempts_counted VALUES (0);
    CREATE FUNCTION count_attempt() RETURNS trigger LANGUAGE plpgsql AS
      $$ BEGIN UPDATE attempts_counted SET n = n + 1; RETURN NULL; END $$;
    CREATE TRIGGER count_attempts BEFORE INSERT ON leasehold_leases
      FOR EACH STATEMENT EXECUTE FUNCTION count_attempt();";

async fn attempts(admin: &tokio_postgres::Client) -> i64 {
    admin
        .query_one("SELECT n FROM attempts_counted", &[])
        .await
        .unwrap()
        .get(0)
}

/// One release wakes one of a client's lock waiters of the name, not all of them: ten waiters
/// of one locker each take the lock in turn and release it at once, and the whole chain costs
/// about two attempts a handoff, counted on the server (the waiter its client's release wakes
/// at once, which takes the lock, and the one the release's notification wakes, which finds it
/// taken: 18 or 19 here). Waking them all at each release would cost 10 + 9 + ... + 1 = 55. No
/// release is lost: the waiters' 120 s backoff is far past the test's bound, so a release that
/// woke nobody would leave the rest asleep. And waiters that start together listen on one
/// connection.
#[tokio::test]
async fn one_lease_row_waiter_is_woken_per_release() {
    const WAITERS: i64 = 10;
    let Some(pg) = postgres_for_test() else {
        return;
    };
    let (admin, opts, held) = held_row(&pg, "chain").await;
    admin.batch_execute(COUNT_ATTEMPTS).await.unwrap();
    let locker = Locker::connect(&lease_url(&pg)).await.unwrap();
    let mut waiters = Vec::new();
    for _ in 0..WAITERS {
        let (locker, waiting) = (locker.clone(), patient(&opts));
        waiters.push(tokio::spawn(async move {
            let got = locker.acquire("chain", &waiting).await.unwrap();
            got.release().await.unwrap();
        }));
    }
    // Each waiter's first attempt, and its attempt once it listens: from then on only a
    // release wakes it (the holder's lease is 60 s).
    until("every waiter refused after it listened", || async {
        attempts(&admin).await >= 2 * WAITERS
    })
    .await;
    assert_eq!(
        sessions(&admin, LISTENING).await,
        1,
        "the waiters of one client opened more than one LISTEN connection"
    );
    held.release().await.unwrap();
    for waiter in waiters {
        tokio::time::timeout(super::BOUND, waiter)
            .await
            .expect("a waiter missed its wake-up")
            .unwrap();
    }
    let chain = attempts(&admin).await - 2 * WAITERS;
    assert!(
        chain <= 3 * WAITERS,
        "{chain} attempts for {WAITERS} handoffs: waiters woken in a herd"
    );
}

/// A client's own release of a lock wakes one of its waiters of the name as soon as the release
/// is on the connection, without the release's notification: here the row's mark is cleared
/// from outside once the waiter sleeps, so the release sends no `NOTIFY`, and the waiter's 120 s
/// backoff is far past the test's bound.
#[tokio::test]
async fn a_clients_own_release_wakes_its_lease_row_waiter() {
    let Some(pg) = postgres_for_test() else {
        return;
    };
    let locker = Locker::connect(&lease_url(&pg)).await.unwrap();
    let opts = leasehold::LockOptions::new(std::time::Duration::from_secs(60));
    let held = locker.acquire("own", &opts).await.unwrap();
    let waiter = {
        let (locker, waiting) = (locker.clone(), patient(&opts));
        tokio::spawn(async move { locker.acquire("own", &waiting).await.unwrap() })
    };
    let admin = super::admin(&pg).await;
    refused_after_listening(&admin, 1).await;
    admin
        .execute(
            "UPDATE leasehold_leases SET wait_until = NULL WHERE key = 'own'",
            &[],
        )
        .await
        .unwrap();
    held.release().await.unwrap();
    let got = tokio::time::timeout(super::BOUND, waiter)
        .await
        .expect("woken by its client's release, not the backoff")
        .unwrap();
    got.release().await.unwrap();
}
