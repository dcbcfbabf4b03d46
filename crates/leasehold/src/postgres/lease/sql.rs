//! The statements of lease rows ([`PostgresLeaseClient`](super::PostgresLeaseClient)): the
//! table and its columns, acquire (with the history event, the waiters' mark, or both),
//! release, extend, give-back, inspect and raise.

use std::sync::LazyLock;
use std::time::Duration;

use crate::core::history::HistoryKind;
use crate::core::options::LockOptions;
use crate::postgres::history::riding;

pub(super) const CREATE_TABLE: &str = "CREATE TABLE IF NOT EXISTS leasehold_leases (
    key text PRIMARY KEY,
    token text,
    expires_at timestamptz NOT NULL,
    fence bigint NOT NULL,
    hold_until timestamptz,
    wait_until timestamptz
)";

/// The columns added since the table's first form ([`CREATE_TABLE`] has them), added to a table
/// made before them ([`add_columns`]):
/// - `hold_until`, of [`min_hold`](LockOptions::min_hold): the instant, by the server's clock,
///   before which a release keeps the lock;
/// - `wait_until`, the waiters' mark ([`marking`]): until then a release announces itself.
pub(super) static ADD_COLUMNS: LazyLock<String> =
    LazyLock::new(|| add_columns("leasehold_leases", &["hold_until", "wait_until"]));

/// Adds to `table` each of the `timestamptz` columns `columns` it lacks, each checked first, so
/// a table that has them takes no `ALTER TABLE` lock: the columns added since a table's first
/// form, for a table made before them.
pub(in crate::postgres) fn add_columns(table: &str, columns: &[&str]) -> String {
    let columns: Vec<String> = columns.iter().map(|c| format!("'{c}'")).collect();
    format!(
        "DO $$ DECLARE c text; BEGIN
  FOREACH c IN ARRAY ARRAY[{}] LOOP
    IF NOT EXISTS (SELECT 1 FROM pg_attribute
                    WHERE attrelid = '{table}'::regclass AND attname = c
                      AND NOT attisdropped) THEN
      EXECUTE format('ALTER TABLE {table} ADD COLUMN IF NOT EXISTS %I timestamptz', c);
    END IF;
  END LOOP;
END $$",
        columns.join(", ")
    )
}

/// Takes the row if it is free or expired; no row returned: busy. `$4`: the min_hold in ms
/// (NULL: none), counted from the same clock reading as the expiry. One plain upsert, what
/// `try_acquire` sends: the uncontended path at the floor's cost (W1B). A one-try attempt found
/// busy asks for the remaining lease in a second statement ([`BUSY_FOR`]); a waiter's attempt
/// answers it itself ([`ACQUIRE_WAITING`]), before the pause it bounds.
pub(super) const ACQUIRE: &str = "\
INSERT INTO leasehold_leases AS t (key, token, expires_at, fence, hold_until)
SELECT $1, $2, n + $3::bigint * interval '1 millisecond', 1,
       n + $4::bigint * interval '1 millisecond'
  FROM clock_timestamp() AS n
ON CONFLICT (key) DO UPDATE
   SET token = EXCLUDED.token, expires_at = EXCLUDED.expires_at, fence = t.fence + 1,
       hold_until = EXCLUDED.hold_until
 WHERE t.token IS NULL OR t.expires_at <= clock_timestamp()
RETURNING fence";

/// [`ACQUIRE`] appending its `acquired` event ([`riding`]; `$5` to `$8` its parameters, `$9`
/// whether the event carries the fencing number). Answers as [`ACQUIRE`] does.
pub(super) static ACQUIRE_RECORDING: LazyLock<String> = LazyLock::new(|| acquiring(true, false));

/// [`ACQUIRE`] for a waiter: a busy row gets the waiter's mark ([`marking`], `$5` its ms). One
/// row, always: the fencing number (NULL: busy), then, when busy, the holder's remaining lease
/// ([`REMAINING`]): no second statement before the waiter's pause.
pub(super) static ACQUIRE_WAITING: LazyLock<String> = LazyLock::new(|| acquiring(false, true));

