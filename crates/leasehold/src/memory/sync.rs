//! Semaphores, read-write locks and elections in memory: the key's holders of one table entry
//! (see the store), under the same mutex and FIFO queue as the plain lock, so their guarantees
//! are the plain lock's: exact validity, token-checked release and extend, no polling.

use std::time::Duration;

use crate::core::driver::{Driver, Primitives};
use crate::core::error::Result;
use crate::core::guard::LockGuard;
use crate::core::kind::Backend;
use crate::core::options::{LockOptions, ttl_millis};
use crate::core::outcome::TryAcquire;
use crate::core::sync::Side;
use crate::core::sync::{Election, Leader, RwLock, Semaphore};
use crate::core::token::{LockToken, validate_key};

use super::MemoryClient;
use super::store::Want;

/// The [`Locker`](crate::Locker) checked the names and the number of permits.
impl Primitives for MemoryClient {
    /// A semaphore of `permits` on `name`.
    fn semaphore(&self, name: &str, permits: u32) -> Result<Semaphore> {
        let provider = MemorySemaphore {
            client: self.clone(),
            name: name.to_string(),
            permits,
        };
        Ok(Semaphore::new(Backend::Memory, name, permits, provider))
    }

    /// A read-write lock on `name`.
    fn rwlock(&self, name: &str) -> Result<RwLock> {
        let provider = MemoryRwLock {
            client: self.clone(),
            name: name.to_string(),
        };
        Ok(RwLock::new(Backend::Memory, name, provider))
    }

    /// An election on `name`.
    fn election(&self, name: &str) -> Result<Election> {
        let provider = MemoryElection {
            client: self.clone(),
            name: name.to_string(),
        };
        Ok(Election::new(Backend::Memory, name, provider))
    }
}

/// `permits` holders of `name` at once.
#[derive(Debug)]
struct MemorySemaphore {
    client: MemoryClient,
    name: String,
    permits: u32,
}

#[async_trait::async_trait]
impl crate::core::sync::SemaphoreProvider for MemorySemaphore {
    async fn try_acquire(&self, options: &LockOptions) -> Result<TryAcquire> {
        self.client
            .try_as(&self.name, options, Want::Permit(self.permits))
    }

    async fn acquire(&self, options: &LockOptions) -> Result<LockGuard> {
        self.client
            .acquire_as(&self.name, options, Want::Permit(self.permits))
            .await
    }

    async fn release(&self, token: &LockToken) -> Result<()> {
        self.client.release(&self.name, token).await
    }

    async fn extend(&self, token: &LockToken, ttl: Duration) -> Result<()> {
        self.client.extend(&self.name, token, ttl).await
    }

    async fn holders(&self) -> Result<u32> {
        Ok(self.client.ns.count(&self.name, Want::Permit(self.permits)))
    }
}

/// Readers of `name` together, or its writer alone.
#[derive(Debug)]
struct MemoryRwLock {
    client: MemoryClient,
    name: String,
}

/// What the store calls a side.
fn want(side: Side) -> Want<'static> {
    match side {
        Side::Read => Want::Shared,
        Side::Write => Want::Exclusive,
    }
}

#[async_trait::async_trait]
impl crate::core::sync::RwLockProvider for MemoryRwLock {
    async fn try_take(&self, side: Side, options: &LockOptions) -> Result<TryAcquire> {
        self.client.try_as(&self.name, options, want(side))
    }

    async fn take(&self, side: Side, options: &LockOptions) -> Result<LockGuard> {
        self.client
            .acquire_as(&self.name, options, want(side))
            .await
    }

    async fn release(&self, side: Side, token: &LockToken) -> Result<()> {
        validate_key(&self.name)?;
        self.client.ns.release(&self.name, token, Some(want(side)))
    }

    async fn extend(&self, side: Side, token: &LockToken, ttl: Duration) -> Result<()> {
        ttl_millis(ttl)?;
        let extended = self
            .client
            .ns
            .extend(&self.name, token, Some(want(side)), ttl);
        extended.map(drop)
    }

    async fn readers(&self) -> Result<u32> {
        Ok(self.client.ns.count(&self.name, Want::Shared))
    }
}

/// Leadership of `name`: its lock held alone, with the leader's id; the term is the fencing
/// number drawn with it.
#[derive(Debug)]
struct MemoryElection {
    client: MemoryClient,
    name: String,
}

#[async_trait::async_trait]
impl crate::core::sync::ElectionProvider for MemoryElection {
    async fn campaign(&self, id: &str, options: &LockOptions) -> Result<LockGuard> {
        // The handle set the wait (for ever without one: `Election::campaign`).
        let options = options.clone().fencing(true).auto_extend(true);
        self.client
            .acquire_as(&self.name, &options, Want::Leader(id))
            .await
    }

    async fn leader(&self) -> Result<Option<Leader>> {
        Ok(self
            .client
            .ns
            .leader(&self.name)?
            .map(|(id, term, ttl)| Leader {
                id,
                term,
                ttl: Some(ttl),
            }))
    }
}
