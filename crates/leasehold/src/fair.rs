//! Fair locks: arrival order with direct handoff ([`LockOptions::fair`]).
//!
//! A plain lock is taken by whoever's `SET NX` reaches the server first after a release, which
//! is often the releaser itself (it is already running); a release wakes one waiter in every
//! client that waits for the key, and they race for it.
//! A fair lock keeps its waiters in a queue on the server, and the release hands the lock over:
//!
//! - **Queue.** A waiting acquisition picks a random *ticket* and a token for its whole wait.
//!   Its attempt (one script) takes the lock only if the lock is free *and* no live waiter is
//!   ahead of it; otherwise it queues the ticket ([`fair_queue_key`]: a sorted set in arrival
//!   order, without an expiry: dead members are dropped by the scripts; a queue whose waiters
//!   all crashed on a key nobody uses again stays until its next acquisition) with an entry ([`fair_entry_key`]: token, handoff window, fencing flag, owner
//!   (its client, when that client can hand it the lock by a reply), attempt number; a key
//!   that expires after [`queue_entry_ttl`]) and returns the holder's PTTL. Each
//!   later attempt refreshes the entry.
//! - **Handoff.** The release script, if the lock still holds the releaser's token, pops the
//!   queue's head until it finds a waiter whose entry is alive, sets the lock key to that
//!   waiter's token (`SET key token PX window`), issues its fencing number if it asked for one,
//!   and publishes `handoff:<ticket>:<attempt>:<fencing>` on the key's release channel: the
//!   subscriber wakes that waiter alone ([`crate::waiting`]). With no live waiter it deletes
//!   the key. A waiter of the releasing client gets no message: the reply carries the same
//!   three fields, and the client hands it to the waiter, then yields once so that the new
//!   holder runs first.
//! - **Claim.** The woken waiter holds the lock from the message on (below); a waiter whose
//!   message was lost finds the key holding its token at its next attempt, which resets the
//!   TTL and returns its fencing number.
//! - **Vanished waiters.** A waiter that gives up (deadline, dropped future) removes its entry,
//!   and passes the lock on if it had just been handed it. A waiter that leaves and queues
//!   again (its claim came back too late to be a lease) ignores any handoff made to its
//!   earlier attempts: the leave gave it back. A waiter that crashed stops
//!   refreshing its entry, which expires after [`queue_entry_ttl`] and is then skipped. The
//!   handoff window is at most that long too, so a lock handed to a waiter that crashed
//!   between its last refresh and the handoff comes back after one window at most.
//!
//! **Safety claim.** (1) Mutual exclusion and token-checked release/extend are those of a
//! plain lock: the lock key holds one token, the release script acts only while it holds the
//! releaser's token, and extend is the plain token-checked extend. (2) A waiter's local
//! validity never outlasts the key: the handoff message (or the release's reply) names the
//! attempt whose entry the release read, so the release ran after that attempt was *sent*; the
//! key expires `window`
//! after the release, so `sent + window - drift` (the lease's validity) is before the expiry.
//! A claim by a later attempt resets the TTL from when it was sent, like any extend. (3)
//! Fencing numbers are drawn from the lock's ordinary counter by the script that hands over
//! (or takes) the lock, so they increase with every holder, fair or not.
//!
//! **Fairness claim.** While waiters keep their entries alive, the lock goes to them in the
//! order their first attempts reached the server: a free lock is only taken by the head of the
//! queue (or anyone when it is empty), and a release passes it to the head. Assumption: every
//! client of the key uses fair mode (a plain `SET NX` does not look at the queue).
//!
//! **Early handoff (within one client).** The release's reply also names the ticket that is
//! first in the queue once the new holder is popped: the *next* in line. When that holder
//! releases, and its next in line is a waiter of the same client (without fencing) that is
//! still waiting, the client hands it the lock *before the release script runs*: it queues the
//! script on the connection, hands the waiter a lease, and only then awaits the reply. No round
//! trip is on the handoff's path.
//!
//! - **Why the script's outcome is known.** The queue only grows at its tail (a waiter joins
//!   behind the last one, or keeps its place), and a member is only removed by a release of the
//!   lock (which pops the head), by its own claim or leave, or, while the lock is *free*, as a
//!   dead head by an acquisition attempt. The queue key itself never expires (no script gives
//!   it a TTL, and a waiter's attempt removes one an older version set): when it had a lifetime
//!   of its own, refreshed only by waiters' attempts, a slot migration held open (every fair
//!   script refused with `TRYAGAIN` while the holder's single-key renewals went on) let it
//!   expire, arrival order restarted, and the next in line was no longer the head. Assumption:
//!   the server does not evict keys (`maxmemory-policy noeviction`, which a lock needs anyway:
//!   an evicted lock key is a lock given away). The holder's tenure began with the run of the script
//!   that named the next in line as the head; the lock has been held by it ever since (its
//!   lease is still valid), so no release, claim of another, or attempt on a free lock ran in
//!   between, and the next in line, which has not left, is still the head. Its entry key is
//!   alive on the server until at least its last refresh's send instant plus the entry's
//!   lifetime (minus the drift allowance); the release script hands the lock to the head if
//!   its entry is alive, so, if it runs before then, it hands it to that waiter.
//! - **The early lease** is valid until the sooner of the releaser's validity and that entry
//!   bound, and is only given if that leaves at least half the TTL. Until then nobody else can
//!   take the lock: the key holds the releaser's token until the script runs or it expires
//!   (not before the releaser's validity); the script, if it runs before the entry bound, hands
//!   it to this waiter, and otherwise only after the early lease is over; after an expiry only
//!   the queue's first live waiter can take the lock, this one until its entry expires (and a
//!   plain `SET NX`, which the fairness assumption excludes anyway, only after the releaser's
//!   validity).
//! - **The reply settles it.** If it confirms the handoff to this waiter, the lease moves to
//!   the handoff window from the instant before the script was sent (the script set the key's
//!   TTL after that), like a handoff by message. If it says anything else (an assumption above
//!   broken, say an outsider edited the queue), the lease is reported lost at once. If no reply
//!   comes (connection lost), the lease keeps its early bound; a renewal then finds out which.
//! - **Order.** The script is queued on the connection before the new holder can send anything,
//!   so its extends and release follow the script on the server. Safety does not depend on
//!   it: an extend that overtook the script (after a reconnect) would find the releaser's
//!   token and report the lease lost.
//!
//! The test `the_next_waiter_of_the_same_client_is_handed_the_lock_before_the_release_runs`
//! pauses the server's writes: the waiter holds the lock while the key still holds the
//! releaser's token, its validity is within both server-side bounds (the key's PTTL and its
//! entry's), and the reply then moves it to the window; `an_early_handoff_the_release_contradicts_is_reported_lost`
//! removes the waiter from the queue behind the client's back and sees the lease reported lost.
//!
//! Without a subscriber connection (notifications off, or a client built from a connection) a
//! waiter finds the handoff at its next attempt, every third of the window.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use redis::Script;

