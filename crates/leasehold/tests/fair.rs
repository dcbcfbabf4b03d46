//! Fair locks (`LockOptions::fair`): arrival order, direct handoff, no barging, no herd,
//! vanished waiters skipped, fencing through handoffs, and a handed-off lease that never
//! outlasts its key.

use crate::common;

use common::{calls, until};

use std::time::{Duration, Instant};

use leasehold::redis::{RedisClient, RedisOptions, fair_entry_key, fair_queue_key, fence_key};
use leasehold::redlock::{Redlock, RedlockOptions};
use leasehold::{ClientOptions, Error, LockGuard, LockOptions, Locker, TryAcquire};
use leasehold_harness::{Server, ServerOptions, SlowLink};
use tokio::sync::{mpsc, oneshot};

/// A TTL long enough that nothing expires by itself during a test; its handoff window is the
/// 10 s maximum, so a waiter refreshes its entry only every 3.3 s.
const LONG: Duration = Duration::from_secs(60);
const HANG_GUARD: Duration = Duration::from_secs(60);

fn fair(ttl: Duration) -> LockOptions {
    LockOptions::new(ttl).fair(true).wait(LONG)
}

/// Waiters queued for `key`, as the server has them.
fn queued(server: &Server, key: &str) -> i64 {
    server
        .command(&["ZCARD", &fair_queue_key(key)])
        .unwrap()
        .as_integer()
        .unwrap()
}

/// The waiters' entries by entry key, each as its fields (token, window, fencing flag, owner,
/// attempt); grant records for a claim are not entries.
fn entries(server: &Server, key: &str) -> std::collections::BTreeMap<String, Vec<String>> {
    let reply = server
        .command(&["KEYS", &fair_entry_key(key, "*")])
        .unwrap();
    let names = reply.as_array().unwrap_or(&[]).to_vec();
    names
        .iter()
        .filter_map(|name| {
            let name = name.as_str().unwrap();
            let value = server.command(&["GET", name]).unwrap();
            let entry = String::from_utf8_lossy(value.as_bytes()?).into_owned();
            (!entry.starts_with("granted ")).then(|| {
                (
                    name.to_string(),
                    entry.split(' ').map(str::to_string).collect(),
                )
            })
        })
        .collect()
}

/// The attempt numbers in the waiters' entries.
fn entry_attempts(server: &Server, key: &str) -> Vec<u64> {
    let attempt = |fields: Vec<String>| fields.last().unwrap().parse().unwrap();
    entries(server, key).into_values().map(attempt).collect()
}

/// The owners the waiters' entries name: their client's name once subscribed through it, "-"
/// before (and always, for a client without notifications).
fn entry_owners(server: &Server, key: &str) -> Vec<String> {
    entries(server, key)
        .into_values()
        .map(|mut f| f.swap_remove(3))
        .collect()
}

/// Waits until `n` waiters of clients with notifications are queued for `key` and subscribed:
/// a waiter subscribes once its first attempt found the lock busy, and its entry names its
/// client from the attempt right after (issue 32: a free lock costs one round trip).
async fn until_waiting(server: &Server, key: &str, n: usize) {
    until("waiters queued and subscribed", || {
        let owners = entry_owners(server, key);
        queued(server, key) == n as i64 && owners.len() == n && owners.iter().all(|o| o != "-")
    })
    .await;
}

/// `key` held by `client` (fair, LONG), and a second acquisition of the same client queued
/// behind it (the server shows it queued and subscribed).
async fn held_with_a_queued_waiter(
    server: &Server,
    client: &Locker,
    key: &'static str,
) -> (LockGuard, tokio::task::JoinHandle<LockGuard>) {
    let g = client
        .try_acquire(key, &fair(LONG))
        .await
        .unwrap()
        .acquired()
        .unwrap();
    let waiter = {
        let client = client.clone();
        tokio::spawn(async move { client.acquire(key, &fair(LONG)).await.unwrap() })
    };
    until_waiting(server, key, 1).await;
    (g, waiter)
}

/// Loads the fair scripts, so that `INFO commandstats` counts one EVALSHA per operation.
fn preload(server: &Server) {
    for script in leasehold::internal::fair_scripts() {
        assert!(
            !server
                .command(&["SCRIPT", "LOAD", &script])
                .unwrap()
                .is_error()
        );
    }
}

