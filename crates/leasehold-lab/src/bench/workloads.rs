//! The workloads, run in this process: leasehold itself and the floor (the same commands through
//! `redis` with no lock logic).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use leasehold::redis::{RedisClient, RedisOptions};
use leasehold::redlock::{Redlock, RedlockOptions};
use leasehold::{LockOptions, Locker};

use super::redis_floors::floor_set;
use super::stats::{Latencies, Summary};

/// Which tokio runtime a workload runs on (W1 compares each flavour with itself).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flavour {
    MultiThread,
    CurrentThread,
}

impl Flavour {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Flavour::MultiThread => "multi_thread",
            Flavour::CurrentThread => "current_thread",
        }
    }
}

/// Runs `work` on a fresh runtime of `flavour` in a thread of its own, so the runner's runtime
/// does not share the cores' attention with it.
pub(crate) fn on_runtime<F, Fut, T>(flavour: Flavour, work: F) -> anyhow::Result<T>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = anyhow::Result<T>>,
    T: Send + 'static,
{
    std::thread::spawn(move || {
        let rt = match flavour {
            Flavour::MultiThread => tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build(),
            Flavour::CurrentThread => tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build(),
        }
        .context("cannot build a runtime")?;
        rt.block_on(work())
    })
    .join()
    .map_err(|_| anyhow::anyhow!("benchmark thread panicked"))?
}

/// W1's warm-up for `cycles` measured: a tenth, at least 20.
pub(crate) fn warm_ups(cycles: u64) -> u64 {
    (cycles / 10).max(20)
}

/// Runs `cycle` on `warm` warm-up keys (`{prefix}:warm:{i}`: connections, scripts, allocator),
/// then times it on `cycles` keys (`{prefix}:{i}`): the summary and the latency CDF.
pub(crate) async fn measure_cycles<F, Fut>(
    cycles: u64,
    warm: u64,
    prefix: &str,
    mut cycle: F,
) -> anyhow::Result<(Summary, Vec<(f64, f64)>)>
where
    F: FnMut(String) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    for i in 0..warm {
        cycle(format!("{prefix}:warm:{i}")).await?;
    }
    let mut lat = Latencies::new();
    let start = Instant::now();
    for i in 0..cycles {
        let t = Instant::now();
        cycle(format!("{prefix}:{i}")).await?;
        lat.record(t.elapsed());
    }
    Ok((
        Summary::from_latencies(cycles, start.elapsed(), &lat),
        lat.cdf(),
    ))
}

/// [`measure_cycles`] of `try_acquire` + `release` through `locker`.
async fn lock_cycles(
    locker: &Locker,
    opts: &LockOptions,
    cycles: u64,
    warm: u64,
    prefix: &str,
) -> anyhow::Result<(Summary, Vec<(f64, f64)>)> {
    measure_cycles(cycles, warm, prefix, |key| async move {
        let g = locker.try_acquire(&key, opts).await?;
        g.acquired().context("distinct key busy")?.release().await?;
        Ok(())
    })
    .await
}

/// W1 for leasehold: one task, `cycles` try_acquire + release on distinct keys; with `history`,
/// the locker records the lock history (default cap and retention).
pub(crate) async fn w1_leasehold(
    url: String,
    cycles: u64,
    prefix: String,
    notify: bool,
    history: bool,
) -> anyhow::Result<(Summary, Vec<(f64, f64)>)> {
    let options = RedisOptions::new().notify_waiters(notify);
    let client = RedisClient::connect_with(&url, options).await?;
    let release = client.release_strategy();
    let mut client = Locker::from(client);
    if history {
        client = client.with_history(leasehold::HistoryOptions::default())?;
    }
    let opts = LockOptions::new(Duration::from_secs(10));
    let (summary, cdf) = lock_cycles(&client, &opts, cycles, 200, &prefix).await?;
    Ok((summary.with("release", release.to_string()), cdf))
}

/// W1 through the one lock API ([`Locker`], any backend): `cycles` try_acquire + release on
/// distinct keys, after `cycles / 10` (at least 20) warm-up cycles; with `auto_extend`, the
/// locks are auto-extended (on etcd they then ride on the client's session lease instead of a
/// lease of its own for each, reused from one lock to the next); with `history`, the locker
/// records the lock history.
pub(crate) async fn w1_locker(
    url: String,
    cycles: u64,
    prefix: String,
    auto_extend: bool,
    history: bool,
) -> anyhow::Result<(Summary, Vec<(f64, f64)>)> {
    let mut locker = Locker::connect(&url).await?;
    if history {
        locker = locker.with_history(leasehold::HistoryOptions::default())?;
    }
    let opts = LockOptions::new(Duration::from_secs(10)).auto_extend(auto_extend);
    let (summary, cdf) = lock_cycles(&locker, &opts, cycles, warm_ups(cycles), &prefix).await?;
    Ok((summary.with("backend", locker.backend()), cdf))
}

