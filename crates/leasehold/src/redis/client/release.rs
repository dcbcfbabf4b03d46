//! The token-checked release and extend, repeated once over a dropped connection.

use redis::Value;

use crate::core::error::{Error, Operation, Result};
use crate::core::history::{HistoryEvent, HistoryKind};
use crate::core::queued::queued_then;
use crate::core::token::LockToken;
use crate::redis::calling_thread::RoutedConnection;
use crate::redis::history::{history_key, record_args, without_refusal};
use crate::redis::scripts::{
    EXTEND_SCRIPT, MIN_HOLD_RELEASE_SCRIPT, RELEASE_NOTIFY_SCRIPT, RELEASE_RECORDED_SCRIPT,
    RELEASE_SCRIPT, RELEASE_SNOTIFY_SCRIPT,
};
use crate::redis::slot::{min_hold_key, release_channel};
use crate::redis::strategy::{ReleaseStrategy, extend_cmd, release_cmd};

use super::RedisClient;

impl RedisClient {
    /// The release of a lock taken with [`min_hold`](crate::LockOptions::min_hold) (what its
    /// guard calls): if the minimum hold is not over by the server's clock, the lock is kept
    /// until it is and then expires by itself; otherwise it is deleted as by
    /// [`Locker::release`](crate::Locker::release). Token-checked and atomic (one script); Ok either way.
    pub(crate) async fn release_min_hold(&self, key: &str, token: &LockToken) -> Result<()> {
        match self.release_min_hold_raw(key, token.expose()).await? {
            true => Ok(()),
            false => Err(Error::NotHeld {
                key: key.to_string(),
            }),
        }
    }

    /// [`release_min_hold`](Self::release_min_hold): true if released or kept, false if the
    /// key does not hold `token`.
    pub(crate) async fn release_min_hold_raw(&self, key: &str, token: &str) -> Result<bool> {
        let (channel, publish) = self.plain_release_notice(key);
        let companion = min_hold_key(key);
        self.idempotent(Operation::Release, |mut conn| {
            let (channel, companion) = (&channel, &companion);
            async move {
                flag(
                    MIN_HOLD_RELEASE_SCRIPT
                        .key(key)
                        .key(companion)
                        .arg(token)
                        .arg(channel)
                        .arg(publish)
                        .invoke_async(&mut conn)
                        .await?,
                )
            }
        })
        .await
    }

    /// The plain lock's release: [`release_raw`](Self::release_raw), or on a client that
    /// records history the recorded release script, which appends the `released` event (with
    /// `fencing`, when known) in the same atomic step, only if it deleted the lock. True if
    /// released, false if the key does not hold `token`.
    pub(crate) async fn release_lock(
        &self,
        key: &str,
        token: &LockToken,
        fencing: Option<u64>,
    ) -> Result<bool> {
        let Some(history) = self.records_lock(false) else {
            return self.release_raw(key, token.expose()).await;
        };
        // Boxed: the recorded release's state would otherwise size every release's future.
        Box::pin(self.release_recorded(key, token, fencing, history)).await
    }

    /// [`release_lock`](Self::release_lock) on a client that records the history.
    async fn release_recorded(
        &self,
        key: &str,
        token: &LockToken,
        fencing: Option<u64>,
        history: &crate::core::history::HistoryOptions,
    ) -> Result<bool> {
        let event = HistoryEvent {
            fencing,
            ..HistoryEvent::of_holder(HistoryKind::Released, token)
        };
        let args = record_args(history, &event, false);
        let (channel, publish) = self.plain_release_notice(key);
        let stream = history_key(key);
        // The server's own compare-and-delete, where it has one: one command in the script
        // instead of GET and DEL.
        let delete = match self.inner.release {
            ReleaseStrategy::DelEx => "delex",
            ReleaseStrategy::DelIfEq => "delifeq",
            _ => "get",
        };
        let call = std::pin::pin!(self.idempotent(Operation::Release, |mut conn| {
            let mut inv = RELEASE_RECORDED_SCRIPT.key(key);
            inv.key(&stream)
                .arg(token.expose())
                .arg(&channel)
                .arg(publish)
                .arg(delete)
                .arg(&args);
            async move {
                let reply = inv.invoke_async(&mut conn).await?;
                flag(without_refusal(key, HistoryKind::Released, reply, 2))
            }
        }));
        queued_then(call, || self.released_here(key)).await.0
    }

