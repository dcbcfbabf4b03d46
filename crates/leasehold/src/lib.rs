#![doc = include_str!("lib.md")]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod core;
#[cfg(feature = "etcd")]
pub mod etcd;
#[cfg(unix)]
pub mod file;
mod locker;
pub mod memory;
#[cfg(feature = "postgres")]
pub mod postgres;
pub mod redis;
pub mod redlock;

pub use self::core::metrics;

pub use self::core::acquire::cleanups_settled;
pub use self::core::calling_thread::blocking_call;
pub use self::core::error::{BoxError, Error, LossReason, Operation, Result};
pub use self::core::fence::{Fence, FencedRead, FencedValue, FencedWrite};
pub use self::core::guard::{Lease, LockGuard, clock_drift};
pub use self::core::history::{
    HistoryEvent, HistoryKind, HistoryOptions, MAX_HISTORY_CAP, MAX_HISTORY_RETENTION,
};
pub use self::core::kind::{Backend, Fairness, Primitive};
pub use self::core::listing::{
    FORCED_RECORD_TTL, ForceReleased, LockEntry, LockHolder, LockKind, MAX_REASON_LEN, glob_match,
    is_lock_value,
};
pub use self::core::options::{
    Backoff, ClientOptions, FOREVER, LockOptions, MAX_TTL, MIN_BACKOFF, MIN_RENEWED_TTL, MIN_TTL,
    OnLoss,
};
pub use self::core::outcome::{LockState, MAX_FENCING_NUMBER, TryAcquire};
pub use self::core::owner::{MAX_OWNER_LABEL_LEN, MAX_OWNER_NAME_LEN, Owner};
pub use self::core::report::{NodeOutcome, NodeReport, NodeReports};
pub use self::core::sync::{
    Election, Leader, LeaderWatch, Lockable, MAX_ELECTION_ID_LEN, MAX_PERMITS, RwLock, RwLockSide,
    Semaphore,
};
pub use self::core::token::{LockToken, MAX_KEY_LEN};
pub use self::core::trace::{KeyInSpans, set_key_in_spans};
pub use locker::{Lock, LockTarget, Locker};

/// What the CLI, the lab and the tests need of the internals (script texts, key names, URL
/// parsing): not part of the API, and not covered by semver.
#[doc(hidden)]
pub mod internal {
    #[cfg(unix)]
    pub use crate::file::hooks as file;
    pub use crate::memory::hooks as memory;
    #[cfg(feature = "postgres")]
    pub use crate::postgres::hooks as postgres;
    pub use crate::redis::election::election_leader_key;
    pub use crate::redis::fair::{fair_scripts, queue_entry_ttl};
    pub use crate::redis::rwlock::{rwlock_readers_key, rwlock_writer_waiting_key};
    pub use crate::redis::scripts::{
        ACQUIRE_LUA, EXTEND_LUA, FENCED_WRITE_LUA, RAISE_FENCE_LUA, REDLOCK_ACQUIRE_LUA,
        RELEASE_LUA, RELEASE_NOTIFY_LUA,
    };
    pub use crate::redis::semaphore::{semaphore_permits_key, semaphore_scripts};
    pub use crate::redis::slot::slot_name;
    pub use crate::redis::table::forced_record_key;
    pub use crate::redlock::node_urls;
}

/// The README's code blocks, compiled as doctests (the crate's own docs are the shorter
/// `lib.md`).
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;

/// The Rust guide's code blocks (`docs/rust.md`), compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/rust.md")]
pub struct RustGuideDoctests;
