//! Waiters woken on release instead of polling alone.
//!
//! A release publishes the lock key on [`release_channel`](crate::redis::release_channel) in the same
//! round trip (inside the release script, or pipelined with `DELEX`/`DELIFEQ`), except a plain
//! lock's release where waiters track the key (below). A waiting
//! acquirer makes its first attempt at once (a free lock costs one `SET NX PX`, as with
//! `try_acquire`); only when that finds the lock busy does it subscribe to the channel, through
//! one subscriber connection shared by every waiter of the client, and then attempt again at
//! once. After each later busy attempt it sleeps until a notification arrives **or** a timeout
//! (the holder's remaining TTL, capped by the backoff and the deadline) passes, then retries.
//! A release wakes *one* of the client's waiters for a plain lock (the longest asleep), since
//! only one can take it; see `Notifier::subscribe_one` for why none is lost. Waiters of the
//! other primitives (read-write locks, semaphores, elections, multi-locks) see every release.
//! A channel stays subscribed for `LINGER` (2 s) after its last waiter left: a waiter of the
//! same key soon after registers without a round trip, and the server is spared an
//! `UNSUBSCRIBE` and a `SUBSCRIBE` per contended acquisition.
//!
//! **No missed release.** A release the server runs after the subscription took effect (the
//! waiter awaits the server's confirmation) is delivered to it; one that ran before is seen by
//! the attempt that follows the confirmation, which finds the key free. The test
//! `a_busy_waiter_attempts_again_once_subscribed` fails if that attempt is left out.
//!
//! **Tracking: no message for a plain release.** On one server (standalone, Sentinel) the
//! subscriber connection also turns on `CLIENT TRACKING` (RESP3, default mode: it reads
//! nothing but the keys its waiters wait for). A waiter registering on a key's release channel
//! has the key read once on that connection (`PTTL`, sent beside the `SUBSCRIBE`), and the
//! server then reports any change of the key (deletion, expiry, overwrite, new TTL) with an
//! `invalidate` push. A client whose waiters track (`RedisClient::plain_release_notice`)
//! releases a plain lock with its token-checked delete alone, no `PUBLISH`: an uncontended
//! cycle costs the server one command less. Tracking is one-shot, and an invalidation does not
//! say why the key changed (an acquisition or an extension changes it too), so on each one,
//! while the key has waiters, [`Router`] has the key read again at once: the read arms the
//! tracking again, and only a key found gone wakes the waiters (one plain-lock waiter, every
//! broadcast waiter), as a release message would. An extension wakes nobody (the test
//! `an_extend_of_the_held_lock_wakes_no_waiter`).
//!
//! **No missed release, with tracking.** Say the key is read at `t` (a waiter's registration
//! or a read after an invalidation). A change after `t` is reported, and leads to another read.
//! A release before `t` shows as a missing key at `t`: a read after an invalidation then
//! wakes a waiter, and a registration's read is followed by the waiter's own attempt, which
//! sees the key as the read did or later. A key found held at `t` is tracked from `t`, so its
//! release is reported. Between an invalidation and the read after it the key is not tracked,
//! but that read covers the gap the same way. So after every release some waiter attempts,
//! unless the subscriber connection broke (then, as with messages, waiters wake at their next
//! poll). `one_waiter_is_woken_per_release` runs a chain of ten handoffs on invalidations
//! alone and fails if the read after one is left out. Waiters that cannot track (a RESP2
//! subscriber, an ACL without `+hello` or `+client|tracking`, a Cluster) make their clients'
//! releases publish as before; a waiter of an earlier build, or one that cannot track, facing a
//! tracking releaser wakes at its next poll.
//!
//! A release by the waiters' own client does not wait for its invalidation to come back, nor
//! for its own reply: once the delete is on the wire, the client wakes its waiters of that key
//! itself (`Notifier::released_here`), and their attempts follow the delete on the connection
//! (`core::queued::queued_then`): the handoff takes one round trip, not two and a server
//! hop. The invalidation still comes and is handled as above; if its read finds the key still
//! free (the woken waiter's attempt ran before the delete, over another connection), it wakes
//! another waiter (or, while a waiter's attempt is out, leaves the release to that attempt:
//! `core::acquire::NameWakeup`), so an early wake that came to nothing costs time, never a
//! waiter left asleep. A delete that found another holder's token changes nothing: the woken
//! waiter finds the key held, and that holder's release is reported as any other.
//!
//! On a Redis Cluster the release publishes with `SPUBLISH` on the same channel, which hashes to
//! the lock key's slot (see `src/redis/slot`), and waiters `SSUBSCRIBE`: the message travels only
//! within the key's shard instead of being broadcast over the whole cluster bus, and the
//! subscriber follows the slot when it moves (the cluster connection re-subscribes).
//!
//! The subscriber connection speaks RESP3 where the server allows it: messages arrive as pushes
//! that are routed to their waiters inside the connection's own task (one task wake-up less on
//! a handoff's path than reading them from a RESP2 subscriber's stream, which stays the
//! fallback when `HELLO 3` is refused).
//!
//! Pub/sub is at-most-once (a message published while the subscriber reconnects is lost), so
//! a notification is only ever a hint to retry early: correctness never depends on it, and the
//! timeout path always stays. A waiter that cannot subscribe (no URL to open a subscriber
//! connection with, or the subscription failed) simply polls.
//!
//! A fair release hands the lock to one waiter and publishes a *handoff* message
//! (`handoff:<ticket>:<attempt>:<fencing>`) on that waiter's client's own channel for the key
//! ([`handoff_channel`](crate::redis::handoff_channel)): only that client reads it, and its
//! subscriber routes it to the one waiter that registered the ticket. A waiter of the releasing
//! client itself gets no message: the release's reply carries the same fields, and
//! `Notifier::hand_off_locally` delivers them. A waiter that is next in line for a lock its own
//! client holds may even be handed it before the release runs (an *early* handoff: see
//! `src/redis/fair`); it offers its terms for that with `Notifier::offer_early`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio::sync::{mpsc, oneshot, watch};

