//! Semaphores, read-write locks and elections on PostgreSQL, through `Locker::connect` as users
//! reach them: session advisory locks (`postgres://`) and lease rows (`?lock=lease`), against a
//! real server started by the harness. Only what is PostgreSQL's own is here: slots and queues
//! in `pg_locks`, terminated backends, lease rows changed from outside, row locks, a pooler,
//! forced releases, late grants of queued writers. Each primitive's contract (exactly N
//! permits, writers alone, rising terms, token-checked release and extend, options refused,
//! another number of permits, a plain lock of an election's name, `watch` hearing each change)
//! is checked on both kinds by `conformance::primitives`. Every wait observes state
//! (`pg_locks`, a guard's loss, a task's result); the timeouts only keep a broken test from
//! hanging.
#![cfg(feature = "postgres")]

use std::time::Duration;

use leasehold::{Error, LockGuard, LockOptions, Locker, TryAcquire};
use leasehold_harness::{PgBouncerOptions, Postgres, pgbouncer_for_test, postgres_for_test};
use tokio_postgres::NoTls;

/// Only keeps a broken test from hanging.
const BOUND: Duration = Duration::from_secs(30);

async fn admin(pg: &Postgres) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(&pg.url(), NoTls)
        .await
        .expect("admin connects");
    tokio::spawn(conn);
    client
}

