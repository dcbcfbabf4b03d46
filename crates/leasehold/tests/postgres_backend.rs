//! The PostgreSQL backend against a real server started by the harness: session advisory locks,
//! fencing numbers, waiting in the server's queue, the idle limit as TTL, loss reporting, the
//! fenced-row helper and bad input.
#![cfg(feature = "postgres")]

use std::time::Duration;

use leasehold::postgres::{FencedRows, PostgresClient};
use leasehold::{Error, Fence, LockGuard, LockOptions, LockToken, Locker, LossReason, TryAcquire};
use leasehold_harness::{
    PgBouncer, PgBouncerOptions, PoolMode, Postgres, pgbouncer_for_test, postgres_for_test,
};
use tokio_postgres::NoTls;

mod lease_waiters;

/// Only keeps a broken test from hanging; every wait below observes state.
const BOUND: Duration = Duration::from_secs(30);

async fn admin(pg: &Postgres) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(&pg.url(), NoTls)
        .await
        .expect("admin connects");
    tokio::spawn(conn);
    client
}

/// Sessions waiting for an advisory lock (not granted).
async fn waiting(admin: &tokio_postgres::Client) -> i64 {
    admin
        .query_one(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted",
            &[],
        )
        .await
        .unwrap()
        .get(0)
}

/// The pid of the session holding an advisory lock for `key`.
async fn holder_pid(admin: &tokio_postgres::Client, key: &str) -> Option<i32> {
    admin
        .query_one(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1
               AND classid::bigint = ((hashtextextended($1, 0) >> 32) & 4294967295)
               AND objid::bigint = (hashtextextended($1, 0) & 4294967295)
             UNION ALL SELECT NULL LIMIT 1",
            &[&key],
        )
        .await
        .unwrap()
        .get(0)
}

