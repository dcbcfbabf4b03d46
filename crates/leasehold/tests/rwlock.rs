//! Read-write locks on Redis: the writer as the plain lock of the name and readers as a sorted
//! set, the waiting writer's mark, expired readers ignored, vanished waiting writers,
//! auto-extension with loss reporting, `with_read`/`with_write` under contention. Readers
//! sharing, the writer alone, new readers kept out while a writer waits, writers' numbers
//! increasing, token checks of each side, bad input and the options a read-write lock lacks
//! are checked on every backend by `conformance::primitives`.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use common::until;
use leasehold::internal::{rwlock_readers_key, rwlock_writer_waiting_key};
use leasehold::{Backoff, Error, LockOptions, Locker, LossReason, TryAcquire};
use leasehold_harness::{Server, ServerOptions};

const LONG: Duration = Duration::from_secs(60);
const HANG_GUARD: Duration = Duration::from_secs(60);

async fn setup(bin: &leasehold_harness::ServerBinary) -> (Server, Locker) {
    let server = Server::start(bin, &ServerOptions::new()).unwrap();
    let client = Locker::connect(&server.url()).await.unwrap();
    (server, client)
}

fn exists(server: &Server, key: &str) -> bool {
    server.command(&["EXISTS", key]).unwrap().as_integer() == Some(1)
}

fn busy(r: TryAcquire) -> bool {
    !r.is_acquired()
}

leasehold_harness::server_test!(async fn the_writer_is_the_plain_lock_and_readers_a_sorted_set(bin) {
    let (server, client) = setup(&bin).await;
    let rw = client.rwlock("rw:basic").unwrap();
    let opts = LockOptions::new(LONG);
    let r = rw.try_read(&opts).await.unwrap().acquired().expect("a reader");
    let readers = rwlock_readers_key("rw:basic");
    let score = server.command(&["ZSCORE", &readers, r.token().expose()]).unwrap();
    assert!(score.as_str().is_some(), "the reader is a member of the set: {score:?}");
    r.release().await.unwrap();
    assert!(!exists(&server, &readers), "the set removed with its last reader");
    let w = rw.try_write(&opts.clone().fencing(true)).await.unwrap().acquired().expect("the writer");
    let first = w.fencing_token().expect("the writer gets a number");
    // The writer holds the key `name` itself, as a plain lock.
    assert_eq!(common::get(&server, "rw:basic").as_deref(), Some(w.token().expose()));
    assert!(busy(client.try_acquire("rw:basic", &opts).await.unwrap()));
    w.release().await.unwrap();
    // A plain lock on the name keeps readers out, as a writer.
    let plain = client.try_acquire("rw:basic", &opts).await.unwrap().acquired().unwrap();
    assert!(busy(rw.try_read(&opts).await.unwrap()), "a reader beside a plain lock");
    plain.release().await.unwrap();
    // The writers' counter is the plain lock's, per key: consecutive numbers.
    let w2 = rw.try_write(&opts.clone().fencing(true)).await.unwrap().acquired().unwrap();
    assert_eq!(w2.fencing_token(), Some(first + 1));
    w2.release().await.unwrap();
});

leasehold_harness::server_test!(async fn a_waiting_writer_is_not_starved_by_new_readers(bin) {
    let (server, client) = setup(&bin).await;
    let rw = client.rwlock("rw:starve").unwrap();
    let opts = LockOptions::new(LONG);
    let reader = rw.try_read(&opts).await.unwrap().acquired().unwrap();
    let writer = {
        let rw = rw.clone();
        tokio::spawn(async move { rw.write(&LockOptions::new(LONG).wait(LONG)).await })
    };
    let mark = rwlock_writer_waiting_key("rw:starve");
    until("the writer marks itself waiting", || exists(&server, &mark)).await;
    // A reader that waits gets in after the writer, not before. (A reader's `try_read` busy
    // while a writer waits: `conformance::primitives`.)
    let order = Arc::new(AtomicI64::new(0));
    let late_reader = {
        let (rw, order) = (rw.clone(), order.clone());
        tokio::spawn(async move {
            let g = rw.read(&LockOptions::new(LONG).wait(LONG)).await.unwrap();
            order.compare_exchange(0, 2, Ordering::SeqCst, Ordering::SeqCst).ok();
            g.release().await.unwrap();
        })
    };
    reader.release().await.unwrap();
    let w = tokio::time::timeout(HANG_GUARD, writer).await.unwrap().unwrap().expect("the writer");
    order.compare_exchange(0, 1, Ordering::SeqCst, Ordering::SeqCst).ok();
    assert!(!exists(&server, &mark), "the writer's mark is gone once it writes");
    w.release().await.unwrap();
    tokio::time::timeout(HANG_GUARD, late_reader).await.unwrap().unwrap();
    assert_eq!(order.load(Ordering::SeqCst), 1, "the writer went first");
});

