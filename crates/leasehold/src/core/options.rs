//! Options, as builders: per lock ([`LockOptions`], [`Backoff`]) and per client
//! ([`ClientOptions`]).

use std::time::Duration;

use rand::Rng;

use crate::core::error::{Error, Result};
use crate::core::kind::{Backend, Fairness, Opt, Taking, refusal};

/// Shortest TTL accepted: 10 ms.
///
/// A lease is valid for its TTL minus the drift allowance (TTL/100 + 2 ms, see
/// [`clock_drift`](crate::clock_drift)), counted from when the request was sent. At 10 ms that
/// leaves 7.9 ms: a real, if short, lease. Much below it almost every grant would arrive after
/// its validity ended, be given back, and be tried again: a lock nobody can hold.
pub const MIN_TTL: Duration = Duration::from_millis(10);
/// Shortest TTL of a lease that is renewed ([`LockOptions::auto_extend`], elections): 50 ms.
///
/// A renewal is sent at most half a TTL after the last one (see
/// [`LockOptions::renew_interval`]) and must reach the server before the lease's validity ends:
/// at 50 ms a renewal round trip has at least 22.5 ms, against 2.9 ms at [`MIN_TTL`].
pub const MIN_RENEWED_TTL: Duration = Duration::from_millis(50);
/// Longest TTL accepted: a week. A lock meant to outlive that is a configuration mistake (keep
/// a shorter TTL and extend it instead: a crashed holder then blocks others for one TTL only).
pub const MAX_TTL: Duration = Duration::from_secs(7 * 24 * 3600);
/// The longest wait and hold cap taken as given: longer ones are taken as this (a century: for
/// ever, in practice), so that a deadline computed from them cannot overflow an `Instant`.
/// [`LockOptions::wait_forever`] waits this long: the one spelling of "for ever".
pub const FOREVER: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// Shortest first delay of a [`Backoff`]: with less, a waiter whose attempts keep failing at
/// once (a grant that expires on arrival, a refused request) would spin on the server.
pub const MIN_BACKOFF: Duration = Duration::from_millis(1);

/// The TTL in whole milliseconds, if it is within [`MIN_TTL`] ..= [`MAX_TTL`].
pub(crate) fn ttl_millis(ttl: Duration) -> Result<u64> {
    if ttl < MIN_TTL {
        return Err(Error::invalid(
            "ttl",
            format!(
                "{ttl:?} is below the minimum of {MIN_TTL:?}: a lease is valid for its TTL minus \
                 the drift allowance (TTL/100 + 2 ms), and a shorter one would expire before its \
                 grant arrives"
            ),
        ));
    }
    if ttl > MAX_TTL {
        return Err(Error::invalid(
            "ttl",
            format!("{ttl:?} is above the maximum of 7 days; use a shorter TTL and extend it"),
        ));
    }
    Ok(ttl.as_millis() as u64)
}

/// How long to sleep between attempts of a waiting acquisition.
///
/// Exponential backoff with jitter: the n-th delay is drawn uniformly from
/// `[base/2, base]` with `base = min(max, initial * 2^n)`. Randomness keeps competing waiters
/// from retrying in lock step; the lower bound keeps a waiter from spinning. When the server told
/// us how long the holder's lease still runs, the wait is also capped by that.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
}

impl Default for Backoff {
    /// 10 ms growing to 200 ms: a quick first retry (a lock is often released within tens of
    /// milliseconds), gentle on the server after.
    fn default() -> Self {
        Backoff {
            initial: Duration::from_millis(10),
            max: Duration::from_millis(200),
        }
    }
}

impl Backoff {
    /// A backoff from `initial` doubling up to `max`.
    pub fn new(initial: Duration, max: Duration) -> Self {
        Backoff {
            initial,
            max: max.max(initial),
        }
    }

    /// The same delay every time (still jittered within `[d/2, d]`).
    pub fn constant(delay: Duration) -> Self {
        Backoff::new(delay, delay)
    }

    /// The first delay's upper bound.
    pub fn initial(&self) -> Duration {
        self.initial
    }

    /// The largest delay.
    pub fn max(&self) -> Duration {
        self.max
    }

