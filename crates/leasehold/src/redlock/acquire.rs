//! Acquiring: the two phases of one attempt (see the module docs), and waiting between
//! attempts. Redlock has no fair mode.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::core::acquire::{Ask, Attempts};
use crate::core::error::{Error, Result};
use crate::core::guard::{Lease, LockGuard};
use crate::core::kind::{Backend, Taking};
use crate::core::options::{LockOptions, ttl_millis};
use crate::core::outcome::TryAcquire;
use crate::redis::client::plain_grant;
use crate::redis::scripts::{
    RAISE_FENCE_SCRIPT as RAISE_FENCE, REDLOCK_ACQUIRE_SCRIPT as REDLOCK_ACQUIRE,
    REDLOCK_MIN_HOLD_ACQUIRE_SCRIPT as REDLOCK_MIN_HOLD_ACQUIRE,
};
use crate::redis::slot::validate_name;
use crate::redis::slot::{fence_key, min_hold_key};
use crate::redis::strategy::set_nx_px;

use super::Redlock;
use super::fan_out::{Reply, Wait};
use super::held::RedlockHeld;
use crate::core::report::{NodeOutcome, NodeReport, NodeReports};

impl Redlock {
    /// Through the acquisition engine: no quorum, or a majority that granted too late, is
    /// tried again after the backoff; at the deadline, the reason.
    pub(super) async fn acquire_waiting(
        &self,
        key: &str,
        options: &LockOptions,
    ) -> Result<LockGuard> {
        validate_name(key)?;
        options.check_for(Backend::Redlock, Taking::Lock)?;
        let attempts = RedlockAttempts { redlock: self, key };
        crate::core::acquire::wait(&attempts, options, options.wait_bound()).await
    }

