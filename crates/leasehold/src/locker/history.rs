//! The lock history through a [`Locker`]: recording when on, and reading.

use std::sync::Arc;

use super::Locker;
use crate::core::error::{Error, Result};
use crate::core::guard::LockGuard;
use crate::core::history::{HistoryEvent, HistoryKind, HistoryLog, HistoryOptions};
use crate::core::token::LockToken;

/// The lock history (see [`HistoryOptions`]): recording when on, and reading.
impl Locker {
    /// Up to `limit` of `key`'s newest history events, newest first (none if nothing was
    /// recorded). Works whether this locker records history or not.
    ///
    /// # Errors
    /// [`Error::Unsupported`] on a backend without a history log (Redlock, `file://`);
    /// [`Error::InvalidArgument`] for a bad key; connection and server errors.
    pub async fn history(&self, key: &str, limit: usize) -> Result<Vec<HistoryEvent>> {
        crate::core::token::validate_key(key)?;
        let log = match &self.history {
            Some(log) => log.clone(),
            None => self.history_log(&HistoryOptions::default())?,
        };
        log.read(key, limit).await
    }

    /// Whether this locker records lock history ([`ClientOptions::history`](crate::ClientOptions::history)).
    pub fn records_history(&self) -> bool {
        self.history.is_some()
    }

    /// The backend's history log, or the refusal naming the backend.
    pub(super) fn history_log(&self, options: &HistoryOptions) -> Result<Arc<dyn HistoryLog>> {
        self.backend
            .history_log(options)
            .ok_or_else(|| Error::Unsupported {
                backend: self.backend(),
                what: "a lock history (backends that keep one: redis, etcd, postgres, \
                       postgres-lease, memory)"
                    .into(),
            })
    }

    /// This locker, recording history as `options` say: what [`ClientOptions::history`](crate::ClientOptions::history) does
    /// when connecting, for a locker made from a client (`Locker::from(RedisClient)`). Clones
    /// made before keep their setting.
    ///
    /// # Errors
    /// [`Error::Unsupported`] on a backend without a history log (Redlock, `file://`), at once
    /// rather than at the first lock; [`Error::InvalidArgument`] for a cap or retention out of
    /// bounds.
    pub fn with_history(mut self, options: HistoryOptions) -> Result<Self> {
        options.validate()?;
        self.history = Some(self.history_log(&options)?);
        // Where the backend can, its lock operations append their own events.
        if let Some(recording) = self.backend.recording(&options) {
            self.backend = recording;
        }
        Ok(self)
    }

    /// Hands `guard` the log for its acquisition, release and loss (appended in the
    /// background: see `LockGuard::record_history`), and waits a bounded time for the
    /// acquisition's event (`LockGuard::acquisition_recorded`).
    pub(super) async fn record_acquired(&self, guard: &mut LockGuard) {
        if let Some(log) = &self.history {
            guard.record_history(log.clone());
            guard.acquisition_recorded().await;
        }
    }

    /// Records a release (or handover) by token, whose fencing number is not known here.
    pub(super) async fn record_by_token(&self, key: &str, token: &LockToken, kind: HistoryKind) {
        if let Some(log) = &self.history {
            let event = HistoryEvent::of_holder(kind, token);
            crate::core::history::record(&**log, key, event).await;
        }
    }

    /// Records that an operator forced `key` free (`force-release`): the holder removed, the
    /// fencing number the counter was raised to, the reason and who forced it; a no-op when
    /// this locker does not record.
    pub(super) async fn record_forced(&self, forced: &crate::ForceReleased) {
        if let Some(log) = &self.history {
            let event = HistoryEvent {
                fencing: forced.fencing_counter,
                detail: Some(format!(
                    "{} (forced by {})",
                    forced.reason, forced.forced_by
                )),
                ..HistoryEvent::of_holder(HistoryKind::Forced, &forced.previous.token)
            };
            crate::core::history::record(&**log, &forced.key, event).await;
        }
    }
}
