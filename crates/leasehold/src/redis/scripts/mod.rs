//! Every Lua script the library runs on Redis or Valkey, each in a `.lua` file of its own next to
//! this one, and the [`Script`] handles that send them (`EVALSHA`, reloaded after `NOSCRIPT`).
//!
//! A `.lua` file is the script's exact text, byte for byte (most end without a newline): the
//! text is what the server hashes and caches, so a script's SHA1 is what it was when the text
//! lived in a Rust string. Fragments that several scripts share (the server's clock, the
//! fair scripts' helpers and their pass-on) are files of their own, joined to each script's
//! body once, when its [`Script`] is first used. Why each script is correct is said on its
//! `&str` constant below, and in the docs of the module that runs it.

use std::sync::LazyLock;

use redis::Script;

// ---- Plain locks (`strategy`, `client`) -------------------------------------------------------

/// The seed's release script, verbatim.
pub const RELEASE_LUA: &str = include_str!("release.lua");

/// The release script that also wakes waiters: publishes the key on its release channel
/// (`ARGV[2]`) when, and only when, it deleted the lock. `pcall`: a refused notification must
/// never turn a completed release into an error (scripts do not roll back).
pub const RELEASE_NOTIFY_LUA: &str = include_str!("release_notify.lua");

/// [`RELEASE_NOTIFY_LUA`] for a Redis Cluster: `SPUBLISH`, on a channel in the key's slot (see
/// `src/redis/slot`), so the notification stays on the key's shard.
pub(crate) const RELEASE_SNOTIFY_LUA: &str = include_str!("release_snotify.lua");

/// Extend: reset the TTL only while the key holds our token.
pub const EXTEND_LUA: &str = include_str!("extend.lua");

/// Acquire in one script, used with fencing and by waiters: `SET NX PX`; when it succeeds and a
/// counter key is given, `INCR` it in the same atomic step (so the number belongs to exactly this
/// acquisition); when the lock is busy, return the holder's `PTTL` so a waiter knows when the
/// lease runs out. Reply: `{1, fencing number or 0}` or `{0, pttl}`; the error
/// `FENCING_EXHAUSTED` (nothing written) if the counter is
/// at 2^53 or beyond.
pub const ACQUIRE_LUA: &str = include_str!("acquire.lua");

/// [`ACQUIRE_LUA`] for a lock taken with [`min_hold`](crate::LockOptions::min_hold): with the
/// lock, in the same atomic step, it sets the companion key (see `slot::min_hold_key`) to the
/// token with `PX min_hold`, so the minimum hold is counted by the server's clock from the
/// instant of the grant. `KEYS`: lock, companion, fence counter (optional); `ARGV`: token,
/// TTL ms, min_hold ms. Reply as [`ACQUIRE_LUA`].
pub(crate) const MIN_HOLD_ACQUIRE_LUA: &str = include_str!("min_hold_acquire.lua");

/// The release of a lock taken with `min_hold`: if the lock holds `ARGV[1]` and its companion
/// still holds it too (the minimum hold is not over), the lock is kept until the companion's
/// `PTTL` under the value [`KEPT_PREFIX`](crate::core::listing::KEPT_PREFIX) + token (which no
/// extend or release matches: a renewal applied after this release fails), so both end
/// together and the lock then expires by itself; otherwise
/// the lock is deleted as by a plain release, and waiters are told (`ARGV[2]`: channel, `''`
/// for none; `ARGV[3]`: publish command). Token-checked, atomic. Reply 1 (released or kept),
/// 0 (not ours).
pub(crate) const MIN_HOLD_RELEASE_LUA: &str = include_str!("min_hold_release.lua");

/// [`MIN_HOLD_ACQUIRE_LUA`]. `KEYS`: lock, companion, fence counter (optional); `ARGV`: token,
/// TTL ms, min_hold ms.
pub(crate) static MIN_HOLD_ACQUIRE_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(MIN_HOLD_ACQUIRE_LUA));
/// [`MIN_HOLD_RELEASE_LUA`]. `KEYS`: lock, companion; `ARGV`: token, channel, publish command.
pub(crate) static MIN_HOLD_RELEASE_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(MIN_HOLD_RELEASE_LUA));

