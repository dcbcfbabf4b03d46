//! A held Redlock lock: release, extend, and the renewal of an auto-extended lease.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;

use crate::core::error::LossReason;
use crate::core::error::{Error, Result};
use crate::core::guard::HeldLock;
use crate::core::guard::Lease;
use crate::core::options::{LockOptions, ttl_millis};
use crate::core::token::LockToken;
use crate::redis::slot::validate_name;

use super::Redlock;
use super::fan_out::{Reply, Tasks, Wait};

impl Redlock {
    /// Release, each node's only after its task in `prior` (the acquisition) finished; with
    /// `min_hold`, each node keeps the lock until its min_hold companion expires (see
    /// [`LockOptions::min_hold`]).
    pub(crate) async fn release_after(
        &self,
        prior: Tasks,
        key: &str,
        token: &LockToken,
        min_hold: bool,
    ) -> Result<()> {
        validate_name(key)?;
        let (key_owned, token) = (key.to_string(), token.clone());
        let (reports, _) = self
            .fan_out(prior, Wait::Quorum, move |client| {
                let (key, token) = (key_owned.clone(), token.clone());
                async move {
                    let deleted = match min_hold {
                        true => client.release_min_hold_raw(&key, token.expose()).await?,
                        false => client.release_raw(&key, token.expose()).await?,
                    };
                    Ok(if deleted {
                        Reply::Yes(())
                    } else {
                        Reply::No(None)
                    })
                }
            })
            .await;
        self.confirmed(key, reports).map(|_| ())
    }

    /// Resets the TTL on every node where `key` holds `token`; counts only if a majority
    /// confirms within the validity. Returns the new validity deadline.
    ///
    /// # Errors
    /// [`Error::NotHeld`] if fewer than a majority still held it, or the confirmations came too
    /// late; [`Error::NoQuorum`] if fewer than a majority answered.
    pub(crate) async fn extend_nodes(
        &self,
        key: &str,
        token: &LockToken,
        ttl: Duration,
    ) -> Result<Instant> {
        validate_name(key)?;
        let ttl_ms = ttl_millis(ttl)?;
        let started = Instant::now();
        let (key_owned, token) = (key.to_string(), token.clone());
        let (reports, _) = self
            .fan_out(Vec::new(), Wait::Quorum, move |client| {
                let (key, token) = (key_owned.clone(), token.clone());
                async move {
                    let extended = client.extend_raw(&key, token.expose(), ttl_ms).await?;
                    Ok(if extended {
                        Reply::Yes(())
                    } else {
                        Reply::No(None)
                    })
                }
            })
            .await;
        self.confirmed(key, reports)?;
        let valid_until = started + ttl.saturating_sub(self.inner.options.drift_for(ttl));
        if Instant::now() >= valid_until {
            return Err(Error::NotHeld {
                key: key.to_string(),
            });
        }
        Ok(valid_until)
    }

    /// Renews an auto-extended Redlock lease every interval until it ends, is lost, or reaches
    /// its hold cap; one task per lease (Redlock leases are few and each renewal is N round
    /// trips anyway).
    pub(super) fn keep_alive(&self, lease: Lease, options: &LockOptions) {
        let redlock = self.clone();
        let ttl = options.ttl();
        let interval = options.renew_interval();
        let stop_at = options.max_hold_bound().map(|cap| Instant::now() + cap);
        tokio::spawn(async move {
            let mut next = Instant::now() + interval;
            loop {
                tokio::time::sleep_until(next.into()).await;
                if lease.is_ended() || lease.loss_reason().is_some() {
                    return;
                }
                if stop_at.is_some_and(|s| Instant::now() >= s) {
                    // Capped: let it run out, and say so when it does.
                    tokio::time::sleep_until(lease.valid_until().into()).await;
                    lease.mark_lost(LossReason::Expired);
                    return;
                }
                let deadline = lease.valid_until();
                // The send recorded first: an outcome left unknown never raises the validity.
                let sent = Instant::now();
                let bound = sent + ttl.saturating_sub(redlock.inner.options.drift_for(ttl));
                let sent_extend = lease.extend_sent(sent, bound);
                match tokio::time::timeout_at(
                    deadline.into(),
                    redlock.extend_nodes(lease.key(), lease.token(), ttl),
                )
                .await
                {
                    Ok(Ok(until)) => {
                        sent_extend.confirm(until.min(bound));
                        next = Instant::now() + interval;
                    }
                    Ok(Err(Error::NotHeld { .. })) => {
                        lease.mark_lost(LossReason::NotHeld);
                        return;
                    }
                    _ if Instant::now() >= deadline => {
                        lease.mark_lost(LossReason::Expired);
                        return;
                    }
                    _ => next = Instant::now() + (interval / 8).max(Duration::from_millis(5)),
                }
            }
        });
    }
}

/// A lock held on a Redlock set, and the acquisition's requests still on their way to slow
/// nodes (the release waits for each, so it never overtakes that node's acquisition), and
/// whether it was taken with [`LockOptions::min_hold`].
#[derive(Debug)]
pub(super) struct RedlockHeld(
    pub(super) Redlock,
    pub(super) Arc<std::sync::Mutex<Tasks>>,
    pub(super) bool,
);

impl HeldLock for RedlockHeld {
    fn release<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let prior = std::mem::take(&mut *self.1.lock().unwrap_or_else(|p| p.into_inner()));
            self.0
                .release_after(prior, lease.key(), lease.token(), self.2)
                .await
        })
    }

    fn extend<'a>(&'a self, lease: &'a Lease, ttl: Duration) -> BoxFuture<'a, Result<Instant>> {
        Box::pin(self.0.extend_nodes(lease.key(), lease.token(), ttl))
    }

    fn drift(&self, ttl: Duration) -> Duration {
        self.0.inner.options.drift_for(ttl)
    }
}