leasehold_harness::server_test!(async fn waiters_get_the_lock_in_arrival_order_by_direct_handoff(bin) {
    let server = Server::start(&bin, &ServerOptions::new()).unwrap();
    let key = "fair:order";
    let holder = Locker::connect(&server.url()).await.unwrap();
    let g = holder.try_acquire(key, &fair(LONG)).await.unwrap().acquired().unwrap();
    // Waiters on two clients (the handoff message is routed to its ticket across clients),
    // each queued only once the previous one is on the server: their arrival order is known.
    let other = Locker::connect(&server.url()).await.unwrap();
    let (got_tx, mut got) = mpsc::unbounded_channel();
    let mut go = Vec::new();
    for i in 0..4 {
        let client = if i % 2 == 0 { holder.clone() } else { other.clone() };
        let got_tx = got_tx.clone();
        let (go_tx, go_rx) = oneshot::channel::<()>();
        go.push(go_tx);
        tokio::spawn(async move {
            let g = client.acquire(key, &fair(LONG)).await.unwrap();
            got_tx.send((i, g.token().expose().to_string())).unwrap();
            let _ = go_rx.await;
            g.release().await.unwrap();
        });
        until_waiting(&server, key, i + 1).await;
    }
    // No barging: a newcomer is refused while others wait, even by the holder's own client.
    assert!(!holder.try_acquire(key, &fair(LONG)).await.unwrap().is_acquired());
    g.release().await.unwrap();
    // The release set the key to the first waiter's token in the same step: it was never free
    // for anyone to take.
    let handed = common::get(&server, key).expect("the key was handed over, never freed");
    for (expected, go) in (0..4).zip(go) {
        let (i, token) = tokio::time::timeout(HANG_GUARD, got.recv()).await.unwrap().unwrap();
        assert_eq!(i, expected, "arrival order");
        if i == 0 {
            assert_eq!(handed, token, "handed to the waiter that returned");
        }
        assert_eq!(common::get(&server, key).as_deref(), Some(token.as_str()));
        go.send(()).unwrap();
    }
    until("the last release frees the key", || common::get(&server, key).is_none()).await;
    assert_eq!(queued(&server, key), 0);
});

leasehold_harness::server_test!(async fn a_release_wakes_only_the_next_waiter(bin) {
    let server = Server::start(&bin, &ServerOptions::new()).unwrap();
    preload(&server);
    let key = "fair:herd";
    // 10 s: the handoff window is the whole TTL, so the head needs no claim round trip.
    let ttl = Duration::from_secs(10);
    let client = Locker::connect(&server.url()).await.unwrap();
    let g = client.try_acquire(key, &fair(ttl)).await.unwrap().acquired().unwrap();
    let (got_tx, mut got) = mpsc::unbounded_channel();
    for i in 0..3 {
        let (client, got_tx) = (client.clone(), got_tx.clone());
        tokio::spawn(async move {
            let g = client.acquire(key, &fair(ttl)).await.unwrap();
            got_tx.send(i).unwrap();
            g.detach();
        });
        until_waiting(&server, key, i + 1).await;
    }
    let before = calls(&server, "evalsha");
    let entries_before = entries(&server, key);
    let released = Instant::now();
    g.release().await.unwrap();
    assert_eq!(tokio::time::timeout(HANG_GUARD, got.recv()).await.unwrap(), Some(0));
    // Nobody else ran an attempt: the two others still show their last one, and the server
    // ran one script (the release); the head took the lock from the handoff message itself.
    // (A waiter refreshes its entry every 3.3 s: only a machine stalled that long could blur it.)
    if released.elapsed() < Duration::from_secs(3) {
        assert_eq!(calls(&server, "evalsha"), before + 1, "one script: the release");
        // The two still waiting show the attempt they had made before the release.
        let after = entries(&server, key);
        assert_eq!(after.len(), 2, "{after:?}");
        for (entry, fields) in &after {
            assert_eq!(Some(fields), entries_before.get(entry), "{entry} attempted again");
        }
    } else {
        eprintln!("machine stalled for over 3 s; the no-herd check is not conclusive this run");
    }
});

leasehold_harness::server_test!(async fn a_free_lock_goes_to_the_queue_head_not_to_a_newcomer(bin) {
    let server = Server::start(&bin, &ServerOptions::new()).unwrap();
    let key = "fair:barging";
    let client = Locker::connect(&server.url()).await.unwrap();
    let (g, waiter) = held_with_a_queued_waiter(&server, &client, key).await;
    // The lock vanishes without a release (as if its holder crashed and it expired).
    server.command(&["DEL", key]).unwrap();
    g.detach();
    match client.try_acquire(key, &fair(LONG)).await.unwrap() {
        TryAcquire::Busy { .. } => {}
        TryAcquire::Acquired(_) => panic!("a newcomer took a free lock ahead of the queue"),
    }
    // The head takes it at its next attempt.
    let w = tokio::time::timeout(HANG_GUARD, waiter).await.unwrap().unwrap();
    assert_eq!(common::get(&server, key).as_deref(), Some(w.token().expose()));
    w.release().await.unwrap();
    // With nobody queued, a release frees the key and anyone may take it.
    assert_eq!(common::get(&server, key), None);
    assert!(client.try_acquire(key, &fair(LONG)).await.unwrap().is_acquired());
});

leasehold_harness::server_test!(async fn dropped_and_timed_out_waiters_leave_the_queue(bin) {
    let server = Server::start(&bin, &ServerOptions::new()).unwrap();
    let key = "fair:leave";
    let client = Locker::connect(&server.url()).await.unwrap();
    let g = client.try_acquire(key, &fair(LONG)).await.unwrap().acquired().unwrap();
    let dropped = {
        let client = client.clone();
        tokio::spawn(async move { client.acquire(key, &fair(LONG)).await })
    };
    until_waiting(&server, key, 1).await;
    dropped.abort();
    until("the dropped waiter's entry removed", || queued(&server, key) == 0).await;
    assert!(entry_attempts(&server, key).is_empty());
    // A deadline: NotAcquired, and the entry is gone when it returns.
    let opts = LockOptions::new(LONG).fair(true).wait(Duration::from_millis(300));
    match client.acquire(key, &opts).await {
        Err(Error::NotAcquired { .. }) => {}
        other => panic!("expected NotAcquired, got {other:?}"),
    }
    assert_eq!(queued(&server, key), 0);
    assert!(entry_attempts(&server, key).is_empty());
    g.release().await.unwrap();
    assert_eq!(common::get(&server, key), None, "nobody left to hand it to");
});

