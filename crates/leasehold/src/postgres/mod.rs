//! PostgreSQL as a lock backend (`postgres://` URLs, cargo feature `postgres`): session advisory
//! locks, each on a dedicated connection, with a fencing number drawn in the same statement;
//! and [`FencedRows`], the fenced-write rule for the user's own tables.
//!
//! # How a lock is held
//! Each held lock has a connection (a *session*) of its own, taken from a small pool of idle
//! sessions or opened on demand. One statement, one round trip, takes the session-level
//! advisory lock on `hashtextextended(key, 0)` and, only if it was granted, increments the key's
//! row in the table `leasehold_locks (key, fence, holder)` and returns the new fencing number.
//! A waiting acquisition blocks in the server (`pg_advisory_lock` under `lock_timeout`):
//! PostgreSQL's lock manager queues the waiters and grants the lock to one of them when it is
//! released, so nobody polls and there is no thundering herd.
//!
//! **The TTL is the session's idle limit.** Granting the lock also sets the session's
//! `idle_session_timeout` (PostgreSQL 14+) to the TTL: a holder that sends nothing for a whole
//! TTL (paused, hung, partitioned away) has its session ended by the server, which releases the
//! lock. [`LockGuard::extend`](crate::LockGuard::extend) (and auto-extension, which extends every
//! `renew_interval`) resets that timer. So the lock behaves like a Redis lock with a TTL, and a
//! crashed holder's lock is freed when the server notices the closed connection (at once for a
//! process crash; for a vanished machine, at the TTL).
//!
//! # Guarantees, and under which assumptions
//! * **Mutual exclusion** while the session lives: advisory locks are the server's own. Two keys
//!   whose 64-bit hashes collide exclude each other (a liveness cost, never a safety one).
//! * **Validity.** [`Lease::valid_until`](crate::Lease::valid_until) is counted from before the
//!   granting (or extending) statement was sent, minus the drift allowance; the server's idle
//!   timer starts after that statement *finished*, so `idle_session_timeout` never ends the
//!   session before the lease's validity is over (assuming the server's timer does not run more
//!   than 1% fast). A grant that arrives after that validity (a long wait in the server's queue)
//!   is not given back: the session, which cannot lose the lock while it lives, extends it at
//!   once and the lease counts from that extend's send; only if that extend fails is the lock
//!   given back ([`Error::ExpiredOnArrival`]). So waiters keep the server's arrival order however
//!   long they wait.
//! * **The keepalive bound.** The server's TCP stack can end a session sooner: when the client
//!   is partitioned away, the server's keepalive gives up after `tcp_keepalives_idle +
//!   tcp_keepalives_interval × tcp_keepalives_count` seconds of silence, and
//!   `tcp_user_timeout` (when set) after that many ms of unacknowledged data. Every acquiring and
//!   extending statement reads these settings (on TCP the server reports the socket's actual
//!   values; 0 is taken as Linux's defaults, 7200 s, 75 s and 9), and that lease's lifetime is
//!   `min(ttl, idle + interval × count, tcp_user_timeout)`: the validity never outlasts the
//!   earliest moment the server could end the session, also after a `pg_reload_conf()` that
//!   lowers them on live sessions (an extend lowers the lease's validity to its own). A reload
//!   between two statements is seen by the next one; auto-extension renews within a third of the
//!   lifetime the last one read. (The settings are read, not overridden: a lease never claims
//!   more than the server's own configuration allows, whatever it is.)
//! * **No pooler in between** that hands server sessions from client to client (a transaction
//!   pooler): see below; such a pooler is detected and session locks are refused.
//! * **Loss is a lost session.** When the connection ends (server restart, session terminated,
//!   idle limit reached, network failure) the lease is reported lost at once
//!   ([`crate::LossReason::NotHeld`]): the lock died with the session.
//! * **Fencing numbers strictly increase per key**, and are drawn in the statement that took
//!   the lock, while it was held; the increment is committed before the reply. A server restart
//!   keeps them (the row is durable), unlike an advisory lock. A failover to an asynchronous
//!   streaming replica does not: increments not yet replayed there are lost (numbers repeat;
//!   [`Locker::raise_fencing_counter`](crate::Locker::raise_fencing_counter) repairs), and lease rows not yet replayed are
//!   granted again. Use synchronous replication where numbers must survive a failover.
//! * **Token-checked release**: only the session that holds the lock can release it, so a
//!   release can never free a later holder's lock. A release or extend with a token this client
//!   does not hold is refused ([`Error::NotHeld`], or [`Error::Unsupported`] when another
//!   process's session holds it: that lock ends with that session).
//!
//! # Through a connection pooler
//! A session lock lives in the server session. A pooler decides which server session serves a
//! client: a transaction pooler (PgBouncer's `pool_mode=transaction` or `statement`, the
//! default of many managed PostgreSQL services) gives it to another client between two
//! transactions of ours, and advisory locks are reentrant, so that client would be granted our
//! lock too; a session pooler ends it (its reset query releasing the lock) when it drops the
//! *client* (`client_idle_timeout`, its own TCP timeouts), which no statement can read. So
//! session locks are refused through any pooler, with [`Error::Topology`] (whose message says to
//! use `?lock=lease`, or a direct connection), when:
//! * a connection's startup announced a server process (the process id of its
//!   `BackendKeyData`, the key cancel requests are sent with) other than the one serving it
//!   (`pg_backend_pid()`): PostgreSQL announces its own; a pooler answers cancel requests itself
//!   and announces a key of its own (PgBouncer, pgcat, Odyssey and Supavisor draw it at random),
//!   in every pool mode and whatever its load. A plain TCP proxy or tunnel forwards the
//!   message and passes. This check alone decides; the others below stay as second lines;
//! * connecting, two connections open at once, each then running three more transactions, the
//!   two alternating, are not each served by one server process of their own;
//! * preparing or running a statement finds its name taken or unknown (another client's
//!   prepared statements, on a session that is not ours);
//! * an extend runs on another server process than its session's;
//! * the acquiring statement runs on another server process than the session started on, or on
//!   a server session that already holds the key: it then does not ask for the lock, in the
//!   same statement, so nothing is granted twice.
//!
//! **The first sign latches:** from then on the client (and its clones) refuses every
//! acquisition before any round trip. Lease rows (`?lock=lease`, [`PostgresLeaseClient`]) keep
//! no session state and work through any pooler.
//!
//! # TLS
//! libpq's `sslmode` in the URL, on rustls (see [`PostgresClient::connect_with`]): `prefer` by
//! default, `require`, `verify-ca`, `verify-full`, with `sslrootcert`, `sslcert` and `sslkey`
//! (else the CA and client certificate of [`ClientOptions`](crate::ClientOptions)). Both clients
//! take the same parameters, and the pooler checks above work the same over TLS.
//!
//! # When a lease row is the better choice
//! A session lock cannot outlive its process: `leasehold acquire` (take now, release from
//! another process later) has no meaning here, and every held lock costs a server connection.
//! For thousands of concurrent locks, or locks handed between processes, a row with a token and
//! an expiry (what the Redis backend does with a key) fits better; the session lock is the right
//! tool when the protected data lives in the same database and the lock should die with the
//! worker's connection.
//!
//! # Semaphores, read-write locks and elections
//! [`Locker::semaphore`](crate::Locker::semaphore), [`Locker::rwlock`](crate::Locker::rwlock) and [`Locker::election`](crate::Locker::election)
//! (and [`Locker`](crate::Locker)'s, on `postgres://` URLs) hold each permit, reader, writer or
//! leader as a session lock, on a session of its own, with the same TTL, renewal and loss
//! report: a semaphore's permits are `N` advisory locks (slots `hashtextextended(name, 1..=N)`;
//! a waiter queues in one slot's server queue for a backoff delay at a time, then tries every
//! slot: not fair, and the number of permits cannot be checked between clients); readers take
//! `pg_advisory_lock_shared` on the plain lock's key and the writer `pg_advisory_lock`, so a
//! waiting writer keeps new readers out (PostgreSQL queues a request behind a conflicting
//! waiting one: `LockAcquireExtended` in `src/backend/storage/lmgr/lock.c`); a leader holds the
//! plain lock's key, its term is the fencing number drawn in the winning statement, which also
//! writes the term row `leasehold_terms (key, term, leader_id)`. A release by token from
//! another process is refused as for a session lock (the holding session carries a hash of the
//! token in its `application_name`, so a token held elsewhere is
//! [`Error::Unsupported`], one held nowhere [`Error::NotHeld`]).
//!
//! [`Locker::semaphore`](crate::Locker::semaphore) keeps permits as slot rows (`leasehold_permits`), each
//! taken under its row lock, with [`Error::Conflict`] for another number of permits, and
//! [`Locker::election`](crate::Locker::election) the name's lease row plus a term row
//! (`leasehold_lease_terms`); both work from any process and through a transaction pooler.
//! Lease rows have no read-write lock ([`Backend::has`](crate::Backend::has) says so). Details
//! and tests: docs/guarantees.md §9.