/// What a W2 task runs for each cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum W2System {
    /// leasehold's `try_acquire` and `release`; `notify`: releases publish for waiters.
    Leasehold { notify: bool },
    /// The floor: `SET NX PX` and `DEL`, through `redis` with no lock logic.
    Floor,
    /// The least a safe lock sends, through `redis` with no lock logic: a fresh random token
    /// ([`leasehold::LockToken::random`]) in `SET NX PX`, and the server's own token-checked
    /// delete (`DELEX IFEQ`, `DELIFEQ`, or a script where the server has neither);
    /// `notify`: with a `PUBLISH` pipelined, as leasehold's release sends to wake waiters.
    /// It shows how much of the gap to the floor is the commands' own cost (on the server and
    /// in the client's I/O) rather than leasehold's logic.
    TokenChecked { notify: bool },
}

/// The server's token-checked delete, as the token-checked floor sends it.
#[derive(Debug, Clone, Copy)]
enum CheckedDelete {
    DelEx,
    DelIfEq,
    Script,
}

impl CheckedDelete {
    /// The fastest one the server has (what leasehold picks too).
    async fn of(conn: &mut redis::aio::ConnectionManager) -> anyhow::Result<Self> {
        for (name, which) in [("DELEX", Self::DelEx), ("DELIFEQ", Self::DelIfEq)] {
            let info: Vec<redis::Value> = redis::cmd("COMMAND")
                .arg("INFO")
                .arg(name)
                .query_async(conn)
                .await?;
            if info.iter().any(|v| !matches!(v, redis::Value::Nil)) {
                return Ok(which);
            }
        }
        Ok(Self::Script)
    }

    fn cmd(self, key: &str, token: &str) -> redis::Cmd {
        let mut cmd = match self {
            Self::DelEx => redis::cmd("DELEX"),
            Self::DelIfEq => redis::cmd("DELIFEQ"),
            Self::Script => {
                let mut c = redis::cmd("EVAL");
                c.arg(
                    "if redis.call('get', KEYS[1]) == ARGV[1] then \
                     return redis.call('del', KEYS[1]) else return 0 end",
                )
                .arg(1);
                c
            }
        };
        cmd.arg(key);
        if let Self::DelEx = self {
            cmd.arg("IFEQ");
        }
        cmd.arg(token);
        cmd
    }
}

/// W2 for `system`: `tasks` concurrent tasks on distinct keys for `secs`.
pub(crate) async fn w2(
    url: String,
    tasks: usize,
    duration: Duration,
    prefix: String,
    system: W2System,
) -> anyhow::Result<Summary> {
    let notify = matches!(system, W2System::Leasehold { notify: true });
    let options = RedisOptions::new().notify_waiters(notify);
    let client = Locker::from(RedisClient::connect_with(&url, options).await?);
    let mut conn = redis::Client::open(url.as_str())?
        .get_connection_manager()
        .await?;
    let delete = CheckedDelete::of(&mut conn).await?;
    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut handles = Vec::new();
    for t in 0..tasks {
        let (client, mut conn, done, stop, prefix) = (
            client.clone(),
            conn.clone(),
            done.clone(),
            stop.clone(),
            prefix.clone(),
        );
        handles.push(tokio::spawn(async move {
            let opts = LockOptions::new(Duration::from_secs(10));
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let key = format!("{prefix}:{t}:{i}");
                match system {
                    W2System::Floor => {
                        floor_set(&mut conn, &key, "v").await?;
                        let _: i64 = redis::cmd("DEL").arg(&key).query_async(&mut conn).await?;
                    }
                    W2System::TokenChecked { notify } => {
                        let token = leasehold::LockToken::random();
                        floor_set(&mut conn, &key, token.expose()).await?;
                        let delete = delete.cmd(&key, token.expose());
                        let deleted: i64 = if notify {
                            let mut pipe = redis::Pipeline::with_capacity(2);
                            pipe.add_command(delete)
                                .cmd("PUBLISH")
                                .arg(leasehold::redis::release_channel(&key))
                                .arg(&key);
                            // Read as leasehold reads its release's replies: raw, the
                            // publish's ignored (`query_async` on a pipeline copies them).
                            let replies = redis::aio::ConnectionLike::req_packed_commands(
                                &mut conn, &pipe, 0, 2,
                            )
                            .await?;
                            redis::from_redis_value(
                                replies.into_iter().next().unwrap_or(redis::Value::Nil),
                            )?
                        } else {
                            delete.query_async(&mut conn).await?
                        };
                        anyhow::ensure!(deleted == 1, "token-checked delete found another");
                    }
                    W2System::Leasehold { .. } => {
                        let g = client.try_acquire(&key, &opts).await?;
                        g.acquired().context("distinct key busy")?.release().await?;
                    }
                }
                i += 1;
                done.fetch_add(1, Ordering::Relaxed);
            }
            anyhow::Ok(())
        }));
    }
    let start = Instant::now();
    tokio::time::sleep(duration).await;
    stop.store(true, Ordering::Relaxed);
    let counted = done.load(Ordering::Relaxed);
    let elapsed = start.elapsed();
    for h in handles {
        h.await??;
    }
    Ok(Summary {
        ops_per_s: counted as f64 / elapsed.as_secs_f64(),
        ..Default::default()
    }
    .with("tasks", tasks as u64))
}

