//! One round trip per operation, proven by the server's own command counters: acquire is one
//! command (one script with fencing), release one, extend one, and capability detection happens
//! once per connection, never per call.

use std::collections::BTreeMap;
use std::time::Duration;

use leasehold::redis::{ExtendStrategy, ReleaseStrategy};
use leasehold::{LockOptions, Locker};
use leasehold_harness::Server;

const CYCLES: u64 = 1000;

/// calls per command from `INFO commandstats`, leaving out our own INFO/CONFIG.
fn command_calls(server: &Server) -> BTreeMap<String, u64> {
    let text = server.info("commandstats").unwrap();
    text.lines()
        .filter_map(|l| {
            let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = rest
                .split(',')
                .find_map(|f| f.strip_prefix("calls="))?
                .parse()
                .ok()?;
            Some((name.to_string(), calls))
        })
        .filter(|(name, _)| !name.starts_with("info") && !name.starts_with("config"))
        .collect()
}

fn reads_processed(server: &Server) -> u64 {
    let text = server.info("stats").unwrap();
    text.lines()
        .find_map(|l| {
            l.strip_prefix("total_reads_processed:")?
                .trim()
                .parse()
                .ok()
        })
        .expect("total_reads_processed")
}

// With release notifications off, every operation is exactly one command. With them on (the
// default), a release is the conditional delete plus a PUBLISH in the same round trip: the
// PUBLISH is pipelined with DELEX/DELIFEQ or runs inside the release script.
leasehold_harness::server_test!(async fn one_command_per_operation(bin) {
    let server = leasehold_harness::Server::start(&bin, &leasehold_harness::ServerOptions::new()).unwrap();
    for notify in [false, true] {
        let client = leasehold::redis::RedisClient::connect_with(
            &server.url(),
            leasehold::redis::RedisOptions::new().notify_waiters(notify),
        )
        .await
        .map(Locker::from)
        .unwrap();
        for fencing in [false, true] {
            check_cycles(&server, &client, notify, fencing, &bin.label()).await;
        }
    }
});

async fn check_cycles(server: &Server, client: &Locker, notify: bool, fencing: bool, label: &str) {
    let redis = client.as_redis().expect("a Redis client");
    let opts = LockOptions::new(Duration::from_secs(30)).fencing(fencing);
    // Warm-up: loads the scripts once, so NOSCRIPT reloads are not counted below.
    let g = client
        .try_acquire("warm", &opts)
        .await
        .unwrap()
        .acquired()
        .unwrap();
    g.extend(Duration::from_secs(30)).await.unwrap();
    g.release().await.unwrap();

    server.command(&["CONFIG", "RESETSTAT"]).unwrap();
    let reads_before = reads_processed(server);
    for i in 0..CYCLES {
        let g = client
            .try_acquire(&format!("k{i}"), &opts)
            .await
            .unwrap()
            .acquired()
            .unwrap();
        g.extend(Duration::from_secs(30)).await.unwrap();
        g.release().await.unwrap();
    }
    // Read events on the server's sockets: one per round trip (plus our own INFO). A release
    // in two round trips would add CYCLES more.
    let reads = reads_processed(server) - reads_before;
    assert!(
        reads <= 3 * CYCLES + CYCLES / 100,
        "{reads} reads for {CYCLES} cycles (notify={notify}, fencing={fencing})"
    );
    let calls = command_calls(server);

    // What the client sends: one command per operation, plus the pipelined PUBLISH of a
    // notifying native release. Commands that a script runs inside the server are counted by
    // commandstats too; they are listed separately.
    let (acquire, acquire_inner): (&str, &[&str]) = if fencing {
        // The script reads the counter first: past 2^53 it issues no number.
        ("evalsha", &["get", "set", "incr"])
    } else {
        ("set", &[])
    };
    let (extend, extend_inner): (&str, &[&str]) = match redis.extend_strategy() {
        ExtendStrategy::SetIfEq => ("set", &[]),
        _ => ("evalsha", &["get", "pexpire"]),
    };
    let (release, release_inner, pipelined): (&str, &[&str], &[&str]) =
        match (redis.release_strategy(), notify) {
            (ReleaseStrategy::DelEx, false) => ("delex", &[], &[]),
            (ReleaseStrategy::DelEx, true) => ("delex", &[], &["publish"]),
            (ReleaseStrategy::DelIfEq, false) => ("delifeq", &[], &[]),
            (ReleaseStrategy::DelIfEq, true) => ("delifeq", &[], &["publish"]),
            (_, false) => ("evalsha", &["get", "del"], &[]),
            (_, true) => ("evalsha", &["get", "del", "publish"], &[]),
        };
    let mut expected = BTreeMap::new();
    let mut inner_total = 0;
    for name in [acquire, extend, release].iter().chain(pipelined) {
        *expected.entry(name.to_string()).or_insert(0) += CYCLES;
    }
    for name in [acquire_inner, extend_inner, release_inner].concat() {
        *expected.entry(name.to_string()).or_insert(0) += CYCLES;
        inner_total += CYCLES;
    }
    let total: u64 = calls.values().sum();
    let sent = (3 + pipelined.len() as u64) * CYCLES;
    assert_eq!(
        total - inner_total,
        sent,
        "notify={notify} fencing={fencing}: {calls:?}"
    );
    assert_eq!(
        calls, expected,
        "notify={notify} fencing={fencing} on {label}"
    );
}