leasehold_harness::server_test!(async fn a_lock_handed_to_a_waiter_that_leaves_moves_on(bin) {
    let server = Server::start(&bin, &ServerOptions::new()).unwrap();
    let key = "fair:pass-on";
    let holder = Locker::connect(&server.url()).await.unwrap();
    // This waiter hears no handoff message: it would claim the lock at its next refresh, 3.3 s
    // after its attempt; it is dropped before that.
    let deaf = RedisClient::connect_with(&server.url(), RedisOptions::new().notify_waiters(false))
        .await
        .map(Locker::from)
        .unwrap();
    let g = holder.try_acquire(key, &fair(LONG)).await.unwrap().acquired().unwrap();
    let first = tokio::spawn(async move { deaf.acquire(key, &fair(LONG)).await });
    until("first waiter queued", || queued(&server, key) == 1).await;
    let second = {
        let holder = holder.clone();
        tokio::spawn(async move { holder.acquire(key, &fair(LONG)).await.unwrap() })
    };
    until("second waiter queued", || queued(&server, key) == 2).await;
    g.release().await.unwrap();
    let handed = common::get(&server, key).expect("handed to the first waiter");
    first.abort();
    let w = tokio::time::timeout(HANG_GUARD, second).await.unwrap().unwrap();
    assert_ne!(w.token().expose(), handed, "the second waiter holds it, not the first");
    assert_eq!(common::get(&server, key).as_deref(), Some(w.token().expose()));
    w.release().await.unwrap();
});

leasehold_harness::server_test!(async fn a_crashed_waiter_is_skipped(bin) {
    let server = Server::start(&bin, &ServerOptions::new()).unwrap();
    let key = "fair:crashed";
    let client = Locker::connect(&server.url()).await.unwrap();
    let (g, live) = held_with_a_queued_waiter(&server, &client, key).await;
    // Two waiters that crashed, ahead of the live one: one whose entry expired, and one that
    // died just after its last refresh (its entry still looks alive; handoff window 1.5 s).
    // The expired one's entry is gone (it expired); the recent one's lives on for a minute.
    let queue = fair_queue_key(key);
    server.command(&["ZADD", &queue, "-2", "expired"]).unwrap();
    server.command(&["ZADD", &queue, "-1", "recent"]).unwrap();
    server
        .command(&["SET", &fair_entry_key(key, "recent"), "tok-recent 1500 0 - 1", "PX", "60000"])
        .unwrap();
    g.release().await.unwrap();
    // The expired entry was skipped and dropped; the recent one got the lock for its window.
    assert_eq!(common::get(&server, key).as_deref(), Some("tok-recent"));
    assert!(common::pttl(&server, key) <= 1500);
    assert!(server.command(&["ZSCORE", &queue, "expired"]).unwrap().is_nil());
    // It never claims it: after the window the live waiter takes over.
    let w = tokio::time::timeout(HANG_GUARD, live).await.unwrap().unwrap();
    assert_eq!(common::get(&server, key).as_deref(), Some(w.token().expose()));
    w.release().await.unwrap();
});

/// `client` takes `key` (with fencing, in `opts`) and a waiter of `client` queues behind it:
/// the guard, its fencing number and the waiter's task.
async fn held_with_one_waiter(
    server: &Server,
    client: &Locker,
    notify: bool,
    key: &'static str,
    opts: &LockOptions,
) -> (LockGuard, u64, tokio::task::JoinHandle<LockGuard>) {
    let g = client
        .try_acquire(key, opts)
        .await
        .unwrap()
        .acquired()
        .unwrap();
    let first = g.fencing_token().unwrap();
    let waiter = {
        let (client, opts) = (client.clone(), opts.clone());
        tokio::spawn(async move { client.acquire(key, &opts).await.unwrap() })
    };
    if notify {
        until_waiting(server, key, 1).await;
    } else {
        until("waiter queued", || queued(server, key) == 1).await;
    }
    (g, first, waiter)
}

leasehold_harness::server_test!(async fn fencing_numbers_increase_through_handoffs(bin) {
    let server = Server::start(&bin, &ServerOptions::new()).unwrap();
    // With notifications the waiter holds the lock from the handoff message; without, it
    // claims it at its next attempt. Both get the number the release issued.
    for notify in [true, false] {
        let key = if notify { "fair:fence:message" } else { "fair:fence:claim" };
        let client = RedisClient::connect_with(&server.url(), RedisOptions::new().notify_waiters(notify))
            .await
            .map(Locker::from)
            .unwrap();
        let opts = fair(LONG).fencing(true);
        let (g, first, waiter) = held_with_one_waiter(&server, &client, notify, key, &opts).await;
        g.release().await.unwrap();
        let w = tokio::time::timeout(HANG_GUARD, waiter).await.unwrap().unwrap();
        assert_eq!(w.fencing_token(), Some(first + 1), "notify={notify}");
        assert_eq!(common::get(&server, &fence_key(key)), Some((first + 1).to_string()));
        w.release().await.unwrap();
        let again = client.try_acquire(key, &opts).await.unwrap().acquired().unwrap();
        assert_eq!(again.fencing_token(), Some(first + 2), "notify={notify}");
        again.release().await.unwrap();
    }
});

