//! The single-node lock against every server of the matrix: what is Redis's own (strategies,
//! the key and its TTL, expiry, late replies). Exclusion, token-checked release and extend,
//! `with_lock`'s release whatever the work does, and bad keys are checked on every backend by
//! `conformance` (its Redis standalone subjects run on the same servers).

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::*;
use leasehold::redis::{ExtendStrategy, RedisClient, RedisOptions, ReleaseStrategy, ServerKind};
use leasehold::{Error, LockOptions, LockToken, Locker, TryAcquire};
use leasehold_harness::{Flavor, Server, ServerOptions};

const LONG: Duration = Duration::from_secs(60);

leasehold_harness::server_test!(async fn detects_the_server_and_picks_the_fastest_strategy(bin) {
    let (_server, client) = start(&bin).await;
    let redis = client.as_redis().expect("a Redis client");
    let info = redis.server();
    assert_eq!(info.version, bin.version.to_string(), "{info:?}");
    match bin.flavor().unwrap() {
        Flavor::Redis7 => {
            assert_eq!(info.kind, ServerKind::Redis);
            assert!(!info.has_delex && !info.has_delifeq && !info.has_set_ifeq, "{info:?}");
            assert_eq!(redis.release_strategy(), ReleaseStrategy::Lua);
            assert_eq!(redis.extend_strategy(), ExtendStrategy::Lua);
        }
        Flavor::Redis8 => {
            assert_eq!(info.kind, ServerKind::Redis);
            assert!(info.has_delex && info.has_set_ifeq, "{info:?}");
            assert_eq!(redis.release_strategy(), ReleaseStrategy::DelEx);
            assert_eq!(redis.extend_strategy(), ExtendStrategy::SetIfEq);
        }
        Flavor::Valkey9 => {
            // Valkey reports redis_version:7.2.4 too; the kind must still be Valkey.
            assert_eq!(info.kind, ServerKind::Valkey);
            assert!(info.has_delifeq && info.has_set_ifeq && !info.has_delex, "{info:?}");
            assert_eq!(redis.release_strategy(), ReleaseStrategy::DelIfEq);
            assert_eq!(redis.extend_strategy(), ExtendStrategy::SetIfEq);
        }
    }
});

// The seed's expiry bug: A's lease runs out while it works, B takes the lock, A "releases".
// With a plain DEL, A deletes B's lock and C gets in beside B (two holders). With the token
// check, A's release is refused and C is kept out.
leasehold_harness::server_test!(async fn expiry_bug_plain_del_vs_token_release(bin) {
    let (server, client) = start(&bin).await;
    let mut conn = client.as_redis().unwrap().connection();
    for safe in [false, true] {
        let a = client
            .try_acquire("pay", &LockOptions::new(Duration::from_millis(50)))
            .await
            .unwrap()
            .acquired()
            .unwrap();
        until_absent(&server, "pay", GENEROUS).await; // A's lease really expired
        let b = client.try_acquire("pay", &LockOptions::new(LONG)).await.unwrap().acquired().unwrap();
        if safe {
            assert!(client.release("pay", a.token()).await.unwrap_err().is_not_held());
            let _ = a.detach();
        } else {
            let _: i64 = redis::cmd("DEL").arg("pay").query_async(&mut conn).await.unwrap();
            let _ = a.detach();
        }
        let c = client.try_acquire("pay", &LockOptions::new(LONG)).await.unwrap();
        let b_holds = get(&server, "pay").as_deref() == Some(b.token().expose());
        if safe {
            assert!(!c.is_acquired(), "token release: C must be refused");
            assert!(b_holds, "token release: B keeps its lock");
            b.release().await.unwrap();
        } else {
            assert!(c.is_acquired(), "plain DEL: C gets in beside B (the bug)");
            assert!(!b_holds, "plain DEL: B lost its lock");
            assert!(b.release().await.unwrap_err().is_not_held());
            c.acquired().unwrap().release().await.unwrap();
        }
    }
});

