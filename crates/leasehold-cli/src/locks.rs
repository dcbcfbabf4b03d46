//! One lock interface over a single server ([`LockClient`]), a Redlock set ([`Redlock`]) and the
//! other backends ([`Locker`]: etcd, PostgreSQL): all hand out the same [`LockGuard`], so
//! `acquire`, `release`, `extend` and `run` do not care which one they talk to.

use std::time::{Duration, Instant};

use leasehold::{
    LockClient, LockGuard, LockOptions, LockState, LockToken, Locker, Redlock, Result, RwLock,
    Semaphore, TryAcquire,
};

/// Where the locks live.
#[derive(Debug)]
pub enum Locks {
    /// One server.
    Single(LockClient),
    /// A Redlock set, and its per-node timeout.
    Redlock(Redlock, Duration),
    /// Another backend, through the library's one lock API (`etcd://`, `postgres://`).
    Other(Locker),
}

impl Locks {
    /// The backend's name: `redis`, `redlock`, `etcd` or `postgres`.
    pub fn backend(&self) -> &'static str {
        match self {
            Locks::Single(_) => "redis",
            Locks::Redlock(..) => "redlock",
            Locks::Other(l) => l.backend(),
        }
    }

    /// One attempt; busy is an outcome.
    pub async fn try_acquire(&self, key: &str, options: &LockOptions) -> Result<TryAcquire> {
        match self {
            Locks::Single(c) => c.try_acquire(key, options).await,
            Locks::Redlock(r, _) => r.try_acquire(key, options).await,
            Locks::Other(l) => l.try_acquire(key, options).await,
        }
    }

    /// Retries a busy lock until `options`' wait bound.
    pub async fn acquire(&self, key: &str, options: &LockOptions) -> Result<LockGuard> {
        match self {
            Locks::Single(c) => c.acquire(key, options).await,
            Locks::Redlock(r, _) => r.acquire(key, options).await,
            Locks::Other(l) => l.acquire(key, options).await,
        }
    }

    /// Deletes `key` if `token` holds it (Redlock: on every node where it does).
    pub async fn release(&self, key: &str, token: &LockToken) -> Result<()> {
        match self {
            Locks::Single(c) => c.release(key, token).await,
            Locks::Redlock(r, _) => r.release(key, token).await,
            Locks::Other(l) => l.release(key, token).await,
        }
    }

    /// The counting semaphore `name` of `permits` permits (Redis and Valkey only).
    pub fn semaphore(&self, name: &str, permits: u32) -> Result<Semaphore> {
        match self {
            Locks::Single(c) => c.semaphore(name, permits),
            other => Err(leasehold::Error::Unsupported {
                backend: other.backend(),
                what: "a semaphore (--permits)".into(),
            }),
        }
    }

    /// A lock over all of `keys` (Redis and Valkey only).
    pub fn multi_lock(&self, keys: &[&str]) -> Result<leasehold::MultiLock> {
        match self {
            Locks::Single(c) => c.multi_lock(keys),
            other => Err(unsupported(other, "a multi-key lock")),
        }
    }

    /// The election `name` (Redis and Valkey only).
    pub fn election(&self, name: &str) -> Result<leasehold::Election> {
        match self {
            Locks::Single(c) => c.election(name),
            other => Err(unsupported(other, "an election")),
        }
    }

    /// The read-write lock `name` (Redis and Valkey only).
    pub fn rwlock(&self, name: &str) -> Result<RwLock> {
        match self {
            Locks::Single(c) => c.rwlock(name),
            other => Err(leasehold::Error::Unsupported {
                backend: other.backend(),
                what: "a read-write lock (--read, --write)".into(),
            }),
        }
    }

    /// Releases the fair lock `key` if `token` holds it, handing it to the first waiter.
    pub async fn release_fair(&self, key: &str, token: &LockToken) -> Result<()> {
        match self {
            Locks::Single(c) => c.release_fair(key, token).await,
            Locks::Redlock(r, _) => r.release_fair(key, token).await,
            Locks::Other(l) => l.release_fair(key, token).await,
        }
    }

    /// Resets the TTL of `key` if `token` holds it (Redlock: confirmed by a majority).
    pub async fn extend(&self, key: &str, token: &LockToken, ttl: Duration) -> Result<()> {
        match self {
            Locks::Single(c) => c.extend(key, token, ttl).await,
            Locks::Redlock(r, _) => r.extend(key, token, ttl).await.map(|_| ()),
            Locks::Other(l) => l.extend(key, token, ttl).await,
        }
    }

    /// Raises the fencing counter of `key` to at least `at_least` (Redlock: on a majority).
    pub async fn raise_fencing_counter(&self, key: &str, at_least: u64) -> Result<u64> {
        match self {
            Locks::Single(c) => c.raise_fencing_counter(key, at_least).await,
            Locks::Redlock(r, _) => r.raise_fencing_counter(key, at_least).await,
            Locks::Other(l) => l.raise_fencing_counter(key, at_least).await,
        }
    }

    /// Before the process exits: lets the nodes that had not answered yet catch up.
    ///
    /// A Redlock operation returns as soon as a majority answered; its requests to the other
    /// nodes go on in the background, and exiting now would drop those not sent yet (a
    /// released lock would then stay on a minority of the nodes until its TTL). This waits until
    /// every node shows `outcome`, but at most one per-node timeout; a node that fails or stays
    /// silent is left to the TTL. Nothing to do for one server.
    pub async fn settle(&self, key: &str, token: &LockToken, outcome: Outcome) {
        let Locks::Redlock(redlock, timeout) = self else {
            return;
        };
        let deadline = Instant::now() + *timeout;
        loop {
            let settled = redlock
                .inspect(key)
                .await
                .iter()
                .all(|(_, state)| match state {
                    Ok(state) => outcome.shown_by(state, token),
                    Err(_) => true,
                });
            if settled || Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
}

/// What a node shows once an operation has reached it.
#[derive(Debug, Clone, Copy)]
pub enum Outcome {
    /// Acquired: the key is set (to our token, or someone else had that node).
    Acquired,
    /// Released: the key does not hold our token.
    Released,
    /// Extended to `ttl` by a request sent at `sent`: the key holds our token with at least
    /// `ttl` minus the time since, or it does not hold our token.
    Extended { ttl: Duration, sent: Instant },
}

impl Outcome {
    fn shown_by(self, state: &LockState, token: &LockToken) -> bool {
        let ours = state.holder.as_deref() == Some(token.expose());
        match self {
            Outcome::Acquired => state.holder.is_some(),
            Outcome::Released => !ours,
            Outcome::Extended { ttl, sent } => {
                // PTTL rounds down: a millisecond of slack.
                let floor = ttl.saturating_sub(sent.elapsed() + Duration::from_millis(1));
                !ours || state.ttl.is_some_and(|left| left >= floor)
            }
        }
    }
}

fn unsupported(locks: &Locks, what: &str) -> leasehold::Error {
    leasehold::Error::Unsupported {
        backend: locks.backend(),
        what: what.into(),
    }
}
