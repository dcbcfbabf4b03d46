//! The keep-alive stream: one per client, shared by the sessions of every TTL.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use etcd_client as ec;
use tokio_util::sync::CancellationToken;

use super::lock;

/// The client's one keep-alive stream: the keep-alives of every session (every TTL) go out on
/// it, and each reply is routed back to the request it answers by its lease id. Opened on
/// first use (by the first keep-alive) and again, once, after it broke or got stuck.
///
/// **Each stream goes to the next member, in turn.** The client's balanced channel picks a
/// member at random for each new stream, and a frozen member's connection still looks ready,
/// so a stream replacing one stuck on a frozen member could land on it again, and again,
/// until the lease lapsed (a 1-in-3 chance per try on three members). Opening stream `n` on
/// member `n mod m` through a client of that member alone means that after a stuck stream the
/// next try goes elsewhere: one frozen member costs at most one failed keep-alive.
pub(super) struct KeepAlives {
    /// The client of every member (used as is when there is one member).
    etcd: ec::Client,
    /// The members, and how to connect to one alone.
    members: Vec<String>,
    connect: ec::ConnectOptions,
    /// A client per member, made on first use.
    per_member: Mutex<Vec<Option<ec::Client>>>,
    /// The current stream. An async mutex: a stream is opened under it, so sessions that find
    /// none at the same time open one, not one each.
    current: tokio::sync::Mutex<Option<Arc<Generation>>>,
    /// Streams tried so far (the number of the current one); also picks the next member.
    opened: AtomicU64,
}

/// One opened keep-alive stream. Its replies answer only requests sent on it: a reply never
/// moves a validity with the send time of a request sent on an earlier stream.
pub(super) struct Generation {
    number: u64,
    pub(super) state: Mutex<GenerationState>,
    /// Stops the task reading the replies.
    pub(super) stop: CancellationToken,
}

pub(super) struct GenerationState {
    /// The stream's request side (each request goes out through a keeper made for its lease
    /// id, sharing this one's sender); `None` once the stream is closed (it ended, got stuck,
    /// or the client is gone), which also ends the request side.
    keeper: Option<ec::LeaseKeeper>,
    /// Requests sent and not answered yet, by lease, oldest first: etcd answers a stream's
    /// requests one at a time, in order (or ends the stream), so a reply for lease `L` answers
    /// the oldest request for `L` still waiting. A request whose sender stopped waiting stays
    /// queued until its (late) reply arrives, which is then dropped, so the replies after it
    /// still meet their own requests.
    pub(super) waiting: HashMap<i64, VecDeque<Waiting>>,
    /// When the last reply arrived.
    last_reply: Option<Instant>,
}

/// A request sent on a stream: when, and where its reply goes.
pub(super) struct Waiting {
    sent: Instant,
    reply: tokio::sync::oneshot::Sender<Answer>,
}

/// A reply to one keep-alive request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Answer {
    /// When the request it answers was sent.
    pub(super) sent: Instant,
    /// The lease's new TTL in seconds; 0 (or less): the lease is gone.
    pub(super) ttl: i64,
}

pub(super) enum KeepAliveOutcome {
    /// The request sent at `sent` renewed the lease, to `ttl` (`None`: the TTL it was granted
    /// with, when the reply was read by the stream's opening).
    Renewed {
        sent: Instant,
        ttl: Option<Duration>,
    },
    /// etcd says the lease does not exist (expired or revoked).
    Gone,
    Failed,
}

impl Generation {
    pub(super) fn new(number: u64, keeper: ec::LeaseKeeper) -> Self {
        Generation {
            number,
            state: Mutex::new(GenerationState {
                keeper: Some(keeper),
                waiting: HashMap::new(),
                last_reply: None,
            }),
            stop: CancellationToken::new(),
        }
    }

    pub(super) fn is_open(&self) -> bool {
        lock(&self.state).keeper.is_some()
    }

    /// Queues a request for `lease` as sent now: a keeper that sends it on this stream, the
    /// send time, and where its reply will come. `None` if the stream is closed.
    pub(super) fn enqueue(
        &self,
        lease: i64,
    ) -> Option<(
        ec::LeaseKeeper,
        Instant,
        tokio::sync::oneshot::Receiver<Answer>,
    )> {
        let mut st = lock(&self.state);
        let sender = st.keeper.as_ref()?.sender.clone();
        let (reply, answer) = tokio::sync::oneshot::channel();
        let sent = Instant::now();
        st.waiting
            .entry(lease)
            .or_default()
            .push_back(Waiting { sent, reply });
        Some((ec::LeaseKeeper { id: lease, sender }, sent, answer))
    }

    /// A reply for `lease` arrived: it answers the oldest request for `lease` still waiting.
    pub(super) fn answer(&self, lease: i64, ttl: i64) {
        let waiting = {
            let mut st = lock(&self.state);
            st.last_reply = Some(Instant::now());
            let queue = st.waiting.get_mut(&lease);
            let first = queue.and_then(|q| q.pop_front());
            if st.waiting.get(&lease).is_some_and(|q| q.is_empty()) {
                st.waiting.remove(&lease);
            }
            first
        };
        match waiting {
            // The sender may have stopped waiting (a late reply): then it is dropped.
            Some(w) => drop(w.reply.send(Answer { sent: w.sent, ttl })),
            None => tracing::debug!(
                lease,
                stream = self.number,
                "unexpected etcd keep-alive reply"
            ),
        }
    }

    /// Whether no reply arrived on the stream since `t`.
    pub(super) fn silent_since(&self, t: Instant) -> bool {
        lock(&self.state).last_reply.is_none_or(|r| r < t)
    }