/// Holds for `hold` by spinning on the monotonic clock (a timer sleep of 1 ms really holds
/// about 2 ms); returns how long it held.
fn busy_hold(hold: Duration) -> Duration {
    let start = Instant::now();
    while start.elapsed() < hold {
        std::hint::spin_loop();
    }
    start.elapsed()
}

struct Event {
    worker: usize,
    acquired: Instant,
    released: Instant,
}

/// What W3's workers record of their turns (leasehold's and the cross-client floor's), for
/// [`contention_summary`].
#[derive(Clone, Default)]
pub(crate) struct Turns {
    events: Arc<Mutex<Vec<Event>>>,
    max_wait_us: Arc<AtomicU64>,
    held_ns: Arc<AtomicU64>,
}

impl Turns {
    /// A turn that came at `acquired` to a worker that asked at `asked`: held (busy) for
    /// `hold`; returns when the hold ended.
    pub(crate) fn hold(&self, asked: Instant, acquired: Instant, hold: Duration) -> Instant {
        let waited = (acquired - asked).as_micros() as u64;
        self.max_wait_us.fetch_max(waited, Ordering::Relaxed);
        let held = busy_hold(hold).as_nanos() as u64;
        self.held_ns.fetch_add(held, Ordering::Relaxed);
        Instant::now()
    }

    /// `worker`'s turn, from `acquired` to `released`, once given back.
    pub(crate) fn done(&self, worker: usize, acquired: Instant, released: Instant) {
        self.events.lock().unwrap().push(Event {
            worker,
            acquired,
            released,
        });
    }

    /// The W3 figures of the turns recorded by `workers` over `elapsed`.
    pub(crate) fn summary(&self, workers: usize, elapsed: Duration) -> (Summary, Vec<(f64, f64)>) {
        let events = std::mem::take(&mut *self.events.lock().unwrap());
        contention_summary(
            events,
            workers,
            elapsed,
            self.held_ns.load(Ordering::Relaxed),
            self.max_wait_us.load(Ordering::Relaxed),
        )
    }
}

/// W3 for leasehold: `workers` on ONE key, each holding `hold`, for `duration`; `fair` takes
/// the lock in arrival order with direct handoff ([`LockOptions::fair`]). The workers share
/// one client, or (`client_each`) each has its own, so that every handoff goes from one
/// client to another (a fair release hands the lock to a waiter of its own client by its
/// reply, to another client's by a message).
pub(crate) async fn w3_leasehold(
    url: String,
    workers: usize,
    hold: Duration,
    duration: Duration,
    key: String,
    fair: bool,
    client_each: bool,
) -> anyhow::Result<(Summary, Vec<(f64, f64)>)> {
    let mut clients = Vec::new();
    for _ in 0..if client_each { workers } else { 1 } {
        clients.push(Locker::connect(&url).await?);
    }
    w3_lockers(clients, workers, hold, duration, key, fair).await
}

