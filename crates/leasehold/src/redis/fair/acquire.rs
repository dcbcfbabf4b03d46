//! [`Locker::try_acquire`](crate::Locker::try_acquire) and [`Locker::acquire`](crate::Locker::acquire) of a fair lock: queue, and wait
//! for the handoff, as a provider of the acquisition engine (`core::acquire`).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::core::acquire::{Ask, Attempts, late};
use crate::core::error::{Error, Result};
use crate::core::guard::{Lease, LockGuard, valid_until};
use crate::core::kind::{Backend, Taking};
use crate::core::options::LockOptions;
use crate::core::outcome::TryAcquire;
use crate::redis::client::RedisClient;
use crate::redis::handoff::{EarlyTerms, Tenure};
use crate::redis::slot::handoff_channel;
use crate::redis::slot::validate_name;
use crate::redis::waiting::{Notifier, Subscription, Wake};

use super::held::FairHeld;
use super::waiter::{FairAttempt, NO_OWNER, Waiter};
use super::{handoff_window, queue_entry_ttl};

/// Attempts whose send instants a waiter remembers (a handoff naming an older one is claimed).
const REMEMBERED_ATTEMPTS: usize = 16;

impl RedisClient {
    /// [`Locker::try_acquire`](crate::Locker::try_acquire) with [`LockOptions::fair`]: takes the lock only if it is
    /// free and nobody is queued for it.
    pub(crate) async fn fair_try_acquire(
        &self,
        key: &str,
        options: &LockOptions,
    ) -> Result<TryAcquire> {
        check_fair(key, options)?;
        let fair = FairWait::new(Waiter::new(self, key, options), options);
        let mut cleanup = fair.waiter.leave_if_abandoned();
        let result = fair.attempt(options, Ask::ONCE).await;
        // Refused outright: nothing was written. Ambiguous: the cleanup gives it back.
        if !matches!(&result, Err(e) if e.is_ambiguous()) {
            cleanup.disarm();
        }
        result
    }

    /// [`Locker::acquire`](crate::Locker::acquire) with [`LockOptions::fair`]: queues, and waits for the handoff
    /// (see the module docs) until the deadline.
    pub(crate) async fn fair_acquire(&self, key: &str, options: &LockOptions) -> Result<LockGuard> {
        check_fair(key, options)?;
        let wait = options.wait_bound();
        let fair = FairWait::new(Waiter::new(self, key, options), options);
        let mut cleanup = fair.waiter.leave_if_abandoned();
        let result = crate::core::acquire::wait(&fair, options, wait).await;
        match &result {
            Ok(_) => cleanup.disarm(),
            // Still queued at the deadline (busy, or the topology still in motion): leave now
            // rather than in the background, so a lock handed to us meanwhile moves on.
            Err(e)
                if wait.is_some()
                    && (matches!(e, Error::NotAcquired { .. }) || fair.retries(e)) =>
            {
                cleanup.disarm();
                fair.withdraw_early();
                let _ = fair.waiter.leave().await;
            }
            // One try refused outright: nothing was written.
            Err(e) if wait.is_none() && !e.is_ambiguous() => cleanup.disarm(),
            // Anything else: the cleanup leaves in the background.
            Err(_) => {}
        }
        result
    }
}

/// A fair waiter as the acquisition engine drives it. Its ticket and token last the whole
/// wait; an attempt with a wait queues (or refreshes its entry) and waits inside the queue for
/// the handoff, up to [`Ask::wait`]: woken by the handoff to its ticket alone, or by its next
/// refresh (every third of the handoff window), or when the holder's lease runs out; a topology
/// in motion is ridden out at the same pace, so that the entry stays alive. The engine owns
/// the deadline, [`Error::NotAcquired`], and the backoff before queueing again after a grant
/// that came too late (which the attempt gave back by leaving the queue).
///
/// **Subscribed only once queued.** The first attempt goes out at once, so a free lock costs
/// one round trip (issue 32); only when it finds the lock busy does the waiter subscribe to
/// its ticket's handoffs, and then it attempts again at once. A release in between handed the
/// lock to the entry the first attempt queued, and published to nobody: the key then holds our
/// token, and that second attempt claims it (as any attempt claims a handoff whose message was
/// lost). A handoff after the subscription took effect is delivered. The channel is our
/// client's own for the key ([`handoff_channel`]): a handoff reaches the one client whose
/// waiter it names. When it is subscribed already (it lingers a while after its last waiter
/// left), the waiter registers first, at no cost, and needs no second attempt.
struct FairWait<'a> {
    waiter: Waiter<'a>,
    notifier: Option<&'a Notifier>,
    /// Whether early handoffs (module docs) are offered once subscribed: without fencing, and
    /// when the handoff window is the whole TTL (they carry no fencing number, and last the
    /// window).
    early: bool,
    queue: tokio::sync::Mutex<Queued<'a>>,
}