    /// The delay before attempt `attempt + 1` (attempt counts from 0).
    pub fn delay(&self, attempt: u32) -> Duration {
        // Doubling, saturating, until the maximum: at most ~130 steps whatever `attempt` is.
        let mut base = self.initial;
        for _ in 0..attempt {
            if base.is_zero() || base >= self.max {
                break;
            }
            base = base.saturating_mul(2);
        }
        let base = base.min(self.max);
        if base.is_zero() {
            return base;
        }
        // Drawn in whole nanoseconds as u128: every Duration fits, none is truncated.
        let nanos = rand::rng().random_range(base.as_nanos() / 2..=base.as_nanos());
        const NANOS: u128 = 1_000_000_000;
        Duration::new((nanos / NANOS) as u64, (nanos % NANOS) as u32)
    }

    /// The pause before attempt `attempt + 1` of a waiter: [`Backoff::delay`], cut short to
    /// wake just after the holder's lease ends when the server said how long it still runs
    /// (`remaining`), but never below half the first delay (at most 10 ms). Whatever the server
    /// answers (a lease that always has 0 ms left), a waiter does not retry faster than that.
    pub(crate) fn pause(&self, attempt: u32, remaining: Option<Duration>) -> Duration {
        let delay = self.delay(attempt);
        match remaining {
            Some(r) => delay.min(self.until_lease_ends(r)),
            None => delay,
        }
    }

    /// How long to sleep to wake just after a lease with `remaining` left has ended, but not
    /// less than half the first delay, at most 10 ms (the floor of [`Backoff::pause`]): a server
    /// that keeps saying the lease ends now makes a waiter retry 100 times a second at most,
    /// and a long backoff still wakes when the holder's lease ends.
    pub(crate) fn until_lease_ends(&self, remaining: Duration) -> Duration {
        let floor = (self.initial / 2).min(Duration::from_millis(10));
        (remaining + Duration::from_millis(1)).max(floor)
    }
}

/// Options for one acquisition.
///
/// ```
/// use std::time::Duration;
/// use leasehold::LockOptions;
/// let opts = LockOptions::new(Duration::from_secs(10))
///     .wait(Duration::from_secs(2))
///     .fencing(true);
/// assert_eq!(opts.ttl(), Duration::from_secs(10));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockOptions {
    ttl: Duration,
    wait: Option<Duration>,
    backoff: Backoff,
    fencing: bool,
    auto_extend: bool,
    renew_every: Option<Duration>,
    max_hold: Option<Duration>,
    on_loss: OnLoss,
    replica_ack: Option<(u32, Duration)>,
    fair: bool,
    owner: Option<crate::core::owner::Owner>,
    min_hold: Option<Duration>,
}

/// What [`with_lock`](crate::Locker::with_lock) does when the lease is lost while the work
/// runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum OnLoss {
    /// Drop the work's future at once and return [`Error::LockLost`] (the default): work that
    /// is no longer protected stops at its next `.await`.
    #[default]
    Cancel,
    /// Let the work finish; the loss is still visible through the lease it was given
    /// ([`Lease::lost`](crate::Lease::lost), [`Lease::is_held`](crate::Lease::is_held)) and
    /// `with_lock` returns [`Error::LockLost`] afterwards.
    Notify,
}

impl Default for LockOptions {
    /// TTL 30 s, no waiting, no fencing.
    fn default() -> Self {
        LockOptions {
            ttl: Duration::from_secs(30),
            wait: None,
            backoff: Backoff::default(),
            fencing: false,
            auto_extend: false,
            renew_every: None,
            max_hold: None,
            on_loss: OnLoss::Cancel,
            replica_ack: None,
            fair: false,
            owner: None,
            min_hold: None,
        }
    }
}

impl LockOptions {
    /// Options with the given TTL and the other defaults.
    pub fn new(ttl: Duration) -> Self {
        LockOptions {
            ttl,
            ..Default::default()
        }
    }

    /// The lease time: how long the lock outlives a holder that crashed.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Sets the TTL.
    pub fn with_ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// How long [`acquire`](crate::Locker::acquire) keeps retrying a busy lock. `None` (the
    /// default) makes one attempt. A wait over a century is taken as a century.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }

    /// Makes [`acquire`](crate::Locker::acquire) wait until it gets the lock ([`FOREVER`]).
    pub fn wait_forever(self) -> Self {
        self.wait(FOREVER)
    }

