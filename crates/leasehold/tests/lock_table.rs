//! The lock table in plain sight: owner records on every backend, `Locker::list` and
//! `Locker::force_release`, on real servers.
//!
//! Nothing sleeps and hopes: a fair waiter is known queued when the server shows its entry;
//! every timeout is a hang guard.

use crate::common;

use std::time::Duration;

use leasehold::redis::fence_key;
use leasehold::{
    Error, LockEntry, LockKind, LockOptions, Locker, Owner, TryAcquire,
    internal::{rwlock_readers_key, semaphore_permits_key},
};
use leasehold_harness::{Cluster, ClusterOptions, Server, ServerOptions};

const LONG: Duration = Duration::from_secs(60);
const HANG_GUARD: Duration = Duration::from_secs(60);

fn owner(label: &str) -> Owner {
    Owner::this_process().label(label).expect("a valid label")
}

/// Takes `key` with `owner` on `locker`, and checks what `inspect` shows: the owner given, the
/// full value as holder (so release by token keeps working), and no owner for a lock taken
/// without one. Then the token-checked release and extend still work with the longer value.
async fn owner_is_shown(name: &str, locker: &Locker) {
    let me = owner(&format!("owner test on {name}"));
    let key = "table:owner";
    let guard = match locker
        .try_acquire(key, &LockOptions::new(LONG).fencing(true).owner(me.clone()))
        .await
    {
        Ok(TryAcquire::Acquired(g)) => g,
        other => panic!("{name}: {other:?}"),
    };
    let state = locker.inspect(key).await.expect("inspect");
    assert_eq!(state.owner.as_ref(), Some(&me), "{name}: {state:?}");
    assert_eq!(
        state.holder.as_deref(),
        Some(guard.token().expose()),
        "{name}"
    );
    assert_eq!(guard.token().owner().as_ref(), Some(&me), "{name}");
    locker
        .extend(key, guard.token(), LONG)
        .await
        .unwrap_or_else(|e| panic!("{name}: extend with the owner's token: {e}"));
    guard.release().await.expect("release");
    assert_eq!(locker.inspect(key).await.unwrap().holder, None, "{name}");

    let guard = locker
        .acquire(key, &LockOptions::new(LONG))
        .await
        .expect("acquire");
    let state = locker.inspect(key).await.expect("inspect");
    assert_eq!(state.owner, None, "{name}: no owner given, none shown");
    assert!(state.holder.is_some(), "{name}");
    guard.release().await.expect("release");
}

#[tokio::test]
async fn the_owner_is_shown_by_inspect_on_memory_and_file() {
    owner_is_shown("memory", &Locker::connect("memory://table").await.unwrap()).await;
    let dir = tempfile::tempdir().unwrap();
    let url = format!("file://{}", dir.path().display());
    owner_is_shown("file", &Locker::connect(&url).await.unwrap()).await;
}

