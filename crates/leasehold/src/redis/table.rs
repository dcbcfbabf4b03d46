//! The lock table on Redis and Valkey: [`Locker::list`](crate::Locker::list) and [`Locker::force_release`](crate::Locker::force_release).
//!
//! **Listing.** `SCAN` (never `KEYS`: it walks the keyspace in pages, so the server keeps
//! serving) on the server, on the primary behind Sentinel, or on every master of a cluster
//! (`CLUSTER SLOTS`, then `SCAN` routed to each master's address). Each key found is mapped to
//! the lock it belongs to by the key layout (`src/redis/slot.rs`): the lock key itself, or
//! `slot_name(name)` + `:fence`, `:queue`, `:permits`, `:limit`, `:readers`, `:writer-waiting`,
//! `:leader`. Then one pipeline per lock, on its slot's master, reads everything about it. The
//! pattern is matched against lock names, client-side (a server-side `MATCH` would miss the
//! derived keys). What is listed is a snapshot, not an atomic one: a lock taken or released
//! meanwhile may or may not appear. A key whose value is not a leasehold token is not a lock
//! and is not listed.
//!
//! **Forcing.** One read (type, value, TTL, counter), checks in the client, then one script that
//! deletes the lock only if it still holds the value read, `INCR`s its fencing counter and writes
//! the `{key}:forced` record, atomically: a holder that changed meanwhile is never removed by a
//! decision taken about its predecessor.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use redis::Value;

use crate::core::driver::{Driver, LockTable};
use crate::core::error::{Error, Operation, Result};
use crate::core::history::{HistoryLog, HistoryOptions};
use crate::core::listing::{
    FORCED_RECORD_TTL, ForceReleased, LockEntry, LockHolder, LockKind, check_reason, glob_match,
    is_lock_value,
};
use crate::core::owner::Owner;
use crate::core::token::LockToken;
use crate::redis::client::RedisClient;
use crate::redis::connection::ClientConnection;
use crate::redis::scripts::FORCE_RELEASE_SCRIPT;
use crate::redis::slot::validate_name;
use crate::redis::slot::{DERIVED_SUFFIXES, WAITER_INFIX, name_of_stem, slot_name};

/// Keys per `SCAN` page.
const SCAN_COUNT: usize = 1000;

/// The derived keys a lock name has, by suffix of `slot_name(name)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    Fence,
    Queue,
    Permits,
    Limit,
    Readers,
    WriterWaiting,
    Leader,
    Forced,
    /// A `min_hold` companion (`min_hold_key`): held with the lock, not a lock of its own.
    MinHold,
    /// The history stream (`history_key`).
    History,
}

/// The part each of [`DERIVED_SUFFIXES`] names, in its order.
const PARTS: [Part; 10] = [
    Part::Fence,
    Part::Queue,
    Part::Permits,
    Part::Limit,
    Part::Readers,
    Part::WriterWaiting,
    Part::Leader,
    Part::Forced,
    Part::MinHold,
    Part::History,
];

/// `{key}:forced`: the record of the last forced release of `key`.
pub fn forced_record_key(key: &str) -> String {
    format!("{}:forced", slot_name(key))
}

/// The lock a key belongs to, and which of its keys it is (`None`: the lock key itself). Fair
/// queue entries (`:waiter:TICKET`) belong to no listed part.
fn classify(key: &str) -> Option<(String, Option<Part>)> {
    if let Some((stem, _)) = key.rsplit_once(WAITER_INFIX)
        && name_of_stem(stem).is_some()
    {
        return None;
    }
    for (suffix, part) in DERIVED_SUFFIXES.into_iter().zip(PARTS) {
        if let Some(name) = key.strip_suffix(suffix).and_then(name_of_stem) {
            return Some((name, Some(part)));
        }
    }
    Some((key.to_string(), None))
}

/// What one lock's pipeline read.
struct Read {
    value: Option<String>,
    pttl: i64,
    fence: Option<u64>,
    queued: u64,
    permits: Vec<(String, f64)>,
    limit: Option<u64>,
    readers: Vec<(String, f64)>,
    writer_waiting: bool,
    leader: bool,
    now_ms: f64,
}