leasehold_harness::server_test!(async fn a_waiter_handed_no_exact_fencing_number_is_told(bin) {
    let server = Server::start(&bin, &ServerOptions::new()).unwrap();
    let key = "fair:fence:exhausted";
    let client = Locker::connect(&server.url()).await.unwrap();
    let opts = fair(LONG).fencing(true);
    let g = client.try_acquire(key, &opts).await.unwrap().acquired().unwrap();
    let waiter = {
        let (client, opts) = (client.clone(), opts.clone());
        tokio::spawn(async move { client.acquire(key, &opts).await.map(|g| g.fencing_token()) })
    };
    until_waiting(&server, key, 1).await;
    // Set from outside past 2^53: the release has no exact number to hand over with the lock.
    server.command(&["SET", &fence_key(key), "9007199254740993"]).unwrap();
    g.release().await.unwrap();
    let outcome = tokio::time::timeout(HANG_GUARD, waiter).await.unwrap().unwrap();
    assert!(matches!(outcome, Err(Error::FencingExhausted { .. })), "{outcome:?}");
    assert!(common::get(&server, key).is_none(), "the lock was freed, not handed over");
    until("the waiter left the queue", || queued(&server, key) == 0).await;
    assert_eq!(common::get(&server, &fence_key(key)).as_deref(), Some("9007199254740993"));
});

/// The subscriber connections on the server (`sub=` or `ssub=` above 0 in `CLIENT LIST`).
fn subscriber_ids(server: &Server) -> Vec<String> {
    let list = server.command(&["CLIENT", "LIST"]).unwrap();
    let list = String::from_utf8_lossy(list.as_bytes().unwrap()).into_owned();
    list.lines()
        .filter(|l| {
            l.split(' ')
                .any(|f| f.strip_prefix("sub=").is_some_and(|n| n != "0"))
        })
        .filter_map(|l| {
            l.split(' ')
                .find_map(|f| f.strip_prefix("id="))
                .map(str::to_string)
        })
        .collect()
}

leasehold_harness::server_test!(async fn a_waiter_of_the_releasing_client_is_handed_the_lock_by_the_reply(bin) {
    let server = Server::start(&bin, &ServerOptions::new()).unwrap();
    let key = "fair:local";
    // 10 s: the handoff window is the whole TTL, so a handoff needs no claim round trip.
    let opts = fair(Duration::from_secs(10)).fencing(true);
    let client = Locker::connect(&server.url()).await.unwrap();
    let (g, first, waiter) = held_with_one_waiter(&server, &client, true, key, &opts).await;
    // The client's subscriber connection is cut: no handoff message can reach the waiter.
    let ids = subscriber_ids(&server);
    assert_eq!(ids.len(), 1, "one subscriber connection: {ids:?}");
    server.command(&["CLIENT", "KILL", "ID", &ids[0]]).unwrap();
    until("subscriber gone", || subscriber_ids(&server).is_empty()).await;
    let published = calls(&server, "publish");
    g.release().await.unwrap();
    let w = tokio::time::timeout(HANG_GUARD, waiter).await.unwrap().unwrap();
    assert_eq!(w.fencing_token(), Some(first + 1));
    assert_eq!(calls(&server, "publish"), published, "no message for a waiter of the releaser");
    // It holds the lock from the release's reply, not from a claim at its next attempt (3.3 s
    // later): a claim deletes the grant record the release left for it.
    let entries = server.command(&["KEYS", &fair_entry_key(key, "*")]).unwrap();
    let entries = entries.as_array().unwrap().to_vec();
    assert_eq!(entries.len(), 1, "the grant record is kept: {entries:?}");
    let grant = common::get(&server, entries[0].as_str().unwrap());
    assert_eq!(grant, Some(format!("granted {}", first + 1)));
    // A waiter of another client still gets the message.
    let other = Locker::connect(&server.url()).await.unwrap();
    let remote = {
        let opts = opts.clone();
        tokio::spawn(async move { other.acquire(key, &opts).await.unwrap() })
    };
    until_waiting(&server, key, 1).await;
    // (Connecting probed whether PUBLISH is allowed.)
    let published = calls(&server, "publish");
    w.release().await.unwrap();
    let r = tokio::time::timeout(HANG_GUARD, remote).await.unwrap().unwrap();
    assert_eq!(r.fencing_token(), Some(first + 2));
    assert_eq!(calls(&server, "publish"), published + 1);
    r.release().await.unwrap();
});