/// A locker on session locks and one on lease rows, on the same server.
async fn lockers(pg: &Postgres) -> [(&'static str, Locker); 2] {
    [
        ("session", Locker::connect(&pg.url()).await.unwrap()),
        (
            "lease",
            Locker::connect(&format!("{}?lock=lease", pg.url()))
                .await
                .unwrap(),
        ),
    ]
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

/// Advisory locks of `key`'s seed `seed` in `mode`, granted or waiting.
async fn advisory(
    admin: &tokio_postgres::Client,
    key: &str,
    seed: i64,
    mode: &str,
    granted: bool,
) -> Vec<i32> {
    admin
        .query(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted = $4
               AND objsubid = 1 AND mode = $3
               AND classid::bigint = ((hashtextextended($1, $2) >> 32) & 4294967295)
               AND objid::bigint = (hashtextextended($1, $2) & 4294967295)",
            &[&key, &seed, &mode, &granted],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

async fn terminate(admin: &tokio_postgres::Client, pid: i32) {
    let row = admin
        .query_one("SELECT pg_terminate_backend($1)", &[&pid])
        .await
        .unwrap();
    assert!(row.get::<_, bool>(0), "pid {pid} terminated");
}

fn acquired(t: TryAcquire) -> LockGuard {
    match t {
        TryAcquire::Acquired(g) => g,
        TryAcquire::Busy { .. } => panic!("busy"),
    }
}

fn is_busy(t: &TryAcquire) -> bool {
    matches!(t, TryAcquire::Busy { .. })
}

/// What a permit is on session locks: one granted advisory lock (a slot) per holder in
/// `pg_locks`, none once every permit is back. (Exactly N holders, another number of permits
/// refused on lease rows: `conformance::primitives`, on both kinds.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_permits_are_slots() {
    let Some(pg) = postgres_for_test() else {
        return;
    };
    let admin = admin(&pg).await;
    let opts = LockOptions::new(Duration::from_secs(30));
    let locker = Locker::connect(&pg.url()).await.unwrap();
    let name = "sem-session";
    let sem = locker.semaphore(name, 3).unwrap();
    let slots = || async {
        let mut slots = 0;
        for seed in 1..=3 {
            slots += advisory(&admin, name, seed, "ExclusiveLock", true)
                .await
                .len();
        }
        slots
    };
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(acquired(sem.try_acquire(&opts).await.unwrap()));
    }
    assert_eq!(slots().await, 3, "one granted slot per holder");
    for g in held {
        g.release().await.unwrap();
    }
    assert_eq!(slots().await, 0, "no slot once every permit is back");
}

/// Session semaphore: a waiter queues in the server on a slot (no polling while it waits
/// there), and the release of that slot grants it. (A token held by another session refused
/// with `Unsupported`, then `NotHeld` once nobody holds it: `conformance::primitives`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_semaphore_waiters_queue_in_the_server() {
    let Some(pg) = postgres_for_test() else {
        return;
    };
    let admin = admin(&pg).await;
    let locker = Locker::connect(&pg.url()).await.unwrap();
    let opts = LockOptions::new(Duration::from_secs(30));
    let sem = locker.semaphore("one", 1).unwrap();
    let holder = acquired(sem.try_acquire(&opts).await.unwrap());

    let waiter = {
        let (sem, wait) = (sem.clone(), opts.clone().wait(BOUND));
        tokio::spawn(async move { sem.acquire(&wait).await })
    };
    // The backoff grows to its maximum (200 ms) while the waiter sits in the slot's queue.
    until("waiter queued on the slot", || async {
        !advisory(&admin, "one", 1, "ExclusiveLock", false)
            .await
            .is_empty()
    })
    .await;
    holder.release().await.unwrap();
    let next = tokio::time::timeout(BOUND, waiter)
        .await
        .expect("granted")
        .unwrap()
        .unwrap();
    next.release().await.unwrap();
}

/// Session read-write lock, in the server's queue: with a writer seen waiting in `pg_locks`
/// behind a reader, `try_read` is busy at once and a waiting reader queues behind the writer
/// (seen in `pg_locks`); the writer is granted first while that reader still waits, then the
/// reader. Writers' fencing numbers come from the plain lock's counter, and a plain lock is a
/// writer: writer, plain lock, writer numbers increase. Would fail if readers took the
/// exclusive lock, or if the server let a reader pass a waiting writer. (Readers share, the
/// writer alone, writers' numbers increasing, token checks of each side:
/// `conformance::primitives`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_writer_blocks_new_readers() {
    let Some(pg) = postgres_for_test() else {
        return;
    };
    let admin = admin(&pg).await;
    let locker = Locker::connect(&pg.url()).await.unwrap();
    let opts = LockOptions::new(Duration::from_secs(30));
    let fenced = opts.clone().fencing(true);
    let rw = locker.rwlock("doc").unwrap();

    let r1 = acquired(rw.try_read(&opts).await.unwrap());
    let writer = {
        let (rw, wait) = (rw.clone(), fenced.clone().wait(BOUND));
        tokio::spawn(async move { rw.write(&wait).await })
    };
    until("writer waiting", || async {
        !advisory(&admin, "doc", 0, "ExclusiveLock", false)
            .await
            .is_empty()
    })
    .await;
    assert!(
        is_busy(&rw.try_read(&opts).await.unwrap()),
        "a new reader passed a waiting writer"
    );
    let reader = {
        let (rw, wait) = (rw.clone(), opts.clone().wait(BOUND));
        tokio::spawn(async move { rw.read(&wait).await })
    };
    until("reader queued behind the writer", || async {
        !advisory(&admin, "doc", 0, "ShareLock", false)
            .await
            .is_empty()
    })
    .await;
    r1.release().await.unwrap();
    let w = tokio::time::timeout(BOUND, writer)
        .await
        .expect("writer granted")
        .unwrap()
        .unwrap();
    // The queued reader still waits.
    assert!(!reader.is_finished());
    let n1 = w.fencing_token().expect("fenced writer");
    w.release().await.unwrap();
    let r = tokio::time::timeout(BOUND, reader)
        .await
        .expect("reader granted")
        .unwrap()
        .unwrap();
    r.release().await.unwrap();

    // The writer's counter is the plain lock's: a plain lock's number follows, then a writer's.
    let plain = locker.acquire("doc", &fenced).await.unwrap();
    let n2 = plain.fencing_token().unwrap();
    assert!(
        is_busy(&rw.try_read(&opts).await.unwrap()),
        "a plain lock is a writer"
    );
    plain.release().await.unwrap();
    let w = acquired(rw.try_write(&fenced).await.unwrap());
    let n3 = w.fencing_token().unwrap();
    assert!(n1 < n2 && n2 < n3, "{n1} {n2} {n3}");
    w.release().await.unwrap();
}