    /// Makes [`acquire`](crate::Locker::acquire) try once.
    pub fn no_wait(mut self) -> Self {
        self.wait = None;
        self
    }

    /// The wait bound, if any.
    pub fn wait_bound(&self) -> Option<Duration> {
        self.wait.map(|w| w.min(FOREVER))
    }

    /// Sets the retry backoff.
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// The retry backoff.
    pub fn backoff_policy(&self) -> Backoff {
        self.backoff
    }

    /// Issues a fencing token with each acquisition (see `src/redis/fencing`).
    ///
    /// Off by default: it costs a Lua script instead of a native `SET`, keeps one counter key per
    /// lock name forever, and protects nothing unless the resource checks the number. Turn it on
    /// whenever the lock guards data that a slow holder could corrupt.
    pub fn fencing(mut self, on: bool) -> Self {
        self.fencing = on;
        self
    }

    /// Whether fencing tokens are issued.
    pub fn fencing_enabled(&self) -> bool {
        self.fencing
    }

    /// Keeps the lock alive while the guard lives: the client renews it every
    /// [`renew_every`](LockOptions::renew_every) (default TTL/3) with the token-checked extend,
    /// batched with every other lease of the client, and declares it lost at once when a
    /// renewal fails (see `src/redis/renewal`). The TTL then only bounds how long a *crashed*
    /// holder blocks others.
    pub fn auto_extend(mut self, on: bool) -> Self {
        self.auto_extend = on;
        self
    }

    /// Whether the lock is kept alive.
    pub fn auto_extend_enabled(&self) -> bool {
        self.auto_extend
    }

    /// How often an auto-extended lock is renewed (default TTL/3; clamped to at most TTL/2 so
    /// one failed round still leaves time for another).
    pub fn renew_every(mut self, interval: Duration) -> Self {
        self.renew_every = Some(interval);
        self
    }

    /// The renewal interval in effect.
    pub fn renew_interval(&self) -> Duration {
        let half = self.ttl / 2;
        self.renew_every
            .map_or(self.ttl / 3, |d| d.min(half))
            .max(Duration::from_millis(1))
    }

    /// Stops renewing after this much total hold time; the lock then expires one TTL later
    /// (and its lease reports lost), so a holder stuck in a loop cannot keep it forever. A cap
    /// over a century is taken as a century.
    pub fn max_hold(mut self, cap: Duration) -> Self {
        self.max_hold = Some(cap);
        self
    }

    /// The hold-time cap, if any.
    pub fn max_hold_bound(&self) -> Option<Duration> {
        self.max_hold.map(|cap| cap.min(FOREVER))
    }

    /// What `with_lock` does when the lease is lost during the work (default: cancel it).
    pub fn on_loss(mut self, on_loss: OnLoss) -> Self {
        self.on_loss = on_loss;
        self
    }

    /// The loss policy.
    pub fn loss_policy(&self) -> OnLoss {
        self.on_loss
    }

    /// Requires `replicas` replicas to acknowledge the acquisition (`WAIT replicas timeout`
    /// right after it, on the same connection) before it counts; if fewer do within `timeout`,
    /// the lock is released and [`Error::NotReplicated`] returned.
    ///
    /// Redis replicates asynchronously: a master that fails over right after granting a lock may
    /// hand the lock key, and the fencing counter's last `INCR`, to nobody. With an
    /// acknowledgement the key (and the counter, written by the same script) is on `replicas`
    /// replicas before the holder starts, so a failover to one of them keeps it. It costs one
    /// more round trip and the replicas' latency, and `WAIT` holds up the connection's other
    /// commands meanwhile. It is not consensus: a failover to a replica that did not acknowledge
    /// still loses the lock (Redisson's `checkLockSyncedSlaves` has the same limit).
    pub fn replica_ack(mut self, replicas: u32, timeout: Duration) -> Self {
        self.replica_ack = Some((replicas, timeout));
        self
    }

    /// The replica acknowledgement required, if any.
    pub fn replica_ack_required(&self) -> Option<(u32, Duration)> {
        self.replica_ack
    }