impl RedisClient {
    /// Every key of the server, or of every master of a cluster, by `SCAN`.
    async fn scan_all(&self) -> Result<Vec<String>> {
        if !self.connection().is_cluster() {
            return self.scan_node(None).await;
        }
        let slots: Vec<Value> = self
            .idempotent(Operation::Inspect, |mut c| async move {
                redis::cmd("CLUSTER").arg("SLOTS").query_async(&mut c).await
            })
            .await?;
        let mut masters: Vec<(String, u16)> = slots
            .iter()
            .filter_map(|range| match range {
                Value::Array(parts) => match parts.get(2) {
                    Some(Value::Array(node)) => Some((
                        redis::from_redis_value_ref(node.first()?).ok()?,
                        redis::from_redis_value_ref(node.get(1)?).ok()?,
                    )),
                    _ => None,
                },
                _ => None,
            })
            .collect();
        masters.sort();
        masters.dedup();
        let mut keys = Vec::new();
        for master in masters {
            keys.extend(self.scan_node(Some(master)).await?);
        }
        Ok(keys)
    }

    /// `SCAN` to the end on one node: the connection's server, or the cluster master at an
    /// address.
    async fn scan_node(&self, master: Option<(String, u16)>) -> Result<Vec<String>> {
        let mut keys = Vec::new();
        let mut cursor: u64 = 0;
        loop {
            let master = master.clone();
            let (next, page): (u64, Vec<String>) = self
                .idempotent(Operation::Inspect, move |conn| {
                    let master = master.clone();
                    async move { scan_page(conn.into_shared(), cursor, master).await }
                })
                .await?;
            keys.extend(page);
            if next == 0 {
                return Ok(keys);
            }
            cursor = next;
        }
    }

    /// Everything about lock `name`, in one pipeline on its slot's master.
    async fn read_lock(&self, name: &str) -> Result<Read> {
        let stem = slot_name(name).into_owned();
        let key = |suffix: &str| format!("{stem}{suffix}");
        let mut pipe = redis::pipe();
        pipe.ignore_errors()
            .get(name)
            .pttl(name)
            .get(key(":fence"))
            .zcard(key(":queue"))
            .zrange_withscores(key(":permits"), 0, -1)
            .get(key(":limit"))
            .zrange_withscores(key(":readers"), 0, -1)
            .exists(key(":writer-waiting"))
            .exists(key(":leader"))
            .cmd("TIME");
        let replies: Vec<Value> = self
            .idempotent(Operation::Inspect, |mut conn| {
                let pipe = pipe.clone();
                async move { conn.pipeline_on_key_master(name, pipe).await }
            })
            .await?;
        let mut replies = replies.into_iter();
        let mut next = || -> Result<Option<Value>> {
            match replies.next() {
                // WRONGTYPE: not the kind of key a lock keeps there; read as absent.
                Some(Value::ServerError(e)) if e.code() == "WRONGTYPE" => Ok(None),
                Some(Value::ServerError(e)) => Err(Error::from_redis(Operation::Inspect, e.into())),
                Some(v) => Ok(Some(v)),
                None => Err(unexpected("a short pipeline reply".into())),
            }
        };
        fn parse<T: redis::FromRedisValue + Default>(v: Option<Value>) -> T {
            v.and_then(|v| redis::from_redis_value(v).ok())
                .unwrap_or_default()
        }
        let value: Option<String> = parse(next()?);
        let pttl: i64 = parse(next()?);
        let fence: Option<String> = parse(next()?);
        let queued: u64 = parse(next()?);
        let permits: Vec<(String, f64)> = parse(next()?);
        let limit: Option<String> = parse(next()?);
        let readers: Vec<(String, f64)> = parse(next()?);
        let writer_waiting: bool = parse(next()?);
        let leader: bool = parse(next()?);
        let (secs, micros): (u64, u64) = parse(next()?);
        Ok(Read {
            value,
            pttl,
            fence: fence.and_then(|f| f.parse().ok()),
            queued,
            permits,
            limit: limit.and_then(|l| l.parse().ok()),
            readers,
            writer_waiting,
            leader,
            now_ms: (secs * 1000 + micros / 1000) as f64,
        })
    }