leasehold_harness::server_test!(async fn expired_readers_do_not_block_the_writer(bin) {
    let (_server, client) = setup(&bin).await;
    let rw = client.rwlock("rw:expired").unwrap();
    let r = rw.try_read(&LockOptions::new(Duration::from_millis(300))).await.unwrap().acquired().unwrap();
    let lease = r.lease().clone();
    let stale = r.detach();
    let w = tokio::time::timeout(HANG_GUARD, rw.write(&LockOptions::new(LONG).wait(Duration::from_secs(30))))
        .await
        .unwrap()
        .expect("the writer, once the reader's lease ran out");
    assert!(!lease.is_held());
    assert!(matches!(rw.release_read(stale.token()).await, Err(Error::NotHeld { .. })));
    w.release().await.unwrap();
});

leasehold_harness::server_test!(async fn a_vanished_waiting_writer_stops_blocking_readers(bin) {
    let (server, client) = setup(&bin).await;
    let rw = client.rwlock("rw:vanished").unwrap();
    let reader = rw.try_read(&LockOptions::new(LONG)).await.unwrap().acquired().unwrap();
    let mark = rwlock_writer_waiting_key("rw:vanished");
    // A dropped wait removes its mark at once.
    let writer = {
        let rw = rw.clone();
        tokio::spawn(async move { rw.write(&LockOptions::new(LONG).wait(LONG)).await })
    };
    until("the writer waits", || exists(&server, &mark)).await;
    writer.abort();
    until("the dropped writer's mark removed", || !exists(&server, &mark)).await;
    // A writer whose wait ends at its deadline removes it before returning.
    let short = LockOptions::new(LONG).wait(Duration::from_millis(300));
    assert!(matches!(rw.write(&short).await, Err(Error::NotAcquired { .. })));
    assert!(!exists(&server, &mark));
    // A crashed writer's mark (left by hand, 1 s) keeps readers out until it expires.
    server.command(&["SET", &mark, "crashed-writer", "PX", "1000"]).unwrap();
    assert!(busy(rw.try_read(&LockOptions::new(LONG)).await.unwrap()));
    let r2 = tokio::time::timeout(HANG_GUARD, rw.read(&LockOptions::new(LONG).wait(Duration::from_secs(30))))
        .await
        .unwrap()
        .expect("a reader once the crashed writer's mark expired");
    r2.release().await.unwrap();
    reader.release().await.unwrap();
});

leasehold_harness::server_test!(async fn leases_on_both_sides_are_auto_extended_and_losses_reported(bin) {
    let (server, client) = setup(&bin).await;
    let rw = client.rwlock("rw:renewed").unwrap();
    let opts = LockOptions::new(Duration::from_secs(1)).auto_extend(true);
    let r = rw.try_read(&opts).await.unwrap().acquired().unwrap();
    let stats = client.as_redis().unwrap().renewal_stats();
    until("the reader renewed past three TTLs", || stats.renewals() >= 4).await;
    assert!(r.is_held());
    server
        .command(&["ZREM", &rwlock_readers_key("rw:renewed"), r.token().expose()])
        .unwrap();
    tokio::time::timeout(HANG_GUARD, r.lost()).await.expect("the reader's loss reported");
    assert_eq!(r.loss_reason(), Some(LossReason::NotHeld));
    let w = rw.try_write(&opts).await.unwrap().acquired().unwrap();
    let at = stats.renewals();
    until("the writer renewed past three TTLs", || stats.renewals() >= at + 4).await;
    assert_eq!(common::get(&server, "rw:renewed").as_deref(), Some(w.token().expose()));
    w.release().await.unwrap();
});

leasehold_harness::server_test!(async fn with_read_and_with_write_exclude_each_other(bin) {
    let (_server, client) = setup(&bin).await;
    let rw = client.rwlock("rw:with").unwrap();
    // +1 per reader inside, +1000 per writer inside: a writer must always see exactly 1000.
    let inside = Arc::new(AtomicI64::new(0));
    let bad = Arc::new(AtomicI64::new(0));
    let mut tasks = Vec::new();
    for i in 0..6 {
        let (rw, inside, bad) = (rw.clone(), inside.clone(), bad.clone());
        tasks.push(tokio::spawn(async move {
            let opts = LockOptions::new(LONG).wait(LONG).backoff(Backoff::new(
                Duration::from_millis(1),
                Duration::from_millis(20),
            ));
            for round in 0..6 {
                if (i + round) % 3 == 0 {
                    rw.with_write(&opts, |_| async {
                        let now = inside.fetch_add(1000, Ordering::SeqCst) + 1000;
                        if now != 1000 {
                            bad.fetch_add(1, Ordering::SeqCst);
                        }
                        tokio::time::sleep(Duration::from_millis(2)).await;
                        inside.fetch_sub(1000, Ordering::SeqCst);
                    })
                    .await
                    .unwrap();
                } else {
                    rw.with_read(&opts, |_| async {
                        let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                        if now >= 1000 {
                            bad.fetch_add(1, Ordering::SeqCst);
                        }
                        tokio::time::sleep(Duration::from_millis(2)).await;
                        inside.fetch_sub(1, Ordering::SeqCst);
                    })
                    .await
                    .unwrap();
                }
            }
        }));
    }
    for t in tasks {
        tokio::time::timeout(HANG_GUARD, t).await.unwrap().unwrap();
    }
    assert_eq!(bad.load(Ordering::SeqCst), 0, "a writer overlapped someone");
});