/// `client` holds `key` (fair, `ttl`) by a handoff from its own release, so the release's
/// reply named the next in line: a second waiter of `client`, which offers an early handoff.
/// The holder's guard and that waiter's task.
async fn held_with_a_local_next_in_line(
    server: &Server,
    client: &Locker,
    key: &'static str,
    ttl: Duration,
) -> (LockGuard, tokio::task::JoinHandle<LockGuard>) {
    let first = client
        .try_acquire(key, &fair(ttl))
        .await
        .unwrap()
        .acquired()
        .unwrap();
    let holder = {
        let client = client.clone();
        tokio::spawn(async move { client.acquire(key, &fair(ttl)).await.unwrap() })
    };
    until("first waiter queued", || queued(server, key) == 1).await;
    let next = {
        let client = client.clone();
        tokio::spawn(async move { client.acquire(key, &fair(ttl)).await.unwrap() })
    };
    until("both waiters queued and offering an early handoff", || {
        queued(server, key) == 2 && client.as_redis().unwrap().early_handoff_offers(key) == 2
    })
    .await;
    first.release().await.unwrap();
    let g = tokio::time::timeout(HANG_GUARD, holder)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        common::get(server, key).as_deref(),
        Some(g.token().expose())
    );
    (g, next)
}

leasehold_harness::server_test!(async fn the_next_waiter_of_the_same_client_is_handed_the_lock_before_the_release_runs(bin) {
    let server = Server::start(&bin, &ServerOptions::new()).unwrap();
    let key = "fair:early";
    // 10 s: the handoff window is the whole TTL (early handoffs need that).
    let ttl = Duration::from_secs(10);
    let client = Locker::connect(&server.url()).await.unwrap();
    let (g, next) = held_with_a_local_next_in_line(&server, &client, key, ttl).await;
    let holder_token = g.token().clone();
    // Half a second older than the drift allowance: a lease counted from now would outlast it.
    until("the holder's key has aged", || common::pttl(&server, key) < 9_500).await;
    // No script can run: the release waits on the server until the pause ends.
    assert!(!server.command(&["CLIENT", "PAUSE", "60000", "WRITE"]).unwrap().is_error());
    let release = tokio::spawn(async move { g.release().await });
    let w = tokio::time::timeout(HANG_GUARD, next).await.unwrap().unwrap();
    assert!(w.is_held());
    assert_eq!(
        common::get(&server, key).as_deref(),
        Some(holder_token.expose()),
        "the waiter holds the lock before the release ran"
    );
    // Its validity ends before the releaser's key could expire and before its own queue entry
    // could (until then the release can only hand the lock to it).
    let entries = server.command(&["KEYS", &fair_entry_key(key, "*")]).unwrap();
    let entries = entries.as_array().unwrap().to_vec();
    assert_eq!(entries.len(), 1, "only its entry is left: {entries:?}");
    let key_ms = common::pttl(&server, key);
    let entry_ms = common::pttl(&server, entries[0].as_str().unwrap());
    let early = w.valid_until();
    let left_ms = early.saturating_duration_since(Instant::now()).as_millis() as i64;
    assert!(left_ms < key_ms.min(entry_ms), "{left_ms} ms against {key_ms} / {entry_ms} ms");
    assert!(left_ms >= (ttl / 2).as_millis() as i64, "at least half the TTL: {left_ms} ms");
    assert!(!server.command(&["CLIENT", "UNPAUSE"]).unwrap().is_error());
    // The release's reply confirms it: the key holds the waiter's token, and the validity moves
    // to the window from when the release was sent (later than either bound).
    tokio::time::timeout(HANG_GUARD, release).await.unwrap().unwrap().unwrap();
    assert_eq!(common::get(&server, key).as_deref(), Some(w.token().expose()));
    assert!(w.valid_until() > early);
    assert!(w.is_held());
    w.release().await.unwrap();
    until("the last release frees the key", || common::get(&server, key).is_none()).await;
    assert_eq!(queued(&server, key), 0);
});

leasehold_harness::server_test!(async fn an_early_handoff_the_release_contradicts_is_reported_lost(bin) {
    let server = Server::start(&bin, &ServerOptions::new()).unwrap();
    let key = "fair:early:contradicted";
    let ttl = Duration::from_secs(10);
    let client = Locker::connect(&server.url()).await.unwrap();
    let (g, next) = held_with_a_local_next_in_line(&server, &client, key, ttl).await;
    // Behind the client's back the queue is emptied: the release will find nobody to hand to.
    server.command(&["DEL", &fair_queue_key(key)]).unwrap();
    g.release().await.unwrap();
    let w = tokio::time::timeout(HANG_GUARD, next).await.unwrap().unwrap();
    tokio::time::timeout(HANG_GUARD, w.lost()).await.expect("loss not reported");
    assert_eq!(w.loss_reason(), Some(leasehold::LossReason::NotHeld));
    assert!(!w.is_held());
    assert!(common::get(&server, key).is_none(), "the release deleted the key");
    assert!(matches!(w.release().await, Err(Error::NotHeld { .. })));
});

