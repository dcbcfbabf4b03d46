//! Review 2026-12-02: reloads, late grants, `min_hold` on lease rows, orphans.

use super::*;

// U5: the TCP settings that bound a session's silence were read once per pooled session; a
// `pg_reload_conf()` that lowers them applies to live server sessions, but a pooled session (and
// a held lock's) kept counting on the old bound. Now every acquiring and extending statement
// reads them, and the validity is computed from that reply.
#[tokio::test]
async fn a_reload_that_lowers_the_tcp_settings_bounds_the_next_acquire_and_extend() {
    let Some(pg) = postgres_for_test() else {
        return;
    };
    let admin = admin(&pg).await;
    let client = Locker::from(PostgresClient::connect(&pg.url()).await.unwrap());
    let opts = LockOptions::new(Duration::from_secs(60));
    // A held lock and a pooled session, both under the server's defaults.
    let held = client
        .try_acquire("held", &opts)
        .await
        .unwrap()
        .acquired()
        .unwrap();
    assert!(held.lease().remaining() > Duration::from_secs(30));
    let pooled = client
        .try_acquire("pooled", &opts)
        .await
        .unwrap()
        .acquired()
        .unwrap();
    assert!(pooled.lease().remaining() > Duration::from_secs(30));
    pooled.release().await.unwrap();

    // Keepalive now gives up after 3 + 1 x 2 = 5 s of silence, on every live server session.
    for statement in [
        "ALTER SYSTEM SET tcp_keepalives_idle = 3",
        "ALTER SYSTEM SET tcp_keepalives_interval = 1",
        "ALTER SYSTEM SET tcp_keepalives_count = 2",
        "SELECT pg_reload_conf()",
    ] {
        admin.batch_execute(statement).await.unwrap();
    }
    until("the reload is in effect", || async {
        let idle: String = admin
            .query_one("SELECT current_setting('tcp_keepalives_idle')", &[])
            .await
            .unwrap()
            .get(0);
        idle == "3"
    })
    .await;
    let bound = Duration::from_secs(5);
    until(
        "the next acquisition counts on the lowered bound",
        || async {
            let g = client
                .try_acquire("pooled", &opts)
                .await
                .unwrap()
                .acquired()
                .unwrap();
            let left = g.lease().remaining();
            g.release().await.unwrap();
            left <= bound
        },
    )
    .await;
    until("the next extend counts on the lowered bound", || async {
        held.extend(Duration::from_secs(60)).await.unwrap();
        held.lease().remaining() <= bound
    })
    .await;
    assert!(held.is_held());
    held.release().await.unwrap();
}

