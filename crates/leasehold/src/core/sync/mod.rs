//! The primitives beyond the plain lock, backend-neutral: [`Semaphore`], [`RwLock`] and
//! [`Election`]. Each is a thin handle over a *provider* (one per backend that has the
//! primitive: `SemaphoreProvider`, `RwLockProvider`, `ElectionProvider`), as DistributedLock
//! (.NET) has a provider interface per primitive: the handle owns the name, the argument checks
//! and the `with_*` helpers; the provider owns the protocol. A backend offers a primitive by
//! implementing its provider and returning a handle from its client
//! ([`Locker::semaphore`](crate::Locker::semaphore), ...) and from
//! [`Locker`](crate::Locker); a backend without it returns [`Error::Unsupported`] naming itself.

mod election;
mod rwlock;
mod semaphore;

pub use election::{Election, Leader, LeaderWatch, MAX_ID_LEN as MAX_ELECTION_ID_LEN};
pub(crate) use election::{ElectionProvider, LeaderChanges};
pub use rwlock::RwLock;
pub(crate) use rwlock::RwLockProvider;
pub(crate) use semaphore::SemaphoreProvider;
pub use semaphore::{MAX_PERMITS, Semaphore};

/// What every handle knows of itself: its name, and its backend for spans (set by the
/// `Locker` that made it, or the backend's own client).
#[derive(Debug, Clone)]
struct Label {
    name: std::sync::Arc<str>,
    backend: Option<crate::core::kind::Backend>,
}

impl Label {
    fn new(name: &str) -> Label {
        Label {
            name: name.into(),
            backend: None,
        }
    }

    /// The span of `operation` on this handle's name.
    fn span(&self, operation: &'static str) -> tracing::Span {
        crate::core::trace::span(operation, self.backend, &self.name)
    }

    /// [`Error::Unsupported`](crate::Error::Unsupported) for a
    /// [`min_hold`](crate::LockOptions::min_hold) on a primitive (`what`), on every backend and
    /// before any round trip (docs/guarantees.md §16): a permit, a read or write side, or a
    /// term kept after its release would mean something different on each backend (finding
    /// M4 of the 2026-12-02 review: refused on Redis, ignored on PostgreSQL, applied on etcd
    /// and memory). Only a lock keeps a `min_hold`.
    fn refuse_min_hold(&self, options: &crate::LockOptions, what: &str) -> crate::Result<()> {
        let backend = self.backend.map_or("this backend", crate::Backend::name);
        options.refuse_min_hold(backend, what).map(drop)
    }
}
