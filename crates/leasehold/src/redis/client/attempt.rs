//! One acquisition as it goes out: the command, `WAIT` for replicas, and the cleanup of an
//! attempt whose outcome was never learned.

use std::time::Duration;

use futures_util::future::BoxFuture;
use redis::{Script, Value};

use crate::core::acquire::OnAbandon;
use crate::core::error::{Error, Operation, Result};
use crate::core::history::{HistoryEvent, HistoryKind, HistoryOptions};
use crate::core::options::LockOptions;
use crate::core::outcome::MAX_FENCING_NUMBER;
use crate::core::token::LockToken;
use crate::redis::error::unexpected_reply;
use crate::redis::history::{history_key, record_args, without_refusal};
use crate::redis::scripts::{
    ACQUIRE_LUA, ACQUIRE_RECORDED_SCRIPT, ACQUIRE_SCRIPT, MIN_HOLD_ACQUIRE_LUA,
    MIN_HOLD_ACQUIRE_SCRIPT, RECORDED_SCRIPTS,
};
use crate::redis::slot::{fence_key, min_hold_key};

use super::{Attempt, RedisClient};

impl RedisClient {
    /// One acquisition as `options` ask: the attempt, and with
    /// [`LockOptions::replica_ack`] the replicas' acknowledgement.
    pub(super) async fn attempt_with(
        &self,
        key: &str,
        token: &LockToken,
        ttl_ms: u64,
        options: &LockOptions,
        want_remaining: bool,
    ) -> Result<Attempt> {
        let fencing = options.fencing_enabled();
        let min_hold_ms = options
            .min_hold_bound()
            .map(|m| m.as_millis().max(1) as u64);
        match options.replica_ack_required() {
            None => {
                self.attempt(key, token, ttl_ms, fencing, want_remaining, min_hold_ms)
                    .await
            }
            // Boxed: inline, the replicated path's larger state would be part of every
            // acquisition's future (see the fair path in `driver`).
            Some(ack) => {
                Box::pin(self.attempt_replicated(
                    key,
                    token,
                    ttl_ms,
                    (fencing, min_hold_ms),
                    want_remaining,
                    ack,
                ))
                .await
            }
        }
    }

    /// An acquisition confirmed by `wanted` replicas: the acquisition and `WAIT` in one
    /// pipeline, on one connection, to the key's master.
    ///
    /// Guarantee: a lock is granted only if `WAIT` counted the write that took it. `WAIT` counts
    /// the writes of the connection it arrives on, so it must never reach a server apart from its
    /// acquisition. Sent separately, a cluster client that lost the master during `WAIT` retried
    /// the `WAIT` alone on the promoted replica's fresh connection, which acknowledged at once a
    /// write it never had (`leasehold-lab check --topology cluster --replica-ack 1` found two
    /// overlaps). As one pipeline, a retry repeats both: the acquisition runs again on the new
    /// master (busy if our key reached it, so not granted twice) and `WAIT` counts that write.
    async fn attempt_replicated(
        &self,
        key: &str,
        token: &LockToken,
        ttl_ms: u64,
        (fencing, min_hold_ms): (bool, Option<u64>),
        want_remaining: bool,
        (wanted, timeout): (u32, Duration),
    ) -> Result<Attempt> {
        let call = self.acquire_script(key, token, ttl_ms, (fencing, min_hold_ms), want_remaining);
        // Ours until confirmed: if this future is dropped, or the reply is lost, give it back.
        let mut cleanup = self.give_back_if_abandoned(key, token);
        let mut conn = self.conn();
        let mut by_body = false;
        let replies = loop {
            let mut pipe = redis::pipe();
            pipe.ignore_errors()
                .add_command(acquire_cmd(key, token, ttl_ms, call.as_ref(), by_body))
                .cmd("WAIT")
                .arg(wanted)
                .arg(timeout.as_millis() as u64);
            let replies = conn.pipeline_on_key_master(key, pipe).await;
            match &replies {
                // The script is not cached on this node (a restart, a failover, a new shard):
                // nothing was written; send its body.
                Ok(r)
                    if !by_body
                        && matches!(r.first(), Some(Value::ServerError(e)) if e.code() == "NOSCRIPT") =>
                {
                    by_body = true;
                }
                _ => break replies,
            }
        };
        let parsed = replies.and_then(|mut r| {
            let wait = r.pop().unwrap_or(Value::Nil);
            let acquire = r.pop().unwrap_or(Value::Nil);
            let attempt = parse_acquire(key, acquire, fencing, call.as_ref())?;
            let acked = match wait {
                Value::ServerError(e) => return Err(redis::RedisError::from(e)),
                v => redis::from_redis_value::<i64>(v).map_err(redis::RedisError::from)?,
            };
            Ok((attempt, acked.max(0) as u32))
        });
        let (attempt, acked) = match parsed {
            Ok(ok) => ok,
            Err(e) => {
                let err = Error::from_redis(Operation::Acquire, e);
                if !err.is_ambiguous() {
                    cleanup.disarm();
                    // The acquisition may have succeeded before the error (a refused WAIT, a
                    // script refused half-way): token-checked, harmless if nothing was set.
                    let _ = self.release_lock(key, token, None).await;
                }
                return Err(err);
            }
        };
        cleanup.disarm();
        if matches!(attempt, Attempt::Busy { .. }) || acked >= wanted {
            return Ok(attempt);
        }
        tracing::warn!(
            key,
            acked,
            wanted,
            "acquisition not acknowledged by enough replicas; releasing"
        );
        let _ = self.release_lock(key, token, None).await;
        Err(Error::NotReplicated {
            key: key.to_string(),
            acked,
            wanted,
        })
    }