/// Raise a fencing counter to at least `ARGV[1]`, never lower it; reply: the counter afterwards
/// (as a string: counters are compared as integers, returned exactly).
pub(crate) const RAISE_COUNTER_LUA: &str = include_str!("raise_counter.lua");

/// [`RAISE_COUNTER_LUA`]: `KEYS`: fence counter; `ARGV`: the least value.
pub(crate) static RAISE_COUNTER_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(RAISE_COUNTER_LUA));
/// [`RELEASE_LUA`]: compare-and-delete. `KEYS`: lock; `ARGV`: token.
pub(crate) static RELEASE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(RELEASE_LUA));
/// [`RELEASE_NOTIFY_LUA`]: compare-and-delete, then `PUBLISH`. `KEYS`: lock; `ARGV`: token,
/// channel.
pub(crate) static RELEASE_NOTIFY_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(RELEASE_NOTIFY_LUA));
/// [`RELEASE_SNOTIFY_LUA`]: compare-and-delete, then `SPUBLISH`. `KEYS`: lock; `ARGV`: token,
/// channel.
pub(crate) static RELEASE_SNOTIFY_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(RELEASE_SNOTIFY_LUA));
/// [`EXTEND_LUA`]: compare-and-pexpire. `KEYS`: lock; `ARGV`: token, TTL ms.
pub(crate) static EXTEND_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(EXTEND_LUA));
/// [`ACQUIRE_LUA`]: `SET NX PX` (+ `INCR`). `KEYS`: lock, fence counter (optional); `ARGV`:
/// token, TTL ms.
pub(crate) static ACQUIRE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(ACQUIRE_LUA));

// ---- Plain locks that record the lock history (`client`, `history`) ---------------------------

/// The history's append, shared by the recorded scripts: `record(at, extra)` adds an event to
/// the stream `KEYS[2]` (`ARGV[at]`: cap, `ARGV[at + 1]`: oldest id kept or `''`,
/// `ARGV[at + 2]`: retention ms, then the event's fields), trimmed as `redis::history` says. A refused append
/// (an ACL, a key of another type) is returned, not raised: the lock operation has already
/// written, and a script does not roll back.
const HISTORY_RECORD_LUA: &str = include_str!("history_record.lua");

/// [`ACQUIRE_LUA`] for a client that records the lock history: with the grant, in the same
/// atomic step, the `acquired` event (with the fencing number it issued) is appended to the
/// key's history stream. `KEYS`: lock, history stream, fence counter (optional); `ARGV`: token,
/// TTL ms, cap, oldest id kept, retention ms, then the event's fields. Reply as
/// [`ACQUIRE_LUA`], with the append's error as a third element when it was refused.
const ACQUIRE_RECORDED_LUA: &str = include_str!("acquire_recorded.lua");

/// [`RELEASE_NOTIFY_LUA`] for a client that records the lock history: when, and only when, it
/// deleted the lock, the `released` event is appended in the same atomic step. The
/// compare-and-delete is the server's own where it has one (`ARGV[4]`: `delex`, `delifeq`;
/// anything else: `GET` and `DEL`), as atomic inside the script as the script itself. `KEYS`:
/// lock, history stream; `ARGV`: token, channel (`''`: none), publish command, delete command,
/// cap, oldest id kept (`''`: no retention trim), retention ms, then the event's fields. Reply
/// 1 (`{1, error}` when the append was refused) or 0 (not ours: nothing written).
const RELEASE_RECORDED_LUA: &str = include_str!("release_recorded.lua");

/// The full text of the recorded acquire and release, as the server runs them.
pub(crate) static RECORDED_SCRIPTS: LazyLock<[String; 2]> = LazyLock::new(|| {
    [
        format!("{HISTORY_RECORD_LUA}{ACQUIRE_RECORDED_LUA}"),
        format!("{HISTORY_RECORD_LUA}{RELEASE_RECORDED_LUA}"),
    ]
});
/// [`ACQUIRE_RECORDED_LUA`], after the append it calls.
pub(crate) static ACQUIRE_RECORDED_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(&RECORDED_SCRIPTS[0]));
/// [`RELEASE_RECORDED_LUA`], after the append it calls.
pub(crate) static RELEASE_RECORDED_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(&RECORDED_SCRIPTS[1]));

