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
    /// For a holding handed over early by a release on its calling thread's socket: cancelled
    /// once that release has put its script on the wire (or gave up). `None`: written before
    /// the handoff.
    pub(crate) written: Option<CancellationToken>,
}

impl Tenure {
    pub(crate) fn after(next: Option<String>) -> Arc<Tenure> {
        Arc::new(Tenure {
            next: Mutex::new(next),
            settled: None,
            written: None,
        })
    }

    /// Waits until the release that handed this holding over early has its reply, so that its
    /// script has run on the server: a command of the new holder sent after this follows it,
    /// on any connection (see the `src/redis/fair` module docs, "Order").
    pub(crate) async fn settled(&self) {
        until_cancelled(&self.settled).await;
    }

    /// Waits until the release that handed this holding over early has written its script.
    /// Not for order ([`Tenure::settled`] is), but for the processor: a release on its calling
    /// thread's socket hands the lock over *before* its write (see `run_pass_on`), and the new
    /// holder's thread, just woken, may take the releaser's core and keep it for its whole hold;
    /// the releaser's script, and so the new holder's own release (which waits for its reply),
    /// then wait that long too. Waiting here instead gives the releaser the core back for its
    /// write, a few microseconds.
    pub(crate) async fn written(&self) {
        until_cancelled(&self.written).await;
    }

    pub(crate) fn take_next(&self) -> Option<String> {
        self.next.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}

/// Resolves once `token` is cancelled; at once without one.
async fn until_cancelled(token: &Option<CancellationToken>) {
    if let Some(token) = token {
        token.cancelled().await;
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