leasehold_harness::server_test!(async fn the_owner_is_shown_by_inspect_on_redis_and_redlock(bin) {
    let server = Server::start(&bin, &ServerOptions::new()).expect("server starts");
    owner_is_shown("redis", &Locker::connect(&server.url()).await.unwrap()).await;
    // The stored value is the token with the owner record, as the docs say.
    let nodes: Vec<Server> = (0..3)
        .map(|_| Server::start(&bin, &ServerOptions::new()).expect("server starts"))
        .collect();
    let hosts: Vec<String> = nodes.iter().map(|n| n.addr().to_string()).collect();
    let redlock = Locker::connect(&format!("redlock://{}", hosts.join(",")))
        .await
        .unwrap();
    owner_is_shown("redlock", &redlock).await;
    // The Redlock table is a majority view: a lock on 2 of 3 nodes is listed, on 1 it is not.
    let me = owner("redlock");
    let guard = hold(&redlock, "rl:k", &LockOptions::new(LONG).fencing(true).owner(me.clone())).await;
    common::until("every node holds the key", || {
        nodes.iter().all(|n| common::get(n, "rl:k").is_some())
    })
    .await;
    for (deleted, listed) in [(0, true), (1, true), (2, false)] {
        if deleted > 0 {
            nodes[deleted - 1].command(&["DEL", "rl:k"]).unwrap();
        }
        let entries = redlock.list("rl:*").await.unwrap();
        assert_eq!(entries.len(), listed as usize, "{deleted} deleted: {entries:#?}");
        if listed {
            assert_eq!(entries[0].holders[0].token, *guard.token());
            assert_eq!(entries[0].holders[0].owner.as_ref(), Some(&me));
            assert_eq!(entries[0].fencing_counter, guard.fencing_token());
        }
    }
    assert!(matches!(
        redlock.force_release("rl:k", "not on redlock").await,
        Err(Error::Unsupported { .. })
    ));

    // Fair locks and semaphores store the same value.
    let client = Locker::connect(&server.url()).await.unwrap();
    let me = owner("fair");
    let guard = client
        .acquire("table:fair", &LockOptions::new(LONG).fair(true).owner(me.clone()))
        .await
        .unwrap();
    assert_eq!(
        common::get(&server, "table:fair").as_deref(),
        Some(guard.token().expose())
    );
    assert_eq!(client.inspect("table:fair").await.unwrap().owner, Some(me));
});

/// Takes `key` with `options`, waiting as they say.
async fn hold(locker: &Locker, key: &str, options: &LockOptions) -> leasehold::LockGuard {
    locker
        .acquire(key, options)
        .await
        .unwrap_or_else(|e| panic!("acquire {key}: {e}"))
}

/// The entry of `key` in `entries`, exactly one.
fn entry<'a>(entries: &'a [LockEntry], key: &str) -> &'a LockEntry {
    let found: Vec<&LockEntry> = entries.iter().filter(|e| e.key == key).collect();
    assert_eq!(found.len(), 1, "{key}: {entries:#?}");
    found[0]
}

