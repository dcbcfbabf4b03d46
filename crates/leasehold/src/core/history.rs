//! The lock history: an optional, capped log of what happened to each key (acquired, released,
//! lost, forced, handed over), for `leasehold inspect --history` and for audits.
//!
//! Off by default; [`ClientOptions::history`](crate::ClientOptions::history) turns recording on
//! for a [`Locker`](crate::Locker). Reading ([`Locker::history`](crate::Locker::history)) works
//! whether recording is on or not.
//!
//! # What is guaranteed, and what is not
//! * **In the operation, on Redis, etcd and PostgreSQL.** A plain lock's acquisition and release
//!   append their event in the script, transaction or statement that takes or frees the lock: in
//!   the same round trip, and atomic with it (an event exactly when the operation happened; see
//!   `redis::history`, `etcd::history`, `postgres::history`). A refusal that is the history's
//!   own sends the operation again without the event, which then goes client-side.
//! * **Elsewhere best effort, client-side.** Otherwise (fair and `min_hold` locks, an
//!   auto-extended etcd lock that waited, `memory://`, and every loss or forced release) the
//!   [`Locker`](crate::Locker) appends an event *after* the lock operation succeeded, as a
//!   separate request: it is not atomic with it. A crash, a lost connection or a refused write
//!   between the two loses the event. Either way a failed append is logged (throttled) and
//!   never turns a successful acquisition or release into an error. A
//!   [`Lost`](HistoryKind::Lost) event is written by the loser, often while the server is
//!   unreachable (which may be why the lock was lost), so it is the most likely to be missing.
//! * **An audit aid, not a source of truth.** The lock key is the truth; the history says what
//!   the clients that record it saw. Clients without recording leave no events.
//! * **Capped and retained.** Each key keeps about [`HistoryOptions::cap`] newest events
//!   (exactly, or approximately on Redis: see the backend's `history` module), each for at most
//!   [`HistoryOptions::retention`].
//! * **Order.** Events read back newest first, in the order the server stored them.
//!
//! Redlock and `file://` keep no history: a [`Locker`](crate::Locker) on them refuses
//! [`ClientOptions::history`](crate::ClientOptions::history) when connecting, with
//! [`Error::Unsupported`](crate::Error::Unsupported) naming the backend.

use std::fmt::Debug;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_util::future::BoxFuture;

use crate::core::error::{Error, Result};

/// The longest retention accepted: a year.
pub const MAX_HISTORY_RETENTION: Duration = Duration::from_secs(366 * 24 * 3600);
/// The largest cap accepted per key.
pub const MAX_HISTORY_CAP: u32 = 100_000;

/// What happened to a lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum HistoryKind {
    /// Acquired, with its fencing number if fencing was on.
    Acquired,
    /// Released by its holder.
    Released,
    /// Lost by its holder (renewal refused, session ended, validity over).
    Lost,
    /// Removed by an operator (`force-release`), with the reason in the detail.
    Forced,
    /// Released to the longest waiter of a fair lock in the same step.
    HandedOver,
}

impl HistoryKind {
    /// Every kind, in declaration order.
    pub const ALL: [HistoryKind; 5] = [
        HistoryKind::Acquired,
        HistoryKind::Released,
        HistoryKind::Lost,
        HistoryKind::Forced,
        HistoryKind::HandedOver,
    ];

    /// The kind's name: `acquired`, `released`, `lost`, `forced`, `handed-over`.
    pub fn as_str(self) -> &'static str {
        match self {
            HistoryKind::Acquired => "acquired",
            HistoryKind::Released => "released",
            HistoryKind::Lost => "lost",
            HistoryKind::Forced => "forced",
            HistoryKind::HandedOver => "handed-over",
        }
    }
}

impl std::fmt::Display for HistoryKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for HistoryKind {
    type Err = Error;

    /// The kind [`HistoryKind::as_str`] names.
    fn from_str(s: &str) -> Result<Self> {
        HistoryKind::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| Error::invalid("history kind", format!("{s:?} is not an event kind")))
    }
}

