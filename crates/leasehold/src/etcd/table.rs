//! The lock table on etcd: [`Locker::list`](crate::Locker::list) and [`Locker::force_release`](crate::Locker::force_release).
//!
//! A lock `K` is the range of entries `K\0token`, each with its holder's or waiter's lease; the
//! entry with the lowest create revision holds the lock, the others wait in that order. Listing
//! reads that layout (one range read from the pattern's literal prefix, then each holder's
//! lease TTL); keys without a NUL are not lock entries and are not listed. The primitives'
//! entries (`\0semaphore\0K\0…`, `\0rwlock\0K\0…`, `\0election\0K\0…`: see the `sync`
//! module) are read from their own prefixes and listed as their kinds; the history's
//! (`\0history\0…`) are not locks.

use std::collections::BTreeMap;

use ec::{Compare, CompareOp, GetOptions, Txn, TxnOp};
use etcd_client as ec;

use crate::core::driver::LockTable;
use crate::core::error::{Error, Operation, Result};
use crate::core::listing::{
    ForceReleased, LockEntry, LockHolder, LockKind, check_reason, glob_match,
};
use crate::core::owner::Owner;

use super::EtcdClient;
use super::keys::{check_key, queue_prefix};

/// One entry of a lock's queue.
struct QueueEntry {
    value: String,
    key: Vec<u8>,
    revision: i64,
    lease: i64,
}

impl EtcdClient {
    /// The held `kind` primitives (`semaphore`, `rwlock`, `election`) whose names start with
    /// `literal` and match `pattern`, added to `entries`: the holders as the primitive's
    /// recipe makes them (a semaphore's `N` first entries; a writer first, or the readers
    /// before the first writer; the first candidate), the others waiting.
    async fn list_primitive(
        &self,
        kind: &str,
        literal: &str,
        pattern: &str,
        entries: &mut Vec<LockEntry>,
    ) -> Result<()> {
        let mut prefix = format!("\0{kind}\0").into_bytes();
        prefix.extend_from_slice(literal.as_bytes());
        let options = GetOptions::new().with_prefix();
        let mut resp = self.read(&prefix, options.clone()).await?;
        // name -> its entries, each with the parts of its key after the name.
        let mut found: BTreeMap<String, Vec<(QueueEntry, Vec<String>)>> = BTreeMap::new();
        for kv in resp.take_kvs() {
            let parts: Vec<String> = kv
                .key()
                .split(|&b| b == 0)
                .map(|p| String::from_utf8_lossy(p).into_owned())
                .collect();
            let [_, _, name, rest @ ..] = parts.as_slice() else {
                continue;
            };
            if !glob_match(pattern, name) {
                continue;
            }
            let entry = QueueEntry {
                value: String::from_utf8_lossy(kv.value()).into_owned(),
                key: kv.key().to_vec(),
                revision: kv.create_revision(),
                lease: kv.lease(),
            };
            found
                .entry(name.clone())
                .or_default()
                .push((entry, rest.to_vec()));
        }
        for (name, mut queue) in found {
            queue.sort_by_key(|(e, _)| e.revision);
            let (kind, holding, permits) = match kind {
                "semaphore" => {
                    // `token \0 N`: the N of the first entry is the semaphore's.
                    let n = queue[0].1.get(1).and_then(|n| n.parse::<usize>().ok());
                    let n = n.unwrap_or(1);
                    (LockKind::Permits, n.min(queue.len()), Some(n as u64))
                }
                "rwlock" if queue[0].1.first().map(String::as_str) == Some("write") => {
                    (LockKind::Lock, 1, None)
                }
                "rwlock" => {
                    let readers = queue
                        .iter()
                        .take_while(|(_, rest)| rest.first().map(String::as_str) == Some("read"))
                        .count();
                    (LockKind::Read, readers, None)
                }
                _ => (LockKind::Election, 1, None),
            };
            let mut holders = Vec::new();
            for (e, _) in &queue[..holding] {
                let ttl = self.lease_ttl(e.lease).await?;
                holders.extend(LockHolder::from_value(&e.value, ttl));
            }
            if holders.is_empty() {
                continue;
            }
            let mut entry = LockEntry::new(name, kind, holders);
            if kind != LockKind::Permits && kind != LockKind::Read {
                entry.fencing_counter = Some(queue[0].0.revision as u64);
            }
            entry.waiters = Some((queue.len() - holding) as u64);
            entry.permits = permits;
            entries.push(entry);
        }
        Ok(())
    }

    /// `key`'s first entry (its holder's), if any: the lowest create revision under `K\0`.
    pub(super) async fn first_entry(&self, key: &str) -> Result<Option<ec::KeyValue>> {
        let options = GetOptions::new()
            .with_prefix()
            .with_sort(ec::SortTarget::Create, ec::SortOrder::Ascend)
            .with_limit(1);
        let prefix = queue_prefix(key);
        let mut resp = self.read(&prefix, options.clone()).await?;
        Ok(resp.take_kvs().into_iter().next())
    }

    /// Why a key with no entries cannot be forced: free, or an etcd key that is not a lock.
    async fn not_a_lock_or_free(&self, key: &str) -> Error {
        let options = GetOptions::new().with_count_only();
        let found = self.read(key.as_bytes(), options).await;
        match found {
            Ok(resp) if resp.count() > 0 => Error::invalid(
                "key",
                format!("{key:?} is an etcd key, not a leasehold lock (no {key:?}\\0 entries)"),
            ),
            Ok(_) => Error::NotHeld {
                key: key.to_string(),
            },
            Err(e) => e,
        }
    }
}

