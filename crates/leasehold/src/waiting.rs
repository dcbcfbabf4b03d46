//! Waiters woken on release instead of polling alone.
//!
//! A release publishes the lock key on [`release_channel`](crate::release_channel) in the same
//! round trip (inside the release script, or pipelined with `DELEX`/`DELIFEQ`). A waiting
//! acquirer subscribes to that channel *before* its first attempt, through one subscriber
//! connection shared by every waiter of the client, and after each busy attempt sleeps until a
//! notification arrives **or** a timeout (the holder's remaining TTL, capped by the backoff and
//! the deadline) passes, then retries.
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

/// The shared subscriber connection of one client, opened on first use and reopened after it
/// breaks.
pub(crate) struct Notifier {
    client: redis::Client,
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
    pub(crate) fn new(client: redis::Client, timeout: Duration) -> Self {
        Notifier {
            client,
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
        let pubsub = match tokio::time::timeout(self.timeout, self.client.get_async_pubsub()).await
        {
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
        tokio::spawn(run(pubsub, rx, channels.clone(), alive.clone()));
        let hub = Arc::new(Hub {
            commands,
            channels,
            alive,
        });
        *current = Some(hub.clone());
        Some(hub)
    }
}

async fn run(
    pubsub: redis::aio::PubSub,
    mut commands: mpsc::UnboundedReceiver<Command>,
    channels: Channels,
    alive: Arc<AtomicBool>,
) {
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
                Some(m) => {
                    let channels = channels.lock().unwrap_or_else(|p| p.into_inner());
                    if let Some(c) = channels.get(m.get_channel_name()) {
                        c.tx.send_modify(|generation| *generation = generation.wrapping_add(1));
                    }
                }
                None => {
                    alive.store(false, Ordering::Release);
                    return;
                }
            },
        }
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
