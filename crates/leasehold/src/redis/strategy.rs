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

use redis::Cmd;

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

// The scripts live in `crate::redis::scripts`; these stay reachable here for the tests and the lab.
pub(crate) use crate::redis::scripts::EXTEND_SCRIPT;

/// The error code of a script that refuses to issue a fencing number because the counter is
/// at [`MAX_FENCING_NUMBER`](crate::MAX_FENCING_NUMBER) (2^53) or beyond: Lua numbers are
/// doubles, so the next one would be rounded, and two holders could get the same. Every script
/// that draws a number checks the counter before it writes anything
/// ([`Error::FencingExhausted`](crate::Error::FencingExhausted)).
pub const FENCING_EXHAUSTED: &str = "LEASEHOLD_FENCING_EXHAUSTED";

/// A command `name` with room for `args` more arguments of `bytes` bytes in all, so building
/// it allocates its two buffers once instead of growing them argument by argument (on the hot
/// path, those reallocations were a tenth of the client's time in bench W2).
pub(crate) fn sized_cmd(name: &str, args: usize, bytes: usize) -> Cmd {
    let mut c = Cmd::with_capacity(args + 1, name.len() + bytes);
    c.arg(name);
    c
}

/// The plain acquisition: `SET key token NX PX ttl_ms` (a single server's, and each Redlock
/// node's when no script is needed). Its reply: `OK` taken, nil busy.
pub(crate) fn set_nx_px(key: &str, token: &str, ttl_ms: u64) -> Cmd {
    let mut c = sized_cmd("SET", 5, key.len() + token.len() + 2 + 2 + 20);
    c.arg(key).arg(token).arg("NX").arg("PX").arg(ttl_ms);
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