// Early handoffs within each client, messages between them: never two holders, every task
// gets its turns, and the queue ends empty.
leasehold_harness::server_test!(async fn early_handoffs_and_messages_never_overlap(bin) {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    const TASKS: usize = 4;
    const ROUNDS: usize = 25;
    let server = Server::start(&bin, &ServerOptions::new()).unwrap();
    let key = "fair:early:mixed";
    let opts = fair(Duration::from_secs(10));
    let holders = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..2 {
        let client = Locker::connect(&server.url()).await.unwrap();
        for _ in 0..TASKS {
            let (client, opts, holders) = (client.clone(), opts.clone(), holders.clone());
            tasks.push(tokio::spawn(async move {
                for _ in 0..ROUNDS {
                    let g = client.acquire(key, &opts).await.unwrap();
                    assert!(g.is_held());
                    assert_eq!(holders.fetch_add(1, Ordering::SeqCst), 0, "two holders at once");
                    // Longer than a round trip: the release that handed the lock over has
                    // replied (naming the next in line) before this holder lets go.
                    tokio::time::sleep(Duration::from_millis(3)).await;
                    holders.fetch_sub(1, Ordering::SeqCst);
                    g.release().await.unwrap();
                }
            }));
        }
    }
    for t in tasks {
        tokio::time::timeout(HANG_GUARD, t).await.unwrap().unwrap();
    }
    until("the last release frees the key", || common::get(&server, key).is_none()).await;
    assert_eq!(queued(&server, key), 0);
});

leasehold_harness::server_test!(async fn a_handed_off_lease_never_outlasts_its_key(bin) {
    let server = Server::start(&bin, &ServerOptions::new()).unwrap();
    preload(&server);
    let key = "fair:validity";
    let ttl = Duration::from_secs(10);
    let holder = Locker::connect(&server.url()).await.unwrap();
    // The waiter's link holds every reply back, the handoff message included, by 300 ms: a
    // lease counted from when the message *arrived* would end 300 ms after the key expires
    // (three times the drift allowance). It must count from the attempt the release read.
    let link = SlowLink::start(server.addr()).unwrap();
    let waiter_client = Locker::connect(&link.url()).await.unwrap();
    let g = holder.try_acquire(key, &fair(ttl)).await.unwrap().acquired().unwrap();
    let waiter = tokio::spawn(async move { waiter_client.acquire(key, &fair(ttl)).await.unwrap() });
    until_waiting(&server, key, 1).await;
    link.set_reply_delay(Duration::from_millis(300));
    let before = calls(&server, "evalsha");
    g.release().await.unwrap();
    let w = tokio::time::timeout(HANG_GUARD, waiter).await.unwrap().unwrap();
    let pttl = common::pttl(&server, key);
    let expiry_bound = Instant::now() + Duration::from_millis(pttl as u64 + 1);
    assert!(
        w.valid_until() <= expiry_bound,
        "the lease ends {:?} after the key expires",
        w.valid_until() - expiry_bound
    );
    // And it was the message that gave it (no claim: one script, the release).
    assert_eq!(calls(&server, "evalsha"), before + 1);
    link.set_reply_delay(Duration::ZERO);
    w.release().await.unwrap();
});

leasehold_harness::server_test!(async fn with_lock_in_fair_mode_never_overlaps(bin) {
    let server = Server::start(&bin, &ServerOptions::new()).unwrap();
    let client = Locker::connect(&server.url()).await.unwrap();
    let inside = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let max = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..6 {
        let (client, inside, max) = (client.clone(), inside.clone(), max.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..8 {
                client
                    .with_lock("fair:with-lock", &fair(LONG), |_lease| async {
                        use std::sync::atomic::Ordering::SeqCst;
                        let now = inside.fetch_add(1, SeqCst) + 1;
                        max.fetch_max(now, SeqCst);
                        tokio::task::yield_now().await;
                        inside.fetch_sub(1, SeqCst);
                    })
                    .await
                    .unwrap();
            }
        }));
    }
    for t in tasks {
        tokio::time::timeout(HANG_GUARD, t).await.unwrap().unwrap();
    }
    assert_eq!(max.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert_eq!(queued(&server, "fair:with-lock"), 0);
});

leasehold_harness::server_test!(async fn a_handed_off_lease_is_auto_extended(bin) {
    let server = Server::start(&bin, &ServerOptions::new()).unwrap();
    let key = "fair:renewed";
    let holder = Locker::connect(&server.url()).await.unwrap();
    let waiter_client = Locker::connect(&server.url()).await.unwrap();
    let g = holder.try_acquire(key, &fair(LONG)).await.unwrap().acquired().unwrap();
    let opts = fair(Duration::from_secs(1)).auto_extend(true);
    let waiter = {
        let client = waiter_client.clone();
        tokio::spawn(async move { client.acquire(key, &opts).await.unwrap() })
    };
    until_waiting(&server, key, 1).await;
    g.release().await.unwrap();
    let w = tokio::time::timeout(HANG_GUARD, waiter).await.unwrap().unwrap();
    // Renewed three times (observed in the renewer's counters): past three 1 s TTLs.
    let stats = waiter_client.as_redis().unwrap().renewal_stats();
    until("three renewals", || stats.renewals() >= 3).await;
    assert_eq!(common::get(&server, key).as_deref(), Some(w.token().expose()));
    assert!(w.is_held());
    w.release().await.unwrap();
    assert_eq!(common::get(&server, key), None);
});

