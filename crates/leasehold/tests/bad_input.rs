//! Bad input and hostile conditions: a clear typed error, no panic, no hang, nothing lost.

use crate::common;

use std::time::Duration;

use common::*;
use leasehold::redis::{ExtendStrategy, RedisClient, RedisOptions, ReleaseStrategy};
use leasehold::{ClientOptions, Error, LockOptions, LockToken, Locker};
use leasehold_harness::{Server, ServerOptions, SilentServer};

const LONG: Duration = Duration::from_secs(60);
/// Only guards against a hang; the library's own bounds are far below it.
const HANG_GUARD: Duration = Duration::from_secs(60);

// Finding U4 of the 2026-12-02 review: a lock named `{jobs}:leader` was overwritten (with no
// TTL) by an election named `jobs`, and one named `{x}:minhold` by a `min_hold` lock on `x`.
// Names a primitive derives are refused before any round trip; names without a hash tag never
// are (their derived keys are `{name}:...`).
leasehold_harness::server_test!(async fn names_a_primitive_derives_are_refused(bin) {
    let (server, client) = start(&bin).await;
    let opts = LockOptions::new(LONG);
    // The overwrite the refusal prevents: an election on `jobs` writes `{jobs}:leader`.
    let election = client.election("jobs").unwrap();
    let leader = election.campaign("a", &opts).await.unwrap();
    assert!(server.command(&["EXISTS", "{jobs}:leader"]).unwrap().as_integer() == Some(1));
    for key in [
        "{jobs}:leader",
        "{x}:minhold",
        "{x}:fence",
        "{x}:queue",
        "{x}:waiter:0123456789abcdef",
        "a{t}b:limit",
        "{s}:permits",
        "{r}:readers",
        "{r}:writer-waiting",
        "{x}:forced",
        "{x}:history",
    ] {
        for err in [
            client.try_acquire(key, &opts).await.map(|_| ()).unwrap_err(),
            client.release(key, &LockToken::random()).await.unwrap_err(),
            client.semaphore(key, 2).map(|_| ()).unwrap_err(),
            client.rwlock(key).map(|_| ()).unwrap_err(),
            client.election(key).map(|_| ()).unwrap_err(),
        ] {
            assert!(matches!(err, Error::InvalidArgument { what: "key", .. }), "{key}: {err:?}");
        }
    }
    for key in ["jobs:leader", "x:minhold", "{jobs}", "{jobs}:leader:2", "{}:fence"] {
        let guard = client.try_acquire(key, &opts).await.unwrap().acquired();
        guard.expect(key).release().await.unwrap();
    }
    leader.release().await.unwrap();
});

leasehold_harness::server_test!(async fn a_fencing_counter_beyond_exact_numbers_is_refused(bin) {
    let (server, client) = start(&bin).await;
    let counter = leasehold::redis::fence_key("f");
    for floor in [leasehold::MAX_FENCING_NUMBER, u64::MAX] {
        let err = client.raise_fencing_counter("f", floor).await.unwrap_err();
        assert!(matches!(err, Error::InvalidArgument { what: "fencing counter", .. }), "{err:?}");
    }
    assert_eq!(get(&server, &counter), None);
    // Just below: the next number issued is 2^53 itself, exactly.
    let below = leasehold::MAX_FENCING_NUMBER - 1;
    assert_eq!(client.raise_fencing_counter("f", below).await.unwrap(), below);
    let opts = LockOptions::new(LONG).fencing(true);
    let g = client.try_acquire("f", &opts).await.unwrap().acquired().unwrap();
    assert_eq!(g.fencing_token(), Some(leasehold::MAX_FENCING_NUMBER));
    assert_eq!(get(&server, &counter), Some(leasehold::MAX_FENCING_NUMBER.to_string()));
    g.release().await.unwrap();
});

// A counter set past 2^53 from outside (a plain SET: `raise_fencing_counter` refuses it):
// no script issues a number from it (it would be rounded, maybe repeated), and no lock is taken.
leasehold_harness::server_test!(async fn a_fencing_counter_set_past_exact_numbers_issues_none(bin) {
    let (server, client) = start(&bin).await;
    let past = "9007199254740993"; // 2^53 + 1
    for name in ["plain", "fair", "doc", "leader"] {
        assert!(!server.command(&["SET", &leasehold::redis::fence_key(name), past]).unwrap().is_error());
    }
    let opts = LockOptions::new(LONG).fencing(true);
    let exhausted = |r: Result<(), Error>| match r {
        Err(Error::FencingExhausted { .. }) => {}
        other => panic!("expected FencingExhausted, got {other:?}"),
    };
    exhausted(client.try_acquire("plain", &opts).await.map(|_| ()));
    exhausted(client.acquire("plain", &opts.clone().wait(LONG)).await.map(|_| ()));
    exhausted(client.try_acquire("fair", &opts.clone().fair(true)).await.map(|_| ()));
    exhausted(client.acquire("fair", &opts.clone().fair(true).wait(LONG)).await.map(|_| ()));
    let rw = client.rwlock("doc").unwrap();
    exhausted(rw.try_write(&opts).await.map(|_| ()));
    let election = client.election("leader").unwrap();
    exhausted(election.campaign("me", &LockOptions::new(LONG)).await.map(|_| ()));
    for name in ["plain", "fair", "doc", "leader"] {
        assert_eq!(get(&server, name), None, "{name}: the lock was not taken");
        assert_eq!(get(&server, &leasehold::redis::fence_key(name)).as_deref(), Some(past), "{name}");
    }
    assert_eq!(server.command(&["EXISTS", &leasehold::redis::fair_queue_key("fair")]).unwrap().as_integer(), Some(0));
    // Without fencing the same locks still work.
    let plain = client.try_acquire("plain", &LockOptions::new(LONG)).await.unwrap().acquired().unwrap();
    plain.release().await.unwrap();
    let writer = rw.try_write(&LockOptions::new(LONG)).await.unwrap().acquired().unwrap();
    writer.release().await.unwrap();
});

