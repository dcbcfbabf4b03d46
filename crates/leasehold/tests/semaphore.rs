//! Counting semaphores on Redis: the permits' sorted set, the first expiry told to a busy
//! attempt, expired permits reclaimed, waiters woken by the release notification,
//! auto-extension with loss reporting, `with_permit` under contention, a permits key of
//! another type. Exactly N holders, token-checked release and extend, waiting, bad input, the
//! options a semaphore lacks and another number of permits (`Conflict`) are checked on every
//! backend by `conformance::primitives`.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{calls, until};
use leasehold::internal::{semaphore_permits_key, semaphore_scripts};
use leasehold::{Backoff, Error, LockOptions, Locker, LossReason, TryAcquire};
use leasehold_harness::{Server, ServerOptions};

const LONG: Duration = Duration::from_secs(60);
const HANG_GUARD: Duration = Duration::from_secs(60);

async fn setup(bin: &leasehold_harness::ServerBinary) -> (Server, Locker) {
    let server = Server::start(bin, &ServerOptions::new()).unwrap();
    let client = Locker::connect(&server.url()).await.unwrap();
    (server, client)
}

fn members(server: &Server, name: &str) -> i64 {
    server
        .command(&["ZCARD", &semaphore_permits_key(name)])
        .unwrap()
        .as_integer()
        .unwrap()
}

leasehold_harness::server_test!(async fn permits_are_members_of_a_sorted_set(bin) {
    let (server, client) = setup(&bin).await;
    let sem = client.semaphore("sem:three", 3).unwrap();
    let opts = LockOptions::new(LONG);
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(sem.try_acquire(&opts).await.unwrap().acquired().expect("a free permit"));
    }
    // Each permit is a member of the server's set, under its own token.
    assert_eq!(members(&server, "sem:three"), 3);
    for g in &held {
        let score = server
            .command(&["ZSCORE", &semaphore_permits_key("sem:three"), g.token().expose()])
            .unwrap();
        assert!(score.as_str().is_some(), "{score:?}");
    }
    // A fourth is busy, told when the first permit expires.
    match sem.try_acquire(&opts).await.unwrap() {
        TryAcquire::Busy { remaining } => {
            let r = remaining.expect("the first expiry");
            assert!(r <= LONG && r > LONG / 2, "{r:?}");
        }
        TryAcquire::Acquired(_) => panic!("a fourth holder of three permits"),
    }
    for g in held {
        g.release().await.unwrap();
    }
    // Nothing left behind once every permit is back.
    until("keys removed", || members(&server, "sem:three") == 0).await;
});

leasehold_harness::server_test!(async fn expired_permits_are_reclaimed_and_not_ours_to_release(bin) {
    let (server, client) = setup(&bin).await;
    let sem = client.semaphore("sem:expiry", 1).unwrap();
    let short = sem
        .try_acquire(&LockOptions::new(Duration::from_millis(300)))
        .await
        .unwrap()
        .acquired()
        .unwrap();
    let lease = short.lease().clone();
    let stale = short.detach();
    // The next acquirer waits for the expiry (told by the busy reply) and reclaims the permit.
    let next = tokio::time::timeout(
        HANG_GUARD,
        sem.acquire(&LockOptions::new(LONG).wait(Duration::from_secs(30))),
    )
    .await
    .unwrap()
    .expect("reclaimed after the expiry");
    assert!(!lease.is_held());
    // The expired holder can neither release nor extend the permit it lost.
    assert!(matches!(sem.release(stale.token()).await, Err(Error::NotHeld { .. })));
    assert!(matches!(sem.extend(stale.token(), LONG).await, Err(Error::NotHeld { .. })));
    assert_eq!(members(&server, "sem:expiry"), 1);
    next.release().await.unwrap();
});

leasehold_harness::server_test!(async fn an_expired_but_unreclaimed_permit_is_not_held(bin) {
    let (server, client) = setup(&bin).await;
    let sem = client.semaphore("sem:unreclaimed", 2).unwrap();
    let g = sem
        .try_acquire(&LockOptions::new(Duration::from_millis(200)))
        .await
        .unwrap()
        .acquired()
        .unwrap();
    let token = g.detach().token().clone();
    // Still a member of the set (nobody acquired since), but its expiry has passed.
    until("the permit's expiry passes", || {
        let score = server
            .command(&["ZSCORE", &semaphore_permits_key("sem:unreclaimed"), token.expose()])
            .unwrap();
        let time = server.command(&["TIME"]).unwrap();
        let t = time.as_array().unwrap();
        let now_ms = t[0].as_str().unwrap().parse::<u64>().unwrap() * 1000
            + t[1].as_str().unwrap().parse::<u64>().unwrap() / 1000;
        score
            .as_str()
            .map(|s| s.parse::<f64>().unwrap() < now_ms as f64)
            .unwrap_or(true)
    })
    .await;
    assert_eq!(sem.holders().await.unwrap(), 0);
    assert!(matches!(sem.extend(&token, LONG).await, Err(Error::NotHeld { .. })));
    assert!(matches!(sem.release(&token).await, Err(Error::NotHeld { .. })));
});