use crate::core::acquire::{NameWakeup, OneWake, Wakeup};
use crate::redis::handoff::{EarlyGrant, EarlyTerms};
use crate::redis::slot::release_channel;
use crate::redis::topology::SubscriberSource;

mod connection;

use connection::{Router, releasing, run};

/// The shared subscriber connection of one client, opened on first use and reopened after it
/// breaks.
pub(crate) struct Notifier {
    source: SubscriberSource,
    timeout: Duration,
    /// Whether the subscriber connection turns on `CLIENT TRACKING`, so that a change of a
    /// waited-for key wakes its waiters with no message from the releaser (see the module docs).
    track: bool,
    hub: tokio::sync::Mutex<Option<Arc<Hub>>>,
    /// This client's name in its fair waiters' queue entries: a fair release by this client
    /// hands the lock to one of them by its reply instead of a message.
    id: String,
    /// This client's fair waiters by ticket, whichever subscriber connection they came in on.
    local: LocalWaiters,
}

type LocalWaiters = Arc<Mutex<HashMap<String, LocalWaiter>>>;

/// A fair waiter of this client: where its handoffs go, and its terms for an early one.
struct LocalWaiter {
    tx: mpsc::UnboundedSender<Delivery>,
    early: Option<EarlyTerms>,
}

type Channels = Arc<Mutex<HashMap<String, Channel>>>;