use crate::backend::HeldLock;
use crate::client::{LockClient, TryAcquire};
use crate::error::{Error, Operation, Result};
use crate::guard::{Lease, LockGuard, LossReason, clock_drift};
use crate::options::{LockOptions, ttl_millis};
use crate::scripts::{FAIR_ACQUIRE_SCRIPT, FAIR_LEAVE_SCRIPT, FAIR_RELEASE_SCRIPT};
use crate::slot::{fair_entry_key, fair_queue_key, fence_key, release_channel};
use crate::token::{LockToken, validate_key};
use crate::waiting::{Delivery, Handoff, Wake};

pub use crate::scripts::fair_scripts;

/// How long a waiter's queue entry lives without a refresh: the TTL, within 1 s ..= 10 s. A
/// waiter refreshes it every third of the [handoff window](handoff_window), so only a waiter
/// that stopped (crashed, or paused that long) loses its place.
pub fn queue_entry_ttl(ttl: Duration) -> Duration {
    ttl.clamp(Duration::from_secs(1), Duration::from_secs(10))
}

/// How long a handed-off lock waits for its new holder before it expires: the TTL, at most
/// the [entry lifetime](queue_entry_ttl). A live waiter takes it within milliseconds (from the
/// message, or at its next attempt); a crashed one costs at most this.
pub fn handoff_window(ttl: Duration) -> Duration {
    ttl.min(queue_entry_ttl(ttl))
}

