//! `Locker` (a connection to one backend, any URL) and `Request` (what to take, how: built
//! once, then acquired as many times as wanted, blocking or as an awaitable).

use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::PyDict;

use leasehold::{
    ClientOptions, HistoryOptions, LockGuard, LockOptions, LockTarget, Locker as Core, Owner,
};

use crate::errors;
use crate::lease::Lease;
use crate::runtime::{Process, awaitable, block_on, duration};

/// A connection to a lock backend (`redis://`, `rediss://`, `redis-sentinel://`,
/// `redis-cluster://`, `redlock://`, `etcd://`, `etcds://`, `postgres://`, `memory://`,
/// `file://`). Cheap to share between threads and tasks.
#[pyclass(module = "leasehold._native", frozen)]
pub struct Locker {
    core: Core,
    /// The process that connected (its connections are useless in a forked child).
    owner: Process,
    /// This process's owner record, read once (host name and executable are system calls),
    /// not at every request.
    record: Owner,
}

/// What a request takes: a lock-like primitive, or an election's campaign.
#[derive(Clone)]
enum Target {
    Take(LockTarget),
    Campaign(String, String),
}

impl Target {
    async fn acquire(self, core: Core, options: LockOptions) -> leasehold::Result<LockGuard> {
        match self {
            Target::Campaign(name, id) => core.election(&name)?.campaign(&id, &options).await,
            Target::Take(what) => core.lockable(&what)?.acquire(&options).await,
        }
    }
}

/// A lock request: the target and its options, checked when made. `acquire()` blocks (GIL
/// released, Ctrl-C cancels the wait), `acquire_async()` is awaitable; both raise
/// `NotAcquired` if it is still busy when the wait ends (at once without a wait).
#[pyclass(module = "leasehold._native", frozen)]
pub struct Request {
    core: Core,
    owner: Process,
    target: Target,
    options: LockOptions,
}

impl Request {
    fn future(
        &self,
    ) -> impl std::future::Future<Output = leasehold::Result<Lease>> + Send + 'static {
        let (core, target, options) =
            (self.core.clone(), self.target.clone(), self.options.clone());
        async move { target.acquire(core, options).await.map(Lease::new) }
    }
}

#[pymethods]
impl Request {
    /// Takes it, waiting up to the request's `wait`.
    fn acquire(&self, py: Python<'_>) -> PyResult<Lease> {
        self.owner.check(py, "Locker's request")?;
        block_on(py, self.future())
    }

    /// `acquire()` as an awaitable (cancelling it gives up the wait, and never leaves the lock
    /// held).
    fn acquire_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.owner.check(py, "Locker's request")?;
        awaitable(py, self.future())
    }

    /// The key, or the primitive's name (the keys of a multi-lock, joined by commas).
    #[getter]
    fn key(&self) -> String {
        match &self.target {
            Target::Take(what) => what.name(),
            Target::Campaign(name, _) => name.clone(),
        }
    }
}

fn opt_duration(
    py: Python<'_>,
    what: &str,
    value: Option<&Bound<'_, PyAny>>,
) -> PyResult<Option<Duration>> {
    value
        .filter(|v| !v.is_none())
        .map(|v| duration(py, what, v))
        .transpose()
}