leasehold_harness::server_test!(async fn extend_only_while_held(bin) {
    let (server, client) = start(&bin).await;
    let g = client
        .try_acquire("e", &LockOptions::new(Duration::from_secs(2)))
        .await
        .unwrap()
        .acquired()
        .unwrap();
    assert!(pttl(&server, "e") <= 2000);
    g.extend(LONG).await.expect("holder extends");
    assert!(pttl(&server, "e") > 2000, "TTL was not reset");
    let before = g.valid_until();
    assert!(before > std::time::Instant::now() + Duration::from_secs(30));
    // A stranger cannot extend, and its attempt leaves the key alone.
    let stranger = LockToken::new("stranger").unwrap();
    assert!(client.extend("e", &stranger, Duration::from_millis(50)).await.unwrap_err().is_not_held());
    assert!(pttl(&server, "e") > 2000);
    assert_eq!(get(&server, "e").as_deref(), Some(g.token().expose()));
    // Once the key is gone, extending fails and the guard knows it is not held.
    server.command(&["DEL", "e"]).unwrap();
    assert!(g.extend(LONG).await.unwrap_err().is_not_held());
    assert!(!g.is_held());
    assert_eq!(pttl(&server, "e"), -2, "extend must not recreate the key");
    assert!(g.release().await.unwrap_err().is_not_held());
});

// The Lua path works on every server (it is the only one on Redis 7).
leasehold_harness::server_test!(async fn forced_lua_strategies(bin) {
    let opts = RedisOptions::new()
        .release_strategy(ReleaseStrategy::Lua)
        .extend_strategy(ExtendStrategy::Lua);
    let (server, client) = start_with(&bin, opts).await;
    assert_eq!(client.as_redis().unwrap().release_strategy(), ReleaseStrategy::Lua);
    let g = client.try_acquire("l", &LockOptions::new(Duration::from_secs(2))).await.unwrap().acquired().unwrap();
    g.extend(LONG).await.unwrap();
    assert!(pttl(&server, "l") > 2000);
    assert!(client.release("l", &LockToken::new("nope").unwrap()).await.unwrap_err().is_not_held());
    g.release().await.unwrap();
    assert_eq!(get(&server, "l"), None);
});

// Forcing a strategy the server lacks is refused when connecting, not at the first release.
leasehold_harness::server_test!(async fn forced_missing_strategy_is_refused(bin) {
    let server = leasehold_harness::Server::start(&bin, &leasehold_harness::ServerOptions::new()).unwrap();
    for (strategy, offered) in [
        (ReleaseStrategy::DelEx, bin.flavor() == Some(Flavor::Redis8)),
        (ReleaseStrategy::DelIfEq, bin.flavor() == Some(Flavor::Valkey9)),
    ] {
        let r = RedisClient::connect_with(&server.url(), RedisOptions::new().release_strategy(strategy)).await;
        match r {
            Ok(c) => {
                assert!(offered, "{strategy:?} accepted on {}", bin.label());
                assert_eq!(c.release_strategy(), strategy);
            }
            Err(e) => {
                assert!(!offered, "{strategy:?} refused on {}: {e}", bin.label());
                assert!(matches!(e, Error::InvalidArgument { .. }), "{e:?}");
            }
        }
    }
});

