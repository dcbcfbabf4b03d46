//! Which backend: [`Backend`], and what [`LockOptions::fair`](crate::LockOptions::fair) means on
//! it ([`Fairness`]).

/// Which backend a [`Locker`](crate::Locker) talks to, what that implies for the options every
/// backend takes ([`Backend::fairness`]), and which primitives it has ([`Backend::has`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Backend {
    /// One Redis or Valkey server, cluster or Sentinel-monitored primary
    /// ([`RedisClient`](crate::redis::RedisClient)).
    Redis,
    /// Redlock over independent Redis or Valkey servers ([`Redlock`](crate::redlock::Redlock)).
    Redlock,
    /// etcd v3 (`etcd::EtcdClient`).
    Etcd,
    /// PostgreSQL session advisory locks (`postgres::PostgresClient`).
    Postgres,
    /// PostgreSQL lease rows (`postgres::PostgresLeaseClient`, `?lock=lease`).
    PostgresLease,
    /// Locks in this process's memory (`memory::MemoryClient`, `memory://`): one process only.
    Memory,
    /// `flock`ed files in a directory (`file::FileClient`, `file:///dir`): one machine only.
    File,
}

impl Backend {
    /// Every backend.
    pub const ALL: [Backend; 7] = [
        Backend::Redis,
        Backend::Redlock,
        Backend::Etcd,
        Backend::Postgres,
        Backend::PostgresLease,
        Backend::Memory,
        Backend::File,
    ];

    /// Whether [`Locker`](crate::Locker) offers `primitive` on this backend (otherwise its
    /// method returns [`Error::Unsupported`](crate::Error::Unsupported) naming the backend).
    pub const fn has(self, primitive: Primitive) -> bool {
        match (self, primitive) {
            (_, Primitive::Lock) => true,
            (Backend::Redis, _) => true,
            (Backend::Redlock, _) => false,
            (Backend::Etcd, _) => true,
            (Backend::Postgres, _) => true,
            // Lease rows: no read-write lock (see the `postgres` module's docs).
            (Backend::PostgresLease, Primitive::RwLock) => false,
            (Backend::PostgresLease, _) => true,
            (Backend::Memory, _) => true,
            (Backend::File, _) => false,
        }
    }

    /// The backend's name in messages and metric labels: `redis`, `redlock`, `etcd`,
    /// `postgres`, `postgres-lease`, `memory`, `file`.
    pub const fn name(self) -> &'static str {
        match self {
            Backend::Redis => "redis",
            Backend::Redlock => "redlock",
            Backend::Etcd => "etcd",
            Backend::Postgres => "postgres",
            Backend::PostgresLease => "postgres-lease",
            Backend::Memory => "memory",
            Backend::File => "file",
        }
    }

    /// What [`LockOptions::fair`](crate::LockOptions::fair) means here.
    pub const fn fairness(self) -> Fairness {
        match self {
            Backend::Redis => Fairness::Queue,
            Backend::Etcd | Backend::Postgres | Backend::Memory => Fairness::Always,
            Backend::Redlock | Backend::PostgresLease | Backend::File => Fairness::Unsupported,
        }
    }
}

impl std::fmt::Display for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// How a backend orders the waiters of a lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Fairness {
    /// In arrival order only with [`LockOptions::fair`](crate::LockOptions::fair), which
    /// queues the waiters on the server and hands the lock over on release (Redis).
    Queue,
    /// Always in arrival order (etcd's revisions, PostgreSQL's lock queue, the memory
    /// backend's queue per key): the fair option
    /// changes nothing.
    Always,
    /// No fair mode: the fair option is refused ([`Error::Unsupported`](crate::Error::Unsupported)).
    Unsupported,
}

/// A kind of lock a [`Locker`](crate::Locker) can make, for [`Backend::has`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Primitive {
    /// The plain lock ([`Locker::acquire`](crate::Locker::acquire)); every backend has it.
    Lock,
    /// A counting semaphore ([`Locker::semaphore`](crate::Locker::semaphore)).
    Semaphore,
    /// A read-write lock ([`Locker::rwlock`](crate::Locker::rwlock)).
    RwLock,
    /// A leader election ([`Locker::election`](crate::Locker::election)).
    Election,
}

impl Primitive {
    /// Every primitive.
    pub const ALL: [Primitive; 4] = [
        Primitive::Lock,
        Primitive::Semaphore,
        Primitive::RwLock,
        Primitive::Election,
    ];

    /// What it is called in messages: `a lock`, `a semaphore`, `a read-write lock`,
    /// `an election`.
    pub const fn describe(self) -> &'static str {
        match self {
            Primitive::Lock => "a lock",
            Primitive::Semaphore => "a semaphore",
            Primitive::RwLock => "a read-write lock",
            Primitive::Election => "an election",
        }
    }
}
