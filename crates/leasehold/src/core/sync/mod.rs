//! The primitives beyond the plain lock, backend-neutral: [`Semaphore`], [`RwLock`] and
//! [`Election`]. Each is a thin handle over a *provider* (one per backend that has the
//! primitive: `SemaphoreProvider`, `RwLockProvider`, `ElectionProvider`), as DistributedLock
//! (.NET) has a provider interface per primitive: the handle owns the name, the argument checks
//! and the `with_*` helpers; the provider owns the protocol. A backend offers a primitive by
//! implementing its provider and returning a handle from its client
//! ([`Locker::semaphore`](crate::Locker::semaphore), ...) and from
//! [`Locker`](crate::Locker); a backend without it returns [`Error::Unsupported`] naming itself.

mod election;
mod lockable;
mod rwlock;
mod semaphore;

pub use election::{Election, Leader, LeaderWatch, MAX_ID_LEN as MAX_ELECTION_ID_LEN};
pub(crate) use election::{ElectionProvider, LeaderChanges};
pub use lockable::{Lockable, RwLockSide};
pub use rwlock::RwLock;
pub(crate) use rwlock::{RwLockProvider, Side};
pub(crate) use semaphore::SemaphoreProvider;
pub use semaphore::{MAX_PERMITS, Semaphore};

/// A handle's name and backend: what its spans name, and what its option checks read.
#[derive(Debug, Clone)]
struct Label {
    name: std::sync::Arc<str>,
    backend: crate::core::kind::Backend,
}

impl Label {
    fn new(backend: crate::core::kind::Backend, name: &str) -> Label {
        Label {
            name: name.into(),
            backend,
        }
    }

    fn span(&self, operation: &'static str) -> tracing::Span {
        crate::core::trace::span(operation, Some(self.backend), &self.name)
    }

    /// Runs `work` in the span of `operation` on this handle's name (`trace::traced`). Not an
    /// `async fn`, which would hold `work` twice (see `trace::traced`).
    fn traced<T: crate::core::trace::Traced>(
        &self,
        operation: &'static str,
        work: impl Future<Output = crate::core::error::Result<T>>,
    ) -> impl Future<Output = crate::core::error::Result<T>> {
        crate::core::trace::traced(self.span(operation), work)
    }

    /// `work`, a taking (`taking`, with `options`), in the span of `operation`, once the option
    /// table allowed it (checked before the span is made).
    fn take<T: crate::core::trace::Traced>(
        &self,
        options: &crate::core::options::LockOptions,
        taking: crate::core::kind::Taking,
        operation: &'static str,
        work: impl Future<Output = crate::core::error::Result<T>>,
    ) -> impl Future<Output = crate::core::error::Result<T>> {
        use futures_util::future::Either;
        match self.check(options, taking) {
            Ok(()) => Either::Left(self.traced(operation, work)),
            Err(e) => Either::Right(std::future::ready(Err(e))),
        }
    }

    /// The options, checked for `taking` on this handle's backend before any round trip
    /// (`LockOptions::check_for`: the one option table).
    fn check(
        &self,
        options: &crate::core::options::LockOptions,
        taking: crate::core::kind::Taking,
    ) -> crate::core::error::Result<()> {
        options.check_for(self.backend, taking).map(drop)
    }
}
