//! Early handoff within one client (see the module docs): the lock handed to the next in line
//! before the release script runs, and what the release's reply settles.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::core::error::LossReason;
use crate::core::guard::{Lease, valid_until};
use crate::redis::client::RedisClient;
use crate::redis::handoff::{EarlyGrant, EarlyTerms, Tenure};
use crate::redis::waiting::Delivery;

use super::handoff_window;
use super::reply::PassOn;

/// An early handoff about to be made by a release.
pub(super) struct EarlyHandoff {
    ticket: String,
    terms: EarlyTerms,
    valid_until: Instant,
    to: tokio::sync::mpsc::UnboundedSender<Delivery>,
}

/// An early handoff made: what the release's reply settles.
pub(super) struct GivenEarly {
    pub(super) ticket: String,
    ttl: Duration,
    lease: Lease,
    /// The new holder's tenure: its [`Tenure::written`] is cancelled once the script is on the
    /// wire ([`GivenEarly::written`]), and both it and [`Tenure::settled`] when this is
    /// dropped (once the reply settled the handoff, or none came).
    tenure: Arc<Tenure>,
}

impl EarlyHandoff {
    /// The early handoff for a release of `lease`, if its tenure's next in line waits in this
    /// client on the same key, offers terms, and would get at least half its TTL. Boxed: the
    /// release's future holds it in several frames, and a future over 1 KiB is served by the
    /// allocator's arenas, not its per-thread cache (see `redis::client::release`'s
    /// `boxed_sizes`).
    pub(super) fn for_release(
        client: &RedisClient,
        lease: &Lease,
        tenure: &Tenure,
    ) -> Option<Box<EarlyHandoff>> {
        let ticket = tenure.take_next()?;
        if lease.loss_reason().is_some() {
            return None;
        }
        let (terms, to) = client.notifier()?.take_early(&ticket)?;
        let valid_until = lease.valid_until().min(terms.entry_alive_until);
        if terms.key != lease.key() || valid_until < Instant::now() + terms.ttl / 2 {
            return None;
        }
        Some(Box::new(EarlyHandoff {
            ticket,
            terms,
            valid_until,
            to,
        }))
    }

    /// Hands the waiter its lease; `None` if it stopped waiting meanwhile. The new holder's
    /// release and extends wait until the returned `GivenEarly` is dropped (`Tenure::settled`).
    /// Given before the release's script is written (`written` false), its acquisition also
    /// returns only once [`GivenEarly::written`] says it is, or the `GivenEarly` is dropped
    /// (`Tenure::written`).
    pub(super) fn give(self, written: bool) -> Option<GivenEarly> {
        let lease = Lease::until(&self.terms.key, self.terms.token, None, self.valid_until);
        let tenure = Arc::new(Tenure {
            next: Mutex::new(None),
            settled: Some(CancellationToken::new()),
            written: (!written).then(CancellationToken::new),
        });
        let grant = EarlyGrant {
            lease: lease.clone(),
            tenure: tenure.clone(),
            attempt: self.terms.attempt,
        };
        self.to.send(Delivery::Early(grant)).ok()?;
        Some(GivenEarly {
            ticket: self.ticket,
            ttl: self.terms.ttl,
            lease,
            tenure,
        })
    }
}

impl GivenEarly {
    /// The release's script is on the wire: the new holder's acquisition may return.
    pub(super) fn written(&self) {
        if let Some(written) = &self.tenure.written {
            written.cancel();
        }
    }

    /// The release handed the lock to this waiter: the key holds its token for the handoff
    /// window from the script's run, which came after `sent`.
    pub(super) fn confirm(self, sent: Instant, next: Option<String>) {
        let window = handoff_window(self.ttl);
        self.lease.raise_valid_until(valid_until(sent, window));
        *self.tenure.next.lock().unwrap_or_else(|p| p.into_inner()) = next;
    }

    pub(super) fn contradicted(self, outcome: &PassOn) {
        tracing::warn!(
            key = self.lease.key(),
            ?outcome,
            "the release did not hand the lock to the waiter it was handed to early"
        );
        self.lease.mark_lost(LossReason::NotHeld);
    }
}

impl Drop for GivenEarly {
    /// Settled: the reply confirmed or contradicted the handoff (the lease and the tenure are
    /// updated first), or none will come. The new holder's commands may go now.
    fn drop(&mut self) {
        self.written();
        if let Some(settled) = &self.tenure.settled {
            settled.cancel();
        }
    }
}