/// [`ACQUIRE_RECORDING`] for a waiter ([`marking`], `$10` its ms), answering as
/// [`ACQUIRE_WAITING`] does.
pub(super) static ACQUIRE_RECORDING_WAITING: LazyLock<String> =
    LazyLock::new(|| acquiring(true, true));

/// [`ACQUIRE`] as the CTE `a`, with its `acquired` event (`event`: [`ACQUIRE_RECORDING`]'s
/// parameters) and the waiter's mark (`mark`: its ms the next parameter), answering as
/// [`ACQUIRE`] does, or with the mark as [`ACQUIRE_WAITING`] does.
fn acquiring(event: bool, mark: bool) -> String {
    let mut ctes = vec![format!("a AS (\n{ACQUIRE})")];
    if event {
        ctes.push(riding(
            "a",
            HistoryKind::Acquired,
            "CASE WHEN $9 THEN a.fence END",
            5,
        ));
    }
    if mark {
        let p = if event { 10 } else { 5 };
        ctes.push(marking(
            "leasehold_leases",
            "NOT EXISTS (SELECT 1 FROM a)",
            p,
            Remark::UnlessLasting,
        ));
    }
    let answer = match mark {
        true => format!(
            "SELECT (SELECT fence FROM a), CASE WHEN NOT EXISTS (SELECT 1 FROM a) THEN {REMAINING} END"
        ),
        false => "SELECT fence FROM a".to_string(),
    };
    format!("WITH {}\n{answer}", ctes.join(",\n"))
}

/// **The waiters' mark: a release announces itself only to waiters.** A `NOTIFY` is not free:
/// PostgreSQL serializes every committing transaction that notifies, server-wide, on one lock
/// held through its commit (so through the WAL flush: no group commit among them), and wakes
/// every listening server process. Sent by every release, it capped concurrent releases at one
/// commit at a time (`issue32-target7-backend-floors.md`, session 26). So a waiter's attempt
/// that takes nothing (`busy`, a condition on the statement's other CTEs) marks the name's rows
/// of `table`: their `wait_until` moves to at least `$p` ms from now ([`marking_ms`]: past the
/// waiter's next attempt), in the same statement. A release (or give-back) sends its `NOTIFY`
/// only while its row's `wait_until` is ahead. The CTE is `m`; it returns, per row marked,
/// whether the row is `free` at its latest version.
///
/// What it guarantees: a waiter is told of every release of a row it marked, as long as its
/// mark lasts. The mark's `UPDATE` locks each row and, at `READ COMMITTED`, works on its
/// latest committed version; a release's `UPDATE` locks its row and reads `wait_until` from
/// its latest committed version too. So a release either commits after the mark (and sees it)
/// or before the mark reached its row, and then:
/// - a lock's attempt found that row free, since its upsert (`ON CONFLICT`) locks and reads the
///   latest version before the mark, and took it;
/// - a permit's attempt, which picks its slot by its snapshot, may have seen the slot taken,
///   but the mark then finds the slot `free`, and the attempt looks again.
///
/// The waiter listens before the attempt that counts: the engine subscribes after the first
/// busy attempt, then attempts again (`core::acquire::wait`). That first attempt may also miss
/// a row inserted after its snapshot (the mark finds rows by it; rows are never deleted), which
/// the attempt after subscribing then sees. A mark outlived by its waiter (a pause far past its
/// bound) costs that waiter its wake-up, not its turn: it attempts after its pause, as without
/// a notification. Nothing here is a safety property: a notification only wakes a waiter early.
///
/// **A mark that lasts is not written again** ([`Remark::UnlessLasting`]: a lock's attempt and
/// a campaign's, whose upsert has just locked and read the name's one row). When its mark is
/// at least half of `$p` ahead, the attempt leaves the row alone. Otherwise every waiter that
/// loses a handoff writes the row again, one after another under its row lock: a third more
/// server work per losing attempt with eight waiters (`issue32-target7-backend-floors.md`,
/// session 27). Such a mark covers this waiter as its own would:
/// - `wait_until` never moves back: only this `GREATEST` and an election's `'infinity'` write
///   it, and rows are never deleted. So the mark the attempt's snapshot shows is at most the
///   row's latest, and any release before it ends is announced.
/// - Half of [`marking_ms`] is the backoff's largest pause and half a second more, so the mark
///   lasts past this waiter's next attempt, as the argument above needs.
///
/// A permit's attempt always writes: its `free` answer needs every slot at its latest version.
pub(in crate::postgres) fn marking(table: &str, busy: &str, p: usize, mark: Remark) -> String {
    let short = match mark {
        Remark::UnlessLasting => format!(
            "\n         AND (wait_until IS NULL \
             OR wait_until < clock_timestamp() + ${p}::bigint * interval '0.5 millisecond')"
        ),
        Remark::Always => String::new(),
    };
    format!(
        "\
m AS (UPDATE {table}
         SET wait_until = GREATEST(wait_until, clock_timestamp() + ${p}::bigint * interval '1 millisecond')
       WHERE key = $1 AND {busy}{short}
      RETURNING token IS NULL OR expires_at <= clock_timestamp() AS free)"
    )
}

