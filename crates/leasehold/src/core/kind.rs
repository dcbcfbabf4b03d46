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

/// What an acquisition takes, for the option table ([`Backend::refuses`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Taking {
    /// A plain lock (fair on a backend whose waiters queue anyway).
    Lock,
    /// A plain lock in a fair queue of its own ([`Fairness::Queue`] with the fair option).
    FairLock,
    /// A semaphore's permit.
    Permit,
    /// A read-write lock's read side.
    Read,
    /// A read-write lock's write side.
    Write,
    /// An election's leadership.
    Leadership,
    /// Several keys at once (Redis' multi-key lock).
    Keys,
}

impl Taking {
    /// What it is called in messages.
    const fn describe(self) -> &'static str {
        match self {
            Taking::Lock => "a lock",
            Taking::FairLock => "a fair lock",
            Taking::Permit => "a semaphore",
            Taking::Read => "a read lock",
            Taking::Write => "a write lock",
            Taking::Leadership => "an election",
            Taking::Keys => "a multi-key lock",
        }
    }
}

/// An acquisition option that some takings or backends do not have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Opt {
    /// [`LockOptions::fair`](crate::LockOptions::fair).
    Fair,
    /// [`LockOptions::fencing`](crate::LockOptions::fencing).
    Fencing,
    /// [`LockOptions::replica_ack`](crate::LockOptions::replica_ack).
    ReplicaAck,
    /// [`LockOptions::min_hold`](crate::LockOptions::min_hold).
    MinHold,
}

impl Opt {
    /// Every option of the table, in the order they are checked.
    pub(crate) const ALL: [Opt; 4] = [Opt::Fair, Opt::Fencing, Opt::ReplicaAck, Opt::MinHold];

    /// Its name in messages (the option's setter).
    pub(crate) const fn name(self) -> &'static str {
        match self {
            Opt::Fair => "fair mode",
            Opt::Fencing => "fencing",
            Opt::ReplicaAck => "replica_ack",
            Opt::MinHold => "min_hold",
        }
    }
}

impl Backend {
    /// Why `taking` refuses `option` on this backend, or `None` where it takes it: the one
    /// table of which option goes with what, read by every acquisition before its first round
    /// trip (`LockOptions::check_for`), so that a refusal is the same on every backend and
    /// entry point.
    pub(crate) const fn refuses(self, taking: Taking, option: Opt) -> Option<&'static str> {
        use Opt::*;
        use Taking::*;
        match (option, taking) {
            (Fair, Lock) => match self.fairness() {
                Fairness::Unsupported => Some("this backend keeps no queue of waiters"),
                Fairness::Queue | Fairness::Always => None,
            },
            (Fair, FairLock) => None,
            (Fair, _) => Some("only the plain lock has a fair mode"),
            (Fencing, Permit) => Some("a semaphore admits several holders at once"),
            (Fencing, Read) => Some("readers share the lock; the writer gets a number"),
            (Fencing, Keys) => Some("one number cannot fence several keys"),
            (Fencing, Lock | FairLock | Write | Leadership) => None,
            (ReplicaAck, Lock) => match self {
                Backend::Redis => None,
                _ => Some("only Redis has replicas to wait for"),
            },
            (ReplicaAck, _) => Some("only the plain lock waits for replicas"),
            (MinHold, Lock) => match self {
                Backend::Postgres => Some("an advisory lock ends with its unlock; use ?lock=lease"),
                _ => None,
            },
            (MinHold, FairLock) => Some("a release hands the lock to the next waiter"),
            (MinHold, _) => Some("only the plain lock keeps a minimum hold"),
        }
    }
}

/// The refusal of `option` on `taking` by `backend`, or `None` where it takes it (see
/// [`Backend::refuses`]).
pub(crate) fn refusal(
    backend: Backend,
    taking: Taking,
    option: Opt,
) -> Option<crate::core::error::Error> {
    backend
        .refuses(taking, option)
        .map(|why| crate::core::error::Error::Unsupported {
            backend: backend.name(),
            what: format!("{} on {} ({why})", option.name(), taking.describe()),
        })
}