leasehold_harness::server_test!(async fn ls_lists_exactly_the_held_locks(bin) {
    let server = Server::start(&bin, &ServerOptions::new()).expect("server starts");
    let locker = Locker::connect(&server.url()).await.unwrap();
    let me = owner("plain");

    // A plain lock with an owner and fencing; a released one (only its counter is left).
    let plain = hold(&locker, "t:plain", &LockOptions::new(LONG).fencing(true).owner(me.clone())).await;
    let gone = hold(&locker, "t:gone", &LockOptions::new(LONG).fencing(true)).await;
    gone.release().await.unwrap();
    // A fair lock with one waiter, known queued when the server shows its entry.
    let fair = hold(&locker, "t:fair", &LockOptions::new(LONG).fair(true)).await;
    let waiter = {
        let locker = locker.clone();
        tokio::spawn(async move {
            locker
                .acquire("t:fair", &LockOptions::new(LONG).fair(true).wait(LONG))
                .await
        })
    };
    let queue = leasehold::redis::fair_queue_key("t:fair");
    common::until("the waiter is queued", || {
        server
            .command(&["ZCARD", &queue])
            .unwrap()
            .as_integer()
            == Some(1)
    })
    .await;
    // A semaphore with 2 holders of 3 permits; a read lock with 2 readers.
    let semaphore = locker.semaphore("t:sem", 3).unwrap();
    let p1 = semaphore
        .acquire(&LockOptions::new(LONG).owner(owner("permit 1")))
        .await
        .unwrap();
    let p2 = semaphore.acquire(&LockOptions::new(LONG)).await.unwrap();
    let rw = locker.rwlock("t:rw").unwrap();
    let r1 = rw.read(&LockOptions::new(LONG)).await.unwrap();
    let r2 = rw.read(&LockOptions::new(LONG)).await.unwrap();
    // An election's leader.
    let leader = locker
        .election("t:elect")
        .unwrap()
        .campaign("node-1", &LockOptions::new(LONG).owner(owner("leader")))
        .await
        .unwrap();
    // Keys that are not locks: a string, a hash, a string that looks like a token without TTL.
    server.command(&["SET", "t:string", "hello"]).unwrap();
    server.command(&["HSET", "t:hash", "f", "v"]).unwrap();

    let entries = locker.list("*").await.expect("list");
    let keys: Vec<&str> = entries.iter().map(|e| e.key.as_str()).collect();
    assert_eq!(
        keys,
        ["t:elect", "t:fair", "t:plain", "t:rw", "t:sem"],
        "{entries:#?}"
    );

    let e = entry(&entries, "t:elect");
    assert_eq!(e.kind, LockKind::Election);
    assert_eq!(e.holders[0].token, *leader.token());
    assert_eq!(e.holders[0].owner, Some(owner("leader")));
    assert_eq!(e.fencing_counter, leader.fencing_token());

    let e = entry(&entries, "t:plain");
    assert_eq!(e.kind, LockKind::Lock);
    assert_eq!(e.holders.len(), 1);
    assert_eq!(e.holders[0].token, *plain.token());
    assert_eq!(e.holders[0].owner.as_ref(), Some(&me));
    assert_eq!(e.fencing_counter, plain.fencing_token());
    assert!(e.ttl.is_some_and(|t| t <= LONG && t > Duration::ZERO), "{e:?}");

    let e = entry(&entries, "t:fair");
    assert_eq!(e.kind, LockKind::Fair);
    assert_eq!(e.holders[0].token, *fair.token());
    assert_eq!(e.waiters, Some(1));

    let e = entry(&entries, "t:sem");
    assert_eq!(e.kind, LockKind::Permits);
    assert_eq!(e.permits, Some(3));
    let mut tokens: Vec<_> = e.holders.iter().map(|h| h.token.clone()).collect();
    tokens.sort_by(|a, b| a.expose().cmp(b.expose()));
    let mut want = vec![p1.token().clone(), p2.token().clone()];
    want.sort_by(|a, b| a.expose().cmp(b.expose()));
    assert_eq!(tokens, want);
    assert!(e.holders.iter().any(|h| h.owner == Some(owner("permit 1"))));

    let e = entry(&entries, "t:rw");
    assert_eq!(e.kind, LockKind::Read);
    assert_eq!(e.holders.len(), 2);
    assert!(e.holders.iter().all(|h| h.token == *r1.token() || h.token == *r2.token()));

    // The pattern matches lock names, derived keys included.
    let some = locker.list("t:s*").await.unwrap();
    assert_eq!(some.len(), 1, "{some:#?}");
    assert_eq!(some[0].key, "t:sem");
    assert!(locker.list("nothing*").await.unwrap().is_empty());
    // The derived keys are where the layout says (the listing read them).
    assert!(common::get(&server, &fence_key("t:plain")).is_some());
    assert_eq!(
        server.command(&["EXISTS", &semaphore_permits_key("t:sem"), &rwlock_readers_key("t:rw")])
            .unwrap()
            .as_integer(),
        Some(2)
    );

    fair.release().await.unwrap();
    let second = tokio::time::timeout(HANG_GUARD, waiter).await.unwrap().unwrap().unwrap();
    second.release().await.unwrap();
    for g in [plain, p1, p2, r1, r2, leader] {
        g.release().await.unwrap();
    }
    assert!(locker.list("*").await.unwrap().is_empty());
});