    /// Takes the lock in arrival order, with direct handoff (see `src/redis/fair`): a waiting
    /// acquisition joins a queue on the server, and a release hands the lock to the
    /// longest-waiting live waiter in the same atomic step and wakes only that waiter. No
    /// barging (a newcomer never overtakes a queue), no herd.
    ///
    /// On Redis every holder and waiter of a key must use the same mode: a plain acquisition
    /// ignores the queue. etcd and PostgreSQL session locks already queue in arrival order, so
    /// the flag changes nothing there; Redlock and PostgreSQL lease rows refuse it
    /// ([`Error::Unsupported`](crate::Error::Unsupported)), and so does its combination with
    /// [`replica_ack`](LockOptions::replica_ack).
    pub fn fair(mut self, on: bool) -> Self {
        self.fair = on;
        self
    }

    /// Whether the lock is taken in arrival order.
    pub fn fair_enabled(&self) -> bool {
        self.fair
    }

    /// Records `owner` with the lock (default: none): it is stored in the lock's value, so
    /// `inspect` and `leasehold ls` show it, on every backend, at no extra round trip (see
    /// [`Owner`](crate::Owner)). An [`Owner`](crate::Owner) is checked when it is built, so a
    /// bad one never reaches a server.
    pub fn owner(mut self, owner: crate::core::owner::Owner) -> Self {
        self.owner = Some(owner);
        self
    }

    /// The owner recorded with the lock, if any.
    pub fn owner_record(&self) -> Option<&crate::core::owner::Owner> {
        self.owner.as_ref()
    }

    /// A fresh token for one acquisition with these options (with the owner record, if any).
    pub(crate) fn new_token(&self) -> crate::core::token::LockToken {
        crate::core::token::LockToken::for_owner(self.owner.as_ref())
    }

    /// Keeps the lock, once released, until `min_hold` after its acquisition, **measured by the
    /// server's clock** (ShedLock's `lockAtLeastFor`); zero turns it off (the default).
    ///
    /// The release still returns at once: the holder is done, the key just stays busy and then
    /// expires by itself. The point is a job run by cron on many machines whose clocks disagree
    /// by seconds: each machine's run takes the same key, and the first one's lock, kept for
    /// `min_hold` from when the server granted it, turns away the runs that fire up to
    /// `min_hold` later, however short the job (see docs/cron.md for a recipe).
    ///
    /// **Guarantee.** After a successful acquisition at server time `t` (when the server
    /// granted it), no other acquisition of the key succeeds before `t + min_hold` by the
    /// server's clock, if the holder's lock was still valid when it was released (a lock lost
    /// before its release is not kept: its TTL already ended). Assumptions: those of mutual
    /// exclusion (docs/guarantees.md), and a server clock that does not jump. How each backend
    /// measures it (a companion key's `PX` on Redis, an etcd lease, `clock_timestamp()` on
    /// PostgreSQL lease rows, the kernel's file times for `file://`, the monotonic clock for
    /// `memory://`) is in docs/guarantees.md §18. PostgreSQL session locks, and on Redis the
    /// fair locks, semaphores, read-write and multi-key locks and elections, refuse it
    /// ([`Error::Unsupported`], before any round trip).
    ///
    /// The hold is kept by the guard's release ([`LockGuard::release`](crate::LockGuard::release),
    /// a dropped guard, `with_lock`). A release by token ([`Locker::release`](crate::Locker::release))
    /// frees at once on Redis, Redlock and etcd, and keeps the hold on PostgreSQL lease rows,
    /// `memory://` and `file://`.
    ///
    /// [`validate`](LockOptions::validate) refuses a `min_hold` longer than the TTL: the lock
    /// could expire before it (a crashed holder's lock would be free sooner than a released one's).
    pub fn min_hold(mut self, min_hold: Duration) -> Self {
        self.min_hold = (!min_hold.is_zero()).then_some(min_hold);
        self
    }

    /// The minimum hold time, if any (see [`LockOptions::min_hold`]).
    pub fn min_hold_bound(&self) -> Option<Duration> {
        self.min_hold
    }

