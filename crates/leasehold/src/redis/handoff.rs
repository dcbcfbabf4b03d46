//! What an early handoff within one client carries (see the `src/redis/fair` module docs, early
//! handoff): a fair waiter's terms for one, offered to its client, and the grant it receives.
//! Below both `src/redis/fair`, which makes early handoffs, and `src/redis/waiting`, which
//! delivers them.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::core::guard::Lease;
use crate::core::token::LockToken;

/// What a holding of a fair lock knows about the queue behind it.
#[derive(Debug, Default)]
pub(crate) struct Tenure {
    /// The ticket that was first in the queue when this holder was handed the lock, if the
    /// release that did it was this client's (its reply names it): see the `src/redis/fair`
    /// module docs, early handoff.
    pub(crate) next: Mutex<Option<String>>,
    /// For a holding handed over early: cancelled once the release that handed it over has
    /// its reply (or gave up on it). `None`: settled from the start.
    pub(crate) settled: Option<CancellationToken>,
}

impl Tenure {
    pub(crate) fn after(next: Option<String>) -> Arc<Tenure> {
        Arc::new(Tenure {
            next: Mutex::new(next),
            settled: None,
        })
    }

    /// Waits until the release that handed this holding over early has its reply, so that its
    /// script has run on the server: a command of the new holder sent after this follows it,
    /// on any connection (see the `src/redis/fair` module docs, "Order").
    pub(crate) async fn settled(&self) {
        if let Some(settled) = &self.settled {
            settled.cancelled().await;
        }
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
}
