#![doc = include_str!("lib.md")]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod core;
#[cfg(feature = "etcd")]
pub mod etcd;
mod locker;
#[cfg(feature = "postgres")]
pub mod postgres;
mod redis;
pub mod redlock;

pub use self::core::metrics;
pub use self::redis::{
    election, endpoint, fair, fencing, multi, renewal, rwlock, semaphore, slot, strategy, waiting,
};

pub use self::core::backend::{Backend, Fairness};
pub use self::core::error::{BoxError, Error, LossReason, Operation, Result};
pub use self::core::fence::{Fence, FencedRead, FencedValue, FencedWrite};
pub use self::core::guard::{Lease, LockGuard, clock_drift};
pub use self::core::options::{Backoff, ClientOptions, LockOptions, MAX_TTL, MIN_TTL, OnLoss};
pub use self::core::outcome::{LockState, MAX_FENCING_NUMBER, TryAcquire};
pub use self::core::report::{NodeOutcome, NodeReport, NodeReports};
pub use self::core::token::{LockToken, MAX_KEY_LEN};
pub use self::redis::client::LockClient;
pub use self::redis::connection::{ClientConnection, SentinelConnection};
pub use self::redis::election::{Election, Leader, LeaderWatch};
pub use self::redis::endpoint::Endpoint;
pub use self::redis::fencing::FencedStore;
pub use self::redis::multi::MultiLock;
pub use self::redis::renewal::RenewalStats;
pub use self::redis::rwlock::RwLock;
pub use self::redis::semaphore::Semaphore;
pub use self::redis::server::{ServerInfo, ServerKind};
pub use self::redis::slot::{fair_entry_key, fair_queue_key, fence_key, key_slot, release_channel};
pub use self::redis::strategy::{ExtendStrategy, ReleaseStrategy};
pub use locker::Locker;
pub use redlock::{Redlock, RedlockOptions};

/// The README's code blocks, compiled as doctests (the crate's own docs are the shorter
/// `lib.md`).
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;