/// W3 through the one lock API ([`Locker`], any backend): `workers` on ONE key, each holding
/// `hold`, for `duration`; the handoff and fairness figures of [`contention_summary`].
pub(crate) async fn w3_locker(
    client: Locker,
    workers: usize,
    hold: Duration,
    duration: Duration,
    key: String,
    fair: bool,
) -> anyhow::Result<(Summary, Vec<(f64, f64)>)> {
    w3_lockers(vec![client], workers, hold, duration, key, fair).await
}

/// [`w3_locker`] with worker `w` on `clients[w % clients.len()]`.
async fn w3_lockers(
    clients: Vec<Locker>,
    workers: usize,
    hold: Duration,
    duration: Duration,
    key: String,
    fair: bool,
) -> anyhow::Result<(Summary, Vec<(f64, f64)>)> {
    let turns = Turns::default();
    let deadline = Instant::now() + duration;
    let mut handles = Vec::new();
    for w in 0..workers {
        let (client, turns, key) = (
            clients[w % clients.len()].clone(),
            turns.clone(),
            key.clone(),
        );
        handles.push(tokio::spawn(async move {
            let opts = LockOptions::new(Duration::from_secs(10))
                .wait(Duration::from_secs(120))
                .fair(fair);
            while Instant::now() < deadline {
                let asked = Instant::now();
                let g = client.acquire(&key, &opts).await?;
                let acquired = Instant::now();
                let released = turns.hold(asked, acquired, hold);
                g.release().await?;
                turns.done(w, acquired, released);
            }
            anyhow::Ok(())
        }));
    }
    let start = Instant::now();
    for h in handles {
        h.await??;
    }
    Ok(turns.summary(workers, start.elapsed()))
}

/// Handoff figures from the acquisitions in time order: a handoff is an acquisition by a worker
/// other than the one whose release came just before it.
fn contention_summary(
    mut events: Vec<Event>,
    workers: usize,
    elapsed: Duration,
    held_ns: u64,
    max_wait_us: u64,
) -> (Summary, Vec<(f64, f64)>) {
    events.sort_by_key(|e| e.acquired);
    let mut handoff = Latencies::new();
    let mut same = 0u64;
    let mut per_worker = vec![0u64; workers];
    for (i, e) in events.iter().enumerate() {
        per_worker[e.worker] += 1;
        if i == 0 {
            continue;
        }
        let prev = &events[i - 1];
        if prev.worker == e.worker {
            same += 1;
        } else {
            handoff.record(e.acquired.saturating_duration_since(prev.released));
        }
    }
    let n = events.len() as u64;
    let summary = Summary {
        ops_per_s: n as f64 / elapsed.as_secs_f64(),
        ..Default::default()
    }
    .with("handoff_p50_us", handoff.quantile(0.5))
    .with("handoff_p99_us", handoff.quantile(0.99))
    .with(
        "same_worker_rate",
        if n > 1 {
            same as f64 / (n - 1) as f64
        } else {
            0.0
        },
    )
    .with(
        "min_per_worker",
        per_worker.iter().copied().min().unwrap_or(0),
    )
    .with(
        "max_per_worker",
        per_worker.iter().copied().max().unwrap_or(0),
    )
    .with("max_wait_ms", max_wait_us as f64 / 1000.0)
    .with(
        "hold_us_mean",
        if n > 0 {
            held_ns as f64 / n as f64 / 1000.0
        } else {
            0.0
        },
    )
    .with("acquisitions", n);
    (summary, handoff.cdf())
}

/// W4 for leasehold: Redlock over `urls`, `cycles` acquire + release.
pub(crate) async fn w4_leasehold(
    urls: Vec<String>,
    cycles: u64,
    prefix: String,
) -> anyhow::Result<Summary> {
    let refs: Vec<&str> = urls.iter().map(String::as_str).collect();
    let redlock = Locker::from(Redlock::connect(&refs, RedlockOptions::new()).await?);
    let opts = LockOptions::new(Duration::from_secs(10));
    let (summary, _) = lock_cycles(&redlock, &opts, cycles, 100, &prefix).await?;
    Ok(summary.with("nodes", urls.len() as u64))
}

