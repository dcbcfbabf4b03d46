//! What only Redis and Valkey have, reached through [`Locker::as_redis`](crate::Locker::as_redis)
//! or by connecting a [`RedisClient`] yourself: multi-key locks ([`MultiLock`]), fenced writes
//! ([`FencedStore`]), the release and extend strategies, the server's detected capabilities,
//! connections to a cluster or through Sentinel ([`Endpoint`]), and the names of the keys the
//! lock uses beside its own (for operators and tests).
//!
//! Inside: connections and topologies (standalone, Sentinel, Cluster), the Lua scripts, the plain
//! and the fair lock, waiting, renewal, and the Redis providers of the primitives every backend
//! offers through [`Locker`](crate::Locker) (semaphores, read-write locks, elections).

pub(crate) mod batching;
pub(crate) mod calling_thread;
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

pub use self::batching::BatchingConnection;
pub use self::client::RedisClient;
pub use self::connection::{ClientConnection, SentinelConnection};
pub use self::endpoint::Endpoint;
pub use self::error::{is_topology_in_motion, server_error};
pub use self::fencing::FencedStore;
pub use self::history::history_key;
pub use self::multi::{MAX_KEYS as MAX_MULTI_KEYS, MultiLock};
pub use self::options::RedisOptions;
pub use self::renewal::RenewalStats;
pub use self::server::{ServerInfo, ServerKind};
pub use self::slot::{
    fair_entry_key, fair_queue_key, fence_key, handoff_channel, key_slot, min_hold_key,
    release_channel,
};
pub use self::strategy::{ExtendStrategy, ReleaseStrategy};
