//! One round trip per operation, proven by the server's own command counters: acquire is one
//! command (one script with fencing), release one, extend one, and capability detection happens
//! once per connection, never per call.

use std::collections::BTreeMap;
use std::time::Duration;

use leasehold::redis::{ExtendStrategy, ReleaseStrategy};
use leasehold::{LockOptions, Locker};
use leasehold_harness::Server;

const CYCLES: u64 = 1000;

/// The server's counters, read over one connection of its own, kept open. The harness's
/// commands each open and close a connection, and the server counts a read event for each
/// close whenever it gets to it, which may fall inside a count.
struct Counters(redis::aio::MultiplexedConnection);

impl Counters {
    async fn open(server: &Server) -> Self {
        let client = redis::Client::open(server.url()).unwrap();
        Counters(client.get_multiplexed_async_connection().await.unwrap())
    }

    async fn info(&mut self, section: &str) -> String {
        redis::cmd("INFO")
            .arg(section)
            .query_async(&mut self.0)
            .await
            .unwrap()
    }

    async fn reset(&mut self) {
        let () = redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query_async(&mut self.0)
            .await
            .unwrap();
    }

    /// calls per command from `INFO commandstats`, leaving out our own INFO/CONFIG.
    async fn calls(&mut self) -> BTreeMap<String, u64> {
        let text = self.info("commandstats").await;
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

    /// Read events on the server's sockets so far; reading them is one more.
    async fn reads(&mut self) -> u64 {
        let text = self.info("stats").await;
        text.lines()
            .find_map(|l| {
                l.strip_prefix("total_reads_processed:")?
                    .trim()
                    .parse()
                    .ok()
            })
            .expect("total_reads_processed")
    }
}

// With release notifications off, every operation is exactly one command; so it is with them
// on where waiters track their keys (the default on one server): the key's invalidation wakes
// them. With notifications on and tracking off, a release is the conditional delete plus a
// PUBLISH in the same round trip: the PUBLISH is pipelined with DELEX/DELIFEQ or runs inside
// the release script. With the lock history recorded (issue 32, target 3), acquire and release
// are still one command each: the recorded scripts append the events inside the server, with
// no round trip of their own.
leasehold_harness::server_test!(async fn one_command_per_operation(bin) {
    let server = leasehold_harness::Server::start(&bin, &leasehold_harness::ServerOptions::new()).unwrap();
    for (notify, track) in [(false, false), (true, false), (true, true)] {
        let client = leasehold::redis::RedisClient::connect_with(
            &server.url(),
            leasehold::redis::RedisOptions::new().notify_waiters(notify).track_waiters(track),
        )
        .await
        .map(Locker::from)
        .unwrap();
        assert_eq!(client.as_redis().unwrap().server().can_track, notify && track);
        // What a release sends besides its delete: a PUBLISH, unless waiters track the key.
        let notify = notify && !track;
        let recording = client
            .clone()
            .with_history(leasehold::HistoryOptions::new())
            .unwrap();
        for fencing in [false, true] {
            let mode = Mode { notify, fencing, history: false };
            check_cycles(&server, &client, mode, &bin.label()).await;
            let mode = Mode { history: true, ..mode };
            check_cycles(&server, &recording, mode, &bin.label()).await;
        }
    }
});

/// What [`check_cycles`] runs with: releases that publish, fencing, the history recorded.
#[derive(Debug, Clone, Copy)]
struct Mode {
    notify: bool,
    fencing: bool,
    history: bool,
}

async fn check_cycles(server: &Server, client: &Locker, mode: Mode, label: &str) {
    let mut counters = Counters::open(server).await;
    let Mode {
        notify,
        fencing,
        history,
    } = mode;
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

    counters.reset().await;
    let reads_before = counters.reads().await;
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
    let reads = counters.reads().await - reads_before;
    assert!(
        reads <= 3 * CYCLES + CYCLES / 100,
        "{reads} reads for {CYCLES} cycles ({mode:?})"
    );
    let calls = counters.calls().await;

    // What the client sends: one command per operation, plus the pipelined PUBLISH of a
    // notifying native release. Commands that a script runs inside the server are counted by
    // commandstats too; they are listed separately.
    // The recorded acquisition's append: the event, the retention's trim, the stream's expiry
    // (a recorded release leaves the trim to the next acquisition).
    const APPEND: [&str; 3] = ["xadd", "xtrim", "pexpire"];
    let (acquire, acquire_inner): (&str, Vec<&str>) = match (fencing, history) {
        // The script reads the counter first: past 2^53 it issues no number.
        (true, false) => ("evalsha", vec!["get", "set", "incr"]),
        (true, true) => ("evalsha", [&["get", "set", "incr"][..], &APPEND].concat()),
        (false, true) => ("evalsha", [&["set"][..], &APPEND].concat()),
        (false, false) => ("set", vec![]),
    };
    let (extend, extend_inner): (&str, &[&str]) = match redis.extend_strategy() {
        ExtendStrategy::SetIfEq => ("set", &[]),
        _ => ("evalsha", &["get", "pexpire"]),
    };
    let (release, release_inner, pipelined): (&str, Vec<&str>, &[&str]) =
        match (redis.release_strategy(), notify) {
            // The recorded release deletes with the server's own compare-and-delete.
            (strategy, _) if history => {
                let mut inner = match strategy {
                    ReleaseStrategy::DelEx => vec!["delex"],
                    ReleaseStrategy::DelIfEq => vec!["delifeq"],
                    _ => vec!["get", "del"],
                };
                inner.extend(notify.then_some("publish"));
                inner.extend(["xadd", "pexpire"]);
                ("evalsha", inner, &[])
            }
            (ReleaseStrategy::DelEx, false) => ("delex", vec![], &[]),
            (ReleaseStrategy::DelEx, true) => ("delex", vec![], &["publish"]),
            (ReleaseStrategy::DelIfEq, false) => ("delifeq", vec![], &[]),
            (ReleaseStrategy::DelIfEq, true) => ("delifeq", vec![], &["publish"]),
            (_, false) => ("evalsha", vec!["get", "del"], &[]),
            (_, true) => ("evalsha", vec!["get", "del", "publish"], &[]),
        };
    let mut expected = BTreeMap::new();
    let mut inner_total = 0;
    for name in [acquire, extend, release].iter().chain(pipelined) {
        *expected.entry(name.to_string()).or_insert(0) += CYCLES;
    }
    for name in [&acquire_inner[..], extend_inner, &release_inner[..]].concat() {
        *expected.entry(name.to_string()).or_insert(0) += CYCLES;
        inner_total += CYCLES;
    }
    let total: u64 = calls.values().sum();
    let sent = (3 + pipelined.len() as u64) * CYCLES;
    assert_eq!(total - inner_total, sent, "{mode:?}: {calls:?}");
    assert_eq!(calls, expected, "{mode:?} on {label}");
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
    let mut counters = Counters::open(&server).await;
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
        counters.reset().await;
        let reads_before = counters.reads().await;
        let mut held = Vec::new();
        for i in 0..TAKES {
            held.push(take(client.clone(), format!("{what}:{i}")).await);
        }
        // Less the read of the counters themselves.
        let reads = counters.reads().await - reads_before - 1;
        let calls = counters.calls().await;
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
