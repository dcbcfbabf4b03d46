//! How release and extend are done atomically on each kind of server, and how the library finds
//! out which ways a server offers.
//!
//! **Safety claim.** Release deletes the key and extend resets its TTL *only if the key still
//! holds the caller's token*, as one atomic step on the server: `DELEX key IFEQ token` (Redis
//! 8.4+), `DELIFEQ key token` (Valkey 9+), `SET key token PX ttl IFEQ token` (Redis 8.4+, Valkey
//! 8.1+), or a Lua script that does `GET` and `DEL`/`PEXPIRE` inside one script invocation (every
//! version; Redis runs a script without interleaving other clients' commands). A holder whose
//! lease expired and was taken over can therefore never delete or prolong the next holder's
//! lock; a plain `DEL` can (the seed's expiry bug, reproduced in the tests).
//!
//! Assumptions: tokens are unique (128-bit random), and the key is only written by lock holders.

use std::sync::LazyLock;

use redis::{Cmd, Script};

/// Which atomic compare-and-delete releases a lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ReleaseStrategy {
    /// Pick the fastest the server offers: `DelEx` > `DelIfEq` > `Lua`.
    Auto,
    /// `DELEX key IFEQ token` (Redis 8.4+).
    DelEx,
    /// `DELIFEQ key token` (Valkey 9+).
    DelIfEq,
    /// The compare-and-delete Lua script (`EVALSHA`, reloaded after `NOSCRIPT`).
    Lua,
}

/// Which atomic compare-and-expire extends a lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ExtendStrategy {
    /// Pick the fastest the server offers: `SetIfEq` > `Lua`.
    Auto,
    /// `SET key token PX ttl IFEQ token` (Redis 8.4+, Valkey 8.1+).
    SetIfEq,
    /// The compare-and-pexpire Lua script.
    Lua,
}

impl std::fmt::Display for ReleaseStrategy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ReleaseStrategy::Auto => "auto",
            ReleaseStrategy::DelEx => "DELEX key IFEQ token",
            ReleaseStrategy::DelIfEq => "DELIFEQ key token",
            ReleaseStrategy::Lua => "Lua compare-and-delete (EVALSHA)",
        })
    }
}

impl std::fmt::Display for ExtendStrategy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ExtendStrategy::Auto => "auto",
            ExtendStrategy::SetIfEq => "SET key token PX ttl IFEQ token",
            ExtendStrategy::Lua => "Lua compare-and-pexpire (EVALSHA)",
        })
    }
}

/// The seed's release script, verbatim.
pub const RELEASE_LUA: &str =
    "if redis.call('get',KEYS[1])==ARGV[1] then return redis.call('del',KEYS[1]) end return 0";

/// The release script that also wakes waiters: publishes the key on its release channel
/// (`ARGV[2]`) when, and only when, it deleted the lock. `pcall`: a refused notification must
/// never turn a completed release into an error (scripts do not roll back).
pub const RELEASE_NOTIFY_LUA: &str = "if redis.call('get',KEYS[1])==ARGV[1] then redis.call('del',KEYS[1]) redis.pcall('publish',ARGV[2],KEYS[1]) return 1 end return 0";

/// [`RELEASE_NOTIFY_LUA`] for a Redis Cluster: `SPUBLISH`, on a channel in the key's slot (see
/// [`crate::slot`]), so the notification stays on the key's shard.
pub const RELEASE_SNOTIFY_LUA: &str = "if redis.call('get',KEYS[1])==ARGV[1] then redis.call('del',KEYS[1]) redis.pcall('spublish',ARGV[2],KEYS[1]) return 1 end return 0";

/// Extend: reset the TTL only while the key holds our token.
pub const EXTEND_LUA: &str = "if redis.call('get',KEYS[1])==ARGV[1] then return redis.call('pexpire',KEYS[1],ARGV[2]) end return 0";

