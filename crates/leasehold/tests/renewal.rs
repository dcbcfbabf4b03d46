//! Auto-extension: leases kept alive in batches, and a loss reported at once, never silently.

use crate::common;

use std::time::Duration;

use common::*;
use leasehold::{Error, LockOptions, Locker, LossReason, OnLoss};
use leasehold_harness::{Server, ServerOptions};

/// Only guards against a hang; every wait below ends on an observed event.
const HANG_GUARD: Duration = Duration::from_secs(60);

async fn wait_for_renewals(client: &Locker, at_least: u64) {
    let stats = client.as_redis().unwrap().renewal_stats();
    tokio::time::timeout(HANG_GUARD, async {
        while stats.renewals() < at_least {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap_or_else(|_| {
        panic!(
            "renewals did not happen: {} of {at_least}, in {} rounds, {} leases lost",
            stats.renewals(),
            stats.rounds(),
            stats.lost()
        )
    });
}

// A 1.5 s lock kept alive through several renewals: still ours, key still there.
leasehold_harness::server_test!(async fn auto_extend_keeps_the_lock_past_its_ttl(bin) {
    let (server, client) = start(&bin).await;
    let opts = LockOptions::new(Duration::from_millis(1500)).auto_extend(true);
    let g = client.try_acquire("alive", &opts).await.unwrap().acquired().unwrap();
    wait_for_renewals(&client, 6).await; // six renewals at TTL/3: well past one TTL
    assert!(g.is_held());
    assert_eq!(get(&server, "alive").as_deref(), Some(g.token().expose()));
    assert_eq!(client.as_redis().unwrap().renewal_stats().lost(), 0);
    g.release().await.unwrap();
    assert_eq!(get(&server, "alive"), None);
});

// A stats handle taken before the first auto-extended lease (when no renewer runs yet) counts
// that lease's renewals: the bench's W5 took it that way and reported 0 renewals.
leasehold_harness::server_test!(async fn renewal_stats_taken_early_count_later_renewals(bin) {
    let (_server, client) = start(&bin).await;
    let early = client.as_redis().unwrap().renewal_stats();
    let opts = LockOptions::new(Duration::from_millis(1500)).auto_extend(true);
    let g = client.try_acquire("early-stats", &opts).await.unwrap().acquired().unwrap();
    wait_for_renewals(&client, 2).await;
    assert!(early.renewals() >= 2, "the early handle saw {}", early.renewals());
    assert!(early.rounds() >= 1);
    g.release().await.unwrap();
});

// 10 000 leases on one client, TTL 2 s, held over three renewal periods: none lost, and they
// are renewed in batches (one pipeline per tick), not one round trip per lease.
leasehold_harness::server_test!(async fn ten_thousand_leases_renewed_in_batches(bin) {
    const LEASES: usize = 10_000;
    // One flavor at a time: three of these at once on two cores measure the machine, not us.
    let _one_at_a_time = common::HEAVY.lock().await;
    let (server, client) = start(&bin).await;
    let opts = LockOptions::new(Duration::from_secs(2)).auto_extend(true);
    let mut tasks = Vec::new();
    for t in 0..16 {
        let (client, opts) = (client.clone(), opts.clone());
        tasks.push(tokio::spawn(async move {
            let mut guards = Vec::new();
            for i in (t..LEASES).step_by(16) {
                guards.push(client.try_acquire(&format!("lease:{i}"), &opts).await.unwrap().acquired().unwrap());
            }
            guards
        }));
    }
    let mut guards = Vec::with_capacity(LEASES);
    for t in tasks {
        guards.extend(t.await.unwrap());
    }
    assert_eq!(guards.len(), LEASES);
    wait_for_renewals(&client, 3 * LEASES as u64).await;
    let stats = client.as_redis().unwrap().renewal_stats();
    assert_eq!(stats.lost(), 0, "leases lost");
    assert!(guards.iter().all(|g| g.is_held()));
    let dbsize = server.command(&["DBSIZE"]).unwrap().as_integer().unwrap();
    assert_eq!(dbsize, LEASES as i64);
    assert!(
        stats.rounds() * 50 < stats.renewals(),
        "not batched: {} rounds for {} renewals",
        stats.rounds(),
        stats.renewals()
    );
    for g in guards {
        g.release().await.unwrap();
    }
});

// The key deleted or overwritten from outside: the next renewal notices, lost() fires with
// NotHeld, and the guard says it is not held.
leasehold_harness::server_test!(async fn lost_fires_when_the_key_is_deleted_or_overwritten(bin) {
    let (server, client) = start(&bin).await;
    let opts = LockOptions::new(Duration::from_secs(3)).auto_extend(true);
    for tamper in [&["DEL", "gone"][..], &["SET", "gone", "someone-else"][..]] {
        let g = client.try_acquire("gone", &opts).await.unwrap().acquired().unwrap();
        let token = g.lost_token();
        server.command(tamper).unwrap();
        tokio::time::timeout(HANG_GUARD, g.lost()).await.expect("loss not reported");
        assert!(token.is_cancelled());
        assert_eq!(g.loss_reason(), Some(LossReason::NotHeld));
        assert!(!g.is_held());
        assert!(g.release().await.unwrap_err().is_not_held());
        server.command(&["DEL", "gone"]).unwrap();
    }
});

// The server stalls (SIGSTOP) longer than the lease: no renewal can succeed before the
// validity deadline, so the lease is declared lost (Expired) while the server is still frozen.
leasehold_harness::server_test!(async fn lost_fires_when_no_renewal_succeeds_in_time(bin) {
    let (server, client) = start(&bin).await;
    let opts = LockOptions::new(Duration::from_millis(600)).auto_extend(true);
    let g = client.try_acquire("stall", &opts).await.unwrap().acquired().unwrap();
    server.pause().unwrap();
    let lost = tokio::time::timeout(HANG_GUARD, g.lost()).await;
    server.resume().unwrap();
    lost.expect("loss not reported while the server was stalled");
    assert_eq!(g.loss_reason(), Some(LossReason::Expired));
    assert!(!g.is_held());
    let _ = g.release().await;
});

// The hold-time cap stops renewal: the lock then expires and the lease reports lost. Without
// the cap this test would hang (the lease would be renewed forever).
leasehold_harness::server_test!(async fn max_hold_stops_renewal(bin) {
    let (server, client) = start(&bin).await;
    let opts = LockOptions::new(Duration::from_millis(1000))
        .auto_extend(true)
        .max_hold(Duration::from_millis(1500));
    let g = client.try_acquire("capped", &opts).await.unwrap().acquired().unwrap();
    tokio::time::timeout(HANG_GUARD, g.lost()).await.expect("cap not honoured");
    assert_eq!(g.loss_reason(), Some(LossReason::Expired));
    until_absent(&server, "capped", HANG_GUARD).await;
    assert!(client.as_redis().unwrap().renewal_stats().renewals() >= 1, "it renewed before the cap");
});

// with_lock cancels the work when the lock is lost, and says so.
leasehold_harness::server_test!(async fn with_lock_cancels_work_on_loss(bin) {
    let (server, client) = start(&bin).await;
    let opts = LockOptions::new(Duration::from_secs(3)).auto_extend(true);
    let (tx, rx) = tokio::sync::oneshot::channel();
    let c2 = client.clone();
    let run = tokio::spawn(async move {
        c2.with_lock("w", &opts, |_| async move {
            tx.send(()).unwrap();
            std::future::pending::<()>().await
        })
        .await
    });
    rx.await.unwrap();
    server.command(&["DEL", "w"]).unwrap();
    let result = tokio::time::timeout(HANG_GUARD, run).await.expect("work not cancelled").unwrap();
    assert!(matches!(result, Err(Error::LockLost { reason: LossReason::NotHeld, .. })), "{result:?}");
});

// With OnLoss::Notify the work runs to its end, sees the loss through its lease, and
// with_lock still reports it.
leasehold_harness::server_test!(async fn with_lock_notify_lets_the_work_finish(bin) {
    let (server, client) = start(&bin).await;
    let opts = LockOptions::new(Duration::from_secs(3)).auto_extend(true).on_loss(OnLoss::Notify);
    let (tx, rx) = tokio::sync::oneshot::channel();
    let c2 = client.clone();
    let run = tokio::spawn(async move {
        c2.with_lock("n", &opts, |lease| async move {
            tx.send(()).unwrap();
            lease.lost().await;
            "finished after noticing"
        })
        .await
    });
    rx.await.unwrap();
    server.command(&["DEL", "n"]).unwrap();
    let result = tokio::time::timeout(HANG_GUARD, run).await.expect("hung").unwrap();
    assert!(matches!(result, Err(Error::LockLost { .. })), "{result:?}");
});

// With AOF (appendfsync always) the key survives a crash-restart of the server, and renewal
// carries on through the reconnect.
//
// The restart (kill, start, load the AOF, reconnect) must fit in the lease's validity: with a
// 5 s TTL, a loaded machine (CI run 18: all three flavors at once) took longer, the
// lease was rightly lost, and no renewal came. 20 s leaves a restart more than 13 s; the test
// still takes two renewal periods, about 14 s, and waits on nothing but renewals.
leasehold_harness::server_test!(async fn renewal_survives_a_restart_with_aof(bin) {
    let mut server = Server::start(&bin, &ServerOptions::new().aof(true)).unwrap();
    let client = Locker::connect(&server.url()).await.unwrap();
    let opts = LockOptions::new(Duration::from_secs(20)).auto_extend(true);
    let g = client.try_acquire("durable", &opts).await.unwrap().acquired().unwrap();
    wait_for_renewals(&client, 1).await;
    server.restart().unwrap();
    // Read once the old server is gone: a renewal counted from here went to the new one.
    let before = client.as_redis().unwrap().renewal_stats().renewals();
    wait_for_renewals(&client, before + 1).await;
    assert!(g.is_held(), "lost across the restart: {:?}", g.loss_reason());
    assert_eq!(get(&server, "durable").as_deref(), Some(g.token().expose()));
    g.release().await.unwrap();
});

// Without persistence the restarted server has forgotten the key: the renewal says so.
leasehold_harness::server_test!(async fn renewal_reports_loss_after_a_restart_without_persistence(bin) {
    let (mut server, client) = start(&bin).await;
    let opts = LockOptions::new(Duration::from_secs(5)).auto_extend(true);
    let g = client.try_acquire("volatile", &opts).await.unwrap().acquired().unwrap();
    server.restart().unwrap();
    tokio::time::timeout(HANG_GUARD, g.lost()).await.expect("loss not reported");
    assert_eq!(g.loss_reason(), Some(LossReason::NotHeld));
});

// Issue 22, finding 2: an extend whose outcome is unknown never leaves a longer belief standing.
// A shortening extend (60 s -> 5 s) reaches the server, which applies it, but its reply is held
// back past the response timeout: the caller gets an ambiguous error. The lease used to keep its
// 60 s validity while the key expired in 5 s (and could be taken by another client); now the
// validity is at most 5 s from when the extend was sent.
leasehold_harness::server_test!(async fn an_extend_with_an_unknown_outcome_never_raises_validity(bin) {
    use leasehold::ClientOptions;
    use leasehold_harness::SlowLink;
    use std::time::Instant;
    let server = Server::start(&bin, &ServerOptions::new()).unwrap();
    // The extend script is loaded: a NOSCRIPT reply held back would stop it from being sent.
    preload_scripts(&server);
    let link = SlowLink::start(server.addr()).unwrap();
    let options = ClientOptions::new().response_timeout(Duration::from_millis(500));
    let client = Locker::connect_with(&link.url(), options).await.unwrap();
    let key = "ambiguous-extend";
    let g = client
        .try_acquire(key, &LockOptions::new(Duration::from_secs(60)))
        .await
        .unwrap()
        .acquired()
        .unwrap();
    link.set_reply_delay(Duration::from_secs(2));
    let sent = Instant::now();
    let err = g.extend(Duration::from_secs(5)).await.unwrap_err();
    assert!(err.is_ambiguous(), "{err:?}");
    let pttl = pttl(&server, key);
    assert!(pttl > 0 && pttl <= 5_000, "the server applied the extend: PTTL {pttl} ms");
    assert!(
        g.valid_until() <= sent + Duration::from_secs(5),
        "the lease still counts on the old TTL: {:?} left",
        g.valid_until().saturating_duration_since(Instant::now())
    );
    link.set_reply_delay(Duration::ZERO);
    // A later extend that succeeds raises it, but not past what the unanswered 5 s extend
    // allows while a copy of it may still be applied (until its bound): a copy applied after
    // the 60 s one would leave 5 s (once the held-back reply has gone through, replies come at
    // once).
    let extend_60 = || async {
        let mut tries = 0;
        loop {
            let sent = Instant::now();
            match g.extend(Duration::from_secs(60)).await {
                Ok(()) => return sent,
                Err(e) => assert!(e.is_ambiguous() && tries < 20, "{e:?}"),
            }
            tries += 1;
        }
    };
    let sent_60 = extend_60().await;
    assert!(
        g.valid_until() <= sent_60 + Duration::from_secs(5),
        "raised past the unanswered extend's cap: {:?} left",
        g.valid_until().saturating_duration_since(Instant::now())
    );
    // Once its bound has passed, nothing caps a success any more.
    tokio::time::sleep_until((sent + Duration::from_millis(5_200)).into()).await;
    extend_60().await;
    assert!(g.valid_until() > sent + Duration::from_secs(30));
    g.release().await.unwrap();
});