async fn until<F, Fut>(what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + BOUND;
    while !f().await {
        assert!(tokio::time::Instant::now() < deadline, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Waits until `span` has passed on the server's clock (`clock_timestamp()`).
async fn server_clock_passes(admin: &tokio_postgres::Client, span: Duration) {
    let now = || async {
        admin
            .query_one("SELECT clock_timestamp()", &[])
            .await
            .unwrap()
            .get::<_, std::time::SystemTime>(0)
    };
    let t0 = now().await;
    until("time passing on the server's clock", || async {
        now().await.duration_since(t0).unwrap_or_default() > span
    })
    .await;
}

#[tokio::test]
async fn waiters_are_granted_in_queue_order_without_polling() {
    let Some(pg) = postgres_for_test() else {
        return;
    };
    let admin = admin(&pg).await;
    let client = Locker::from(PostgresClient::connect(&pg.url()).await.unwrap());
    let opts = LockOptions::new(Duration::from_secs(30)).fencing(true);
    let holder = client.acquire("fifo", &opts).await.unwrap();

    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let wait = opts.clone().wait(BOUND);
    let mut tasks = Vec::new();
    for i in 0..3usize {
        let (client, wait, tx) = (client.clone(), wait.clone(), tx.clone());
        tasks.push(tokio::spawn(async move {
            let guard = client.acquire("fifo", &wait).await.unwrap();
            tx.send((i, guard.fencing_token().unwrap())).unwrap();
            guard.release().await.unwrap();
        }));
        // Enqueued in this order: the server shows each waiter before the next starts.
        until("waiter queued", || async {
            waiting(&admin).await == i as i64 + 1
        })
        .await;
    }
    holder.release().await.unwrap();
    let mut order = Vec::new();
    for _ in 0..3 {
        order.push(rx.recv().await.unwrap());
    }
    assert_eq!(
        order.iter().map(|(i, _)| *i).collect::<Vec<_>>(),
        [0, 1, 2],
        "granted in queue order"
    );
    assert!(order.windows(2).all(|w| w[0].1 < w[1].1));
    for t in tasks {
        t.await.unwrap();
    }
    // Waiting happened in the server: the sessions ran one statement each to wait, not a
    // stream of retries (no session ever sat in the queue after being granted).
    assert_eq!(waiting(&admin).await, 0);
}

/// `key` held, and one waiter (for up to `BOUND`) queued in the server behind the holder.
async fn held_with_one_waiter(
    admin: &tokio_postgres::Client,
    client: &Locker,
    key: &'static str,
    opts: &LockOptions,
) -> (
    LockGuard,
    tokio::task::JoinHandle<leasehold::Result<LockGuard>>,
) {
    let holder = client.acquire(key, opts).await.unwrap();
    let waiter = {
        let (client, wait) = (client.clone(), opts.clone().wait(BOUND));
        tokio::spawn(async move { client.acquire(key, &wait).await })
    };
    until("waiter queued", || async { waiting(admin).await == 1 }).await;
    (holder, waiter)
}

#[tokio::test]
async fn a_cancelled_waiter_leaves_the_queue_and_a_deadline_is_kept() {
    let Some(pg) = postgres_for_test() else {
        return;
    };
    let admin = admin(&pg).await;
    let client = Locker::from(PostgresClient::connect(&pg.url()).await.unwrap());
    let opts = LockOptions::new(Duration::from_secs(30));
    let (holder, waiter) = held_with_one_waiter(&admin, &client, "cancel", &opts).await;
    waiter.abort();
    until("cancelled waiter gone", || async {
        waiting(&admin).await == 0
    })
    .await;

    // A bounded wait ends with NotAcquired, in the server's queue until then.
    let short = opts.clone().wait(Duration::from_millis(200));
    let err = client.acquire("cancel", &short).await.unwrap_err();
    assert!(matches!(err, Error::NotAcquired { .. }), "{err}");
    assert_eq!(waiting(&admin).await, 0);

    holder.release().await.unwrap();
    let next = client.try_acquire("cancel", &opts).await.unwrap();
    assert!(
        next.is_acquired(),
        "nobody else got the lock after the cancel"
    );
}

// A waiter abandoned just as the lock comes free: the server may grant its statement before
// the cancel or the close reaches it, to a session nobody owns. Once the background clean-ups
// have settled, that session holds nothing, so one attempt takes the lock. (The clean-up used
// to close the session uncounted: `cleanups_settled` answered at once, while the server kept
// the orphaned grant until it noticed the close, and the attempt below usually found the lock
// taken.) Repeated, since the grant races the abort.
#[tokio::test]
async fn a_waiter_abandoned_as_the_lock_comes_free_holds_nothing_once_cleanups_settle() {
    let Some(pg) = postgres_for_test() else {
        return;
    };
    let admin = admin(&pg).await;
    let client = Locker::from(PostgresClient::connect(&pg.url()).await.unwrap());
    let opts = LockOptions::new(Duration::from_secs(30));
    for _ in 0..5 {
        let (holder, waiter) = held_with_one_waiter(&admin, &client, "abandoned", &opts).await;
        waiter.abort();
        holder.release().await.unwrap();
        // The waiter may have been granted the lock before the abort reached it: then it is
        // its lease, released here.
        if let Ok(got) = waiter.await {
            got.unwrap().release().await.unwrap();
        }
        assert!(
            leasehold::cleanups_settled(BOUND).await,
            "clean-ups still running"
        );
        let next = client.try_acquire("abandoned", &opts).await.unwrap();
        let next = next
            .acquired()
            .expect("the lock still held after the clean-ups settled");
        next.release().await.unwrap();
    }
}

#[tokio::test]
async fn the_ttl_is_the_sessions_idle_limit_and_auto_extension_keeps_it() {
    let Some(pg) = postgres_for_test() else {
        return;
    };
    let admin = admin(&pg).await;
    let a = Locker::from(PostgresClient::connect(&pg.url()).await.unwrap());
    let b = Locker::from(PostgresClient::connect(&pg.url()).await.unwrap());
    let ttl = Duration::from_millis(800);

    // Not extended: the server ends the idle session after the TTL; the loss is reported and
    // someone else gets the lock.
    let opts = LockOptions::new(ttl).fencing(true);
    let quiet = a.acquire("idle", &opts).await.unwrap();
    let n = quiet.fencing_token().unwrap();
    // The local validity ends first (it is counted from before the request, minus the drift
    // allowance), then the server ends the session: both are a loss.
    tokio::time::timeout(BOUND, quiet.lost())
        .await
        .expect("loss reported");
    assert!(quiet.loss_reason().is_some());
    let next = b.acquire("idle", &opts.clone().wait(BOUND)).await.unwrap();
    assert!(next.fencing_token().unwrap() > n);
    next.release().await.unwrap();

    // Auto-extended: held while the server's clock passes several TTLs.
    let renewed = a
        .acquire("idle", &opts.clone().auto_extend(true))
        .await
        .unwrap();
    let pid = holder_pid(&admin, "idle").await.unwrap();
    until("five TTLs on the server's clock", || async {
        let age: f64 = admin
            .query_one(
                "SELECT extract(epoch FROM now() - backend_start)::float8 FROM pg_stat_activity WHERE pid = $1",
                &[&pid],
            )
            .await
            .unwrap()
            .get(0);
        age > 5.0 * ttl.as_secs_f64()
    })
    .await;
    assert!(renewed.is_held());
    assert_eq!(holder_pid(&admin, "idle").await, Some(pid));
    assert!(matches!(
        b.try_acquire("idle", &opts).await.unwrap(),
        TryAcquire::Busy { .. }
    ));
    renewed.release().await.unwrap();
}

// An extend that meets the end of its session on the way is `NotHeld`, as for a session the
// client already saw closed: the Node suite's lost-lease test met the race (the server ended
// the idle session, the next holder's grant came back, and only then did the holder's extend
// find the connection closed) and got an ambiguous connection error. Here a relay holds the
// server's close back from the holder until its extend is out.
#[tokio::test]
async fn an_extend_that_meets_the_end_of_its_session_is_not_held() {
    use leasehold::ClientOptions;
    use leasehold_harness::SlowLink;
    let Some(pg) = postgres_for_test() else {
        return;
    };
    let link = SlowLink::start(pg.addr()).unwrap();
    let url = pg.url().replace(
        &format!(":{}/", pg.port()),
        &format!(":{}/", link.addr().port()),
    );
    assert_ne!(url, pg.url(), "the holder goes through the relay");
    let options = ClientOptions::new().response_timeout(BOUND);
    let a = Locker::from(PostgresClient::connect_with(&url, options).await.unwrap());
    let b = Locker::from(PostgresClient::connect(&pg.url()).await.unwrap());
    let quiet = a
        .acquire("ended", &LockOptions::new(Duration::from_millis(300)))
        .await
        .unwrap();
    // From now on the server's words to the holder (its idle-session close) arrive 2 s late.
    link.set_reply_delay(Duration::from_secs(2));
    // The server ends the idle session after the TTL, so the next holder gets the lock.
    let next = b
        .acquire("ended", &LockOptions::new(BOUND).wait(BOUND))
        .await
        .unwrap();
    let err = quiet.extend(BOUND).await.unwrap_err();
    assert!(matches!(err, Error::NotHeld { .. }), "{err:?}");
    link.set_reply_delay(Duration::ZERO);
    assert!(matches!(quiet.release().await, Err(Error::NotHeld { .. })));
    next.release().await.unwrap();
}

#[tokio::test]
async fn a_lost_session_is_reported_and_restarts_keep_the_counter() {
    let Some(mut pg) = postgres_for_test() else {
        return;
    };
    let client = Locker::from(PostgresClient::connect(&pg.url()).await.unwrap());
    let opts = LockOptions::new(Duration::from_secs(30)).fencing(true);

    // (Terminated from outside, `pg_terminate_backend`: reported at once, not at the TTL, and the
    // old guard cannot touch the next holder's lock: `conformance::postgres::session_locks`.)

    // A server restart ends every session: the holder hears of it; the fencing counter is in
    // a table and survives, so the next holder's number is still higher.
    let guard = client.acquire("lost", &opts).await.unwrap();
    let n2 = guard.fencing_token().unwrap();
    pg.restart().unwrap();
    tokio::time::timeout(BOUND, guard.lost())
        .await
        .expect("loss reported");
    let after = client
        .acquire("lost", &opts.clone().wait(BOUND))
        .await
        .unwrap();
    assert!(after.fencing_token().unwrap() > n2);
    after.release().await.unwrap();
}

/// `postgres://` and `postgresql://` are the same backend; `?lock=lease` picks lease rows. (What
/// a locker on each does: `conformance::postgres`.)
#[tokio::test]
async fn the_locker_picks_postgres_from_the_url() {
    let Some(pg) = postgres_for_test() else {
        return;
    };
    let url = pg.url().replacen("postgres://", "postgresql://", 1);
    assert_eq!(Locker::connect(&url).await.unwrap().backend(), "postgres");
    assert_eq!(
        Locker::connect(&format!("{url}?lock=lease"))
            .await
            .unwrap()
            .backend(),
        "postgres-lease"
    );
}

#[tokio::test]
async fn fenced_rows_refuse_stale_writers() {
    let Some(pg) = postgres_for_test() else {
        return;
    };
    let db = admin(&pg).await;
    db.batch_execute(
        "CREATE TABLE accounts (id text PRIMARY KEY, balance bigint NOT NULL);
         INSERT INTO accounts VALUES ('alice', 0);",
    )
    .await
    .unwrap();
    let rows = FencedRows::new("accounts", "id");
    db.batch_execute(&rows.add_columns_sql()).await.unwrap();

    let (t1, t2) = (LockToken::random(), LockToken::random());
    let write = |fence: Fence, balance: i64| {
        let (db, rows) = (&db, &rows);
        async move {
            rows.update(db, &fence, "balance = $3", &[&balance, &"alice"])
                .await
                .unwrap()
        }
    };
    assert!(write(Fence::new(5, t1.clone()), 10).await.is_accepted());
    assert!(write(Fence::new(5, t1.clone()), 11).await.is_accepted());
    // Lower number, or the same number from another holder: refused, with what the row saw.
    assert_eq!(
        write(Fence::new(4, t2.clone()), 99).await,
        leasehold::FencedWrite::Rejected { highest: 5 }
    );
    assert!(!write(Fence::new(5, t2.clone()), 99).await.is_accepted());
    assert!(write(Fence::new(6, t2.clone()), 12).await.is_accepted());
    assert!(!write(Fence::new(5, t1.clone()), 99).await.is_accepted());
    let balance: i64 = db
        .query_one("SELECT balance FROM accounts WHERE id = 'alice'", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(balance, 12);
    // The row keeps a hash of the token, never the token.
    let holder: String = db
        .query_one("SELECT holder FROM accounts WHERE id = 'alice'", &[])
        .await
        .unwrap()
        .get(0);
    assert_ne!(holder, t2.expose());
    assert_eq!(holder.len(), 64);
}

#[tokio::test]
async fn bad_input_is_refused_with_clear_errors() {
    let Some(pg) = postgres_for_test() else {
        return;
    };
    // (Bad keys, refused before any round trip: `conformance::postgres`.)
    let client = Locker::from(PostgresClient::connect(&pg.url()).await.unwrap());
    let opts = LockOptions::new(Duration::from_secs(5));
    let err = client
        .try_acquire("k", &opts.clone().replica_ack(1, Duration::from_millis(10)))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Unsupported { .. }), "{err}");

    // A closed port: a connection error (CLI exit 69).
    let closed = leasehold_harness::ClosedPort::new();
    let port = closed.port();
    let err = PostgresClient::connect(&format!("postgres://leasehold@127.0.0.1:{port}/postgres"))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Connection {
                ambiguous: false,
                ..
            }
        ),
        "{err}"
    );

    // A wrong password: an authentication error (CLI exit 77).
    let db = admin(&pg).await;
    db.batch_execute("CREATE ROLE locker LOGIN PASSWORD 'right'")
        .await
        .unwrap();
    pg.require_password_for("locker").unwrap();
    let url = |password: &str| {
        format!(
            "postgres://locker:{password}@127.0.0.1:{}/postgres",
            pg.port()
        )
    };
    until("the password rule is in force", || {
        let url = url("wrong");
        async move {
            matches!(
                PostgresClient::connect(&url).await,
                Err(Error::Authentication { .. })
            )
        }
    })
    .await;
    // The right password gets in (the role may lack the right to create the table in the
    // public schema: a permission error, not a login one).
    match PostgresClient::connect(&url("right")).await {
        Ok(_) | Err(Error::PermissionDenied { .. }) => {}
        Err(e) => panic!("right password: {e}"),
    }
}

