//! A held fair lock: released by handing it on, extended as a plain lock.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;

use crate::core::driver::Driver;
use crate::core::error::{Error, Operation, Result};
use crate::core::guard::HeldLock;
use crate::core::guard::{Lease, extended_by};
use crate::core::token::LockToken;
use crate::redis::client::RedisClient;
use crate::redis::handoff::Tenure;
use crate::redis::scripts::FAIR_RELEASE_SCRIPT;
use crate::redis::slot::validate_name;

use super::early::EarlyHandoff;
use super::pass_on::run_pass_on;
use super::reply::PassOn;

impl RedisClient {
    /// [`Locker::release_fair`](crate::Locker::release_fair), saying whether the lock went to a waiter (true) or was
    /// deleted (false).
    pub(crate) async fn release_fair_handed_over(
        &self,
        key: &str,
        token: &LockToken,
    ) -> Result<bool> {
        validate_name(key)?;
        self.release_fair_with(key, token, None).await
    }

    /// How many of this client's fair waiters for `key` offer an early handoff now (see the
    /// [`fair`](crate::redis::fair) module docs). For tests, which observe this instead of sleeping.
    #[doc(hidden)]
    pub fn early_handoff_offers(&self, key: &str) -> usize {
        self.notifier()
            .map_or(0, |n| n.count_early(|terms| terms.key == key))
    }

    /// A guard's release of its fair lock: early to its next in line if it can (module docs).
    /// True if the lock went to a waiter.
    async fn release_held(&self, lease: &Lease, tenure: &Tenure) -> Result<bool> {
        let early = EarlyHandoff::for_release(self, lease, tenure);
        self.release_fair_with(lease.key(), lease.token(), early)
            .await
    }

    async fn release_fair_with(
        &self,
        key: &str,
        token: &LockToken,
        early: Option<Box<EarlyHandoff>>,
    ) -> Result<bool> {
        match run_pass_on(
            self,
            &FAIR_RELEASE_SCRIPT,
            key,
            token.expose(),
            None,
            Operation::Release,
            early,
        )
        .await?
        {
            PassOn::NotHeld => Err(Error::NotHeld {
                key: key.to_string(),
            }),
            PassOn::Deleted => Ok(false),
            PassOn::HandedOff { .. } | PassOn::Published => {
                crate::core::metrics::handoff();
                Ok(true)
            }
        }
    }
}

/// A fair lock held on one Redis server: released by handing it on; extended as a plain lock.
#[derive(Debug)]
pub(super) struct FairHeld {
    client: RedisClient,
    tenure: Arc<Tenure>,
}

impl FairHeld {
    pub(super) fn new(client: &RedisClient, tenure: Arc<Tenure>) -> Arc<FairHeld> {
        Arc::new(FairHeld {
            client: client.clone(),
            tenure,
        })
    }
}

/// A holding handed over early sends nothing before the release that handed it over has its
/// reply ([`Tenure::settled`]): until that release's script has run, the key still holds the
/// releaser's token, and a release or extend that reached the server first would find it,
/// fail as not held, and leave the lock to expire with the new holder's token.
impl HeldLock for FairHeld {
    fn release<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            self.tenure.settled().await;
            self.client
                .release_held(lease, &self.tenure)
                .await
                .map(drop)
        })
    }

    fn release_handing_over<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move {
            self.tenure.settled().await;
            self.client.release_held(lease, &self.tenure).await
        })
    }

    fn extend<'a>(&'a self, lease: &'a Lease, ttl: Duration) -> BoxFuture<'a, Result<Instant>> {
        Box::pin(async move {
            self.tenure.settled().await;
            extended_by(ttl, self.client.extend(lease.key(), lease.token(), ttl)).await
        })
    }
}
