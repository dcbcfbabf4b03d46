//! Leases of their own for locks that are not auto-extended, kept for the next lock once their
//! lock is released: the grant (one more raft write, waited for before the lock's transaction)
//! is paid once per lease, not once per lock.
//!
//! **Why it is safe.** A lock's validity is counted from before its lease's grant was sent
//! (`Lease::new(…, started, granted)`), so a lock put on a lease granted earlier ends its
//! validity earlier, never later than etcd ends the lease (which started after that send). A
//! lease goes back for reuse only once etcd confirmed the delete of the entry on it (the entry
//! existed, at its create revision, until that delete: so did its lease), and only while it is
//! fresh: granted less than [`FRESH_FOR`] (and less than a twentieth of its TTL) ago, so a lock
//! on a reused lease keeps at least 95 % of its TTL. Anything else (an unanswered delete, a
//! lease an extend moved the entry off, one older than that) is revoked as before. A reused
//! lease that etcd no longer knows (revoked from outside) fails the lock's transaction with
//! nothing applied; the attempt is then made again on a new lease.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::core::error::{Operation, Result};

use super::client::EtcdClient;
use super::lock;

/// How long after its grant a lease may still take a new lock (at most; a twentieth of its
/// TTL if that is less).
pub(super) const FRESH_FOR: Duration = Duration::from_secs(1);

/// Spare leases kept per TTL (more are revoked).
const KEPT_PER_TTL: usize = 64;

/// A lease of a lock's own: its id, when its grant was sent, and the TTL etcd granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct OwnLease {
    pub(super) id: i64,
    pub(super) started: Instant,
    pub(super) granted: Duration,
}

impl OwnLease {
    /// Whether a new lock may still go on it.
    fn fresh(&self) -> bool {
        self.started.elapsed() < FRESH_FOR.min(self.granted / 20)
    }
}

/// The spare leases of a client, by the TTL asked for (whole seconds).
#[derive(Debug, Default)]
pub(super) struct SpareLeases(Mutex<HashMap<i64, Vec<OwnLease>>>);

impl EtcdClient {
    /// A lease of `secs` for one lock: a fresh spare one if `reuse` and there is one, otherwise
    /// a new grant.
    pub(super) async fn own_lease(
        &self,
        secs: i64,
        op: Operation,
        reuse: bool,
    ) -> Result<OwnLease> {
        let (spare, stale) = {
            let mut spares = lock(&self.inner.spares.0);
            let kept = spares.entry(secs).or_default();
            match kept.pop() {
                Some(newest) if reuse && newest.fresh() => (Some(newest), Vec::new()),
                // Older ones are stale too once the newest is.
                Some(newest) => (None, [std::mem::take(kept), vec![newest]].concat()),
                None => (None, Vec::new()),
            }
        };
        for lease in stale {
            self.revoke_in_background(lease.id);
        }
        if let Some(lease) = spare {
            return Ok(lease);
        }
        let started = Instant::now();
        let (id, granted) = self.grant(secs, op).await?;
        Ok(OwnLease {
            id,
            started,
            granted,
        })
    }

    /// Takes back `lease` (asked for `secs`), which no entry uses any more as etcd confirmed:
    /// kept for the next lock while fresh, revoked otherwise.
    pub(super) fn spare_lease(&self, secs: i64, lease: OwnLease) {
        if lease.fresh() {
            let mut spares = lock(&self.inner.spares.0);
            let kept = spares.entry(secs).or_default();
            if kept.len() < KEPT_PER_TTL {
                kept.push(lease);
                return;
            }
        }
        self.revoke_in_background(lease.id);
    }
}
