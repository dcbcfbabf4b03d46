//! Waiters woken on release instead of polling alone.
//!
//! A release publishes the lock key on [`release_channel`](crate::release_channel) in the same
//! round trip (inside the release script, or pipelined with `DELEX`/`DELIFEQ`). A waiting
//! acquirer subscribes to that channel *before* its first attempt, through one subscriber
//! connection shared by every waiter of the client, and after each busy attempt sleeps until a
//! notification arrives **or** a timeout (the holder's remaining TTL, capped by the backoff and
//! the deadline) passes, then retries.
//!
//! On a Redis Cluster the release publishes with `SPUBLISH` on the same channel, which hashes to
//! the lock key's slot (see [`crate::slot`]), and waiters `SSUBSCRIBE`: the message travels only
//! within the key's shard instead of being broadcast over the whole cluster bus, and the
//! subscriber follows the slot when it moves (the cluster connection re-subscribes).
//!
//! Pub/sub is at-most-once (a message published while the subscriber reconnects is lost), so
//! a notification is only ever a hint to retry early: correctness never depends on it, and the
//! timeout path always stays. A waiter that cannot subscribe (no URL to open a subscriber
//! connection with, or the subscription failed) simply polls.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::{mpsc, oneshot, watch};

/// Where the subscriber connection goes.
pub(crate) enum SubscriberSource {
    /// One server.
    Client(redis::Client),
    /// The current primary of a Sentinel set (asked again each time the subscriber reconnects).
    Sentinel(crate::connection::SentinelConnection),
    /// A cluster: one RESP3 cluster connection with sharded subscriptions.
    Cluster {
        seeds: Vec<String>,
        root_cert: Option<Vec<u8>>,
        connect_timeout: Duration,
    },
}

/// The shared subscriber connection of one client, opened on first use and reopened after it
/// breaks.
pub(crate) struct Notifier {
    source: SubscriberSource,
    timeout: Duration,
    hub: tokio::sync::Mutex<Option<Arc<Hub>>>,
}

type Channels = Arc<Mutex<HashMap<String, Channel>>>;

struct Channel {
    tx: watch::Sender<u64>,
    refs: usize,
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
}

/// A waiter's registration on one key's release channel.
pub(crate) struct Subscription {
    hub: Arc<Hub>,
    channel: String,
    rx: watch::Receiver<u64>,
}

impl Notifier {
    pub(crate) fn new(source: SubscriberSource, timeout: Duration) -> Self {
        Notifier {
            source,
            timeout,
            hub: tokio::sync::Mutex::new(None),
        }
    }

    /// Subscribes to `channel`, waiting for the server's confirmation. `None` if that fails
    /// (the waiter then polls).
    pub(crate) async fn subscribe(&self, channel: String) -> Option<Subscription> {
        let hub = self.hub().await?;
        let (rx, first) = {
            let mut channels = hub.channels.lock().unwrap_or_else(|p| p.into_inner());
            match channels.get_mut(&channel) {
                Some(c) => {
                    c.refs += 1;
                    (c.tx.subscribe(), false)
                }
                None => {
                    let (tx, rx) = watch::channel(0);
                    channels.insert(channel.clone(), Channel { tx, refs: 1 });
                    (rx, true)
                }
            }
        };
        let subscription = Subscription {
            hub: hub.clone(),
            channel: channel.clone(),
            rx,
        };
        if first {
            let (done, confirmed) = oneshot::channel();
            let _ = hub.commands.send(Command::Subscribe(channel, done));
            match tokio::time::timeout(self.timeout, confirmed).await {
                Ok(Ok(true)) => {}
                _ => {
                    tracing::debug!("release-channel subscription failed; polling instead");
                    return None; // dropping `subscription` undoes the registration
                }
            }
        }
        Some(subscription)
    }

    async fn hub(&self) -> Option<Arc<Hub>> {
        let mut current = self.hub.lock().await;
        if let Some(hub) = current.as_ref().filter(|h| h.alive.load(Ordering::Acquire)) {
            return Some(hub.clone());
        }
        let subscriber = match tokio::time::timeout(self.timeout, self.open()).await {
            Ok(Ok(p)) => p,
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "cannot open the subscriber connection; waiters poll");
                return None;
            }
            Err(_) => return None,
        };
        let (commands, rx) = mpsc::unbounded_channel();
        let channels: Channels = Arc::default();
        let alive = Arc::new(AtomicBool::new(true));
        tokio::spawn(run(subscriber, rx, channels.clone(), alive.clone()));
        let hub = Arc::new(Hub {
            commands,
            channels,
            alive,
        });
        *current = Some(hub.clone());
        Some(hub)
    }
}

