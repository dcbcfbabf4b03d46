//! Running the release and leave scripts, which hand the lock on.

use std::time::{Duration, Instant};

use redis::Script;

use crate::core::error::{Operation, Result};
use crate::core::queued::queued_then;
use crate::redis::client::RedisClient;
use crate::redis::slot::{fair_entry_key, fair_queue_key, fence_key};

use super::early::EarlyHandoff;
use super::reply::PassOn;

/// The fair script's release or leave, with the client's notification settings.
///
/// **A waiter of this client is handed the lock by the reply.** Its queue entry names this
/// client (its [owner], set when it subscribed through the client), so the script
/// publishes no message for it, and its reply carries what the message would (ticket, attempt,
/// fencing number), which this function delivers to the waiter. That skips the message's trip
/// through the server and the subscriber connection (it reached the client ~15 us after the
/// reply at the median in W3, and was one more write for the server). A waiter of another
/// client, or one that polls, still gets the message. Safe as the message is (see the module
/// docs): both come from the same run of the script. If the reply is lost (the connection
/// drops after the script ran), the waiter finds the lock at its next attempt, a third of
/// the handoff window later at most.
///
/// **Refused while the slot moves.** During a slot migration every fair script gets
/// `TRYAGAIN` (it names keys that may be on either node); such a refusal (like the other
/// [topology errors](crate::redis::is_topology_in_motion)) means the script did not run, so it is
/// sent again, with backoff, for up to [`PASS_ON_RETRY`] (a release retried after the key
/// expired finds it gone, or another holder's, and changes nothing).
///
/// [owner]: super::waiter::NO_OWNER
pub(super) async fn run_pass_on(
    client: &RedisClient,
    script: &Script,
    key: &str,
    token: &str,
    ticket: Option<&str>,
    op: Operation,
    early: Option<Box<EarlyHandoff>>,
) -> Result<PassOn> {
    let (channel, publish) = client.release_notice(key);
    let keys = [
        key.to_string(),
        fair_queue_key(key),
        fair_entry_key(key, ""),
        fence_key(key),
    ];
    let owner = client.notifier().map_or("", |n| n.id());
    let sent = Instant::now();
    let retry_until = sent + PASS_ON_RETRY;
    // Boxed apart, and polled through the box in every arm below: moved into the arm's pin
    // instead, it was held twice in this future (the variable and the pinned copy), and the
    // release's boxed future passed 1 KiB (see `redis::client::release`'s `boxed_sizes`).
    let mut call = Box::pin(async {
        let mut pause = Duration::from_millis(5);
        loop {
            let reply = client
                .idempotent(op, |mut conn| {
                    let mut inv = script.prepare_invoke();
                    for k in &keys {
                        inv.key(k);
                    }
                    inv.arg(token).arg(&channel).arg(publish).arg(owner);
                    if let Some(t) = ticket {
                        inv.arg(t);
                    }
                    async move { inv.invoke_async::<redis::Value>(&mut conn).await }
                })
                .await;
            match reply {
                Err(e)
                    if crate::redis::error::is_topology_in_motion(&e)
                        && Instant::now() + pause < retry_until =>
                {
                    tracing::debug!(key, %op, error = %e, "fair script refused while the topology moves; retrying");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_millis(200));
                }
                other => break other,
            }
        }
    });
    let (reply, given) = match early {
        // On the calling thread's own socket the first poll writes the script (a system call,
        // tens of microseconds on 2 busy cores): the waiter is handed its lease first, so its
        // thread wakes meanwhile, and its acquisition returns once that poll is done
        // (`Tenure::written`). On the shared connection that poll queues the script (and,
        // with nothing else in flight, writes it: `Queue::write_through`), and comes first.
        // Either way the new holder sends nothing before this release's reply
        // (`Tenure::settled`): another socket's command may reach the server first.
        Some(early) if client.on_calling_thread_socket() => {
            let given = (*early).give(false);
            #[cfg(test)]
            tests::before_release_written(key);
            let (reply, ()) = queued_then(call.as_mut(), || {
                if let Some(given) = &given {
                    given.written();
                }
            })
            .await;
            (reply, given)
        }
        Some(early) => queued_then(call.as_mut(), || (*early).give(true)).await,
        None => (call.await, None),
    };
    let reply = reply?;
    let outcome = PassOn::parse(reply, op)?;
    if let Some(given) = given {
        match &outcome {
            PassOn::HandedOff { ticket, handoff } if *ticket == given.ticket => {
                given.confirm(sent, handoff.next.clone());
                return Ok(outcome);
            }
            _ => given.contradicted(&outcome),
        }
    }
    if let (PassOn::HandedOff { ticket, handoff }, Some(notifier)) = (&outcome, client.notifier())
        && notifier.hand_off_locally(ticket, handoff.clone())
    {
        // Let the new holder, just woken on this thread, run before the releaser goes on
        // (Go's sync.Mutex does the same in its starvation mode): otherwise it waits for
        // whatever the releaser does next, often its own next acquisition's round trip.
        tokio::task::yield_now().await;
    }
    Ok(outcome)
}

/// How long a release or leave of a fair lock keeps retrying a script refused while its slot
/// moves: the longest [entry lifetime](super::queue_entry_ttl).
const PASS_ON_RETRY: Duration = Duration::from_secs(10);