#[async_trait::async_trait]
impl LockTable for EtcdClient {
    /// The held locks whose names match `pattern`: holder (the first entry) with its owner and
    /// lease TTL, fencing number (its create revision), waiters (the other entries). A snapshot
    /// at one revision of the range read; the TTLs are read after it.
    ///
    /// # Errors
    /// [`Error::PermissionDenied`] when etcd's RBAC refuses the range; connection errors.
    async fn list(&self, pattern: &str) -> Result<Vec<LockEntry>> {
        let literal: String = pattern
            .chars()
            .take_while(|c| !matches!(c, '*' | '?' | '\\'))
            .collect();
        let options = GetOptions::new().with_prefix();
        let mut resp = self.read(literal.as_bytes(), options.clone()).await?;
        let mut locks: BTreeMap<String, Vec<QueueEntry>> = BTreeMap::new();
        for kv in resp.take_kvs() {
            // No NUL: not a lock entry; a NUL first: a primitive's or the history's (below).
            let Some(at) = kv.key().iter().position(|&b| b == 0).filter(|&at| at > 0) else {
                continue;
            };
            let name = String::from_utf8_lossy(&kv.key()[..at]).into_owned();
            if glob_match(pattern, &name) {
                locks.entry(name).or_default().push(QueueEntry {
                    value: String::from_utf8_lossy(kv.value()).into_owned(),
                    key: kv.key().to_vec(),
                    revision: kv.create_revision(),
                    lease: kv.lease(),
                });
            }
        }
        let mut entries = Vec::new();
        for (name, mut queue) in locks {
            queue.sort_by_key(|e| e.revision);
            let first = &queue[0];
            let ttl = self.lease_ttl(first.lease).await?;
            let Some(holder) = LockHolder::from_value(&first.value, ttl) else {
                continue;
            };
            let mut entry = LockEntry::new(name, LockKind::Lock, vec![holder]);
            entry.fencing_counter = Some(first.revision as u64);
            entry.waiters = Some(queue.len() as u64 - 1);
            entries.push(entry);
        }
        for kind in ["semaphore", "rwlock", "election"] {
            self.list_primitive(kind, &literal, pattern, &mut entries)
                .await?;
        }
        entries.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(entries)
    }

    /// Deletes `key`'s holder entry whatever its token, in a transaction conditioned on that
    /// entry still being the one read (same create revision), so a holder that changed
    /// meanwhile is never removed. The next waiter then takes the lock; the old holder's
    /// extend and release find no entry ([`Error::NotHeld`]). Its lease is left alone: a
    /// session's lease may carry that client's other locks too.
    ///
    /// **Fencing.** etcd's fencing numbers are create revisions, cluster-wide, and nothing can
    /// be bumped: the `fencing_counter` returned is the removed entry's create revision + 1.
    /// Every number the removed holder has is below it; every later holder's number is at
    /// least it (the holder was the lowest entry, so every other entry, a waiter queued before
    /// the force included, has a higher create revision; a waiter queued right after the
    /// holder may have exactly this number). So a resource that refuses numbers below the
    /// highest it saw refuses the old holder once it has seen the counter or a later holder's
    /// number, and refuses no queued waiter. (The deletion's own revision, reported before,
    /// is above the queued waiters' numbers: a resource raised to it refused them all.)
    /// *Test:* `etcd_backend.rs`: `a_forced_counter_is_at_most_the_queued_waiters_number`.
    /// The record of who and why is the warn log line (no etcd key is written outside the
    /// lock's entries: a key under `K\0` would be taken for a waiter).
    ///
    /// # Errors
    /// [`Error::NotHeld`] if nobody holds it (or the holder kept changing over three tries);
    /// [`Error::InvalidArgument`] for a bad reason, or when `key` has no entries but is itself
    /// an etcd key (it is not a lock: nothing is written).
    async fn force_release(&self, key: &str, reason: &str) -> Result<ForceReleased> {
        check_key(key)?;
        check_reason(reason)?;
        for _ in 0..3 {
            let Some(first) = self.first_entry(key).await? else {
                return Err(self.not_a_lock_or_free(key).await);
            };
            let entry = QueueEntry {
                value: String::from_utf8_lossy(first.value()).into_owned(),
                key: first.key().to_vec(),
                revision: first.create_revision(),
                lease: first.lease(),
            };
            let txn = Txn::new()
                .when([Compare::create_revision(
                    entry.key.clone(),
                    CompareOp::Equal,
                    entry.revision,
                )])
                .and_then([TxnOp::delete(entry.key.clone(), None)]);
            let done = self.txn(Operation::Release, true, txn).await?;
            if !done.succeeded() {
                continue;
            }
            let previous = LockHolder::from_value(&entry.value, None).ok_or_else(|| {
                Error::UnexpectedReply {
                    op: Operation::Release,
                    detail: format!("{key:?}'s holder entry has an empty value"),
                }
            })?;
            return Ok(ForceReleased {
                key: key.to_string(),
                previous,
                fencing_counter: Some(entry.revision as u64 + 1),
                forced_by: Owner::this_process(),
                reason: reason.to_string(),
            });
        }
        Err(Error::NotHeld {
            key: key.to_string(),
        })
    }

    fn history_log(
        &self,
        options: &crate::core::history::HistoryOptions,
    ) -> Option<std::sync::Arc<dyn crate::core::history::HistoryLog>> {
        Some(super::history::log(self, options))
    }

    /// A plain lock's acquiring and releasing transactions put the events (`etcd::history`).
    fn recording(
        &self,
        options: &crate::core::history::HistoryOptions,
    ) -> Option<std::sync::Arc<dyn crate::core::driver::Driver>> {
        Some(std::sync::Arc::new(EtcdClient::recording(self, options)))
    }

    fn records_releases(&self) -> bool {
        self.history.is_some()
    }
}
