//! How long a session lock's lease can count on: the TTL, bounded by how long the server may
//! keep a silent session.

use std::time::{Duration, Instant};

use crate::core::error::{Error, Operation, Result};
use crate::core::guard::valid_until;

/// Linux's defaults for a socket's keepalive, which PostgreSQL uses where its settings are 0
/// (`tcp_keepalives_idle` 7200 s, `tcp_keepalives_interval` 75 s, `tcp_keepalives_count` 9).
/// On a TCP connection the server reports the socket's actual values, so these apply only to
/// connections without TCP keepalive (a Unix socket, where nothing can be partitioned).
const OS_KEEPALIVE: (u64, u64, u64) = (7200, 75, 9);

/// The earliest the server's TCP stack can end a session whose client went silent (a
/// partition), counted from when the server last received from it, which is after the client
/// sent its last statement:
///
/// `min(idle + interval × count, tcp_user_timeout)`, where `idle`, `interval` (s) and `count`
/// are the server's `tcp_keepalives_*` (0: [`OS_KEEPALIVE`]) and `tcp_user_timeout` (ms) counts
/// only when set (0: the kernel's retransmission limits, many minutes). PostgreSQL turns
/// keepalive on for every TCP connection; the keepalive probes start after `idle` seconds
/// without traffic and the connection is dropped after `count` unanswered probes, `interval`
/// apart; with `tcp_user_timeout` set, Linux drops a connection whose data or probes stay
/// unacknowledged that long. The minimum of the two is a lower bound for both.
pub(crate) fn silence_bound(
    idle_s: i32,
    interval_s: i32,
    count: i32,
    user_timeout_ms: i32,
) -> Duration {
    let or = |v: i32, default: u64| u64::try_from(v).ok().filter(|v| *v > 0).unwrap_or(default);
    let keepalive = Duration::from_secs(
        or(idle_s, OS_KEEPALIVE.0) + or(interval_s, OS_KEEPALIVE.1) * or(count, OS_KEEPALIVE.2),
    );
    match u64::try_from(user_timeout_ms) {
        Ok(ms) if ms > 0 => keepalive.min(Duration::from_millis(ms)),
        _ => keepalive,
    }
}

/// The lifetime a lease of `ttl` can count on, on a session the server may end after `silence`
/// without traffic: the shorter one.
pub(super) fn lease_lifetime(ttl: Duration, silence: Duration) -> Duration {
    ttl.min(silence)
}

/// The validity of a lease whose statement was sent at `sent`: `sent + lifetime - drift`.
pub(super) fn validity_from(sent: Instant, ttl: Duration, silence: Duration) -> Instant {
    let life = lease_lifetime(ttl, silence);
    valid_until(sent, life)
}

/// The silence bound from a reply's four [`SILENCE`](super::sql::SILENCE) columns, from
/// column `first` on.
pub(super) fn silence_in(
    row: &tokio_postgres::Row,
    first: usize,
    op: Operation,
) -> Result<Duration> {
    let setting = |i: usize| {
        row.try_get::<_, i32>(first + i)
            .map_err(|e| Error::UnexpectedReply {
                op,
                detail: e.to_string(),
            })
    };
    Ok(silence_bound(
        setting(0)?,
        setting(1)?,
        setting(2)?,
        setting(3)?,
    ))
}