leasehold_harness::server_test!(async fn fair_mode_refuses_what_it_cannot_do(bin) {
    let server = Server::start(&bin, &ServerOptions::new()).unwrap();
    let client = Locker::connect(&server.url()).await.unwrap();
    match client
        .acquire("k", &fair(LONG).replica_ack(1, Duration::from_millis(10)))
        .await
    {
        Err(Error::Unsupported { .. }) => {}
        other => panic!("fair + replica_ack: {other:?}"),
    }
    assert!(matches!(
        client.try_acquire("", &fair(LONG)).await,
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        client.try_acquire("k", &fair(Duration::ZERO)).await,
        Err(Error::InvalidArgument { .. })
    ));
    let redlock = Redlock::connect(&[&server.url()], RedlockOptions::new()).await.map(Locker::from).unwrap();
    assert!(matches!(
        redlock.acquire("k", &fair(LONG)).await,
        Err(Error::Unsupported { .. })
    ));
    // A queue key that is not a queue (the name used for something else): a clear server error.
    server.command(&["SET", &fair_queue_key("taken"), "x"]).unwrap();
    server.command(&["SET", "taken", "someone"]).unwrap();
    let err = client.acquire("taken", &fair(LONG)).await.unwrap_err();
    assert!(err.to_string().contains("WRONGTYPE"), "{err}");
    assert_eq!(common::get(&server, "taken").as_deref(), Some("someone"));
});

// Issue 22, finding 6: a release and an attempt drop at most 100 dead entries each (to bound a
// script's run time). With more than that ahead of a live waiter, the attempt used to take the
// bound for an empty queue, so a newcomer took the lock ahead of the waiter. Now whoever is
// first after the bound still counts as ahead, the attempt says "come back at once", and the
// release that gave up wakes the queue's head if it is live (here it is dead: the waiter comes
// at its next refresh).
leasehold_harness::server_test!(async fn more_than_a_hundred_dead_entries_do_not_let_a_newcomer_jump_the_queue(bin) {
    let server = Server::start(&bin, &ServerOptions::new()).unwrap();
    let key = "fair:dead-heads";
    let client = Locker::connect(&server.url()).await.unwrap();
    let (g, waiter) = held_with_a_queued_waiter(&server, &client, key).await;
    // 250 waiters that crashed ahead of it: members whose entries are gone (as a crashed
    // waiter's entry expires), queued before it.
    let queue = fair_queue_key(key);
    let dead: Vec<(String, String)> =
        (1..=250).map(|i| (format!("-{i}"), format!("dead{i:03}"))).collect();
    let mut zadd = vec!["ZADD", queue.as_str()];
    for (score, member) in &dead {
        zadd.extend([score.as_str(), member.as_str()]);
    }
    assert_eq!(server.command(&zadd).unwrap().as_integer(), Some(250));
    // The release drops 100 of them and, finding nobody live, frees the key.
    g.release().await.unwrap();
    match client.try_acquire(key, &fair(LONG)).await.unwrap() {
        TryAcquire::Busy { .. } => {}
        TryAcquire::Acquired(_) => panic!("a newcomer took the lock ahead of a live waiter"),
    }
    let w = tokio::time::timeout(HANG_GUARD, waiter).await.unwrap().unwrap();
    assert_eq!(common::get(&server, key).as_deref(), Some(w.token().expose()));
    assert_eq!(queued(&server, key), 0, "every dead entry dropped on the way");
    w.release().await.unwrap();
});

// The release script's reply (issue 32, target 1): a handoff it published to another
// client's waiter replies a bare 2, since only that client can use the handoff's fields (a
// Lua table is written from the server's reply list, a slower write on the handoff's path);
// a handoff to a waiter of the releasing client, or to one not subscribed, replies with them,
// for the releasing client to deliver.
leasehold_harness::server_test!(async fn a_release_replies_the_handoff_only_to_the_client_that_delivers_it(bin) {
    let server = Server::start(&bin, &ServerOptions::new()).unwrap();
    let key = "fair:reply";
    let release = &leasehold::internal::fair_scripts()[1];
    let channel = leasehold::redis::release_channel(key);
    // The lock held by `holder`, and one waiter (ticket `t`, token `next`) whose entry names
    // `owner`; the release runs as the client `releaser`.
    let run = |owner: &str, releaser: &str| {
        for cmd in [
            vec!["SET", key, "holder"],
            vec!["ZADD", &fair_queue_key(key), "1", "t"],
        ] {
            server.command(&cmd).unwrap();
        }
        let entry = format!("next 10000 0 {owner} 7");
        server
            .command(&["SET", &fair_entry_key(key, "t"), &entry, "PX", "60000"])
            .unwrap();
        let reply = server
            .command(&[
                "EVAL",
                release,
                "4",
                key,
                &fair_queue_key(key),
                &fair_entry_key(key, ""),
                &fence_key(key),
                "holder",
                &channel,
                "publish",
                releaser,
            ])
            .unwrap();
        assert_eq!(common::get(&server, key).as_deref(), Some("next"), "handed to the waiter");
        server.command(&["DEL", key]).unwrap();
        reply
    };
    let published = calls(&server, "publish");
    let reply = run("other", "mine");
    assert_eq!(reply.as_integer(), Some(2), "published to another client: {reply:?}");
    assert_eq!(calls(&server, "publish"), published + 1);
    for owner in ["mine", "-"] {
        let reply = run(owner, "mine");
        let fields = reply.as_array().unwrap_or_else(|| panic!("{owner}: {reply:?}"));
        assert_eq!(fields[0].as_integer(), Some(2), "{owner}: {reply:?}");
        assert_eq!(fields[1].as_str(), Some("t"), "{owner}: {reply:?}");
        assert_eq!(fields[2].as_integer(), Some(7), "{owner}: {reply:?}");
    }
    assert_eq!(calls(&server, "publish"), published + 1, "no message for those");
});