leasehold_harness::server_test!(async fn ls_visits_every_master_of_a_cluster(bin) {
    let cluster = Cluster::start(&bin, &ClusterOptions::new()).expect("cluster starts");
    let locker = Locker::connect(&format!("redis-cluster://{}", cluster.nodes()[0].addr()))
        .await
        .expect("connects");
    let mut keys = Vec::new();
    let mut masters = std::collections::BTreeSet::new();
    for i in 0..12 {
        let key = format!("c:{i}");
        masters.insert(cluster.master_index_for_key(&key).unwrap());
        keys.push(key);
    }
    assert!(masters.len() >= 2, "the keys span several masters: {masters:?}");
    let mut guards = Vec::new();
    for key in &keys {
        let options = LockOptions::new(LONG).fencing(true).owner(owner(key));
        guards.push(locker.acquire(key, &options).await.unwrap());
    }
    let entries = locker.list("c:*").await.expect("list");
    let mut want = keys.clone();
    want.sort();
    let got: Vec<String> = entries.iter().map(|e| e.key.clone()).collect();
    assert_eq!(got, want);
    for (guard, key) in guards.iter().zip(&keys) {
        let e = entry(&entries, key);
        assert_eq!(e.holders[0].token, *guard.token());
        assert_eq!(e.holders[0].owner, Some(owner(key)));
        assert_eq!(e.fencing_counter, guard.fencing_token());
    }

    // Forcing on a cluster: the key's master, the counter in its slot.
    let forced = locker.force_release("c:3", "cluster test").await.unwrap();
    assert_eq!(forced.fencing_counter, Some(guards[3].fencing_token().unwrap() + 1));
    assert!(matches!(
        locker.extend("c:3", guards[3].token(), LONG).await,
        Err(Error::NotHeld { .. })
    ));
    assert_eq!(locker.list("c:*").await.unwrap().len(), keys.len() - 1);
});

leasehold_harness::server_test!(async fn ls_without_scan_rights_is_permission_denied(bin) {
    let server = Server::start(&bin, &ServerOptions::new()).expect("server starts");
    server
        .acl_setuser("lister", &["on", ">pw", "~*", "&*", "+@all", "-scan"])
        .expect("ACL SETUSER");
    let url = format!("redis://lister:pw@127.0.0.1:{}/", server.port());
    let locker = Locker::connect(&url).await.expect("connects");
    let guard = hold(&locker, "p:lock", &LockOptions::new(LONG)).await;
    let err = locker.list("*").await.unwrap_err();
    assert!(matches!(err, Error::PermissionDenied { .. }), "{err:?}");
    // The same user lists once it may SCAN.
    server.acl_setuser("lister", &["+scan"]).expect("ACL SETUSER");
    assert_eq!(locker.list("*").await.unwrap().len(), 1);
    guard.release().await.unwrap();
});

/// The keys of a Redis server and their types and values, for "nothing written" checks.
fn snapshot(server: &Server) -> Vec<(String, String, String)> {
    let keys = server.command(&["KEYS", "*"]).unwrap();
    let mut out: Vec<(String, String, String)> = keys
        .as_array()
        .unwrap()
        .iter()
        .map(|k| {
            let k = String::from_utf8_lossy(k.as_bytes().unwrap()).into_owned();
            let kind = server.command(&["TYPE", &k]).unwrap();
            let dump = server.command(&["DUMP", &k]).unwrap();
            (k, format!("{kind:?}"), format!("{dump:?}"))
        })
        .collect();
    out.sort();
    out
}

