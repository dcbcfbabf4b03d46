//! The history log of `memory://`: a capped queue of events per key in the namespace, behind
//! its own mutex (a lock operation never waits for it).
//!
//! **Guarantees.** At most [`HistoryOptions::cap`](crate::HistoryOptions::cap) events per key,
//! exactly; an event older than the retention is dropped when the key's history is next
//! written or read. Times are this process's clock. Like the locks, the history lives as long
//! as the process.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use futures_util::future::BoxFuture;

use crate::core::error::Result;
use crate::core::history::{HistoryEvent, HistoryLog, HistoryOptions};
use crate::core::token::validate_key;

use super::MemoryClient;
use super::store::Namespace;

/// Every key's events in one namespace, oldest first.
#[derive(Debug, Default)]
pub(super) struct Histories(Mutex<HashMap<String, VecDeque<HistoryEvent>>>);

/// The history log of `client`'s namespace.
pub(super) fn log(client: &MemoryClient, options: &HistoryOptions) -> Arc<dyn HistoryLog> {
    Arc::new(MemoryHistory {
        ns: client.ns.clone(),
        options: *options,
    })
}

#[derive(Debug)]
struct MemoryHistory {
    ns: Arc<Namespace>,
    options: HistoryOptions,
}

impl MemoryHistory {
    /// `key`'s events, with those past the retention dropped.
    fn with_events<T>(&self, key: &str, f: impl FnOnce(&mut VecDeque<HistoryEvent>) -> T) -> T {
        let mut all = self.ns.history.0.lock().unwrap_or_else(|p| p.into_inner());
        let events = all.entry(key.to_string()).or_default();
        if let Some(cutoff) = SystemTime::now().checked_sub(self.options.retention_period()) {
            while events.front().is_some_and(|e| e.at < cutoff) {
                events.pop_front();
            }
        }
        let out = f(events);
        if events.is_empty() {
            all.remove(key);
        }
        out
    }
}

impl HistoryLog for MemoryHistory {
    fn append<'a>(&'a self, key: &'a str, event: &'a HistoryEvent) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            validate_key(key)?;
            let cap = self.options.events_per_key() as usize;
            self.with_events(key, |events| {
                events.push_back(event.clone());
                while events.len() > cap {
                    events.pop_front();
                }
            });
            Ok(())
        })
    }

    fn read<'a>(&'a self, key: &'a str, limit: usize) -> BoxFuture<'a, Result<Vec<HistoryEvent>>> {
        Box::pin(async move {
            validate_key(key)?;
            Ok(self.with_events(key, |events| {
                events.iter().rev().take(limit).cloned().collect()
            }))
        })
    }
}
