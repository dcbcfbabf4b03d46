//! The SQL of session locks: the acquiring statements, release, extend, inspect and the
//! fencing counters' table.

use super::history::riding;
use crate::core::history::HistoryKind;

#[cfg(doc)]
use super::lifetime::silence_bound;

/// The table of fencing counters (created on connect if missing).
pub(super) const CREATE_TABLE: &str = "CREATE TABLE IF NOT EXISTS leasehold_locks (
    key text PRIMARY KEY,
    fence bigint NOT NULL,
    holder text
)";

/// Whether this session's server process is still the one the session started on (`$4`, its
/// `pg_backend_pid()` then; a pooler may have moved the connection), and whether it already
/// holds the key (a session handed over by a pooler with another client's lock): either one
/// and the lock is not asked for. Advisory locks are reentrant, so the server would grant it.
const CHECK: &str = "\
c AS (SELECT pg_backend_pid() <> $4 AS moved, EXISTS (
    SELECT 1 FROM pg_locks
     WHERE locktype = 'advisory' AND granted AND objsubid = 1 AND pid = pg_backend_pid()
       AND classid::bigint = ((hashtextextended($1, 0) >> 32) & 4294967295)
       AND objid::bigint = (hashtextextended($1, 0) & 4294967295)) AS mine)";

/// The four server settings that bound how long a silent session can live (see
/// [`silence_bound`]), as columns: `tcp_keepalives_idle`, `tcp_keepalives_interval`,
/// `tcp_keepalives_count` (on TCP the socket's actual values) and `tcp_user_timeout` (ms).
///
/// Read in every statement that grants or extends a lease, not once per session: a
/// `pg_reload_conf()` applies new values to live server sessions (their assign hooks set the
/// socket options), and a lease must count on the values in force for it. A backend applies
/// a reload between statements, so the values a statement reads are the ones in force when it
/// finished; a reload that lands after that is seen by the next statement on the session (an
/// extend, which auto-extension sends within a third of the lifetime).
pub(super) const SILENCE: &str = "\
current_setting('tcp_keepalives_idle')::int,
       current_setting('tcp_keepalives_interval')::int,
       current_setting('tcp_keepalives_count')::int,
       coalesce(current_setting('tcp_user_timeout', true), '0')::int";

/// After `c` and `l` (`got`): only if granted, the idle limit and the fence increment, and with
/// `event`, the history event ([`riding`]: `$5` to `$8` its parameters, `$9` whether it carries
/// the fencing number). One row: `moved`, `mine`, the new fencing number (NULL: busy, or not
/// asked for), then [`SILENCE`].
fn granted(event: bool) -> String {
    let event = match event {
        true => format!(
            ",\n{}",
            riding(
                "i",
                HistoryKind::Acquired,
                "CASE WHEN $9 THEN i.fence END",
                5
            )
        ),
        false => String::new(),
    };
    format!(
        "\
s AS (SELECT CASE WHEN l.got THEN set_config('idle_session_timeout', $3, false) END AS t FROM l),
i AS (INSERT INTO leasehold_locks AS t (key, fence, holder)
      SELECT $1, 1, $2 FROM l, s WHERE l.got
      ON CONFLICT (key) DO UPDATE SET fence = t.fence + 1, holder = EXCLUDED.holder
      RETURNING fence){event}
SELECT c.moved, c.mine, (SELECT fence FROM i), {SILENCE} FROM c"
    )
}

/// One attempt: [`CHECK`], then the advisory lock, and only if granted, [`granted`] (with the
/// history `event`, or without).
pub(super) fn try_acquire_sql(event: bool) -> String {
    format!(
        "WITH {CHECK},\nl AS (SELECT CASE WHEN c.moved OR c.mine THEN false \
         ELSE pg_try_advisory_lock(hashtextextended($1, 0)) END AS got FROM c),\n{}",
        granted(event)
    )
}

/// A waiting attempt: as [`try_acquire_sql`], but blocks in the server until granted or
/// `lock_timeout` (55P03). The lock is taken inside the `CASE` (evaluated only when reached).
pub(super) fn wait_acquire_sql(event: bool) -> String {
    format!(
        "WITH {CHECK},\nl AS (SELECT CASE WHEN c.moved OR c.mine THEN false \
         ELSE (SELECT true FROM (SELECT pg_advisory_lock(hashtextextended($1, 0))) AS w) END AS got \
         FROM c),\n{}",
        granted(event)
    )
}

/// The first statement of every session, and the connect check's later ones (an unnamed
/// statement: nothing is prepared before it is known whether a pooler relays the connection):
/// the server process serving it.
pub(super) const PROBE: &str = "SELECT pg_backend_pid()";

/// Releases the key on a session whose acquiring statement failed after the advisory lock may
/// have been granted (a `lock_timeout` in the fence row's lock wait).
pub(super) const UNLOCK: &str = "SELECT pg_advisory_unlock(hashtextextended($1, 0))";

/// Sets `lock_timeout` for the next statement (pipelined with it).
pub(super) const SET_LOCK_TIMEOUT: &str = "SELECT set_config('lock_timeout', $1, false)";

/// Release: true if this session held the lock; the idle limit is lifted for the pool.
pub(super) const RELEASE: &str = "\
SELECT pg_advisory_unlock(hashtextextended($1, 0)), set_config('idle_session_timeout', '0', false)";

/// [`RELEASE`] appending its `released` event when it unlocked ([`riding`]: `$2` to `$5` its
/// parameters, `$6` the lease's fencing number). Same columns.
pub(super) fn release_recording_sql() -> String {
    let event = riding("r", HistoryKind::Released, "$6::bigint", 2);
    format!(
        "\
WITH u AS (SELECT pg_advisory_unlock(hashtextextended($1, 0)) AS unlocked,
                  set_config('idle_session_timeout', '0', false) AS t),
r AS (SELECT 1 FROM u WHERE u.unlocked),
{event}
SELECT unlocked, t FROM u"
    )
}

/// Extend: resets the idle timer (any statement does) to the new TTL, and says whether this
/// session still holds the lock; then the server process serving it and [`SILENCE`] (the
/// columns every extend answers, read by `PgHeld::extend_session`).
pub(super) fn extend_sql() -> String {
    format!(
        "\
SELECT set_config('idle_session_timeout', $2, false), EXISTS (
    SELECT 1 FROM pg_locks
     WHERE locktype = 'advisory' AND granted AND objsubid = 1 AND pid = pg_backend_pid()
       AND classid::bigint = ((hashtextextended($1, 0) >> 32) & 4294967295)
       AND objid::bigint = (hashtextextended($1, 0) & 4294967295)),
       pg_backend_pid(), {SILENCE}"
    )
}

/// The holder's session (if any), the counter and the last holder's token.
pub(super) const INSPECT: &str = "\
SELECT (SELECT pid FROM pg_locks
         WHERE locktype = 'advisory' AND granted AND objsubid = 1
           AND classid::bigint = ((hashtextextended($1, 0) >> 32) & 4294967295)
           AND objid::bigint = (hashtextextended($1, 0) & 4294967295)
         LIMIT 1),
       (SELECT fence FROM leasehold_locks WHERE key = $1),
       (SELECT holder FROM leasehold_locks WHERE key = $1)";

/// Raises the counter to at least `$2`.
pub(super) const RAISE: &str = "\
INSERT INTO leasehold_locks AS t (key, fence) VALUES ($1, $2)
ON CONFLICT (key) DO UPDATE SET fence = GREATEST(t.fence, EXCLUDED.fence)
RETURNING fence";