// ---- Fair locks (`fair`) ----------------------------------------------------------------------

/// The acquisition script's helpers. `KEYS` of every fair script: lock, queue, the waiters'
/// entry prefix (an entry is the prefix plus the ticket), fence counter.
///
/// Every command on a handoff's path costs more than its own run time: the release arrives at
/// a server that sat idle through the hold, and on two cores a cold script ran ~50 us where
/// the same work in fewer commands ran ~30 us. So an entry is a key of its own that expires by
/// itself (no clock read, no expiry to parse), the release pops the queue's head, and the
/// release and leave scripts carry only what they run (no helper functions to create).
const FAIR_ACQUIRE_HELPERS_LUA: &str = include_str!("fair_acquire_helpers.lua");

/// The end of the release and leave scripts: hands the lock (which the script has checked is
/// ours) to the first live waiter, or deletes it. Dead entries popped on the way are dropped
/// (at most 100 per call, to bound the script's run time; if live waiters are left behind
/// more, the lock is deleted and the queue's head, which alone can take it, is woken if its
/// entry is alive: see the acquisition script; the others find it at their next refresh).
/// `ARGV[2]`: the release channel ('' publishes nothing; a message to the waiters of the
/// client `owner` goes on `ARGV[2] .. ':' .. owner`, its
/// [handoff channel](crate::redis::handoff_channel)), `ARGV[3]`: publish or spublish, `ARGV[4]`: the releasing client's
/// [owner name](crate::redis::waiting) ('' if it has none): a waiter of that client is not sent the
/// message, its client delivers the reply to it. Reply: `{2, ticket, attempt, fencing number
/// or 0, next}` (the handoff message's fields, and the ticket now first in the queue, absent
/// if it is empty), when no message was published; 2 when the message was (the fields are of
/// use only to the client it went to, and a bare integer is written from the server's static
/// buffer, where a table goes through its reply list); or 1 if the lock was deleted.
const FAIR_PASS_ON_LUA: &str = include_str!("fair_pass_on.lua");

/// The fair acquisition attempt. `ARGV`: token, TTL ms, ticket, handoff window ms, entry
/// lifetime ms, `1` to queue when busy (`0`: try once), fencing `1`/`0`, attempt number, owner
/// (see [`FAIR_RELEASE_LUA`]).
/// Reply: `{1, fencing number or 0}` (taken, or claimed after a handoff) or `{0, pttl}`.
pub(crate) const FAIR_ACQUIRE_LUA: &str = include_str!("fair_acquire.lua");

/// The start of the fair release: if the lock holds `ARGV[1]`, the script goes on to hand it
/// to the first live waiter or delete it ([pass on](fair_scripts)); otherwise it replies 0.
/// `ARGV[2]`, `ARGV[3]`: channel and publish command.
pub(crate) const FAIR_RELEASE_LUA: &str = include_str!("fair_release.lua");

/// The start of a waiter's leaving the queue (`ARGV[5]`: its ticket); if the lock had been
/// handed to it (`ARGV[1]`: its token), it is passed on as by a release. Reply as the release.
pub(crate) const FAIR_LEAVE_LUA: &str = include_str!("fair_leave.lua");

/// Helpers + [`FAIR_ACQUIRE_LUA`]: a fair attempt. `KEYS`: lock, queue, entry prefix, fence
/// counter; `ARGV`: as [`FAIR_ACQUIRE_LUA`].
pub(crate) static FAIR_ACQUIRE_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(&fair_scripts()[0]));
/// [`FAIR_RELEASE_LUA`] + pass-on: release and hand on. `KEYS`: as above; `ARGV`: token,
/// channel, publish command, owner.
pub(crate) static FAIR_RELEASE_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(&fair_scripts()[1]));
/// [`FAIR_LEAVE_LUA`] + pass-on: leave the queue, handing on a lock handed to us. `KEYS`: as
/// above; `ARGV`: token, channel, publish command, owner, ticket.
pub(crate) static FAIR_LEAVE_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(&fair_scripts()[2]));