/// What a wait keeps from one attempt to the next.
struct Queued<'a> {
    /// Handoffs to our ticket, once queued (none without notifications: the next attempt
    /// finds them).
    subscription: Option<Subscription>,
    /// Whether to subscribe when an attempt finds the lock busy (once).
    subscribe: bool,
    /// The owner our entries name ([`NO_OWNER`] until subscribed through our client).
    owner: &'a str,
    /// The send instants of the last attempts: a handoff names the attempt whose entry the
    /// release read.
    sent: VecDeque<(u64, Instant)>,
    /// The last attempt's number (the script's `attempt` argument).
    attempt: u64,
    /// The attempt whose late grant we gave back by leaving: a handoff to it, or to an
    /// earlier one, still on its way is void.
    left_at: u64,
}

impl<'a> FairWait<'a> {
    /// `waiter`'s wait.
    fn new(waiter: Waiter<'a>, options: &LockOptions) -> Self {
        let notifier = waiter.client.notifier();
        let ttl = options.ttl();
        FairWait {
            waiter,
            notifier,
            early: !options.fencing_enabled() && handoff_window(ttl) == ttl,
            queue: tokio::sync::Mutex::new(Queued {
                subscription: None,
                subscribe: true,
                owner: NO_OWNER,
                sent: VecDeque::with_capacity(REMEMBERED_ATTEMPTS),
                attempt: 0,
                left_at: 0,
            }),
        }
    }

    fn withdraw_early(&self) {
        if let Some(n) = self.notifier.filter(|_| self.early) {
            n.withdraw_early(&self.waiter.ticket);
        }
    }

    /// One try: the lock if it is free and nobody is queued; nothing is queued.
    async fn once(&self, options: &LockOptions) -> Result<TryAcquire> {
        let (ttl, fencing) = (options.ttl(), options.fencing_enabled());
        let started = Instant::now();
        match self
            .waiter
            .attempt(ttl, false, fencing, 1, NO_OWNER)
            .await?
        {
            FairAttempt::Acquired { fencing: n } => {
                if late(self.waiter.key, started, ttl) {
                    let _ = self.waiter.leave().await;
                    return Err(self.expired_on_arrival(started, ttl));
                }
                let guard = self
                    .waiter
                    .guard(fencing.then_some(n), started, ttl, options);
                Ok(TryAcquire::Acquired(guard))
            }
            FairAttempt::Busy { remaining } => Ok(TryAcquire::Busy { remaining }),
        }
    }

    fn expired_on_arrival(&self, started: Instant, ttl: Duration) -> Error {
        Error::ExpiredOnArrival {
            key: self.waiter.key.to_string(),
            elapsed: started.elapsed(),
            ttl,
        }
    }

