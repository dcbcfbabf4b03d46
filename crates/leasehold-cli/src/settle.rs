//! Redlock only: before the process exits, let the nodes that had not answered yet catch up.

use std::time::{Duration, Instant};

use leasehold::redlock::RedlockOptions;
use leasehold::{LockState, LockToken, Locker};

use crate::target::Servers;

/// A Redlock operation returns as soon as a majority answered; its requests to the other
/// nodes go on in the background, and exiting now would drop those not sent yet (a released
/// lock would then stay on a minority of the nodes until its TTL). This waits until every node
/// shows `outcome`, but at most one per-node timeout (`--node-timeout`); a node that fails or
/// stays silent is left to the TTL. Nothing to do for any other backend.
pub async fn settle(
    locker: &Locker,
    servers: &Servers,
    key: &str,
    token: &LockToken,
    outcome: Outcome,
) {
    let Some(redlock) = locker.as_redlock() else {
        return;
    };
    let timeout = servers
        .node_timeout
        .unwrap_or_else(|| RedlockOptions::new().node_timeout_bound());
    let deadline = Instant::now() + timeout;
    // Polled, with a growing pause: a node timeout of seconds must not mean thousands of rounds.
    let backoff = leasehold::Backoff::new(Duration::from_millis(1), Duration::from_millis(50));
    let mut rounds = 0;
    loop {
        let settled = redlock
            .inspect_nodes(key)
            .await
            .iter()
            .all(|(_, state)| match state {
                Ok(state) => outcome.shown_by(state, token),
                Err(_) => true,
            });
        if settled || Instant::now() >= deadline {
            return;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        tokio::time::sleep(backoff.delay(rounds).min(left)).await;
        rounds += 1;
    }
}

/// What a node shows once an operation has reached it.
#[derive(Debug, Clone, Copy)]
pub enum Outcome {
    /// Acquired: the key is set (to our token, or someone else had that node).
    Acquired,
    /// Released: the key does not hold our token.
    Released,
    /// Extended to `ttl` by a request sent at `sent`: the key holds our token with at least
    /// `ttl` minus the time since, or it does not hold our token.
    Extended { ttl: Duration, sent: Instant },
}

impl Outcome {
    fn shown_by(self, state: &LockState, token: &LockToken) -> bool {
        let ours = state.holder.as_deref() == Some(token.expose());
        match self {
            Outcome::Acquired => state.holder.is_some(),
            Outcome::Released => !ours,
            Outcome::Extended { ttl, sent } => {
                // PTTL rounds down: a millisecond of slack.
                let floor = ttl.saturating_sub(sent.elapsed() + Duration::from_millis(1));
                !ours || state.ttl.is_some_and(|left| left >= floor)
            }
        }
    }
}