// -- lease rows (`?lock=lease`) -------------------------------------------------------------

fn lease_url(pg: &Postgres) -> String {
    format!("{}?lock=lease", pg.url())
}

#[tokio::test]
async fn lease_rows_outlive_their_client_and_are_token_checked() {
    use leasehold::postgres::PostgresLeaseClient;
    let Some(pg) = postgres_for_test() else {
        return;
    };
    let a = Locker::from(PostgresLeaseClient::connect(&lease_url(&pg)).await.unwrap());
    let b = Locker::from(PostgresLeaseClient::connect(&lease_url(&pg)).await.unwrap());
    let opts = LockOptions::new(Duration::from_secs(30)).fencing(true);

    let first = a
        .try_acquire("row", &opts)
        .await
        .unwrap()
        .acquired()
        .unwrap();
    let n1 = first.fencing_token().unwrap();
    match b.try_acquire("row", &opts).await.unwrap() {
        TryAcquire::Busy { remaining } => {
            let r = remaining.expect("the holder's remaining lease");
            assert!(
                r <= Duration::from_secs(30) && r > Duration::from_secs(20),
                "{r:?}"
            );
        }
        TryAcquire::Acquired(_) => panic!("two holders"),
    }
    let state = b.inspect("row").await.unwrap();
    assert_eq!(state.holder.as_deref(), Some(first.token().expose()));
    assert_eq!(state.fencing_counter, Some(n1));
    // Another client (another process, the CLI) extends and releases with the token alone.
    let token = first.detach().token().clone();
    assert!(matches!(
        b.release("row", &LockToken::random()).await,
        Err(Error::NotHeld { .. })
    ));
    b.extend("row", &token, Duration::from_secs(60))
        .await
        .unwrap();
    assert!(b.inspect("row").await.unwrap().ttl.unwrap() > Duration::from_secs(30));
    drop(a);
    b.release("row", &token).await.unwrap();
    assert!(matches!(
        b.release("row", &token).await,
        Err(Error::NotHeld { .. })
    ));
    let second = b
        .try_acquire("row", &opts)
        .await
        .unwrap()
        .acquired()
        .unwrap();
    assert!(second.fencing_token().unwrap() > n1);

    // A lease that is not extended expires on the server's clock: a waiter gets it after.
    let short = LockOptions::new(Duration::from_millis(300)).fencing(true);
    second.release().await.unwrap();
    let lapsing = b
        .try_acquire("row", &short)
        .await
        .unwrap()
        .acquired()
        .unwrap();
    let n = lapsing.fencing_token().unwrap();
    let next = b.acquire("row", &opts.clone().wait(BOUND)).await.unwrap();
    assert!(next.fencing_token().unwrap() > n);
    assert!(matches!(
        lapsing.release().await,
        Err(Error::NotHeld { .. })
    ));
    next.release().await.unwrap();
}