/// Which marked rows a waiter's attempt writes again ([`marking`]).
#[derive(Clone, Copy)]
pub(in crate::postgres) enum Remark {
    /// Every row (a permit's attempt: its `free` answer needs each slot's latest version).
    Always,
    /// Only a row whose mark ends within half of this waiter's own (a lock's, a campaign's).
    UnlessLasting,
}

/// How long a waiter's mark lasts ([`marking`]): past its next attempt, which comes within
/// one pause, at most the backoff's largest, twice over and a second more for a slow machine.
pub(in crate::postgres) fn marking_ms(options: &LockOptions) -> i64 {
    let bound = options.backoff_policy().max().saturating_mul(2) + Duration::from_secs(1);
    i64::try_from(bound.as_millis()).unwrap_or(i64::MAX)
}

/// The remaining lease of `$1`'s row, in ms, as a scalar subquery (NULL: free or expired by
/// now), read by the statement's snapshot: what an acquiring statement that found the row busy
/// answers, to bound the waiter's pause. A holder that changed since the snapshot (a race)
/// may make it another lease's or NULL; either only moves the next attempt, which is
/// token-checked as every attempt is.
pub(in crate::postgres) const REMAINING: &str = "\
(SELECT (extract(epoch FROM expires_at - clock_timestamp()) * 1000)::bigint
   FROM leasehold_leases
  WHERE key = $1 AND token IS NOT NULL AND expires_at > clock_timestamp())";

/// [`REMAINING`] as a statement of its own: what a busy one-try attempt ([`ACQUIRE`],
/// [`ACQUIRE_RECORDING`]) sends next.
pub(super) static BUSY_FOR: LazyLock<String> = LazyLock::new(|| format!("SELECT {REMAINING}"));

