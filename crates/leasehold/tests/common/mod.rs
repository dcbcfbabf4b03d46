//! Shared test helpers: a real server per test, a client on it, and state-observing waits.
#![allow(dead_code)]

use std::time::Duration;

/// Held by the heaviest tests (5-node Redlock with crashes, 10 000 renewed leases), so that
/// no two of them share the machine's two cores: they would measure the machine, not us.
pub static HEAVY: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

use leasehold::redis::RedisClient;
use leasehold::{ClientOptions, Locker};
use leasehold_harness::{Server, ServerBinary, ServerOptions};

/// A fresh server of `bin` and a locker (over a Redis client) connected to it.
pub async fn start(bin: &ServerBinary) -> (Server, Locker) {
    start_with(bin, ClientOptions::new()).await
}

/// A fresh server of `bin` and a locker over a Redis client with `options`.
pub async fn start_with(
    bin: &ServerBinary,
    options: impl Into<leasehold::redis::RedisOptions>,
) -> (Server, Locker) {
    let server = Server::start(bin, &ServerOptions::new()).expect("server starts");
    let client = RedisClient::connect_with(&server.url(), options)
        .await
        .expect("client connects");
    (server, Locker::from(client))
}

/// A raw GET through the harness's own connection (independent of the library).
pub fn get(server: &Server, key: &str) -> Option<String> {
    let v = server.command(&["GET", key]).expect("GET");
    v.as_bytes()
        .map(|b| String::from_utf8_lossy(b).into_owned())
}

/// PTTL through the harness.
pub fn pttl(server: &Server, key: &str) -> i64 {
    server
        .command(&["PTTL", key])
        .expect("PTTL")
        .as_integer()
        .expect("integer")
}

/// Waits until `key` is gone, observing the server (not sleeping and hoping). `bound` only
/// keeps a broken test from hanging; it is far above what the event needs.
pub async fn until_absent(server: &Server, key: &str, bound: Duration) {
    until_exists(server, key, false, bound).await
}

/// Waits until `key` exists, observing the server.
pub async fn until_present(server: &Server, key: &str, bound: Duration) {
    until_exists(server, key, true, bound).await
}

async fn until_exists(server: &Server, key: &str, want: bool, bound: Duration) {
    let start = std::time::Instant::now();
    loop {
        let n = server
            .command(&["EXISTS", key])
            .expect("EXISTS")
            .as_integer()
            .expect("integer");
        if (n == 1) == want {
            return;
        }
        assert!(
            start.elapsed() < bound,
            "{key}: exists={} still after {bound:?}",
            n == 1
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A generous bound for events that take milliseconds, for a noisy 2-core machine.
pub const GENEROUS: Duration = Duration::from_secs(20);

/// Loads every script the library uses, so that `INFO commandstats` counts one call per
/// operation: an `EVALSHA` refused with NOSCRIPT is counted as a call too, and the reload that
/// follows it would make "the operation ran" indistinguishable from "it was refused".
pub fn preload_scripts(server: &Server) {
    use leasehold::internal::*;
    for script in [
        ACQUIRE_LUA,
        RELEASE_LUA,
        RELEASE_NOTIFY_LUA,
        EXTEND_LUA,
        REDLOCK_ACQUIRE_LUA,
        RAISE_FENCE_LUA,
        FENCED_WRITE_LUA,
    ] {
        let reply = server
            .command(&["SCRIPT", "LOAD", script])
            .expect("SCRIPT LOAD");
        assert!(!reply.is_error(), "{reply:?}");
    }
}

/// Calls of `cmd` so far, from the server's own counters (`INFO commandstats`).
pub fn calls(server: &Server, cmd: &str) -> u64 {
    let stats = server.info("commandstats").expect("INFO commandstats");
    stats
        .lines()
        .find_map(|l| {
            l.strip_prefix(&format!("cmdstat_{cmd}:"))?
                .split(',')
                .next()?
                .strip_prefix("calls=")?
                .parse()
                .ok()
        })
        .unwrap_or(0)
}

/// Waits until `cond` holds, observing state every 10 ms (never a fixed sleep). The 60 s bound
/// only keeps a broken test from hanging.
pub async fn until(what: &str, mut cond: impl FnMut() -> bool) {
    let bound = Duration::from_secs(60);
    let start = std::time::Instant::now();
    while !cond() {
        assert!(start.elapsed() < bound, "{what}: not after {bound:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