    /// Sends one acquisition. `want_remaining` asks for the holder's PTTL on busy (the script);
    /// `min_hold_ms` sets the lock's min_hold companion with it (the min_hold script).
    pub(crate) async fn attempt(
        &self,
        key: &str,
        token: &LockToken,
        ttl_ms: u64,
        fencing: bool,
        want_remaining: bool,
        min_hold_ms: Option<u64>,
    ) -> Result<Attempt> {
        let mut cleanup = self.give_back_if_abandoned(key, token);
        let mut conn = self.conn();
        let call = self.acquire_script(key, token, ttl_ms, (fencing, min_hold_ms), want_remaining);
        let scripted = call.is_some();
        let reply = if let Some(call) = &call {
            // Boxed: the script call's state (its invocation, the crate's `NOSCRIPT` fallback)
            // is twice a plain `SET`'s, and inline it would size every attempt's future; with
            // it, the boxed future of every plain acquisition outgrew the allocator's per-thread
            // cache (W2: one slow allocation a cycle).
            Box::pin(async {
                let mut inv = call.script.prepare_invoke();
                for k in &call.keys {
                    inv.key(k);
                }
                inv.arg(&call.args);
                inv.invoke_async::<Value>(&mut conn).await
            })
            .await
        } else {
            crate::redis::strategy::set_nx_px(key, token.expose(), ttl_ms)
                .query_async::<Value>(&mut conn)
                .await
        };
        let result = reply.and_then(|r| parse_acquire(key, r, fencing, call.as_ref()));
        match result {
            Ok(attempt) => {
                cleanup.disarm();
                Ok(attempt)
            }
            Err(e) => {
                let err = Error::from_redis(Operation::Acquire, e);
                // A reply we cannot read as a grant or a refusal tells nothing either: the
                // server may have taken the lock, so the cleanup stays armed for it too.
                if !err.is_ambiguous() && !matches!(err, Error::UnexpectedReply { .. }) {
                    cleanup.disarm();
                }
                // A script that failed part-way (an ACL refusing its INCR, say) has already
                // done its SET: scripts do not roll back. Give the token back at once, so the
                // failure leaves no orphaned lock (token-checked: harmless if nothing was set).
                // Boxed: a rare path, which inline would add its state to every attempt's future.
                if scripted && matches!(err, Error::Server { .. } | Error::PermissionDenied { .. })
                {
                    let _ = Box::pin(self.release_lock(key, token, None)).await;
                }
                // An ambiguous failure keeps the cleanup armed: it fires on drop below.
                Err(err)
            }
        }
    }
}

/// A plain `SET NX PX`'s reply ([`strategy::set_nx_px`](crate::redis::strategy::set_nx_px)),
/// read as a single server's attempt reads it: taken (`true`), busy (`false`), or anything else
/// an error, never a grant.
pub(crate) fn plain_grant(key: &str, reply: Value) -> redis::RedisResult<bool> {
    Ok(matches!(
        parse_acquire(key, reply, false, None)?,
        Attempt::Acquired { .. }
    ))
}

/// The acquisition as one script call: the acquire script (fencing, or asking the holder's PTTL
/// on busy), the `min_hold` one, or with `history` the recorded one (`redis::history`), with
/// its keys and arguments.
struct ScriptCall {
    script: &'static Script,
    /// The script's text, for a server that has not cached it.
    body: &'static str,
    keys: Vec<String>,
    args: Vec<String>,
    /// The recorded script: its reply may carry a refused history append.
    recorded: bool,
}

impl RedisClient {
    /// The acquisition's script call, or `None` for a plain `SET NX PX` (no fencing, no
    /// `min_hold`, no history recorded, and no holder's PTTL wanted on busy).
    fn acquire_script(
        &self,
        key: &str,
        token: &LockToken,
        ttl_ms: u64,
        (fencing, min_hold_ms): (bool, Option<u64>),
        want_remaining: bool,
    ) -> Option<ScriptCall> {
        let history = self.records_lock(min_hold_ms.is_some());
        let scripted = fencing || want_remaining || min_hold_ms.is_some() || history.is_some();
        scripted.then(|| script_call(key, token, ttl_ms, (fencing, min_hold_ms), history))
    }
}