struct Channel {
    /// Every broadcast waiter sees each release.
    tx: watch::Sender<u64>,
    /// One plain-lock waiter is woken per release (see [`Notifier::subscribe_one`]).
    one: Arc<NameWakeup>,
    refs: usize,
    /// Fair waiters of this channel by ticket: a handoff message goes to its ticket alone.
    tickets: HashMap<String, mpsc::UnboundedSender<Delivery>>,
    /// Whether the server confirmed the subscription.
    confirmed: bool,
    /// When the channel was last left without waiters: it is unsubscribed once that is
    /// [`LINGER`] ago and nobody came since.
    idle_since: Option<tokio::time::Instant>,
    /// Whether a task waits to unsubscribe the channel once it has been idle for [`LINGER`]
    /// ([`Hub::linger`]): one per channel, not one per waiter leaving.
    lingering: bool,
    /// The key whose changes wake this channel's waiters through tracking (a release channel's
    /// name; `None` for a fair waiter's handoff channel, or when the hub does not track).
    key: Option<String>,
    /// Whether the server tracks `key` for this connection: a read of it came back, and no
    /// invalidation of it arrived since that read was sent.
    armed: bool,
    /// Drawn from [`GENERATIONS`] when the channel is made and at each invalidation of `key`: a
    /// read asked for before the latest one does not arm.
    generation: u64,
}

/// The source of [`Channel::generation`]: unique across channels, so a read answered for a
/// channel that was dropped (lingered out) and made again cannot arm the new one.
static GENERATIONS: AtomicU64 = AtomicU64::new(0);

fn next_generation() -> u64 {
    GENERATIONS.fetch_add(1, Ordering::Relaxed)
}

/// How long a channel stays subscribed after its last waiter left: a waiter of the same key
/// soon after (workers taking a lock in turns) then registers without a round trip, and the
/// server is spared an UNSUBSCRIBE and a SUBSCRIBE per acquisition.
const LINGER: Duration = Duration::from_secs(2);

/// The prefix of a fair release's handoff message (a plain release publishes the key).
pub(crate) const HANDOFF_PREFIX: &str = "handoff:";

/// A fair release's message to the waiter it handed the lock to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Handoff {
    /// The waiter's attempt whose queue entry the release read (so the release came after that
    /// attempt was sent).
    pub(crate) attempt: u64,
    /// The fencing number issued with the handoff (0 without fencing).
    pub(crate) fencing: u64,
    /// The ticket first in the queue behind the new holder, when the release's reply said
    /// (a message does not).
    pub(crate) next: Option<String>,
}

/// What reaches a fair waiter of this client.
#[derive(Debug)]
pub(crate) enum Delivery {
    /// The lock was handed to it (by the message, or by its client's release's reply).
    Handoff(Handoff),
    /// Its client handed it the lock before the release ran (`src/redis/fair`).
    Early(EarlyGrant),
}

/// What woke a waiter.
#[derive(Debug)]
pub(crate) enum Wake {
    /// A release (of any waiter's lock: retry).
    Released,
    /// A fair release handed the lock to this waiter.
    HandedOff(Handoff),
    /// A release by this client handed this waiter the lock before it ran.
    HandedOffEarly(EarlyGrant),
}

/// Parses `ticket:attempt:fencing` (the handoff message after its prefix).
fn parse_handoff(rest: &[u8]) -> Option<(&str, Handoff)> {
    let rest = std::str::from_utf8(rest).ok()?;
    let mut parts = rest.split(':');
    let ticket = parts.next()?;
    let attempt = parts.next()?.parse().ok()?;
    let fencing = parts.next()?.parse().ok()?;
    parts.next().is_none().then_some((
        ticket,
        Handoff {
            attempt,
            fencing,
            next: None,
        },
    ))
}

enum Command {
    Subscribe(String, oneshot::Sender<bool>),
    Unsubscribe(String),
    /// Reads a key so the server tracks it for this connection (see [`Track`]).
    Track(Track),
}