/// Attempts whose send instants a waiter remembers (a handoff naming an older one is claimed).
const REMEMBERED_ATTEMPTS: usize = 16;

/// One fair waiter: its token and ticket for the whole wait.
struct Waiter<'a> {
    client: &'a LockClient,
    key: &'a str,
    token: LockToken,
    ticket: String,
    /// Its client's owner name if a release by that client can deliver it a handoff (it is
    /// subscribed through the client), else [`NO_OWNER`].
    owner: &'a str,
}

/// The owner of a waiter no client delivers handoffs to by a reply: it gets the message.
const NO_OWNER: &str = "-";

enum FairAttempt {
    Acquired { fencing: u64 },
    Busy { remaining: Option<Duration> },
}

impl<'a> Waiter<'a> {
    fn new(client: &'a LockClient, key: &'a str) -> Self {
        let token = LockToken::random();
        // A ticket is public (it is published): its own random bits, not the token's.
        let ticket = LockToken::random().expose()[..16].to_string();
        Waiter {
            client,
            key,
            token,
            ticket,
            owner: NO_OWNER,
        }
    }

    fn keys(&self) -> [String; 4] {
        [
            self.key.to_string(),
            fair_queue_key(self.key),
            fair_entry_key(self.key, ""),
            fence_key(self.key),
        ]
    }

    async fn attempt(
        &self,
        ttl: Duration,
        queue: bool,
        fencing: bool,
        attempt: u64,
    ) -> Result<FairAttempt> {
        let ttl_ms = ttl_millis(ttl)?;
        let mut inv = FAIR_ACQUIRE_SCRIPT.prepare_invoke();
        for k in self.keys() {
            inv.key(k);
        }
        inv.arg(self.token.expose())
            .arg(ttl_ms)
            .arg(&self.ticket)
            .arg(handoff_window(ttl).as_millis() as u64)
            .arg(queue_entry_ttl(ttl).as_millis() as u64)
            .arg(if queue { 1 } else { 0 })
            .arg(if fencing { 1 } else { 0 })
            .arg(attempt)
            .arg(self.owner);
        let mut conn = self.client.connection();
        let (ok, n): (i64, i64) = inv
            .invoke_async(&mut conn)
            .await
            .map_err(|e| Error::from_redis(Operation::Acquire, e))?;
        Ok(if ok == 1 {
            FairAttempt::Acquired { fencing: n as u64 }
        } else {
            FairAttempt::Busy {
                remaining: (n >= 0).then(|| Duration::from_millis(n as u64)),
            }
        })
    }

    /// Leaves the queue, passing the lock on if it had been handed to us.
    async fn leave(&self) -> Result<PassOn> {
        leave(self.client, self.key, &self.token, &self.ticket).await
    }

    fn guard(
        &self,
        fencing: Option<u64>,
        started: Instant,
        ttl: Duration,
        options: &LockOptions,
    ) -> LockGuard {
        let lease = Lease::new(self.key, self.token.clone(), fencing, started, ttl);
        self.client.guard_for(
            lease,
            started,
            options,
            FairHeld::new(self.client, Tenure::after(None)),
        )
    }
}

/// What a release or leave script did.
#[derive(Debug, PartialEq, Eq)]
enum PassOn {
    /// The lock did not hold the token: nothing changed (a leave still left the queue).
    NotHeld,
    /// Nobody live was waiting: the lock is deleted.
    Deleted,
    /// Handed to the waiter `ticket`, with what its handoff message says.
    HandedOff { ticket: String, handoff: Handoff },
}

impl PassOn {
    fn parse(reply: redis::Value, op: Operation) -> Result<PassOn> {
        use redis::Value::{Array, BulkString, Int};
        match reply {
            Int(0) => Ok(PassOn::NotHeld),
            Int(1) => Ok(PassOn::Deleted),
            Array(items) => match items.as_slice() {
                [
                    Int(2),
                    BulkString(ticket),
                    Int(attempt),
                    Int(fencing),
                    next @ ..,
                ] if next.len() <= 1 => {
                    let next = match next {
                        [BulkString(n)] => Some(String::from_utf8_lossy(n).into_owned()),
                        [] => None,
                        other => return Err(unexpected(op, &other)),
                    };
                    Ok(PassOn::HandedOff {
                        ticket: String::from_utf8_lossy(ticket).into_owned(),
                        handoff: Handoff {
                            attempt: *attempt as u64,
                            fencing: *fencing as u64,
                            next,
                        },
                    })
                }
                other => Err(unexpected(op, &other)),
            },
            other => Err(unexpected(op, &other)),
        }
    }
}