#[pymethods]
impl Locker {
    /// Connects (blocking, GIL released) and checks that the backend answers.
    #[new]
    #[pyo3(signature = (url, *, connect_timeout=None, response_timeout=None, tls_ca_file=None, tls_cert_file=None, tls_key_file=None, history=false))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        url: &str,
        connect_timeout: Option<&Bound<'_, PyAny>>,
        response_timeout: Option<&Bound<'_, PyAny>>,
        tls_ca_file: Option<std::path::PathBuf>,
        tls_cert_file: Option<std::path::PathBuf>,
        tls_key_file: Option<std::path::PathBuf>,
        history: bool,
    ) -> PyResult<Self> {
        let options = client_options(
            py,
            connect_timeout,
            response_timeout,
            [tls_ca_file, tls_cert_file, tls_key_file],
            history,
        )?;
        block_on(py, connect(url.to_string(), options))
    }

    /// The backend's name: `"redis"`, `"redlock"`, `"etcd"`, `"postgres"`, `"memory"`,
    /// `"file"`.
    #[getter]
    fn backend(&self) -> &'static str {
        self.core.backend()
    }

    /// A request for `key` (`kind`: `"lock"`, `"semaphore"` with `permits`, `"read"`,
    /// `"write"`, `"multi"` with `keys`, `"campaign"` with `id`). The options are those of
    /// `leasehold::LockOptions`; durations in seconds or as `datetime.timedelta`.
    #[pyo3(signature = (kind, key, *, ttl, wait=None, fencing=false, auto_extend=false, fair=false, permits=None, keys=None, id=None, max_hold=None, min_hold=None, renew_every=None, owner_label=None, owner=true))]
    #[allow(clippy::too_many_arguments)]
    fn request(
        &self,
        py: Python<'_>,
        kind: &str,
        key: &str,
        ttl: &Bound<'_, PyAny>,
        wait: Option<&Bound<'_, PyAny>>,
        fencing: bool,
        auto_extend: bool,
        fair: bool,
        permits: Option<u32>,
        keys: Option<Vec<String>>,
        id: Option<String>,
        max_hold: Option<&Bound<'_, PyAny>>,
        min_hold: Option<&Bound<'_, PyAny>>,
        renew_every: Option<&Bound<'_, PyAny>>,
        owner_label: Option<String>,
        owner: bool,
    ) -> PyResult<Request> {
        self.owner.check(py, "Locker")?;
        let mut options = LockOptions::new(duration(py, "ttl", ttl)?)
            .fencing(fencing)
            .auto_extend(auto_extend)
            .fair(fair);
        if let Some(w) = opt_duration(py, "wait", wait)? {
            options = options.wait(w);
        }
        if let Some(d) = opt_duration(py, "max_hold", max_hold)? {
            options = options.max_hold(d);
        }
        if let Some(d) = opt_duration(py, "min_hold", min_hold)? {
            options = options.min_hold(d);
        }
        if let Some(d) = opt_duration(py, "renew_every", renew_every)? {
            options = options.renew_every(d);
        }
        if owner || owner_label.is_some() {
            let mut record = self.record.clone();
            if let Some(label) = owner_label {
                record = record.label(label).map_err(|e| errors::to_py(py, e))?;
            }
            options = options.owner(record);
        }
        options.validate().map_err(|e| errors::to_py(py, e))?;
        let target = match (kind, permits, keys, id) {
            ("lock", None, None, None) => Target::Take(LockTarget::Lock(key.into())),
            ("semaphore", Some(permits), None, None) => Target::Take(LockTarget::Semaphore {
                name: key.into(),
                permits,
            }),
            ("read", None, None, None) => Target::Take(LockTarget::Read(key.into())),
            ("write", None, None, None) => Target::Take(LockTarget::Write(key.into())),
            ("multi", None, Some(keys), None) => Target::Take(LockTarget::Multi(keys)),
            ("campaign", None, None, Some(id)) => Target::Campaign(key.into(), id),
            _ => {
                return Err(errors::invalid(
                    py,
                    format!("invalid request: kind {kind:?} with these arguments"),
                ));
            }
        };
        Ok(Request {
            core: self.core.clone(),
            owner: self.owner,
            target,
            options,
        })
    }

    /// What the server says about `key` (no lock taken): a dict with `holder` (the token),
    /// `ttl` (seconds or None), `fencing_counter`, `owner`.
    fn inspect<'py>(&self, py: Python<'py>, key: &str) -> PyResult<Bound<'py, PyDict>> {
        self.owner.check(py, "Locker")?;
        let (core, key) = (self.core.clone(), key.to_string());
        let state = block_on(py, async move { core.inspect(&key).await })?;
        let d = PyDict::new(py);
        d.set_item("key", &state.key)?;
        d.set_item("holder", state.holder.as_deref())?;
        d.set_item("ttl", state.ttl.map(|t| t.as_secs_f64()))?;
        d.set_item("fencing_counter", state.fencing_counter)?;
        d.set_item("owner", state.owner.map(|o| o.to_string()))?;
        Ok(d)
    }

    /// The locks whose keys match `pattern` (`*` and `?` globs): a list of dicts with `key`,
    /// `kind` (`lock`, `fair`, `permits`, `read`, `election`), `holders` (each a dict of
    /// `holder` (redacted), `owner`, `ttl`), `ttl`, `fencing_counter`, `waiters`, `permits`.
    fn list<'py>(&self, py: Python<'py>, pattern: &str) -> PyResult<Vec<Bound<'py, PyDict>>> {
        self.owner.check(py, "Locker")?;
        let (core, pattern) = (self.core.clone(), pattern.to_string());
        let entries = block_on(py, async move { core.list(&pattern).await })?;
        let secs = |d: Option<Duration>| d.map(|d| d.as_secs_f64());
        entries
            .into_iter()
            .map(|e| {
                let d = PyDict::new(py);
                d.set_item("key", &e.key)?;
                d.set_item("kind", e.kind.name())?;
                let holders = e
                    .holders
                    .iter()
                    .map(|h| {
                        let hd = PyDict::new(py);
                        hd.set_item("holder", h.token.redacted())?;
                        hd.set_item("owner", h.owner.as_ref().map(|o| o.to_string()))?;
                        hd.set_item("ttl", secs(h.ttl))?;
                        Ok(hd)
                    })
                    .collect::<PyResult<Vec<_>>>()?;
                d.set_item("holders", holders)?;
                d.set_item("ttl", secs(e.ttl))?;
                d.set_item("fencing_counter", e.fencing_counter)?;
                d.set_item("waiters", e.waiters)?;
                d.set_item("permits", e.permits)?;
                Ok(d)
            })
            .collect()
    }

    /// The last `limit` history events of `key`, newest first (with `Locker(..., history=True)`
    /// on the writers): dicts with `at` (seconds since the epoch), `kind` (`acquired`,
    /// `released`, `lost`, `forced`, `handed-over`), `fencing`, `holder`, `owner`, `detail`.
    fn history<'py>(
        &self,
        py: Python<'py>,
        key: &str,
        limit: usize,
    ) -> PyResult<Vec<Bound<'py, PyDict>>> {
        self.owner.check(py, "Locker")?;
        let (core, key) = (self.core.clone(), key.to_string());
        let events = block_on(py, async move { core.history(&key, limit).await })?;
        events
            .into_iter()
            .map(|e| {
                let d = PyDict::new(py);
                let at =
                    e.at.duration_since(std::time::UNIX_EPOCH)
                        .map_or(0.0, |d| d.as_secs_f64());
                d.set_item("at", at)?;
                d.set_item("kind", e.kind.as_str())?;
                d.set_item("fencing", e.fencing)?;
                d.set_item("holder", e.holder)?;
                d.set_item("owner", e.owner)?;
                d.set_item("detail", e.detail)?;
                Ok(d)
            })
            .collect()
    }

    /// The current leader of election `name`: `(id, term)`, or None.
    fn leader(&self, py: Python<'_>, name: &str) -> PyResult<Option<(String, u64)>> {
        self.owner.check(py, "Locker")?;
        let election = self.core.election(name).map_err(|e| errors::to_py(py, e))?;
        let leader = block_on(py, async move { election.leader().await })?;
        Ok(leader.map(|l| (l.id, l.term)))
    }

    /// Follows the leadership of election `name`, reading it at least every `every`.
    fn watch_leader(
        &self,
        py: Python<'_>,
        name: &str,
        every: &Bound<'_, PyAny>,
    ) -> PyResult<crate::watch::LeaderWatch> {
        self.owner.check(py, "Locker")?;
        let every = duration(py, "every", every)?;
        let election = self.core.election(name).map_err(|e| errors::to_py(py, e))?;
        Ok(crate::watch::LeaderWatch::start(&election, every))
    }

    /// Raises `key`'s fencing counter to at least `at_least` (after a restore or a move to
    /// another server, so that no number is issued twice); returns the counter.
    fn raise_fencing_counter(&self, py: Python<'_>, key: &str, at_least: u64) -> PyResult<u64> {
        self.owner.check(py, "Locker")?;
        let (core, key) = (self.core.clone(), key.to_string());
        block_on(py, async move {
            core.raise_fencing_counter(&key, at_least).await
        })
    }

    /// Releases `key` held with `token` (a token taken elsewhere: another process, the CLI);
    /// `fair`: a fair lock, handed to its longest waiter.
    fn release(&self, py: Python<'_>, key: &str, token: &str, fair: bool) -> PyResult<()> {
        self.owner.check(py, "Locker")?;
        let token = leasehold::LockToken::new(token).map_err(|e| errors::to_py(py, e))?;
        let (core, key) = (self.core.clone(), key.to_string());
        block_on(py, async move {
            match fair {
                true => core.release_fair(&key, &token).await,
                false => core.release(&key, &token).await,
            }
        })
    }

    /// Sets the validity of `key`, held with `token` (taken elsewhere), to `ttl` from now.
    fn extend(
        &self,
        py: Python<'_>,
        key: &str,
        token: &str,
        ttl: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        self.owner.check(py, "Locker")?;
        let ttl = duration(py, "ttl", ttl)?;
        let token = leasehold::LockToken::new(token).map_err(|e| errors::to_py(py, e))?;
        let (core, key) = (self.core.clone(), key.to_string());
        block_on(py, async move { core.extend(&key, &token, ttl).await })
    }

    /// Removes `key`'s holder whatever its token, bumps its fencing counter (so the old
    /// holder's numbers are refused) and records `reason`. Returns the counter after the bump.
    fn force_release(&self, py: Python<'_>, key: &str, reason: &str) -> PyResult<Option<u64>> {
        self.owner.check(py, "Locker")?;
        let (core, key, reason) = (self.core.clone(), key.to_string(), reason.to_string());
        let out = block_on(py, async move { core.force_release(&key, &reason).await })?;
        Ok(out.fencing_counter)
    }

    fn __repr__(&self) -> String {
        format!("<Locker {}>", self.core.backend())
    }
}

