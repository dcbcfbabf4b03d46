//! ACL users: every operation as a user with exactly the least-privilege rule of docs/acl.md,
//! and clear errors (never a hang) for a user missing a right.

use crate::common;

use std::time::Duration;

use leasehold::redis::{RedisClient, ReleaseStrategy};
use leasehold::{Backoff, ClientOptions, Error, LockOptions, Locker};
use leasehold_harness::{Server, ServerOptions};

const LONG: Duration = Duration::from_secs(60);
const HANG_GUARD: Duration = Duration::from_secs(60);
const USER: &str = "locker";
const PASSWORD: &str = "s3cret";

/// Whether the server knows `command` (`COMMAND INFO` answers nil for an unknown one).
fn knows(server: &Server, command: &str) -> bool {
    let reply = server.command(&["COMMAND", "INFO", command]).unwrap();
    reply
        .as_array()
        .and_then(|a| a.first())
        .is_some_and(|c| !c.is_nil())
}

/// The least-privilege rule of docs/acl.md for locks under `lock:`, on this server (DELEX and
/// DELIFEQ only where the server has them: ACL SETUSER refuses unknown commands).
fn least_privilege(server: &Server) -> Vec<String> {
    let mut rule: Vec<String> = [
        "on",
        ">s3cret",
        "resetkeys",
        "resetchannels",
        "-@all",
        // What the client sends.
        "+get",
        "+set",
        "+pttl",
        "+evalsha",
        "+script|load",
        "+info",
        "+ping",
        "+wait",
        "+publish",
        "+subscribe",
        "+unsubscribe",
        // What leasehold's scripts run (scripts are checked against the caller's rights).
        "+del",
        "+pexpire",
        "+incr",
        // Lock keys, their fencing counters, the capability probe's keys; release channels.
        "~lock:*",
        "~{lock:*}:fence",
        "~leasehold:probe:*",
        "&leasehold:released:*",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for native in ["delex", "delifeq"] {
        if knows(server, native) {
            rule.push(format!("+{native}"));
        }
    }
    rule
}

fn set_user(server: &Server, user: &str, rule: &[String]) {
    let rule: Vec<&str> = rule.iter().map(String::as_str).collect();
    server.acl_setuser(user, &rule).expect("ACL SETUSER");
}

fn url_for(server: &Server, user: &str) -> String {
    format!("redis://{user}:{PASSWORD}@127.0.0.1:{}/", server.port())
}

/// The rule without the parts `drop` names.
fn without(rule: &[String], drop: &[&str]) -> Vec<String> {
    rule.iter()
        .filter(|r| !drop.contains(&r.as_str()))
        .cloned()
        .collect()
}

// Every operation as a user with exactly the documented rule: detection sees the server and its
// native commands, notifications stay on, and nothing is refused.
leasehold_harness::server_test!(async fn every_operation_as_a_least_privilege_user(bin) {
    let server = Server::start(&bin, &ServerOptions::new()).unwrap();
    set_user(&server, USER, &least_privilege(&server));
    let url = url_for(&server, USER);
    let holder = Locker::connect(&url).await.expect("the user connects");
    let waiter = Locker::connect(&url).await.unwrap();
    let info = holder.as_redis().unwrap().server();
    assert_ne!(info.kind, leasehold::redis::ServerKind::Unknown, "INFO refused");
    assert!(info.can_publish, "PUBLISH refused");
    assert!(!info.can_track, "tracking without +hello +client|tracking");
    if info.has_delex {
        assert_eq!(holder.as_redis().unwrap().release_strategy(), ReleaseStrategy::DelEx);
    } else if info.has_delifeq {
        assert_eq!(holder.as_redis().unwrap().release_strategy(), ReleaseStrategy::DelIfEq);
    }
    assert_eq!(info.has_delex, knows(&server, "delex"));
    assert_eq!(info.has_delifeq, knows(&server, "delifeq"));

    let opts = LockOptions::new(Duration::from_secs(2)).fencing(true).auto_extend(true);
    let g = holder.try_acquire("lock:acl", &opts).await.unwrap().acquired().unwrap();
    assert_eq!(g.fencing_token(), Some(1));
    assert!(!holder.try_acquire("lock:acl", &LockOptions::new(LONG)).await.unwrap().is_acquired());
    g.extend(Duration::from_secs(2)).await.unwrap();
    assert_eq!(holder.inspect("lock:acl").await.unwrap().fencing_counter, Some(1));
    assert_eq!(holder.raise_fencing_counter("lock:acl", 5).await.unwrap(), 5);
    let stats = holder.as_redis().unwrap().renewal_stats();
    tokio::time::timeout(HANG_GUARD, async {
        while stats.renewals() < 3 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("renewals as the user");
    // A waiter woken by the release notification (40 s backoff, 30 s wait). The rule has no
    // +hello: the subscriber's RESP3 handshake is refused and it subscribes over RESP2.
    let task = tokio::spawn(async move {
        let opts = LockOptions::new(LONG).wait(Duration::from_secs(30)).fencing(true)
            .backoff(Backoff::constant(Duration::from_secs(40)));
        waiter.acquire("lock:acl", &opts).await.map(|g| g.detach())
    });
    tokio::time::timeout(HANG_GUARD, async {
        loop {
            let reply = server.command(&["PUBSUB", "NUMSUB", &leasehold::redis::release_channel("lock:acl")]).unwrap();
            if reply.as_array().and_then(|a| a.get(1)).and_then(|v| v.as_integer()) == Some(1) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the waiter subscribes");
    g.release().await.unwrap();
    let lease = tokio::time::timeout(HANG_GUARD, task).await.expect("hung").unwrap().expect("woken");
    assert_eq!(lease.fencing_token(), Some(6));
    holder.release("lock:acl", lease.token()).await.unwrap();
    // WAIT is allowed: with no replica the acquisition is refused as not replicated, not by ACL.
    let err = holder
        .try_acquire("lock:acl", &LockOptions::new(LONG).replica_ack(1, Duration::from_millis(100)))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NotReplicated { .. }), "{err:?}");
    let done = holder.with_lock("lock:acl", &LockOptions::new(LONG).wait(Duration::from_secs(5)), |_| async { 7 }).await.unwrap();
    assert_eq!(done, 7);
});

// The rule with the optional `+hello +client|tracking` (docs/acl.md): the waiter tracks the key,
// and the holder's release wakes it with no PUBLISH (its backoff, 40 s, outlasts its wait).
leasehold_harness::server_test!(async fn tracking_rights_spare_the_release_its_publish(bin) {
    let server = Server::start(&bin, &ServerOptions::new()).unwrap();
    let mut rule = least_privilege(&server);
    rule.extend(["+hello".to_string(), "+client|tracking".to_string()]);
    set_user(&server, USER, &rule);
    let url = url_for(&server, USER);
    let holder = Locker::connect(&url).await.unwrap();
    let waiter = Locker::connect(&url).await.unwrap();
    assert!(holder.as_redis().unwrap().server().can_track, "tracking refused to the documented rule");
    let g = holder.try_acquire("lock:tracked", &LockOptions::new(LONG)).await.unwrap().acquired().unwrap();
    let scripts = common::calls(&server, "evalsha") + common::calls(&server, "eval");
    let task = tokio::spawn(async move {
        let opts = LockOptions::new(LONG).wait(Duration::from_secs(30)).backoff(Backoff::constant(Duration::from_secs(40)));
        waiter.acquire("lock:tracked", &opts).await.map(|g| g.detach())
    });
    // The waiter's attempt after subscribing and tracking (the acquire script).
    tokio::time::timeout(HANG_GUARD, async {
        while common::calls(&server, "evalsha") + common::calls(&server, "eval") == scripts {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the waiter never attempted after subscribing");
    let published = common::calls(&server, "publish");
    g.release().await.unwrap();
    let lease = tokio::time::timeout(HANG_GUARD, task).await.expect("hung").unwrap().expect("woken");
    assert_eq!(common::get(&server, "lock:tracked").as_deref(), Some(lease.token().expose()));
    assert_eq!(common::calls(&server, "publish"), published, "the release published");
});

// A user missing a right gets PermissionDenied naming the refusal, at once: no hang, no retry
// loop. Keys outside the rule, the scripts' own commands, and the lock command itself.
leasehold_harness::server_test!(async fn missing_rights_are_permission_errors(bin) {
    let server = Server::start(&bin, &ServerOptions::new()).unwrap();
    let full = least_privilege(&server);
    let cases: [(&str, Vec<String>, &str, LockOptions); 4] = [
        ("no-set", without(&full, &["+set"]), "lock:a", LockOptions::new(LONG)),
        ("no-evalsha", without(&full, &["+evalsha"]), "lock:a", LockOptions::new(LONG).fencing(true)),
        ("no-incr", without(&full, &["+incr"]), "lock:a", LockOptions::new(LONG).fencing(true)),
        ("no-fence-key", without(&full, &["~{lock:*}:fence"]), "lock:a", LockOptions::new(LONG).fencing(true)),
    ];
    for (user, rule, key, opts) in cases {
        set_user(&server, user, &rule);
        let client = Locker::connect(&url_for(&server, user)).await.unwrap_or_else(|e| panic!("{user}: {e}"));
        let err = tokio::time::timeout(HANG_GUARD, client.try_acquire(key, &opts))
            .await
            .unwrap_or_else(|_| panic!("{user}: hung"))
            .unwrap_err();
        assert!(matches!(err, Error::PermissionDenied { .. }), "{user}: {err:?}");
        assert!(err.to_string().contains("docs/acl.md"), "{user}: {err}");
        // Nothing was left behind.
        assert_eq!(common::get(&server, key), None, "{user}");
    }
    // A key outside the rule's patterns.
    set_user(&server, "narrow", &full);
    let client = Locker::connect(&url_for(&server, "narrow")).await.unwrap();
    let err = client.try_acquire("other:key", &LockOptions::new(LONG)).await.unwrap_err();
    assert!(matches!(err, Error::PermissionDenied { .. }), "{err:?}");
    // Without channel rights the client connects with notifications off (and says so in the
    // log); locking still works and waiters poll.
    set_user(&server, "quiet", &without(&full, &["&leasehold:released:*"]));
    let client = Locker::connect_with(&url_for(&server, "quiet"), ClientOptions::new()).await.unwrap();
    assert!(!client.as_redis().unwrap().server().can_publish);
    let g = client.try_acquire("lock:q", &LockOptions::new(LONG)).await.unwrap().acquired().unwrap();
    g.release().await.unwrap();
    // A wrong password is an authentication error.
    let err = RedisClient::connect(&format!("redis://{USER}:wrong@127.0.0.1:{}/", server.port())).await.unwrap_err();
    assert!(matches!(err, Error::Authentication { .. }), "{err:?}");
});

/// What fair locks add to the rule (docs/acl.md): the queue's commands and keys.
const FAIR_RIGHTS: &[&str] = &[
    "+zrange",
    "+zrem",
    "+zadd",
    "+zscore",
    "+zpopmin",
    "+zcard",
    "+persist",
    "~{lock:*}:queue",
    "~{lock:*}:waiter:*",
];

// Fair locks as a user with the documented rule: a waiter queued, handed the lock with its
// fencing number; without the queue's rights, a clear PermissionDenied.
leasehold_harness::server_test!(async fn fair_locks_as_a_least_privilege_user(bin) {
    let server = Server::start(&bin, &ServerOptions::new()).unwrap();
    let mut rule = least_privilege(&server);
    rule.extend(FAIR_RIGHTS.iter().map(|s| s.to_string()));
    set_user(&server, USER, &rule);
    let url = url_for(&server, USER);
    let holder = Locker::connect(&url).await.unwrap();
    let waiter = Locker::connect(&url).await.unwrap();
    let fair = LockOptions::new(Duration::from_secs(10)).fair(true).fencing(true).wait(LONG);
    let g = holder.try_acquire("lock:fair", &fair).await.unwrap().acquired().unwrap();
    let task = {
        let fair = fair.clone();
        tokio::spawn(async move { waiter.acquire("lock:fair", &fair).await })
    };
    let queue = leasehold::redis::fair_queue_key("lock:fair");
    common::until("the waiter queues", || {
        server.command(&["ZCARD", &queue]).unwrap().as_integer() == Some(1)
    })
    .await;
    g.release().await.unwrap();
    let w = tokio::time::timeout(HANG_GUARD, task).await.unwrap().unwrap().expect("handed over");
    assert_eq!(w.fencing_token(), Some(2));
    w.release().await.unwrap();

    set_user(&server, "noqueue", &without(&rule, &["+zadd"]));
    let client = Locker::connect(&url_for(&server, "noqueue")).await.unwrap();
    let g = holder.try_acquire("lock:fair", &fair).await.unwrap().acquired().unwrap();
    let err = tokio::time::timeout(HANG_GUARD, client.acquire("lock:fair", &fair))
        .await
        .expect("no hang")
        .unwrap_err();
    assert!(matches!(err, Error::PermissionDenied { .. }), "{err:?}");
    g.release().await.unwrap();
});

// Semaphores as a user with the documented rule (docs/acl.md) and nothing more.
leasehold_harness::server_test!(async fn semaphores_as_a_least_privilege_user(bin) {
    let server = Server::start(&bin, &ServerOptions::new()).unwrap();
    let mut rule = least_privilege(&server);
    rule.extend(
        [
            "+time", "+zremrangebyscore", "+zcard", "+zadd", "+zrange", "+zscore", "+zrem",
            "+zcount", "+exists", "+set", "+get", "+pexpire", "+del", "~{lock:*}:permits",
            "~{lock:*}:limit",
        ]
        .iter()
        .map(|s| s.to_string()),
    );
    set_user(&server, USER, &rule);
    let client = Locker::connect(&url_for(&server, USER)).await.unwrap();
    let sem = client.semaphore("lock:pool", 2).unwrap();
    let opts = LockOptions::new(Duration::from_secs(1)).auto_extend(true);
    let a = sem.try_acquire(&opts).await.unwrap().acquired().unwrap();
    let b = sem.try_acquire(&opts).await.unwrap().acquired().unwrap();
    assert!(!sem.try_acquire(&opts).await.unwrap().is_acquired());
    let stats = client.as_redis().unwrap().renewal_stats();
    common::until("permits renewed as the user", || stats.renewals() >= 4).await;
    assert_eq!(sem.holders().await.unwrap(), 2);
    a.release().await.unwrap();
    b.release().await.unwrap();
    assert_eq!(sem.holders().await.unwrap(), 0);
});