/// A holder whose session is terminated from outside (session locks: a permit, a reader, a
/// writer), or whose lease row runs out on the server or is taken (lease rows: a leader, a
/// permit), is reported lost and replaced. (A session-lock leader terminated the same way:
/// `conformance::primitives::a_leader_taken_away_is_told_and_replaced`, whose `take_away` is
/// `pg_terminate_backend`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_holders_are_reported_lost_and_replaced() {
    let Some(pg) = postgres_for_test() else {
        return;
    };
    let admin = admin(&pg).await;
    let [(_, session), (_, lease)] = lockers(&pg).await;
    let opts = LockOptions::new(Duration::from_secs(30)).auto_extend(true);

    // Session: the permit's slot session is terminated.
    let sem = session.semaphore("k-sem", 1).unwrap();
    let permit = acquired(sem.try_acquire(&opts).await.unwrap());
    let pid = advisory(&admin, "k-sem", 1, "ExclusiveLock", true).await[0];
    terminate(&admin, pid).await;
    tokio::time::timeout(BOUND, permit.lost())
        .await
        .expect("permit loss");
    let next = sem.acquire(&opts.clone().wait(BOUND)).await.unwrap();
    next.release().await.unwrap();

    // Session: a reader, then a writer.
    let rw = session.rwlock("k-rw").unwrap();
    let reader = acquired(rw.try_read(&opts).await.unwrap());
    let pid = advisory(&admin, "k-rw", 0, "ShareLock", true).await[0];
    terminate(&admin, pid).await;
    tokio::time::timeout(BOUND, reader.lost())
        .await
        .expect("reader loss");
    let writer = rw.write(&opts.clone().wait(BOUND)).await.unwrap();
    let pid = advisory(&admin, "k-rw", 0, "ExclusiveLock", true).await[0];
    terminate(&admin, pid).await;
    tokio::time::timeout(BOUND, writer.lost())
        .await
        .expect("writer loss");
    let reader = rw.read(&opts.clone().wait(BOUND)).await.unwrap();
    reader.release().await.unwrap();

    // Lease rows: the leader's row expires on the server (as when it stops renewing); its
    // next renewal finds it gone, and the waiting candidate leads.
    let opts = LockOptions::new(Duration::from_millis(600));
    let election = lease.election("k-lead").unwrap();
    let a = election.campaign("a", &opts).await.unwrap();
    let b = {
        let (election, opts) = (election.clone(), opts.clone());
        tokio::spawn(async move { election.campaign("b", &opts).await })
    };
    let n = admin
        .execute(
            "UPDATE leasehold_leases SET expires_at = clock_timestamp() WHERE key = 'k-lead'",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(n, 1);
    tokio::time::timeout(BOUND, a.lost())
        .await
        .expect("leader loss");
    let b = tokio::time::timeout(BOUND, b)
        .await
        .expect("b")
        .unwrap()
        .unwrap();
    assert!(b.fencing_token() > a.fencing_token());
    b.release().await.unwrap();

    // Lease rows: a permit whose row is taken away is reported lost by its renewal.
    let sem = lease.semaphore("k-sem", 1).unwrap();
    let permit = acquired(
        sem.try_acquire(&opts.clone().auto_extend(true))
            .await
            .unwrap(),
    );
    admin
        .execute(
            "UPDATE leasehold_permits SET token = NULL WHERE key = 'k-sem'",
            &[],
        )
        .await
        .unwrap();
    tokio::time::timeout(BOUND, permit.lost())
        .await
        .expect("permit loss");
    let next = acquired(sem.try_acquire(&opts).await.unwrap());
    next.release().await.unwrap();
}

/// Lease rows: a slot that looked free when the statement began but was taken meanwhile is not
/// taken again: the upsert's condition is checked on the row's latest version, under its row
/// lock. An outside transaction takes the only slot and keeps it locked while an attempt,
/// which saw the slot free, waits for the row; once that commits, the attempt is busy (with
/// the condition evaluated on the snapshot instead, it would hold the slot too).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_permits_are_taken_under_the_row_lock() {
    let Some(pg) = postgres_for_test() else {
        return;
    };
    let (taker, observer) = (admin(&pg).await, admin(&pg).await);
    let locker = Locker::connect(&format!("{}?lock=lease", pg.url()))
        .await
        .unwrap();
    let opts = LockOptions::new(Duration::from_secs(30));
    let sem = locker.semaphore("race", 1).unwrap();
    // The slot's row exists, free.
    acquired(sem.try_acquire(&opts).await.unwrap())
        .release()
        .await
        .unwrap();

    taker
        .batch_execute(
            "BEGIN; UPDATE leasehold_permits
                       SET token = 'outside', expires_at = clock_timestamp() + interval '1 minute'
                     WHERE key = 'race' AND slot = 1",
        )
        .await
        .unwrap();
    let attempt = {
        let (sem, opts) = (sem.clone(), opts.clone());
        tokio::spawn(async move { sem.try_acquire(&opts).await })
    };
    until("the attempt waits for the slot's row", || async {
        let row = observer
            .query_one(
                "SELECT count(*) FROM pg_stat_activity
                  WHERE wait_event_type = 'Lock' AND query LIKE '%INSERT INTO leasehold_permits%'",
                &[],
            )
            .await
            .unwrap();
        row.get::<_, i64>(0) == 1
    })
    .await;
    taker.batch_execute("COMMIT").await.unwrap();
    let outcome = tokio::time::timeout(BOUND, attempt)
        .await
        .expect("the attempt ends")
        .unwrap()
        .unwrap();
    assert!(is_busy(&outcome), "a slot held by another was taken again");
    assert_eq!(sem.holders().await.unwrap(), 1);
}

