//! Through a connection pooler, keepalive bounds, lock waits (issue 22).

use super::*;

/// Session locks through `bouncer` are refused at connect, saying why and what to use; the same
/// through the Locker (what the CLI uses), with `lock=session` spelled out.
async fn refused_at_connect(bouncer: &PgBouncer) {
    match PostgresClient::connect(&bouncer.url()).await {
        Err(Error::Topology { reason }) => {
            assert!(reason.contains("?lock=lease"), "{reason}");
            assert!(reason.contains("BackendKeyData"), "{reason}");
        }
        other => panic!("expected a Topology error, got {other:?}"),
    }
    let err = Locker::connect(&format!("{}?lock=session", bouncer.url()))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Topology { .. }), "{err}");
}

#[tokio::test]
async fn session_locks_through_a_transaction_pooler_are_refused() {
    let Some(pg) = postgres_for_test() else {
        return;
    };
    let Some(bouncer) = pgbouncer_for_test(&pg, &PgBouncerOptions::new()) else {
        return;
    };
    refused_at_connect(&bouncer).await;
    // Nothing was taken on the server.
    let admin = admin(&pg).await;
    let locks: i64 = admin
        .query_one(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(locks, 0);
    // Directly, the same server is fine.
    PostgresClient::connect(&pg.url()).await.unwrap();
}

/// Clients that keep every server session of `bouncer`'s pool busy with short transactions
/// (one more client than servers), until the returned sender is dropped.
fn keep_the_pool_busy(bouncer: &PgBouncer, clients: usize) -> tokio::sync::oneshot::Sender<()> {
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let stopped = futures_util::FutureExt::shared(stopped);
    for _ in 0..clients {
        let (url, stopped) = (bouncer.url(), stopped.clone());
        tokio::spawn(async move {
            let (client, conn) = tokio_postgres::connect(&url, NoTls).await.unwrap();
            tokio::spawn(conn);
            let busy = async {
                loop {
                    if client.simple_query("SELECT pg_sleep(0.005)").await.is_err() {
                        return;
                    }
                }
            };
            tokio::select! {
                _ = stopped => {}
                _ = busy => {}
            }
        });
    }
    stop
}

// Review 2026-12-02, U3: on a *busy* transaction pool (other clients' transactions between
// ours, and PgBouncer closing server sessions after `server_lifetime`), the connect check (two
// connections, one probe each) could land on two server processes and pass; an acquiring
// statement that then landed on the server session its own session had probed was granted,
// and the lock lived on a pooled server session that PgBouncer closed a second later, while
// the guard still said `is_held()`: a second client took the key. Now the connect check runs
// several transactions on each of two connections, one after the other, and any change of
// server process refuses; and a client that once saw a pooler's sign refuses every later
// acquisition.
#[tokio::test]
async fn session_locks_through_a_busy_transaction_pooler_are_refused() {
    let Some(pg) = postgres_for_test() else {
        return;
    };
    let options = PgBouncerOptions::new()
        .setting("server_lifetime", "1")
        .setting("server_idle_timeout", "1")
        .setting("default_pool_size", "3");
    let Some(bouncer) = pgbouncer_for_test(&pg, &options) else {
        return;
    };
    let _busy = keep_the_pool_busy(&bouncer, 4);
    let direct = admin(&pg).await;
    let key = "busy-pool";
    let opts = LockOptions::new(Duration::from_secs(30));
    let attempts = 40;
    let mut refused = 0;
    let mut other_errors = Vec::new();
    for _ in 0..attempts {
        let client = match PostgresClient::connect(&bouncer.url()).await {
            Ok(client) => Locker::from(client),
            Err(Error::Topology { reason }) => {
                assert!(reason.contains("?lock=lease"), "{reason}");
                refused += 1;
                continue;
            }
            Err(e) => {
                other_errors.push(e.to_string());
                continue;
            }
        };
        match client.try_acquire(key, &opts).await {
            Ok(TryAcquire::Acquired(guard)) => {
                // Granted through the pooler: the pooler closes the server session holding it.
                until(
                    "the pooler closed the server session holding the lock",
                    || async { holder_pid(&direct, key).await.is_none() },
                )
                .await;
                let other = Locker::from(PostgresClient::connect(&pg.url()).await.unwrap());
                let stolen = other.try_acquire(key, &opts).await.unwrap();
                assert!(
                    !(matches!(stolen, TryAcquire::Acquired(_)) && guard.is_held()),
                    "two holders: a session lock granted through a transaction pooler lived on                      a pooled server session, and another client took the key while the first                      guard still says is_held()"
                );
                panic!("a session lock was granted through a transaction pooler");
            }
            Ok(TryAcquire::Busy { .. }) => other_errors.push("busy".into()),
            Err(Error::Topology { .. }) => {
                refused += 1;
                // Latched: the client refuses every later acquisition.
                let again = client.try_acquire("another-key", &opts).await;
                assert!(matches!(again, Err(Error::Topology { .. })), "{again:?}");
            }
            Err(e) => other_errors.push(e.to_string()),
        }
    }
    assert_eq!(
        refused, attempts,
        "every attempt is refused as a pooler's; other outcomes: {other_errors:?}"
    );
}

#[tokio::test]
async fn lease_rows_work_through_a_transaction_pooler() {
    use leasehold::postgres::PostgresLeaseClient;
    let Some(pg) = postgres_for_test() else {
        return;
    };
    let Some(bouncer) = pgbouncer_for_test(&pg, &PgBouncerOptions::new()) else {
        return;
    };
    let url = format!("{}?lock=lease", bouncer.url());
    let a = Locker::from(PostgresLeaseClient::connect(&url).await.unwrap());
    let b = Locker::from(PostgresLeaseClient::connect(&url).await.unwrap());
    let opts = LockOptions::new(Duration::from_secs(30)).fencing(true);

    let first = a
        .try_acquire("pooled", &opts)
        .await
        .unwrap()
        .acquired()
        .unwrap();
    let n1 = first.fencing_token().unwrap();
    assert!(matches!(
        b.try_acquire("pooled", &opts).await.unwrap(),
        TryAcquire::Busy { remaining: Some(_) }
    ));
    b.extend("pooled", first.token(), Duration::from_secs(60))
        .await
        .unwrap();
    assert!(b.inspect("pooled").await.unwrap().ttl.unwrap() > Duration::from_secs(30));
    first.release().await.unwrap();
    let second = b
        .try_acquire("pooled", &opts)
        .await
        .unwrap()
        .acquired()
        .unwrap();
    assert!(second.fencing_token().unwrap() > n1);

    // A waiter gets the lock once it is released (by backoff if the notification is lost to
    // the pooler: LISTEN is session state).
    let waiter = {
        let (a, wait) = (a.clone(), opts.clone().wait(BOUND));
        tokio::spawn(async move { a.acquire("pooled", &wait).await })
    };
    let n2 = second.fencing_token().unwrap();
    second.release().await.unwrap();
    let third = tokio::time::timeout(BOUND, waiter)
        .await
        .expect("the waiter gets it")
        .unwrap()
        .unwrap();
    assert!(third.fencing_token().unwrap() > n2);
    third.release().await.unwrap();

    // Many clients at once, so that their transactions run on each other's server sessions:
    // every operation works, and the shared key's fencing numbers all differ.
    let mut tasks = Vec::new();
    for i in 0..6 {
        let client = Locker::from(PostgresLeaseClient::connect(&url).await.unwrap());
        let opts = opts.clone().wait(BOUND);
        tasks.push(tokio::spawn(async move {
            let mut numbers = Vec::new();
            for _ in 0..5 {
                let own = client.acquire(&format!("own-{i}"), &opts).await.unwrap();
                own.extend(Duration::from_secs(30)).await.unwrap();
                let shared = client.acquire("shared", &opts).await.unwrap();
                numbers.push(shared.fencing_token().unwrap());
                shared.release().await.unwrap();
                own.release().await.unwrap();
            }
            numbers
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    let count = all.len();
    all.sort_unstable();
    all.dedup();
    assert_eq!(
        all.len(),
        count,
        "every holder of the shared key got its own number"
    );

    // Auto-extension through the pooler keeps the lease over several TTLs.
    let ttl = Duration::from_millis(600);
    let kept = a
        .acquire("kept", &LockOptions::new(ttl).auto_extend(true))
        .await
        .unwrap();
    server_clock_passes(&admin(&pg).await, ttl * 4).await;
    assert!(kept.is_held());
    assert_eq!(
        b.inspect("kept").await.unwrap().holder.as_deref(),
        Some(kept.token().expose())
    );
    kept.release().await.unwrap();
}

// Review 2026-12-02, U3 (session pools): a session pool ends the server session (and its
// reset query releases the lock) when it drops the *client* (`client_idle_timeout`, its own
// TCP timeouts), which no statement can read; and one whose `server_reset_query` keeps advisory
// locks hands them to the next client. Session locks through it used to be granted; now the
// connection's startup (a BackendKeyData of the pooler's own, not the server process's) refuses
// them in either pool mode. (The acquiring statement's own check for a server session that
// already holds the key stays, tested in `postgres::tests`.)
#[tokio::test]
async fn session_locks_through_a_session_pooler_are_refused() {
    let Some(pg) = postgres_for_test() else {
        return;
    };
    for options in [
        PgBouncerOptions::new().pool_mode(PoolMode::Session),
        PgBouncerOptions::new()
            .pool_mode(PoolMode::Session)
            .server_reset_query(""),
    ] {
        let Some(bouncer) = pgbouncer_for_test(&pg, &options) else {
            return;
        };
        refused_at_connect(&bouncer).await;
        // Lease rows through the same pool work.
        let lease = Locker::connect(&format!("{}?lock=lease", bouncer.url()))
            .await
            .unwrap();
        let opts = LockOptions::new(Duration::from_secs(30)).fencing(true);
        lease
            .acquire("pooled", &opts)
            .await
            .unwrap()
            .release()
            .await
            .unwrap();
    }
    let locks: i64 = admin(&pg)
        .await
        .query_one(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(locks, 0, "no session lock was taken through the pools");
}

#[tokio::test]
async fn a_lock_wait_timeout_on_the_fence_row_leaves_no_advisory_lock() {
    let Some(pg) = postgres_for_test() else {
        return;
    };
    let a = Locker::from(PostgresClient::connect(&pg.url()).await.unwrap());
    let b = Locker::from(PostgresClient::connect(&pg.url()).await.unwrap());
    let opts = LockOptions::new(Duration::from_secs(30)).fencing(true);
    // The key's fence row exists.
    a.try_acquire("row-locked", &opts)
        .await
        .unwrap()
        .acquired()
        .unwrap()
        .release()
        .await
        .unwrap();

    // Someone holds the fence row in an open transaction: the acquisition is granted the
    // advisory lock, then times out waiting for the row (55P03).
    let blocker = row_locked_in_open_transaction(&pg, "leasehold_locks", "row-locked").await;
    let err = a
        .acquire("row-locked", &opts.clone().wait(Duration::from_millis(300)))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NotAcquired { .. }), "{err}");
    let direct = admin(&pg).await;
    assert_eq!(
        holder_pid(&direct, "row-locked").await,
        None,
        "the session gave the advisory lock back"
    );
    blocker.batch_execute("COMMIT").await.unwrap();

    // Another client gets it at once, and so does the first one after it.
    let got = b
        .try_acquire("row-locked", &opts)
        .await
        .unwrap()
        .acquired()
        .expect("free after the failed attempt");
    got.release().await.unwrap();
    let again = a
        .try_acquire("row-locked", &opts)
        .await
        .unwrap()
        .acquired()
        .unwrap();
    again.release().await.unwrap();
}

#[tokio::test]
async fn the_lease_is_bounded_by_the_servers_tcp_settings() {
    let Some(pg) = postgres_for_test() else {
        return;
    };
    let admin = admin(&pg).await;
    // Keepalive gives up after 3 + 1 x 2 = 5 s of silence for `ka`; tcp_user_timeout after
    // 4 s for `ut`.
    admin
        .batch_execute(
            "CREATE ROLE ka LOGIN SUPERUSER;
             ALTER ROLE ka SET tcp_keepalives_idle = 3;
             ALTER ROLE ka SET tcp_keepalives_interval = 1;
             ALTER ROLE ka SET tcp_keepalives_count = 2;
             CREATE ROLE ut LOGIN SUPERUSER;
             ALTER ROLE ut SET tcp_user_timeout = 4000;",
        )
        .await
        .unwrap();
    let url = |user: &str| format!("postgres://{user}@127.0.0.1:{}/postgres", pg.port());
    let ttl = Duration::from_secs(60);
    let opts = LockOptions::new(ttl);

    // The server's defaults (7200 s + 75 s x 9): the TTL is the bound.
    let plain = Locker::from(PostgresClient::connect(&pg.url()).await.unwrap());
    let g = plain
        .try_acquire("plain", &opts)
        .await
        .unwrap()
        .acquired()
        .unwrap();
    assert!(
        g.lease().remaining() > Duration::from_secs(30),
        "{:?}",
        g.lease().remaining()
    );
    g.release().await.unwrap();

    for (user, bound) in [
        ("ka", Duration::from_secs(5)),
        ("ut", Duration::from_secs(4)),
    ] {
        let client = Locker::from(PostgresClient::connect(&url(user)).await.unwrap());
        let g = client
            .try_acquire(user, &opts)
            .await
            .unwrap()
            .acquired()
            .unwrap();
        let left = g.lease().remaining();
        assert!(left <= bound && left > Duration::ZERO, "{user}: {left:?}");
        // An extend is bounded the same way.
        g.extend(ttl).await.unwrap();
        let left = g.lease().remaining();
        assert!(
            left <= bound && left > Duration::ZERO,
            "{user} extended: {left:?}"
        );
        g.release().await.unwrap();
    }

    // Auto-extension renews within the shorter lifetime: the validity moves on, and stays
    // within the bound.
    let client = Locker::from(PostgresClient::connect(&url("ka")).await.unwrap());
    let g = client
        .acquire("renewed", &opts.clone().auto_extend(true))
        .await
        .unwrap();
    let first = g.valid_until();
    until("a renewal", || async { g.valid_until() > first }).await;
    assert!(g.is_held());
    assert!(g.lease().remaining() <= Duration::from_secs(5));
    g.release().await.unwrap();
}

// Issue 22, finding 2, on lease rows: a shortening extend (60 s -> 5 s) that PostgreSQL applies
// while its reply is held back past the response timeout leaves the lease believing at most 5 s
// from when it was sent (it used to keep the old 60 s).
#[tokio::test]
async fn a_lease_row_extend_with_an_unknown_outcome_never_raises_validity() {
    use leasehold::ClientOptions;
    use leasehold::postgres::PostgresLeaseClient;
    use leasehold_harness::SlowLink;
    use std::time::Instant;
    let Some(pg) = postgres_for_test() else {
        return;
    };
    let link = SlowLink::start(pg.addr()).unwrap();
    let url = lease_url(&pg).replace(
        &format!(":{}/", pg.port()),
        &format!(":{}/", link.addr().port()),
    );
    let options = ClientOptions::new().response_timeout(Duration::from_millis(500));
    let client = Locker::from(
        PostgresLeaseClient::connect_with(&url, options)
            .await
            .unwrap(),
    );
    let g = client
        .try_acquire("ambiguous", &LockOptions::new(Duration::from_secs(60)))
        .await
        .unwrap()
        .acquired()
        .unwrap();
    link.set_reply_delay(Duration::from_secs(2));
    let sent = Instant::now();
    let err = g.extend(Duration::from_secs(5)).await.unwrap_err();
    assert!(!matches!(err, Error::NotHeld { .. }), "{err:?}");
    let direct = admin(&pg).await;
    let left: f64 = direct
        .query_one(
            "SELECT extract(epoch FROM expires_at - clock_timestamp())::float8 \
             FROM leasehold_leases WHERE key = 'ambiguous'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(
        left > 0.0 && left <= 5.0,
        "PostgreSQL applied the extend: {left} s left"
    );
    assert!(
        g.valid_until() <= sent + Duration::from_secs(5),
        "the lease still counts on the old TTL: {:?} left",
        g.valid_until().saturating_duration_since(Instant::now())
    );
    link.set_reply_delay(Duration::ZERO);
    g.detach();
}

// Issue 24: every grant expires on arrival (replies held back by a relay for longer than the
// lease is valid), with a deadline. Each grant is given back and the wait goes on after its
// backoff, in a loop: the session lock's attempt used to call itself once per grant, nesting one
// more future each time, with no pause (`leasehold run --ttl 1ms` over PostgreSQL aborted with a
// stack overflow; that TTL is now refused: `conformance`); the lease-row lock gave up at the
// first late grant. Now both wait until the deadline and end NotAcquired, after a number of
// round trips the backoff bounds (a twentieth of the backoff per reply: a spin makes about ten
// times as many).
#[tokio::test]
async fn grants_that_expire_on_arrival_are_retried_with_backoff_until_the_deadline() {
    use leasehold::postgres::PostgresLeaseClient;
    use leasehold::{Backoff, MIN_TTL};
    use leasehold_harness::SlowLink;
    let Some(pg) = postgres_for_test() else {
        return;
    };
    let link = SlowLink::start(pg.addr()).unwrap();
    let through = |url: String| {
        url.replace(
            &format!(":{}/", pg.port()),
            &format!(":{}/", link.addr().port()),
        )
    };
    let session = Locker::from(PostgresClient::connect(&through(pg.url())).await.unwrap());
    let rows = Locker::from(
        PostgresLeaseClient::connect(&through(lease_url(&pg)))
            .await
            .unwrap(),
    );
    let delay = Duration::from_millis(25);
    let wait = delay * 80;
    let options = LockOptions::new(MIN_TTL)
        .backoff(Backoff::constant(delay * 40))
        .wait(wait);
    // At most 2 + wait / shortest pause (half the backoff) attempts, of at most 3 round trips
    // each (the attempt, the give-back, a look at the holder): 18. Twice that leaves room for
    // what a loaded machine adds (19 were seen once); without the backoff every attempt would
    // follow the last at once: wait / (3 delays) = 26 attempts, about 80 round trips.
    let bound = 2 * 3 * (2 + 80 / 20);
    link.set_reply_delay(delay);
    for (what, acquire) in [
        (
            "session lock",
            futures_util::FutureExt::boxed(session.acquire("jobs:late", &options)),
        ),
        (
            "lease row",
            futures_util::FutureExt::boxed(rows.acquire("jobs:late-row", &options)),
        ),
    ] {
        let before = link.requests();
        let began = std::time::Instant::now();
        let err = tokio::time::timeout(Duration::from_secs(120), acquire)
            .await
            .unwrap_or_else(|_| panic!("{what}: hung"))
            .unwrap_err();
        let round_trips = link.requests() - before;
        // As on every backend (the acquisition engine's rule): NotAcquired at the deadline,
        // counting the attempts, which did retry.
        assert!(
            matches!(err, Error::NotAcquired { attempts, .. } if attempts >= 2),
            "{what}: {err:?}"
        );
        assert!(
            began.elapsed() >= wait,
            "{what}: gave up before the deadline: {:?}",
            began.elapsed()
        );
        assert!(
            round_trips <= bound,
            "{what}: {round_trips} round trips in {wait:?}, more than the {bound} the backoff \
             allows: late grants were retried without it"
        );
    }
    link.set_reply_delay(Duration::ZERO);
    // Nothing is left held: a plain try takes each key at once.
    let long = LockOptions::new(Duration::from_secs(30));
    let ok = session.try_acquire("jobs:late", &long).await.unwrap();
    assert!(matches!(ok, TryAcquire::Acquired(_)));
    let ok = rows.try_acquire("jobs:late-row", &long).await.unwrap();
    assert!(matches!(ok, TryAcquire::Acquired(_)));
}
