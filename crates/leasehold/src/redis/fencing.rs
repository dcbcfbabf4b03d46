//! Fencing tokens: the lock hands out a strictly increasing number with each acquisition, and the
//! protected resource refuses writes that come with an older one.
//!
//! A TTL protects against a *crashed* holder, not a *slow* one: a holder that stalls (GC pause,
//! stopped process, stalled network) past its TTL wakes up believing it still holds the lock
//! while the next holder works. Only the resource can tell them apart, by the number.
//!
//! **Issuing (lock side).** With [`LockOptions::fencing`](crate::LockOptions::fencing), one
//! script does `SET key token NX PX ttl` and, only if that succeeded, `INCR` on the counter
//! [`fence_key(key)`](crate::redis::fence_key) in the same atomic step. Guarantee: on one server whose
//! counter survives (no restart without persistence, no failover), every successful acquisition
//! gets a number greater than every earlier acquisition's. The counter is in the lock key's hash
//! slot so the script stays legal under Redis Cluster.
//!
//! **Checking (resource side).** [`FencedStore::write`] is one script on the resource's hash:
//! it accepts a write whose number is greater than the highest seen, or equal to it *from the same
//! lock token*; it rejects a lower number, and an equal number from a different token. The
//! tie-break matters: a counter can lose its last `INCR` (failover to a replica that had not
//! received it, restart without `appendfsync always`), handing two holders the same number; the
//! token decides which of them owns that number at the resource (the first to write). Guarantee:
//! once a write with `(n, t)` was accepted, no write with a number `< n`, nor with `n` and another
//! token, is ever accepted afterwards. Assumption: all writers go through the fenced write, and
//! numbers stay below 2^53 (Lua numbers are doubles).
//!
//! **Read-modify-write needs the number at first contact.** A write check alone lets this
//! happen: A (number 1) reads v; A's lease expires; B (number 2) reads v; A writes v+1 (accepted:
//! the register has seen nothing above 1); B writes v+1 (accepted: 2 > 1) and A's increment is
//! lost. [`FencedStore::read_fenced`] applies the same rule to the read and *claims* the number,
//! so once B has read, A's write is refused. Guarantee: if every holder reads with
//! `read_fenced` and writes with `write`, the writes that are accepted apply in fencing order and
//! none is based on a value another accepted write has since replaced.
//!
//! The resource stores a SHA-1 of the writer's token, not the token itself: the token is a
//! capability to release the lock, and the resource only needs equality.

use redis::ToRedisArgs;

use crate::core::error::{Error, Operation, Result};
use crate::core::fence::{Fence, FencedRead, FencedValue, FencedWrite};
use crate::redis::connection::ClientConnection;
use crate::redis::scripts::{
    FENCED_READ_SCRIPT as FENCED_READ, FENCED_WRITE_SCRIPT as FENCED_WRITE,
};

/// A Redis hash used as a fenced register: the protected resource's side of fencing.
///
/// It can live on the lock's server or (better: lock faults then cannot touch it) on another.
#[derive(Clone, Debug)]
pub struct FencedStore {
    conn: ClientConnection,
}

impl FencedStore {
    /// Uses an existing connection (for instance [`RedisClient::connection`](crate::redis::RedisClient::connection)).
    pub fn new(conn: impl Into<ClientConnection>) -> Self {
        FencedStore { conn: conn.into() }
    }

    /// Connects to the resource's server: any URL form of [`Endpoint`](crate::redis::Endpoint)
    /// (one server, a cluster, a Sentinel-monitored primary; `rediss://` with the system's
    /// roots). Each fenced key is one hash, so it is legal on a cluster.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a bad URL, [`Error::Connection`],
    /// [`Error::Topology`].
    pub async fn connect(url: &str) -> Result<Self> {
        let endpoint = crate::redis::Endpoint::parse(url)?;
        let (conn, _) =
            crate::redis::topology::open(&endpoint, &crate::ClientOptions::default(), None, true)
                .await?;
        Ok(FencedStore::new(conn))
    }

    /// Writes `value` into the hash `key` if `fence` is not stale (see the module docs).
    ///
    /// # Errors
    /// [`Error::Server`] (`WRONGTYPE` if `key` is not a hash), [`Error::Connection`].
    pub async fn write(
        &self,
        key: &str,
        fence: &Fence,
        value: impl ToRedisArgs,
    ) -> Result<FencedWrite> {
        crate::redis::slot::validate_name(key)?;
        let mut conn = self.conn.clone();
        let (ok, highest): (i64, u64) = FENCED_WRITE
            .key(key)
            .arg(fence.number())
            .arg(fence.token().expose())
            .arg(value)
            .invoke_async(&mut conn)
            .await
            .map_err(|e| Error::from_redis(Operation::FencedWrite, e))?;
        Ok(if ok == 1 {
            FencedWrite::Accepted
        } else {
            FencedWrite::Rejected { highest }
        })
    }

    /// Reads `key` for a read-modify-write under the lock: refused like a write if `fence` is
    /// stale, and on success it *claims* the number, so that any holder with a lower number can
    /// no longer write (see the module docs).
    ///
    /// # Errors
    /// [`Error::Server`] (`WRONGTYPE`), [`Error::Connection`].
    pub async fn read_fenced(&self, key: &str, fence: &Fence) -> Result<FencedRead> {
        crate::redis::slot::validate_name(key)?;
        let mut conn = self.conn.clone();
        let (ok, payload): (i64, redis::Value) = FENCED_READ
            .key(key)
            .arg(fence.number())
            .arg(fence.token().expose())
            .invoke_async(&mut conn)
            .await
            .map_err(|e| Error::from_redis(Operation::FencedWrite, e))?;
        let text = |v: redis::Value| -> Option<Vec<u8>> {
            match v {
                redis::Value::BulkString(b) => Some(b),
                redis::Value::SimpleString(s) => Some(s.into_bytes()),
                redis::Value::Int(n) => Some(n.to_string().into_bytes()),
                _ => None,
            }
        };
        Ok(if ok == 1 {
            FencedRead::Accepted(text(payload))
        } else {
            let highest = text(payload)
                .and_then(|b| String::from_utf8_lossy(&b).parse().ok())
                .unwrap_or(0);
            FencedRead::Rejected { highest }
        })
    }

    /// Reads the hash `key`: its value and the number it was written with.
    ///
    /// # Errors
    /// [`Error::Server`] (`WRONGTYPE`), [`Error::Connection`].
    pub async fn read(&self, key: &str) -> Result<Option<FencedValue>> {
        crate::redis::slot::validate_name(key)?;
        let mut conn = self.conn.clone();
        let (value, fence): (Option<Vec<u8>>, Option<u64>) = redis::cmd("HMGET")
            .arg(key)
            .arg("value")
            .arg("fence")
            .query_async(&mut conn)
            .await
            .map_err(|e| Error::from_redis(Operation::FencedWrite, e))?;
        Ok(match (value, fence) {
            (Some(value), Some(fence)) => Some(FencedValue { value, fence }),
            _ => None,
        })
    }
}