leasehold_harness::server_test!(async fn bad_ttls_are_rejected_and_nothing_is_written(bin) {
    let (server, client) = start(&bin).await;
    for ttl in [Duration::ZERO, Duration::from_micros(999), Duration::from_secs(8 * 24 * 3600), Duration::MAX] {
        let err = client.try_acquire("t", &LockOptions::new(ttl)).await.map(|_| ()).unwrap_err();
        assert!(matches!(err, Error::InvalidArgument { what: "ttl", .. }), "{ttl:?}: {err:?}");
    }
    assert_eq!(get(&server, "t"), None);
    let g = client.try_acquire("t", &LockOptions::new(LONG)).await.unwrap().acquired().unwrap();
    let err = g.extend(Duration::ZERO).await.unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { what: "ttl", .. }), "{err:?}");
    assert!(pttl(&server, "t") > 30_000, "a refused extend changed the TTL");
    g.release().await.unwrap();
});

#[tokio::test]
async fn malformed_urls_are_invalid_arguments() {
    for url in [
        "",
        "not a url",
        "http://127.0.0.1:6379/",
        "redis://127.0.0.1:99999/",
        "redis://[::1/",
    ] {
        let err = RedisClient::connect(url).await.unwrap_err();
        assert!(
            matches!(err, Error::InvalidArgument { what: "url", .. }),
            "{url:?}: {err:?}"
        );
    }
}

#[tokio::test]
async fn unreachable_server_fails_fast_with_a_connection_error() {
    // A port nobody listens on (and nobody else can take meanwhile).
    let closed = leasehold_harness::ClosedPort::new();
    let url = closed.redis_url();
    let result = tokio::time::timeout(HANG_GUARD, RedisClient::connect(&url))
        .await
        .expect("hung");
    let err = result.unwrap_err();
    assert!(
        matches!(
            err,
            Error::Connection {
                ambiguous: false,
                ..
            }
        ),
        "{err:?}"
    );
}

#[tokio::test]
async fn server_that_never_answers_fails_within_the_connect_timeout() {
    let silent = SilentServer::start().unwrap();
    let opts = ClientOptions::new().connect_timeout(Duration::from_millis(500));
    let result = tokio::time::timeout(HANG_GUARD, RedisClient::connect_with(&silent.url(), opts))
        .await
        .expect("connect hung past the guard");
    let err = result.unwrap_err();
    assert!(matches!(err, Error::Connection { .. }), "{err:?}");
    assert!(
        silent.accepted() >= 1,
        "the silent server never saw the connection"
    );
}

// A server that stops answering after we connected (SIGSTOP): the release reports a timeout,
// flagged ambiguous (the server may yet apply it), and the lock is intact after it resumes.
leasehold_harness::server_test!(async fn stalled_server_gives_an_ambiguous_timeout(bin) {
    let server = Server::start(&bin, &ServerOptions::new()).unwrap();
    let opts = ClientOptions::new().response_timeout(Duration::from_millis(300));
    let client = Locker::connect_with(&server.url(), opts).await.unwrap();
    let g = client.try_acquire("s", &LockOptions::new(LONG)).await.unwrap().acquired().unwrap();
    server.pause().unwrap();
    let result = tokio::time::timeout(HANG_GUARD, client.try_acquire("other", &LockOptions::new(LONG))).await.expect("hung");
    server.resume().unwrap();
    let err = result.map(|_| ()).unwrap_err();
    assert!(err.is_ambiguous(), "{err:?}");
    // The abandoned acquisition is cleaned up in the background: "other" ends up free.
    until_absent(&server, "other", GENEROUS).await;
    g.release().await.unwrap();
});

leasehold_harness::server_test!(async fn wrong_password_is_an_authentication_error(bin) {
    let server = Server::start(&bin, &ServerOptions::new().requirepass("s3cret")).unwrap();
    let port = server.port();
    for url in [format!("redis://:wrong@127.0.0.1:{port}/"), format!("redis://127.0.0.1:{port}/")] {
        let result = tokio::time::timeout(HANG_GUARD, RedisClient::connect(&url)).await.expect("hung");
        let err = result.unwrap_err();
        assert!(matches!(err, Error::Authentication { .. }), "{url}: {err:?}");
    }
    let ok = Locker::connect(&format!("redis://:s3cret@127.0.0.1:{port}/")).await.unwrap();
    let g = ok.try_acquire("p", &LockOptions::new(LONG)).await.unwrap().acquired().unwrap();
    g.release().await.unwrap();
});