async fn never_overlap(bin: &leasehold_harness::ServerBinary, tasks: usize) {
    let (_server, client) = start(bin).await;
    let inside = Arc::new(AtomicUsize::new(0));
    let max_inside = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let mut handles = Vec::new();
    for _ in 0..tasks {
        let (client, inside, max_inside, done) = (
            client.clone(),
            inside.clone(),
            max_inside.clone(),
            done.clone(),
        );
        handles.push(tokio::spawn(async move {
            let opts = LockOptions::new(LONG).wait(Duration::from_secs(120));
            client
                .with_lock("shared", &opts, |_lease| async {
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    max_inside.fetch_max(now, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    done.fetch_add(1, Ordering::SeqCst);
                })
                .await
                .expect("with_lock");
        }));
    }
    for h in handles {
        h.await.unwrap();
    }
    assert_eq!(done.load(Ordering::SeqCst), tasks);
    assert_eq!(
        max_inside.load(Ordering::SeqCst),
        1,
        "two tasks inside at once"
    );
}

leasehold_harness::server_test!(async fn with_lock_5_tasks_never_overlap(bin) {
    never_overlap(&bin, 5).await;
});

leasehold_harness::server_test!(async fn with_lock_50_tasks_never_overlap(bin) {
    never_overlap(&bin, 50).await;
});

leasehold_harness::server_test!(async fn dropped_guard_releases_in_background(bin) {
    let (server, client) = start(&bin).await;
    let g = client.try_acquire("d", &LockOptions::new(LONG)).await.unwrap().acquired().unwrap();
    assert!(g.is_held());
    drop(g);
    until_absent(&server, "d", GENEROUS).await;
});

leasehold_harness::server_test!(async fn waiter_gets_the_lock_of_a_crashed_holder(bin) {
    let (server, client) = start(&bin).await;
    // The holder "crashes": it never releases; only its TTL frees the key.
    let holder = client
        .try_acquire("crash", &LockOptions::new(Duration::from_millis(300)))
        .await
        .unwrap()
        .acquired()
        .unwrap();
    let _ = holder.detach();
    // Fencing also reports the remaining lease when busy.
    match client.try_acquire("crash", &LockOptions::new(LONG).fencing(true)).await.unwrap() {
        TryAcquire::Busy { remaining } => assert!(remaining.unwrap() <= Duration::from_millis(300)),
        TryAcquire::Acquired(_) => {} // the machine was slow enough for the lease to expire: fine
    }
    let g = client
        .acquire("crash", &LockOptions::new(LONG).wait(Duration::from_secs(60)))
        .await
        .expect("waiter acquires after the TTL");
    assert_eq!(get(&server, "crash").as_deref(), Some(g.token().expose()));
    g.release().await.unwrap();
});

leasehold_harness::server_test!(async fn waiting_gives_up_at_the_deadline(bin) {
    let (_server, client) = start(&bin).await;
    let g = client.try_acquire("busy", &LockOptions::new(LONG)).await.unwrap().acquired().unwrap();
    let err = client
        .acquire("busy", &LockOptions::new(LONG).wait(Duration::from_millis(100)))
        .await
        .unwrap_err();
    match err {
        Error::NotAcquired { attempts, .. } => assert!(attempts >= 2, "it retried"),
        other => panic!("{other:?}"),
    }
    let once = client.acquire("busy", &LockOptions::new(LONG)).await.unwrap_err();
    assert!(matches!(once, Error::NotAcquired { attempts: 1, .. }), "{once:?}");
    g.release().await.unwrap();
});

leasehold_harness::server_test!(async fn inspect_reports_holder_ttl_and_counter(bin) {
    let (_server, client) = start(&bin).await;
    let empty = client.inspect("i").await.unwrap();
    assert_eq!((empty.holder, empty.ttl, empty.fencing_counter), (None, None, None));
    let g = client.try_acquire("i", &LockOptions::new(LONG).fencing(true)).await.unwrap().acquired().unwrap();
    let s = client.inspect("i").await.unwrap();
    assert_eq!(s.holder.as_deref(), Some(g.token().expose()));
    assert!(s.ttl.unwrap() <= LONG && s.ttl.unwrap() > Duration::from_secs(30));
    assert_eq!(s.fencing_counter, Some(1));
    assert_eq!(g.fencing_token(), Some(1));
    g.release().await.unwrap();
});

// A reply that comes after the lease's validity is not a lock: the server already applied the
// SET (and may have expired it: someone else may hold the key now), so the guard would never have
// been valid for a moment. try_acquire says so and gives the key back; a waiting acquire keeps
// trying. The replies are held back by a relay in front of the real server.
leasehold_harness::server_test!(async fn a_grant_that_arrives_after_its_validity_is_not_a_lock(bin) {
    let server = Server::start(&bin, &ServerOptions::new()).unwrap();
    let link = leasehold_harness::SlowLink::start(server.addr()).unwrap();
    let client = Locker::connect(&link.url()).await.unwrap();
    let ttl = Duration::from_millis(100);
    link.set_reply_delay(Duration::from_millis(300));
    let err = client.try_acquire("late", &LockOptions::new(ttl)).await.map(|_| ()).unwrap_err();
    let Error::ExpiredOnArrival { elapsed, .. } = &err else { panic!("{err:?}") };
    assert!(*elapsed >= Duration::from_millis(300), "{err}");
    // Every attempt of a waiting acquire arrives late too: none is handed out.
    let err = client
        .acquire("late", &LockOptions::new(ttl).wait(Duration::from_millis(700)))
        .await
        .map(|_| ())
        .unwrap_err();
    assert!(matches!(err, Error::NotAcquired { .. }), "{err:?}");
    // With prompt replies the same client locks as usual, and the key holds its token.
    link.set_reply_delay(Duration::ZERO);
    let g = client.acquire("late", &LockOptions::new(LONG).wait(Duration::from_secs(10))).await.unwrap();
    assert_eq!(get(&server, "late").as_deref(), Some(g.token().expose()));
    g.release().await.unwrap();
});