/// The full text of every fair script, as the server runs them (for `SCRIPT LOAD`): the
/// acquisition attempt with its helpers; the release and the leave, each followed by the
/// pass-on that hands the lock to the first live waiter (reply `{2, ticket, attempt, fencing
/// number, next in line}`, or 2 if its handoff message went to another client) or deletes it
/// (reply 1).
pub fn fair_scripts() -> [String; 3] {
    [
        format!("{FAIR_ACQUIRE_HELPERS_LUA}{FAIR_ACQUIRE_LUA}"),
        format!("{FAIR_RELEASE_LUA}{FAIR_PASS_ON_LUA}"),
        format!("{FAIR_LEAVE_LUA}{FAIR_PASS_ON_LUA}"),
    ]
}

// ---- The server's clock (semaphores, read-write locks) ----------------------------------------

/// Reads the server's clock into `now` (ms); the start of the scripts that compare expiries.
const NOW_LUA: &str = include_str!("now.lua");

/// The semaphore scripts' `keep(now)`: both keys (permits, limit) live as long as the permit
/// that expires last.
const PERMIT_KEEP_LUA: &str = include_str!("permit_keep.lua");

// ---- Semaphores (`semaphore`) -----------------------------------------------------------------

/// Acquire a permit. `KEYS`: permits, limit. `ARGV`: token, TTL ms, N. Reply `{1, 0}`, or
/// `{0, ms until the first permit expires}`; an error `LEASEHOLD_PERMITS <n>` when the name's
/// holders use `n` permits.
pub(crate) const PERMIT_ACQUIRE_LUA: &str = include_str!("permit_acquire.lua");

/// Release a permit. `ARGV`: token, channel (`''`: no notification), publish command. Reply 1
/// if it was held (and unexpired), else 0.
pub(crate) const PERMIT_RELEASE_LUA: &str = include_str!("permit_release.lua");

/// Extend a permit to `ARGV[2]` ms from now if `ARGV[1]` holds it, unexpired. Reply 1 or 0.
pub(crate) const PERMIT_EXTEND_LUA: &str = include_str!("permit_extend.lua");

/// The number of unexpired permits. Read-only.
pub(crate) const PERMIT_COUNT_LUA: &str = include_str!("permit_count.lua");

/// A semaphore script: the clock and `keep`, then `body`.
fn permit_script(body: &str) -> String {
    format!("{NOW_LUA}{PERMIT_KEEP_LUA}{body}")
}

/// [`PERMIT_ACQUIRE_LUA`]. `KEYS`: permits, limit; `ARGV`: token, TTL ms, N.
pub(crate) static PERMIT_ACQUIRE_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(&permit_script(PERMIT_ACQUIRE_LUA)));
/// [`PERMIT_RELEASE_LUA`]. `KEYS`: permits, limit; `ARGV`: token, channel, publish command.
pub(crate) static PERMIT_RELEASE_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(&permit_script(PERMIT_RELEASE_LUA)));
/// [`PERMIT_EXTEND_LUA`]. `KEYS`: permits, limit; `ARGV`: token, TTL ms.
pub(crate) static PERMIT_EXTEND_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(&permit_script(PERMIT_EXTEND_LUA)));
/// [`PERMIT_COUNT_LUA`]. `KEYS`: permits.
pub(crate) static PERMIT_COUNT_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(PERMIT_COUNT_LUA));

/// The full text of every semaphore script, as the server runs them (for `SCRIPT LOAD`).
pub fn semaphore_scripts() -> [String; 4] {
    [
        permit_script(PERMIT_ACQUIRE_LUA),
        permit_script(PERMIT_RELEASE_LUA),
        permit_script(PERMIT_EXTEND_LUA),
        PERMIT_COUNT_LUA.to_string(),
    ]
}

// ---- Read-write locks (`rwlock`) --------------------------------------------------------------

/// A read attempt. `KEYS`: readers, writer (`name`), waiting writer. `ARGV`: token, TTL ms.
/// Reply `{1, 0}` or `{0, ms until the writer's or the waiting writer's key expires, -1 if
/// unknown}`.
pub(crate) const READ_ACQUIRE_LUA: &str = include_str!("read_acquire.lua");

