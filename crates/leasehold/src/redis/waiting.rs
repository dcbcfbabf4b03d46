//! Waiters woken on release instead of polling alone.
//!
//! A release publishes the lock key on [`release_channel`](crate::redis::release_channel) in the same
//! round trip (inside the release script, or pipelined with `DELEX`/`DELIFEQ`). A waiting
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
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::FutureExt;
use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use tokio::sync::{Notify, mpsc, oneshot, watch};

use crate::core::acquire::Wakeup;
use crate::redis::handoff::{EarlyGrant, EarlyTerms};
use crate::redis::topology::SubscriberSource;

/// The shared subscriber connection of one client, opened on first use and reopened after it
/// breaks.
pub(crate) struct Notifier {
    source: SubscriberSource,
    timeout: Duration,
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
    one: Arc<Notify>,
    refs: usize,
    /// Fair waiters of this channel by ticket: a handoff message goes to its ticket alone.
    tickets: HashMap<String, mpsc::UnboundedSender<Delivery>>,
    /// Whether the server confirmed the subscription.
    confirmed: bool,
    /// Counts the times the channel was left without waiters: a lingering unsubscribe goes
    /// ahead only if nobody came (and left) since it was scheduled.
    idle: u64,
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
}

/// One subscriber connection. Commands go through one task in order, so an UNSUBSCRIBE sent when
/// the last waiter of a channel leaves can never overtake a later SUBSCRIBE for it.
struct Hub {
    commands: mpsc::UnboundedSender<Command>,
    channels: Channels,
    alive: Arc<AtomicBool>,
    local: LocalWaiters,
}