/// W4 floor: Redlock's round trips with no lock logic, what this machine allows for `N`
/// nodes: `SET NX PX` sent to every node at once, on once a majority replied, then `DEL` the
/// same way (the other replies are read in the background, as Redlock's are).
pub(crate) async fn w4_floor(
    urls: Vec<String>,
    cycles: u64,
    prefix: String,
) -> anyhow::Result<Summary> {
    let mut conns = Vec::new();
    for url in &urls {
        let client = redis::Client::open(url.as_str())?;
        conns.push(client.get_multiplexed_async_connection().await?);
    }
    let quorum = conns.len() / 2 + 1;
    let cycle = |key: String| {
        let conns = conns.clone();
        async move {
            let mut set = redis::cmd("SET");
            set.arg(&key).arg("v").arg("NX").arg("PX").arg(10_000);
            on_quorum(&conns, set, quorum).await?;
            on_quorum(&conns, redis::cmd("DEL").arg(&key).clone(), quorum).await
        }
    };
    let (summary, _) = measure_cycles(cycles, 100, &prefix, cycle).await?;
    Ok(summary.with("nodes", urls.len() as u64).with(
        "commands",
        "SET NX PX, then DEL, on every node at once; on at the quorum",
    ))
}

/// Sends `cmd` on every connection at once and returns once `quorum` replies came; the rest
/// are read in the background.
async fn on_quorum(
    conns: &[redis::aio::MultiplexedConnection],
    cmd: redis::Cmd,
    quorum: usize,
) -> anyhow::Result<()> {
    use futures_util::stream::{FuturesUnordered, StreamExt};
    let mut replies: FuturesUnordered<_> = conns
        .iter()
        .map(|conn| {
            let (mut conn, cmd) = (conn.clone(), cmd.clone());
            async move { cmd.query_async::<redis::Value>(&mut conn).await }
        })
        .collect();
    for _ in 0..quorum {
        replies
            .next()
            .await
            .context("fewer replies than a quorum")??;
    }
    tokio::spawn(async move { while replies.next().await.is_some() {} });
    Ok(())
}

/// What holding leases for a while showed.
struct Held {
    elapsed: Duration,
    cpu: Duration,
    lost: usize,
}

/// Takes `leases` auto-extended leases through `locker`, holds them for `duration` (`before`
/// runs once they are all held, to read counters), and releases them.
async fn hold_leases(
    locker: &Locker,
    leases: usize,
    ttl: Duration,
    duration: Duration,
    prefix: &str,
    before: impl FnOnce(),
) -> anyhow::Result<Held> {
    let opts = LockOptions::new(ttl).auto_extend(true);
    let mut guards = Vec::with_capacity(leases);
    for i in 0..leases {
        guards.push(
            locker
                .try_acquire(&format!("{prefix}:{i}"), &opts)
                .await?
                .acquired()
                .context("lease key busy")?,
        );
    }
    before();
    let cpu0 = cpu_time();
    let start = Instant::now();
    tokio::time::sleep(duration).await;
    let elapsed = start.elapsed();
    let cpu = cpu_time().saturating_sub(cpu0);
    let held = guards.iter().filter(|g| g.is_held()).count();
    for g in guards {
        let _ = g.release().await;
    }
    Ok(Held {
        elapsed,
        cpu,
        lost: leases - held,
    })
}

/// W5: `leases` auto-extended leases on one client for `duration`.
pub(crate) async fn w5_leasehold(
    url: String,
    leases: usize,
    ttl: Duration,
    duration: Duration,
    prefix: String,
) -> anyhow::Result<Summary> {
    let client = Locker::connect(&url).await?;
    let stats = client
        .as_redis()
        .context("W5 reads the Redis client's renewal counters: it needs a Redis URL")?
        .renewal_stats();
    let mut at_start = (0, 0);
    let held = hold_leases(&client, leases, ttl, duration, &prefix, || {
        at_start = (stats.rounds(), stats.renewals())
    })
    .await?;
    let secs = held.elapsed.as_secs_f64();
    Ok(Summary {
        ops_per_s: (stats.renewals() - at_start.1) as f64 / secs,
        ..Default::default()
    }
    .with(
        "renewal_round_trips_per_s",
        (stats.rounds() - at_start.0) as f64 / secs,
    )
    .with("client_cpu_percent", 100.0 * held.cpu.as_secs_f64() / secs)
    .with("leases", leases as u64)
    .with("leases_lost", held.lost as u64)
    .with("ttl_ms", ttl.as_millis() as u64))
}