/// The client options of `Locker(...)` and `connect_async(...)`.
fn client_options(
    py: Python<'_>,
    connect_timeout: Option<&Bound<'_, PyAny>>,
    response_timeout: Option<&Bound<'_, PyAny>>,
    [ca, cert, key]: [Option<std::path::PathBuf>; 3],
    history: bool,
) -> PyResult<ClientOptions> {
    let mut options = ClientOptions::new();
    if let Some(t) = opt_duration(py, "connect_timeout", connect_timeout)? {
        options = options.connect_timeout(t);
    }
    if let Some(t) = opt_duration(py, "response_timeout", response_timeout)? {
        options = options.response_timeout(t);
    }
    if let Some(p) = ca {
        options = options.tls_ca_file(p);
    }
    if let Some(p) = cert {
        options = options.tls_cert_file(p);
    }
    if let Some(p) = key {
        options = options.tls_key_file(p);
    }
    if history {
        options = options.history(HistoryOptions::default());
    }
    Ok(options)
}

/// `Locker(url, ...)` as an awaitable: connects without blocking the event loop.
#[pyfunction]
#[pyo3(signature = (url, *, connect_timeout=None, response_timeout=None, tls_ca_file=None, tls_cert_file=None, tls_key_file=None, history=false))]
#[allow(clippy::too_many_arguments)]
pub fn connect_async<'py>(
    py: Python<'py>,
    url: &str,
    connect_timeout: Option<&Bound<'_, PyAny>>,
    response_timeout: Option<&Bound<'_, PyAny>>,
    tls_ca_file: Option<std::path::PathBuf>,
    tls_cert_file: Option<std::path::PathBuf>,
    tls_key_file: Option<std::path::PathBuf>,
    history: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let options = client_options(
        py,
        connect_timeout,
        response_timeout,
        [tls_ca_file, tls_cert_file, tls_key_file],
        history,
    )?;
    awaitable(py, connect(url.to_string(), options))
}

/// Connects a `Locker` (the future behind both `Locker(...)` and `connect_async`).
async fn connect(url: String, options: ClientOptions) -> leasehold::Result<Locker> {
    let core = Core::connect_with(&url, options).await?;
    Ok(Locker {
        core,
        owner: Process::this(),
        record: Owner::this_process(),
    })
}