    /// These options, checked for `taking` on `backend` before any round trip: the input
    /// limits ([`LockOptions::validate`]), then every option set here that `taking` does not
    /// take on `backend` ([`Error::Unsupported`] naming it and why; the table is
    /// `Backend::refuses`). Returns the TTL in milliseconds.
    pub(crate) fn check_for(&self, backend: Backend, taking: Taking) -> Result<u64> {
        let ttl_ms = self.ttl_millis()?;
        let taking = match (taking, self.fair, backend.fairness()) {
            (Taking::Lock, true, Fairness::Queue) => Taking::FairLock,
            _ => taking,
        };
        for option in Opt::ALL {
            let set = match option {
                Opt::Fair => self.fair,
                Opt::Fencing => self.fencing,
                Opt::ReplicaAck => self.replica_ack.is_some(),
                Opt::MinHold => self.min_hold.is_some(),
            };
            if let Some(refused) = set.then(|| refusal(backend, taking, option)).flatten() {
                return Err(refused);
            }
        }
        Ok(ttl_ms)
    }

    /// Checks the options against the input limits (`docs/guarantees.md`, "Input limits"):
    /// the TTL within [`MIN_TTL`] ..= [`MAX_TTL`], at least [`MIN_RENEWED_TTL`] when the lease is
    /// renewed, a backoff whose first delay is at least [`MIN_BACKOFF`], and a
    /// [`min_hold`](LockOptions::min_hold) no longer than the TTL.
    ///
    /// Every acquisition runs this before it sends anything; call it yourself to refuse bad
    /// options where they are built (the CLI does, and exits 64).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the option and the limit.
    pub fn validate(&self) -> Result<()> {
        self.ttl_millis().map(drop)
    }

    /// [`LockOptions::validate`], then the TTL in milliseconds: what each acquisition sends.
    pub(crate) fn ttl_millis(&self) -> Result<u64> {
        let ms = ttl_millis(self.ttl)?;
        if self.auto_extend && self.ttl < MIN_RENEWED_TTL {
            return Err(Error::invalid(
                "ttl",
                format!(
                    "{:?} is below the minimum of {MIN_RENEWED_TTL:?} for a lease that is \
                     renewed: a renewal needs time to reach the server before the lease ends",
                    self.ttl
                ),
            ));
        }
        if self.backoff.initial < MIN_BACKOFF {
            return Err(Error::invalid(
                "backoff",
                format!(
                    "a first delay of {:?} is below the minimum of {MIN_BACKOFF:?}: a waiter \
                     would retry without pause",
                    self.backoff.initial
                ),
            ));
        }
        if let Some(min_hold) = self.min_hold.filter(|m| *m > self.ttl) {
            return Err(Error::invalid(
                "min_hold",
                format!(
                    "{min_hold:?} is longer than the TTL of {:?}: the lock would expire before \
                     it",
                    self.ttl
                ),
            ));
        }
        Ok(ms)
    }
}

/// Connection options every backend takes: how long to wait for a connection and for a
/// reply, which certificate authority to trust, and the client certificate to show (mutual
/// TLS). What only Redis has (strategies, release
/// notifications) is in [`RedisOptions`](crate::redis::RedisOptions), which a
/// [`RedisClient`](crate::redis::RedisClient) takes (a `ClientOptions` converts into it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientOptions {
    pub(crate) connect_timeout: Duration,
    pub(crate) response_timeout: Duration,
    pub(crate) tls_ca_file: Option<std::path::PathBuf>,
    pub(crate) tls_cert_file: Option<std::path::PathBuf>,
    pub(crate) tls_key_file: Option<std::path::PathBuf>,
    pub(crate) history: Option<crate::core::history::HistoryOptions>,
}

impl Default for ClientOptions {
    /// Connect within 5 s, replies within 5 s, the system's roots for TLS.
    fn default() -> Self {
        ClientOptions {
            connect_timeout: Duration::from_secs(5),
            response_timeout: Duration::from_secs(5),
            tls_ca_file: None,
            tls_cert_file: None,
            tls_key_file: None,
            history: None,
        }
    }
}

impl ClientOptions {
    /// The defaults.
    pub fn new() -> Self {
        Self::default()
    }