/// W5 through the one lock API ([`Locker`], any backend): `leases` auto-extended leases for
/// `duration`; how many were lost, and the client's CPU (the renewal counters are the Redis
/// client's own, so they are not reported here).
pub(crate) async fn w5_locker(
    url: String,
    leases: usize,
    ttl: Duration,
    duration: Duration,
    prefix: String,
) -> anyhow::Result<Summary> {
    let locker = Locker::connect(&url).await?;
    let held = hold_leases(&locker, leases, ttl, duration, &prefix, || {}).await?;
    Ok(Summary::default()
        .with(
            "client_cpu_percent",
            100.0 * held.cpu.as_secs_f64() / held.elapsed.as_secs_f64(),
        )
        .with("leases", leases as u64)
        .with("leases_lost", held.lost as u64)
        .with("ttl_ms", ttl.as_millis() as u64)
        .with("backend", locker.backend()))
}

/// This process's user + system CPU time.
pub(crate) fn cpu_time() -> Duration {
    use nix::sys::resource::{UsageWho, getrusage};
    match getrusage(UsageWho::RUSAGE_SELF) {
        Ok(u) => {
            let t = |tv: nix::sys::time::TimeVal| {
                Duration::new(tv.tv_sec() as u64, tv.tv_usec() as u32 * 1000)
            };
            t(u.user_time()) + t(u.system_time())
        }
        Err(_) => Duration::ZERO,
    }
}

/// The calls of every command the server ran since the last `CONFIG RESETSTAT`, those run
/// inside scripts included (`INFO commandstats`).
async fn server_commands(conn: &mut redis::aio::MultiplexedConnection) -> anyhow::Result<u64> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await?;
    Ok(info
        .lines()
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum())
}

/// This process's resident memory in bytes (`/proc/self/statm`, 4 KiB pages).
pub(crate) fn resident_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}

/// W6 herd for leasehold: `waiters` tasks of one client wait for ONE key that another client
/// holds; after they have all made their first attempt, the holder releases and each waiter
/// that gets the lock releases it at once, until `handoffs` handoffs happened. Reports the
/// server's commands per handoff (every command it ran, script-internal ones included) and the
/// waiting client's resident memory per waiter. `fair` queues them on the server (the release
/// hands the lock to the first) instead of the default mode (one waiter of the client woken per
/// release, to race; every waiter also retries at its backoff's pace).
pub(crate) async fn w6_leasehold(
    url: String,
    waiters: usize,
    handoffs: u64,
    fair: bool,
) -> anyhow::Result<Summary> {
    let key = "w6";
    let holder = Locker::connect(&url).await?;
    let client = Locker::connect(&url).await?;
    let mut admin = redis::Client::open(url.as_str())?
        .get_multiplexed_async_connection()
        .await?;
    let opts = LockOptions::new(Duration::from_secs(60))
        .wait(Duration::from_secs(600))
        .fair(fair);
    let held = holder.acquire(key, &opts).await?;
    let before = resident_bytes();
    let started = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::with_capacity(waiters);
    for _ in 0..waiters {
        let (client, opts, started, done) =
            (client.clone(), opts.clone(), started.clone(), done.clone());
        tasks.push(tokio::spawn(async move {
            started.fetch_add(1, Ordering::Relaxed);
            let g = client.acquire(key, &opts).await?;
            done.fetch_add(1, Ordering::Relaxed);
            g.release().await?;
            anyhow::Ok(())
        }));
    }
    // Every waiter has made its first attempt once the server ran at least one command per
    // waiter (and, fair, once the queue holds them all); then half a second to settle.
    let queue = leasehold::redis::fair_queue_key(key);
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let commands = server_commands(&mut admin).await?;
        let queued: u64 = if fair {
            redis::cmd("ZCARD")
                .arg(&queue)
                .query_async(&mut admin)
                .await?
        } else {
            waiters as u64
        };
        if started.load(Ordering::Relaxed) == waiters as u64
            && commands >= waiters as u64
            && queued == waiters as u64
        {
            break;
        }
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let per_waiter = resident_bytes().saturating_sub(before) as f64 / waiters as f64;
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(&mut admin)
        .await?;
    let t0 = Instant::now();
    held.release().await?;
    while done.load(Ordering::Relaxed) < handoffs {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let elapsed = t0.elapsed();
    let counted = done.load(Ordering::Relaxed);
    let commands = server_commands(&mut admin).await?;
    for t in &tasks {
        t.abort();
    }
    Ok(Summary {
        ops_per_s: counted as f64 / elapsed.as_secs_f64(),
        ..Default::default()
    }
    .with("waiters", waiters as u64)
    .with("handoffs", counted)
    .with("commands_per_handoff", commands as f64 / counted as f64)
    .with("client_kib_per_waiter", per_waiter / 1024.0))
}