#[tokio::test]
async fn lease_row_waiters_are_woken_by_the_release() {
    let Some(pg) = postgres_for_test() else {
        return;
    };
    let locker = Locker::connect(&lease_url(&pg)).await.unwrap();
    assert_eq!(locker.backend(), "postgres-lease");
    let opts = LockOptions::new(Duration::from_secs(60));
    let holder = locker.acquire("wake", &opts).await.unwrap();
    // A backoff far longer than the test's bound: only the notification can wake the waiter
    // in time (its holder's lease is 60 s, so no expiry wakes it either).
    let waiting = patient(&opts);
    let waiter = {
        let locker = locker.clone();
        tokio::spawn(async move { locker.acquire("wake", &waiting).await })
    };
    // Observe in the server that the waiter was refused after it listened: from now on only a
    // notification wakes it before its 120 s backoff.
    let admin = admin(&pg).await;
    refused_after_listening(&admin, 1).await;
    holder.release().await.unwrap();
    let got = tokio::time::timeout(BOUND, waiter)
        .await
        .expect("woken by the release, not the backoff")
        .unwrap()
        .unwrap();
    got.release().await.unwrap();
}

/// A connection listening on the lease rows' channel (keep the client): the payloads, in the
/// order the server committed their notifications.
async fn listener(
    pg: &Postgres,
) -> (
    tokio_postgres::Client,
    tokio::sync::mpsc::UnboundedReceiver<String>,
) {
    let (client, mut conn) = tokio_postgres::connect(&pg.url(), NoTls)
        .await
        .expect("listener connects");
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some(Ok(message)) = std::future::poll_fn(|cx| conn.poll_message(cx)).await {
            if let tokio_postgres::AsyncMessage::Notification(n) = message {
                let _ = tx.send(n.payload().to_string());
            }
        }
    });
    client
        .batch_execute("LISTEN leasehold_release")
        .await
        .expect("LISTEN");
    (client, rx)
}