    /// Queues (or refreshes the entry) and waits in the queue for the handoff until
    /// `deadline`: the lock, or busy at the deadline (still queued: the caller leaves).
    async fn queued(&self, options: &LockOptions, deadline: Instant) -> Result<TryAcquire> {
        let (key, waiter) = (self.waiter.key, &self.waiter);
        let (ttl, fencing) = (options.ttl(), options.fencing_enabled());
        let window = handoff_window(ttl);
        let refresh = (window / 3).max(Duration::from_millis(10));
        let mut queue = self.queue.lock().await;
        let queue = &mut *queue;
        if queue.subscribe
            && let Some(n) = self
                .notifier
                .filter(|n| n.is_subscribed(&handoff_channel(key, n.id())))
        {
            // Our client's handoff channel for the key is subscribed already (another waiter
            // of this client, or one that just left): registering costs no round trip, so it
            // comes first, and a handoff to our first attempt's entry is delivered.
            queue.subscribe = false;
            self.subscribe(n, queue).await;
        }
        loop {
            // The last attempt's failure, while the topology is in motion.
            let failure;
            queue.attempt += 1;
            let attempt = queue.attempt;
            let started = Instant::now();
            if queue.sent.len() == REMEMBERED_ATTEMPTS {
                queue.sent.pop_front();
            }
            queue.sent.push_back((attempt, started));
            if let Some(s) = queue.subscription.as_mut() {
                s.mark_seen();
            }
            let remaining = match waiter
                .attempt(ttl, true, fencing, attempt, queue.owner)
                .await
            {
                Ok(FairAttempt::Acquired { fencing: n }) => {
                    if late(key, started, ttl) {
                        // Granted too late to be a lease: pass it on; the engine queues us
                        // again after its backoff (a TTL that keeps expiring on arrival must
                        // not make the waiter spin on the server).
                        self.withdraw_early();
                        let _ = waiter.leave().await;
                        queue.left_at = attempt;
                        return Err(self.expired_on_arrival(started, ttl));
                    }
                    let guard = waiter.guard(fencing.then_some(n), started, ttl, options);
                    return Ok(TryAcquire::Acquired(guard));
                }
                Ok(FairAttempt::Busy { remaining }) => {
                    failure = None;
                    let offers = self
                        .notifier
                        .filter(|_| self.early && queue.subscription.is_some());
                    if let Some(n) = offers {
                        // The entry this attempt wrote lives at least this long.
                        n.offer_early(
                            &waiter.ticket,
                            EarlyTerms {
                                key: key.to_string(),
                                token: waiter.token.clone(),
                                ttl,
                                entry_alive_until: valid_until(started, queue_entry_ttl(ttl)),
                                attempt,
                            },
                        );
                    }
                    remaining
                }
                // A topology in motion is ridden out here, at the refresh's pace rather than
                // the engine's backoff: a waiter that paused longer would lose its place when
                // its entry expired.
                Err(e) if self.retries(&e) => {
                    tracing::debug!(key, error = %e, "topology in motion; retrying");
                    failure = Some(e);
                    None
                }
                Err(e) => return Err(e),
            };
            let now = Instant::now();
            if now >= deadline {
                return failure.map_or(Ok(TryAcquire::Busy { remaining }), Err);
            }
            if std::mem::take(&mut queue.subscribe)
                && let Some(n) = self.notifier
                && self.subscribe(n, queue).await
            {
                // Again at once, deadline permitting: it claims a handoff made before the
                // subscription took effect (the struct's docs).
                if Instant::now() >= deadline {
                    return failure.map_or(Ok(TryAcquire::Busy { remaining }), Err);
                }
                continue;
            }
            // No backoff: only this waiter is woken by its handoff, so retries cannot herd.
            // Refresh the entry in time; retry when a crashed holder's lease runs out.
            let mut delay = refresh.min(deadline - now);
            if let Some(r) = remaining {
                delay = delay.min(options.backoff_policy().until_lease_ends(r));
            }
            let sleep = tokio::time::sleep(delay);
            let woke = match queue.subscription.as_mut() {
                Some(s) => tokio::select! {
                    w = s.next() => Some(w),
                    _ = sleep => None,
                },
                None => {
                    sleep.await;
                    None
                }
            };
            let written = match &woke {
                Some(Wake::HandedOffEarly(grant)) => Some(grant.tenure.clone()),
                _ => None,
            };
            if let Some(guard) = self.handed_over(woke, queue, options) {
                if let Some(tenure) = written {
                    tenure.written().await;
                }
                return Ok(TryAcquire::Acquired(guard));
            }
            if Instant::now() >= deadline {
                return failure.map_or(Ok(TryAcquire::Busy { remaining }), Err);
            }
        }
    }

    /// Subscribes to our ticket's handoffs through `n`; once subscribed, a release by this
    /// client hands the lock to us by its reply (our entries name it). False if that failed
    /// (we then find handoffs at our next attempts).
    async fn subscribe(&self, n: &'a Notifier, queue: &mut Queued<'a>) -> bool {
        let channel = handoff_channel(self.waiter.key, n.id());
        queue.subscription = n
            .subscribe_ticket(channel, self.waiter.ticket.clone())
            .await;
        if queue.subscription.is_some() {
            queue.owner = n.id();
        }
        queue.subscription.is_some()
    }

