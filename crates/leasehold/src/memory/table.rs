//! The forced release of a memory lock ([`Locker::force_release`](crate::Locker::force_release)).

use crate::core::error::{Error, Result};
use crate::core::listing::{ForceReleased, LockHolder, check_reason};
use crate::core::owner::Owner;
use crate::core::token::validate_key;

use super::MemoryClient;

impl MemoryClient {
    /// Takes `key`'s holder away whatever its token and bumps the fencing counter, in one step:
    /// the old holder's release and extend fail with [`Error::NotHeld`], its lease is reported
    /// lost at its next renewal, and every number issued later is above the counter returned.
    /// The record of who and why is the warn log line of
    /// [`Locker::force_release`](crate::Locker::force_release) (a memory table has no place
    /// that outlives the process).
    ///
    /// # Errors
    /// [`Error::NotHeld`] if nobody holds it; [`Error::InvalidArgument`] for a bad key or reason.
    pub(super) fn force(&self, key: &str, reason: &str) -> Result<ForceReleased> {
        validate_key(key)?;
        check_reason(reason)?;
        let (token, counter) = self.ns.force_release(key)?.ok_or_else(|| Error::NotHeld {
            key: key.to_string(),
        })?;
        Ok(ForceReleased {
            key: key.to_string(),
            previous: LockHolder::of_token(token, None),
            fencing_counter: Some(counter),
            forced_by: Owner::this_process(),
            reason: reason.to_string(),
        })
    }
}
