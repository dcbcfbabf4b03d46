//! `Locker` (a connection to one backend, any URL) and `Cancel` (what an `AbortSignal` fires).

use napi::Env;
use napi::bindgen_prelude::{AsyncBlock, AsyncBlockBuilder};
use napi_derive::napi;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use leasehold::{LockGuard, LockOptions, LockTarget, Locker as Core, Owner};

use crate::errors::{self, IntoJs, invalid};
use crate::lease::Lease;
use crate::options::{ConnectOptions, Request, millis};

/// A connection to a lock backend (`redis://`, `rediss://`, `redis-sentinel://`,
/// `redis-cluster://`, `redlock://`, `etcd://`, `etcds://`, `postgres://`, `memory://`,
/// `file://`). Cheap to share.
#[napi]
pub struct Locker {
    core: Core,
    /// This process's owner record, read once (host name and executable are system calls).
    record: Owner,
}

/// Cancels the wait of the acquisitions it is passed to (`index.js` fires it from an
/// `AbortSignal`'s `abort` event).
#[napi]
#[derive(Default)]
pub struct Cancel {
    token: CancellationToken,
}

#[napi]
impl Cancel {
    /// A cancel not fired yet.
    #[napi(constructor)]
    pub fn new() -> Self {
        Self::default()
    }

    /// Fires it: each wait it was passed to gives up (nothing is left held).
    #[napi]
    pub fn cancel(&self) {
        self.token.cancel();
    }
}

impl Cancel {
    /// The token the waits select on.
    pub(crate) fn token(&self) -> CancellationToken {
        self.token.clone()
    }
}

/// Connects to `url` and checks that the backend answers.
#[napi]
pub async fn connect(url: String, options: Option<ConnectOptions>) -> napi::Result<Locker> {
    let options = options.unwrap_or_default().client()?;
    let core = Core::connect_with(&url, options).await.js()?;
    Ok(Locker {
        core,
        record: Owner::this_process(),
    })
}

/// What a request takes: a lock-like primitive, or an election's campaign.
enum Target {
    Take(LockTarget),
    Campaign(String, String),
}

impl Target {
    fn of(request: &Request) -> napi::Result<Self> {
        let key = request.key.clone();
        Ok(
            match (
                request.kind.as_str(),
                request.permits,
                &request.keys,
                &request.id,
            ) {
                ("lock", None, None, None) => Target::Take(LockTarget::Lock(key)),
                ("semaphore", Some(permits), None, None) => {
                    Target::Take(LockTarget::Semaphore { name: key, permits })
                }
                ("read", None, None, None) => Target::Take(LockTarget::Read(key)),
                ("write", None, None, None) => Target::Take(LockTarget::Write(key)),
                ("multi", None, Some(keys), None) => Target::Take(LockTarget::Multi(keys.clone())),
                ("campaign", None, None, Some(id)) => Target::Campaign(key, id.clone()),
                (kind, ..) => {
                    return Err(invalid(format!(
                        "invalid request: kind {kind:?} with these arguments"
                    )));
                }
            },
        )
    }

    async fn acquire(self, core: Core, options: LockOptions) -> leasehold::Result<LockGuard> {
        match self {
            Target::Campaign(name, id) => core.election(&name)?.campaign(&id, &options).await,
            Target::Take(what) => core.lockable(&what)?.acquire(&options).await,
        }
    }
}

/// A duration (a TTL) in ms, or null.
fn secs_to_ms(d: Option<std::time::Duration>) -> Value {
    d.map_or(Value::Null, |d| json!(d.as_secs_f64() * 1000.0))
}