    /// One Redlock attempt (both fencing phases when asked). `ask.remaining`: a busy node
    /// should answer the holder's remaining lease (the script); without it, fencing or
    /// `min_hold`, each node gets a plain `SET NX PX`, as a single server does.
    pub(super) async fn attempt(
        &self,
        key: &str,
        options: &LockOptions,
        ask: Ask,
    ) -> Result<TryAcquire> {
        let ttl = options.ttl();
        let ttl_ms = ttl_millis(ttl)?;
        let fencing = options.fencing_enabled();
        let min_hold_ms = options
            .min_hold_bound()
            .map(|m| m.as_millis().max(1) as u64);
        let token = options.new_token();
        let t0 = Instant::now();
        let quorum = self.quorum();
        let drift = self.inner.options.drift_for(ttl);
        let valid_until = t0 + ttl.saturating_sub(drift);
        let (key_owned, token_owned) = (key.to_string(), token.clone());

        // Phase 1 on every node: SET NX PX (and read the counter when fencing). Decided as soon
        // as a majority granted or can no longer grant; a straggler's late grant is released
        // with the rest below or at release time.
        let scripted = fencing || min_hold_ms.is_some() || ask.remaining;
        let (phase1, phase1_tasks) = {
            let (key, token) = (key_owned.clone(), token_owned.clone());
            self.fan_out(Vec::new(), Wait::Quorum, move |client| {
                let (key, token) = (key.clone(), token.clone());
                async move {
                    let mut conn = client.conn();
                    if !scripted {
                        // No script to run: a command's cost, not a script's, on every node.
                        let taken = set_nx_px(&key, token.expose(), ttl_ms)
                            .query_async(&mut conn)
                            .await
                            .and_then(|reply| plain_grant(&key, reply))
                            .map_err(|e| Error::from_redis(crate::Operation::Acquire, e))?;
                        return Ok(match taken {
                            true => Reply::Yes(0),
                            false => Reply::No(None),
                        });
                    }
                    let counter = fence_key(&key);
                    let mut inv = match min_hold_ms {
                        Some(_) => REDLOCK_MIN_HOLD_ACQUIRE.key(&key),
                        None => REDLOCK_ACQUIRE.key(&key),
                    };
                    if min_hold_ms.is_some() {
                        inv.key(min_hold_key(&key));
                    }
                    if fencing {
                        inv.key(&counter);
                    }
                    inv.arg(token.expose()).arg(ttl_ms);
                    if let Some(min_hold_ms) = min_hold_ms {
                        inv.arg(min_hold_ms);
                    }
                    // `n` is a counter (a bulk string, exact) or a PTTL (an integer).
                    let (ok, n): (i64, i64) = inv
                        .invoke_async(&mut conn)
                        .await
                        .map_err(|e| Error::from_redis(crate::Operation::Acquire, e))?;
                    Ok(if ok == 1 {
                        Reply::Yes(n.max(0) as u64)
                    } else {
                        Reply::No((n >= 0).then(|| Duration::from_millis(n as u64)))
                    })
                }
            })
            .await
        };
        let granted: Vec<(usize, u64)> = phase1
            .iter()
            .enumerate()
            .filter_map(|(i, (_, counter))| counter.map(|c| (i, c)))
            .collect();
        let reports: Vec<NodeReport> = phase1.into_iter().map(|(r, _)| r).collect();
        let majority_granted = granted.len() >= quorum;
        let mut ok = majority_granted;

        // Phase 2 (fencing): raise the counters of the granting nodes to max + 1, each only
        // while it still holds our token; a majority must confirm.
        let mut fence = None;
        let exhausted = fencing
            && granted
                .iter()
                .any(|(_, c)| *c >= crate::core::outcome::MAX_FENCING_NUMBER);
        if exhausted {
            // No exact number is left above every one issued (the scripts that compare
            // numbers use Lua's doubles, exact to 2^53): give the grants back and refuse, as
            // a single node does before writing anything (M8).
            ok = false;
        }
        if ok && fencing {
            let number = granted.iter().map(|(_, c)| *c).max().unwrap_or(0) + 1;
            // Sent to every node: the script raises only where the key holds our token (the
            // granting nodes, and a straggler whose late grant has landed), which is exactly
            // the condition the argument needs.
            let (key, token) = (key_owned.clone(), token_owned.clone());
            let (raised, _) = self
                .fan_out(Vec::new(), Wait::Quorum, move |client| {
                    let (key, token) = (key.clone(), token.clone());
                    async move {
                        let mut conn = client.conn();
                        let held: i64 = RAISE_FENCE
                            .key(&key)
                            .key(fence_key(&key))
                            .arg(token.expose())
                            .arg(number)
                            .invoke_async(&mut conn)
                            .await
                            .map_err(|e| Error::from_redis(crate::Operation::Acquire, e))?;
                        Ok(if held == 1 {
                            Reply::Yes(())
                        } else {
                            Reply::No(None)
                        })
                    }
                })
                .await;
            ok = raised.iter().filter(|(_, v)| v.is_some()).count() >= quorum;
            fence = Some(number);
        }
        // Counted only if everything above finished within the validity.
        let in_time = Instant::now() < valid_until;
        ok = ok && in_time;

        if ok {
            let lease = Lease::until(key, token, fence, valid_until);
            if options.auto_extend_enabled() {
                self.keep_alive(lease.clone(), options);
            }
            // Stragglers may still be handing their SET to a slow node: the release waits for
            // them, so it can never overtake one.
            let stragglers = Arc::new(std::sync::Mutex::new(phase1_tasks));
            return Ok(TryAcquire::Acquired(LockGuard::new(
                Arc::new(RedlockHeld(self.clone(), stragglers, min_hold_ms.is_some())),
                lease,
            )));
        }

        // Not acquired: give the token back on every node, each after its phase-1 request was
        // handed over or dropped (so the release queues behind it), and wait for them all.
        let (key, token) = (key_owned.clone(), token_owned.clone());
        let _ = self
            .fan_out(phase1_tasks, Wait::All, move |client| {
                let (key, token) = (key.clone(), token.clone());
                async move {
                    client
                        .release_raw(&key, token.expose())
                        .await
                        .map(Reply::Yes)
                }
            })
            .await;
        if exhausted {
            return Err(Error::FencingExhausted {
                op: crate::Operation::Acquire,
            });
        }
        let busy: Vec<Option<Duration>> = reports
            .iter()
            .filter_map(|r| match r.outcome {
                NodeOutcome::Busy { remaining } => Some(remaining),
                _ => None,
            })
            .collect();
        // A majority granted, nobody else holds it, but the validity ended first: not busy,
        // late (as a single server's grant that arrives after its validity).
        if busy.is_empty() && majority_granted && !in_time {
            return Err(Error::ExpiredOnArrival {
                key: key_owned,
                elapsed: t0.elapsed(),
                ttl,
            });
        }
        // Someone else holds it (on at least one node), or a majority granted but the fencing
        // phase was not confirmed: busy, worth a retry. Only failures and silence: no quorum.
        if !busy.is_empty() || majority_granted {
            Ok(TryAcquire::Busy {
                remaining: busy.into_iter().flatten().max(),
            })
        } else {
            Err(Error::NoQuorum {
                key: key_owned,
                needed: quorum,
                nodes: NodeReports(reports),
            })
        }
    }
}

/// One key's Redlock attempts, for the acquisition engine.
struct RedlockAttempts<'a> {
    redlock: &'a Redlock,
    key: &'a str,
}

impl Attempts for RedlockAttempts<'_> {
    fn name(&self) -> &str {
        self.key
    }

    async fn attempt(&self, options: &LockOptions, ask: Ask) -> Result<TryAcquire> {
        self.redlock.attempt(self.key, options, ask).await
    }

    fn retries(&self, e: &Error) -> bool {
        matches!(e, Error::NoQuorum { .. })
    }
}
