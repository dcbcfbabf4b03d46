#![doc = include_str!("lib.md")]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod backend;
mod client;
mod connection;
pub mod election;
pub mod endpoint;
mod error;
#[cfg(feature = "etcd")]
pub mod etcd;
pub mod fair;
pub mod fencing;
mod guard;
mod handoff;
mod locker;
pub mod metrics;
pub mod multi;
mod options;
mod outcome;
#[cfg(feature = "postgres")]
pub mod postgres;
pub mod redlock;
pub mod renewal;
pub mod rwlock;
mod scripts;
pub mod semaphore;
mod server;
pub mod slot;
pub mod strategy;
mod token;
mod topology;
pub mod waiting;

pub use backend::{Backend, Fairness};
pub use client::{LockClient, LockState, MAX_FENCING_NUMBER, TryAcquire};
pub use connection::{ClientConnection, SentinelConnection};
pub use election::{Election, Leader, LeaderWatch};
pub use endpoint::Endpoint;
pub use error::{BoxError, Error, Operation, Result};
pub use fencing::{Fence, FencedRead, FencedStore, FencedValue, FencedWrite};
pub use guard::{Lease, LockGuard, LossReason, clock_drift};
pub use locker::Locker;
pub use multi::MultiLock;
pub use options::{Backoff, ClientOptions, LockOptions, MAX_TTL, MIN_TTL, OnLoss};
pub use redlock::{NodeOutcome, NodeReport, NodeReports, Redlock, RedlockOptions};
pub use renewal::RenewalStats;
pub use rwlock::RwLock;
pub use semaphore::Semaphore;
pub use server::{ServerInfo, ServerKind};
pub use slot::{fair_entry_key, fair_queue_key, fence_key, key_slot, release_channel};
pub use strategy::{ExtendStrategy, ReleaseStrategy};
pub use token::{LockToken, MAX_KEY_LEN};

/// The README's code blocks, compiled as doctests (the crate's own docs are the shorter
/// `lib.md`).
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;