/// A tracking read of `key` for `channel`'s waiters: arms the one-shot tracking, and (after an
/// invalidation) wakes them if the read finds the key gone.
struct Track {
    channel: String,
    key: String,
    /// `Channel::generation` when the read was asked for.
    generation: u64,
    /// After an invalidation: wake the waiters if the key is gone. (A waiter's own first read
    /// needs no wake-up: its next attempt sees the key as the read did, or later.)
    wake_if_gone: bool,
    /// Told when the read was answered (or failed).
    done: Option<oneshot::Sender<()>>,
}

/// One subscriber connection. Commands go through one task in order, so an UNSUBSCRIBE sent when
/// the last waiter of a channel leaves can never overtake a later SUBSCRIBE for it.
struct Hub {
    commands: mpsc::UnboundedSender<Command>,
    channels: Channels,
    alive: Arc<AtomicBool>,
    local: LocalWaiters,
    /// The server accepted `CLIENT TRACKING ON` on this connection.
    tracking: bool,
}

impl Hub {
    /// Unsubscribes `channel` once it has been left without waiters for [`LINGER`], or returns
    /// (clearing [`Channel::lingering`]) as soon as a waiter holds it again: the next one to
    /// leave it idle starts this anew. One such task per idle channel, rather than one per
    /// waiter leaving (a task and a timer per contended acquisition).
    async fn linger(self: Arc<Hub>, channel: String) {
        // Clears the flag however this task ends, dropped with its runtime included: a flag
        // left set would keep every later leaving from starting another.
        let _lingering = Lingering(&self, &channel);
        loop {
            let due = {
                let mut channels = self.channels.lock().unwrap_or_else(|p| p.into_inner());
                let Some(c) = channels.get(&channel) else {
                    return;
                };
                match c.idle_since {
                    Some(since) if c.refs == 0 => {
                        let due = since + LINGER;
                        if tokio::time::Instant::now() >= due {
                            self.unsubscribe(&mut channels, &channel);
                            return;
                        }
                        due
                    }
                    _ => return,
                }
            };
            tokio::time::sleep_until(due).await;
        }
    }

    /// Forgets `channel` and unsubscribes it (its last waiter left it), under the channels'
    /// lock: a later waiter's SUBSCRIBE goes out after this UNSUBSCRIBE.
    fn unsubscribe(&self, channels: &mut HashMap<String, Channel>, channel: &str) {
        channels.remove(channel);
        let _ = self
            .commands
            .send(Command::Unsubscribe(channel.to_string()));
    }
}

/// [`Hub::linger`]'s task for a channel, while it runs.
struct Lingering<'a>(&'a Hub, &'a str);

impl Drop for Lingering<'_> {
    fn drop(&mut self) {
        let mut channels = self.0.channels.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = channels.get_mut(self.1) {
            c.lingering = false;
        }
    }
}

/// A waiter's registration on one key's release channel.
pub(crate) struct Subscription {
    hub: Arc<Hub>,
    channel: String,
    rx: watch::Receiver<u64>,
    /// A fair waiter's ticket and its handoff messages.
    ticket: Option<(String, mpsc::UnboundedReceiver<Delivery>)>,
    /// A plain-lock waiter's share of the channel's one-per-release wake-up.
    one: Option<OneWake>,
}

impl Notifier {
    pub(crate) fn new(source: SubscriberSource, timeout: Duration) -> Self {
        Notifier {
            source,
            timeout,
            track: false,
            hub: tokio::sync::Mutex::new(None),
            id: crate::core::token::LockToken::random().expose()[..16].to_string(),
            local: LocalWaiters::default(),
        }
    }

    /// With `on`, the subscriber connection turns on `CLIENT TRACKING` and waiters of a key are
    /// also woken when the server reports the key changed (the client's plain releases then
    /// publish nothing: see the module docs).
    pub(crate) fn tracking(mut self, on: bool) -> Self {
        self.track = on;
        self
    }

    /// Whether this client's waiters track their keys (see [`Notifier::tracking`]).
    pub(crate) fn tracks(&self) -> bool {
        self.track
    }