/// Through PgBouncer in transaction mode: lease-row semaphores and elections work (unnamed
/// statements, nothing kept in the session; a waiter that misses the release's notification
/// retries after its backoff); session primitives are refused with the session lock's
/// `Topology` error, which says to use `?lock=lease`, before anything is taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_a_transaction_pooler_lease_rows_work_and_sessions_are_refused() {
    let Some(pg) = postgres_for_test() else {
        return;
    };
    let Some(bouncer) = pgbouncer_for_test(&pg, &PgBouncerOptions::new()) else {
        return;
    };
    let err = Locker::connect(&bouncer.url()).await.unwrap_err();
    match &err {
        Error::Topology { reason } => assert!(reason.contains("?lock=lease"), "{reason}"),
        other => panic!("expected a Topology error, got {other}"),
    }

    let url = format!("{}?lock=lease", bouncer.url());
    let (a, b) = (
        Locker::connect(&url).await.unwrap(),
        Locker::connect(&url).await.unwrap(),
    );
    let opts = LockOptions::new(Duration::from_secs(30));
    let (sa, sb) = (
        a.semaphore("pooled", 2).unwrap(),
        b.semaphore("pooled", 2).unwrap(),
    );
    let p1 = acquired(sa.try_acquire(&opts).await.unwrap());
    let p2 = acquired(sb.try_acquire(&opts).await.unwrap());
    assert!(is_busy(&sb.try_acquire(&opts).await.unwrap()));
    let waiter = {
        let (sb, wait) = (sb.clone(), opts.clone().wait(BOUND));
        tokio::spawn(async move { sb.acquire(&wait).await })
    };
    // Released from the other client with the token alone.
    sb.release(p1.token()).await.unwrap();
    let p3 = tokio::time::timeout(BOUND, waiter)
        .await
        .expect("the waiter got the permit")
        .unwrap()
        .unwrap();
    assert_eq!(sa.holders().await.unwrap(), 2);
    p2.release().await.unwrap();
    p3.release().await.unwrap();
    drop(p1);

    let (ea, eb) = (
        a.election("pooled-lead").unwrap(),
        b.election("pooled-lead").unwrap(),
    );
    let first = ea.campaign("a", &opts).await.unwrap();
    let second = {
        let (eb, opts) = (eb.clone(), opts.clone());
        tokio::spawn(async move { eb.campaign("b", &opts).await })
    };
    assert_eq!(eb.leader().await.unwrap().unwrap().id, "a");
    first.release().await.unwrap();
    let second = tokio::time::timeout(BOUND, second)
        .await
        .expect("b elected")
        .unwrap()
        .unwrap();
    assert_eq!(ea.leader().await.unwrap().unwrap().id, "b");
    second.release().await.unwrap();
}

