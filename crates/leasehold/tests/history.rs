//! The lock history (`ClientOptions::history`, `Locker::history`) on every backend that keeps
//! one, on real servers: Redis and Valkey (standalone, cluster and Sentinel, every server of the
//! matrix), etcd, PostgreSQL (session locks and lease rows) and `memory://`; and its refusal by
//! Redlock and `file://`.
//!
//! The subjects are the conformance suite's (their `take_away` takes a lock from outside); what
//! the servers store is read from outside too ([`Stored`]), so "off by default writes nothing"
//! and "the cap holds" are checked on the server, not through the library's own reading.

use std::time::{Duration, SystemTime};

use leasehold::{
    ClientOptions, Error, HistoryEvent, HistoryKind, HistoryOptions, LockOptions, Locker,
    TryAcquire,
};

use crate::conformance::Subject;
use crate::conformance::memory::Memory;
use crate::conformance::redis::Redis;

/// Only keeps a broken build from hanging.
const GENEROUS: Duration = Duration::from_secs(30);

/// The cap of the checks: small, so that `CAP + 10` acquisitions overflow it.
const CAP: u32 = 5;

/// An auto-extended lease whose loss is checked (etcd's TTLs are whole seconds, about 2 s at
/// least).
const RENEWED: Duration = Duration::from_secs(3);

/// What the servers hold of a key's history, counted from outside the library.
trait Stored: Subject {
    /// The events stored for `key`.
    fn stored(&self, key: &str) -> impl std::future::Future<Output = u64>;

    /// Whether `key`'s newest event was stored by the write that took its lock (the same etcd
    /// transaction, the same PostgreSQL statement), as read from outside; `None` where that
    /// cannot be seen (Redis, whose scripts are checked on their own, and memory).
    fn stored_with_the_lock(&self, key: &str) -> impl std::future::Future<Output = Option<bool>> {
        let _ = key;
        std::future::ready(None)
    }
}

impl Stored for Redis {
    /// `XLEN` of the key's stream on its master (0: no stream).
    async fn stored(&self, key: &str) -> u64 {
        let stream = leasehold::redis::history_key(key);
        self.masters_of(key)
            .iter()
            .map(|s| {
                let reply = s.command(&["XLEN", &stream]).expect("XLEN");
                reply.as_integer().expect("an integer") as u64
            })
            .sum()
    }
}

impl Stored for Memory {
    /// What a locker that does not record reads (memory has no outside).
    async fn stored(&self, key: &str) -> u64 {
        let locker = Locker::connect(&self.url()).await.expect("connects");
        locker.history(key, usize::MAX).await.expect("reads").len() as u64
    }
}

#[cfg(feature = "etcd")]
impl Stored for crate::conformance::etcd::EtcdSubject {
    /// The etcd keys under the key's history prefix, `\0history\0KEY\0`.
    async fn stored(&self, key: &str) -> u64 {
        let prefix = [b"\0history\0", key.as_bytes(), b"\0"].concat();
        let options = etcd_client::GetOptions::new()
            .with_prefix()
            .with_count_only();
        let resp = self
            .raw
            .kv_client()
            .get(prefix, Some(options))
            .await
            .expect("count the history keys");
        resp.count() as u64
    }

    /// The newest event's key was created by the lock entry's (`KEY\0token`) last write.
    async fn stored_with_the_lock(&self, key: &str) -> Option<bool> {
        use etcd_client::{GetOptions, SortOrder, SortTarget};
        let newest = |prefix: Vec<u8>| {
            let mut kv = self.raw.kv_client();
            async move {
                let options = GetOptions::new()
                    .with_prefix()
                    .with_sort(SortTarget::Create, SortOrder::Descend)
                    .with_limit(1);
                let resp = kv.get(prefix, Some(options)).await.expect("a range read");
                resp.kvs()
                    .first()
                    .map(|kv| (kv.create_revision(), kv.mod_revision()))
            }
        };
        let event = newest([b"\0history\0", key.as_bytes(), b"\0"].concat()).await;
        let entry = newest([key.as_bytes(), b"\0"].concat()).await;
        // The entry's last write (its creation, or its move onto a lease of its own after a
        // wait in the queue) created the event.
        Some(
            matches!((event, entry), (Some((created, _)), Some((_, written))) if created == written),
        )
    }
}