/// A write attempt. `KEYS`: readers, writer, waiting writer, fence counter. `ARGV`: token, TTL
/// ms, waiting mark ms, `1` to mark itself waiting when busy, fencing `1`/`0`. Reply
/// `{1, fencing number or 0}` or `{0, ms until the thing in the way may be gone}`; the error
/// `FENCING_EXHAUSTED` instead of taking the lock if the
/// counter is at 2^53 or beyond.
pub(crate) const WRITE_ACQUIRE_LUA: &str = include_str!("write_acquire.lua");

/// A waiting writer gives up: `KEYS`: waiting writer; `ARGV`: token. Removes its mark.
pub(crate) const WRITE_LEAVE_LUA: &str = include_str!("write_leave.lua");

/// The clock, then [`READ_ACQUIRE_LUA`]. `KEYS`: readers, writer, waiting writer; `ARGV`:
/// token, TTL ms.
pub(crate) static READ_ACQUIRE_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(&format!("{NOW_LUA}{READ_ACQUIRE_LUA}")));
/// The clock, then [`WRITE_ACQUIRE_LUA`]. `KEYS`: readers, writer, waiting writer, fence
/// counter; `ARGV`: as [`WRITE_ACQUIRE_LUA`].
pub(crate) static WRITE_ACQUIRE_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(&format!("{NOW_LUA}{WRITE_ACQUIRE_LUA}")));
/// [`WRITE_LEAVE_LUA`]. `KEYS`: waiting writer; `ARGV`: token.
pub(crate) static WRITE_LEAVE_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(WRITE_LEAVE_LUA));

// ---- Multi-locks (`multi`) --------------------------------------------------------------------

/// Take every key of `KEYS` or none. `ARGV`: token, TTL ms. Reply `{1, 0, 0}` or `{0, index
/// of the first busy key (1-based), its PTTL}`.
pub(crate) const MULTI_ACQUIRE_LUA: &str = include_str!("multi_acquire.lua");

/// Release the keys of `KEYS` that hold `ARGV[1]`; `ARGV[2]`: publish command (`''`: none),
/// `ARGV[2 + i]`: key `i`'s release channel. Reply: how many were released.
pub(crate) const MULTI_RELEASE_LUA: &str = include_str!("multi_release.lua");

/// Extend every key of `KEYS` to `ARGV[2]` ms if all hold `ARGV[1]`; otherwise extend none.
/// Reply 1 or 0.
pub(crate) const MULTI_EXTEND_LUA: &str = include_str!("multi_extend.lua");

/// [`MULTI_ACQUIRE_LUA`]. `KEYS`: every key; `ARGV`: token, TTL ms.
pub(crate) static MULTI_ACQUIRE_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(MULTI_ACQUIRE_LUA));
/// [`MULTI_RELEASE_LUA`]. `KEYS`: every key; `ARGV`: token, publish command, channels.
pub(crate) static MULTI_RELEASE_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(MULTI_RELEASE_LUA));
/// [`MULTI_EXTEND_LUA`]. `KEYS`: every key; `ARGV`: token, TTL ms.
pub(crate) static MULTI_EXTEND_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(MULTI_EXTEND_LUA));

// ---- Elections (`election`) -------------------------------------------------------------------

/// Take the lock and start a term. `KEYS`: lock, fence counter, leader record. `ARGV`: token,
/// TTL ms, candidate id, release channel (`''`: no announcement), publish command. Reply
/// `{1, term}` or `{0, the holder's PTTL}`; the error
/// `FENCING_EXHAUSTED` (nothing written) if the counter is
/// at 2^53 or beyond.
pub(crate) const CAMPAIGN_LUA: &str = include_str!("campaign.lua");

/// Who leads: `KEYS`: lock, fence counter, leader record. Reply `{pttl, counter, record}`.
pub(crate) const LEADER_LUA: &str = include_str!("leader.lua");

/// [`CAMPAIGN_LUA`]. `KEYS`: lock, fence counter, leader record; `ARGV`: token, TTL ms, id,
/// channel, publish command.
pub(crate) static CAMPAIGN_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(CAMPAIGN_LUA));
/// [`LEADER_LUA`]. `KEYS`: lock, fence counter, leader record.
pub(crate) static LEADER_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(LEADER_LUA));