    /// Closes the stream: no more requests on it, and every request still waiting fails.
    pub(super) fn close(&self) {
        let waiting = {
            let mut st = lock(&self.state);
            st.keeper = None;
            std::mem::take(&mut st.waiting)
        };
        drop(waiting);
        self.stop.cancel();
    }
}

impl KeepAlives {
    pub(super) fn new(etcd: ec::Client, members: Vec<String>, connect: ec::ConnectOptions) -> Self {
        KeepAlives {
            etcd,
            per_member: Mutex::new(vec![None; members.len()]),
            members,
            connect,
            current: tokio::sync::Mutex::new(None),
            opened: AtomicU64::new(0),
        }
    }

    /// The client to open the next stream with: the next member's in turn (see the type's
    /// docs), or the client of every member when there is one member.
    async fn next_member(&self) -> Result<ec::Client, ec::Error> {
        if self.members.len() <= 1 {
            return Ok(self.etcd.clone());
        }
        let i = (self.opened.load(Ordering::SeqCst) as usize) % self.members.len();
        if let Some(client) = lock(&self.per_member)[i].clone() {
            return Ok(client);
        }
        // With credentials this authenticates (a round trip, bounded by the caller's deadline).
        let client = ec::Client::connect([&self.members[i]], Some(self.connect.clone())).await?;
        lock(&self.per_member)[i] = Some(client.clone());
        Ok(client)
    }

    /// Sends one keep-alive for `lease` and waits (at most `wait`) for its reply, on the
    /// current stream, or on a new one if there is none open.
    pub(super) async fn keep_alive(&self, lease: i64, wait: Duration) -> KeepAliveOutcome {
        let deadline = tokio::time::Instant::now() + wait;
        let generation = {
            let Ok(mut current) = tokio::time::timeout_at(deadline, self.current.lock()).await
            else {
                return KeepAliveOutcome::Failed;
            };
            match current.as_ref() {
                Some(g) if g.is_open() => g.clone(),
                _ => {
                    *current = None;
                    // Opening the stream sends the first keep-alive (this one) and reads its
                    // reply. Whatever the outcome, the next stream goes to the next member.
                    let sent = Instant::now();
                    let open = async {
                        let mut leases = self.next_member().await?.lease_client();
                        leases.keep_alive(lease).await
                    };
                    let opened = tokio::time::timeout_at(deadline, open).await;
                    let number = self.opened.fetch_add(1, Ordering::SeqCst) + 1;
                    return match opened {
                        Ok(Ok((keeper, replies))) => {
                            let generation = Arc::new(Generation::new(number, keeper));
                            tokio::spawn(read_replies(generation.clone(), replies));
                            *current = Some(generation);
                            tracing::debug!(stream = number, "etcd keep-alive stream opened");
                            KeepAliveOutcome::Renewed { sent, ttl: None }
                        }
                        Ok(Err(ec::Error::LeaseKeepAliveError(e))) if e.contains("not found") => {
                            KeepAliveOutcome::Gone
                        }
                        Ok(Err(e)) => {
                            tracing::debug!(lease, error = %e, "etcd keep-alive stream failed to open");
                            KeepAliveOutcome::Failed
                        }
                        Err(_) => KeepAliveOutcome::Failed,
                    };
                }
            }
        };
        let Some((mut keeper, sent, answer)) = generation.enqueue(lease) else {
            return KeepAliveOutcome::Failed;
        };
        if !matches!(
            tokio::time::timeout_at(deadline, keeper.keep_alive()).await,
            Ok(Ok(()))
        ) {
            // The request half is gone (the stream ended) or stuck.
            generation.close();
            return KeepAliveOutcome::Failed;
        }
        match tokio::time::timeout_at(deadline, answer).await {
            Ok(Ok(a)) if a.ttl > 0 => KeepAliveOutcome::Renewed {
                sent: a.sent,
                ttl: Some(Duration::from_secs(a.ttl as u64)),
            },
            Ok(Ok(_)) => KeepAliveOutcome::Gone,
            // The stream ended (or was closed) before answering.
            Ok(Err(_)) => KeepAliveOutcome::Failed,
            Err(_) => {
                // Nothing at all came back since the request left: the stream is stuck (a
                // frozen member, a lost connection); the next keep-alive opens another. If
                // other replies did come, it is only slow: the reply, when it comes, is dropped.
                if generation.silent_since(sent) {
                    tracing::debug!(
                        stream = generation.number,
                        "etcd keep-alive stream silent; replacing it"
                    );
                    generation.close();
                }
                KeepAliveOutcome::Failed
            }
        }
    }
}

impl Drop for KeepAlives {
    fn drop(&mut self) {
        if let Some(g) = self.current.get_mut().take() {
            g.close();
        }
    }
}

/// Reads a stream's replies and routes each to its request, until the stream ends or is
/// closed.
async fn read_replies(generation: Arc<Generation>, mut replies: ec::LeaseKeepAliveStream) {
    loop {
        let message = tokio::select! {
            m = replies.message() => m,
            _ = generation.stop.cancelled() => break,
        };
        match message {
            Ok(Some(reply)) => generation.answer(reply.id(), reply.ttl()),
            Ok(None) => {
                tracing::debug!(stream = generation.number, "etcd keep-alive stream ended");
                break;
            }
            Err(e) => {
                tracing::debug!(stream = generation.number, error = %e, "etcd keep-alive stream failed");
                break;
            }
        }
    }
    generation.close();
}