// Review 2026-12-02, M1(d): forcing the release of a read-write lock held by several readers
// terminated every reader's backend, bumped nothing visible, and then failed with "more than
// one row" (one row per backend): the caller saw an error for a completed force. Now the
// statement answers one row, and every reader is reported lost.
#[tokio::test]
async fn forcing_a_lock_held_by_several_readers_ends_them_all_and_succeeds() {
    let Some(pg) = postgres_for_test() else {
        return;
    };
    let admin = admin(&pg).await;
    let locker = Locker::connect(&pg.url()).await.unwrap();
    let opts = LockOptions::new(Duration::from_secs(30));
    let rw = locker.rwlock("forced-rw").unwrap();
    let readers = [
        acquired(rw.try_read(&opts).await.unwrap()),
        acquired(rw.try_read(&opts).await.unwrap()),
    ];
    assert_eq!(
        advisory(&admin, "forced-rw", 0, "ShareLock", true)
            .await
            .len(),
        2
    );
    locker
        .force_release("forced-rw", "two readers at once")
        .await
        .unwrap();
    for r in &readers {
        tokio::time::timeout(BOUND, r.lost())
            .await
            .expect("reader loss");
    }
    assert!(
        advisory(&admin, "forced-rw", 0, "ShareLock", true)
            .await
            .is_empty()
    );
    let err = locker
        .force_release("forced-rw", "again")
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NotHeld { .. }), "{err:?}");
}

// Review 2026-12-02, M4 (lease rows): the election's upsert did not reset `hold_until`, so a
// hold left on the name's row by a plain lock taken with min_hold (force-released, or lost)
// kept a resigned leader's row busy until that hold's end. Now winning the election clears it.
#[tokio::test]
async fn a_resigned_leader_is_not_kept_by_an_old_min_hold() {
    let Some(pg) = postgres_for_test() else {
        return;
    };
    let locker = Locker::connect(&format!("{}?lock=lease", pg.url()))
        .await
        .unwrap();
    let long = Duration::from_secs(30);
    let held = acquired(
        locker
            .try_acquire("m4-lead", &LockOptions::new(long).min_hold(long))
            .await
            .unwrap(),
    );
    locker
        .force_release("m4-lead", "taken away during its hold")
        .await
        .unwrap();
    drop(held.detach());
    let election = locker.election("m4-lead").unwrap();
    let leader = election
        .campaign("a", &LockOptions::new(long))
        .await
        .unwrap();
    leader.release().await.unwrap();
    assert_eq!(election.leader().await.unwrap(), None);
    assert_eq!(locker.inspect("m4-lead").await.unwrap().holder, None);
    acquired(
        locker
            .try_acquire("m4-lead", &LockOptions::new(long))
            .await
            .unwrap(),
    )
    .release()
    .await
    .unwrap();
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

// Review 2026-12-02, F1, on the primitives' path (`advisory_attempt`): writers queued in the
// server behind a writer that keeps the lock longer than their TTL used to find each grant
// "expired on arrival", give it back (drawing a fencing number) and queue again at the tail.
// Now each grant is extended on its session and kept: they win in arrival order with the next
// two numbers.
#[tokio::test]
async fn queued_writers_granted_after_their_ttl_keep_their_turn() {
    let Some(pg) = postgres_for_test() else {
        return;
    };
    let admin = admin(&pg).await;
    let locker = Locker::connect(&pg.url()).await.unwrap();
    let ttl = Duration::from_secs(1);
    let rw = locker.rwlock("late-rw").unwrap();
    let holder = acquired(
        rw.try_write(&LockOptions::new(ttl).fencing(true).auto_extend(true))
            .await
            .unwrap(),
    );
    let first = holder.fencing_token().unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let wait = LockOptions::new(ttl).fencing(true).wait(BOUND);
    for (i, name) in ["B", "C"].into_iter().enumerate() {
        let (rw, wait, tx) = (rw.clone(), wait.clone(), tx.clone());
        tokio::spawn(async move {
            let guard = rw.write(&wait).await.unwrap();
            tx.send((name, guard.fencing_token().unwrap(), guard.is_held()))
                .unwrap();
            guard.release().await.unwrap();
        });
        until("writer queued", || async {
            advisory(&admin, "late-rw", 0, "ExclusiveLock", false)
                .await
                .len()
                == i + 1
        })
        .await;
    }
    server_clock_passes(&admin, ttl * 2).await;
    assert!(holder.is_held());
    holder.release().await.unwrap();
    let mut order = Vec::new();
    for _ in 0..2 {
        order.push(rx.recv().await.unwrap());
    }
    assert_eq!(
        order,
        [("B", first + 1, true), ("C", first + 2, true)],
        "granted in arrival order, each grant kept (a give-back draws a number)"
    );
}
