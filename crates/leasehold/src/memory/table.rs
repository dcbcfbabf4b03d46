//! The lock table of memory locks: [`Locker::list`](crate::Locker::list) and [`Locker::force_release`](crate::Locker::force_release).

use crate::core::error::{Error, Result};
use crate::core::listing::{ForceReleased, LockEntry, LockHolder, check_reason};
use crate::core::owner::Owner;
use crate::core::token::validate_key;

use super::MemoryClient;

impl MemoryClient {
    /// The held locks of this namespace whose keys match `pattern` (an atomic snapshot: the
    /// table is read under its mutex). Kind: always a lock; waiters: the waiting acquisitions.
    ///
    /// # Errors
    /// None today; `Result` for the contract.
    pub(crate) async fn list(&self, pattern: &str) -> Result<Vec<LockEntry>> {
        Ok(self.ns.list(pattern))
    }

    /// Takes `key`'s holder away whatever its token and bumps the fencing counter, in one step:
    /// the old holder's release and extend fail with [`Error::NotHeld`], its lease is reported
    /// lost at its next renewal, and every number issued later is above the counter returned.
    /// The record of who and why is the warn log line of
    /// [`Locker::force_release`](crate::Locker::force_release) (a memory table has no place
    /// that outlives the process).
    ///
    /// # Errors
    /// [`Error::NotHeld`] if nobody holds it; [`Error::InvalidArgument`] for a bad key or reason.
    pub(crate) async fn force_release(&self, key: &str, reason: &str) -> Result<ForceReleased> {
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
