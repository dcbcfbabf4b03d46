//! Auto-extension through a guard's own [`HeldLock::extend`], for the backends whose extend is
//! cheap and local (memory, file): no renewal machinery of their own to keep in step.

use std::sync::Arc;
use std::time::Instant;

use crate::core::error::{Error, LossReason};
use crate::core::guard::{HeldLock, Lease};
use crate::core::options::LockOptions;

/// Extends `lease` every `options.renew_interval()` through `held` until it ends (released),
/// is lost, or reaches `max_hold`. A `NotHeld` reply marks the lease lost; any other error is
/// retried at the next tick (and [`Lease::lost`] reports a validity that runs out).
pub(crate) fn keep_alive(held: Arc<dyn HeldLock>, lease: Lease, options: &LockOptions) {
    let (every, ttl) = (options.renew_interval(), options.ttl());
    let stop_at = options.max_hold_bound().map(|cap| Instant::now() + cap);
    let lost = lease.lost_token();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = lost.cancelled() => return,
                _ = tokio::time::sleep(every) => {}
            }
            if lease.is_ended() || stop_at.is_some_and(|s| Instant::now() >= s) {
                return;
            }
            // Recorded as sent first: only a success raises the validity (guard.rs).
            let sent = Instant::now();
            let bound = sent + ttl.saturating_sub(held.drift(ttl));
            let sent_extend = lease.extend_sent(sent, bound);
            match held.extend(&lease, ttl).await {
                Ok(until) => sent_extend.confirm(until.min(bound)),
                Err(Error::NotHeld { .. }) => {
                    lease.mark_lost(LossReason::NotHeld);
                    return;
                }
                Err(e) => tracing::debug!(key = lease.key(), error = %e, "renewal failed"),
            }
        }
    });
}
