//! Keys against real servers: one server (or cluster) per test, shared by all its cases.
//! Any key is accepted iff it is non-empty and at most MAX_KEY_LEN bytes; an accepted one is
//! held by our token with a validity left, released, and its slot (as the server computes
//! it) is that of every key derived from it.

use std::time::{Duration, Instant};

use leasehold::internal::{
    election_leader_key, rwlock_readers_key, rwlock_writer_waiting_key, semaphore_permits_key,
};
use leasehold::redis::{fair_entry_key, fair_queue_key, fence_key, release_channel};
use leasehold::{
    Backoff, Error, LockGuard, LockOptions, Locker, MAX_KEY_LEN, MAX_TTL, MIN_BACKOFF,
    MIN_RENEWED_TTL, MIN_TTL, TryAcquire,
};
use leasehold_harness::{Cluster, ClusterOptions, Server, ServerOptions};
use proptest::prelude::*;
use proptest::test_runner::TestRunner;

use super::keys::any_key;
use crate::config;

/// Only keeps a broken case from hanging the run.
const HANG_GUARD: Duration = Duration::from_secs(60);

/// Runs the async `case` on the current (multi-threaded) runtime from proptest's synchronous
/// runner.
fn block_on<F: std::future::Future>(case: F) -> F::Output {
    tokio::task::block_in_place(|| tokio::runtime::Handle::current().block_on(case))
}

fn get(server: &Server, key: &str) -> Option<String> {
    let v = server.command(&["GET", key]).expect("GET");
    v.as_bytes()
        .map(|b| String::from_utf8_lossy(b).into_owned())
}

/// TTLs: from below the minimum to the maximum and beyond; mostly long enough to be held.
fn ttl() -> impl Strategy<Value = Duration> {
    prop_oneof![
        1 => (0u64..20).prop_map(Duration::from_millis),
        4 => (10u64..=MAX_TTL.as_secs()).prop_map(Duration::from_secs),
        1 => Just(MAX_TTL),
        1 => Just(MAX_TTL + Duration::from_millis(1)),
    ]
}

/// One fenced `try_acquire` of `key` for `ttl` on a fresh key, checked against the server.
async fn acquire_and_release(
    server: &Server,
    client: &Locker,
    key: &str,
    ttl: Duration,
) -> Result<(), TestCaseError> {
    let options = LockOptions::new(ttl).fencing(true);
    let before = Instant::now();
    let result = tokio::time::timeout(HANG_GUARD, client.try_acquire(key, &options))
        .await
        .expect("try_acquire hangs");
    let after = Instant::now();
    let key_ok = !key.is_empty() && key.len() <= MAX_KEY_LEN;
    let guard = match result {
        Err(Error::InvalidArgument { what: "key", .. }) if !key_ok => return Ok(()),
        Err(Error::InvalidArgument { what: "ttl", .. })
            if key_ok && (ttl < leasehold::MIN_TTL || ttl > MAX_TTL) =>
        {
            prop_assert_eq!(get(server, key), None, "a refused acquisition left the key");
            return Ok(());
        }
        // A TTL shorter than the round trip plus the drift allowance: refused, not handed out.
        Err(Error::ExpiredOnArrival { .. }) if key_ok && ttl < Duration::from_secs(1) => {
            return Ok(());
        }
        Ok(TryAcquire::Acquired(guard)) if key_ok => guard,
        other => {
            prop_assert!(false, "key of {} bytes, ttl {ttl:?}: {other:?}", key.len());
            unreachable!()
        }
    };
    // Validity left: the guard's deadline is after the call began (the library refuses a grant
    // whose validity is over) and within the TTL of the call's end.
    prop_assert!(guard.valid_until() > before, "no validity left");
    prop_assert!(guard.valid_until() <= after + ttl);
    prop_assert_eq!(guard.key(), key);
    let fencing = guard.fencing_token().expect("fencing was asked for");
    if ttl < Duration::from_secs(10) {
        // A short lease may be over already: only the guard's own view is certain.
        let released = tokio::time::timeout(HANG_GUARD, guard.release())
            .await
            .expect("release hangs");
        prop_assert!(
            matches!(released, Ok(()) | Err(Error::NotHeld { .. })),
            "{released:?}"
        );
        prop_assert_eq!(get(server, key), None, "release left the key");
        return Ok(());
    }
    let held = get(server, key);
    prop_assert_eq!(held.as_deref(), Some(guard.token().expose()));
    prop_assert_eq!(get(server, &fence_key(key)), Some(fencing.to_string()));
    let pttl = server
        .command(&["PTTL", key])
        .unwrap()
        .as_integer()
        .unwrap();
    prop_assert!(
        pttl > 0 && pttl as u128 <= ttl.as_millis(),
        "PTTL {pttl} for {ttl:?}"
    );
    tokio::time::timeout(HANG_GUARD, guard.release())
        .await
        .expect("release hangs")
        .expect("release");
    prop_assert_eq!(get(server, key), None, "release left the key");
    // The next case may draw the same key: the fence counter stays (it only grows).
    Ok(())
}