/// The next payload the listener receives.
async fn next_notification(rx: &mut tokio::sync::mpsc::UnboundedReceiver<String>) -> String {
    tokio::time::timeout(BOUND, rx.recv())
        .await
        .expect("a notification")
        .expect("the listener runs")
}

/// Server sessions matching `filter` (a condition on `pg_stat_activity`).
async fn sessions(client: &tokio_postgres::Client, filter: &str) -> i64 {
    let sql = format!("SELECT count(*) FROM pg_stat_activity WHERE {filter}");
    client.query_one(&sql, &[]).await.unwrap().get(0)
}

/// Sessions listening on the lease rows' channel.
const LISTENING: &str = "query = 'LISTEN leasehold_release'";

/// A session whose last statement was a lease-row waiter's refused attempt (a waiter's
/// acquiring statement, the one with the mark, answered and idle, since a granted one would
/// have ended the wait), begun after the last `LISTEN` on the lease rows' channel had
/// finished: the attempt the engine makes once it listens, so a release after it is announced.
const REFUSED_AFTER_LISTENING: &str = "state = 'idle' AND query LIKE 'WITH a AS (%wait_until%'
    AND query_start > (SELECT max(l.state_change) FROM pg_stat_activity l
                        WHERE l.query = 'LISTEN leasehold_release' AND l.state = 'idle')";

/// Sessions listening on the lease rows' channel, their `LISTEN` finished.
const LISTENED: &str = "query = 'LISTEN leasehold_release' AND state = 'idle'";

/// Until the `n`-th waiter of a test (each on a locker of its own, the earlier ones paused)
/// has been refused after it listened: `n` listeners, and an attempt after the last one's
/// `LISTEN`.
async fn refused_after_listening(admin: &tokio_postgres::Client, n: i64) {
    until("the waiter refused after it listened", || async {
        sessions(admin, LISTENED).await == n && sessions(admin, REFUSED_AFTER_LISTENING).await == 1
    })
    .await;
}

/// The lease row of `key` as the server has it now: its version (`xmin`) and its mark.
async fn row_mark(admin: &tokio_postgres::Client, key: &str) -> (String, String) {
    let row = admin
        .query_one(
            "SELECT xmin::text, wait_until::text FROM leasehold_leases WHERE key = $1",
            &[&key],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1))
}

/// `opts` waiting 120 s with a backoff as long: far past the test's bound, so that only a
/// notification wakes the waiter in time (its holder's lease, 60 s, does not end either).
fn patient(opts: &LockOptions) -> LockOptions {
    opts.clone()
        .wait(Duration::from_secs(120))
        .backoff(leasehold::Backoff::constant(Duration::from_secs(120)))
}