impl Hub {
    /// Unsubscribes `channel` if no waiter came since it was left idle for the `idle`th time.
    fn unsubscribe_if_idle(&self, channel: &str, idle: u64) {
        let mut channels = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        if channels
            .get(channel)
            .is_some_and(|c| c.refs == 0 && c.idle == idle)
        {
            channels.remove(channel);
            let _ = self
                .commands
                .send(Command::Unsubscribe(channel.to_string()));
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
    /// A plain-lock waiter's share of the channel's one-per-release wake-up, and whether it
    /// was woken and has not attempted since (it then hands the wake-up on if it leaves).
    one: Option<(Arc<Notify>, bool)>,
}

impl Notifier {
    pub(crate) fn new(source: SubscriberSource, timeout: Duration) -> Self {
        Notifier {
            source,
            timeout,
            hub: tokio::sync::Mutex::new(None),
            id: crate::core::token::LockToken::random().expose()[..16].to_string(),
            local: LocalWaiters::default(),
        }
    }

    /// Subscribes to `channel`, waiting for the server's confirmation. `None` if that fails
    /// (the waiter then polls).
    pub(crate) async fn subscribe(&self, channel: String) -> Option<Subscription> {
        self.subscribe_as(channel, None, false).await
    }

    /// Subscribes to `channel` as one of the waiters for a plain lock: each release wakes *one*
    /// such waiter of this client (the longest waiting), not all of them, since only one can
    /// take the lock. Waiters of other kinds (read-write locks, elections, semaphores, fair
    /// waiters) still see every release.
    ///
    /// **No release is left without a local attempt after it**: a release that finds no such
    /// waiter asleep leaves a permit that the next one to sleep (or to attempt) consumes; a
    /// waiter woken by it attempts next, or, if it leaves first (deadline, cancellation), hands
    /// the wake-up to the next waiter. Whoever then holds the lock wakes the next waiter with
    /// its own release. The test `one_waiter_is_woken_per_release` fails if a release is lost.
    pub(crate) async fn subscribe_one(&self, channel: String) -> Option<Subscription> {
        self.subscribe_as(channel, None, true).await
    }

    /// Subscribes to `channel` as the fair waiter `ticket`: handoff messages for the ticket go
    /// to this subscription alone (and are registered before this returns, so none published
    /// after it can be missed).
    pub(crate) async fn subscribe_ticket(
        &self,
        channel: String,
        ticket: String,
    ) -> Option<Subscription> {
        self.subscribe_as(channel, Some(ticket), false).await
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
        ticket: Option<String>,
        one: bool,
    ) -> Option<Subscription> {
        let hub = self.hub().await?;
        let (rx, first, ticket, one) = {
            let mut channels = hub.channels.lock().unwrap_or_else(|p| p.into_inner());
            let first = !channels.contains_key(&channel);
            let c = channels.entry(channel.clone()).or_insert_with(|| Channel {
                tx: watch::channel(0).0,
                one: Arc::new(Notify::new()),
                refs: 0,
                tickets: HashMap::new(),
                confirmed: false,
                idle: 0,
            });
            c.refs += 1;
            let ticket = ticket.map(|t| {
                let (tx, rx) = mpsc::unbounded_channel();
                c.tickets.insert(t.clone(), tx.clone());
                let mut local = hub.local.lock().unwrap_or_else(|p| p.into_inner());
                local.insert(t.clone(), LocalWaiter { tx, early: None });
                (t, rx)
            });
            let one = one.then(|| (c.one.clone(), false));
            (c.tx.subscribe(), first, ticket, one)
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
        Some(subscription)
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
        let router = Router {
            channels: channels.clone(),
            alive: alive.clone(),
        };
        let subscriber = match tokio::time::timeout(self.timeout, self.open(router)).await {
            Ok(Ok(p)) => p,
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "cannot open the subscriber connection; waiters poll");
                return None;
            }
            Err(_) => return None,
        };
        let (commands, rx) = mpsc::unbounded_channel();
        tokio::spawn(run(subscriber, rx, channels.clone(), alive.clone()));
        let hub = Arc::new(Hub {
            commands,
            channels,
            alive,
            local: self.local.clone(),
        });
        *current = Some(hub.clone());
        Some(hub)
    }
}

/// Routes the subscriber connection's RESP3 pushes where they arrive, inside the connection's
/// own task: a handoff wakes its waiter directly, without a hop through another task (on two
/// cores, each hop is a wake-up that can wait behind a busy thread).
struct Router {
    channels: Channels,
    alive: Arc<AtomicBool>,
}

impl redis::aio::AsyncPushSender for Router {
    fn send(&self, info: redis::PushInfo) -> Result<(), redis::aio::SendError> {
        match info.kind {
            redis::PushKind::Message | redis::PushKind::SMessage => {
                if let [
                    redis::Value::BulkString(channel),
                    redis::Value::BulkString(payload),
                    ..,
                ] = info.data.as_slice()
                {
                    wake(&self.channels, channel, payload);
                }
            }
            // Only a one-server connection reports this: a cluster connection reconnects and
            // re-subscribes by itself.
            redis::PushKind::Disconnection => self.alive.store(false, Ordering::Release),
            _ => {}
        }
        Ok(())
    }
}

/// `client` speaking RESP3 (which carries pub/sub messages as pushes on a multiplexed
/// connection).
fn resp3(client: &redis::Client) -> redis::RedisResult<redis::Client> {
    let info = client.get_connection_info().clone();
    let settings = info
        .redis_settings()
        .clone()
        .set_protocol(redis::ProtocolVersion::RESP3);
    redis::Client::open(info.set_redis_settings(settings))
}

impl Notifier {
    async fn open(&self, router: Router) -> redis::RedisResult<Subscriber> {
        match &self.source {
            SubscriberSource::Client(client) => open_single(client, router, self.timeout).await,
            SubscriberSource::Sentinel(conn) => {
                open_single(&conn.current_client(), router, self.timeout).await
            }
            SubscriberSource::Cluster {
                seeds,
                root_cert,
                connect_timeout,
            } => {
                // Cluster pushes carry no disconnection the router must act on.
                let client = crate::redis::topology::cluster_client(
                    seeds,
                    root_cert,
                    *connect_timeout,
                    *connect_timeout,
                    Some(router),
                )
                .map_err(|e| redis::RedisError::from(std::io::Error::other(e.to_string())))?;
                Ok(Subscriber::Cluster(client.get_async_connection().await?))
            }
        }
    }
}

/// A RESP3 connection whose pushes `router` handles; a RESP2 subscriber connection if the
/// server refuses RESP3 (an ACL rule without `+hello`, say).
async fn open_single(
    client: &redis::Client,
    router: Router,
    timeout: Duration,
) -> redis::RedisResult<Subscriber> {
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(Some(timeout))
        .set_push_sender(router);
    match resp3(client)?
        .get_multiplexed_async_connection_with_config(&config)
        .await
    {
        Ok(conn) => Ok(Subscriber::Single(conn)),
        Err(e) => {
            tracing::debug!(error = %e, "RESP3 subscriber refused; subscribing over RESP2");
            Ok(Subscriber::Resp2(client.get_async_pubsub().await?))
        }
    }
}

/// An open subscriber connection.
enum Subscriber {
    /// `SUBSCRIBE` on one server over RESP3: messages reach the [`Router`] as pushes.
    Single(redis::aio::MultiplexedConnection),
    /// `SUBSCRIBE` on one server over RESP2: messages come through the subscriber's stream.
    Resp2(redis::aio::PubSub),
    /// `SSUBSCRIBE` through a RESP3 cluster connection: messages reach the [`Router`] as pushes.
    Cluster(redis::cluster_async::ClusterConnection),
}

/// Wakes the waiters of `channel` (`payload` was published on it): a handoff message wakes
/// the one waiter with its ticket (nobody, if that waiter is another client's), anything else
/// every broadcast waiter of the channel and one plain-lock waiter.
fn wake(channels: &Channels, channel: &[u8], payload: &[u8]) {
    let channels = channels.lock().unwrap_or_else(|p| p.into_inner());
    let Some(c) = std::str::from_utf8(channel)
        .ok()
        .and_then(|n| channels.get(n))
    else {
        return;
    };
    if let Some(rest) = payload.strip_prefix(HANDOFF_PREFIX.as_bytes()) {
        if let Some((ticket, handoff)) = parse_handoff(rest)
            && let Some(tx) = c.tickets.get(ticket)
        {
            let _ = tx.send(Delivery::Handoff(handoff));
        }
        return;
    }
    c.tx.send_modify(|generation| *generation = generation.wrapping_add(1));
    c.one.notify_one();
}

/// Runs the hub's commands in order (messages are routed by the [`Router`], or, over RESP2,
/// read here too).
async fn run(
    subscriber: Subscriber,
    mut commands: mpsc::UnboundedReceiver<Command>,
    channels: Channels,
    alive: Arc<AtomicBool>,
) {
    match subscriber {
        Subscriber::Single(mut conn) => {
            // Every handle on the hub gone: the connection closes with this task.
            while let Some(command) = commands.recv().await {
                match command {
                    Command::Subscribe(channel, done) => {
                        let _ = done.send(conn.subscribe(&channel).await.is_ok());
                    }
                    Command::Unsubscribe(channel) => {
                        let _ = conn.unsubscribe(&channel).await;
                    }
                }
            }
        }
        Subscriber::Cluster(mut conn) => {
            while let Some(command) = commands.recv().await {
                match command {
                    Command::Subscribe(channel, done) => {
                        let _ = done.send(conn.ssubscribe(&channel).await.is_ok());
                    }
                    Command::Unsubscribe(channel) => {
                        let _ = conn.sunsubscribe(&channel).await;
                    }
                }
            }
        }
        Subscriber::Resp2(pubsub) => {
            let (mut sink, mut stream) = pubsub.split();
            loop {
                tokio::select! {
                    command = commands.recv() => match command {
                        None => return,
                        Some(Command::Subscribe(channel, done)) => {
                            let _ = done.send(sink.subscribe(&channel).await.is_ok());
                        }
                        Some(Command::Unsubscribe(channel)) => {
                            let _ = sink.unsubscribe(&channel).await;
                        }
                    },
                    message = stream.next() => match message {
                        Some(m) => wake(&channels, m.get_channel_name().as_bytes(), m.get_payload_bytes()),
                        None => {
                            alive.store(false, Ordering::Release);
                            return;
                        }
                    },
                }
            }
        }
    }
}

impl Subscription {
    /// Forgets notifications seen so far; call before each attempt, so that one published
    /// during or after the attempt wakes [`Subscription::released`].
    pub(crate) fn mark_seen(&mut self) {
        self.rx.borrow_and_update();
        if let Some((notify, woken)) = self.one.as_mut() {
            // The attempt about to go out covers every release so far: a permit one of them
            // left is used up by it, and a wake-up this waiter got is answered by it.
            let _ = notify.notified().now_or_never();
            *woken = false;
        }
    }

    /// Resolves at the next release notification (never, if the subscriber connection died);
    /// for a [`Notifier::subscribe_one`] waiter, at the next release that picks it.
    pub(crate) async fn released(&mut self) {
        if let Some((notify, woken)) = self.one.as_mut() {
            notify.notified().await;
            *woken = true;
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
}

impl Drop for Subscription {
    fn drop(&mut self) {
        if let Some((notify, true)) = &self.one {
            // Woken, but leaving without the attempt: the release is another waiter's now.
            notify.notify_one();
        }
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
                c.idle += 1;
                let idle = c.idle;
                match tokio::runtime::Handle::try_current() {
                    Ok(runtime) if c.confirmed => {
                        let (hub, channel) = (self.hub.clone(), self.channel.clone());
                        runtime.spawn(async move {
                            tokio::time::sleep(LINGER).await;
                            hub.unsubscribe_if_idle(&channel, idle);
                        });
                    }
                    _ => {
                        drop(channels);
                        self.hub.unsubscribe_if_idle(&self.channel, idle);
                    }
                }
            }
        }
    }
}