fn unexpected(op: Operation, reply: &dyn std::fmt::Debug) -> Error {
    Error::UnexpectedReply {
        op,
        detail: format!("{reply:?}"),
    }
}

/// The fair script's release or leave, with the client's notification settings.
///
/// **A waiter of this client is handed the lock by the reply.** Its queue entry names this
/// client (its [owner](NO_OWNER), set when it subscribed through the client), so the script
/// publishes no message for it, and its reply carries what the message would (ticket, attempt,
/// fencing number), which this function delivers to the waiter. That skips the message's trip
/// through the server and the subscriber connection (it reached the client ~15 us after the
/// reply at the median in W3, and was one more write for the server). A waiter of another
/// client, or one that polls, still gets the message. Safe as the message is (see the module
/// docs): both come from the same run of the script. If the reply is lost (the connection
/// drops after the script ran), the waiter finds the lock at its next attempt, a third of
/// the handoff window later at most.
///
/// **Refused while the slot moves.** During a slot migration every fair script gets
/// `TRYAGAIN` (it names keys that may be on either node); such a refusal (like the other
/// [topology errors](Error::is_topology_in_motion)) means the script did not run, so it is
/// sent again, with backoff, for up to [`PASS_ON_RETRY`] (a release retried after the key
/// expired finds it gone, or another holder's, and changes nothing).
async fn run_pass_on(
    client: &LockClient,
    script: &Script,
    key: &str,
    token: &str,
    ticket: Option<&str>,
    op: Operation,
    early: Option<EarlyHandoff>,
) -> Result<PassOn> {
    let channel = if client.notifies_waiters() {
        release_channel(key)
    } else {
        String::new()
    };
    let publish = if client.connection().is_cluster() {
        "spublish"
    } else {
        "publish"
    };
    let keys = [
        key.to_string(),
        fair_queue_key(key),
        fair_entry_key(key, ""),
        fence_key(key),
    ];
    let owner = client.notifier().map_or("", |n| n.id());
    let sent = Instant::now();
    let retry_until = sent + PASS_ON_RETRY;
    let call = async {
        let mut pause = Duration::from_millis(5);
        loop {
            let reply = client
                .idempotent(op, |mut conn| {
                    let mut inv = script.prepare_invoke();
                    for k in &keys {
                        inv.key(k);
                    }
                    inv.arg(token).arg(&channel).arg(publish).arg(owner);
                    if let Some(t) = ticket {
                        inv.arg(t);
                    }
                    async move { inv.invoke_async::<redis::Value>(&mut conn).await }
                })
                .await;
            match reply {
                Err(e) if e.is_topology_in_motion() && Instant::now() + pause < retry_until => {
                    tracing::debug!(key, %op, error = %e, "fair script refused while the topology moves; retrying");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_millis(200));
                }
                other => break other,
            }
        }
    };
    let mut call = std::pin::pin!(call);
    let mut given = None;
    let reply = match early {
        Some(early) => {
            // Queued on the connection first: the new holder's commands then follow it.
            let first = std::future::poll_fn(|cx| Poll::Ready(call.as_mut().poll(cx))).await;
            given = early.give();
            match first {
                Poll::Ready(reply) => reply,
                Poll::Pending => call.await,
            }
        }
        None => call.await,
    }?;
    let outcome = PassOn::parse(reply, op)?;
    if let Some(given) = given {
        match &outcome {
            PassOn::HandedOff { ticket, handoff } if *ticket == given.ticket => {
                given.confirm(sent, handoff.next.clone());
                return Ok(outcome);
            }
            _ => given.contradicted(&outcome),
        }
    }
    if let (PassOn::HandedOff { ticket, handoff }, Some(notifier)) = (&outcome, client.notifier())
        && notifier.hand_off_locally(ticket, handoff.clone())
    {
        // Let the new holder, just woken on this thread, run before the releaser goes on
        // (Go's sync.Mutex does the same in its starvation mode): otherwise it waits for
        // whatever the releaser does next, often its own next acquisition's round trip.
        tokio::task::yield_now().await;
    }
    Ok(outcome)
}