    /// Why a key with no string value cannot be forced: free, or another type.
    async fn not_a_lock_or_free(&self, key: &str) -> Error {
        let kind: Result<String> = self
            .idempotent(Operation::Inspect, |mut conn| async move {
                redis::cmd("TYPE").arg(key).query_async(&mut conn).await
            })
            .await;
        match kind {
            Ok(kind) if kind == "none" => Error::NotHeld {
                key: key.to_string(),
            },
            Ok(kind) => Error::invalid("key", format!("{key:?} is a {kind}, not a leasehold lock")),
            Err(e) => e,
        }
    }
}

#[async_trait::async_trait]
impl LockTable for RedisClient {
    /// The held locks whose names match `pattern` (see [`crate::glob_match`]), read as the
    /// module docs say.
    ///
    /// # Errors
    /// [`Error::PermissionDenied`] when the user may not `SCAN` (or read the keys found);
    /// connection errors.
    async fn list(&self, pattern: &str) -> Result<Vec<LockEntry>> {
        let mut names: BTreeMap<String, Vec<Option<Part>>> = BTreeMap::new();
        for key in self.scan_all().await? {
            if let Some((name, part)) = classify(&key)
                && glob_match(pattern, &name)
            {
                names.entry(name).or_default().push(part);
            }
        }
        let mut entries = Vec::new();
        for (name, parts) in names {
            // A fencing counter, a forced record, a hold or a history alone is no lock.
            if parts.iter().all(|p| {
                matches!(
                    p,
                    Some(Part::Fence | Part::Forced | Part::Limit | Part::MinHold | Part::History)
                )
            }) {
                continue;
            }
            let read = self.read_lock(&name).await?;
            entries.extend(entries_of(&name, read));
        }
        Ok(entries)
    }

    /// Removes `key`'s lock whoever holds it, bumps its fencing counter and records why (see
    /// [`Locker::force_release`](crate::Locker::force_release) and the module docs). Plain,
    /// fair and write locks, and an election's leadership (the keys whose value is the
    /// holder's token); a semaphore's permits and readers are not forced.
    ///
    /// **Guarantee.** The delete, the counter bump and the record are one script, conditioned
    /// on the key still holding the value that was checked: only that holder is removed, and
    /// the counter afterwards is above every number issued before (the removed holder's
    /// included) and below every number issued after.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] (nothing written) for a bad reason or a key that is not a
    /// lock: another type, a string that is not a lock token, a string without a TTL, a
    /// counter that is not a number; [`Error::NotHeld`] when nobody holds it (or the holder
    /// kept changing over three tries); connection and permission errors.
    async fn force_release(&self, key: &str, reason: &str) -> Result<ForceReleased> {
        validate_name(key)?;
        check_reason(reason)?;
        let forced_by = Owner::this_process();
        // This call's id in the record: a re-send of an applied script answers "done".
        let force_id = LockToken::random().expose()[..16].to_string();
        for _ in 0..3 {
            let read = self.read_lock(key).await?;
            let Some(value) = read.value.clone() else {
                return Err(self.not_a_lock_or_free(key).await);
            };
            if !is_lock_value(&value) {
                return Err(Error::invalid(
                    "key",
                    format!("{key:?} holds a string that is not a leasehold lock token"),
                ));
            }
            if read.pttl < 0 {
                return Err(Error::invalid(
                    "key",
                    format!("{key:?} has no TTL: a leasehold lock always has one"),
                ));
            }
            let previous = LockHolder::from_value(&value, None)
                .ok_or_else(|| unexpected(format!("{key:?} holds an empty value")))?;
            let record = [
                ("reason", reason.to_string()),
                ("forced_by", forced_by.to_string()),
                ("previous_holder", previous.token.redacted()),
                (
                    "previous_owner",
                    previous
                        .owner
                        .as_ref()
                        .map(ToString::to_string)
                        .unwrap_or_default(),
                ),
            ];
            let (fence, forced) = (crate::redis::slot::fence_key(key), forced_record_key(key));
            let reply: Vec<Value> = self
                .idempotent(Operation::Release, |mut conn| {
                    let mut inv = FORCE_RELEASE_SCRIPT.key(key);
                    inv.key(&fence)
                        .key(&forced)
                        .arg(&value)
                        .arg(FORCED_RECORD_TTL.as_millis() as u64)
                        .arg(&force_id);
                    for (field, text) in &record {
                        inv.arg(*field).arg(text);
                    }
                    async move { inv.invoke_async(&mut conn).await }
                })
                .await?;
            match reply.as_slice() {
                [Value::Int(1), counter] => {
                    let counter: u64 = redis::from_redis_value_ref(counter)
                        .map_err(|e| unexpected(format!("the counter: {e}")))?;
                    return Ok(ForceReleased {
                        key: key.to_string(),
                        previous,
                        fencing_counter: Some(counter),
                        forced_by,
                        reason: reason.to_string(),
                    });
                }
                [Value::Int(0)] => continue,
                [Value::Int(-1)] => {
                    return Err(Error::invalid(
                        "key",
                        format!(
                            "{:?} is not a number, so {key:?} is not a leasehold lock",
                            crate::redis::slot::fence_key(key)
                        ),
                    ));
                }
                other => return Err(unexpected(format!("{other:?}"))),
            }
        }
        Err(Error::NotHeld {
            key: key.to_string(),
        })
    }

