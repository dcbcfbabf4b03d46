//! One fair waiter: its attempts (the acquisition script), and its leaving the queue.

use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;

use crate::core::acquire::OnAbandon;
use crate::core::error::{Error, Operation, Result};
use crate::core::guard::{Lease, LockGuard};
use crate::core::options::{LockOptions, ttl_millis};
use crate::core::outcome::MAX_FENCING_NUMBER;
use crate::core::token::LockToken;
use crate::redis::client::RedisClient;
use crate::redis::handoff::Tenure;
use crate::redis::scripts::{FAIR_ACQUIRE_SCRIPT, FAIR_LEAVE_SCRIPT};
use crate::redis::slot::{fair_entry_key, fair_queue_key, fence_key};

use super::held::FairHeld;
use super::pass_on::run_pass_on;
use super::reply::PassOn;
use super::{handoff_window, queue_entry_ttl};

/// One fair waiter: its token and ticket for the whole wait.
pub(super) struct Waiter<'a> {
    pub(super) client: &'a RedisClient,
    pub(super) key: &'a str,
    pub(super) token: LockToken,
    pub(super) ticket: String,
}

/// The owner of a waiter no client delivers handoffs to by a reply: it gets the message.
pub(super) const NO_OWNER: &str = "-";

pub(super) enum FairAttempt {
    Acquired { fencing: u64 },
    Busy { remaining: Option<Duration> },
}

impl<'a> Waiter<'a> {
    pub(super) fn new(client: &'a RedisClient, key: &'a str, options: &LockOptions) -> Self {
        let token = options.new_token();
        // A ticket is public (it is published): its own random bits, not the token's.
        let ticket = LockToken::random().expose()[..16].to_string();
        Waiter {
            client,
            key,
            token,
            ticket,
        }
    }

    fn keys(&self) -> [String; 4] {
        [
            self.key.to_string(),
            fair_queue_key(self.key),
            fair_entry_key(self.key, ""),
            fence_key(self.key),
        ]
    }

    /// One run of the acquisition script: the lock if it is free and nobody live is ahead of
    /// us (or it was handed to us), else (with `queue`) our entry queued or refreshed as
    /// `attempt`. `owner`: our client's name if a release by that client can deliver us a
    /// handoff by its reply (we are subscribed through it), else [`NO_OWNER`].
    pub(super) async fn attempt(
        &self,
        ttl: Duration,
        queue: bool,
        fencing: bool,
        attempt: u64,
        owner: &str,
    ) -> Result<FairAttempt> {
        let ttl_ms = ttl_millis(ttl)?;
        let mut inv = FAIR_ACQUIRE_SCRIPT.prepare_invoke();
        for k in self.keys() {
            inv.key(k);
        }
        inv.arg(self.token.expose())
            .arg(ttl_ms)
            .arg(&self.ticket)
            .arg(handoff_window(ttl).as_millis() as u64)
            .arg(queue_entry_ttl(ttl).as_millis() as u64)
            .arg(if queue { 1 } else { 0 })
            .arg(if fencing { 1 } else { 0 })
            .arg(attempt)
            .arg(owner);
        let mut conn = self.client.conn();
        // Only the script's own reply, two integers, counts: anything else (a bulk "1", a
        // fencing number out of range) is an unexpected reply, never a grant.
        let reply = inv
            .invoke_async::<redis::Value>(&mut conn)
            .await
            .and_then(crate::redis::error::int_pair)
            .and_then(|(ok, n)| match (ok, n) {
                (1, n) if !fencing || (1..=MAX_FENCING_NUMBER as i64).contains(&n) => Ok((1, n)),
                (0, n) => Ok((0, n)),
                _ => Err(crate::redis::error::unexpected_reply(
                    "not a fair acquisition's reply",
                    &redis::Value::Array(vec![redis::Value::Int(ok), redis::Value::Int(n)]),
                )),
            });
        let (ok, n) = reply.map_err(|e| Error::from_redis(Operation::Acquire, e))?;
        Ok(if ok == 1 {
            FairAttempt::Acquired {
                fencing: n.max(0) as u64,
            }
        } else {
            FairAttempt::Busy {
                remaining: (n >= 0).then(|| Duration::from_millis(n as u64)),
            }
        })
    }