    pub(crate) async fn release_raw(&self, key: &str, token: &str) -> Result<bool> {
        let channel = self
            .publishes_plain_releases()
            .then(|| release_channel(key));
        let sharded = self.inner.conn.is_cluster();
        let call = std::pin::pin!(self.idempotent(Operation::Release, |mut conn| {
            let channel = channel.as_deref();
            async move {
                match (release_cmd(self.inner.release, key, token), channel) {
                    // One round trip: the conditional delete and the wake-up, pipelined. A
                    // wake-up after a release that deleted nothing only makes waiters retry.
                    (Some(cmd), Some(channel)) => {
                        let mut publish = crate::redis::strategy::sized_cmd(
                            if sharded { "SPUBLISH" } else { "PUBLISH" },
                            2,
                            channel.len() + key.len(),
                        );
                        publish.arg(channel).arg(key);
                        let mut pipe = redis::Pipeline::with_capacity(2);
                        pipe.add_command(cmd).add_command(publish);
                        // The release's own reply decides; a refused notification is
                        // ignored (it must never turn a completed release into an error).
                        // The replies are read as they come (server errors in place), not
                        // through `Pipeline::query_async`, which copies them twice.
                        let mut replies =
                            redis::aio::ConnectionLike::req_packed_commands(&mut conn, &pipe, 0, 2)
                                .await?;
                        flag(replies.drain(..).next().unwrap_or(Value::Nil))
                    }
                    (Some(cmd), None) => flag(cmd.query_async(&mut conn).await?),
                    // The script, on a server without a token-checked delete of its own:
                    // boxed, so that its state does not size every release's future.
                    (None, Some(channel)) => {
                        let script = if sharded {
                            &*RELEASE_SNOTIFY_SCRIPT
                        } else {
                            &*RELEASE_NOTIFY_SCRIPT
                        };
                        let mut inv = script.key(key);
                        inv.arg(token).arg(channel);
                        flag(Box::pin(inv.invoke_async(&mut conn)).await?)
                    }
                    (None, None) => {
                        let mut inv = RELEASE_SCRIPT.key(key);
                        inv.arg(token);
                        flag(Box::pin(inv.invoke_async(&mut conn)).await?)
                    }
                }
            }
        }));
        // This client's waiters of the key are woken once the release is on the wire, not
        // after its reply: their attempts follow it on the connection (see `queued_then`), a
        // round trip sooner. A release that deletes nothing costs a woken waiter one attempt.
        queued_then(call, || self.released_here(key)).await.0
    }

    pub(crate) async fn extend_raw(&self, key: &str, token: &str, ttl_ms: u64) -> Result<bool> {
        self.idempotent(Operation::Extend, |mut conn| async move {
            match extend_cmd(self.inner.extend, key, token, ttl_ms) {
                Some(cmd) => match cmd.query_async::<Value>(&mut conn).await? {
                    Value::Okay => Ok(true),
                    Value::SimpleString(s) if s == "OK" => Ok(true),
                    Value::Nil => Ok(false),
                    other => Err(not_a_flag(&other)),
                },
                None => flag(
                    EXTEND_SCRIPT
                        .key(key)
                        .arg(token)
                        .arg(ttl_ms)
                        .invoke_async(&mut conn)
                        .await?,
                ),
            }
        })
        .await
    }

    /// Runs a token-checked (hence safely repeatable) operation, once more if the connection
    /// had dropped: the reconnecting connection then carries the retry to the (possibly
    /// restarted) server. Repeating is safe because the operation only acts while the key holds
    /// our token; at worst a release whose first reply was lost reports "not held", which is
    /// true by then. Timeouts are not retried: the bound the caller set would double.
    ///
    /// A retry that fails after a first attempt whose connection dropped is reported as
    /// ambiguous, whatever its own error: the first attempt may have been applied.
    pub(crate) async fn idempotent<T, F, Fut>(&self, op: Operation, mut run: F) -> Result<T>
    where
        F: FnMut(RoutedConnection) -> Fut,
        Fut: std::future::Future<Output = redis::RedisResult<T>>,
    {
        // The first attempt's error is dropped before the repeat: held across it, it would
        // size the future of every operation that goes through here.
        let first_unknown = match run(self.conn()).await {
            // READONLY: a failover demoted the server we spoke to; a Sentinel connection has
            // switched to the new primary meanwhile.
            Err(e)
                if e.is_connection_dropped()
                    || e.is_connection_refusal()
                    || e.code() == Some("READONLY") =>
            {
                tracing::debug!(%op, error = %e, "connection dropped; retrying once");
                // A refused connection or READONLY: the first attempt was not applied.
                e.is_connection_dropped() && !e.is_connection_refusal()
            }
            other => return other.map_err(|e| Error::from_redis(op, e)),
        };
        run(self.conn()).await.map_err(|retry| {
            match Error::from_redis(op, retry) {
                err if first_unknown && !err.is_ambiguous() => {
                    tracing::debug!(%op, error = %err, "the repeat failed too");
                    Error::Connection {
                        op,
                        ambiguous: true,
                        source: match err {
                            // The client's own error, as `Error::redis_error` promises.
                            Error::Connection { source, .. }
                            | Error::Server { source, .. }
                            | Error::PermissionDenied { source, .. }
                            | Error::Authentication { source } => source,
                            other => other.into(),
                        },
                    }
                }
                err => err,
            }
        })
    }
}

