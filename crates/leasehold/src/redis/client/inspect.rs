//! Reading what a lock key holds, and raising its fencing counter.

use std::time::Duration;

use crate::core::error::{Error, Operation, Result};
use crate::core::outcome::{LockState, MAX_FENCING_NUMBER};
use crate::redis::scripts::RAISE_COUNTER_SCRIPT;
use crate::redis::slot::fence_key;
use crate::redis::slot::validate_name;

use super::RedisClient;

impl RedisClient {
    /// Reads what `key` holds, its remaining TTL and its fencing counter, in one round trip.
    ///
    /// # Errors
    /// [`Error::Server`] with `WRONGTYPE` if the key is not a string; [`Error::Connection`].
    pub(crate) async fn inspect(&self, key: &str) -> Result<LockState> {
        validate_name(key)?;
        let fence = fence_key(key);
        let (holder, pttl, counter): (Option<String>, i64, Option<u64>) = self
            .idempotent(Operation::Inspect, |mut conn| {
                let pipe = redis::pipe().get(key).pttl(key).get(&fence).clone();
                async move { pipe.query_async(&mut conn).await }
            })
            .await?;
        Ok(LockState::new(
            key.to_string(),
            holder,
            (pttl >= 0).then(|| Duration::from_millis(pttl as u64)),
            counter,
        ))
    }

    /// Raises `key`'s fencing counter to at least `at_least` (it never lowers it) and returns
    /// the counter's value afterwards.
    ///
    /// For the holder whose number the protected resource refused at first contact
    /// ([`FencedRead::Rejected`](crate::FencedRead::Rejected) with `highest` above the number it
    /// was given): the counter went back, through a restart without persistence or a failover to
    /// a replica that missed the last increments. Until it climbs past `highest` again, every
    /// holder is refused; raising it to `highest` makes the next acquisition draw `highest + 1`.
    ///
    /// **Safe** because the counter only moves up: every number issued afterwards is still
    /// greater than every number issued before, which is all fencing needs. It touches no lock.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] (`what: "fencing counter"`) for `at_least` of
    /// [`MAX_FENCING_NUMBER`] or more: the scripts that issue numbers carry them as Lua numbers
    /// (doubles), which are exact only up to 2^53, and above it two holders could be handed the
    /// same number.
    pub(crate) async fn raise_fencing_counter(&self, key: &str, at_least: u64) -> Result<u64> {
        validate_name(key)?;
        if at_least >= MAX_FENCING_NUMBER {
            return Err(Error::InvalidArgument {
                what: "fencing counter",
                reason: format!(
                    "{at_least} is not below {MAX_FENCING_NUMBER} (2^53), the largest number \
                     the server's scripts issue exactly"
                ),
            });
        }
        let counter = fence_key(key);
        let value: String = self
            .idempotent(Operation::RaiseFencingCounter, |mut conn| {
                let mut inv = RAISE_COUNTER_SCRIPT.key(&counter);
                inv.arg(at_least);
                async move { inv.invoke_async(&mut conn).await }
            })
            .await?;
        value.parse().map_err(|_| Error::UnexpectedReply {
            op: Operation::RaiseFencingCounter,
            detail: format!("the fencing counter {counter:?} holds {value:?}, not a number"),
        })
    }
}