    /// The lease a handoff gives, if it can be taken without a claim: given on terms of the
    /// current queueing (not to an attempt before a leave), naming an attempt we remember, and
    /// leaving at least half the TTL. Otherwise (`None`) the next attempt claims the lock if
    /// the release did hand it to us: it finds the key holding our token and resets the TTL.
    fn handed_over(
        &self,
        woke: Option<Wake>,
        queue: &Queued,
        options: &LockOptions,
    ) -> Option<LockGuard> {
        let ttl = options.ttl();
        match woke? {
            Wake::HandedOffEarly(grant) => {
                if grant.attempt > queue.left_at && grant.lease.remaining() >= ttl / 2 {
                    return Some(self.waiter.client.guard_for(
                        grant.lease,
                        Instant::now(),
                        options,
                        FairHeld::new(self.waiter.client, grant.tenure),
                    ));
                }
                grant.lease.end();
                None
            }
            Wake::HandedOff(h) if h.attempt > queue.left_at && handoff_window(ttl) == ttl => {
                let (_, sent_at) = *queue.sent.iter().find(|(a, _)| *a == h.attempt)?;
                // The release read the entry of attempt `h.attempt`, so it ran after
                // `sent_at`; the key expires `window` after the release.
                let lease = Lease::new(
                    self.waiter.key,
                    self.waiter.token.clone(),
                    options.fencing_enabled().then_some(h.fencing),
                    sent_at,
                    ttl,
                );
                (lease.remaining() >= ttl / 2).then(|| {
                    self.waiter.client.guard_for(
                        lease,
                        sent_at,
                        options,
                        FairHeld::new(self.waiter.client, Tenure::after(h.next)),
                    )
                })
            }
            _ => None,
        }
    }
}

impl Attempts for FairWait<'_> {
    fn name(&self) -> &str {
        self.waiter.key
    }

    /// Without a wait, one try that queues nothing; with one, [`FairWait::queued`]. Each boxed
    /// apart, so that the fair acquisition's own future stays under 1 KiB (see
    /// `redis::client::release`'s `boxed_sizes`).
    async fn attempt(&self, options: &LockOptions, ask: Ask) -> Result<TryAcquire> {
        match ask.wait {
            None => Box::pin(self.once(options)).await,
            Some(wait) => Box::pin(self.queued(options, Instant::now() + wait)).await,
        }
    }

    fn retries(&self, e: &Error) -> bool {
        self.waiter.client.retries_while_waiting(e)
    }
}

fn check_fair(key: &str, options: &LockOptions) -> Result<()> {
    validate_name(key)?;
    options.check_for(Backend::Redis, Taking::Lock).map(drop)
}

/// A fair cycle's boxed futures stay within the allocator's per-thread cache, as a plain
/// lock's do (`redis::client::release`'s `boxed_sizes`).
#[cfg(test)]
mod boxed_sizes {
    use std::mem::size_of_val;
    use std::time::{Duration, Instant};

    use leasehold_harness::{Server, ServerOptions};

    use super::{FairWait, Waiter};
    use crate::core::driver::Driver;
    use crate::core::options::LockOptions;
    use crate::redis::client::{BOXED_FUTURE_BOUND as CACHED, RedisClient};

    /// The sizes of a fair attempt's two boxed futures: one try, and a wait.
    fn boxed_attempt_sizes(client: &RedisClient, key: &str, options: &LockOptions) -> [usize; 2] {
        let fair = FairWait::new(Waiter::new(client, key, options), options);
        [
            size_of_val(&fair.once(options)),
            size_of_val(&fair.queued(options, Instant::now())),
        ]
    }

    // A fair cycle's boxes: the driver's acquisition, the fair acquisition it boxes and the
    // attempt that one boxes, and the guard's release. Before they were split (a fair
    // release's script call held twice, an early handoff held in three frames, the attempt
    // inline), a fair cycle boxed 1 080, 1 688 and 1 992 bytes.
    leasehold_harness::server_test!(async fn a_fair_cycles_boxed_futures_fit_the_allocators_cache(bin) {
        let server = Server::start(&bin, &ServerOptions::new()).unwrap();
        let client = RedisClient::connect(&server.url()).await.unwrap();
        let fair = LockOptions::new(Duration::from_secs(30)).wait(Duration::from_secs(30)).fair(true);
        let plain = LockOptions::new(Duration::from_secs(30)).wait(Duration::from_secs(30));
        for (what, options) in [("fair", &fair), ("plain", &plain)] {
            let acquire = Driver::acquire(&client, "sizes:cycle", options);
            assert!(size_of_val(&*acquire) <= CACHED, "{what} acquisition's box: {} bytes", size_of_val(&*acquire));
        }
        let acquire = client.fair_acquire("sizes:cycle", &fair);
        assert!(size_of_val(&acquire) <= CACHED, "fair acquisition: {} bytes", size_of_val(&acquire));
        for (size, what) in boxed_attempt_sizes(&client, "sizes:cycle", &fair).into_iter().zip(["one try", "a wait"]) {
            assert!(size <= CACHED, "fair attempt, {what}: {size} bytes");
        }
        let guard = acquire.await.unwrap();
        assert!(guard.boxed_release_size() <= CACHED, "fair release: {} bytes", guard.boxed_release_size());
        guard.release().await.unwrap();
    });
}
