//! [`EtcdRwLock`]: etcd's `RWMutex` recipe, readers under `\0rwlock\0K\0read\0`, writers under
//! `\0rwlock\0K\0write\0` (see the [module docs](super)).

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{GetOptions, SortOrder, SortTarget};

use crate::core::error::Result;
use crate::core::guard::LockGuard;
use crate::core::options::LockOptions;
use crate::core::outcome::TryAcquire;
use crate::core::sync::Side;
use crate::core::token::LockToken;

use super::super::acquire::{EntryOf, Queue};
use super::super::client::EtcdClient;
use super::prefix;

/// The read-write lock `name`, on etcd.
#[derive(Debug, Clone)]
pub(super) struct EtcdRwLock {
    client: EtcdClient,
    name: Arc<str>,
    /// `\0rwlock\0name\0`: every entry.
    prefix: Vec<u8>,
}

impl EtcdRwLock {
    pub(super) fn new(client: &EtcdClient, name: &str) -> Self {
        EtcdRwLock {
            client: client.clone(),
            name: name.into(),
            prefix: prefix("rwlock", name),
        }
    }

    /// `prefix read\0` or `prefix write\0`: one side's entries.
    fn side_prefix(&self, side: Side) -> Vec<u8> {
        let mut p = self.prefix.clone();
        p.extend_from_slice(match side {
            Side::Read => b"read\0",
            Side::Write => b"write\0",
        });
        p
    }

    fn entry(&self, side: Side, token: &LockToken) -> Vec<u8> {
        let mut e = self.side_prefix(side);
        e.extend_from_slice(token.expose().as_bytes());
        e
    }

    /// A reader is held back by the writers ahead of it, a writer by every entry ahead.
    fn queue<'a>(&'a self, side: Side, entry: &'a EntryOf<'a>) -> Queue<'a> {
        Queue {
            name: &self.name,
            entry,
            all: self.prefix.clone(),
            blockers: match side {
                Side::Read => self.side_prefix(Side::Write),
                Side::Write => self.prefix.clone(),
            },
            allowed: 1,
            check_first: None,
            records: false,
        }
    }

    async fn try_side(&self, side: Side, options: &LockOptions) -> Result<TryAcquire> {
        let secs = self.client.check_request(&self.name, options)?;
        let entry = |t: &LockToken| self.entry(side, t);
        self.client
            .try_queue(&self.queue(side, &entry), options, secs)
            .await
    }

    async fn wait_side(&self, side: Side, options: &LockOptions) -> Result<LockGuard> {
        let secs = self.client.check_request(&self.name, options)?;
        let entry = |t: &LockToken| self.entry(side, t);
        self.client
            .acquire_in(
                &self.queue(side, &entry),
                options,
                secs,
                options.wait_bound(),
            )
            .await
    }
}

#[async_trait::async_trait]
impl crate::core::sync::RwLockProvider for EtcdRwLock {
    /// One attempt: a reader succeeds while no writer holds or waits, a writer while nobody
    /// holds or waits.
    async fn try_take(&self, side: Side, options: &LockOptions) -> Result<TryAcquire> {
        self.try_side(side, options).await
    }

    /// Waits: a reader behind the writers that came before, a writer behind everyone who came
    /// before (readers who come later wait for it).
    async fn take(&self, side: Side, options: &LockOptions) -> Result<LockGuard> {
        self.wait_side(side, options).await
    }

    async fn release(&self, side: Side, token: &LockToken) -> Result<()> {
        let entry = self.entry(side, token);
        self.client
            .release_entry(&self.name, entry, token, None)
            .await
    }

    async fn extend(&self, side: Side, token: &LockToken, ttl: Duration) -> Result<()> {
        let entry = self.entry(side, token);
        self.client
            .extend_entry(&self.name, entry, token, ttl)
            .await
    }

    /// The readers holding now: the read entries ahead of the first write entry.
    async fn readers(&self) -> Result<u32> {
        let options = GetOptions::new()
            .with_prefix()
            .with_sort(SortTarget::Create, SortOrder::Ascend)
            .with_keys_only();
        let resp = self.client.read(&self.prefix, options).await?;
        let readers = self.side_prefix(Side::Read);
        let holding = resp
            .kvs()
            .iter()
            .take_while(|kv| kv.key().starts_with(&readers))
            .count();
        Ok(holding as u32)
    }
}