/// Whether a waiter's mark is in force on a row of `key` in `table`.
async fn marked(admin: &tokio_postgres::Client, table: &str, key: &str) -> bool {
    let sql = format!(
        "SELECT coalesce(bool_or(wait_until > clock_timestamp()), false) FROM {table}
          WHERE key = $1"
    );
    admin.query_one(&sql, &[&key]).await.unwrap().get(0)
}

/// The guard a spawned waiter returns, within [`BOUND`] (`why`: what must have woken it).
async fn taken(waiter: tokio::task::JoinHandle<LockGuard>, why: &str) -> LockGuard {
    tokio::time::timeout(BOUND, waiter)
        .await
        .expect(why)
        .unwrap()
}

/// What [`releases_are_announced_only_to_marked_rows`] takes: lease rows' locks, or their
/// semaphores' permits (of one permit), with the first form of their table.
#[derive(Clone, Copy)]
enum MarkedRows {
    Lock,
    Permit,
}

impl MarkedRows {
    fn table(self) -> &'static str {
        match self {
            MarkedRows::Lock => "leasehold_leases",
            MarkedRows::Permit => "leasehold_permits",
        }
    }

    /// The table as its first release made it (before `hold_until` and `wait_until`).
    fn first_form(self) -> &'static str {
        match self {
            MarkedRows::Lock => {
                "CREATE TABLE leasehold_leases (key text PRIMARY KEY, token text,
                     expires_at timestamptz NOT NULL, fence bigint NOT NULL)"
            }
            MarkedRows::Permit => {
                "CREATE TABLE leasehold_permits (key text NOT NULL, slot int NOT NULL, token text,
                     expires_at timestamptz NOT NULL, permits int NOT NULL,
                     PRIMARY KEY (key, slot))"
            }
        }
    }

    async fn acquire(self, locker: &Locker, name: &str, opts: &LockOptions) -> LockGuard {
        match self {
            MarkedRows::Lock => locker.acquire(name, opts).await,
            MarkedRows::Permit => locker.semaphore(name, 1).unwrap().acquire(opts).await,
        }
        .unwrap()
    }

    async fn try_acquire(self, locker: &Locker, name: &str, opts: &LockOptions) -> TryAcquire {
        match self {
            MarkedRows::Lock => locker.try_acquire(name, opts).await,
            MarkedRows::Permit => locker.semaphore(name, 1).unwrap().try_acquire(opts).await,
        }
        .unwrap()
    }
}

/// A release announces itself (`NOTIFY`) only on a row a waiter marked: PostgreSQL serializes
/// every notifying commit server-wide, so an unwaited release must stay quiet, and a waited one
/// must not. Notifications arrive in commit order, so a marker sent after a release says, by
/// arriving first, that the release sent nothing. Also: a table of the first form gets its
/// columns when first used.
async fn releases_are_announced_only_to_marked_rows(rows: MarkedRows) {
    let Some(pg) = postgres_for_test() else {
        return;
    };
    let admin = admin(&pg).await;
    admin.batch_execute(rows.first_form()).await.unwrap();
    let locker = Locker::connect(&lease_url(&pg)).await.unwrap();
    let (_listening, mut heard) = listener(&pg).await;
    until("the test's listener listening", || async {
        sessions(&admin, LISTENING).await == 1
    })
    .await;
    let marker = async |name: &str| {
        admin
            .execute("SELECT pg_notify('leasehold_release', $1)", &[&name])
            .await
            .unwrap();
    };
    let opts = LockOptions::new(Duration::from_secs(60));

    // No waiter: the release is not announced, and a one-try attempt on a busy row marks nothing.
    let quiet = rows.acquire(&locker, "quiet", &opts).await;
    assert!(matches!(
        rows.try_acquire(&locker, "quiet", &opts).await,
        TryAcquire::Busy { .. }
    ));
    assert!(
        !marked(&admin, rows.table(), "quiet").await,
        "a try does not mark"
    );
    quiet.release().await.unwrap();
    marker("after-quiet").await;
    assert_eq!(next_notification(&mut heard).await, "after-quiet");

    // A waiter marks the row in the attempt that finds it busy; the release is then announced
    // (before a marker sent after it), and wakes the waiter long before its 120 s backoff.
    let holder = rows.acquire(&locker, "waited", &opts).await;
    let waiting = patient(&opts);
    let waiter = {
        let locker = locker.clone();
        tokio::spawn(async move { rows.acquire(&locker, "waited", &waiting).await })
    };
    until("the waiter's mark, and its listener", || async {
        marked(&admin, rows.table(), "waited").await && sessions(&admin, LISTENING).await == 2
    })
    .await;
    holder.release().await.unwrap();
    marker("after-waited").await;
    assert_eq!(next_notification(&mut heard).await, "waited");
    assert_eq!(next_notification(&mut heard).await, "after-waited");
    let got = taken(waiter, "woken by the release, not the backoff").await;
    got.release().await.unwrap();
}

