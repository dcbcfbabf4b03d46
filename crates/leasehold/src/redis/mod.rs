//! Redis and Valkey: connections and topologies (standalone, Sentinel, Cluster), the Lua
//! scripts, the plain and the fair lock, waiting, renewal, fenced writes, and the primitives
//! only this backend has (semaphores, read-write locks, multi-key locks, elections).

pub(crate) mod client;
pub(crate) mod connection;
pub(crate) mod election;
pub(crate) mod endpoint;
pub(crate) mod error;
pub(crate) mod fair;
pub(crate) mod fencing;
pub(crate) mod handoff;
pub(crate) mod history;
pub(crate) mod multi;
pub(crate) mod options;
pub(crate) mod renewal;
pub(crate) mod rwlock;
pub(crate) mod scripts;
pub(crate) mod semaphore;
pub(crate) mod server;
pub(crate) mod slot;
pub(crate) mod strategy;
pub(crate) mod table;
pub(crate) mod topology;
pub(crate) mod waiting;