/// What a holding of a fair lock knows about the queue behind it.
#[derive(Debug, Default)]
struct Tenure {
    /// The ticket that was first in the queue when this holder was handed the lock, if the
    /// release that did it was this client's (its reply names it): see the module docs, early
    /// handoff.
    next: Mutex<Option<String>>,
}

impl Tenure {
    fn after(next: Option<String>) -> Arc<Tenure> {
        Arc::new(Tenure {
            next: Mutex::new(next),
        })
    }

    fn take_next(&self) -> Option<String> {
        self.next.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}

/// A waiter's terms for an early handoff (see the module docs), offered to its client after
/// each attempt that found the lock busy.
#[derive(Debug)]
pub(crate) struct EarlyTerms {
    key: String,
    token: LockToken,
    ttl: Duration,
    /// Its queue entry is alive on the server at least until then.
    entry_alive_until: Instant,
    /// The attempt whose reply offered these terms.
    attempt: u64,
}

/// An early handoff as its waiter receives it: its lease, and its tenure (which the release's
/// reply fills in).
#[derive(Debug)]
pub(crate) struct EarlyGrant {
    lease: Lease,
    tenure: Arc<Tenure>,
    /// The attempt of the terms it was given on.
    attempt: u64,
}

/// An early handoff about to be made by a release.
struct EarlyHandoff {
    ticket: String,
    terms: EarlyTerms,
    valid_until: Instant,
    to: tokio::sync::mpsc::UnboundedSender<Delivery>,
}

/// An early handoff made: what the release's reply settles.
struct GivenEarly {
    ticket: String,
    ttl: Duration,
    lease: Lease,
    tenure: Arc<Tenure>,
}

impl EarlyHandoff {
    /// The early handoff for a release of `lease`, if its tenure's next in line waits in this
    /// client on the same key, offers terms, and would get at least half its TTL.
    fn for_release(client: &LockClient, lease: &Lease, tenure: &Tenure) -> Option<EarlyHandoff> {
        let ticket = tenure.take_next()?;
        if lease.loss_reason().is_some() {
            return None;
        }
        let (terms, to) = client.notifier()?.take_early(&ticket)?;
        let valid_until = lease.valid_until().min(terms.entry_alive_until);
        if terms.key != lease.key() || valid_until < Instant::now() + terms.ttl / 2 {
            return None;
        }
        Some(EarlyHandoff {
            ticket,
            terms,
            valid_until,
            to,
        })
    }

    /// Hands the waiter its lease; `None` if it stopped waiting meanwhile.
    fn give(self) -> Option<GivenEarly> {
        let lease = Lease::until(&self.terms.key, self.terms.token, None, self.valid_until);
        let tenure = Arc::new(Tenure::default());
        let grant = EarlyGrant {
            lease: lease.clone(),
            tenure: tenure.clone(),
            attempt: self.terms.attempt,
        };
        self.to.send(Delivery::Early(grant)).ok()?;
        Some(GivenEarly {
            ticket: self.ticket,
            ttl: self.terms.ttl,
            lease,
            tenure,
        })
    }
}

impl GivenEarly {
    /// The release handed the lock to this waiter: the key holds its token for the handoff
    /// window from the script's run, which came after `sent`.
    fn confirm(self, sent: Instant, next: Option<String>) {
        let window = handoff_window(self.ttl);
        self.lease
            .raise_valid_until(sent + window.saturating_sub(clock_drift(window)));
        *self.tenure.next.lock().unwrap_or_else(|p| p.into_inner()) = next;
    }