// F1: a waiter granted the lock after waiting in the server's queue for longer than its lease
// lifetime used to find the grant "expired on arrival", give it back, and queue again at the
// tail: the server's arrival order was lost, and each give-back drew a fencing number. Now the
// session lock, which cannot lapse while its session lives, is extended on the same session and
// counted from that statement: B and C, queued in that order behind a holder that keeps the
// lock longer than their TTL, win in that order with the next two numbers.
#[tokio::test]
async fn waiters_granted_after_waiting_longer_than_their_ttl_keep_their_turn() {
    let Some(pg) = postgres_for_test() else {
        return;
    };
    let admin = admin(&pg).await;
    let client = Locker::from(PostgresClient::connect(&pg.url()).await.unwrap());
    let ttl = Duration::from_secs(1);
    // The holder's own lease is long: only the waiters' TTL matters here, and a 1 s lease kept
    // by renewals every 333 ms can lapse on a loaded machine (then `is_held` below fails).
    let holder = client
        .try_acquire(
            "late",
            &LockOptions::new(Duration::from_secs(60)).fencing(true),
        )
        .await
        .unwrap()
        .acquired()
        .unwrap();
    let first = holder.fencing_token().unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let wait = LockOptions::new(ttl).fencing(true).wait(BOUND);
    let mut tasks = Vec::new();
    for (i, name) in ["B", "C"].into_iter().enumerate() {
        let (client, wait, tx) = (client.clone(), wait.clone(), tx.clone());
        tasks.push(tokio::spawn(async move {
            let guard = client.acquire("late", &wait).await.unwrap();
            tx.send((name, guard.fencing_token().unwrap(), guard.is_held()))
                .unwrap();
            guard.release().await.unwrap();
        }));
        until("waiter queued", || async {
            waiting(&admin).await == i as i64 + 1
        })
        .await;
    }
    // The waiters have waited longer than their lease lifetime.
    server_clock_passes(&admin, ttl * 2).await;
    assert!(holder.is_held());
    holder.release().await.unwrap();
    let mut order = Vec::new();
    for _ in 0..2 {
        order.push(rx.recv().await.unwrap());
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(
        order,
        [("B", first + 1, true), ("C", first + 2, true)],
        "granted in arrival order, each grant kept (a give-back draws a number)"
    );
}

/// `key`'s lease row: its token, and how long it stays busy by the server's clock (ms; `None`:
/// no row).
async fn lease_row(admin: &tokio_postgres::Client, key: &str) -> Option<(Option<String>, i64)> {
    admin
        .query_opt(
            "SELECT token, (extract(epoch FROM expires_at - clock_timestamp()) * 1000)::bigint
               FROM leasehold_leases WHERE key = $1",
            &[&key],
        )
        .await
        .unwrap()
        .map(|r| (r.get(0), r.get(1)))
}

// L2 (lease rows): with min_hold and auto-extension, a renewal that passed its check before the
// release and reached the server after it matched the kept row (it kept our token) and
// extended it to a full TTL: the key stayed busy up to 30 s instead of min_hold. That renewal
// is the by-token extend sent here after the release (the same statement, the same token; a
// race on two threads hits it once in hundreds of rounds). Now a kept row is marked released
// and no extend, nor a second release, matches it.
#[tokio::test]
async fn a_renewal_racing_a_min_hold_release_never_extends_the_kept_row() {
    use leasehold::postgres::PostgresLeaseClient;
    let Some(pg) = postgres_for_test() else {
        return;
    };
    let admin = admin(&pg).await;
    let client = Locker::from(PostgresLeaseClient::connect(&lease_url(&pg)).await.unwrap());
    let min_hold = Duration::from_secs(1);
    let ttl = Duration::from_secs(30);
    let opts = LockOptions::new(ttl)
        .min_hold(min_hold)
        .auto_extend(true)
        .renew_every(Duration::from_millis(1));
    let g = client
        .try_acquire("l2", &opts)
        .await
        .unwrap()
        .acquired()
        .unwrap();
    let first = g.valid_until();
    until("a renewal", || async { g.valid_until() > first }).await;
    let token = g.token().clone();
    g.release().await.unwrap();
    // The renewal that was on its way, applied after the release.
    let late = client.extend("l2", &token, ttl).await;
    assert!(matches!(late, Err(Error::NotHeld { .. })), "{late:?}");
    let again = client.release("l2", &token).await;
    assert!(matches!(again, Err(Error::NotHeld { .. })), "{again:?}");
    let (holder, ms) = lease_row(&admin, "l2").await.expect("the row");
    assert_eq!(holder.as_deref(), Some(token.expose()), "kept for the hold");
    assert!(
        ms <= min_hold.as_millis() as i64,
        "kept for {ms} ms after the release"
    );
    let state = client.inspect("l2").await.unwrap();
    assert!(state.ttl.expect("busy") <= min_hold, "{state:?}");
}

// F2 (lease rows): a min_hold grant that came too late to be a lease (the statement waited on
// the row's lock) was given back with the plain release, which keeps the row for the hold: the
// key stayed busy, held by nobody. Now the give-back frees the row whatever the hold says.
#[tokio::test]
async fn a_min_hold_grant_given_back_on_arrival_frees_the_row() {
    use leasehold::postgres::PostgresLeaseClient;
    let Some(pg) = postgres_for_test() else {
        return;
    };
    let direct = admin(&pg).await;
    let client = Locker::from(PostgresLeaseClient::connect(&lease_url(&pg)).await.unwrap());
    let key = "f2";
    let long = LockOptions::new(Duration::from_secs(30));
    client
        .try_acquire(key, &long)
        .await
        .unwrap()
        .acquired()
        .unwrap()
        .release()
        .await
        .unwrap();
    // The row is locked by an open transaction: the next acquisition waits for it in the server.
    let blocker = row_locked_in_open_transaction(&pg, "leasehold_leases", key).await;
    let ttl = Duration::from_millis(300);
    let opts = LockOptions::new(ttl).min_hold(ttl);
    let attempt = {
        let (client, opts) = (client.clone(), opts.clone());
        tokio::spawn(async move { client.try_acquire(key, &opts).await })
    };
    until("the acquisition waits for the row", || async {
        let n: i64 = direct
            .query_one("SELECT count(*) FROM pg_locks WHERE NOT granted", &[])
            .await
            .unwrap()
            .get(0);
        n > 0
    })
    .await;
    server_clock_passes(&direct, ttl * 2).await;
    blocker.batch_execute("COMMIT").await.unwrap();
    let err = attempt.await.unwrap().unwrap_err();
    assert!(matches!(err, Error::ExpiredOnArrival { .. }), "{err:?}");
    let (token, _) = lease_row(&direct, key).await.expect("the row");
    assert_eq!(
        token, None,
        "the grant given back frees the row, hold or not"
    );
    let other = Locker::from(PostgresLeaseClient::connect(&lease_url(&pg)).await.unwrap());
    assert!(matches!(
        other.try_acquire(key, &long).await.unwrap(),
        TryAcquire::Acquired(_)
    ));
}

// M9 (lease rows): an acquisition whose reply never came (a response timeout; also a dropped
// future) left the row held by a token nobody knows, for a whole TTL. Now the attempt gives it
// back in the background (token-checked, so it frees nothing else).
#[tokio::test]
async fn a_lease_row_acquisition_with_an_unknown_outcome_is_given_back() {
    use leasehold::ClientOptions;
    use leasehold::postgres::PostgresLeaseClient;
    use leasehold_harness::SlowLink;
    let Some(pg) = postgres_for_test() else {
        return;
    };
    let admin = admin(&pg).await;
    let link = SlowLink::start(pg.addr()).unwrap();
    let url = lease_url(&pg).replace(
        &format!(":{}/", pg.port()),
        &format!(":{}/", link.addr().port()),
    );
    let options = ClientOptions::new().response_timeout(Duration::from_millis(300));
    let client = Locker::from(
        PostgresLeaseClient::connect_with(&url, options)
            .await
            .unwrap(),
    );
    let opts = LockOptions::new(Duration::from_secs(60));
    link.set_reply_delay(Duration::from_secs(1));
    let err = client.try_acquire("m9", &opts).await.unwrap_err();
    assert!(!matches!(err, Error::NotHeld { .. }), "{err:?}");
    until("the unknown attempt's row is given back", || async {
        matches!(lease_row(&admin, "m9").await, Some((None, _)))
    })
    .await;
    link.set_reply_delay(Duration::ZERO);
}