leasehold_harness::server_test!(async fn a_waiter_is_woken_by_a_release(bin) {
    let (server, client) = setup(&bin).await;
    for script in semaphore_scripts() {
        assert!(!server.command(&["SCRIPT", "LOAD", &script]).unwrap().is_error());
    }
    let sem = client.semaphore("sem:wake", 1).unwrap();
    let g = sem.try_acquire(&LockOptions::new(LONG)).await.unwrap().acquired().unwrap();
    let before = calls(&server, "evalsha");
    let waiter = {
        let sem = sem.clone();
        tokio::spawn(async move {
            // A 40 s backoff and a 30 s deadline: only the notification can wake it in time.
            let opts = LockOptions::new(LONG)
                .wait(Duration::from_secs(30))
                .backoff(Backoff::constant(Duration::from_secs(40)));
            sem.acquire(&opts).await
        })
    };
    until("the waiter's first attempt", || calls(&server, "evalsha") > before).await;
    g.release().await.unwrap();
    let w = tokio::time::timeout(HANG_GUARD, waiter).await.unwrap().unwrap().expect("woken");
    w.release().await.unwrap();
});

leasehold_harness::server_test!(async fn an_auto_extended_permit_is_kept_and_its_loss_reported(bin) {
    let (server, client) = setup(&bin).await;
    let sem = client.semaphore("sem:renewed", 2).unwrap();
    let opts = LockOptions::new(Duration::from_secs(1)).auto_extend(true);
    let g = sem.try_acquire(&opts).await.unwrap().acquired().unwrap();
    let stats = client.as_redis().unwrap().renewal_stats();
    until("renewed past three TTLs", || stats.renewals() >= 4).await;
    assert!(g.is_held());
    assert_eq!(sem.holders().await.unwrap(), 1);
    // Taken away from outside: the next renewal finds no permit and reports the loss.
    server
        .command(&["ZREM", &semaphore_permits_key("sem:renewed"), g.token().expose()])
        .unwrap();
    tokio::time::timeout(HANG_GUARD, g.lost()).await.expect("loss reported");
    assert_eq!(g.loss_reason(), Some(LossReason::NotHeld));
    assert!(matches!(g.release().await, Err(Error::NotHeld { .. })));
});

leasehold_harness::server_test!(async fn with_permit_never_admits_more_than_n(bin) {
    let (server, client) = setup(&bin).await;
    let sem = client.semaphore("sem:with", 3).unwrap();
    let inside = Arc::new(AtomicUsize::new(0));
    let max = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (sem, inside, max) = (sem.clone(), inside.clone(), max.clone());
        tasks.push(tokio::spawn(async move {
            let opts = LockOptions::new(LONG).wait(LONG).backoff(Backoff::new(
                Duration::from_millis(1),
                Duration::from_millis(20),
            ));
            for _ in 0..5 {
                sem.with_permit(&opts, |_| async {
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    max.fetch_max(now, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                })
                .await
                .unwrap();
            }
        }));
    }
    for t in tasks {
        tokio::time::timeout(HANG_GUARD, t).await.unwrap().unwrap();
    }
    let max = max.load(Ordering::SeqCst);
    assert!((1..=3).contains(&max), "{max} inside at once");
    assert_eq!(members(&server, "sem:with"), 0);
});

leasehold_harness::server_test!(async fn a_permits_key_of_another_type_is_the_servers_error(bin) {
    let (server, client) = setup(&bin).await;
    // A name whose permits key holds something else: the server's WRONGTYPE, not a panic.
    server.command(&["SET", &semaphore_permits_key("taken"), "x"]).unwrap();
    let err = client.semaphore("taken", 2).unwrap().try_acquire(&LockOptions::new(LONG)).await.unwrap_err();
    assert!(err.to_string().contains("WRONGTYPE"), "{err}");
});