leasehold_harness::server_test!(async fn force_release_removes_the_lock_and_bumps_the_counter(bin) {
    let server = Server::start(&bin, &ServerOptions::new()).expect("server starts");
    let locker = Locker::connect(&server.url()).await.unwrap();
    let stuck_owner = owner("stuck job");
    let stuck = hold(&locker, "f:lock", &LockOptions::new(LONG).fencing(true).owner(stuck_owner.clone())).await;
    let number = stuck.fencing_token().unwrap();

    let forced = locker.force_release("f:lock", "stuck since the deploy").await.unwrap();
    // The lock is gone; the counter is one above the old holder's number.
    assert_eq!(common::get(&server, "f:lock"), None);
    assert_eq!(forced.fencing_counter, Some(number + 1));
    assert_eq!(forced.previous.token, *stuck.token());
    assert_eq!(forced.previous.owner, Some(stuck_owner.clone()));
    assert_eq!(forced.forced_by.pid(), std::process::id());
    // The old holder can neither extend nor release.
    assert!(matches!(
        locker.extend("f:lock", stuck.token(), LONG).await,
        Err(Error::NotHeld { .. })
    ));
    assert!(matches!(
        locker.release("f:lock", stuck.token()).await,
        Err(Error::NotHeld { .. })
    ));
    // The next holder's number is above the counter after the bump, so above the old one's:
    // a resource that keeps the highest number seen refuses the old holder after it.
    let next = hold(&locker, "f:lock", &LockOptions::new(LONG).fencing(true)).await;
    assert_eq!(next.fencing_token(), Some(number + 2));
    // The record of who forced it and why.
    let record = server
        .command(&["HGET", &leasehold::internal::forced_record_key("f:lock"), "reason"])
        .unwrap();
    assert_eq!(record.as_bytes(), Some(&b"stuck since the deploy"[..]));
    let ttl = common::pttl(&server, &leasehold::internal::forced_record_key("f:lock"));
    assert!(ttl > 0, "the record expires: {ttl}");
    next.release().await.unwrap();

    // A free key: NotHeld, nothing written.
    let before = snapshot(&server);
    assert!(matches!(
        locker.force_release("f:free", "nothing there").await,
        Err(Error::NotHeld { .. })
    ));
    assert_eq!(snapshot(&server), before);

    // Keys that are not locks are refused and left as they were.
    server.command(&["SET", "f:string", "hello"]).unwrap();
    server.command(&["SET", "f:string-ttl", "hello", "PX", "60000"]).unwrap();
    server.command(&["HSET", "f:hash", "f", "v"]).unwrap();
    server.command(&["RPUSH", "f:list", "a"]).unwrap();
    let token_like = leasehold::LockToken::random();
    server.command(&["SET", "f:no-ttl", token_like.expose()]).unwrap();
    server.command(&["SET", "f:bad-counter", token_like.expose(), "PX", "60000"]).unwrap();
    server.command(&["SET", &fence_key("f:bad-counter"), "x"]).unwrap();
    let before = snapshot(&server);
    for key in ["f:string", "f:string-ttl", "f:hash", "f:list", "f:no-ttl", "f:bad-counter"] {
        let err = locker.force_release(key, "not a lock").await.unwrap_err();
        assert!(matches!(err, Error::InvalidArgument { what: "key", .. }), "{key}: {err:?}");
    }
    // Byte for byte the same: no key written, none deleted.
    let after = snapshot(&server);
    assert_eq!(after, before);

    // A bad reason is refused before any round trip.
    for reason in ["", "a\nb"] {
        assert!(matches!(
            locker.force_release("f:string", reason).await,
            Err(Error::InvalidArgument { what: "reason", .. })
        ));
    }
});

