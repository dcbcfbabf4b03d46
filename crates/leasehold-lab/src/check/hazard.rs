//! The replication hazard every failover fault sets up before it kills a master: a lock that
//! only the master has, while the replica's own copy of the previous lock has run out.
//!
//! A failover at a random moment often finds the replica's copy of the last lock still
//! valid (the holder's release never reached it either), and then nothing overlaps. So the
//! checker waits for the bad moment on purpose: it freezes the replica, cuts its link, waits
//! until the lock the replica could know of has expired and a worker has just acquired a lock
//! the replica never heard of, and only then lets the caller kill the master. The caller must kill the
//! master *before* resuming the replica: a resumed replica reconnects and fetches the key.

use std::time::Duration;

use leasehold_harness::Server;

use super::faults::LOCK_KEY;
use super::worker::now_ms;

/// The lock key's token on `server`, if it answers within 200 ms.
pub(crate) fn token_on(server: &Server) -> Option<String> {
    server
        .command_timeout(&["GET", LOCK_KEY], Duration::from_millis(200))
        .ok()?
        .as_bytes()
        .map(|b| String::from_utf8_lossy(b).into_owned())
}

/// Freezes `replica` (SIGSTOP) and cuts its link (`CLIENT KILL TYPE replica` on `master`), so
/// that nothing more reaches it; then waits until the lock the replica may know of has expired
/// and a worker has just acquired the lock on `master` (a new token there: the holder with the
/// most of its lease and its work ahead of it), at most 4 TTLs after that; with
/// `--replica-ack` no such acquisition is confirmed, and the wait runs out. Leaves the
/// replica frozen.
///
/// Whatever the replica received, it received before the cut; every lock it can know of was
/// acquired before the cut, and (workers do not extend) expires at most one TTL later.
pub(crate) async fn cut_replica_and_wait(
    master: &Server,
    replica: &Server,
    ttl: Duration,
) -> anyhow::Result<()> {
    replica.pause()?;
    if let Err(e) = master.command(&["CLIENT", "KILL", "TYPE", "replica"]) {
        replica.resume()?;
        return Err(e.into());
    }
    let ttl_ms = ttl.as_secs_f64() * 1000.0;
    let replica_key_gone = now_ms() + ttl_ms + 5.0;
    while now_ms() < replica_key_gone {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    // Taken after the cut, so unknown to the replica; wait for the next one, which has all of
    // its lease ahead of it.
    let before = token_on(master);
    let deadline = replica_key_gone + 4.0 * ttl_ms;
    while now_ms() < deadline {
        let t = token_on(master);
        if t.is_some() && t != before {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    Ok(())
}
