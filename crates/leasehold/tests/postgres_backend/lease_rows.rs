//! Lease rows (`?lock=lease`): token-checked rows that outlive their client, their waiters
//! (woken by a release's `NOTIFY`, one of a client's lock waiters per release, only for a
//! marked row) and auto-extension.

use super::*;

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
/// about one attempt a handoff, counted on the server (the waiter its client's release wakes at
/// once takes the lock; the release's notification, seen while that waiter's attempt is out, is
/// left to it: 10 here. When the notification woke a second waiter, which found the row taken:
/// 18 or 19). Waking them all at each release would cost 10 + 9 + ... + 1 = 55. No
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