    /// Leaves the queue, passing the lock on if it had been handed to us. Boxed: a wait leaves
    /// only when it ends without the lock or is granted it too late, and the script's state
    /// (about 2 KB) would otherwise size every fair acquisition's future.
    pub(super) async fn leave(&self) -> Result<PassOn> {
        Box::pin(leave(self.client, self.key, &self.token, &self.ticket)).await
    }

    pub(super) fn guard(
        &self,
        fencing: Option<u64>,
        started: Instant,
        ttl: Duration,
        options: &LockOptions,
    ) -> LockGuard {
        let lease = Lease::new(self.key, self.token.clone(), fencing, started, ttl);
        self.client.guard_for(
            lease,
            started,
            options,
            FairHeld::new(self.client, Tenure::after(None)),
        )
    }
}

pub(super) async fn leave(
    client: &RedisClient,
    key: &str,
    token: &LockToken,
    ticket: &str,
) -> Result<PassOn> {
    run_pass_on(
        client,
        &FAIR_LEAVE_SCRIPT,
        key,
        token.expose(),
        Some(ticket),
        Operation::Release,
        None,
    )
    .await
}

impl Waiter<'_> {
    /// Leaves the queue when a wait is abandoned (its future dropped, or an error returned), so
    /// the queue does not wait for the entry to expire, and a lock handed to us meanwhile moves
    /// on.
    pub(super) fn leave_if_abandoned(
        &self,
    ) -> OnAbandon<impl FnOnce() -> BoxFuture<'static, ()> + '_, BoxFuture<'static, ()>> {
        OnAbandon::new("fair wait", move || -> BoxFuture<'static, ()> {
            let client = self.client.clone();
            let key = self.key.to_string();
            let token = self.token.clone();
            let ticket = self.ticket.clone();
            Box::pin(async move {
                if let Err(e) = leave(&client, &key, &token, &ticket).await {
                    tracing::debug!(key, error = %e, "leaving the fair queue failed; the entry expires on its own");
                }
            })
        })
    }
}

/// Finding U2 of the 2026-12-02 review, on a real server: a handoff left `granted n` for this
/// waiter; the lock then expired, another client took it with n + 1 and released it; this
/// waiter's next attempt takes the free lock, and that script is sent again (its reply lost:
/// redis-rs re-sends a timed-out script, a waiting acquisition repeats an attempt after a
/// connection error). The repeat must not claim the stale, lower number.
#[cfg(test)]
mod tests {
    use std::time::Duration;

    use leasehold_harness::{Server, ServerOptions};

    use super::{FairAttempt, NO_OWNER, Waiter};
    use crate::core::options::LockOptions;
    use crate::redis::client::RedisClient;
    use crate::redis::slot::{fair_entry_key, fence_key};

    fn number(attempt: FairAttempt) -> u64 {
        match attempt {
            FairAttempt::Acquired { fencing } => fencing,
            FairAttempt::Busy { .. } => panic!("the lock is free: the attempt must take it"),
        }
    }

    leasehold_harness::server_test!(async fn a_repeated_attempt_never_claims_a_stale_grant(bin) {
        let server = Server::start(&bin, &ServerOptions::new()).unwrap();
        let client = RedisClient::connect(&server.url()).await.unwrap();
        let key = "stale-grant";
        let ttl = Duration::from_secs(10);
        let options = LockOptions::new(ttl).fair(true).fencing(true);
        let waiter = Waiter::new(&client, key, &options);
        // What the handoff of an earlier tenure left (kept 2 windows), and the counter after
        // the other client's tenure: 7 was issued after 5.
        let entry = fair_entry_key(key, &waiter.ticket);
        server
            .command(&["SET", &entry, "granted 5", "PX", "60000"])
            .unwrap();
        server.command(&["SET", &fence_key(key), "7"]).unwrap();

        let first = number(waiter.attempt(ttl, true, true, 1, NO_OWNER).await.unwrap());
        assert_eq!(first, 8, "a free lock is taken with the next number");
        let repeat = number(waiter.attempt(ttl, true, true, 1, NO_OWNER).await.unwrap());
        assert!(
            repeat > 7,
            "the repeated attempt returned {repeat}, not above the 7 issued before this holder"
        );
    });
}