    /// Subscribes to the release channel of `name` (and tracks `name` where the hub tracks),
    /// waiting for the server's confirmation. `None` if that fails (the waiter then polls).
    pub(crate) async fn subscribe(&self, name: &str) -> Option<Subscription> {
        self.subscribe_as(release_channel(name), Some(name), None, false)
            .await
    }

    /// Subscribes to the release channel of `name` as one of the waiters for a plain lock: each
    /// release wakes *one* such waiter of this client (the longest waiting), not all of them,
    /// since only one can take the lock ([`NameWakeup`] says why no release is left without an
    /// attempt after it). Waiters of other kinds (read-write locks, elections, semaphores, fair
    /// waiters) still see every release. The test `one_waiter_is_woken_per_release` fails if a
    /// release is lost.
    pub(crate) async fn subscribe_one(&self, name: &str) -> Option<Subscription> {
        self.subscribe_as(release_channel(name), Some(name), None, true)
            .await
    }

    /// Subscribes to `channel` as the fair waiter `ticket`: handoff messages for the ticket go
    /// to this subscription alone (and are registered before this returns, so none published
    /// after it can be missed).
    pub(crate) async fn subscribe_ticket(
        &self,
        channel: String,
        ticket: String,
    ) -> Option<Subscription> {
        self.subscribe_as(channel, None, Some(ticket), false).await
    }

    /// This client's name in its fair waiters' queue entries.
    pub(crate) fn id(&self) -> &str {
        &self.id
    }

    /// Delivers a fair release's handoff to the waiter `ticket` if it waits in this client (the
    /// release's reply carries what the message would). False if it does not wait here.
    pub(crate) fn hand_off_locally(&self, ticket: &str, handoff: Handoff) -> bool {
        let local = self.local.lock().unwrap_or_else(|p| p.into_inner());
        local
            .get(ticket)
            .is_some_and(|w| w.tx.send(Delivery::Handoff(handoff)).is_ok())
    }

    /// The waiter `ticket` (of this client) offers `terms` for an early handoff, replacing
    /// what it offered before. Ignored if it is not registered.
    pub(crate) fn offer_early(&self, ticket: &str, terms: EarlyTerms) {
        let mut local = self.local.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(w) = local.get_mut(ticket) {
            w.early = Some(terms);
        }
    }

    /// The waiter `ticket` withdraws its offer (it stops waiting).
    pub(crate) fn withdraw_early(&self, ticket: &str) {
        let mut local = self.local.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(w) = local.get_mut(ticket) {
            w.early = None;
        }
    }

    /// How many of this client's fair waiters offer early-handoff terms that `matches`.
    pub(crate) fn count_early(&self, matches: impl Fn(&EarlyTerms) -> bool) -> usize {
        let local = self.local.lock().unwrap_or_else(|p| p.into_inner());
        local
            .values()
            .filter(|w| w.early.as_ref().is_some_and(&matches))
            .count()
    }

    /// Takes the early-handoff offer of the waiter `ticket` (once), with where to deliver it.
    pub(crate) fn take_early(
        &self,
        ticket: &str,
    ) -> Option<(EarlyTerms, mpsc::UnboundedSender<Delivery>)> {
        let mut local = self.local.lock().unwrap_or_else(|p| p.into_inner());
        let w = local.get_mut(ticket)?;
        Some((w.early.take()?, w.tx.clone()))
    }

