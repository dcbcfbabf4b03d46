//! Waiters woken by the release notification, not by polling alone.

use crate::common;

use common::calls;

use std::time::Duration;

use leasehold::redis::{RedisClient, RedisOptions};
use leasehold::{Backoff, Error, LockOptions, Locker};
use leasehold_harness::Server;

const LONG: Duration = Duration::from_secs(60);
const HANG_GUARD: Duration = Duration::from_secs(60);

/// The holder takes the lock for a minute; a waiter with a 10 s backoff and a 5 s deadline makes
/// its first attempt (observed on the server: the waiting attempt is the acquire script); then
/// the holder releases. Only a notification can wake the waiter before its deadline.
async fn waiter_after_release(server: &Server, notify: bool) -> Result<(), Error> {
    common::preload_scripts(server); // so the first counted EVALSHA is the real attempt
    let options = RedisOptions::new().notify_waiters(notify);
    let holder = RedisClient::connect_with(&server.url(), options.clone())
        .await
        .map(Locker::from)
        .unwrap();
    let waiter = RedisClient::connect_with(&server.url(), options)
        .await
        .map(Locker::from)
        .unwrap();
    let g = holder
        .try_acquire("job", &LockOptions::new(LONG))
        .await
        .unwrap()
        .acquired()
        .unwrap();
    let attempts_before = calls(server, "evalsha") + calls(server, "eval");
    let task = tokio::spawn(async move {
        let opts = LockOptions::new(LONG)
            .wait(Duration::from_secs(5))
            .backoff(Backoff::constant(Duration::from_secs(10)));
        waiter.acquire("job", &opts).await.map(|g| g.detach())
    });
    tokio::time::timeout(HANG_GUARD, async {
        while calls(server, "evalsha") + calls(server, "eval") == attempts_before {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the waiter never attempted");
    g.release().await.unwrap();
    let got = tokio::time::timeout(HANG_GUARD, task)
        .await
        .expect("hung")
        .unwrap();
    got.map(|lease| {
        assert_eq!(
            common::get(server, "job").as_deref(),
            Some(lease.token().expose())
        );
    })
}

leasehold_harness::server_test!(async fn release_notification_wakes_the_waiter(bin) {
    let server = Server::start(&bin, &leasehold_harness::ServerOptions::new()).unwrap();
    waiter_after_release(&server, true).await.expect("woken by the release notification");
});

// The same with notifications off: the waiter sleeps to its deadline and gives up, which is
// what proves the test above was won by the notification and not by a poll.
leasehold_harness::server_test!(async fn without_notifications_the_same_waiter_times_out(bin) {
    let server = Server::start(&bin, &leasehold_harness::ServerOptions::new()).unwrap();
    let err = waiter_after_release(&server, false).await.unwrap_err();
    assert!(matches!(err, Error::NotAcquired { attempts: 1, .. }), "{err:?}");
});

// A free lock costs a waiting acquire what it costs try_acquire: one SET, no subscription, no
// script. (It used to subscribe before its first attempt: a SUBSCRIBE round trip and an
// UNSUBSCRIBE on every uncontended call.)
leasehold_harness::server_test!(async fn a_free_lock_is_taken_without_subscribing(bin) {
    let server = Server::start(&bin, &leasehold_harness::ServerOptions::new()).unwrap();
    let client = Locker::connect(&server.url()).await.unwrap();
    let opts = LockOptions::new(LONG).wait(Duration::from_secs(5));
    client.acquire("warm", &opts).await.unwrap().release().await.unwrap();
    let (set, sub, scripts) = (calls(&server, "set"), calls(&server, "subscribe"), calls(&server, "evalsha") + calls(&server, "eval"));
    let g = client.acquire("free", &opts).await.unwrap();
    assert_eq!(calls(&server, "set"), set + 1, "one SET");
    assert_eq!(calls(&server, "subscribe"), sub, "no subscription for a free lock");
    assert_eq!(calls(&server, "evalsha") + calls(&server, "eval"), scripts, "no acquire script");
    g.release().await.unwrap();
});

// The wake-up a busy first attempt cannot miss: the waiter subscribes only after that attempt,
// so a release between the two would go unannounced; what closes the gap is another attempt
// once the subscription is confirmed. Observed on the server, with no release at all: the
// waiter's first attempt (SET), its SUBSCRIBE, then an attempt (the acquire script) that the
// server runs after the SUBSCRIBE. Without that attempt, the waiter would sleep through its
// 10 s backoff to the 5 s deadline and the script count would never move.
leasehold_harness::server_test!(async fn a_busy_waiter_attempts_again_once_subscribed(bin) {
    let server = Server::start(&bin, &leasehold_harness::ServerOptions::new()).unwrap();
    common::preload_scripts(&server);
    let holder = Locker::connect(&server.url()).await.unwrap();
    let waiter = Locker::connect(&server.url()).await.unwrap();
    let g = holder.try_acquire("busy", &LockOptions::new(LONG)).await.unwrap().acquired().unwrap();
    let (sub, scripts) = (calls(&server, "subscribe"), calls(&server, "evalsha") + calls(&server, "eval"));
    let task = tokio::spawn(async move {
        let opts = LockOptions::new(LONG)
            .wait(Duration::from_secs(5))
            .backoff(Backoff::constant(Duration::from_secs(10)));
        waiter.acquire("busy", &opts).await.map(|g| g.detach())
    });
    tokio::time::timeout(HANG_GUARD, async {
        while calls(&server, "evalsha") + calls(&server, "eval") == scripts {
            assert!(!task.is_finished(), "the waiter gave up without attempting after subscribing");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("no attempt after subscribing");
    // Read after the attempt was seen: the SUBSCRIBE had already run.
    assert_eq!(calls(&server, "subscribe"), sub + 1, "subscribed before that attempt");
    g.release().await.unwrap();
    let lease = tokio::time::timeout(HANG_GUARD, task).await.expect("hung").unwrap().expect("woken by the release");
    assert_eq!(common::get(&server, "busy").as_deref(), Some(lease.token().expose()));
});

// One release wakes one of a client's waiters for a plain lock, not all of them: ten waiters
// each take the lock in turn and release it at once, and the whole chain costs about one
// attempt per waiter (each attempt runs one SET, plain or inside the acquire script; releases
// run none: counted on the server). Waking them all at every
// release would cost 10 + 9 + ... + 1 = 55. And no release is lost: their backoff (60 s) is
// longer than their wait (30 s), so a release that woke nobody would leave the rest to time out.
leasehold_harness::server_test!(async fn one_waiter_is_woken_per_release(bin) {
    const WAITERS: u64 = 10;
    let server = Server::start(&bin, &leasehold_harness::ServerOptions::new()).unwrap();
    common::preload_scripts(&server);
    let holder = Locker::connect(&server.url()).await.unwrap();
    let client = Locker::connect(&server.url()).await.unwrap();
    let g = holder.try_acquire("chain", &LockOptions::new(LONG)).await.unwrap().acquired().unwrap();
    let scripts = || calls(&server, "evalsha") + calls(&server, "eval");
    let sets = || calls(&server, "set");
    let before = scripts();
    let mut tasks = Vec::new();
    for _ in 0..WAITERS {
        let client = client.clone();
        tasks.push(tokio::spawn(async move {
            let opts = LockOptions::new(LONG).wait(Duration::from_secs(30)).backoff(Backoff::constant(Duration::from_secs(60)));
            client.acquire("chain", &opts).await?.release().await
        }));
    }
    // Every waiter has made its attempt after subscribing (the script): all are waiting.
    tokio::time::timeout(HANG_GUARD, async {
        while scripts() < before + WAITERS {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the waiters never attempted");
    let asleep = sets();
    let published = calls(&server, "publish");
    g.release().await.unwrap();
    for t in tasks {
        tokio::time::timeout(HANG_GUARD, t).await.expect("hung").unwrap().expect("a waiter missed its wake-up");
    }
    let chain = sets() - asleep;
    assert!(chain <= 2 * WAITERS, "{chain} attempts for {WAITERS} handoffs: waiters woken in a herd");
    // The chain ran on the key's invalidations alone: tracking is one-shot, so every release
    // after the first reached the waiters only because the key was read again after each one.
    assert_eq!(calls(&server, "publish"), published, "a plain release published");
});

/// Holds `key` from `holder` and starts `waiter` waiting on it (a 60 s backoff, `wait`); returns
/// once the waiter made its attempt after subscribing and tracking the key (the acquire script,
/// counted on the server; the tracking read is answered before that attempt is sent), so from
/// then on only a wake-up can make it attempt again.
async fn tracking_waiter(
    server: &Server,
    holder: &Locker,
    waiter: Locker,
    key: &'static str,
    wait: Duration,
) -> (
    leasehold::LockGuard,
    tokio::task::JoinHandle<Result<leasehold::Lease, Error>>,
) {
    common::preload_scripts(server);
    let g = holder
        .try_acquire(key, &LockOptions::new(LONG))
        .await
        .unwrap()
        .acquired()
        .unwrap();
    let scripts = calls(server, "evalsha") + calls(server, "eval");
    let task = tokio::spawn(async move {
        let opts = LockOptions::new(LONG)
            .wait(wait)
            .backoff(Backoff::constant(Duration::from_secs(60)));
        waiter.acquire(key, &opts).await.map(|g| g.detach())
    });
    tokio::time::timeout(HANG_GUARD, async {
        while calls(server, "evalsha") + calls(server, "eval") == scripts {
            assert!(
                !task.is_finished(),
                "the waiter gave up without attempting after subscribing"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("no attempt after subscribing");
    (g, task)
}

// Where waiters track the key (one server, RESP3), a plain release is its one token-checked
// delete: no PUBLISH, and the server's invalidation of the key wakes the waiter (whose 60 s
// backoff and 30 s wait leave nothing else to wake it).
leasehold_harness::server_test!(async fn a_plain_release_publishes_nothing_and_still_wakes_waiters(bin) {
    let server = Server::start(&bin, &leasehold_harness::ServerOptions::new()).unwrap();
    let holder = Locker::connect(&server.url()).await.unwrap();
    let waiter = Locker::connect(&server.url()).await.unwrap();
    assert!(holder.as_redis().unwrap().server().can_track, "tracking refused on {}", holder.as_redis().unwrap().server());
    let (g, task) = tracking_waiter(&server, &holder, waiter, "tracked", Duration::from_secs(30)).await;
    let published = calls(&server, "publish");
    g.release().await.unwrap();
    let lease = tokio::time::timeout(HANG_GUARD, task).await.expect("hung").unwrap().expect("woken by the invalidation");
    assert_eq!(common::get(&server, "tracked").as_deref(), Some(lease.token().expose()));
    assert_eq!(calls(&server, "publish"), published, "the release published");
});

// An invalidation wakes nobody by itself: the key is read again, and only a key found gone wakes
// a waiter. Three extends of the held lock each invalidate it (and are each followed by a
// read), yet the waiter makes no attempt: it gives up at its deadline with the two attempts it
// made before sleeping. Waking on every invalidation would make it five.
leasehold_harness::server_test!(async fn an_extend_of_the_held_lock_wakes_no_waiter(bin) {
    let server = Server::start(&bin, &leasehold_harness::ServerOptions::new()).unwrap();
    let holder = Locker::connect(&server.url()).await.unwrap();
    let waiter = Locker::connect(&server.url()).await.unwrap();
    let (g, task) = tracking_waiter(&server, &holder, waiter, "extended", Duration::from_secs(10)).await;
    let reads = calls(&server, "pttl");
    for n in 1..=3 {
        g.extend(LONG).await.unwrap();
        // The waiter's client read the key again after the invalidation.
        tokio::time::timeout(HANG_GUARD, async {
            while calls(&server, "pttl") < reads + n {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .expect("no read after the invalidation");
    }
    assert!(!task.is_finished(), "the waiter's deadline came before the extends were seen");
    let err = tokio::time::timeout(HANG_GUARD, task).await.expect("hung").unwrap().unwrap_err();
    assert!(matches!(err, Error::NotAcquired { attempts: 2, .. }), "{err:?}");
    g.release().await.unwrap();
});

// A holder that does not track (`track_waiters(false)`, as a build before tracking) publishes its
// releases, and a tracking waiter is woken by the message as before.
leasehold_harness::server_test!(async fn a_publishing_holder_still_wakes_a_tracking_waiter(bin) {
    let server = Server::start(&bin, &leasehold_harness::ServerOptions::new()).unwrap();
    let holder = RedisClient::connect_with(&server.url(), RedisOptions::new().track_waiters(false)).await.map(Locker::from).unwrap();
    let waiter = Locker::connect(&server.url()).await.unwrap();
    let (g, task) = tracking_waiter(&server, &holder, waiter, "mixed", Duration::from_secs(30)).await;
    let published = calls(&server, "publish");
    g.release().await.unwrap();
    tokio::time::timeout(HANG_GUARD, task).await.expect("hung").unwrap().expect("woken");
    assert_eq!(calls(&server, "publish"), published + 1, "the release published");
});

// Many waiters share one subscriber connection, and release notifications reach all of them.
leasehold_harness::server_test!(async fn waiters_share_one_subscriber_connection(bin) {
    let server = Server::start(&bin, &leasehold_harness::ServerOptions::new()).unwrap();
    let client = Locker::connect(&server.url()).await.unwrap();
    let g = client.try_acquire("shared", &LockOptions::new(LONG)).await.unwrap().acquired().unwrap();
    let mut tasks = Vec::new();
    for _ in 0..20 {
        let client = client.clone();
        tasks.push(tokio::spawn(async move {
            let opts = LockOptions::new(LONG).wait(Duration::from_secs(50)).backoff(Backoff::constant(Duration::from_secs(40)));
            let g = client.acquire("shared", &opts).await.unwrap();
            g.release().await.unwrap();
        }));
    }
    // All 20 waiters subscribed to the key's channel through one connection.
    let channel = leasehold::redis::release_channel("shared");
    tokio::time::timeout(HANG_GUARD, async {
        loop {
            let reply = server.command(&["PUBSUB", "NUMSUB", &channel]).unwrap();
            let n = reply.as_array().and_then(|a| a.get(1)).and_then(|v| v.as_integer()).unwrap_or(0);
            if n >= 1 {
                return n;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .map(|n| assert_eq!(n, 1, "one subscriber connection per client"))
    .expect("nobody subscribed");
    g.release().await.unwrap();
    // Each release wakes the next waiter; with a 40 s backoff only notifications can finish
    // this well within the 50 s wait.
    for t in tasks {
        tokio::time::timeout(HANG_GUARD, t).await.expect("hung").unwrap();
    }
    // The last waiter left: the subscription is dropped again.
    tokio::time::timeout(HANG_GUARD, async {
        loop {
            let reply = server.command(&["PUBSUB", "NUMSUB", &channel]).unwrap();
            if reply.as_array().and_then(|a| a.get(1)).and_then(|v| v.as_integer()) == Some(0) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("subscription not dropped");
});

// A crashed holder (it never releases, so no notification comes): the busy reply carries the
// holder's remaining TTL and the waiter retries when it runs out. Its backoff (5-10 s) is longer
// than its 4 s deadline, so only the TTL-driven retry can get it the lock.
leasehold_harness::server_test!(async fn waiter_retries_when_a_crashed_holders_ttl_runs_out(bin) {
    let server = Server::start(&bin, &leasehold_harness::ServerOptions::new()).unwrap();
    let client = RedisClient::connect_with(&server.url(), RedisOptions::new().notify_waiters(false)).await.map(Locker::from).unwrap();
    let crashed = client
        .try_acquire("orphan", &LockOptions::new(Duration::from_secs(2)))
        .await
        .unwrap()
        .acquired()
        .unwrap();
    let _ = crashed.detach(); // never released: only its TTL frees the key
    let opts = LockOptions::new(LONG)
        .wait(Duration::from_secs(4))
        .backoff(Backoff::constant(Duration::from_secs(10)));
    let g = tokio::time::timeout(HANG_GUARD, client.acquire("orphan", &opts))
        .await
        .expect("hung")
        .expect("retried when the holder's TTL ran out");
    g.release().await.unwrap();
});
