//! [`EtcdSemaphore`]: the entries with the `N` lowest create revisions under
//! `\0semaphore\0K\0` hold a permit (see the [module docs](super)).

use std::sync::Arc;
use std::time::Duration;

use etcd_client::GetOptions;

use crate::core::error::{Error, Result};
use crate::core::guard::LockGuard;
use crate::core::options::LockOptions;
use crate::core::outcome::TryAcquire;
use crate::core::token::LockToken;

use super::super::acquire::{CheckFirst, EntryOf, Queue};
use super::super::client::EtcdClient;
use super::prefix;

/// The semaphore `name` of `permits`, on etcd.
#[derive(Debug, Clone)]
pub(super) struct EtcdSemaphore {
    client: EtcdClient,
    name: Arc<str>,
    permits: u32,
    /// `\0semaphore\0name\0`.
    prefix: Vec<u8>,
}

impl EtcdSemaphore {
    pub(super) fn new(client: &EtcdClient, name: &str, permits: u32) -> Self {
        EtcdSemaphore {
            client: client.clone(),
            name: name.into(),
            permits,
            prefix: prefix("semaphore", name),
        }
    }

    /// `prefix token \0 permits`.
    fn entry(&self, token: &LockToken) -> Vec<u8> {
        let mut e = self.prefix.clone();
        e.extend_from_slice(token.expose().as_bytes());
        e.push(0);
        e.extend_from_slice(self.permits.to_string().as_bytes());
        e
    }

    /// Refuses a first entry (`first`, a key) made with another number of permits.
    fn check_first(&self, first: &[u8]) -> Result<()> {
        let theirs = first
            .rsplit(|b| *b == 0)
            .next()
            .and_then(|n| std::str::from_utf8(n).ok())
            .and_then(|n| n.parse::<u32>().ok());
        match theirs {
            Some(n) if n == self.permits => Ok(()),
            Some(n) => Err(Error::Conflict {
                key: self.name.to_string(),
                detail: format!(
                    "the semaphore is held with {n} permits, not {}",
                    self.permits
                ),
            }),
            None => Err(Error::Conflict {
                key: self.name.to_string(),
                detail: "an entry of the semaphore names no number of permits".into(),
            }),
        }
    }

    /// The queue, for an attempt with `entry` and `check` (closures over `self`).
    fn queue<'a>(&'a self, entry: &'a EntryOf<'a>, check: &'a CheckFirst<'a>) -> Queue<'a> {
        Queue {
            name: &self.name,
            entry,
            all: self.prefix.clone(),
            blockers: self.prefix.clone(),
            allowed: self.permits as usize,
            check_first: Some(check),
            records: false,
        }
    }

    fn check(&self, options: &LockOptions) -> Result<i64> {
        self.client.check_request(&self.name, options)
    }
}

#[async_trait::async_trait]
impl crate::core::sync::SemaphoreProvider for EtcdSemaphore {
    /// One attempt (see [`Locker::try_acquire`](crate::Locker::try_acquire)): busy while `permits` entries exist.
    ///
    /// # Errors
    /// [`Error::Unsupported`] with fencing, fair mode or `replica_ack`; [`Error::Conflict`]
    /// when the semaphore is held with another number of permits; as
    /// [`Locker::try_acquire`](crate::Locker::try_acquire).
    async fn try_acquire(&self, options: &LockOptions) -> Result<TryAcquire> {
        let secs = self.check(options)?;
        let (entry, check) = (
            |t: &LockToken| self.entry(t),
            |f: &[u8]| self.check_first(f),
        );
        self.client
            .try_queue(&self.queue(&entry, &check), options, secs)
            .await
    }

    /// Waits for a permit until `options.wait_bound()` (one attempt without one), in arrival
    /// order.
    ///
    /// # Errors
    /// [`Error::NotAcquired`] at the deadline; as [`EtcdSemaphore::try_acquire`].
    async fn acquire(&self, options: &LockOptions) -> Result<LockGuard> {
        let secs = self.check(options)?;
        let (entry, check) = (
            |t: &LockToken| self.entry(t),
            |f: &[u8]| self.check_first(f),
        );
        self.client
            .acquire_in(
                &self.queue(&entry, &check),
                options,
                secs,
                options.wait_bound(),
            )
            .await
    }

    /// Releases the permit of `token` (of this number of permits), token-checked.
    async fn release(&self, token: &LockToken) -> Result<()> {
        self.client
            .release_entry(&self.name, self.entry(token), token, None)
            .await
    }

    /// Moves the permit of `token` onto a fresh lease of `ttl`, token-checked.
    async fn extend(&self, token: &LockToken, ttl: Duration) -> Result<()> {
        self.client
            .extend_entry(&self.name, self.entry(token), token, ttl)
            .await
    }

    /// The entries, at most `permits`: the holders (a waiter whose turn came and which has not
    /// read it yet counts as a holder).
    async fn holders(&self) -> Result<u32> {
        let options = GetOptions::new().with_prefix().with_count_only();
        let resp = self.client.read(&self.prefix, options).await?;
        Ok((resp.count().max(0) as u64).min(u64::from(self.permits)) as u32)
    }
}