    fn history_log(&self, options: &HistoryOptions) -> Option<Arc<dyn HistoryLog>> {
        Some(self.history_streams(options))
    }

    /// The plain lock's acquire and release scripts append the events (`redis::history`).
    fn recording(&self, options: &HistoryOptions) -> Option<Arc<dyn Driver>> {
        Some(Arc::new(RedisClient::recording(self, *options)))
    }

    fn records_releases(&self) -> bool {
        self.records_lock(false).is_some()
    }
}

/// One page of `SCAN`, on the connection's server or on the cluster master at `master`.
async fn scan_page(
    mut conn: ClientConnection,
    cursor: u64,
    master: Option<(String, u16)>,
) -> redis::RedisResult<(u64, Vec<String>)> {
    let mut cmd = redis::cmd("SCAN");
    cmd.arg(cursor).arg("COUNT").arg(SCAN_COUNT);
    match (&mut conn, master) {
        (ClientConnection::Cluster(c), Some((host, port))) => {
            use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
            let reply = c
                .route_command(
                    cmd,
                    RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress { host, port }),
                )
                .await?;
            redis::from_redis_value(reply).map_err(Into::into)
        }
        _ => cmd.query_async(&mut conn).await,
    }
}

/// The entries a lock's read shows (none if nothing is held).
fn entries_of(name: &str, read: Read) -> Vec<LockEntry> {
    let holders_of = |members: &[(String, f64)]| -> Vec<LockHolder> {
        let mut holders: Vec<LockHolder> = members
            .iter()
            .filter(|(_, expiry)| *expiry > read.now_ms)
            .filter_map(|(member, expiry)| {
                let ttl = Duration::from_millis((expiry - read.now_ms) as u64);
                LockHolder::from_value(member, Some(ttl))
            })
            .collect();
        holders.sort_by_key(|h| h.ttl);
        holders
    };
    let mut entries = Vec::new();
    let permits = holders_of(&read.permits);
    if !permits.is_empty() {
        let mut entry = LockEntry::new(name, LockKind::Permits, permits);
        entry.permits = read.limit;
        entries.push(entry);
    }
    let readers = holders_of(&read.readers);
    if !readers.is_empty() {
        let mut entry = LockEntry::new(name, LockKind::Read, readers);
        entry.waiters = Some(read.writer_waiting as u64);
        entry.fencing_counter = read.fence;
        entries.push(entry);
    }
    if let Some(value) = read.value.as_deref().filter(|v| is_lock_value(v)) {
        let ttl = (read.pttl >= 0).then(|| Duration::from_millis(read.pttl as u64));
        let kind = if read.leader {
            LockKind::Election
        } else if read.queued > 0 {
            LockKind::Fair
        } else {
            LockKind::Lock
        };
        let holders = LockHolder::from_value(value, ttl).into_iter().collect();
        let mut entry = LockEntry::new(name, kind, holders);
        entry.fencing_counter = read.fence;
        entry.waiters = match kind {
            LockKind::Fair => Some(read.queued),
            _ if read.writer_waiting => Some(1),
            _ => None,
        };
        entries.push(entry);
    }
    entries
}

