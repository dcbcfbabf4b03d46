//! [`EtcdElection`]: etcd's `concurrency.Election`, campaigns under `\0election\0K\0` (see the
//! [module docs](super)).

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{GetOptions, SortOrder, SortTarget, WatchOptions, WatchStream};
use futures_util::FutureExt;
use futures_util::future::BoxFuture;

use crate::core::error::{Error, Result};
use crate::core::guard::LockGuard;
use crate::core::options::LockOptions;
use crate::core::sync::{Leader, LeaderChanges};
use crate::core::token::LockToken;

use super::super::acquire::Queue;
use super::super::client::EtcdClient;
use super::prefix;

/// Pause before opening a broken watch again.
const REOPEN_PAUSE: Duration = Duration::from_millis(200);

/// The election `name`, on etcd.
#[derive(Debug, Clone)]
pub(super) struct EtcdElection {
    client: EtcdClient,
    name: Arc<str>,
    /// `\0election\0name\0`.
    prefix: Vec<u8>,
}

impl EtcdElection {
    pub(super) fn new(client: &EtcdClient, name: &str) -> Self {
        EtcdElection {
            client: client.clone(),
            name: name.into(),
            prefix: prefix("election", name),
        }
    }
}

#[async_trait::async_trait]
impl crate::core::sync::ElectionProvider for EtcdElection {
    /// Waits to lead as `id`: an entry `prefix token \0 id` on the session of the TTL, which
    /// leads once every earlier entry is gone; its create revision is the term. Auto-extended
    /// and fenced whatever `options` say.
    ///
    /// # Errors
    /// [`Error::Unsupported`] with fair mode or `replica_ack`; [`Error::NotAcquired`] at the
    /// deadline; as [`Locker::acquire`](crate::Locker::acquire).
    async fn campaign(&self, id: &str, options: &LockOptions) -> Result<LockGuard> {
        let options = options.clone().fencing(true).auto_extend(true);
        let secs = self.client.check_request(&self.name, &options)?;
        let entry = |token: &LockToken| {
            let mut e = self.prefix.clone();
            e.extend_from_slice(token.expose().as_bytes());
            e.push(0);
            e.extend_from_slice(id.as_bytes());
            e
        };
        let queue = Queue {
            name: &self.name,
            entry: &entry,
            all: self.prefix.clone(),
            blockers: self.prefix.clone(),
            allowed: 1,
            check_first: None,
            records: false,
        };
        // The handle set the wait (for ever without one: `Election::campaign`).
        self.client
            .acquire_in(&queue, &options, secs, options.wait_bound())
            .await
    }

    /// The first entry: its id, its create revision (the term) and its lease's remaining TTL.
    /// Two round trips when someone leads (the entry, then its lease).
    ///
    /// # Errors
    /// [`Error::Conflict`] for an entry that is not a campaign's; connection and server
    /// errors.
    async fn leader(&self) -> Result<Option<Leader>> {
        let options = GetOptions::new()
            .with_prefix()
            .with_sort(SortTarget::Create, SortOrder::Ascend)
            .with_limit(1)
            .with_keys_only();
        let resp = self.client.read(&self.prefix, options).await?;
        let Some(first) = resp.kvs().first() else {
            return Ok(None);
        };
        let id = first.key()[self.prefix.len()..]
            .splitn(2, |b| *b == 0)
            .nth(1)
            .ok_or_else(|| Error::Conflict {
                key: self.name.to_string(),
                detail: "the election's first entry names no candidate".into(),
            })?;
        let ttl = self.client.lease_ttl(first.lease()).await?;
        Ok(Some(Leader {
            id: String::from_utf8_lossy(id).into_owned(),
            term: first.create_revision() as u64,
            ttl,
        }))
    }

    /// An etcd watch on the election's prefix: every campaign, resignation and expiry.
    async fn changes(&self) -> Option<Box<dyn LeaderChanges>> {
        let mut changes = EtcdLeaderChanges {
            election: self.clone(),
            stream: None,
        };
        changes.open().await;
        Some(Box::new(changes) as Box<dyn LeaderChanges>)
    }
}

/// The watch on an election's prefix, as [`Election::watch`](crate::Election::watch) hears
/// it. A broken watch is opened again (and its gap covered by the read that follows).
struct EtcdLeaderChanges {
    election: EtcdElection,
    stream: Option<WatchStream>,
}

impl EtcdLeaderChanges {
    /// Opens the watch (from now); `false` if etcd did not answer.
    async fn open(&mut self) -> bool {
        let client = &self.election.client;
        let mut watcher = client.inner.etcd.watch_client();
        let options = WatchOptions::new().with_prefix();
        let prefix = self.election.prefix.clone();
        let opened = tokio::time::timeout(
            client.inner.response_timeout,
            watcher.watch(prefix, Some(options)),
        )
        .await;
        self.stream = opened.ok().and_then(|r| r.ok());
        self.stream.is_some()
    }
}

impl LeaderChanges for EtcdLeaderChanges {
    fn mark_seen(&mut self) {
        while let Some(stream) = self.stream.as_mut() {
            match stream.message().now_or_never() {
                None => return,
                Some(Ok(Some(_))) => {}
                Some(_) => self.stream = None,
            }
        }
    }

    fn changed(&mut self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            loop {
                let Some(stream) = self.stream.as_mut() else {
                    if self.open().await {
                        // What happened while it was broken: the next read sees it.
                        return;
                    }
                    tokio::time::sleep(REOPEN_PAUSE).await;
                    continue;
                };
                match stream.message().await {
                    Ok(Some(resp)) if resp.canceled() || !resp.events().is_empty() => return,
                    Ok(Some(_)) => {}
                    _ => {
                        self.stream = None;
                        tokio::time::sleep(REOPEN_PAUSE).await;
                    }
                }
            }
        })
    }
}