    fn contradicted(self, outcome: &PassOn) {
        tracing::warn!(
            key = self.lease.key(),
            ?outcome,
            "the release did not hand the lock to the waiter it was handed to early"
        );
        self.lease.mark_lost(LossReason::NotHeld);
    }
}

/// How long a release or leave of a fair lock keeps retrying a script refused while its slot
/// moves: the longest [entry lifetime](queue_entry_ttl).
const PASS_ON_RETRY: Duration = Duration::from_secs(10);

async fn leave(client: &LockClient, key: &str, token: &LockToken, ticket: &str) -> Result<PassOn> {
    run_pass_on(
        client,
        &FAIR_LEAVE_SCRIPT,
        key,
        token.expose(),
        Some(ticket),
        Operation::Release,
        None,
    )
    .await
}

/// Leaves the queue when a wait is abandoned (its future dropped, or an error returned), so the
/// queue does not wait for the entry to expire, and a lock handed to us meanwhile moves on.
struct LeaveOnDrop<'a> {
    waiter: &'a Waiter<'a>,
    armed: bool,
}

impl Drop for LeaveOnDrop<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(
                key = self.waiter.key,
                "fair wait abandoned outside a runtime; its queue entry expires on its own"
            );
            return;
        };
        let client = self.waiter.client.clone();
        let key = self.waiter.key.to_string();
        let token = self.waiter.token.clone();
        let ticket = self.waiter.ticket.clone();
        handle.spawn(async move {
            if let Err(e) = leave(&client, &key, &token, &ticket).await {
                tracing::debug!(key, error = %e, "leaving the fair queue failed; the entry expires on its own");
            }
        });
    }
}

impl LockClient {
    /// [`LockClient::try_acquire`] with [`LockOptions::fair`]: takes the lock only if it is
    /// free and nobody is queued for it.
    pub(crate) async fn fair_try_acquire(
        &self,
        key: &str,
        options: &LockOptions,
    ) -> Result<TryAcquire> {
        check_fair(key, options)?;
        let waiter = Waiter::new(self, key);
        let mut cleanup = LeaveOnDrop {
            waiter: &waiter,
            armed: true,
        };
        let started = Instant::now();
        let attempt = waiter
            .attempt(options.ttl(), false, options.fencing_enabled(), 1)
            .await;
        match attempt {
            Ok(FairAttempt::Acquired { fencing }) => {
                cleanup.armed = false;
                if expired(started, options.ttl()) {
                    let _ = waiter.leave().await;
                    return Err(Error::ExpiredOnArrival {
                        key: key.to_string(),
                        elapsed: started.elapsed(),
                        ttl: options.ttl(),
                    });
                }
                let fencing = options.fencing_enabled().then_some(fencing);
                Ok(TryAcquire::Acquired(waiter.guard(
                    fencing,
                    started,
                    options.ttl(),
                    options,
                )))
            }
            Ok(FairAttempt::Busy { remaining }) => {
                cleanup.armed = false;
                Ok(TryAcquire::Busy { remaining })
            }
            Err(e) => {
                // Refused outright: nothing was written. Ambiguous: the cleanup gives it back.
                if !e.is_ambiguous() {
                    cleanup.armed = false;
                }
                Err(e)
            }
        }
    }