    /// Bound on establishing the connection and detecting the server (default 5 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Bound on waiting for any reply (default 5 s). A command that times out reports an
    /// ambiguous [`Error::Connection`].
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// For TLS endpoints (`rediss://`, `etcds://`, `postgres://…?sslmode=…`): trust the
    /// certificate authority in this PEM file (a private CA) instead of the system's roots.
    /// For PostgreSQL it is the `sslrootcert` the URL does not name (the URL's wins).
    /// Connecting fails with [`Error::InvalidArgument`](crate::Error::InvalidArgument) if the
    /// file cannot be read or holds no certificate.
    pub fn tls_ca_file(mut self, path: impl Into<std::path::PathBuf>) -> Self {
        self.tls_ca_file = Some(path.into());
        self
    }

    /// Mutual TLS (`rediss://` and the other TLS forms of Redis, `etcds://`,
    /// `postgres://…?sslmode=…`): show the client certificate in this PEM file (its chain may
    /// follow it), with the key of [`tls_key_file`](ClientOptions::tls_key_file); give both.
    /// For PostgreSQL it is the `sslcert` the URL does not name. Connecting fails with
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) if the file cannot be read,
    /// holds no certificate, or comes without a key.
    pub fn tls_cert_file(mut self, path: impl Into<std::path::PathBuf>) -> Self {
        self.tls_cert_file = Some(path.into());
        self
    }

    /// The private key (PEM, unencrypted) of [`tls_cert_file`](ClientOptions::tls_cert_file).
    pub fn tls_key_file(mut self, path: impl Into<std::path::PathBuf>) -> Self {
        self.tls_key_file = Some(path.into());
        self
    }
}

impl ClientOptions {
    /// Records each lock's history (see [`HistoryOptions`](crate::HistoryOptions)): a
    /// [`Locker`](crate::Locker) connected with it appends an event for each acquisition,
    /// release, loss and handover it sees. Off by default. A backend without a history log
    /// (Redlock, `file://`) is refused when connecting.
    pub fn history(mut self, history: crate::core::history::HistoryOptions) -> Self {
        self.history = Some(history);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttl_bounds() {
        assert!(ttl_millis(Duration::ZERO).is_err());
        assert!(ttl_millis(Duration::from_millis(1)).is_err());
        assert!(ttl_millis(MIN_TTL - Duration::from_micros(1)).is_err());
        assert_eq!(ttl_millis(MIN_TTL).unwrap(), 10);
        assert!(ttl_millis(MAX_TTL + Duration::from_millis(1)).is_err());
        assert!(ttl_millis(Duration::MAX).is_err());
    }

    #[test]
    fn options_are_checked_against_the_input_limits() {
        let invalid = |o: LockOptions, what: &str| match o.validate() {
            Err(Error::InvalidArgument { what: w, .. }) => assert_eq!(w, what, "{o:?}"),
            other => panic!("{o:?}: {other:?}"),
        };
        invalid(LockOptions::new(Duration::from_millis(2)), "ttl");
        invalid(
            LockOptions::new(Duration::from_millis(49)).auto_extend(true),
            "ttl",
        );
        invalid(
            LockOptions::default().backoff(Backoff::constant(Duration::ZERO)),
            "backoff",
        );
        invalid(
            LockOptions::new(Duration::from_secs(1)).min_hold(Duration::from_millis(1001)),
            "min_hold",
        );
        LockOptions::new(Duration::from_secs(1))
            .min_hold(Duration::from_secs(1))
            .validate()
            .unwrap();
        assert_eq!(
            LockOptions::default()
                .min_hold(Duration::ZERO)
                .min_hold_bound(),
            None
        );
        LockOptions::new(MIN_TTL).validate().unwrap();
        LockOptions::new(MIN_RENEWED_TTL)
            .auto_extend(true)
            .validate()
            .unwrap();
        LockOptions::default()
            .backoff(Backoff::constant(MIN_BACKOFF))
            .validate()
            .unwrap();
    }

    #[test]
    fn backoff_stays_in_its_band() {
        let b = Backoff::new(Duration::from_millis(10), Duration::from_millis(80));
        for attempt in 0..40 {
            let d = b.delay(attempt);
            let base = (Duration::from_millis(10) * 2u32.pow(attempt.min(3))).min(b.max());
            assert!(
                d >= base / 2 && d <= base,
                "attempt {attempt}: {d:?} vs {base:?}"
            );
        }
        assert_eq!(Backoff::constant(Duration::ZERO).delay(3), Duration::ZERO);
    }
}
