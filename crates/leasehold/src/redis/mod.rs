//! Redis and Valkey: connections and topologies (standalone, Sentinel, Cluster), the Lua
//! scripts, the plain and the fair lock, waiting, renewal, fenced writes, and the primitives
//! only this backend has (semaphores, read-write locks, multi-key locks, elections).

pub(crate) mod client;
pub(crate) mod connection;
pub mod election;
pub mod endpoint;
pub(crate) mod error;
pub mod fair;
pub mod fencing;
pub(crate) mod handoff;
pub mod multi;
pub mod renewal;
pub mod rwlock;
pub(crate) mod scripts;
pub mod semaphore;
pub(crate) mod server;
pub mod slot;
pub mod strategy;
pub(crate) mod topology;
pub mod waiting;
