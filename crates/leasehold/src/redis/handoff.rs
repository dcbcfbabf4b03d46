//! What an early handoff within one client carries (see the `src/redis/fair` module docs, early
//! handoff): a fair waiter's terms for one, offered to its client, and the grant it receives.
//! Below both `src/redis/fair`, which makes early handoffs, and `src/redis/waiting`, which
//! delivers them.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::core::guard::Lease;
use crate::core::token::LockToken;

/// What a holding of a fair lock knows about the queue behind it.
#[derive(Debug, Default)]
pub(crate) struct Tenure {
    /// The ticket that was first in the queue when this holder was handed the lock, if the
    /// release that did it was this client's (its reply names it): see the `src/redis/fair`
    /// module docs, early handoff.
    pub(crate) next: Mutex<Option<String>>,
}

impl Tenure {
    pub(crate) fn after(next: Option<String>) -> Arc<Tenure> {
        Arc::new(Tenure {
            next: Mutex::new(next),
        })
    }

    pub(crate) fn take_next(&self) -> Option<String> {
        self.next.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}

/// A waiter's terms for an early handoff (see the `src/redis/fair` module docs), offered to its client after
/// each attempt that found the lock busy.
#[derive(Debug)]
pub(crate) struct EarlyTerms {
    pub(crate) key: String,
    pub(crate) token: LockToken,
    pub(crate) ttl: Duration,
    /// Its queue entry is alive on the server at least until then.
    pub(crate) entry_alive_until: Instant,
    /// The attempt whose reply offered these terms.
    pub(crate) attempt: u64,
}

/// An early handoff as its waiter receives it: its lease, and its tenure (which the release's
/// reply fills in).
#[derive(Debug)]
pub(crate) struct EarlyGrant {
    pub(crate) lease: Lease,
    pub(crate) tenure: Arc<Tenure>,
    /// The attempt of the terms it was given on.
    pub(crate) attempt: u64,
    /// Resolves (a value, or the sender dropped) once the release that gave it has put its
    /// script on the wire (`EarlyGrant::after_release_sent`).
    pub(crate) release_sent: Option<tokio::sync::oneshot::Receiver<()>>,
}

impl EarlyGrant {
    /// Waits until the release that gave this grant has put its script on the wire: every
    /// command the new holder sends afterwards follows it (see the `src/redis/fair` module
    /// docs, "Order").
    pub(crate) async fn after_release_sent(&mut self) {
        if let Some(sent) = self.release_sent.take() {
            let _ = sent.await;
        }
    }
}