/// An early handoff made by a release on its calling thread's own socket: the waiter is handed
/// its lease before the release writes its script, and the new holder's own release waits for
/// that release's reply. The releasing thread is held between the handoff and its write (a
/// hook), and the new holder, which releases at once, must not be done meanwhile: without the
/// wait for `Tenure::settled` its release reaches the server before the script that hands it
/// the lock, fails as not held, and the lock stays with the new holder's token until it
/// expires (seen with threads that hold for no time, where the write was merely late).
#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use leasehold_harness::{Server, ServerOptions};

    use crate::core::driver::Driver;
    use crate::core::options::LockOptions;
    use crate::core::testing::until;
    use crate::redis::client::RedisClient;
    use crate::redis::slot::fair_queue_key;

    type Hook = Arc<dyn Fn(&str) + Send + Sync>;

    /// Run by a release on its calling thread's socket between its early handoff and the write
    /// of its script, by the lock's key (the tests of each server run side by side).
    static BEFORE_RELEASE_WRITTEN: Mutex<Vec<(String, Hook)>> = Mutex::new(Vec::new());

    /// Makes each key of these tests unique in the process.
    static KEYS: AtomicU64 = AtomicU64::new(0);

    pub(super) fn before_release_written(key: &str) {
        let hooks = BEFORE_RELEASE_WRITTEN
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let hook = hooks.iter().find(|(k, _)| k == key).map(|(_, h)| h.clone());
        drop(hooks);
        if let Some(hook) = hook {
            hook(key);
        }
    }

    // A round whose holder came to the lock by its own attempt rather than by the first
    // release's reply knows no next in line and hands over by its script alone: it proves
    // nothing, so another round is made, with a fresh key.
    leasehold_harness::server_test!(async fn a_lock_handed_over_early_is_released_only_after_the_release_that_handed_it(bin) {
        let server = Server::start(&bin, &ServerOptions::new()).unwrap();
        let client = RedisClient::connect(&server.url()).await.unwrap();
        // 10 s: the handoff window is the whole TTL (early handoffs need that).
        let opts = LockOptions::new(Duration::from_secs(10))
            .fair(true)
            .wait(Duration::from_secs(120));
        for _ in 0..10 {
            let n = KEYS.fetch_add(1, Ordering::Relaxed);
            let key: &'static str = Box::leak(format!("fair:early:calling-thread:{n}").into_boxed_str());
            let queued = || {
                let n = server.command(&["ZCARD", &fair_queue_key(key)]).unwrap();
                n.as_integer().unwrap()
            };
            // A holder handed the lock by a release, so that it knows its next in line.
            let first = client.try_acquire(key, &opts).await.unwrap().acquired().unwrap();
            let holder = tokio::spawn({
                let (client, opts) = (client.clone(), opts.clone());
                async move { client.acquire(key, &opts).await.unwrap() }
            });
            until("the holder queued", || queued() == 1).await;
            // The next in line releases as soon as it holds, and says when it holds and when
            // that release is done.
            let (done, told) = std::sync::mpsc::channel();
            let acquired = Arc::new(AtomicBool::new(false));
            let next = tokio::spawn({
                let (client, opts, acquired) = (client.clone(), opts.clone(), acquired.clone());
                async move {
                    let guard = client.acquire(key, &opts).await.unwrap();
                    acquired.store(true, Ordering::SeqCst);
                    let released = guard.release().await;
                    let _ = done.send(());
                    released
                }
            });
            until("both queued, offering early handoffs", || {
                queued() == 2 && client.early_handoff_offers(key) == 2
            })
            .await;
            first.release().await.unwrap();
            let holder = holder.await.unwrap();

            let (held, done_early) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
            let acquired_early = Arc::new(AtomicBool::new(false));
            let told = Mutex::new(told);
            let hook: Hook = Arc::new({
                let (held, done_early, acquired_early) =
                    (held.clone(), done_early.clone(), acquired_early.clone());
                move |k: &str| {
                    if k == key {
                        held.store(true, Ordering::SeqCst);
                        // The next holder's release is done if it says so within this.
                        let told = told.lock().unwrap().recv_timeout(Duration::from_millis(300));
                        done_early.store(told.is_ok(), Ordering::SeqCst);
                        acquired_early.store(acquired.load(Ordering::SeqCst), Ordering::SeqCst);
                    }
                }
            });
            BEFORE_RELEASE_WRITTEN.lock().unwrap().push((key.to_string(), hook));
            let runtime = tokio::runtime::Handle::current();
            let released = std::thread::spawn(move || {
                crate::blocking_call(|| runtime.block_on(holder.release()))
            })
            .join()
            .unwrap();
            BEFORE_RELEASE_WRITTEN.lock().unwrap().retain(|(k, _)| k != key);
            released.unwrap();
            let next_released = next.await.unwrap();
            if held.load(Ordering::SeqCst) {
                assert!(
                    !done_early.load(Ordering::SeqCst),
                    "the new holder's release was done before the release that handed it the lock was written: {next_released:?}"
                );
                // Handed the lock before the write, it returns only once the write is done
                // (`Tenure::written`), so that its thread does not hold the releaser's core.
                assert!(
                    !acquired_early.load(Ordering::SeqCst),
                    "the new holder's acquisition returned before the release that handed it the lock was written"
                );
            }
            next_released.expect("the new holder's release found its lock");
            let exists = server.command(&["EXISTS", key]).unwrap();
            assert_eq!(exists.as_integer(), Some(0), "the last release freed the lock");
            if held.load(Ordering::SeqCst) {
                return;
            }
        }
        panic!("no round's release made an early handoff on its thread's socket");
    });
}
