//! The subscriber connection: opening it (RESP3 with tracking, or RESP2), the loop that sends
//! its commands in order, the tracking reads, and the [`Router`] that turns its pushes into
//! wake-ups.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::mpsc;

use crate::redis::slot::release_channel;
use crate::redis::topology::SubscriberSource;

use super::{
    Channel, Channels, Command, Delivery, HANDOFF_PREFIX, Notifier, Track, next_generation,
    parse_handoff,
};

/// Routes the subscriber connection's RESP3 pushes where they arrive, inside the connection's
/// own task: a handoff wakes its waiter directly, without a hop through another task (on two
/// cores, each hop is a wake-up that can wait behind a busy thread).
pub(super) struct Router {
    channels: Channels,
    alive: Arc<AtomicBool>,
    /// Where the tracking reads after an invalidation go.
    commands: mpsc::WeakUnboundedSender<Command>,
}

impl Router {
    pub(super) fn new(
        channels: Channels,
        alive: Arc<AtomicBool>,
        commands: mpsc::WeakUnboundedSender<Command>,
    ) -> Self {
        Router {
            channels,
            alive,
            commands,
        }
    }

    /// The server no longer tracks `keys` (`None`: every key, after a flush) for this
    /// connection: the one-shot tracking is spent. While a key has waiters, it is read again at
    /// once, which arms it again and wakes the waiters if the key is gone (see the module docs:
    /// the invalidation itself may come from an acquisition or an extension, which wake nobody).
    fn invalidated(&self, keys: Option<&[redis::Value]>) {
        let mut channels = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        let spent = |c: &mut Channel, channel: &str| {
            c.armed = false;
            c.generation = next_generation();
            if c.refs > 0
                && let (Some(key), Some(commands)) = (&c.key, self.commands.upgrade())
            {
                let _ = commands.send(Command::Track(Track {
                    channel: channel.to_string(),
                    key: key.clone(),
                    generation: c.generation,
                    wake_if_gone: true,
                    done: None,
                }));
            }
        };
        match keys {
            Some(keys) => {
                for key in keys {
                    let redis::Value::BulkString(key) = key else {
                        continue;
                    };
                    let Ok(key) = std::str::from_utf8(key) else {
                        continue;
                    };
                    let channel = release_channel(key);
                    if let Some(c) = channels
                        .get_mut(&channel)
                        .filter(|c| c.key.as_deref() == Some(key))
                    {
                        spent(c, &channel);
                    }
                }
            }
            None => {
                for (channel, c) in channels.iter_mut().filter(|(_, c)| c.key.is_some()) {
                    spent(c, channel);
                }
            }
        }
    }
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
            redis::PushKind::Invalidate => match info.data.first() {
                Some(redis::Value::Array(keys)) => self.invalidated(Some(keys)),
                // A flush (FLUSHALL, FLUSHDB) is reported with a null instead of its keys.
                Some(redis::Value::Nil) => self.invalidated(None),
                _ => {}
            },
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
    /// The subscriber connection, and whether the server tracks keys for it.
    pub(super) async fn open(&self, router: Router) -> redis::RedisResult<(Subscriber, bool)> {
        match &self.source {
            SubscriberSource::Client(client) => {
                open_single(client, router, self.timeout, self.track).await
            }
            SubscriberSource::Sentinel(conn) => {
                open_single(&conn.current_client(), router, self.timeout, self.track).await
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
                // Tracking is per node and the cluster connection would not turn it on at a
                // new node: a cluster's releases keep publishing (`SPUBLISH`).
                let conn = client.get_async_connection().await?;
                Ok((Subscriber::Cluster(conn), false))
            }
        }
    }
}

/// A RESP3 connection whose pushes `router` handles, with `CLIENT TRACKING ON` if `track` (and
/// whether the server accepted it); a RESP2 subscriber connection, which does not track, if the
/// server refuses RESP3 (an ACL rule without `+hello`, say).
async fn open_single(
    client: &redis::Client,
    router: Router,
    timeout: Duration,
    track: bool,
) -> redis::RedisResult<(Subscriber, bool)> {
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(Some(timeout))
        .set_push_sender(router);
    match resp3(client)?
        .get_multiplexed_async_connection_with_config(&config)
        .await
    {
        Ok(mut conn) => {
            // Default mode, not OPTIN: this connection reads nothing but the keys it tracks.
            let tracking = track
                && redis::cmd("CLIENT")
                    .arg("TRACKING")
                    .arg("ON")
                    .query_async::<()>(&mut conn)
                    .await
                    .inspect_err(|e| {
                        tracing::info!(error = %e, "CLIENT TRACKING refused: waiters poll between messages");
                    })
                    .is_ok();
            Ok((Subscriber::Single(conn), tracking))
        }
        Err(e) => {
            tracing::debug!(error = %e, "RESP3 subscriber refused; subscribing over RESP2");
            Ok((Subscriber::Resp2(client.get_async_pubsub().await?), false))
        }
    }
}

/// Runs a tracking read (`PTTL`, the cheapest read of a key) on `conn`: the server tracks the
/// key for the connection from when it runs the read. Arms the channel if no invalidation came
/// since the read was asked for, and wakes its waiters if the read found the key gone and
/// `track` says to.
async fn track(mut conn: redis::aio::MultiplexedConnection, channels: Channels, track: Track) {
    let pttl = redis::cmd("PTTL")
        .arg(&track.key)
        .query_async::<i64>(&mut conn)
        .await;
    if let Ok(pttl) = pttl {
        let mut channels = channels.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = channels.get_mut(&track.channel) {
            if c.generation == track.generation {
                c.armed = true;
            }
            if track.wake_if_gone && pttl == -2 {
                released(c);
            }
        }
    }
    if let Some(done) = track.done {
        let _ = done.send(());
    }
}

/// An open subscriber connection.
pub(super) enum Subscriber {
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
    released(c);
}

/// A release of `c`'s name was seen: every broadcast waiter, and one plain-lock waiter (or the
/// plain-lock attempts out: [`NameWakeup::released`](crate::core::acquire::NameWakeup)).
pub(super) fn released(c: &Channel) {
    c.tx.send_modify(|seen| *seen = seen.wrapping_add(1));
    c.one.released();
}

/// This client's release of `c`'s name is on the wire: every broadcast waiter, and one
/// plain-lock waiter ([`NameWakeup::releasing`](crate::core::acquire::NameWakeup)).
pub(super) fn releasing(c: &Channel) {
    c.tx.send_modify(|seen| *seen = seen.wrapping_add(1));
    c.one.releasing();
}

/// Runs the hub's commands in order (messages are routed by the [`Router`], or, over RESP2,
/// read here too).
pub(super) async fn run(
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
                    // Beside the command loop, so a SUBSCRIBE sent with it shares its round
                    // trip (their order does not matter: each covers the waiter by itself).
                    Command::Track(t) => {
                        tokio::spawn(track(conn.clone(), channels.clone(), t));
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
                    Command::Track(_) => {} // never sent: a cluster subscriber does not track
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
                        Some(Command::Track(_)) => {} // never sent: RESP2 does not track here
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