mod client;
mod error;
mod fenced;
mod history;
mod lease;
mod lease_conn;
mod lifetime;
mod params;
mod pooler;
mod session;
mod sql;
mod sync;
mod table;
mod tls;
mod url;

#[cfg(test)]
mod tests;

pub use client::PostgresClient;
pub use fenced::FencedRows;
pub use lease::PostgresLeaseClient;
pub use params::MAX_PG_KEY_LEN;

pub(crate) use error::{Timed, is_create_race, pg_error, timeout_error, unexpected};
pub(crate) use params::validate_pg_key;
pub(crate) use url::wants_lease_rows;

#[cfg(doc)]
use crate::core::error::Error;

/// Lab hooks (`leasehold::internal`): the statements of a plain session lock, for the bench's
/// floor that sends them raw.
#[doc(hidden)]
pub mod hooks {
    /// The tables a session lock's statements use (created if missing: the fencing counters,
    /// and with `recording`, the history), then the plain session lock's acquiring statement
    /// (one attempt) and its release, as a session prepares them; with `recording`, the ones
    /// that append their history events.
    ///
    /// The acquisition's parameters: `$1` key, `$2` token, `$3` the TTL in ms (text), `$4`
    /// the session's `pg_backend_pid()`; recording, then `$5` holder, `$6` owner, `$7` the
    /// retention in ms, `$8` the cap, `$9` whether the event carries the fencing number. The
    /// release's: `$1` key; recording, then the same four and `$6` the fencing number.
    pub fn session_lock_statements(recording: bool) -> [String; 3] {
        let tables = match recording {
            true => format!(
                "{};\n{}",
                super::sql::CREATE_TABLE,
                super::history::CREATE_TABLE
            ),
            false => super::sql::CREATE_TABLE.to_string(),
        };
        let release = match recording {
            true => super::sql::release_recording_sql(),
            false => super::sql::RELEASE.to_string(),
        };
        [tables, super::sql::try_acquire_sql(recording), release]
    }
}