#[cfg(feature = "postgres")]
impl Stored for crate::conformance::postgres::Pg {
    /// The key's rows in `leasehold_history` (0 when there is no such table).
    async fn stored(&self, key: &str) -> u64 {
        let exists: bool = self
            .admin
            .query_one("SELECT to_regclass('leasehold_history') IS NOT NULL", &[])
            .await
            .expect("to_regclass")
            .get(0);
        if !exists {
            return 0;
        }
        let row = self
            .admin
            .query_one(
                "SELECT count(*) FROM leasehold_history WHERE key = $1",
                &[&key],
            )
            .await
            .expect("count the rows");
        row.get::<_, i64>(0) as u64
    }

    /// The newest history row and the row the acquisition wrote (the lease row; a session
    /// lock's fencing counter) have the same `xmin`: one transaction wrote both.
    async fn stored_with_the_lock(&self, key: &str) -> Option<bool> {
        let table = match self.kind {
            crate::conformance::postgres::Kind::LeaseRow => "leasehold_leases",
            crate::conformance::postgres::Kind::Session => "leasehold_locks",
        };
        let sql = format!(
            "SELECT (SELECT xmin::text FROM {table} WHERE key = $1)
                  = (SELECT xmin::text FROM leasehold_history WHERE key = $1
                      ORDER BY id DESC LIMIT 1)"
        );
        let row = self.admin.query_one(&sql, &[&key]).await.expect("xmin");
        Some(row.get::<_, Option<bool>>(0).unwrap_or(false))
    }
}

/// A locker on `subject` that records history, capped at [`CAP`].
async fn recording<S: Subject>(subject: &S) -> Locker {
    let options = ClientOptions::new().history(HistoryOptions::new().cap(CAP));
    let locker = Locker::connect_with(&subject.url(), options)
        .await
        .unwrap_or_else(|e| panic!("{}: connecting with history: {e}", subject.name()));
    assert!(locker.records_history());
    locker
}

fn fenced() -> LockOptions {
    LockOptions::new(Duration::from_secs(60)).fencing(true)
}

/// `(kind, fencing)` of each event, newest first.
fn kinds(events: &[HistoryEvent]) -> Vec<(HistoryKind, Option<u64>)> {
    events.iter().map(|e| (e.kind, e.fencing)).collect()
}

