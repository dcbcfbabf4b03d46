//! Running the release and leave scripts, which hand the lock on.

use std::time::{Duration, Instant};

use redis::Script;

use crate::core::error::{Operation, Result};
use crate::redis::client::RedisClient;
use crate::redis::connection::queued_then;
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
        // Queued on the connection first: the new holder's commands then follow it.
        Some(early) => queued_then(call, || early.give()).await,
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