fn unexpected(detail: String) -> Error {
    Error::UnexpectedReply {
        op: Operation::Inspect,
        detail,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::driver::Driver;

    #[test]
    fn keys_map_to_their_lock() {
        use crate::redis::slot::{fair_entry_key, fair_queue_key, fence_key};
        for name in ["job", "a:b", "x{tag}y", "a{}b", "}{x", "{a"] {
            assert_eq!(classify(name), Some((name.to_string(), None)), "{name}");
            assert_eq!(
                classify(&fence_key(name)),
                Some((name.to_string(), Some(Part::Fence)))
            );
            assert_eq!(
                classify(&fair_queue_key(name)),
                Some((name.to_string(), Some(Part::Queue)))
            );
            assert_eq!(classify(&fair_entry_key(name, "t1")), None, "{name}");
            assert_eq!(
                classify(&forced_record_key(name)),
                Some((name.to_string(), Some(Part::Forced)))
            );
            // Found listed as locks of their own before (a held lock's min_hold companion).
            assert_eq!(
                classify(&crate::redis::slot::min_hold_key(name)),
                Some((name.to_string(), Some(Part::MinHold)))
            );
            assert_eq!(
                classify(&crate::redis::history::history_key(name)),
                Some((name.to_string(), Some(Part::History)))
            );
        }
        // A key that only looks derived is a lock of its own.
        assert_eq!(
            classify("jobs:leader"),
            Some(("jobs:leader".to_string(), None))
        );
    }

    // Finding M1(c) of the 2026-12-02 review: the forced release is sent again after a lost
    // reply (`idempotent`); its first run had applied, someone took the lock meanwhile, and
    // the repeat answered "no longer that value", so force_release re-read and removed the
    // healthy new holder. A repeat of the same call now answers "done".
    leasehold_harness::server_test!(async fn a_resent_forced_release_leaves_the_next_holder_alone(bin) {
        use leasehold_harness::{Server, ServerOptions};
        let server = Server::start(&bin, &ServerOptions::new()).unwrap();
        let client = RedisClient::connect(&server.url()).await.unwrap();
        let key = "forced-twice";
        let options = crate::LockOptions::new(Duration::from_secs(60));
        let first = client.try_acquire(key, &options).await.unwrap().acquired().unwrap();
        let value = first.token().expose().to_string();
        let run = || {
            let mut inv = FORCE_RELEASE_SCRIPT.key(key);
            inv.key(crate::redis::slot::fence_key(key))
                .key(forced_record_key(key))
                .arg(&value)
                .arg(60_000)
                .arg("call-1")
                .arg("reason")
                .arg("test");
            let mut conn = client.connection();
            async move { inv.invoke_async::<Vec<i64>>(&mut conn).await.unwrap() }
        };
        let done = run().await;
        assert_eq!(done[0], 1);
        let next = client.try_acquire(key, &options).await.unwrap().acquired().unwrap();
        assert_eq!(run().await, done, "the repeat reports the run that applied");
        assert!(next.is_held());
        assert_eq!(
            client.inspect(key).await.unwrap().holder.as_deref(),
            Some(next.token().expose())
        );
        drop(first);
        next.release().await.unwrap();
    });
}
