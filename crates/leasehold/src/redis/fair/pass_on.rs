//! Running the release and leave scripts, which hand the lock on.

use std::time::{Duration, Instant};

use redis::Script;

use crate::core::error::{Operation, Result};
use crate::redis::client::RedisClient;
use crate::redis::connection::queued_then;
use crate::redis::slot::{fair_entry_key, fair_queue_key, fence_key};

use super::early::{EarlyHandoff, GivenEarly};
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
    early: Option<EarlyHandoff>,
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
    let call = async {
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
    };
    let (reply, given) = match early {
        // On the calling thread's own socket the first poll writes the script (a system call,
        // tens of microseconds on 2 busy cores): the waiter is handed its lease first, so its
        // thread wakes meanwhile, and its acquire returns only once the script is out
        // (`GivenEarly::release_sent`), so its commands still follow it. On the shared
        // connection that poll only queues the script, and comes first: a waiter woken before
        // it would find the script not yet out and sleep again.
        Some(early) if client.on_calling_thread_socket() => {
            let mut given = early.give();
            #[cfg(test)]
            tests::before_release_sent(key);
            let (reply, ()) = queued_then(call, || {
                given.iter_mut().for_each(GivenEarly::release_sent);
            })
            .await;
            (reply, given)
        }
        Some(early) => {
            let given = || {
                early.give().map(|mut given| {
                    given.release_sent();
                    given
                })
            };
            queued_then(call, given).await
        }
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
/// its lease before the release's first poll writes the script, and its acquire returns only
/// once that poll is done. The release is held between the two (a hook), and the waiter's
/// acquire must not return meanwhile: without the wait for `GivenEarly::release_sent` it
/// returns at once, and the new holder's commands (its release, say) could reach the server
/// before the script that hands it the lock.
#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    use leasehold_harness::{Server, ServerOptions};

    use crate::core::driver::Driver;
    use crate::core::options::LockOptions;
    use crate::redis::client::RedisClient;
    use crate::redis::slot::fair_queue_key;

    type Hook = Arc<dyn Fn(&str) + Send + Sync>;

    /// Run by a release on its calling thread's socket between its early handoff and its first
    /// poll, with the lock's key.
    static BEFORE_RELEASE_SENT: Mutex<Option<Hook>> = Mutex::new(None);

    pub(super) fn before_release_sent(key: &str) {
        let hook = BEFORE_RELEASE_SENT
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        if let Some(hook) = hook {
            hook(key);
        }
    }

    /// Waits until `cond` holds (observed state), or fails after a minute.
    async fn until(what: &str, mut cond: impl FnMut() -> bool) {
        let start = Instant::now();
        while !cond() {
            assert!(start.elapsed() < Duration::from_secs(60), "never: {what}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    leasehold_harness::server_test!(async fn an_early_handoff_from_a_calling_thread_returns_once_the_release_is_out(bin) {
        let server = Server::start(&bin, &ServerOptions::new()).unwrap();
        let client = RedisClient::connect(&server.url()).await.unwrap();
        let key = "fair:early:calling-thread";
        // 10 s: the handoff window is the whole TTL (early handoffs need that).
        let opts = LockOptions::new(Duration::from_secs(10))
            .fair(true)
            .wait(Duration::from_secs(120));
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
        let (returned, told) = std::sync::mpsc::channel();
        let next = tokio::spawn({
            let (client, opts) = (client.clone(), opts.clone());
            async move {
                let guard = client.acquire(key, &opts).await.unwrap();
                let _ = returned.send(());
                guard
            }
        });
        until("both queued, offering early handoffs", || {
            queued() == 2 && client.early_handoff_offers(key) == 2
        })
        .await;
        first.release().await.unwrap();
        let holder = holder.await.unwrap();

        let (held, returned_early) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
        let told = Mutex::new(told);
        *BEFORE_RELEASE_SENT.lock().unwrap() = Some(Arc::new({
            let (held, returned_early) = (held.clone(), returned_early.clone());
            move |k: &str| {
                if k == key {
                    held.store(true, Ordering::SeqCst);
                    // The waiter's acquire has returned if it says so within this.
                    let told = told.lock().unwrap().recv_timeout(Duration::from_millis(300));
                    returned_early.store(told.is_ok(), Ordering::SeqCst);
                }
            }
        }));
        let runtime = tokio::runtime::Handle::current();
        let released = std::thread::spawn(move || {
            crate::blocking_call(|| runtime.block_on(holder.release()))
        })
        .join()
        .unwrap();
        *BEFORE_RELEASE_SENT.lock().unwrap() = None;
        released.unwrap();
        assert!(held.load(Ordering::SeqCst), "the release made no early handoff on its thread's socket");
        assert!(
            !returned_early.load(Ordering::SeqCst),
            "the waiter's acquire returned before the release's script was out"
        );
        let next = next.await.unwrap();
        assert!(next.is_held());
        let holds = server.command(&["GET", key]).unwrap();
        assert_eq!(holds.as_str(), Some(next.token().expose()), "the release handed the lock on");
        next.release().await.unwrap();
    });
}