/// The reply of a token-checked release or extend: `1` (done) or `0` (the key does not hold
/// the token), as integers. Anything else is an error, never a verdict: a bulk `"1"` or a
/// `7` is not what `DELEX`, `DELIFEQ` or our scripts answer, so it says nothing about the lock.
fn flag(reply: Value) -> redis::RedisResult<bool> {
    match reply {
        Value::Int(1) => Ok(true),
        Value::Int(0) => Ok(false),
        Value::ServerError(e) => Err(e.into()),
        other => Err(not_a_flag(&other)),
    }
}

fn not_a_flag(reply: &Value) -> redis::RedisError {
    crate::redis::error::unexpected_reply("not a release's or an extend's reply", reply)
}

/// Finding U1 of the 2026-12-02 review on a real server: the client re-sends an older, shorter
/// extend (its `idempotent` retry after a dropped connection; redis-rs Cluster re-sending a
/// timed-out request) and the server applies it after a later renewal was confirmed. The steps
/// are the client's sends in that order, on one connection, so the test is deterministic.
#[cfg(test)]
mod resent_extends {
    use std::time::{Duration, Instant};

    use leasehold_harness::{Server, ServerOptions};

    use super::RedisClient;
    use crate::core::driver::Driver;
    use crate::core::guard::clock_drift;
    use crate::core::options::LockOptions;

    leasehold_harness::server_test!(async fn a_resent_extend_applied_after_a_renewal_caps_validity(bin) {
        let server = Server::start(&bin, &ServerOptions::new()).unwrap();
        let client = RedisClient::connect(&server.url()).await.unwrap();
        let key = "resent-extend";
        let guard = client
            .try_acquire(key, &LockOptions::new(Duration::from_secs(30)))
            .await
            .unwrap()
            .acquired()
            .unwrap();
        let lease = guard.lease().clone();
        let token = lease.token().expose().to_string();
        let life = |ttl: Duration| ttl.saturating_sub(clock_drift(ttl));
        let (short, long) = (Duration::from_secs(2), Duration::from_secs(30));

        // 1. A short extend goes out and is applied; its reply is lost.
        let sent = Instant::now();
        let lost_reply = lease.extend_sent(sent, sent + life(short));
        assert!(client.extend_raw(key, &token, 2_000).await.unwrap());
        // 2. A renewal sent after it is applied and confirmed.
        let sent = Instant::now();
        let renewal = lease.extend_sent(sent, sent + life(long));
        assert!(client.extend_raw(key, &token, 30_000).await.unwrap());
        renewal.confirm(sent + life(long));
        // 3. The client's retry of the short extend is applied after the renewal.
        assert!(client.extend_raw(key, &token, 2_000).await.unwrap());
        let pttl = server
            .command(&["PTTL", key])
            .unwrap()
            .as_integer()
            .unwrap();
        let believed = lease.valid_until().saturating_duration_since(Instant::now());
        assert!(
            pttl > 0 && believed <= Duration::from_millis(pttl as u64),
            "the holder believes {believed:?} while the key has {pttl} ms left"
        );
        drop(lost_reply);
        guard.release().await.unwrap();
    });
}

#[cfg(test)]
mod early_wake {
    use std::task::Poll;
    use std::time::Duration;

    use futures_util::FutureExt;
    use leasehold_harness::{Server, ServerOptions};

    use super::RedisClient;
    use crate::core::driver::Driver;
    use crate::core::options::LockOptions;