/// One event of a key's history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryEvent {
    /// When it was stored: the server's clock on Redis (the stream entry's id) and PostgreSQL
    /// (`clock_timestamp()`), the recording client's clock on etcd and `memory://`.
    pub at: SystemTime,
    /// What happened.
    pub kind: HistoryKind,
    /// The fencing number of the acquisition it concerns, when known (fencing on).
    pub fencing: Option<u64>,
    /// The holder's token, redacted ([`LockToken::redacted`](crate::LockToken::redacted)):
    /// names one holder within the recording process, gives nothing of the token away.
    pub holder: Option<String>,
    /// Who held it (host, pid, program), when the holder recorded an owner.
    pub owner: Option<String>,
    /// Anything else worth keeping (a forced release's reason, a loss's cause).
    pub detail: Option<String>,
}

impl HistoryEvent {
    /// An event of `kind` about the holder of `token`: its redacted name and its owner record.
    pub(crate) fn of_holder(kind: HistoryKind, token: &crate::core::token::LockToken) -> Self {
        HistoryEvent {
            holder: Some(token.redacted()),
            owner: token.owner().map(|o| o.to_string()),
            ..HistoryEvent::new(kind)
        }
    }

    /// An event of `kind` now (by this machine's clock), with nothing else known yet.
    pub fn new(kind: HistoryKind) -> Self {
        HistoryEvent {
            at: SystemTime::now(),
            kind,
            fencing: None,
            holder: None,
            owner: None,
            detail: None,
        }
    }

    /// The fields a backend stores, by name (`at` in milliseconds since the Unix epoch; absent
    /// ones left out).
    pub(crate) fn fields(&self) -> Vec<(&'static str, String)> {
        let mut fields = vec![
            ("at", unix_millis(self.at).to_string()),
            ("kind", self.kind.as_str().to_string()),
        ];
        let optional = [
            ("fencing", self.fencing.map(|n| n.to_string())),
            ("holder", self.holder.clone()),
            ("owner", self.owner.clone()),
            ("detail", self.detail.clone()),
        ];
        fields.extend(
            optional
                .into_iter()
                .filter_map(|(name, value)| Some((name, value?))),
        );
        fields
    }

    /// The event stored as [`HistoryEvent::fields`]; unknown fields are ignored (a newer
    /// version's), a missing or bad `kind` is an error.
    pub(crate) fn from_fields<'a>(
        fields: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<Self> {
        let mut event = HistoryEvent::new(HistoryKind::Acquired);
        let mut kind = None;
        for (name, value) in fields {
            match name {
                "at" => {
                    event.at = from_unix_millis(value.parse().map_err(|_| bad_field(name, value))?)
                }
                "kind" => kind = Some(value.parse()?),
                "fencing" => {
                    event.fencing = Some(value.parse().map_err(|_| bad_field(name, value))?)
                }
                "holder" => event.holder = Some(value.to_string()),
                "owner" => event.owner = Some(value.to_string()),
                "detail" => event.detail = Some(value.to_string()),
                _ => {}
            }
        }
        event.kind = kind.ok_or_else(|| bad_field("kind", "(missing)"))?;
        Ok(event)
    }
}

fn bad_field(name: &str, value: &str) -> Error {
    Error::UnexpectedReply {
        op: crate::core::error::Operation::History,
        detail: format!("a history event's {name} is {value:?}"),
    }
}