// ---- Fenced resources (`fencing`) -------------------------------------------------------------

/// The compare-and-write at the resource; see the `fencing` module docs (`src/redis/fencing.rs`).
pub const FENCED_WRITE_LUA: &str = concat!(
    include_str!("fenced_check.lua"),
    include_str!("fenced_write.lua")
);

/// The fenced read: the same check as the write, and on success the number is claimed (the
/// register remembers it as the highest seen) before the value is returned.
pub(crate) const FENCED_READ_LUA: &str = concat!(
    include_str!("fenced_check.lua"),
    include_str!("fenced_read.lua")
);

/// [`FENCED_WRITE_LUA`]. `KEYS`: the register; `ARGV`: fencing number, token, value.
pub(crate) static FENCED_WRITE_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(FENCED_WRITE_LUA));
/// [`FENCED_READ_LUA`]. `KEYS`: the register; `ARGV`: fencing number, token.
pub(crate) static FENCED_READ_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(FENCED_READ_LUA));

// ---- Redlock (`redlock`) ----------------------------------------------------------------------

/// Phase 1: `SET NX PX`, and the node's fencing counter when it was set and a counter key is
/// given. Reply `{1, counter}` or `{0, pttl}`.
pub const REDLOCK_ACQUIRE_LUA: &str = include_str!("redlock_acquire.lua");

/// Phase 1 of a lock taken with [`min_hold`](crate::LockOptions::min_hold): as
/// [`REDLOCK_ACQUIRE_LUA`], and with the grant the node's min_hold companion (token, `PX
/// min_hold`), as [`MIN_HOLD_ACQUIRE_LUA`] does on one server.
pub(crate) const REDLOCK_MIN_HOLD_ACQUIRE_LUA: &str = include_str!("redlock_min_hold_acquire.lua");

/// Phase 2: while the key holds our token, raise the counter to `ARGV[2]` if it is lower.
/// Reply 1 (held; the counter is now >= the token) or 0 (not held: nothing written).
pub const RAISE_FENCE_LUA: &str = include_str!("raise_fence.lua");

/// [`REDLOCK_ACQUIRE_LUA`]. `KEYS`: lock, fence counter (optional); `ARGV`: token, TTL ms.
pub(crate) static REDLOCK_ACQUIRE_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(REDLOCK_ACQUIRE_LUA));
/// [`REDLOCK_MIN_HOLD_ACQUIRE_LUA`]. `KEYS`: lock, companion, fence counter (optional);
/// `ARGV`: token, TTL ms, min_hold ms.
pub(crate) static REDLOCK_MIN_HOLD_ACQUIRE_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(REDLOCK_MIN_HOLD_ACQUIRE_LUA));
/// [`RAISE_FENCE_LUA`]. `KEYS`: lock, fence counter; `ARGV`: token, fencing number.
pub(crate) static RAISE_FENCE_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(RAISE_FENCE_LUA));

// ---- The lock table (`table`) ------------------------------------------------------------------

/// The forced release (`leasehold force-release`): `KEYS`: lock, fence counter, forced record; `ARGV`: the value checked,
/// the record's TTL in ms, this call's id, then the record's field/value pairs. Reply
/// `{1, counter}` (done, now or by an earlier run of this very call whose reply was lost: a
/// re-send finds its id in the record and must not let the caller re-read and force the
/// next holder, M1), `{0}` (the lock no longer holds that value: nothing written), `{-1}` (the
/// counter is not a number: nothing written).
pub(crate) const FORCE_RELEASE_LUA: &str = include_str!("force_release.lua");
/// [`FORCE_RELEASE_LUA`].
pub(crate) static FORCE_RELEASE_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(FORCE_RELEASE_LUA));

#[cfg(test)]
mod tests {
    #[test]
    fn the_kept_value_is_written_with_the_prefix_the_readers_strip() {
        let written = format!("'{}' .. ARGV[1]", crate::core::listing::KEPT_PREFIX);
        assert!(super::MIN_HOLD_RELEASE_LUA.contains(&written));
    }
}