leasehold_harness::server_test!(async fn any_key_is_validated_held_and_released(bin) {
    let server = Server::start(&bin, &ServerOptions::new()).expect("server starts");
    let client = Locker::connect(&server.url()).await.expect("client connects");
    let mut runner = TestRunner::new(config::cases(32));
    let result = runner.run(&(any_key(), ttl()), |(key, ttl)| {
        block_on(acquire_and_release(&server, &client, &key, ttl))
    });
    if let Err(e) = result {
        panic!("{e}");
    }
});

// The server's own CLUSTER KEYSLOT of every derived key equals that of the key. One flavor
// (the hash is the same code in all three), one single-master cluster, all cases.
leasehold_harness::server_test!(async fn derived_keys_share_the_key_slot_on_a_real_cluster(bin) {
    let cluster = Cluster::start(&bin, &ClusterOptions::new().masters(1).replicas_per_master(0))
        .expect("cluster starts");
    let mut runner = TestRunner::new(config::cases(32));
    let keys = any_key().prop_filter("valid", |k| !k.is_empty() && k.len() <= MAX_KEY_LEN);
    let result = runner.run(&keys, |key| {
        let slot = cluster.keyslot(&key).expect("CLUSTER KEYSLOT");
        prop_assert_eq!(leasehold::redis::key_slot(&key), slot, "{:?}", key);
        for name in [
            fence_key(&key),
            release_channel(&key),
            fair_queue_key(&key),
            fair_entry_key(&key, "1-abc"),
            semaphore_permits_key(&key),
            rwlock_readers_key(&key),
            rwlock_writer_waiting_key(&key),
            election_leader_key(&key),
        ] {
            prop_assert_eq!(cluster.keyslot(&name).expect("CLUSTER KEYSLOT"), slot, "{:?} of {:?}", name, key);
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
});

/// Commands the server has executed so far, but for the `INFO` that asks (`INFO commandstats`).
fn executed(server: &Server) -> u64 {
    let stats = server.info("commandstats").expect("INFO commandstats");
    stats
        .lines()
        .filter(|l| l.starts_with("cmdstat_") && !l.starts_with("cmdstat_info:"))
        .filter_map(|l| {
            l.split_once("calls=")?
                .1
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

/// Options around the contract's limits: TTL, auto-extension, first backoff delay, fencing.
fn options() -> impl Strategy<Value = LockOptions> {
    let ns = Duration::from_nanos(1);
    let ttl = proptest::sample::select(vec![
        Duration::ZERO,
        Duration::from_millis(2),
        MIN_TTL - ns,
        MIN_TTL,
        MIN_RENEWED_TTL - ns,
        MIN_RENEWED_TTL,
        Duration::from_secs(60),
        MAX_TTL,
        MAX_TTL + ns,
    ]);
    let initial = proptest::sample::select(vec![
        Duration::ZERO,
        MIN_BACKOFF - ns,
        MIN_BACKOFF,
        Duration::from_millis(10),
    ]);
    (ttl, any::<bool>(), initial, any::<bool>()).prop_map(|(ttl, auto_extend, initial, fencing)| {
        LockOptions::new(ttl)
            .auto_extend(auto_extend)
            .backoff(Backoff::new(initial, Duration::from_millis(50)))
            .fencing(fencing)
    })
}

/// Every acquisition path of the Redis client (but elections, see below).
const PATHS: &[&str] = &[
    "try_acquire",
    "acquire",
    "fair try_acquire",
    "fair acquire",
    "semaphore try_acquire",
    "semaphore acquire",
    "rwlock try_read",
    "rwlock read",
    "rwlock try_write",
    "rwlock write",
    "multi try_acquire",
    "multi acquire",
];

/// One attempt by `path` with `o` (where it waits, for `o`'s wait bound or else 5 s) on names
/// starting with `p`: the guard, or None when busy.
async fn acquire_by(
    c: &Locker,
    path: &str,
    p: &str,
    o: &LockOptions,
) -> Result<Option<LockGuard>, Error> {
    let bound = o.wait_bound().unwrap_or(Duration::from_secs(5));
    let waiting = o.clone().wait(bound);
    let fair = o.clone().fair(true);
    // Readers, permits and multi-key locks take no fencing number (refused as unsupported: not
    // what this checks).
    let unfenced = o.clone().fencing(false);
    let unfenced_waiting = unfenced.clone().wait(bound);
    match path {
        "try_acquire" => c
            .try_acquire(&format!("{p}:lock"), o)
            .await
            .map(TryAcquire::acquired),
        "acquire" => c.acquire(&format!("{p}:lock"), &waiting).await.map(Some),
        "fair try_acquire" => c
            .try_acquire(&format!("{p}:fair"), &fair)
            .await
            .map(TryAcquire::acquired),
        "fair acquire" => c
            .acquire(&format!("{p}:fair"), &fair.wait(bound))
            .await
            .map(Some),
        "semaphore try_acquire" => c
            .semaphore(&format!("{p}:sem"), 2)?
            .try_acquire(&unfenced)
            .await
            .map(TryAcquire::acquired),
        "semaphore acquire" => c
            .semaphore(&format!("{p}:sem"), 2)?
            .acquire(&unfenced_waiting)
            .await
            .map(Some),
        "rwlock try_read" => c
            .rwlock(&format!("{p}:rw"))?
            .try_read(&unfenced)
            .await
            .map(TryAcquire::acquired),
        "rwlock read" => c
            .rwlock(&format!("{p}:rw"))?
            .read(&unfenced_waiting)
            .await
            .map(Some),
        "rwlock try_write" => c
            .rwlock(&format!("{p}:rw"))?
            .try_write(o)
            .await
            .map(TryAcquire::acquired),
        "rwlock write" => c
            .rwlock(&format!("{p}:rw"))?
            .write(&waiting)
            .await
            .map(Some),
        "multi try_acquire" => c
            .as_redis()
            .unwrap()
            .multi_lock(&[format!("{p}:a"), format!("{p}:b")])?
            .try_acquire(&unfenced)
            .await
            .map(TryAcquire::acquired),
        "multi acquire" => c
            .as_redis()
            .unwrap()
            .multi_lock(&[format!("{p}:a"), format!("{p}:b")])?
            .acquire(&unfenced_waiting)
            .await
            .map(Some),
        other => unreachable!("{other}"),
    }
}

// The TTL contract on every acquisition path of the Redis client: options that `validate`
// refuses are refused as InvalidArgument before the server executes a single command (its own
// INFO commandstats say so); options it accepts are acquired (or expire on arrival, for a TTL
// of milliseconds) and released. Refused options go to a server of their own, which nothing
// else talks to: a valid case's background work (a release's handoff, a waiter's cleanup)
// cannot be counted against them.
leasehold_harness::server_test!(async fn every_acquisition_path_validates_before_sending(bin) {
    let server = Server::start(&bin, &ServerOptions::new()).expect("server starts");
    let client = Locker::connect(&server.url()).await.expect("client connects");
    let quiet = Server::start(&bin, &ServerOptions::new()).expect("server starts");
    let refused_only = Locker::connect(&quiet.url()).await.expect("client connects");
    let mut runner = TestRunner::new(config::cases(32));
    let result = runner.run(&(options(), proptest::sample::select(PATHS)), |(options, name)| {
        block_on(async {
            let valid = options.validate().is_ok();
            let (server, client) = if valid { (&server, &client) } else { (&quiet, &refused_only) };
            let before = executed(server);
            let result = tokio::time::timeout(HANG_GUARD, acquire_by(client, name, "p", &options))
                .await
                .expect("the acquisition hangs");
            match result {
                Err(Error::InvalidArgument { .. }) if !valid => {
                    prop_assert_eq!(executed(server), before, "{}: {:?} was refused after sending", name, options);
                }
                Ok(Some(guard)) if valid => {
                    let released = guard.release().await;
                    prop_assert!(matches!(released, Ok(()) | Err(Error::NotHeld { .. })), "{released:?}");
                }
                Err(Error::ExpiredOnArrival { .. }) if valid && options.ttl() < Duration::from_secs(1) => {}
                other => prop_assert!(false, "{name}: {options:?} (valid: {valid}): {other:?}"),
            }
            Ok(())
        })
    });
    if let Err(e) = result {
        panic!("{e}");
    }
});

// Elections renew their leader's lease (`campaign` turns auto_extend on), so the contract's
// renewed minimum applies: a TTL below MIN_RENEWED_TTL is refused whether or not the caller set
// auto_extend. It found that campaign validated the options as given, then turned auto_extend
// on (LockOptions::new(20 ms) was campaigned for and renewed every ~6.7 ms).
leasehold_harness::server_test!(async fn campaigns_refuse_ttls_too_short_to_renew(bin) {
    let quiet = Server::start(&bin, &ServerOptions::new()).expect("server starts");
    let client = Locker::connect(&quiet.url()).await.expect("client connects");
    let mut runner = TestRunner::new(config::cases(32));
    let result = runner.run(&options(), |options| {
        block_on(async {
            let renewed = options.clone().auto_extend(true).fencing(true);
            let election = client.election("p:election").expect("election");
            let result = tokio::time::timeout(HANG_GUARD, election.campaign("me", &options))
                .await
                .expect("the campaign hangs");
            match result {
                Err(Error::InvalidArgument { .. }) if renewed.validate().is_err() => {}
                Ok(leader) if renewed.validate().is_ok() => {
                    let _ = leader.release().await;
                }
                Err(Error::ExpiredOnArrival { .. }) if options.ttl() < Duration::from_secs(1) => {}
                other => prop_assert!(false, "{options:?}: {other:?}"),
            }
            Ok(())
        })
    });
    if let Err(e) = result {
        panic!("{e}");
    }
});

// Any wait bound and hold cap, up to Duration::MAX, on a free lock: no panic; the lock is
// taken and released. It found that the deadline (`begun + wait`) and the renewal's stop time
// (`started + max_hold`), Instant + Duration sums, panicked past the clock's range
// (LockOptions::new(60 s).wait(Duration::MAX): "overflow when adding duration to instant"); a
// wait or cap over a century is now taken as a century.
leasehold_harness::server_test!(async fn any_wait_and_hold_cap_is_taken(bin) {
    let server = Server::start(&bin, &ServerOptions::new()).expect("server starts");
    let client = Locker::connect(&server.url()).await.expect("client connects");
    let mut runner = TestRunner::new(config::cases(32));
    let bounds = (crate::properties::options::any_duration(), proptest::option::of(crate::properties::options::any_duration()));
    let n = std::sync::atomic::AtomicUsize::new(0);
    let result = runner.run(&(bounds, proptest::sample::select(PATHS)), |((wait, max_hold), path)| {
        // Fresh names: a case that panicked holding a lock must not make the next one busy.
        let names = format!("w{}", n.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
        let mut options = LockOptions::new(Duration::from_secs(60)).auto_extend(true).wait(wait);
        if let Some(cap) = max_hold {
            options = options.max_hold(cap);
        }
        block_on(async {
            // A panic fails the case (proptest catches it, and shrinks).
            match acquire_by(&client, path, &names, &options).await {
                Ok(Some(guard)) => {
                    guard.release().await.expect("release");
                }
                other => prop_assert!(false, "{path}: {options:?}: {other:?}"),
            }
            Ok(())
        })
    });
    if let Err(e) = result {
        panic!("{e}");
    }
});

// Any connect and response timeouts, up to Duration::MAX, of a client of a live server: it
// connects, takes and releases a lock (no panic: the timeouts bound waits, they are not added
// to instants that overflow).
leasehold_harness::server_test!(async fn any_client_timeouts_work(bin) {
    let server = Server::start(&bin, &ServerOptions::new()).expect("server starts");
    let mut runner = TestRunner::new(config::cases(16));
    let timeout = || prop_oneof![Just(Duration::MAX), (1u64..u64::MAX).prop_map(Duration::from_secs), (50u64..10_000).prop_map(Duration::from_millis)];
    let result = runner.run(&(timeout(), timeout()), |(connect, response)| {
        block_on(async {
            let options = leasehold::ClientOptions::new().connect_timeout(connect).response_timeout(response);
            let client = tokio::time::timeout(HANG_GUARD, Locker::connect_with(&server.url(), options))
                .await
                .expect("connecting hangs")
                .map_err(|e| TestCaseError::fail(format!("{connect:?}/{response:?}: {e}")))?;
            let guard = client
                .try_acquire("t", &LockOptions::new(Duration::from_secs(60)))
                .await
                .map_err(|e| TestCaseError::fail(e.to_string()))?
                .acquired()
                .expect("a free lock");
            guard.release().await.map_err(|e| TestCaseError::fail(e.to_string()))?;
            Ok(())
        })
    });
    if let Err(e) = result {
        panic!("{e}");
    }
});

/// Three databases of one live server, as Redlock nodes.
fn redlock_nodes(server: &Server) -> Vec<String> {
    let base = server.url();
    let base = base.trim_end_matches('/');
    (0..3).map(|db| format!("{base}/{db}")).collect()
}

/// What one Redlock attempt on a free key gave.
#[derive(Debug)]
enum Attempt {
    /// Taken (and released).
    Taken,
    /// Said to be busy.
    Busy,
    /// Failed.
    Failed(Error),
}

/// One Redlock `try_acquire` of a free `key` for 60 s with `options`; a guard is released.
async fn redlock_try(
    nodes: &[String],
    options: leasehold::redlock::RedlockOptions,
    key: &str,
) -> Result<Attempt, TestCaseError> {
    let nodes: Vec<&str> = nodes.iter().map(String::as_str).collect();
    let redlock = tokio::time::timeout(
        HANG_GUARD,
        leasehold::redlock::Redlock::connect(&nodes, options),
    )
    .await
    .expect("connecting hangs")
    .map(Locker::from)
    .map_err(|e| TestCaseError::fail(e.to_string()))?;
    let ttl = LockOptions::new(Duration::from_secs(60));
    let attempt = tokio::time::timeout(HANG_GUARD, redlock.try_acquire(key, &ttl))
        .await
        .expect("acquiring hangs");
    Ok(match attempt {
        Ok(TryAcquire::Acquired(guard)) => {
            guard
                .release()
                .await
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            Attempt::Taken
        }
        Ok(TryAcquire::Busy { .. }) => Attempt::Busy,
        Err(e) => Attempt::Failed(e),
    })
}

// Redlock with any per-node timeout and any drift factor (NaN, infinities, negatives) whose
// allowance leaves a lease (floor up to 5 s: at most 35 s of a 60 s TTL), over three databases
// of one live server: no panic, and a free lock is taken and released.
leasehold_harness::server_test!(async fn any_redlock_settings_take_a_free_lock(bin) {
    let server = Server::start(&bin, &ServerOptions::new()).expect("server starts");
    let nodes = redlock_nodes(&server);
    let mut runner = TestRunner::new(config::cases(16));
    let timeout = prop_oneof![Just(Duration::MAX), (50u64..10_000).prop_map(Duration::from_millis), (1u64..u64::MAX).prop_map(Duration::from_secs)];
    let factor = prop_oneof![Just(f64::NAN), Just(f64::INFINITY), Just(-1.0), 0.0f64..0.6];
    let n = std::sync::atomic::AtomicUsize::new(0);
    let result = runner.run(&(timeout, factor, 0u64..5_000), |(timeout, factor, floor)| {
        let key = format!("r{}", n.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
        let options = leasehold::redlock::RedlockOptions::new().node_timeout(timeout).drift(factor, Duration::from_millis(floor));
        let attempt = block_on(redlock_try(&nodes, options, &key))?;
        prop_assert!(matches!(attempt, Attempt::Taken), "{timeout:?} {factor} {floor} ms: {attempt:?}");
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
});

// A drift allowance of the whole TTL or more leaves no lease: the attempt cannot succeed, and
// should say so as the single-node client does (ExpiredOnArrival), or be refused as an invalid
// setting. It found that Redlock answered Busy { remaining: None } for a free lock (the CLI said
// "the lock is busy").
leasehold_harness::server_test!(async fn redlock_without_validity_is_not_busy(bin) {
    let server = Server::start(&bin, &ServerOptions::new()).expect("server starts");
    let nodes = redlock_nodes(&server);
    let mut runner = TestRunner::new(config::cases(8));
    let floor = prop_oneof![Just(Duration::MAX), (60u64..1_000_000).prop_map(Duration::from_secs)];
    let n = std::sync::atomic::AtomicUsize::new(0);
    let result = runner.run(&floor, |floor| {
        let key = format!("v{}", n.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
        let options = leasehold::redlock::RedlockOptions::new().drift(0.01, floor);
        match block_on(redlock_try(&nodes, options, &key))? {
            Attempt::Failed(Error::ExpiredOnArrival { .. } | Error::InvalidArgument { .. }) => {}
            other => prop_assert!(false, "drift floor {floor:?}: {other:?}"),
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
});

// Building a multi-key lock, a semaphore or a read-write lock (no round trip) over any names:
// refused as InvalidArgument exactly when the docs say (no key, more than MAX_MULTI_KEYS, an
// invalid or repeated key; permits outside 1 ..= MAX_PERMITS), and a multi-key lock keeps its
// keys, in some order.
leasehold_harness::server_test!(async fn primitives_accept_exactly_the_documented_names(bin) {
    let server = Server::start(&bin, &ServerOptions::new()).expect("server starts");
    let client = Locker::connect(&server.url()).await.expect("client connects");
    let mut runner = TestRunner::new(config::cases(256));
    let keys = prop_oneof![
        proptest::collection::vec(any_key(), 0..6),
        proptest::collection::vec("[a-c]{1,2}", 0..6),
        (1..=leasehold::redis::MAX_MULTI_KEYS + 1).prop_map(|n| (0..n).map(|i| format!("k{i}")).collect()),
    ];
    let permits = prop_oneof![Just(0u32), Just(leasehold::MAX_PERMITS + 1), Just(u32::MAX), 1..=leasehold::MAX_PERMITS];
    let result = runner.run(&(keys, permits), |(keys, permits)| {
        let valid = |k: &String| !k.is_empty() && k.len() <= MAX_KEY_LEN;
        let distinct = keys.iter().collect::<std::collections::HashSet<_>>().len() == keys.len();
        let ok = !keys.is_empty() && keys.len() <= leasehold::redis::MAX_MULTI_KEYS && keys.iter().all(valid) && distinct;
        match client.as_redis().unwrap().multi_lock(&keys) {
            Ok(multi) => {
                prop_assert!(ok, "{keys:?} accepted");
                let mut got = multi.keys().to_vec();
                let mut want = keys.clone();
                got.sort();
                want.sort();
                prop_assert_eq!(got, want);
            }
            Err(Error::InvalidArgument { .. }) => prop_assert!(!ok, "{keys:?} refused"),
            Err(e) => prop_assert!(false, "{e:?}"),
        }
        let name = keys.first().cloned().unwrap_or_default();
        let permits_ok = (1..=leasehold::MAX_PERMITS).contains(&permits);
        match client.semaphore(&name, permits) {
            Ok(s) => prop_assert!(valid(&name) && permits_ok && s.permits() == permits),
            Err(Error::InvalidArgument { .. }) => prop_assert!(!valid(&name) || !permits_ok),
            Err(e) => prop_assert!(false, "{e:?}"),
        }
        match client.rwlock(&name) {
            Ok(_) => prop_assert!(valid(&name)),
            Err(Error::InvalidArgument { .. }) => prop_assert!(!valid(&name)),
            Err(e) => prop_assert!(false, "{e:?}"),
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
});