/// `list` and `force_release` through a [`Locker`] on a backend with a lock table: the held
/// locks and only them, with holders, owners and fencing numbers; a forced lock gone, its old
/// holder refused, and the next number above the counter returned (on a per-key counter:
/// exactly the old number + 1, then + 2).
async fn lock_table_works(name: &str, locker: &Locker, per_key_counter: bool) {
    let me = owner(name);
    let a = hold(
        locker,
        "tb:a",
        &LockOptions::new(LONG).fencing(true).owner(me.clone()),
    )
    .await;
    let b = hold(locker, "tb:b", &LockOptions::new(LONG).fencing(true)).await;
    let elsewhere = hold(locker, "other:c", &LockOptions::new(LONG)).await;
    let gone = hold(locker, "tb:gone", &LockOptions::new(LONG).fencing(true)).await;
    gone.release().await.unwrap();

    let entries = locker.list("tb:*").await.expect("list");
    let keys: Vec<&str> = entries.iter().map(|e| e.key.as_str()).collect();
    assert_eq!(keys, ["tb:a", "tb:b"], "{name}: {entries:#?}");
    assert_eq!(entries[0].holders[0].token, *a.token(), "{name}");
    assert_eq!(entries[0].holders[0].owner.as_ref(), Some(&me), "{name}");
    assert_eq!(entries[0].fencing_counter, a.fencing_token(), "{name}");
    assert_eq!(entries[1].holders[0].token, *b.token(), "{name}");
    assert_eq!(entries[1].fencing_counter, b.fencing_token(), "{name}");
    assert_eq!(locker.list("*").await.unwrap().len(), 3, "{name}");

    let number = a.fencing_token().unwrap();
    let forced = locker
        .force_release("tb:a", "table test")
        .await
        .expect("force");
    assert_eq!(forced.previous.token, *a.token(), "{name}");
    assert_eq!(forced.previous.owner.as_ref(), Some(&me), "{name}");
    let counter = forced.fencing_counter.expect("a counter");
    assert!(counter > number, "{name}: {counter} > {number}");
    assert_eq!(locker.inspect("tb:a").await.unwrap().holder, None, "{name}");
    assert!(
        locker.extend("tb:a", a.token(), LONG).await.is_err(),
        "{name}: the old holder extends"
    );
    let next = hold(locker, "tb:a", &LockOptions::new(LONG).fencing(true)).await;
    let next_number = next.fencing_token().unwrap();
    assert!(next_number > counter, "{name}: {next_number} > {counter}");
    if per_key_counter {
        assert_eq!(counter, number + 1, "{name}");
        assert_eq!(next_number, number + 2, "{name}");
    }
    assert!(
        matches!(
            locker.force_release("tb:free", "nothing there").await,
            Err(Error::NotHeld { .. })
        ),
        "{name}"
    );
    for g in [next, b, elsewhere] {
        g.release().await.unwrap();
    }
    drop(a);
    assert!(locker.list("tb:*").await.unwrap().is_empty(), "{name}");
}

#[tokio::test]
async fn the_lock_table_of_memory_locks() {
    let locker = Locker::connect("memory://lock-table").await.unwrap();
    lock_table_works("memory", &locker, true).await;
    // The old holder's release is refused too.
    let old = hold(&locker, "m:x", &LockOptions::new(LONG)).await;
    locker.force_release("m:x", "test").await.unwrap();
    assert!(matches!(
        locker.release("m:x", old.token()).await,
        Err(Error::NotHeld { .. })
    ));
}

