//! Issue 24: grants that arrive after their lease's validity ended are given back and tried
//! again after the backoff, on every primitive, never in a spin.
//!
//! Every reply is held back (a [`SlowLink`] in front of the real server) for longer than the
//! lease is valid, so every grant expires on arrival. Before the fix the plain lock, the
//! semaphore, the read-write lock, the multi-lock and the election retried such a grant at once
//! (the holder's "remaining lease" was taken as zero), and the fair lock after 1 ms: about as many
//! attempts as round trips fit in the wait (`leasehold run KEY --ttl 2ms` hammered the server
//! with ~2 500 a second). Now each retry waits the backoff, so the attempts are bounded by the
//! wait over the backoff's shortest pause. The reply delay is a twentieth of the backoff, so a
//! spin makes about ten times the attempts the bound allows.

use std::future::Future;
use std::time::Duration;

use leasehold::{Backoff, Error, LockGuard, LockOptions, Locker, MIN_RENEWED_TTL, MIN_TTL};
use leasehold_harness::{Server, ServerOptions, SlowLink};

/// Only keeps a broken build from hanging.
const HANG_GUARD: Duration = Duration::from_secs(120);

/// Options whose every grant expires on arrival behind a link that holds replies back by
/// `delay` (longer than the lease's validity), with a constant backoff of 20 delays and a wait
/// of 40 delays.
fn late(ttl: Duration, delay: Duration) -> LockOptions {
    assert!(delay > ttl - leasehold::clock_drift(ttl));
    LockOptions::new(ttl)
        .backoff(Backoff::constant(delay * 20))
        .wait(delay * 40)
}

/// Runs a waiting acquisition whose grants all expire on arrival: it ends `NotAcquired` at its
/// deadline, after more than one attempt (it did retry) and no more than the backoff allows.
async fn retried_with_backoff(
    what: &str,
    options: &LockOptions,
    acquire: impl Future<Output = leasehold::Result<LockGuard>>,
) {
    let result = tokio::time::timeout(HANG_GUARD, acquire)
        .await
        .unwrap_or_else(|_| panic!("{what}: hung"));
    let attempts = match result {
        Err(Error::NotAcquired { attempts, .. }) => attempts,
        Ok(g) => panic!(
            "{what}: a grant that arrived too late was kept (held: {})",
            g.is_held()
        ),
        Err(e) => panic!("{what}: expected NotAcquired, got {e:?}"),
    };
    let wait = options.wait_bound().unwrap();
    let shortest_pause = options.backoff_policy().initial() / 2;
    let bound = 2 + (wait.as_millis() / shortest_pause.as_millis()) as u32;
    assert!(attempts >= 2, "{what}: never retried ({attempts} attempt)");
    assert!(
        attempts <= bound,
        "{what}: {attempts} attempts in {wait:?}, more than the {bound} the backoff allows: grants \
         that expired on arrival were retried without it"
    );
}

leasehold_harness::server_test!(async fn grants_that_expire_on_arrival_are_retried_after_the_backoff(bin) {
    let server = Server::start(&bin, &ServerOptions::new()).unwrap();
    let link = SlowLink::start(server.addr()).unwrap();
    let client = Locker::connect(&link.url()).await.unwrap();
    let delay = Duration::from_millis(25);
    let sem = client.semaphore("late:sem", 2).unwrap();
    let rw = client.rwlock("late:rw").unwrap();
    let multi = client.as_redis().unwrap().multi_lock(&["late:m1", "late:m2"]).unwrap();
    let election = client.election("late:election").unwrap();
    link.set_reply_delay(delay);

    let options = late(MIN_TTL, delay);
    retried_with_backoff("lock", &options, client.acquire("late:lock", &options)).await;
    let fair = options.clone().fair(true);
    retried_with_backoff("fair lock", &fair, client.acquire("late:fair", &fair)).await;
    retried_with_backoff("semaphore", &options, sem.acquire(&options)).await;
    retried_with_backoff("read lock", &options, rw.read(&options)).await;
    retried_with_backoff("write lock", &options, rw.write(&options)).await;
    retried_with_backoff("multi-lock", &options, multi.acquire(&options)).await;
    // An election renews its term: its TTL is at least MIN_RENEWED_TTL.
    let delay = MIN_RENEWED_TTL + Duration::from_millis(10);
    link.set_reply_delay(delay);
    let options = late(MIN_RENEWED_TTL, delay);
    retried_with_backoff("election", &options, election.campaign("me", &options)).await;
    link.set_reply_delay(Duration::ZERO);
    // Every late grant was given back: nothing is left held.
    for key in ["late:lock", "late:fair", "late:m1", "late:m2"] {
        assert_eq!(server.command(&["EXISTS", key]).unwrap().as_integer(), Some(0), "{key}");
    }
});