/// Acquire in one script, used with fencing and by waiters: `SET NX PX`; when it succeeds and a
/// counter key is given, `INCR` it in the same atomic step (so the number belongs to exactly this
/// acquisition); when the lock is busy, return the holder's `PTTL` so a waiter knows when the
/// lease runs out. Reply: `{1, fencing number or 0}` or `{0, pttl}`; the error
/// [`FENCING_EXHAUSTED`] (nothing written) if the counter is at 2^53 or beyond.
pub const ACQUIRE_LUA: &str = "\
if KEYS[2] and tonumber(redis.call('get', KEYS[2]) or '0') >= 9007199254740992 then
  return redis.error_reply('LEASEHOLD_FENCING_EXHAUSTED the fencing counter is at 2^53 or beyond')
end
if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  if KEYS[2] then return {1, redis.call('incr', KEYS[2])} end
  return {1, 0}
end
return {0, redis.call('pttl', KEYS[1])}";

/// The error code of a script that refuses to issue a fencing number because the counter is
/// at [`MAX_FENCING_NUMBER`](crate::MAX_FENCING_NUMBER) (2^53) or beyond: Lua numbers are
/// doubles, so the next one would be rounded, and two holders could get the same. Every script
/// that draws a number checks the counter before it writes anything
/// ([`Error::FencingExhausted`](crate::Error::FencingExhausted)).
pub const FENCING_EXHAUSTED: &str = "LEASEHOLD_FENCING_EXHAUSTED";

/// Raise a fencing counter to at least `ARGV[1]`, never lower it; reply: the counter afterwards
/// (as a string: counters are compared as integers, returned exactly).
pub const RAISE_COUNTER_LUA: &str = "\
local current = redis.call('get', KEYS[1])
if current == false or tonumber(current) < tonumber(ARGV[1]) then
  redis.call('set', KEYS[1], ARGV[1])
  return ARGV[1]
end
return current";

pub(crate) static RAISE_COUNTER_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(RAISE_COUNTER_LUA));
pub(crate) static RELEASE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(RELEASE_LUA));
pub(crate) static RELEASE_NOTIFY_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(RELEASE_NOTIFY_LUA));
pub(crate) static RELEASE_SNOTIFY_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(RELEASE_SNOTIFY_LUA));
pub(crate) static EXTEND_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(EXTEND_LUA));
pub(crate) static ACQUIRE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(ACQUIRE_LUA));

/// A command `name` with room for `args` more arguments of `bytes` bytes in all, so building
/// it allocates its two buffers once instead of growing them argument by argument (on the hot
/// path, those reallocations were a tenth of the client's time in bench W2).
pub(crate) fn sized_cmd(name: &str, args: usize, bytes: usize) -> Cmd {
    let mut c = Cmd::with_capacity(args + 1, name.len() + bytes);
    c.arg(name);
    c
}

/// The native release command, for the strategies that have one.
pub(crate) fn release_cmd(strategy: ReleaseStrategy, key: &str, token: &str) -> Option<Cmd> {
    match strategy {
        ReleaseStrategy::DelEx => {
            let mut c = sized_cmd("DELEX", 3, key.len() + 4 + token.len());
            c.arg(key).arg("IFEQ").arg(token);
            Some(c)
        }
        ReleaseStrategy::DelIfEq => {
            let mut c = sized_cmd("DELIFEQ", 2, key.len() + token.len());
            c.arg(key).arg(token);
            Some(c)
        }
        ReleaseStrategy::Lua | ReleaseStrategy::Auto => None,
    }
}

/// The native extend command, for the strategies that have one.
pub(crate) fn extend_cmd(
    strategy: ExtendStrategy,
    key: &str,
    token: &str,
    ttl_ms: u64,
) -> Option<Cmd> {
    match strategy {
        ExtendStrategy::SetIfEq => {
            let mut c = sized_cmd("SET", 5, key.len() + 2 * token.len() + 2 + 20 + 4);
            c.arg(key)
                .arg(token)
                .arg("PX")
                .arg(ttl_ms)
                .arg("IFEQ")
                .arg(token);
            Some(c)
        }
        ExtendStrategy::Lua | ExtendStrategy::Auto => None,
    }
}
