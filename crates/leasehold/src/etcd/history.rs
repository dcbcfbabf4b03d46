//! The history log on etcd: one key per event, `\0history\0K\0<id>` (a NUL first, so no lock
//! key's entries `K\0token` can start like it: lock keys are never empty and have no NUL), each
//! on a lease of the retention.
//!
//! **Append** is one transaction: the put, and a count of the key's events; only when the count
//! is over the cap, a second read (in the background) finds the events older than the `cap`
//! newest (by `create_revision`) and a third request deletes them. The lease is granted once per client and reused while at least 90% of
//! the retention is left on it, so an event lives between 90% and 100% of the retention, and a
//! client grants one lease per tenth of the retention at most.
//!
//! **In the lock's own transaction.** For a [`Locker`](crate::Locker) that records history, a
//! plain lock's acquisition and release (without `min_hold`) put their event in the transaction
//! that writes or deletes the lock's entry ([`Rider`]): stored exactly when the lock operation
//! is, in its round trip. An acquisition's event there cannot name its fencing number (the
//! transaction's revision is known only from its reply), so it stores a mark instead and is
//! read back with its key's create revision, which is that transaction's, the entry's and so
//! the fencing number. The count of the key's events rides along; a trim over the cap is a
//! step of its own, in the background. An acquisition that waited in the queue on its session's
//! lease (an auto-extended lock) writes nothing when its turn comes, and its events are
//! appended after the operations, as elsewhere.
//!
//! **Guarantees.** After an append, the key has at most `cap` events, plus one for each append
//! running concurrently (a trim counts what it sees); after an event put by a lock's own
//! transaction, once its trim in the background is done. Events read back in the order etcd stored
//! them (`create_revision`), newest first. An event's time is the recording client's clock
//! (etcd has no server time to give cheaply).

use std::sync::{Arc, Mutex};
use std::time::Instant;

use ec::{
    Compare, CompareOp, GetOptions, PutOptions, SortOrder, SortTarget, Txn, TxnOp, TxnOpResponse,
};
use etcd_client as ec;
use futures_util::future::BoxFuture;

use crate::core::error::{Operation, Result};
use crate::core::history::{HistoryEvent, HistoryLog, HistoryOptions, unix_millis};

use super::client::EtcdClient;
use super::keys::check_key;

/// The mark of an event whose fencing number is its key's create revision.
const FENCING_AT_CREATE: &str = "fencing_at_create";

/// Deletes per transaction when trimming (etcd allows 128 operations by default).
const TRIM_BATCH: usize = 64;

/// `\0history\0K\0`: the prefix of lock `K`'s history events.
pub(super) fn history_prefix(key: &str) -> Vec<u8> {
    let mut p = b"\0history\0".to_vec();
    p.extend_from_slice(key.as_bytes());
    p.push(0);
    p
}

/// The history log of `client`'s cluster.
pub(super) fn log(client: &EtcdClient, options: &HistoryOptions) -> Arc<dyn HistoryLog> {
    recorder(client, options)
}

/// The same, for a client whose lock transactions put their events ([`Rider`]).
pub(super) fn recorder(client: &EtcdClient, options: &HistoryOptions) -> Arc<EtcdHistory> {
    Arc::new(EtcdHistory {
        client: client.clone(),
        options: *options,
        lease: Mutex::new(None),
    })
}

pub(super) struct EtcdHistory {
    client: EtcdClient,
    options: HistoryOptions,
    /// The lease events are put on, and when it was granted.
    lease: Mutex<Option<(i64, Instant)>>,
}

impl std::fmt::Debug for EtcdHistory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdHistory")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

/// The event's fields, `name\0value\0…` (a NUL in a value becomes a space); `fencing_at_create`:
/// the event's fencing number is its key's create revision ([`FENCING_AT_CREATE`]).
fn encode(event: &HistoryEvent, fencing_at_create: bool) -> Vec<u8> {
    let mut out = Vec::new();
    let mark = fencing_at_create.then(|| (FENCING_AT_CREATE, "1".to_string()));
    for (name, value) in event.fields().into_iter().chain(mark) {
        out.extend_from_slice(name.as_bytes());
        out.push(0);
        out.extend_from_slice(value.replace('\0', " ").as_bytes());
        out.push(0);
    }
    out
}