    async fn subscribe_as(
        &self,
        channel: String,
        key: Option<&str>,
        ticket: Option<String>,
        one: bool,
    ) -> Option<Subscription> {
        let hub = self.hub().await?;
        let key = key.filter(|_| hub.tracking);
        let (rx, first, ticket, one, track) = {
            let mut channels = hub.channels.lock().unwrap_or_else(|p| p.into_inner());
            let first = !channels.contains_key(&channel);
            let c = channels.entry(channel.clone()).or_insert_with(|| Channel {
                tx: watch::channel(0).0,
                one: Arc::default(),
                refs: 0,
                tickets: HashMap::new(),
                confirmed: false,
                idle_since: None,
                lingering: false,
                key: key.map(str::to_string),
                armed: false,
                generation: next_generation(),
            });
            c.refs += 1;
            let ticket = ticket.map(|t| {
                let (tx, rx) = mpsc::unbounded_channel();
                c.tickets.insert(t.clone(), tx.clone());
                let mut local = hub.local.lock().unwrap_or_else(|p| p.into_inner());
                local.insert(t.clone(), LocalWaiter { tx, early: None });
                (t, rx)
            });
            let one = one.then(|| OneWake::new(c.one.clone()));
            // The key is read once per arming, not once per waiter: a waiter that comes while
            // it is armed (or being armed by an earlier waiter's read) registers for free.
            let track = match (&c.key, c.armed) {
                (Some(key), false) => {
                    let (done, answered) = oneshot::channel();
                    let _ = hub.commands.send(Command::Track(Track {
                        channel: channel.clone(),
                        key: key.clone(),
                        generation: c.generation,
                        wake_if_gone: false,
                        done: Some(done),
                    }));
                    Some(answered)
                }
                _ => None,
            };
            (c.tx.subscribe(), first, ticket, one, track)
        };
        let subscription = Subscription {
            hub: hub.clone(),
            channel: channel.clone(),
            rx,
            ticket,
            one,
        };
        if first {
            let (done, confirmed) = oneshot::channel();
            let _ = hub.commands.send(Command::Subscribe(channel, done));
            match tokio::time::timeout(self.timeout, confirmed).await {
                Ok(Ok(true)) => {
                    let mut channels = hub.channels.lock().unwrap_or_else(|p| p.into_inner());
                    if let Some(c) = channels.get_mut(&subscription.channel) {
                        c.confirmed = true;
                    }
                }
                _ => {
                    tracing::debug!("release-channel subscription failed; polling instead");
                    return None; // dropping `subscription` undoes the registration
                }
            }
        }
        // The tracking read went out beside the SUBSCRIBE (one round trip for both). A failed
        // read leaves the key unarmed: the messages and the pause still wake this waiter.
        if let Some(answered) = track {
            let _ = tokio::time::timeout(self.timeout, answered).await;
        }
        Some(subscription)
    }

    /// This client's delete of the plain lock key `name` is on the wire, and its waiters track
    /// their keys: wakes its waiters of `name` at once, as a release message would (one
    /// plain-lock waiter, every broadcast waiter), without waiting for the delete's reply or
    /// the key's invalidation. The invalidation still comes, and is handled as any other (a
    /// waiter that it wakes too finds the lock taken, or takes it), so a wake-up skipped here
    /// (the hub being opened) or come to nothing only costs time.
    pub(crate) fn released_here(&self, name: &str) {
        let Ok(hub) = self.hub.try_lock() else {
            return;
        };
        let Some(hub) = hub.as_ref() else {
            return;
        };
        let channels = hub.channels.lock().unwrap_or_else(|p| p.into_inner());
        if channels.is_empty() {
            return; // nobody waits for anything: no channel name to build
        }
        if let Some(c) = channels.get(&release_channel(name)).filter(|c| c.refs > 0) {
            releasing(c);
        }
    }

    /// Whether `channel` is subscribed on the server already (confirmed, and lingering or in
    /// use): registering on it then costs no round trip, and a release published from now on
    /// reaches the registered waiter.
    pub(crate) fn is_subscribed(&self, channel: &str) -> bool {
        let Ok(hub) = self.hub.try_lock() else {
            return false;
        };
        hub.as_ref()
            .filter(|h| h.alive.load(Ordering::Acquire))
            .is_some_and(|h| {
                let channels = h.channels.lock().unwrap_or_else(|p| p.into_inner());
                channels.get(channel).is_some_and(|c| c.confirmed)
            })
    }