// Issue 32, target 1: a fair release publishes its handoff on the channel of the waiter's
// client for the key (`handoff_channel`), so one client reads it. It used to go on the key's
// release channel, which every client waiting for the key subscribes to: each handoff woke
// every such client's subscriber connection for nothing but the one it named.
leasehold_harness::server_test!(async fn a_fair_handoff_is_published_to_its_waiters_client_alone(bin) {
    use futures_util::StreamExt;
    use leasehold::redis::{handoff_channel, release_channel};
    let server = Server::start(&bin, &ServerOptions::new()).unwrap();
    let key = "fair:one-reader";
    let holder = Locker::connect(&server.url()).await.unwrap();
    let g = holder.acquire(key, &fair(LONG)).await.unwrap();
    // Two waiters, each of a client of its own, queued in this order.
    let mut waiters = Vec::new();
    let mut owners = Vec::new();
    for n in 1..=2 {
        let client = Locker::connect(&server.url()).await.unwrap();
        waiters.push(tokio::spawn(async move {
            client.acquire(key, &fair(LONG)).await.unwrap()
        }));
        until_waiting(&server, key, n).await;
        let new: Vec<String> = entry_owners(&server, key)
            .into_iter()
            .filter(|o| !owners.contains(o))
            .collect();
        assert_eq!(new.len(), 1, "one new owner: {new:?}");
        owners.extend(new);
    }
    let numsub = |channel: &str| {
        let reply = server.command(&["PUBSUB", "NUMSUB", channel]).unwrap();
        reply.as_array().and_then(|a| a.get(1)).and_then(|v| v.as_integer())
    };
    assert_eq!(numsub(&release_channel(key)), Some(0), "nobody on the key's channel");
    for owner in &owners {
        assert_eq!(numsub(&handoff_channel(key, owner)), Some(1), "client {owner}");
    }
    // A listener on every channel of the key sees each handoff once, on its client's channel.
    let mut listener = redis::Client::open(server.url().as_str())
        .unwrap()
        .get_async_pubsub()
        .await
        .unwrap();
    listener
        .psubscribe(format!("{}*", release_channel(key)))
        .await
        .unwrap();
    let mut messages = listener.into_on_message();
    let mut releasing = g;
    for (waiter, owner) in waiters.into_iter().zip(&owners) {
        releasing.release().await.unwrap();
        let message = tokio::time::timeout(HANG_GUARD, messages.next())
            .await
            .expect("no handoff message")
            .unwrap();
        assert_eq!(message.get_channel_name(), handoff_channel(key, owner));
        let payload: String = message.get_payload().unwrap();
        assert!(payload.starts_with("handoff:"), "{payload}");
        releasing = tokio::time::timeout(HANG_GUARD, waiter).await.unwrap().unwrap();
    }
    releasing.release().await.unwrap();
});

// Issue 22, finding 7: an early handoff that reaches its waiter after the lease it carries is
// over is not returned as a guard. The waiter's replies are held back 4 s (> the 3 s TTL); its
// attempt is on the server when the holder releases, so the early grant waits in its channel
// while the attempt's reply is delayed. It used to be taken without a look at its validity:
// `acquire` returned a guard already over. Now it is dropped, and the waiter takes the lock
// afresh once the link is quick again.
leasehold_harness::server_test!(async fn an_early_handoff_read_after_its_lease_is_over_is_not_a_guard(bin) {
    let server = Server::start(&bin, &ServerOptions::new()).unwrap();
    let key = "fair:early:late";
    // The window is the whole TTL (early handoffs need that); the waiter refreshes every 1 s.
    let ttl = Duration::from_secs(3);
    let link = SlowLink::start(server.addr()).unwrap();
    // The link delays each chunk of replies in turn, so delays add up: no reply may time out.
    let options = ClientOptions::new().response_timeout(Duration::from_secs(60));
    let client = Locker::connect_with(&link.url(), options).await.unwrap();
    let (g, next) = held_with_a_local_next_in_line(&server, &client, key, ttl).await;
    // A fresh validity, so that the release can hand the waiter at least half a TTL.
    g.extend(ttl).await.unwrap();
    let seen = entry_attempts(&server, key);
    link.set_reply_delay(Duration::from_secs(4));
    until("the waiter's next attempt reached the server", || entry_attempts(&server, key) != seen).await;
    let release = tokio::spawn(async move { g.release().await });
    tokio::time::timeout(HANG_GUARD, release).await.unwrap().unwrap().unwrap();
    link.set_reply_delay(Duration::ZERO);
    let w = tokio::time::timeout(HANG_GUARD, next).await.unwrap().unwrap();
    assert!(w.is_held(), "acquire returned a guard whose lease was already over");
    assert_eq!(common::get(&server, key).as_deref(), Some(w.token().expose()));
    w.release().await.unwrap();
});