    /// [`LockClient::acquire`] with [`LockOptions::fair`]: queues, and waits for the handoff
    /// (see the module docs) until the deadline.
    pub(crate) async fn fair_acquire(&self, key: &str, options: &LockOptions) -> Result<LockGuard> {
        check_fair(key, options)?;
        let Some(wait) = options.wait_bound() else {
            return match self.fair_try_acquire(key, options).await? {
                TryAcquire::Acquired(g) => Ok(g),
                TryAcquire::Busy { .. } => Err(Error::NotAcquired {
                    key: key.to_string(),
                    waited: Duration::ZERO,
                    attempts: 1,
                }),
            };
        };
        let ttl = options.ttl();
        let fencing = options.fencing_enabled();
        let window = handoff_window(ttl);
        let refresh = (window / 3).max(Duration::from_millis(10));
        let begun = Instant::now();
        let deadline = begun + wait;
        let mut waiter = Waiter::new(self, key);
        // Registered before the first attempt: no handoff to our ticket can be missed.
        let mut subscription = match self.notifier() {
            Some(n) => {
                n.subscribe_ticket(release_channel(key), waiter.ticket.clone())
                    .await
            }
            None => None,
        };
        if subscription.is_some() {
            // A release by this client hands the lock to us by its reply, not a message.
            waiter.owner = self.notifier().map_or(NO_OWNER, |n| n.id());
        }
        // Early handoffs (module docs) carry no fencing number, and last the window.
        let early_offers = self
            .notifier()
            .filter(|_| subscription.is_some() && !fencing && window == ttl);
        let entry_ttl = queue_entry_ttl(ttl);
        let mut cleanup = LeaveOnDrop {
            waiter: &waiter,
            armed: true,
        };
        let mut sent: VecDeque<(u64, Instant)> = VecDeque::with_capacity(REMEMBERED_ATTEMPTS);
        let mut attempt: u64 = 0;
        let mut left_at: u64 = 0;
        let mut failure = None;
        loop {
            attempt += 1;
            let started = Instant::now();
            if sent.len() == REMEMBERED_ATTEMPTS {
                sent.pop_front();
            }
            sent.push_back((attempt, started));
            if let Some(s) = subscription.as_mut() {
                s.mark_seen();
            }
            let remaining = match waiter.attempt(ttl, true, fencing, attempt).await {
                Ok(FairAttempt::Acquired { fencing: n }) => {
                    if expired(started, ttl) {
                        // Granted too late to be a lease: pass it on, queue again.
                        if let Some(n) = early_offers {
                            n.withdraw_early(&waiter.ticket);
                        }
                        let _ = waiter.leave().await;
                        // Whatever was handed to an attempt up to this one was given back by
                        // the leave: a delivery of it still on its way is void.
                        left_at = attempt;
                        Some(Duration::ZERO)
                    } else {
                        cleanup.armed = false;
                        return Ok(waiter.guard(fencing.then_some(n), started, ttl, options));
                    }
                }
                Ok(FairAttempt::Busy { remaining }) => {
                    failure = None;
                    if let Some(n) = early_offers {
                        // The entry this attempt wrote lives at least this long.
                        n.offer_early(
                            &waiter.ticket,
                            EarlyTerms {
                                key: key.to_string(),
                                token: waiter.token.clone(),
                                ttl,
                                entry_alive_until: started + entry_ttl - clock_drift(entry_ttl),
                                attempt,
                            },
                        );
                    }
                    remaining
                }
                Err(e) if self.retries_while_waiting(&e) => {
                    tracing::debug!(key, error = %e, "topology in motion; retrying");
                    failure = Some(e);
                    None
                }
                Err(e) => return Err(e),
            };
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            // No backoff: only this waiter is woken by its handoff, so retries cannot herd.
            // Refresh the entry in time; retry when a crashed holder's lease runs out.
            let mut delay = refresh.min(deadline - now);
            if let Some(r) = remaining {
                delay = delay.min(r + Duration::from_millis(1));
            }
            let sleep = tokio::time::sleep(delay);
            let woke = match subscription.as_mut() {
                Some(s) => tokio::select! {
                    w = s.next() => Some(w),
                    _ = sleep => None,
                },
                None => {
                    sleep.await;
                    None
                }
            };
            if let Some(Wake::HandedOffEarly(grant)) = woke {
                // Taken only if given on terms of the current queueing (not before a leave)
                // and with half the TTL left, like a handoff by message; otherwise the next
                // attempt claims the lock if the release did hand it to us.
                if grant.attempt > left_at && grant.lease.remaining() >= ttl / 2 {
                    cleanup.armed = false;
                    return Ok(self.guard_for(
                        grant.lease,
                        Instant::now(),
                        options,
                        FairHeld::new(self, grant.tenure),
                    ));
                }
                grant.lease.end();
                continue;
            }
            if let Some(Wake::HandedOff(h)) = woke.filter(|w| match w {
                Wake::HandedOff(h) => h.attempt > left_at,
                _ => true,
            }) {
                let sent_at = sent.iter().find(|(a, _)| *a == h.attempt).map(|(_, t)| *t);
                if let Some(sent_at) = sent_at.filter(|_| window == ttl) {
                    // The release read the entry of attempt `h.attempt`, so it ran after
                    // `sent_at`; the key expires `window` after the release.
                    let lease = Lease::new(
                        key,
                        waiter.token.clone(),
                        fencing.then_some(h.fencing),
                        sent_at,
                        window,
                    );
                    if lease.remaining() >= ttl / 2 {
                        cleanup.armed = false;
                        return Ok(self.guard_for(
                            lease,
                            sent_at,
                            options,
                            FairHeld::new(self, Tenure::after(h.next)),
                        ));
                    }
                }
                // Otherwise claim it: the next attempt resets the TTL (right away).
            }
            if Instant::now() >= deadline {
                break;
            }
        }
        cleanup.armed = false;
        if let Some(n) = early_offers {
            n.withdraw_early(&waiter.ticket);
        }
        // Leave now rather than in the background: a lock handed to us meanwhile moves on.
        let _ = waiter.leave().await;
        Err(failure.unwrap_or_else(|| Error::NotAcquired {
            key: key.to_string(),
            waited: begun.elapsed(),
            attempts: attempt.min(u32::MAX as u64) as u32,
        }))
    }

