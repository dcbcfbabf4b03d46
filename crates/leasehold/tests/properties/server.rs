//! Keys against real servers: one server (or cluster) per test, shared by all its cases.
//! Any key is accepted iff it is non-empty and at most MAX_KEY_LEN bytes; an accepted one is
//! held by our token with a validity left, released, and its slot (as the server computes
//! it) is that of every key derived from it.

use std::time::{Duration, Instant};

use leasehold::internal::{
    election_leader_key, rwlock_readers_key, rwlock_writer_waiting_key, semaphore_permits_key,
};
use leasehold::{
    Error, LockClient, LockOptions, MAX_KEY_LEN, MAX_TTL, TryAcquire, fair_entry_key,
    fair_queue_key, fence_key, release_channel,
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
    client: &LockClient,
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
    let client = LockClient::connect(&server.url()).await.expect("client connects");
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
leasehold_harness::server_test!([valkey9] async fn derived_keys_share_the_key_slot_on_a_real_cluster(bin) {
    let cluster = Cluster::start(&bin, &ClusterOptions::new().masters(1).replicas_per_master(0))
        .expect("cluster starts");
    let mut runner = TestRunner::new(config::cases(32));
    let keys = any_key().prop_filter("valid", |k| !k.is_empty() && k.len() <= MAX_KEY_LEN);
    let result = runner.run(&keys, |key| {
        let slot = cluster.keyslot(&key).expect("CLUSTER KEYSLOT");
        prop_assert_eq!(leasehold::key_slot(&key), slot, "{:?}", key);
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
