//! The history log on etcd: one key per event, `\0history\0K\0<id>` (a NUL first, so no lock
//! key's entries `K\0token` can start like it: lock keys are never empty and have no NUL), each
//! on a lease of the retention.
//!
//! **Append** is one transaction: the put, and a count of the key's events; only when the count
//! is over the cap, a second read finds the oldest (lowest `create_revision`) and a third
//! request deletes them. The lease is granted once per client and reused while at least 90% of
//! the retention is left on it, so an event lives between 90% and 100% of the retention, and a
//! client grants one lease per tenth of the retention at most.
//!
//! **Guarantees.** After an append, the key has at most `cap` events, plus one for each append
//! running concurrently (a trim counts what it sees). Events read back in the order etcd stored
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
    Arc::new(EtcdHistory {
        client: client.clone(),
        options: *options,
        lease: Mutex::new(None),
    })
}

struct EtcdHistory {
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

/// The event's fields, `name\0value\0…` (a NUL in a value becomes a space).
fn encode(event: &HistoryEvent) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, value) in event.fields() {
        out.extend_from_slice(name.as_bytes());
        out.push(0);
        out.extend_from_slice(value.replace('\0', " ").as_bytes());
        out.push(0);
    }
    out
}

fn decode(value: &[u8]) -> Result<HistoryEvent> {
    let text = String::from_utf8_lossy(value);
    let parts: Vec<&str> = text.trim_end_matches('\0').split('\0').collect();
    HistoryEvent::from_fields(parts.chunks(2).filter_map(|pair| match pair {
        [name, value] => Some((*name, *value)),
        _ => None,
    }))
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

    async fn append(&self, key: &str, event: &HistoryEvent) -> Result<()> {
        check_key(key)?;
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
        let txn = Txn::new()
            .when([Compare::create_revision(name.clone(), CompareOp::Equal, 0)])
            .and_then([
                TxnOp::put(
                    name,
                    encode(event),
                    Some(PutOptions::new().with_lease(lease)),
                ),
                TxnOp::get(
                    prefix.clone(),
                    Some(GetOptions::new().with_prefix().with_count_only()),
                ),
            ]);
        let resp = match self.client.txn(Operation::History, true, txn).await {
            Ok(resp) => resp,
            Err(e) => {
                // The lease may be gone (revoked, or etcd's clock moved): grant a new one next time.
                *self.lease.lock().unwrap_or_else(|p| p.into_inner()) = None;
                return Err(e);
            }
        };
        let count = match resp.op_responses().into_iter().nth(1) {
            Some(TxnOpResponse::Get(g)) => g.count(),
            _ => 0,
        };
        let cap = i64::from(self.options.events_per_key());
        if count > cap {
            self.trim(&prefix, count - cap).await?;
        }
        Ok(())
    }

    /// A range read under `prefix`.
    async fn get(&self, prefix: &[u8], options: GetOptions) -> Result<ec::GetResponse> {
        self.client
            .request(Operation::History, false, || {
                let mut kv = self.client.inner.etcd.kv_client();
                let (prefix, options) = (prefix.to_vec(), options.clone());
                async move { kv.get(prefix, Some(options)).await }
            })
            .await
    }

    /// Deletes the `excess` oldest events under `prefix`.
    async fn trim(&self, prefix: &[u8], excess: i64) -> Result<()> {
        let options = GetOptions::new()
            .with_prefix()
            .with_keys_only()
            .with_sort(SortTarget::Create, SortOrder::Ascend)
            .with_limit(excess);
        let mut resp = self.get(prefix, options).await?;
        let oldest: Vec<Vec<u8>> = resp
            .take_kvs()
            .into_iter()
            .map(|kv| kv.key().to_vec())
            .collect();
        for batch in oldest.chunks(TRIM_BATCH) {
            let deletes: Vec<TxnOp> = batch
                .iter()
                .map(|k| TxnOp::delete(k.clone(), None))
                .collect();
            self.client
                .txn(Operation::History, true, Txn::new().and_then(deletes))
                .await?;
        }
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
        let mut resp = self.get(&history_prefix(key), options).await?;
        resp.take_kvs()
            .iter()
            .map(|kv| decode(kv.value()))
            .collect()
    }
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
        let back = decode(&encode(&event)).unwrap();
        assert_eq!(back.detail.as_deref(), Some("a b"));
        assert_eq!(
            (back.kind, back.fencing, back.holder),
            (event.kind, event.fencing, event.holder)
        );
    }

    #[test]
    fn history_keys_never_start_like_a_lock_entry() {
        // A lock `K`'s entries are `K\0token`, K non-empty without NUL: none starts with NUL.
        assert!(history_prefix("a").starts_with(b"\0"));
        assert!(!history_prefix("a").starts_with(b"a\0"));
    }
}