    async fn hub(&self) -> Option<Arc<Hub>> {
        let mut current = self.hub.lock().await;
        if let Some(hub) = current.as_ref().filter(|h| h.alive.load(Ordering::Acquire)) {
            return Some(hub.clone());
        }
        let channels: Channels = Arc::default();
        let alive = Arc::new(AtomicBool::new(true));
        let (commands, rx) = mpsc::unbounded_channel();
        // Weak: the connection (which owns the router) must not keep its own command loop,
        // and so itself, alive once the hub is gone.
        let router = Router::new(channels.clone(), alive.clone(), commands.downgrade());
        // Boxed: opening is rare (once per client, and after a failure), and its state (about
        // 3 KB) would otherwise size every wait's future, which subscribes through this.
        let opening = Box::pin(self.open(router));
        let (subscriber, tracking) = match tokio::time::timeout(self.timeout, opening).await {
            Ok(Ok(p)) => p,
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "cannot open the subscriber connection; waiters poll");
                return None;
            }
            Err(_) => return None,
        };
        tokio::spawn(run(subscriber, rx, channels.clone(), alive.clone()));
        let hub = Arc::new(Hub {
            commands,
            channels,
            alive,
            local: self.local.clone(),
            tracking,
        });
        *current = Some(hub.clone());
        Some(hub)
    }
}

impl Subscription {
    /// Forgets notifications seen so far; call before each attempt, so that one published
    /// during or after the attempt wakes [`Subscription::released`].
    pub(crate) fn mark_seen(&mut self) {
        self.rx.borrow_and_update();
        if let Some(one) = self.one.as_mut() {
            one.mark_seen();
        }
    }

    /// Resolves at the next release notification (never, if the subscriber connection died);
    /// for a [`Notifier::subscribe_one`] waiter, at the next release that picks it.
    pub(crate) async fn released(&mut self) {
        if let Some(one) = self.one.as_mut() {
            one.released().await;
            return;
        }
        if self.rx.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    /// Resolves at the next release notification or handoff to this subscription's ticket
    /// (never, if the subscriber connection died). Cancel-safe.
    pub(crate) async fn next(&mut self) -> Wake {
        let Some((_, handoffs)) = self.ticket.as_mut() else {
            self.released().await;
            return Wake::Released;
        };
        let rx = &mut self.rx;
        let released = async {
            if rx.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        };
        tokio::select! {
            () = released => Wake::Released,
            handoff = handoffs.recv() => match handoff {
                Some(Delivery::Handoff(h)) => Wake::HandedOff(h),
                Some(Delivery::Early(grant)) => Wake::HandedOffEarly(grant),
                None => std::future::pending().await,
            },
        }
    }
}

impl Wakeup for Subscription {
    fn mark_seen(&mut self) {
        Subscription::mark_seen(self);
    }

    fn released(&mut self) -> BoxFuture<'_, ()> {
        Box::pin(Subscription::released(self))
    }

    fn answered(&mut self, taken: bool) {
        if let Some(one) = self.one.as_mut() {
            one.answered(taken);
        }
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        if let Some((ticket, _)) = &self.ticket {
            let mut local = self.hub.local.lock().unwrap_or_else(|p| p.into_inner());
            local.remove(ticket);
        }
        let mut channels = self.hub.channels.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = channels.get_mut(&self.channel) {
            if let Some((ticket, _)) = &self.ticket {
                c.tickets.remove(ticket);
            }
            c.refs -= 1;
            if c.refs == 0 {
                c.idle_since = Some(tokio::time::Instant::now());
                match tokio::runtime::Handle::try_current() {
                    Ok(_) if c.lingering => {}
                    Ok(runtime) if c.confirmed => {
                        c.lingering = true;
                        runtime.spawn(self.hub.clone().linger(self.channel.clone()));
                    }
                    _ => self.hub.unsubscribe(&mut channels, &self.channel),
                }
            }
        }
    }
}