#[napi]
impl Locker {
    /// The backend's name: `redis`, `redlock`, `etcd`, `postgres`, `memory`, `file`.
    #[napi(getter)]
    pub fn backend(&self) -> &'static str {
        self.core.backend()
    }

    /// Takes what `request` names, waiting up to its `wait`; rejects with `NotAcquired` if it
    /// is still busy when the wait ends (at once without a wait). Firing `cancel` gives up the
    /// wait: the promise rejects with `Aborted`, and nothing is left held (the library gives
    /// back whatever the abandoned attempt had taken).
    #[napi(ts_return_type = "Promise<Lease>")]
    pub fn acquire(
        &self,
        env: Env,
        request: Request,
        cancel: Option<&Cancel>,
    ) -> napi::Result<AsyncBlock<Lease>> {
        let options = request.options(&self.record)?;
        let target = Target::of(&request)?;
        let (core, key) = (self.core.clone(), request.key);
        let cancel = cancel.map(Cancel::token);
        let fut = async move {
            let acquire = target.acquire(core, options);
            let guard = match cancel {
                None => acquire.await,
                Some(cancel) => tokio::select! {
                    biased;
                    _ = cancel.cancelled() => return Err(errors::aborted(&key)),
                    r = acquire => r,
                },
            };
            guard.map(Lease::new).js()
        };
        AsyncBlockBuilder::new(fut).build(&env)
    }

    /// What the server says about `key` (no lock taken): `{ key, holder, ttl, fencingCounter,
    /// owner }` (`holder` redacted, `ttl` in ms or null).
    #[napi(ts_return_type = "Promise<Record<string, unknown>>")]
    pub async fn inspect(&self, key: String) -> napi::Result<Value> {
        let state = self.core.inspect(&key).await.js()?;
        Ok(json!({
            "key": state.key,
            "holder": state.holder,
            "ttl": secs_to_ms(state.ttl),
            "fencingCounter": state.fencing_counter,
            "owner": state.owner.map(|o| o.to_string()),
        }))
    }

    /// The locks whose keys match `pattern` (`*` and `?` globs).
    #[napi(ts_return_type = "Promise<Array<Record<string, unknown>>>")]
    pub async fn list(&self, pattern: String) -> napi::Result<Value> {
        let entries = self.core.list(&pattern).await.js()?;
        Ok(Value::Array(
            entries
                .into_iter()
                .map(|e| {
                    let holders: Vec<Value> = e
                        .holders
                        .iter()
                        .map(|h| {
                            json!({
                                "holder": h.token.redacted(),
                                "owner": h.owner.as_ref().map(|o| o.to_string()),
                                "ttl": secs_to_ms(h.ttl),
                            })
                        })
                        .collect();
                    json!({
                        "key": e.key,
                        "kind": e.kind.name(),
                        "holders": holders,
                        "ttl": secs_to_ms(e.ttl),
                        "fencingCounter": e.fencing_counter,
                        "waiters": e.waiters,
                        "permits": e.permits,
                    })
                })
                .collect(),
        ))
    }

    /// The last `limit` history events of `key`, newest first.
    #[napi(ts_return_type = "Promise<Array<Record<string, unknown>>>")]
    pub async fn history(&self, key: String, limit: u32) -> napi::Result<Value> {
        let events = self.core.history(&key, limit as usize).await.js()?;
        Ok(Value::Array(
            events
                .into_iter()
                .map(|e| {
                    let at =
                        e.at.duration_since(std::time::UNIX_EPOCH)
                            .map_or(0.0, |d| d.as_secs_f64() * 1000.0);
                    json!({
                        "at": at,
                        "kind": e.kind.as_str(),
                        "fencing": e.fencing,
                        "holder": e.holder,
                        "owner": e.owner,
                        "detail": e.detail,
                    })
                })
                .collect(),
        ))
    }

    /// The current leader of election `name`: `{ id, term }`, or null.
    #[napi(ts_return_type = "Promise<{ id: string; term: number } | null>")]
    pub async fn leader(&self, name: String) -> napi::Result<Value> {
        let election = self.core.election(&name).js()?;
        let leader = election.leader().await.js()?;
        Ok(leader.map_or(Value::Null, |l| json!({ "id": l.id, "term": l.term })))
    }

    /// Raises `key`'s fencing counter to at least `atLeast`; returns the counter.
    #[napi]
    pub async fn raise_fencing_counter(&self, key: String, at_least: f64) -> napi::Result<f64> {
        if !(at_least.is_finite() && at_least >= 0.0 && at_least.fract() == 0.0) {
            return Err(invalid(format!(
                "atLeast must be a whole number 0 or more, not {at_least}"
            )));
        }
        let n = self
            .core
            .raise_fencing_counter(&key, at_least as u64)
            .await
            .js()?;
        Ok(n as f64)
    }

    /// Releases `key` held with `token` (taken elsewhere: another process, the CLI); `fair`: a
    /// fair lock, handed to its longest waiter.
    #[napi]
    pub async fn release_token(&self, key: String, token: String, fair: bool) -> napi::Result<()> {
        let token = leasehold::LockToken::new(token).js()?;
        match fair {
            true => self.core.release_fair(&key, &token).await,
            false => self.core.release(&key, &token).await,
        }
        .js()
    }

    /// Sets the validity of `key`, held with `token` (taken elsewhere), to `ttl` ms from now.
    #[napi]
    pub async fn extend_token(&self, key: String, token: String, ttl: f64) -> napi::Result<()> {
        let ttl = millis("ttl", ttl, true)?;
        let token = leasehold::LockToken::new(token).js()?;
        self.core.extend(&key, &token, ttl).await.js()
    }

    /// Removes `key`'s holder whatever its token, bumps its fencing counter and records
    /// `reason`; returns the counter after the bump (null where there is none).
    #[napi]
    pub async fn force_release(&self, key: String, reason: String) -> napi::Result<Option<f64>> {
        let out = self.core.force_release(&key, &reason).await.js()?;
        Ok(out.fencing_counter.map(|n| n as f64))
    }

    /// Follows the leadership of election `name`, reading it at least every `every` ms.
    #[napi]
    pub fn watch_leader(
        &self,
        name: String,
        every: f64,
    ) -> napi::Result<crate::watch::LeaderWatch> {
        let every = millis("every", every, true)?;
        let election = self.core.election(&name).js()?;
        Ok(crate::watch::LeaderWatch::start(&election, every))
    }
}