#[tokio::test]
async fn a_lease_row_release_is_announced_only_to_a_marked_row() {
    releases_are_announced_only_to_marked_rows(MarkedRows::Lock).await;
}

#[tokio::test]
async fn a_lease_row_permit_release_is_announced_only_to_a_marked_slot() {
    releases_are_announced_only_to_marked_rows(MarkedRows::Permit).await;
}

/// An admin connection, a 60 s lock's options, and the lease row `key` held with them.
async fn held_row(pg: &Postgres, key: &str) -> (tokio_postgres::Client, LockOptions, LockGuard) {
    let opts = LockOptions::new(Duration::from_secs(60));
    let holder = Locker::connect(&lease_url(pg)).await.unwrap();
    let held = holder.acquire(key, &opts).await.unwrap();
    (admin(pg).await, opts, held)
}

/// A lock's waiter that finds the row's mark lasting (at least half of its own ahead) leaves
/// the row alone: waiters that lose a handoff do not write the row one after another under its
/// row lock. The mark still covers them: both waiters, with 120 s backoffs, are woken by the
/// releases.
#[tokio::test]
async fn a_lasting_mark_is_not_written_again() {
    let Some(pg) = postgres_for_test() else {
        return;
    };
    let (admin, opts, held) = held_row(&pg, "lasting").await;
    let (mut waiters, mut marks) = (Vec::new(), Vec::new());
    for n in 1..=2 {
        let locker = Locker::connect(&lease_url(&pg)).await.unwrap();
        let waiting = patient(&opts);
        waiters.push(tokio::spawn(async move {
            let got = locker.acquire("lasting", &waiting).await.unwrap();
            got.release().await.unwrap();
        }));
        refused_after_listening(&admin, n).await;
        marks.push(row_mark(&admin, "lasting").await);
    }
    assert_eq!(marks[0], marks[1], "the second waiter wrote the row");
    held.release().await.unwrap();
    for waiter in waiters {
        tokio::time::timeout(BOUND, waiter)
            .await
            .expect("woken by a release, not the backoff")
            .unwrap();
    }
}

/// A mark that ends before this waiter's next attempt is written again: a waiter with a
/// 100 ms backoff (a 1.2 s mark) gives up, and a patient one (120 s backoff) then marks the
/// row for itself, so a release after the short mark ended still wakes it.
#[tokio::test]
async fn a_mark_too_short_for_the_waiter_is_written_again() {
    let Some(pg) = postgres_for_test() else {
        return;
    };
    let (admin, opts, held) = held_row(&pg, "short").await;
    let brief = opts
        .clone()
        .wait(Duration::from_millis(300))
        .backoff(leasehold::Backoff::constant(Duration::from_millis(100)));
    let hasty = Locker::connect(&lease_url(&pg)).await.unwrap();
    assert!(matches!(
        hasty.acquire("short", &brief).await,
        Err(Error::NotAcquired { .. })
    ));
    let (_, short) = row_mark(&admin, "short").await;
    let waiter = {
        let locker = Locker::connect(&lease_url(&pg)).await.unwrap();
        let waiting = patient(&opts);
        tokio::spawn(async move { locker.acquire("short", &waiting).await.unwrap() })
    };
    refused_after_listening(&admin, 2).await;
    let (_, own) = row_mark(&admin, "short").await;
    let later: bool = admin
        .query_one(
            "SELECT $1::text::timestamptz > $2::text::timestamptz",
            &[&own, &short],
        )
        .await
        .unwrap()
        .get(0);
    assert!(
        later,
        "the patient waiter kept a mark too short for it: {own} after {short}"
    );
    until("the short mark ended, by the server's clock", || async {
        admin
            .query_one(
                "SELECT clock_timestamp() > $1::text::timestamptz",
                &[&short],
            )
            .await
            .unwrap()
            .get::<_, bool>(0)
    })
    .await;
    held.release().await.unwrap();
    let got = taken(waiter, "woken by the release, which its own mark announced").await;
    got.release().await.unwrap();
    drop(hasty);
}