// An ACL user given in the URL. Redis 7+ users get no pub/sub channels by default: locking must
// still work (release notifications are then off and waiters poll); with channel rights, they
// are on.
leasehold_harness::server_test!(async fn acl_user_in_the_url(bin) {
    let server = Server::start(&bin, &ServerOptions::new()).unwrap();
    for (user, channels, notifies) in [("locker", "resetchannels", false), ("notifier", "&*", true)] {
        let reply = server
            .command(&["ACL", "SETUSER", user, "on", ">pw", "~*", channels, "+@all"])
            .unwrap();
        assert!(reply.is_ok(), "{reply:?}");
        let url = format!("redis://{user}:pw@127.0.0.1:{}/", server.port());
        let client = Locker::connect(&url).await.unwrap();
        assert_eq!(client.as_redis().unwrap().server().can_publish, notifies, "{user}");
        let g = client.try_acquire("acl", &LockOptions::new(LONG)).await.unwrap().acquired().unwrap();
        g.release().await.unwrap();
        let g = client.try_acquire("acl", &LockOptions::new(LONG)).await.unwrap().acquired().unwrap();
        let waited = client
            .acquire("acl", &LockOptions::new(LONG).wait(Duration::from_millis(50)))
            .await
            .unwrap_err();
        assert!(matches!(waited, Error::NotAcquired { .. }), "{waited:?}");
        g.release().await.unwrap();
        assert_eq!(get(&server, "acl"), None);
        let err = RedisClient::connect(&format!("redis://{user}:nope@127.0.0.1:{}/", server.port()))
            .await
            .unwrap_err();
        assert!(matches!(err, Error::Authentication { .. }), "{err:?}");
    }
});

// A key that holds a hash is not a lock: acquiring reports busy (the name is taken), releasing,
// extending and inspecting report the server's type error; the hash is untouched.
leasehold_harness::server_test!(async fn key_holding_a_hash(bin) {
    let (server, client) = start(&bin).await;
    server.command(&["HSET", "h", "field", "value"]).unwrap();
    let busy = client.try_acquire("h", &LockOptions::new(LONG)).await.unwrap();
    assert!(!busy.is_acquired());
    let token = LockToken::random();
    for err in [
        client.release("h", &token).await.unwrap_err(),
        client.extend("h", &token, LONG).await.unwrap_err(),
        client.inspect("h").await.map(|_| ()).unwrap_err(),
    ] {
        assert!(matches!(err, Error::Server { .. }), "{err:?}");
    }
    let v = server.command(&["HGET", "h", "field"]).unwrap();
    assert_eq!(v.as_bytes(), Some(&b"value"[..]));
});

// The server crashes and comes back empty between acquire and release: the release reconnects
// and reports that the lock is not held.
leasehold_harness::server_test!(async fn server_restarted_between_acquire_and_release(bin) {
    let (mut server, client) = start(&bin).await;
    let g = client.try_acquire("r", &LockOptions::new(LONG)).await.unwrap().acquired().unwrap();
    server.restart().unwrap();
    let err = tokio::time::timeout(HANG_GUARD, g.release()).await.expect("hung").unwrap_err();
    assert!(err.is_not_held(), "{err:?}");
    // And the client is usable again.
    let again = client.try_acquire("r", &LockOptions::new(LONG)).await.unwrap().acquired().unwrap();
    again.release().await.unwrap();
});

// SCRIPT FLUSH between calls: the Lua strategies reload their scripts transparently.
leasehold_harness::server_test!(async fn script_flush_is_transparent(bin) {
    let opts = RedisOptions::new().release_strategy(ReleaseStrategy::Lua).extend_strategy(ExtendStrategy::Lua);
    let (server, client) = start_with(&bin, opts).await;
    for fencing in [false, true] {
        let lock = LockOptions::new(LONG).fencing(fencing);
        let g = client.try_acquire("f", &lock).await.unwrap().acquired().unwrap();
        server.command(&["SCRIPT", "FLUSH"]).unwrap();
        g.extend(LONG).await.unwrap();
        server.command(&["SCRIPT", "FLUSH"]).unwrap();
        g.release().await.unwrap();
        server.command(&["SCRIPT", "FLUSH"]).unwrap();
        assert_eq!(get(&server, "f"), None);
    }
});

// The token never appears whole in Debug output (it is a capability).
leasehold_harness::server_test!(async fn guard_debug_does_not_leak_the_token(bin) {
    let (_server, client) = start(&bin).await;
    let g = client.try_acquire("dbg", &LockOptions::new(LONG)).await.unwrap().acquired().unwrap();
    let shown = format!("{g:?} {:?} {}", g.lease(), g.token());
    assert!(!shown.contains(g.token().expose()), "{shown}");
    g.release().await.unwrap();
});