    /// Releases a [fair](LockOptions::fair) lock that holds `token`, handing it to the first
    /// live waiter in the same step (a guard of a fair lock does this by itself; this is for a
    /// token received from elsewhere, like the CLI's `release --fair`). A plain
    /// [`release`](LockClient::release) of a fair lock works too, but leaves the queue to find
    /// out by itself.
    ///
    /// # Errors
    /// As [`LockClient::release`].
    pub async fn release_fair(&self, key: &str, token: &LockToken) -> Result<()> {
        validate_key(key)?;
        self.release_fair_with(key, token, None).await
    }

    /// How many of this client's fair waiters for `key` offer an early handoff now (see the
    /// [`fair`](crate::fair) module docs). For tests, which observe this instead of sleeping.
    #[doc(hidden)]
    pub fn early_handoff_offers(&self, key: &str) -> usize {
        self.notifier()
            .map_or(0, |n| n.count_early(|terms| terms.key == key))
    }

    /// A guard's release of its fair lock: early to its next in line if it can (module docs).
    async fn release_held(&self, lease: &Lease, tenure: &Tenure) -> Result<()> {
        let early = EarlyHandoff::for_release(self, lease, tenure);
        self.release_fair_with(lease.key(), lease.token(), early)
            .await
    }

    async fn release_fair_with(
        &self,
        key: &str,
        token: &LockToken,
        early: Option<EarlyHandoff>,
    ) -> Result<()> {
        match run_pass_on(
            self,
            &FAIR_RELEASE_SCRIPT,
            key,
            token.expose(),
            None,
            Operation::Release,
            early,
        )
        .await?
        {
            PassOn::NotHeld => Err(Error::NotHeld {
                key: key.to_string(),
            }),
            PassOn::Deleted => Ok(()),
            PassOn::HandedOff { .. } => {
                crate::metrics::handoff();
                Ok(())
            }
        }
    }
}

fn expired(started: Instant, ttl: Duration) -> bool {
    started.elapsed() >= ttl.saturating_sub(clock_drift(ttl))
}

fn check_fair(key: &str, options: &LockOptions) -> Result<()> {
    validate_key(key)?;
    ttl_millis(options.ttl())?;
    if options.replica_ack_required().is_some() {
        return Err(Error::Unsupported {
            backend: "redis",
            what: "a fair lock with replica_ack".to_string(),
        });
    }
    Ok(())
}

/// A fair lock held on one Redis server: released by handing it on; extended as a plain lock.
#[derive(Debug)]
struct FairHeld {
    client: LockClient,
    tenure: Arc<Tenure>,
}

impl FairHeld {
    fn new(client: &LockClient, tenure: Arc<Tenure>) -> Arc<FairHeld> {
        Arc::new(FairHeld {
            client: client.clone(),
            tenure,
        })
    }
}

impl HeldLock for FairHeld {
    fn release<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.client.release_held(lease, &self.tenure))
    }

    fn extend<'a>(&'a self, lease: &'a Lease, ttl: Duration) -> BoxFuture<'a, Result<Instant>> {
        Box::pin(async move {
            let started = Instant::now();
            self.client.extend(lease.key(), lease.token(), ttl).await?;
            Ok(started + ttl.saturating_sub(clock_drift(ttl)))
        })
    }
}