/// The event stored as `value` in a key created at `create_revision`.
fn decode(value: &[u8], create_revision: i64) -> Result<HistoryEvent> {
    let text = String::from_utf8_lossy(value);
    let parts: Vec<&str> = text.trim_end_matches('\0').split('\0').collect();
    let fields = || {
        parts.chunks(2).filter_map(|pair| match pair {
            [name, value] => Some((*name, *value)),
            _ => None,
        })
    };
    let mut event = HistoryEvent::from_fields(fields())?;
    if fields().any(|(name, _)| name == FENCING_AT_CREATE) {
        event.fencing = Some(create_revision as u64);
    }
    Ok(event)
}

/// The operations that put an event into a lock's own transaction, and what to do after it.
pub(super) struct Rider {
    /// The event's put, then the count of the key's events: appended to the transaction's
    /// success branch.
    pub(super) ops: [TxnOp; 2],
    /// The event's key.
    name: Vec<u8>,
    prefix: Vec<u8>,
}

impl Rider {
    /// After the transaction succeeded: trims the key's events to the cap ([`trim`]), in the
    /// background, if the count (the operation at `index` of `resp`) is over it.
    pub(super) fn after(self, log: &EtcdHistory, resp: &ec::TxnResponse, index: usize) {
        let count = match resp.op_responses().into_iter().nth(index) {
            Some(TxnOpResponse::Get(g)) => g.count(),
            _ => 0,
        };
        let cap = i64::from(log.options.events_per_key());
        if count > cap {
            let (client, prefix) = (log.client.clone(), self.prefix);
            tokio::spawn(async move {
                if let Err(e) = trim(&client, &prefix, cap).await {
                    tracing::debug!(error = %e, "could not trim a lock's history");
                }
            });
        }
    }
}

impl EtcdHistory {
    /// The lease to put events on: the current one while 90% of the retention is left on it.
    async fn lease(&self) -> Result<i64> {
        let fresh = self.options.retention_period() / 10;
        if let Some((id, granted)) = *self.lease.lock().unwrap_or_else(|p| p.into_inner())
            && granted.elapsed() < fresh
        {
            return Ok(id);
        }
        let secs = self.options.retention_period().as_secs().max(1) as i64;
        let granted = Instant::now();
        let (id, _) = self.client.grant(secs, Operation::History).await?;
        *self.lease.lock().unwrap_or_else(|p| p.into_inner()) = Some((id, granted));
        Ok(id)
    }

    /// The event's put and the count of `key`'s events, for a transaction (the event on this
    /// log's lease, granted first if need be); `fencing_at_create`: as [`encode`].
    pub(super) async fn rider(
        &self,
        key: &str,
        event: &HistoryEvent,
        fencing_at_create: bool,
    ) -> Result<Rider> {
        let prefix = history_prefix(key);
        let mut name = prefix.clone();
        // Time-ordered and unique: a range delete or a human reading the keys sees the order.
        let id = format!(
            "{:016x}{:08x}",
            unix_millis(event.at),
            rand::random::<u32>()
        );
        name.extend_from_slice(id.as_bytes());
        let lease = self.lease().await?;
        let put = TxnOp::put(
            name.clone(),
            encode(event, fencing_at_create),
            Some(PutOptions::new().with_lease(lease)),
        );
        let count = TxnOp::get(
            prefix.clone(),
            Some(GetOptions::new().with_prefix().with_count_only()),
        );
        Ok(Rider {
            ops: [put, count],
            name,
            prefix,
        })
    }

    /// After a transaction with a [`Rider`] failed: the lease may be gone (revoked, or etcd's
    /// clock moved), so a new one is granted next time.
    pub(super) fn forget_lease(&self) {
        *self.lease.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }

    async fn append(&self, key: &str, event: &HistoryEvent) -> Result<()> {
        check_key(key)?;
        let rider = self.rider(key, event, false).await?;
        let txn = Txn::new()
            .when([Compare::create_revision(
                rider.name.clone(),
                CompareOp::Equal,
                0,
            )])
            .and_then(rider.ops.clone());
        let resp = match self.client.txn(Operation::History, true, txn).await {
            Ok(resp) => resp,
            Err(e) => {
                self.forget_lease();
                return Err(e);
            }
        };
        rider.after(self, &resp, 1);
        Ok(())
    }

    async fn read(&self, key: &str, limit: usize) -> Result<Vec<HistoryEvent>> {
        check_key(key)?;
        if limit == 0 {
            return Ok(Vec::new());
        }
        let options = GetOptions::new()
            .with_prefix()
            .with_sort(SortTarget::Create, SortOrder::Descend)
            .with_limit(i64::try_from(limit).unwrap_or(i64::MAX));
        let mut resp = get(&self.client, &history_prefix(key), options).await?;
        resp.take_kvs()
            .iter()
            .map(|kv| decode(kv.value(), kv.create_revision()))
            .collect()
    }
}

/// A range read under `prefix`.
async fn get(client: &EtcdClient, prefix: &[u8], options: GetOptions) -> Result<ec::GetResponse> {
    client
        .request(Operation::History, false, || {
            let mut kv = client.inner.etcd.kv_client();
            let (prefix, options) = (prefix.to_vec(), options.clone());
            async move { kv.get(prefix, Some(options)).await }
        })
        .await
}

/// Deletes the events under `prefix` but the `cap` newest. Concurrent trims of one key never
/// leave fewer: each deletes only events older than the `cap` newest it read, and events only
/// come newer (deleting the `count - cap` oldest instead, two trims that both counted one over
/// could each delete a different oldest one).
async fn trim(client: &EtcdClient, prefix: &[u8], cap: i64) -> Result<()> {
    let options = GetOptions::new()
        .with_prefix()
        .with_keys_only()
        .with_sort(SortTarget::Create, SortOrder::Ascend);
    let mut resp = get(client, prefix, options).await?;
    let keys = resp.take_kvs();
    let excess = keys.len().saturating_sub(usize::try_from(cap).unwrap_or(0));
    for batch in keys[..excess].chunks(TRIM_BATCH) {
        let deletes: Vec<TxnOp> = batch
            .iter()
            .map(|kv| TxnOp::delete(kv.key().to_vec(), None))
            .collect();
        client
            .txn(Operation::History, true, Txn::new().and_then(deletes))
            .await?;
    }
    Ok(())
}

impl HistoryLog for EtcdHistory {
    fn append<'a>(&'a self, key: &'a str, event: &'a HistoryEvent) -> BoxFuture<'a, Result<()>> {
        Box::pin(EtcdHistory::append(self, key, event))
    }

    fn read<'a>(&'a self, key: &'a str, limit: usize) -> BoxFuture<'a, Result<Vec<HistoryEvent>>> {
        Box::pin(EtcdHistory::read(self, key, limit))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::history::HistoryKind;

    #[test]
    fn an_event_survives_its_encoding() {
        let event = HistoryEvent {
            fencing: Some(7),
            holder: Some("#00ff00ff".into()),
            detail: Some("a\0b".into()),
            ..HistoryEvent::new(HistoryKind::Lost)
        };
        let back = decode(&encode(&event, false), 3).unwrap();
        assert_eq!(back.detail.as_deref(), Some("a b"));
        assert_eq!(
            (back.kind, back.fencing, back.holder),
            (event.kind, event.fencing, event.holder)
        );
    }

    #[test]
    fn a_marked_event_has_its_create_revision_for_fencing_number() {
        let event = HistoryEvent::new(HistoryKind::Acquired);
        assert_eq!(decode(&encode(&event, true), 42).unwrap().fencing, Some(42));
        assert_eq!(decode(&encode(&event, false), 42).unwrap().fencing, None);
    }

    #[test]
    fn history_keys_never_start_like_a_lock_entry() {
        // A lock `K`'s entries are `K\0token`, K non-empty without NUL: none starts with NUL.
        assert!(history_prefix("a").starts_with(b"\0"));
        assert!(!history_prefix("a").starts_with(b"a\0"));
    }
}
