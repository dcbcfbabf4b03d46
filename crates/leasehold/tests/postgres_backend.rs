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

mod lease_rows;
mod poolers;
mod review_edges;

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

/// `pg`'s URL for lease rows.
fn lease_url(pg: &Postgres) -> String {
    format!("{}?lock=lease", pg.url())
}

/// A connection of its own holding `key`'s row of `table` locked (`FOR UPDATE`) in a transaction
/// left open: the row stays locked until the returned client commits or is dropped.
async fn row_locked_in_open_transaction(
    pg: &Postgres,
    table: &str,
    key: &str,
) -> tokio_postgres::Client {
    let blocker = admin(pg).await;
    blocker.execute("BEGIN", &[]).await.unwrap();
    let sql = format!("SELECT * FROM {table} WHERE key = $1 FOR UPDATE");
    blocker.execute(&sql, &[&key]).await.unwrap();
    blocker
}
