//! How every PostgreSQL wait goes through the acquisition engine ([`crate::core::acquire`]),
//! with the one answer PostgreSQL keeps of its own: a wait whose last attempt was a grant given
//! back (it came too late to be a lease) ends with that [`Error::ExpiredOnArrival`], where the
//! engine answers [`Error::NotAcquired`].

use std::sync::Mutex;
use std::time::Duration;

use futures_util::future::BoxFuture;

use crate::core::acquire::{Ask, Attempts, Wakeup};
use crate::core::error::{Error, Result};
use crate::core::guard::LockGuard;
use crate::core::options::LockOptions;
use crate::core::outcome::TryAcquire;

/// Takes what `attempts` offers through [`crate::core::acquire::wait`], waiting up to `wait`
/// (`None`: one attempt; `Some(FOREVER)`: for ever).
///
/// # Errors
/// As the engine's, but for a wait that ends right after a grant given back:
/// [`Error::ExpiredOnArrival`] (the reason nothing was acquired), not [`Error::NotAcquired`].
pub(super) async fn wait<A: Attempts + ?Sized>(
    attempts: &A,
    options: &LockOptions,
    wait: Option<Duration>,
) -> Result<LockGuard> {
    let recorded = LastLate {
        attempts,
        late: Mutex::new(None),
    };
    let outcome = crate::core::acquire::wait(&recorded, options, wait).await;
    match (outcome, recorded.last_late()) {
        (Err(Error::NotAcquired { key, .. }), Some((elapsed, ttl))) => {
            Err(Error::ExpiredOnArrival { key, elapsed, ttl })
        }
        (outcome, _) => outcome,
    }
}

/// An attempt's outcome as a lock: `None` (busy, or the wait in the server's queue ran out) is
/// busy, with no remaining lease known.
pub(super) fn granted_or_busy(guard: Option<LockGuard>) -> TryAcquire {
    match guard {
        Some(guard) => TryAcquire::Acquired(guard),
        None => TryAcquire::Busy { remaining: None },
    }
}

/// A provider whose last attempt's [`Error::ExpiredOnArrival`] (elapsed, TTL) is kept.
struct LastLate<'a, A: ?Sized> {
    attempts: &'a A,
    late: Mutex<Option<(Duration, Duration)>>,
}

impl<A: ?Sized> LastLate<'_, A> {
    fn last_late(&self) -> Option<(Duration, Duration)> {
        *self.late.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl<A: Attempts + ?Sized> Attempts for LastLate<'_, A> {
    fn name(&self) -> &str {
        self.attempts.name()
    }

    fn attempt<'b>(
        &'b self,
        options: &'b LockOptions,
        ask: Ask,
    ) -> BoxFuture<'b, Result<TryAcquire>> {
        Box::pin(async move {
            let outcome = self.attempts.attempt(options, ask).await;
            *self.late.lock().unwrap_or_else(|p| p.into_inner()) = match &outcome {
                Err(Error::ExpiredOnArrival { elapsed, ttl, .. }) => Some((*elapsed, *ttl)),
                _ => None,
            };
            outcome
        })
    }

    fn wakes(&self) -> bool {
        self.attempts.wakes()
    }

    fn wakeups(&self) -> BoxFuture<'_, Option<Box<dyn Wakeup>>> {
        self.attempts.wakeups()
    }

    fn retries(&self, e: &Error) -> bool {
        self.attempts.retries(e)
    }
}
