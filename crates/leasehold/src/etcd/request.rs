//! Requests to etcd: sent again while they provably never left, bounded by the response
//! timeout; transactions and their replies, lease grants, and cleanup in the background.

use std::sync::Weak;
use std::time::{Duration, Instant};

use ec::{Compare, CompareOp, Txn, TxnOp, TxnOpResponse};
use etcd_client as ec;

use crate::core::error::{Error, Operation, Result};
use crate::core::token::LockToken;

use super::client::EtcdClient;
use super::error::{from_etcd, never_sent, timeout_error, transient};
use super::session::{Orphan, Session};

/// Tries of a background delete of an abandoned entry before it is left to its lease.
const CLEANUP_TRIES: u32 = 5;

pub(super) fn header_revision(resp: &ec::TxnResponse) -> Result<i64> {
    resp.header()
        .map(|h| h.revision())
        .ok_or_else(|| Error::UnexpectedReply {
            op: Operation::Acquire,
            detail: "transaction reply without a header".into(),
        })
}

/// The key-values of the `index`-th operation of a transaction reply, if it was a get.
pub(super) fn txn_get(resp: &ec::TxnResponse, index: usize) -> Vec<ec::KeyValue> {
    match resp.op_responses().into_iter().nth(index) {
        Some(TxnOpResponse::Get(mut g)) => g.take_kvs(),
        _ => Vec::new(),
    }
}

/// How many times a request that never left is sent: the channel balances over the members
/// and keeps a dead one in its set, so a request can land on it; a few more tries reach a live
/// one (with one endpoint, a refused connection fails fast).
pub(super) fn retries_for(endpoints: usize) -> usize {
    2 * endpoints + 2
}

/// Sends a request; if it failed before leaving (the connection was refused), sends it again,
/// up to `tries` times in all: safe for writes too, since nothing reached a server. `None` when
/// `timeout` passed.
async fn send_unsent_again<T, F, Fut>(
    timeout: Duration,
    tries: usize,
    mut send: F,
) -> Option<std::result::Result<T, ec::Error>>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = std::result::Result<T, ec::Error>>,
{
    let deadline = Instant::now() + timeout;
    let mut tried = 0;
    loop {
        tried += 1;
        let result = tokio::time::timeout_at(deadline.into(), send())
            .await
            .ok()?;
        match result {
            Err(e) if never_sent(&e) && tried < tries => {
                tracing::debug!(error = %e, "etcd request not sent (connection refused); again");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            other => return Some(other),
        }
    }
}

pub(super) fn revoke_in_background(etcd: &ec::Client, id: i64, timeout: Duration) {
    let Ok(handle) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let mut leases = etcd.lease_client();
    handle.spawn(async move {
        let _ = tokio::time::timeout(timeout, leases.revoke(id)).await;
    });
}

impl EtcdClient {
    /// Grants a lease of `secs` seconds; returns its id and the TTL etcd granted.
    pub(super) async fn grant(&self, secs: i64, op: Operation) -> Result<(i64, Duration)> {
        let resp = self
            .request(op, false, || {
                let mut leases = self.inner.etcd.lease_client();
                async move { leases.grant(secs, None).await }
            })
            .await?;
        if resp.ttl() <= 0 || !resp.error().is_empty() {
            return Err(Error::UnexpectedReply {
                op,
                detail: format!(
                    "lease grant refused: ttl {}, {:?}",
                    resp.ttl(),
                    resp.error()
                ),
            });
        }
        Ok((resp.id(), Duration::from_secs(resp.ttl() as u64)))
    }

    pub(super) async fn txn(
        &self,
        op: Operation,
        write: bool,
        txn: Txn,
    ) -> Result<ec::TxnResponse> {
        self.request(op, write, || {
            let mut kv = self.inner.etcd.kv_client();
            let txn = txn.clone();
            async move { kv.txn(txn).await }
        })
        .await
    }

    /// Sends a request (again while it provably never left: see [`send_unsent_again`]),
    /// bounded by the response timeout.
    pub(super) async fn request<T, F, Fut>(&self, op: Operation, write: bool, send: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = std::result::Result<T, ec::Error>>,
    {
        let tries = retries_for(self.inner.endpoints.len());
        match send_unsent_again(self.inner.response_timeout, tries, send).await {
            Some(Ok(v)) => Ok(v),
            Some(Err(e)) => Err(from_etcd(op, write, e)),
            None => Err(timeout_error(op, write)),
        }
    }

    pub(super) fn revoke_in_background(&self, id: i64) {
        revoke_in_background(&self.inner.etcd, id, self.inner.response_timeout);
    }

    /// Deletes `entry` if it still holds `token` (and revokes `lease`, the entry's own), in the
    /// background, retrying connection errors a few times. If etcd never confirms the delete
    /// (no reply, or an error), the entry is handed to `sessions`, the live sessions whose
    /// leases it may ride on, as an [`Orphan`]: each deletes it at its next renewals etcd
    /// answers, so it cannot ride on a lease kept alive for other locks, held by nobody
    /// (issue 30, finding L1). On a lease of its own, or on a session that ended, it dies
    /// with that lease (nobody keeps it alive).
    pub(super) fn remove_in_background(
        &self,
        entry: Vec<u8>,
        token: LockToken,
        lease: Option<i64>,
        sessions: Vec<Weak<Session>>,
    ) {
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(
                "etcd entry abandoned outside a tokio runtime; its session deletes it at its \
                 next renewal, or it expires with its lease"
            );
            adopt(&sessions, Orphan::Abandoned { entry, token });
            return;
        };
        let client = self.clone();
        handle.spawn(async move {
            let mut confirmed = false;
            for attempt in 0..CLEANUP_TRIES {
                let txn = Txn::new()
                    .when([Compare::value(
                        entry.clone(),
                        CompareOp::Equal,
                        token.expose(),
                    )])
                    .and_then([TxnOp::delete(entry.clone(), None)]);
                match client.txn(Operation::Release, true, txn).await {
                    Ok(_) => {
                        confirmed = true;
                        break;
                    }
                    Err(e) if transient(&e) && attempt + 1 < CLEANUP_TRIES => {
                        tokio::time::sleep(Duration::from_millis(100 << attempt)).await;
                    }
                    Err(_) => break,
                }
            }
            if !confirmed {
                adopt(&sessions, Orphan::Abandoned { entry, token });
            }
            if let Some(id) = lease {
                let _ = client
                    .request(Operation::Release, true, || {
                        let mut leases = client.inner.etcd.lease_client();
                        async move { leases.revoke(id).await }
                    })
                    .await;
            }
        });
    }
}

/// Hands `orphan` to each live session of `sessions`.
fn adopt(sessions: &[Weak<Session>], orphan: Orphan) {
    for session in sessions.iter().filter_map(Weak::upgrade) {
        session.adopt([orphan.clone()]);
    }
}