/// What one way of taking a primitive is, for [`every_primitive_takes_one_round_trip_uncontended`].
type Take = fn(Locker, String) -> futures_util::future::BoxFuture<'static, leasehold::LockGuard>;

// Issue 32, target 4: a free primitive is taken in one round trip, whatever the primitive, also
// when the caller would wait (nothing is subscribed before an attempt finds it busy). Counted
// by the server: one read event and one command sent per acquisition (a script, or `SET` for a
// plain lock), and no `SUBSCRIBE`.
leasehold_harness::server_test!(async fn every_primitive_takes_one_round_trip_uncontended(bin) {
    use futures_util::FutureExt;
    const TAKES: u64 = 50;
    let server = Server::start(&bin, &leasehold_harness::ServerOptions::new()).unwrap();
    let client = Locker::connect(&server.url()).await.unwrap();
    let ways: Vec<(&str, &str, Take)> = vec![
        ("a plain lock", "set", |c, k| async move { c.acquire(&k, &LockOptions::new(Duration::from_secs(60)).wait(Duration::from_secs(60))).await.unwrap() }.boxed()),
        ("a fair lock, one try", "evalsha", |c, k| async move {
            c.try_acquire(&k, &LockOptions::new(Duration::from_secs(60)).fair(true)).await.unwrap().acquired().unwrap()
        }.boxed()),
        ("a fair lock, waiting", "evalsha", |c, k| async move {
            c.acquire(&k, &LockOptions::new(Duration::from_secs(60)).wait(Duration::from_secs(60)).fair(true)).await.unwrap()
        }.boxed()),
        ("a semaphore permit", "evalsha", |c, k| async move {
            c.semaphore(&k, 2).unwrap().acquire(&LockOptions::new(Duration::from_secs(60)).wait(Duration::from_secs(60))).await.unwrap()
        }.boxed()),
        ("a read lock", "evalsha", |c, k| async move {
            c.rwlock(&k).unwrap().read(&LockOptions::new(Duration::from_secs(60)).wait(Duration::from_secs(60))).await.unwrap()
        }.boxed()),
        ("a write lock", "evalsha", |c, k| async move {
            c.rwlock(&k).unwrap().write(&LockOptions::new(Duration::from_secs(60)).wait(Duration::from_secs(60))).await.unwrap()
        }.boxed()),
        ("an election's term", "evalsha", |c, k| async move {
            c.election(&k).unwrap().campaign("me", &LockOptions::new(Duration::from_secs(60)).wait(Duration::from_secs(60))).await.unwrap()
        }.boxed()),
    ];
    for (what, command, take) in ways {
        // Warm-up: loads the scripts once, so NOSCRIPT reloads are not counted below.
        take(client.clone(), format!("warm:{what}")).await.release().await.unwrap();
        server.command(&["CONFIG", "RESETSTAT"]).unwrap();
        // What counting itself costs (the harness's own commands), with nothing in between.
        let idle = {
            let first = reads_processed(&server);
            reads_processed(&server) - first
        };
        let reads_before = reads_processed(&server);
        let mut held = Vec::new();
        for i in 0..TAKES {
            held.push(take(client.clone(), format!("{what}:{i}")).await);
        }
        let reads = reads_processed(&server) - reads_before - idle;
        let calls = command_calls(&server);
        assert_eq!(reads, TAKES, "{what}: {reads} reads for {TAKES} acquisitions: {calls:?}");
        assert_eq!(calls.get(command), Some(&TAKES), "{what}: {calls:?}");
        for sent in ["subscribe", "ssubscribe", "unsubscribe", "sunsubscribe", "script|load", "eval"] {
            assert_eq!(calls.get(sent), None, "{what} sent {sent}: {calls:?}");
        }
        for g in held {
            g.release().await.unwrap();
        }
    }
});