/// Release, and the notification for waiters, in one statement: one row iff released. A lock
/// taken with [`min_hold`](LockOptions::min_hold) whose `hold_until` is still ahead (by the
/// server's clock, read once: `n.t`) is kept, with our token (so `inspect` shows who holds it),
/// until then and expires by itself, marked released: `hold_until = '-infinity'` (a value no
/// hold has), which [`EXTEND`] and this statement refuse. Only a lock really freed is
/// announced, and only to waiters that marked it ([`marking`]).
///
/// One `UPDATE` whose `RETURNING` notifies, not a CTE read by a `SELECT`: a W1 cycle 8-18 us
/// shorter, its statements then at the floor's
/// (`bench/results/issue32-target7-backend-floors.md`, session 30). [`RELEASE_RECORDING`],
/// whose event rides on the released row, keeps the CTE.
const RELEASE_UPDATE: &str = "\
UPDATE leasehold_leases l
     SET token = CASE WHEN l.hold_until > n.t THEN l.token END,
         expires_at = CASE WHEN l.hold_until > n.t THEN l.hold_until ELSE l.expires_at END,
         hold_until = CASE WHEN l.hold_until > n.t THEN '-infinity' ELSE l.hold_until END
    FROM (SELECT clock_timestamp() AS t) n
   WHERE l.key = $1 AND l.token = $2 AND l.expires_at > n.t
     AND l.hold_until IS DISTINCT FROM '-infinity'";

/// What a release answers, per row released (`freed`: the row's new `token` is NULL, `waited`:
/// its `wait_until` is ahead): notifying waiters iff freed and a waiter marked the row
/// ([`marking`]).
fn notify_if(freed: &str, waited: &str, key: &str) -> String {
    format!("CASE WHEN {freed} AND {waited} THEN pg_notify('leasehold_release', {key}) END")
}

/// See [`RELEASE_UPDATE`].
pub(super) static RELEASE: LazyLock<String> = LazyLock::new(|| {
    let notify = notify_if("l.token IS NULL", "l.wait_until > n.t", "l.key");
    format!("{RELEASE_UPDATE}\nRETURNING {notify}")
});

/// [`RELEASE`] appending its `released` event ([`riding`]; `$3` to `$6` its parameters, `$7`
/// the lease's fencing number), with the same answer.
pub(super) static RELEASE_RECORDING: LazyLock<String> = LazyLock::new(|| {
    let event = riding("r", HistoryKind::Released, "$7::bigint", 3);
    let notify = notify_if("freed", "waited", "key");
    format!(
        "WITH r AS (\n{RELEASE_UPDATE}\n  RETURNING l.key, l.token IS NULL AS freed, \
         l.wait_until > n.t AS waited),\n{event}\nSELECT {notify} FROM r"
    )
});

/// Extend, token-checked, never on an expired row nor on one a [`RELEASE`] keeps for its hold
/// (`hold_until = '-infinity'`).
pub(super) const EXTEND: &str = "\
UPDATE leasehold_leases SET expires_at = clock_timestamp() + $3::bigint * interval '1 millisecond'
 WHERE key = $1 AND token = $2 AND expires_at > clock_timestamp()
   AND hold_until IS DISTINCT FROM '-infinity'";

/// Gives back a grant that will not be used (it came too late to be a lease, or its reply was
/// lost): frees the row if it still has our token, whatever its hold says (the hold is for a
/// lock that was used), and notifies waiters if one marked the row ([`marking`]).
/// Token-checked, so it frees no one else's grant.
pub(super) const GIVE_BACK: &str = "\
WITH r AS (
  UPDATE leasehold_leases SET token = NULL, hold_until = NULL
   WHERE key = $1 AND token = $2
  RETURNING key, wait_until > clock_timestamp() AS waited)
SELECT CASE WHEN waited THEN pg_notify('leasehold_release', key) END FROM r";

pub(super) const INSPECT: &str = "\
SELECT CASE WHEN expires_at > clock_timestamp() THEN token END,
       CASE WHEN token IS NOT NULL AND expires_at > clock_timestamp()
            THEN (extract(epoch FROM expires_at - clock_timestamp()) * 1000)::bigint END,
       fence
  FROM leasehold_leases WHERE key = $1";

pub(super) const RAISE: &str = "\
INSERT INTO leasehold_leases AS t (key, token, expires_at, fence) VALUES ($1, NULL, clock_timestamp(), $2)
ON CONFLICT (key) DO UPDATE SET fence = GREATEST(t.fence, EXCLUDED.fence)
RETURNING fence";