/// Milliseconds since the Unix epoch (0 before it).
pub(crate) fn unix_millis(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The instant `ms` milliseconds after the Unix epoch.
pub(crate) fn from_unix_millis(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

/// How much history to keep, per key: turned on with
/// [`ClientOptions::history`](crate::ClientOptions::history) (off by default: nothing is
/// written), read with [`Locker::history`](crate::Locker::history).
///
/// **Guarantees and limits** (docs/guarantees.md §19). A Redis plain lock's acquisition and
/// release append their event in the same script, atomically. Everything else is best effort
/// and client-side: the [`Locker`](crate::Locker) appends the event as a separate request after
/// the lock operation succeeded, so a crash or a lost connection between the two loses the
/// event. A failed append is logged (throttled), never returned as an error. The history is
/// an audit aid, not a source of truth: the lock key is. Each key keeps at most
/// [`cap`](HistoryOptions::cap) events after each append (plus one per append running
/// concurrently, on etcd and PostgreSQL), each for at most the
/// [`retention`](HistoryOptions::retention). Redlock and `file://` keep no history
/// ([`Error::Unsupported`](crate::Error::Unsupported) when connecting).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HistoryOptions {
    cap: u32,
    retention: Duration,
}

impl Default for HistoryOptions {
    /// 100 events per key, each kept for 7 days.
    fn default() -> Self {
        HistoryOptions {
            cap: 100,
            retention: Duration::from_secs(7 * 24 * 3600),
        }
    }
}

impl HistoryOptions {
    /// The defaults.
    pub fn new() -> Self {
        Self::default()
    }

    /// Keep about this many newest events per key (default 100; 1 ..= [`MAX_HISTORY_CAP`]).
    pub fn cap(mut self, events: u32) -> Self {
        self.cap = events;
        self
    }

    /// Drop events older than this (default 7 days; 1 s ..= [`MAX_HISTORY_RETENTION`]).
    pub fn retention(mut self, retention: Duration) -> Self {
        self.retention = retention;
        self
    }

    /// The events kept per key.
    pub fn events_per_key(&self) -> u32 {
        self.cap
    }

    /// How long an event is kept.
    pub fn retention_period(&self) -> Duration {
        self.retention
    }

    /// Checks the cap and retention against their bounds.
    pub(crate) fn validate(&self) -> Result<()> {
        if !(1..=MAX_HISTORY_CAP).contains(&self.cap) {
            return Err(Error::invalid(
                "history cap",
                format!("{} is outside 1 ..= {MAX_HISTORY_CAP}", self.cap),
            ));
        }
        if self.retention < Duration::from_secs(1) || self.retention > MAX_HISTORY_RETENTION {
            return Err(Error::invalid(
                "history retention",
                format!("{:?} is outside 1 s ..= 366 days", self.retention),
            ));
        }
        Ok(())
    }
}

/// A backend's history store.
pub(crate) trait HistoryLog: Send + Sync + Debug + 'static {
    /// Stores `event` in `key`'s history, trimming it to the cap and retention.
    fn append<'a>(&'a self, key: &'a str, event: &'a HistoryEvent) -> BoxFuture<'a, Result<()>>;

    /// Up to `limit` of `key`'s newest events, newest first.
    fn read<'a>(&'a self, key: &'a str, limit: usize) -> BoxFuture<'a, Result<Vec<HistoryEvent>>>;
}

/// Appends `event` to `key`'s history, logging (throttled) and swallowing a failure: recording
/// never turns a lock operation's success into an error.
pub(crate) async fn record(log: &dyn HistoryLog, key: &str, event: HistoryEvent) {
    if let Err(e) = log.append(key, &event).await {
        crate::core::throttle::warn_throttled!(
            key,
            kind = event.kind.as_str(),
            error = %e,
            "could not record a lock history event"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_parse_back_from_their_names() {
        for kind in HistoryKind::ALL {
            assert_eq!(kind.as_str().parse::<HistoryKind>().unwrap(), kind);
        }
        assert!("taken".parse::<HistoryKind>().is_err());
    }

    #[test]
    fn events_survive_their_fields() {
        let event = HistoryEvent {
            at: from_unix_millis(1_700_000_000_123),
            kind: HistoryKind::Forced,
            fencing: Some(42),
            holder: Some("#0123abcd".into()),
            owner: None,
            detail: Some("stuck job".into()),
        };
        let fields = event.fields();
        let back = HistoryEvent::from_fields(fields.iter().map(|(n, v)| (*n, v.as_str()))).unwrap();
        assert_eq!(back, event);
        assert!(HistoryEvent::from_fields([("at", "1")]).is_err());
    }

    #[test]
    fn options_are_bounded() {
        HistoryOptions::default().validate().unwrap();
        assert!(HistoryOptions::new().cap(0).validate().is_err());
        assert!(
            HistoryOptions::new()
                .retention(Duration::from_millis(10))
                .validate()
                .is_err()
        );
    }
}