/// A lease row taken away by the lock table's force-release is announced to its marked
/// waiter as a release is: with a 120 s backoff, only the notification wakes it in time.
#[tokio::test]
async fn a_force_released_lease_row_wakes_its_waiter() {
    let Some(pg) = postgres_for_test() else {
        return;
    };
    let admin = admin(&pg).await;
    let locker = Locker::connect(&lease_url(&pg)).await.unwrap();
    let opts = LockOptions::new(Duration::from_secs(60));
    let holder = locker.acquire("forced", &opts).await.unwrap();
    let waiting = patient(&opts);
    let waiter = {
        let locker = locker.clone();
        tokio::spawn(async move { locker.acquire("forced", &waiting).await.unwrap() })
    };
    until("the waiter's mark, and its listener", || async {
        marked(&admin, "leasehold_leases", "forced").await && sessions(&admin, LISTENING).await == 1
    })
    .await;
    let forced = locker.force_release("forced", "test").await.unwrap();
    assert_eq!(forced.previous.token, *holder.token());
    let got = taken(waiter, "woken by the force-release, not the backoff").await;
    got.release().await.unwrap();
    drop(holder);
}

/// A permit's attempt picks its slot by its snapshot, so a slot freed after that snapshot
/// looks taken, and its release (unmarked then) is not announced: the waiter's mark, which
/// reads each slot's latest version, finds it free, and the attempt looks again at once. Here
/// the slot is freed by a transaction held open while the waiter's attempt marks it; with a
/// 120 s backoff and no notification coming, only the second look takes it in time.
#[tokio::test]
async fn a_permit_freed_while_its_waiter_marks_it_is_taken_at_once() {
    let Some(pg) = postgres_for_test() else {
        return;
    };
    let mut admin = admin(&pg).await;
    let locker = Locker::connect(&lease_url(&pg)).await.unwrap();
    let sem = locker.semaphore("freed", 1).unwrap();
    let opts = LockOptions::new(Duration::from_secs(60));
    let holder = sem.acquire(&opts).await.unwrap();
    let waiting = patient(&opts);
    let waiter = {
        let sem = sem.clone();
        tokio::spawn(async move { sem.acquire(&waiting).await.unwrap() })
    };
    until("the waiter's mark, and its listener", || async {
        marked(&admin, "leasehold_permits", "freed").await && sessions(&admin, LISTENING).await == 1
    })
    .await;
    // The slot freed in a transaction left open (a release that sends nothing)...
    let free = admin.transaction().await.unwrap();
    free.execute(
        "UPDATE leasehold_permits SET token = NULL WHERE key = 'freed'",
        &[],
    )
    .await
    .unwrap();
    // ... while the waiter, woken by a notification of the name, attempts: its snapshot shows
    // the slot taken, and its mark waits for the open transaction's row lock.
    let other = {
        let (client, conn) = tokio_postgres::connect(&pg.url(), NoTls).await.unwrap();
        tokio::spawn(conn);
        client
    };
    other
        .execute("SELECT pg_notify('leasehold_release', 'freed')", &[])
        .await
        .unwrap();
    until("the waiter's mark waiting for the row lock", || async {
        let lock_wait = "wait_event_type = 'Lock' AND query LIKE '%leasehold_permits%'";
        sessions(&other, lock_wait).await == 1
    })
    .await;
    free.commit().await.unwrap();
    let got = taken(waiter, "taken at the second look, not after the backoff").await;
    got.release().await.unwrap();
    drop(holder);
}

#[tokio::test]
async fn an_auto_extended_lease_row_is_kept_and_its_loss_reported() {
    use leasehold::postgres::PostgresLeaseClient;
    let Some(pg) = postgres_for_test() else {
        return;
    };
    let admin = admin(&pg).await;
    let client = Locker::from(PostgresLeaseClient::connect(&lease_url(&pg)).await.unwrap());
    let ttl = Duration::from_millis(600);
    let guard = client
        .acquire("kept", &LockOptions::new(ttl).auto_extend(true))
        .await
        .unwrap();
    server_clock_passes(&admin, ttl * 5).await;
    assert!(guard.is_held());
    assert_eq!(
        client.inspect("kept").await.unwrap().holder.as_deref(),
        Some(guard.token().expose())
    );
    // Taken away from outside: the next renewal finds it gone and reports the loss.
    admin
        .execute(
            "UPDATE leasehold_leases SET token = 'intruder' WHERE key = 'kept'",
            &[],
        )
        .await
        .unwrap();
    tokio::time::timeout(BOUND, guard.lost())
        .await
        .expect("loss reported");
    assert_eq!(guard.loss_reason(), Some(LossReason::NotHeld));
}

// -- through a connection pooler, keepalive bounds, lock waits (issue 22) -------------------

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
    let blocker = admin(&pg).await;
    blocker
        .batch_execute("BEGIN; SELECT * FROM leasehold_locks WHERE key = 'row-locked' FOR UPDATE")
        .await
        .unwrap();
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

// -- review 2026-12-02: reloads, late grants, min_hold on lease rows, orphans ---------------

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
    let blocker = admin(&pg).await;
    blocker
        .batch_execute("BEGIN; SELECT * FROM leasehold_leases WHERE key = 'f2' FOR UPDATE")
        .await
        .unwrap();
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