/// Waits until `key`'s newest event satisfies `pred` (the history is read every 10 ms; the
/// bound only keeps a broken test from hanging).
async fn until_newest(
    locker: &Locker,
    key: &str,
    what: &str,
    pred: impl Fn(&HistoryEvent) -> bool,
) -> Vec<HistoryEvent> {
    let began = std::time::Instant::now();
    loop {
        let events = locker.history(key, 100).await.expect("history reads");
        if events.first().is_some_and(&pred) {
            return events;
        }
        assert!(
            began.elapsed() < GENEROUS,
            "{what}: not after {GENEROUS:?}: {events:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Every history check on `subject`, each on a key of its own.
async fn history_conforms<S: Stored>(subject: &S) {
    let name = subject.name();

    // Off by default: locking writes no history anywhere.
    let plain = subject.locker().await;
    let guard = plain.acquire("h-off", &fenced()).await.expect("acquires");
    guard.release().await.expect("releases");
    assert_eq!(
        subject.stored("h-off").await,
        0,
        "{name}: history written while off"
    );
    assert!(!plain.records_history());
    assert!(
        plain.history("h-off", 10).await.unwrap().is_empty(),
        "{name}"
    );

    // Acquired and released, by guard and by token, newest first, with fencing numbers.
    let locker = recording(subject).await;
    let key = "h-events";
    let first = locker.acquire(key, &fenced()).await.expect("acquires");
    if let Some(with_the_lock) = subject.stored_with_the_lock(key).await {
        assert!(
            with_the_lock,
            "{name}: the acquisition's event is stored by the acquisition's own write"
        );
    }
    let (f1, holder1) = (first.fencing_token(), first.token().redacted());
    {
        // The same after a wait (on etcd, through the queue: the entry's move onto a lease of
        // its own carries the event).
        let key = "h-waited";
        let waited = fenced().wait(Duration::from_secs(5));
        let guard = locker.acquire(key, &waited).await.expect("acquires");
        if let Some(with_the_lock) = subject.stored_with_the_lock(key).await {
            assert!(with_the_lock, "{name}: after a wait too");
        }
        let events = locker.history(key, 10).await.expect("reads");
        assert_eq!(
            kinds(&events),
            vec![(HistoryKind::Acquired, guard.fencing_token())],
            "{name}: {events:?}"
        );
        guard.release().await.expect("releases");
    }
    assert!(f1.is_some(), "{name}: fencing on");
    first.release().await.expect("releases");
    let TryAcquire::Acquired(second) = locker.try_acquire(key, &fenced()).await.unwrap() else {
        panic!("{name}: {key} is free");
    };
    let f2 = second.fencing_token();
    let lease = second.detach();
    locker
        .release(key, lease.token())
        .await
        .expect("releases by token");
    let events = locker.history(key, 10).await.expect("reads");
    assert_eq!(
        kinds(&events),
        vec![
            (HistoryKind::Released, None),
            (HistoryKind::Acquired, f2),
            (HistoryKind::Released, f1),
            (HistoryKind::Acquired, f1),
        ],
        "{name}: {events:?}"
    );
    assert_eq!(
        events[3].holder.as_deref(),
        Some(holder1.as_str()),
        "{name}"
    );
    assert_eq!(
        events[0].holder.as_deref(),
        Some(lease.token().redacted().as_str())
    );
    let now = SystemTime::now();
    for e in &events {
        let apart = now.duration_since(e.at).unwrap_or_else(|e| e.duration());
        assert!(
            apart < Duration::from_secs(600),
            "{name}: {e:?} stamped far from now"
        );
    }
    assert_eq!(
        kinds(&locker.history(key, 1).await.unwrap()),
        vec![(HistoryKind::Released, None)],
        "{name}: the limit keeps the newest"
    );
    assert_eq!(subject.stored(key).await, 4, "{name}");

    // Lost: the lock taken away from outside; the loss is recorded, and the failed release
    // after it records nothing.
    let key = "h-lost";
    let options = LockOptions::new(RENEWED).fencing(true).auto_extend(true);
    let guard = locker.acquire(key, &options).await.expect("acquires");
    let f3 = guard.fencing_token();
    subject.take_away(key).await;
    tokio::time::timeout(GENEROUS, guard.lost())
        .await
        .unwrap_or_else(|_| panic!("{name}: the loss is seen"));
    let events = until_newest(&locker, key, "the loss is recorded", |e| {
        e.kind == HistoryKind::Lost
    })
    .await;
    assert_eq!(
        kinds(&events),
        vec![(HistoryKind::Lost, f3), (HistoryKind::Acquired, f3)],
        "{name}: {events:?}"
    );
    assert!(events[0].detail.is_some(), "{name}: the loss's reason");
    assert!(guard.release().await.is_err(), "{name}: no longer held");
    assert_eq!(
        kinds(&locker.history(key, 10).await.unwrap()).len(),
        2,
        "{name}"
    );

    // Forced: an operator's removal is recorded with its reason, who forced it, the counter it
    // was raised to, and the removed holder's owner record (kept with every event of a holder
    // that recorded one). Where a backend has no forced release, nothing is recorded.
    let key = "h-forced";
    let owner = leasehold::Owner::this_process().label("nightly").unwrap();
    let guard = locker
        .acquire(key, &fenced().owner(owner.clone()))
        .await
        .expect("acquires");
    match locker.force_release(key, "stuck for an hour").await {
        Ok(forced) => {
            // A PostgreSQL session lock is forced by ending its session, which its guard sees
            // as a loss (recorded too, in either order with the forced event).
            let mut events = locker.history(key, 10).await.unwrap();
            events.retain(|e| e.kind != HistoryKind::Lost);
            assert_eq!(
                kinds(&events),
                vec![
                    (HistoryKind::Forced, forced.fencing_counter),
                    (HistoryKind::Acquired, guard.fencing_token()),
                ],
                "{name}: {events:?}"
            );
            let detail = events[0].detail.as_deref().unwrap_or_default();
            assert!(
                detail.contains("stuck for an hour") && detail.contains("forced by"),
                "{name}: {detail}"
            );
            for e in &events {
                assert_eq!(e.owner, Some(owner.to_string()), "{name}: {e:?}");
                assert_eq!(e.holder, Some(guard.token().redacted()), "{name}: {e:?}");
            }
        }
        Err(leasehold::Error::Unsupported { .. }) => {
            guard.release().await.expect("releases");
        }
        Err(e) => panic!("{name}: force_release: {e}"),
    }

    // The cap: CAP + 10 acquisitions (2 events each) leave exactly CAP events, the newest
    // (on etcd once the last trims, steps of their own in the background, are done).
    let key = "h-cap";
    let mut last = None;
    for _ in 0..CAP + 10 {
        let guard = locker.acquire(key, &fenced()).await.expect("acquires");
        last = guard.fencing_token();
        guard.release().await.expect("releases");
    }
    let began = std::time::Instant::now();
    loop {
        let stored = subject.stored(key).await;
        if stored == u64::from(CAP) {
            break;
        }
        assert!(began.elapsed() < GENEROUS, "{name}: the cap: {stored} kept");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let events = locker.history(key, 100).await.unwrap();
    assert_eq!(events.len(), CAP as usize, "{name}");
    assert_eq!(
        kinds(&events[..2]),
        vec![(HistoryKind::Released, last), (HistoryKind::Acquired, last)],
        "{name}: {events:?}"
    );
}

/// A fair lock released with a waiter queued is recorded as handed over, whether released by
/// token (`by_guard` false: `Locker::release_fair`, the CLI's `release --fair`) or by its guard
/// (Redis only: the other backends' fair release is a plain release).
async fn handed_over_is_recorded(subject: &Redis, by_guard: bool) {
    let name = format!("{} (by guard: {by_guard})", subject.name());
    let (a, b) = (recording(subject).await, recording(subject).await);
    let key = if by_guard {
        "h-fair-guard"
    } else {
        "h-fair-token"
    };
    let options = LockOptions::new(Duration::from_secs(60))
        .fencing(true)
        .fair(true)
        .wait(GENEROUS);
    let first = a.acquire(key, &options).await.expect("acquires");
    let f1 = first.fencing_token();
    let queue = leasehold::redis::fair_queue_key(key);
    let masters = subject.masters_of(key);
    let waiter = tokio::spawn({
        let options = options.clone();
        async move { b.acquire(key, &options).await.map(|g| (b, g)) }
    });
    crate::common::until("the waiter queued", || {
        masters.iter().any(|s| {
            let reply = s.command(&["ZCARD", &queue]).expect("ZCARD");
            reply.as_integer().unwrap_or(0) > 0
        })
    })
    .await;
    // By token, the fencing number is not known to the releaser.
    let handed_over = if by_guard {
        first.release().await.expect("hands over");
        (HistoryKind::HandedOver, f1)
    } else {
        let lease = first.detach();
        a.release_fair(key, lease.token())
            .await
            .expect("hands over");
        (HistoryKind::HandedOver, None)
    };
    let (b, second) = tokio::time::timeout(GENEROUS, waiter)
        .await
        .expect("the waiter gets it")
        .unwrap()
        .expect("acquires");
    let f2 = second.fencing_token();
    second.release().await.expect("releases");
    let events = b.history(key, 10).await.expect("reads");
    let got = kinds(&events);
    assert_eq!(got.len(), 4, "{name}: {events:?}");
    assert_eq!(got[0], (HistoryKind::Released, f2), "{name}: {events:?}");
    assert_eq!(got[3], (HistoryKind::Acquired, f1), "{name}: {events:?}");
    // The handover and the waiter's acquisition are recorded by two clients at about the same
    // time: either order.
    let mut middle = got[1..3].to_vec();
    middle.sort_by_key(|(k, _)| k.as_str());
    assert_eq!(
        middle,
        vec![(HistoryKind::Acquired, f2), handed_over],
        "{name}: {events:?}"
    );
}

/// On Redis a plain lock's acquisition and release append their events in the scripts that take
/// and delete the lock (`redis::history`): an attempt that finds the lock busy and a release
/// that finds it gone append nothing; and a refused append (here a string where the stream
/// goes: `WRONGTYPE`) neither fails nor undoes the lock operation, whose write a script cannot
/// roll back. With `redis.call` instead of `redis.pcall` for the append, the acquisition
/// would fail with the lock left set behind it.
async fn scripts_record_exactly_their_operations(subject: &Redis) {
    let name = subject.name();
    let locker = recording(subject).await;
    let key = "h-scripted";
    let guard = locker.acquire(key, &fenced()).await.expect("acquires");
    let other = recording(subject).await;
    assert!(
        matches!(
            other.try_acquire(key, &fenced()).await,
            Ok(TryAcquire::Busy { .. })
        ),
        "{name}: held"
    );
    let token = guard.token().clone();
    let fencing = guard.fencing_token();
    guard.release().await.expect("releases");
    assert!(
        matches!(other.release(key, &token).await, Err(Error::NotHeld { .. })),
        "{name}: released already"
    );
    assert_eq!(
        kinds(&locker.history(key, 10).await.unwrap()),
        vec![
            (HistoryKind::Released, fencing),
            (HistoryKind::Acquired, fencing)
        ],
        "{name}: the busy attempt and the second release appended nothing"
    );

    let key = "h-refused";
    let stream = leasehold::redis::history_key(key);
    let masters = subject.masters_of(key);
    for m in &masters {
        m.command(&["SET", &stream, "not a stream"]).expect("SET");
    }
    let guard = locker.acquire(key, &fenced()).await.expect("acquires");
    let held = locker.inspect(key).await.expect("inspects");
    assert_eq!(
        held.holder.as_deref(),
        Some(guard.token().expose()),
        "{name}: the lock was taken"
    );
    guard.release().await.expect("releases");
    assert!(
        locker
            .inspect(key)
            .await
            .expect("inspects")
            .holder
            .is_none(),
        "{name}: the lock was released"
    );
    for m in &masters {
        let kept = m.command(&["GET", &stream]).expect("GET");
        assert_eq!(kept.as_str(), Some("not a stream"), "{name}");
    }
}

/// A locker asked to record history on a backend without a history log is refused at once,
/// naming the backend; so is reading one.
async fn refuses(url: &str, backend: &str) {
    let options = ClientOptions::new().history(HistoryOptions::new());
    match Locker::connect_with(url, options).await {
        Err(Error::Unsupported { backend: b, what }) => {
            assert_eq!(b, backend);
            assert!(what.contains("history"), "{what}");
        }
        other => panic!("{url}: {other:?}"),
    }
    let plain = Locker::connect(url).await.expect("connects");
    assert!(matches!(
        plain.history("k", 10).await,
        Err(Error::Unsupported { backend: b, .. }) if b == backend
    ));
}

leasehold_harness::server_test!(async fn redis_standalone(bin) {
    let subject = Redis::one(&bin);
    history_conforms(&subject).await;
    scripts_record_exactly_their_operations(&subject).await;
    handed_over_is_recorded(&subject, false).await;
    handed_over_is_recorded(&subject, true).await;
});

leasehold_harness::server_test!(async fn redis_cluster(bin) {
    let subject = Redis::cluster(&bin);
    history_conforms(&subject).await;
    scripts_record_exactly_their_operations(&subject).await;
    handed_over_is_recorded(&subject, false).await;
    handed_over_is_recorded(&subject, true).await;
});

leasehold_harness::server_test!(async fn redis_sentinel(bin) {
    history_conforms(&Redis::sentinel(&bin)).await;
});

leasehold_harness::server_test!(async fn redlock_refuses(bin) {
    refuses(&Redis::redlock(&bin).url(), "redlock").await;
});

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory() {
    history_conforms(&Memory {
        name: "history".into(),
    })
    .await;
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_refuses() {
    let dir = tempfile::tempdir().expect("a folder");
    refuses(&format!("file://{}", dir.path().display()), "file").await;
}

#[cfg(feature = "etcd")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd() {
    use crate::conformance::etcd::{EtcdSubject, Members};
    let Some(etcd) = leasehold_harness::etcd_for_test() else {
        return;
    };
    let subject = EtcdSubject::new(Members::One(etcd)).await;
    history_conforms(&subject).await;
    revoked_history_lease(&subject).await;
}

/// On etcd a recording locker's events ride on a lease of the history's own, in the lock's own
/// transactions. Revoked behind its back, that lease makes etcd refuse the whole transaction:
/// the lock operation is sent again without the event (never failed for its history), the
/// event is appended after it instead, and later events go on a new lease. Without the
/// retry, the acquisition would fail with etcd's "lease not found".
#[cfg(feature = "etcd")]
async fn revoked_history_lease(subject: &crate::conformance::etcd::EtcdSubject) {
    let name = subject.name();
    let locker = recording(subject).await;
    let key = "h-revoked";
    let guard = locker.acquire(key, &fenced()).await.expect("acquires");
    guard.release().await.expect("releases");
    let prefix = [b"\0history\0", key.as_bytes(), b"\0"].concat();
    let options = etcd_client::GetOptions::new().with_prefix();
    let mut raw = subject.raw.clone();
    let events = raw.get(prefix.clone(), Some(options)).await.expect("reads");
    let lease = events.kvs().first().expect("an event").lease();
    raw.lease_revoke(lease)
        .await
        .expect("revokes the history's lease");
    let guard = locker
        .acquire(key, &fenced())
        .await
        .unwrap_or_else(|e| panic!("{name}: acquires with the history's lease gone: {e}"));
    let fencing = guard.fencing_token();
    until_newest(&locker, key, "the acquisition appended after", |e| {
        e.kind == HistoryKind::Acquired && e.fencing == fencing
    })
    .await;
    guard.release().await.expect("releases");
    let events = locker.history(key, 10).await.expect("reads");
    assert_eq!(
        kinds(&events),
        vec![
            (HistoryKind::Released, fencing),
            (HistoryKind::Acquired, fencing)
        ],
        "{name}: on a new lease: {events:?}"
    );
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_session_locks() {
    use crate::conformance::postgres::{Kind, Pg};
    let Some(pg) = leasehold_harness::postgres_for_test() else {
        return;
    };
    let subject = Pg::new(Kind::Session, pg).await;
    history_conforms(&subject).await;
    refused_table(&subject).await;
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_lease_rows() {
    use crate::conformance::postgres::{Kind, Pg};
    let Some(pg) = leasehold_harness::postgres_for_test() else {
        return;
    };
    let subject = Pg::new(Kind::LeaseRow, pg).await;
    history_conforms(&subject).await;
    refused_table(&subject).await;
}

/// A recording locker whose role may not write `leasehold_history` (which exists, made by
/// another role) still locks: the lock statement that carried the event fails as a whole
/// (nothing changed), is sent again without it, and the events are then appended after the
/// operations (refused too, and only logged). Were the refusal not caught, the acquisition
/// would fail with a permission error.
#[cfg(feature = "postgres")]
async fn refused_table(subject: &crate::conformance::postgres::Pg) {
    let name = subject.name();
    let locks = match subject.kind {
        crate::conformance::postgres::Kind::LeaseRow => "leasehold_leases",
        crate::conformance::postgres::Kind::Session => "leasehold_locks",
    };
    subject
        .admin
        .batch_execute(&format!(
            "CREATE ROLE history_refused LOGIN;
             GRANT CREATE ON SCHEMA public TO history_refused;
             GRANT SELECT, INSERT, UPDATE, DELETE ON {locks} TO history_refused;"
        ))
        .await
        .expect("a role without the history table");
    let url = subject.url().replace("leasehold@", "history_refused@");
    assert_ne!(url, subject.url());
    let locker = Locker::connect_with(&url, ClientOptions::new().history(HistoryOptions::new()))
        .await
        .unwrap_or_else(|e| panic!("{name}: connects: {e}"));
    for round in 0..2 {
        let key = "h-refused";
        let guard = locker
            .acquire(key, &fenced())
            .await
            .unwrap_or_else(|e| panic!("{name}: round {round}: acquires: {e}"));
        let held = locker.inspect(key).await.expect("inspects");
        assert_eq!(
            held.holder.as_deref(),
            Some(guard.token().expose()),
            "{name}"
        );
        guard.release().await.expect("releases");
        let held = locker.inspect(key).await.expect("inspects");
        assert!(held.holder.is_none(), "{name}: released");
    }
    assert_eq!(subject.stored("h-refused").await, 0, "{name}");
}