    // A waiter of the releasing client is woken once the release is on the wire, before its
    // reply can have come back: the release is polled once, and the waiter's wake-up is
    // already there. Woken after the reply (as before), it would not be, since nothing has
    // read that reply yet; the release then completes and deletes the key as ever. (On the
    // test's multi-thread runtime the reply may, rarely, be read within that first poll,
    // when the thread is preempted in it: such a round says nothing, and another is made.)
    leasehold_harness::server_test!(async fn a_waiter_of_the_releasing_client_is_woken_before_the_reply(bin) {
        let server = Server::start(&bin, &ServerOptions::new()).unwrap();
        let client = RedisClient::connect(&server.url()).await.unwrap();
        let notifier = client.notifier().expect("a notifier");
        for round in 0..20 {
            // A key of its own: the invalidation of an earlier round's key wakes nobody here.
            let key = &format!("early-wake-{round}");
            let lease = client
                .try_acquire(key, &LockOptions::new(Duration::from_secs(30)))
                .await
                .unwrap()
                .acquired()
                .unwrap()
                .detach();
            assert!(notifier.tracks(), "tracking refused on {}", client.server());
            let mut waiter = notifier.subscribe_one(key).await.expect("subscribed");
            waiter.mark_seen();
            let release = client.release_raw(key, lease.token().expose());
            let mut release = std::pin::pin!(release);
            let first = std::future::poll_fn(|cx| Poll::Ready(release.as_mut().poll(cx))).await;
            let woken = waiter.released().now_or_never().is_some();
            let in_flight = first.is_pending();
            let released = match first {
                Poll::Ready(released) => released,
                Poll::Pending => release.await,
            };
            assert!(released.unwrap(), "the release did not delete the key");
            assert_eq!(server.command(&["EXISTS", key.as_str()]).unwrap().as_integer(), Some(0));
            if in_flight {
                assert!(woken, "the waiter was not woken when the release went out");
                return;
            }
        }
        panic!("every release's reply came within its first poll");
    });
}

/// The futures a plain lock boxes on every cycle (the driver's acquisition, the guard's
/// release) stay within 1 KiB: glibc serves allocations up to 1032 bytes from a per-thread
/// cache, larger ones from its arenas, which consolidate their free lists first. At 1 384 and
/// 1 496 bytes, W2 (64 tasks, 2 cores) spent about a tenth of the client's time in the allocator
/// and ran at 0.85 of the floor; under 1 KiB, at 0.97-1.0 (scratch runs, 2026-12-05).
#[cfg(test)]
pub(crate) mod boxed_sizes {
    use std::mem::size_of_val;
    use std::time::Duration;

    use leasehold_harness::{Server, ServerOptions};

    use super::RedisClient;
    use crate::core::driver::Driver;
    use crate::core::options::LockOptions;

    /// The largest allocation glibc serves from its per-thread cache (1 032 bytes), rounded
    /// down: the bound of every future boxed on a lock's every cycle.
    pub(crate) const CACHED: usize = 1024;

    leasehold_harness::server_test!(async fn a_plain_locks_boxed_futures_fit_the_allocators_cache(bin) {
        let server = Server::start(&bin, &ServerOptions::new()).unwrap();
        let client = RedisClient::connect(&server.url()).await.unwrap();
        let options = LockOptions::new(Duration::from_secs(30));
        let acquire = Driver::try_acquire(&client, "sizes", &options);
        assert!(size_of_val(&*acquire) <= CACHED, "acquisition: {} bytes", size_of_val(&*acquire));
        let guard = acquire.await.unwrap().acquired().unwrap();
        let release = guard.lease().clone();
        let boxed = client.release_token_checked(release.key(), release.token(), None);
        assert!(size_of_val(&boxed) <= CACHED, "release: {} bytes", size_of_val(&boxed));
        drop(boxed);
        guard.release().await.unwrap();
    });

    /// What every wait's future would carry if they were inlined: the opening of the
    /// subscriber connection (once per client, about 3 KB) and a fair waiter's leave (only when
    /// a wait ends without the lock, about 2 KB). Both are boxed apart: a waiting acquisition
    /// was 3 872 bytes and a fair one 4 648 before.
    const WAIT: usize = 2 * CACHED;

    leasehold_harness::server_test!(async fn a_waits_future_leaves_its_rare_steps_boxed_apart(bin) {
        let server = Server::start(&bin, &ServerOptions::new()).unwrap();
        let client = RedisClient::connect(&server.url()).await.unwrap();
        let waiting = LockOptions::new(Duration::from_secs(30)).wait(Duration::from_secs(30));
        let acquire = Driver::acquire(&client, "sizes:wait", &waiting);
        assert!(size_of_val(&*acquire) <= WAIT, "waiting acquisition: {} bytes", size_of_val(&*acquire));
        acquire.await.unwrap().release().await.unwrap();
        let fair = waiting.fair(true);
        let acquire = client.fair_acquire("sizes:fair", &fair);
        assert!(size_of_val(&acquire) <= WAIT, "fair acquisition: {} bytes", size_of_val(&acquire));
        acquire.await.unwrap().release().await.unwrap();
    });
}