#[cfg(feature = "etcd")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owners_and_the_lock_table_on_etcd() {
    let Some(etcd) = leasehold_harness::etcd_for_test() else {
        return;
    };
    let url = format!("etcd://{}", etcd.endpoint().trim_start_matches("http://"));
    let locker = Locker::connect(&url).await.unwrap();
    owner_is_shown("etcd", &locker).await;
    lock_table_works("etcd", &locker, false).await;
    // A waiter is counted; an etcd key that is not a lock is refused and left alone.
    let held = hold(&locker, "e:w", &LockOptions::new(LONG)).await;
    let waiter = {
        let locker = locker.clone();
        tokio::spawn(async move {
            locker
                .acquire("e:w", &LockOptions::new(LONG).wait(LONG))
                .await
        })
    };
    let mut waiters = None;
    for _ in 0..600 {
        waiters = locker.list("e:w").await.unwrap()[0].waiters;
        if waiters == Some(1) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(waiters, Some(1));
    held.release().await.unwrap();
    tokio::time::timeout(HANG_GUARD, waiter)
        .await
        .unwrap()
        .unwrap()
        .unwrap()
        .release()
        .await
        .unwrap();
    etcd.put("e:plain", "value").unwrap();
    let err = locker
        .force_release("e:plain", "not a lock")
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::InvalidArgument { what: "key", .. }),
        "{err:?}"
    );
    assert_eq!(etcd.get("e:plain").unwrap().as_deref(), Some(&b"value"[..]));

    // The primitives are listed as their kinds, under their own names (their entries' keys
    // start with a NUL: before, `ls` showed them as one lock named ""), with a waiter counted.
    let opts = LockOptions::new(LONG);
    let pool = locker.semaphore("p:pool", 2).unwrap();
    let (p1, p2) = (
        pool.acquire(&opts).await.unwrap(),
        pool.acquire(&opts).await.unwrap(),
    );
    let extra = {
        let pool = pool.clone();
        tokio::spawn(async move { pool.acquire(&LockOptions::new(LONG).wait(LONG)).await })
    };
    let reader = locker.rwlock("p:cfg").unwrap().read(&opts).await.unwrap();
    let leader = locker
        .election("p:lead")
        .unwrap()
        .campaign("node-1", &opts)
        .await
        .unwrap();
    let mut listed = Vec::new();
    for _ in 0..600 {
        listed = locker.list("p:*").await.unwrap();
        if listed
            .iter()
            .any(|e| e.key == "p:pool" && e.waiters == Some(1))
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let shown: Vec<(&str, LockKind, usize, Option<u64>)> = listed
        .iter()
        .map(|e| (e.key.as_str(), e.kind, e.holders.len(), e.waiters))
        .collect();
    assert_eq!(
        shown,
        vec![
            ("p:cfg", LockKind::Read, 1, Some(0)),
            ("p:lead", LockKind::Election, 1, Some(0)),
            ("p:pool", LockKind::Permits, 2, Some(1)),
        ],
        "{listed:?}"
    );
    let lead = listed.iter().find(|e| e.key == "p:lead").unwrap();
    assert_eq!(lead.fencing_counter, leader.fencing_token());
    assert!(
        locker
            .list("*")
            .await
            .unwrap()
            .iter()
            .all(|e| !e.key.is_empty())
    );
    for guard in [p1, p2, reader, leader] {
        guard.release().await.unwrap();
    }
    tokio::time::timeout(HANG_GUARD, extra)
        .await
        .unwrap()
        .unwrap()
        .unwrap()
        .release()
        .await
        .unwrap();
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owners_and_the_lock_table_on_postgres() {
    let Some(pg) = leasehold_harness::postgres_for_test() else {
        return;
    };
    let lease = Locker::connect(&format!("{}?lock=lease", pg.url()))
        .await
        .unwrap();
    owner_is_shown("postgres lease rows", &lease).await;
    lock_table_works("postgres lease rows", &lease, true).await;
    let session = Locker::connect(&pg.url()).await.unwrap();
    owner_is_shown("postgres session locks", &session).await;
    lock_table_works("postgres session locks", &session, true).await;
}

leasehold_harness::server_test!(async fn ls_and_force_release_through_sentinel(bin) {
    use leasehold_harness::{SentinelOptions, SentinelSet};
    let set = SentinelSet::start(&bin, &SentinelOptions::new()).expect("sentinel set starts");
    let locker = Locker::connect(&set.lock_url("redis-sentinel")).await.unwrap();
    let guard = hold(&locker, "s:job", &LockOptions::new(LONG).fencing(true).owner(owner("s"))).await;
    let entries = locker.list("*").await.unwrap();
    assert_eq!(entries.len(), 1, "{entries:#?}");
    assert_eq!(entries[0].holders[0].token, *guard.token());
    assert_eq!(entries[0].holders[0].owner, Some(owner("s")));
    let forced = locker.force_release("s:job", "sentinel test").await.unwrap();
    assert_eq!(forced.fencing_counter, Some(guard.fencing_token().unwrap() + 1));
    let primary = set.primary().expect("primary");
    assert_eq!(common::get(primary, "s:job"), None);
    assert!(locker.list("*").await.unwrap().is_empty());
});
