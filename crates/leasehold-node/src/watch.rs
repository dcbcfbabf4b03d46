//! `LeaderWatch`: the changes of an election's leadership, one promise at a time
//! (`index.js` makes it an async iterator).

use std::sync::Arc;
use std::time::Duration;

use napi_derive::napi;
use serde_json::{Value, json};

use napi::Env;
use napi::bindgen_prelude::{AsyncBlock, AsyncBlockBuilder};

use crate::errors::{IntoJs, watch_aborted};
use crate::locker::Cancel;

/// Follows an election's leadership (made by `Locker.watchLeader`): each change of term, or
/// the election left without a leader.
#[napi]
pub struct LeaderWatch {
    /// The election's name (for the error of a watch aborted).
    name: Arc<str>,
    watch: Arc<tokio::sync::Mutex<leasehold::LeaderWatch>>,
}

fn leader(l: Option<leasehold::Leader>) -> Value {
    l.map_or(Value::Null, |l| json!({ "id": l.id, "term": l.term }))
}

impl LeaderWatch {
    /// Starts following `election` (its task runs on the runtime), checking at least `every`.
    pub(crate) fn start(election: &leasehold::Election, every: Duration) -> Self {
        let watch = napi::bindgen_prelude::within_runtime_if_available(|| election.watch(every));
        LeaderWatch {
            name: election.name().into(),
            watch: Arc::new(tokio::sync::Mutex::new(watch)),
        }
    }
}

#[napi]
impl LeaderWatch {
    /// The leader as last seen: `{ id, term }`, or null (nobody, or not read yet).
    #[napi(getter, ts_return_type = "{ id: string; term: number } | null")]
    pub fn current(&self) -> Value {
        leader(self.watch.try_lock().ok().and_then(|w| w.current()))
    }

    /// The next change: the new leader, or null when nobody leads. Firing `cancel` rejects
    /// it with `Aborted` (a pending wait would otherwise keep Node's event loop alive).
    #[napi(ts_return_type = "Promise<{ id: string; term: number } | null>")]
    pub fn changed(&self, env: Env, cancel: &Cancel) -> napi::Result<AsyncBlock<Value>> {
        let (watch, cancel, name) = (self.watch.clone(), cancel.token(), self.name.clone());
        let fut = async move {
            tokio::select! {
                _ = cancel.cancelled() => Err(watch_aborted(&name)),
                next = async { watch.lock().await.changed().await } => Ok(leader(next.js()?)),
            }
        };
        AsyncBlockBuilder::new(fut).build(&env)
    }
}