fn script_call(
    key: &str,
    token: &LockToken,
    ttl_ms: u64,
    (fencing, min_hold_ms): (bool, Option<u64>),
    history: Option<&HistoryOptions>,
) -> ScriptCall {
    let mut keys = vec![key.to_string()];
    let mut args = vec![token.expose().to_string(), ttl_ms.to_string()];
    let (script, body): (&'static Script, &'static str) = match (min_hold_ms, history) {
        (Some(min_hold_ms), _) => {
            keys.push(min_hold_key(key));
            args.push(min_hold_ms.to_string());
            (&MIN_HOLD_ACQUIRE_SCRIPT, MIN_HOLD_ACQUIRE_LUA)
        }
        (None, Some(history)) => {
            keys.push(history_key(key));
            let event = HistoryEvent::of_holder(HistoryKind::Acquired, token);
            args.extend(record_args(history, &event, true));
            (&ACQUIRE_RECORDED_SCRIPT, &RECORDED_SCRIPTS[0])
        }
        (None, None) => (&ACQUIRE_SCRIPT, ACQUIRE_LUA),
    };
    if fencing {
        keys.push(fence_key(key));
    }
    ScriptCall {
        script,
        body,
        keys,
        args,
        recorded: min_hold_ms.is_none() && history.is_some(),
    }
}

/// The acquisition as one command: `SET key token NX PX ttl`, or `call` by its hash or
/// (`by_body`) its body.
fn acquire_cmd(
    key: &str,
    token: &LockToken,
    ttl_ms: u64,
    call: Option<&ScriptCall>,
    by_body: bool,
) -> redis::Cmd {
    let Some(call) = call else {
        let mut c =
            crate::redis::strategy::sized_cmd("SET", 5, key.len() + token.expose().len() + 24);
        c.arg(key)
            .arg(token.expose())
            .arg("NX")
            .arg("PX")
            .arg(ttl_ms);
        return c;
    };
    let mut c = if by_body {
        let mut c = redis::cmd("EVAL");
        c.arg(call.body);
        c
    } else {
        let mut c = redis::cmd("EVALSHA");
        c.arg(call.script.get_hash());
        c
    };
    c.arg(call.keys.len()).arg(&call.keys).arg(&call.args);
    c
}

/// The reply of [`acquire_cmd`]: `OK`/nil of `SET NX`, or the script's `{ok, n}`.
///
/// Strict: only the replies a server really gives count. Anything else (a bulk string, an
/// integer, an array of another shape, a fencing number no counter issues) is an
/// `UnexpectedReturnType` error, never a grant: taking an unreadable reply for a lock would let
/// two holders in.
fn parse_acquire(
    key: &str,
    reply: Value,
    fencing: bool,
    call: Option<&ScriptCall>,
) -> redis::RedisResult<Attempt> {
    let unexpected = |reply: &Value| unexpected_reply("not an acquisition's reply", reply);
    // A recorded acquisition's refused history append, logged and taken off (only there: any
    // other script's three-element reply stays unreadable).
    let reply = match call.is_some_and(|c| c.recorded) {
        true => without_refusal(key, HistoryKind::Acquired, reply, 3),
        false => reply,
    };
    match (call.is_some(), reply) {
        (_, Value::ServerError(e)) => Err(redis::RedisError::from(e)),
        (false, Value::Nil) => Ok(Attempt::Busy { remaining: None }),
        (false, Value::Okay) => Ok(Attempt::Acquired { fencing: None }),
        (false, Value::SimpleString(s)) if s == "OK" => Ok(Attempt::Acquired { fencing: None }),
        (true, Value::Array(items)) => match items.as_slice() {
            [Value::Int(1), Value::Int(_)] if !fencing => Ok(Attempt::Acquired { fencing: None }),
            // INCR of a counter the script refuses at 2^53 or beyond: 1 ..= 2^53.
            [Value::Int(1), Value::Int(n)] if (1..=MAX_FENCING_NUMBER as i64).contains(n) => {
                Ok(Attempt::Acquired {
                    fencing: Some(*n as u64),
                })
            }
            [Value::Int(0), Value::Int(n)] => Ok(Attempt::Busy {
                remaining: (*n >= 0).then(|| Duration::from_millis(*n as u64)),
            }),
            _ => Err(unexpected(&Value::Array(items))),
        },
        (_, other) => Err(unexpected(&other)),
    }
}

impl RedisClient {
    /// Releases the token of an acquisition whose outcome we never learned (the future was
    /// dropped, or the reply was lost), so an orphaned lock does not block everyone for a whole
    /// TTL. Token-checked: harmless if nothing was taken.
    fn give_back_if_abandoned<'a>(
        &'a self,
        key: &'a str,
        token: &'a LockToken,
    ) -> OnAbandon<impl FnOnce() -> BoxFuture<'static, ()> + 'a, BoxFuture<'static, ()>> {
        OnAbandon::new("acquisition", move || -> BoxFuture<'static, ()> {
            let (client, key, token) = (self.clone(), key.to_string(), token.clone());
            tracing::debug!(key, token_hash = %token.redacted(), "acquisition abandoned; releasing its token in the background");
            Box::pin(async move {
                if let Ok(true) = client.release_lock(&key, &token, None).await {
                    tracing::debug!(key, "abandoned acquisition had taken the lock; released");
                }
            })
        })
    }
}