impl Notifier {
    async fn open(&self) -> redis::RedisResult<Subscriber> {
        match &self.source {
            SubscriberSource::Client(client) => {
                Ok(Subscriber::Single(client.get_async_pubsub().await?))
            }
            SubscriberSource::Sentinel(conn) => Ok(Subscriber::Single(
                conn.current_client().get_async_pubsub().await?,
            )),
            SubscriberSource::Cluster {
                seeds,
                root_cert,
                connect_timeout,
            } => {
                let (tx, pushes) = mpsc::unbounded_channel();
                let client = crate::topology::cluster_client(
                    seeds,
                    root_cert,
                    *connect_timeout,
                    *connect_timeout,
                    Some(tx),
                )
                .map_err(|e| redis::RedisError::from(std::io::Error::other(e.to_string())))?;
                let conn = client.get_async_connection().await?;
                Ok(Subscriber::Cluster { conn, pushes })
            }
        }
    }
}

/// An open subscriber connection.
enum Subscriber {
    /// `SUBSCRIBE` on one server.
    Single(redis::aio::PubSub),
    /// `SSUBSCRIBE` through a RESP3 cluster connection; messages arrive as pushes.
    Cluster {
        conn: redis::cluster_async::ClusterConnection,
        pushes: mpsc::UnboundedReceiver<redis::PushInfo>,
    },
}

/// Wakes the waiters of `channel` (a message was published on it).
fn wake(channels: &Channels, channel: &[u8]) {
    let channels = channels.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(c) = std::str::from_utf8(channel)
        .ok()
        .and_then(|n| channels.get(n))
    {
        c.tx.send_modify(|generation| *generation = generation.wrapping_add(1));
    }
}

async fn run(
    subscriber: Subscriber,
    mut commands: mpsc::UnboundedReceiver<Command>,
    channels: Channels,
    alive: Arc<AtomicBool>,
) {
    match subscriber {
        Subscriber::Single(pubsub) => {
            let (mut sink, mut stream) = pubsub.split();
            loop {
                tokio::select! {
                    command = commands.recv() => match command {
                        // Every handle on the hub is gone: close the connection.
                        None => return,
                        Some(Command::Subscribe(channel, done)) => {
                            let _ = done.send(sink.subscribe(&channel).await.is_ok());
                        }
                        Some(Command::Unsubscribe(channel)) => {
                            let _ = sink.unsubscribe(&channel).await;
                        }
                    },
                    message = stream.next() => match message {
                        Some(m) => wake(&channels, m.get_channel_name().as_bytes()),
                        None => {
                            alive.store(false, Ordering::Release);
                            return;
                        }
                    },
                }
            }
        }
        Subscriber::Cluster {
            mut conn,
            mut pushes,
        } => loop {
            tokio::select! {
                command = commands.recv() => match command {
                    None => return,
                    Some(Command::Subscribe(channel, done)) => {
                        let _ = done.send(conn.ssubscribe(&channel).await.is_ok());
                    }
                    Some(Command::Unsubscribe(channel)) => {
                        let _ = conn.sunsubscribe(&channel).await;
                    }
                },
                push = pushes.recv() => match push {
                    Some(redis::PushInfo { kind: redis::PushKind::SMessage, data }) => {
                        if let Some(redis::Value::BulkString(channel)) = data.first() {
                            wake(&channels, channel);
                        }
                    }
                    Some(_) => {}
                    None => {
                        alive.store(false, Ordering::Release);
                        return;
                    }
                },
            }
        },
    }
}

impl Subscription {
    /// Forgets notifications seen so far; call before each attempt, so that one published
    /// during or after the attempt wakes [`Subscription::released`].
    pub(crate) fn mark_seen(&mut self) {
        self.rx.borrow_and_update();
    }

    /// Resolves at the next release notification (never, if the subscriber connection died).
    pub(crate) async fn released(&mut self) {
        if self.rx.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut channels = self.hub.channels.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = channels.get_mut(&self.channel) {
            c.refs -= 1;
            if c.refs == 0 {
                channels.remove(&self.channel);
                let _ = self
                    .hub
                    .commands
                    .send(Command::Unsubscribe(self.channel.clone()));
            }
        }
    }
}
