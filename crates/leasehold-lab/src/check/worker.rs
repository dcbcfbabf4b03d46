//! The hidden `check-worker` subcommand: one worker process of `leasehold-lab check`. It loops
//! acquire -> read the register -> work -> write register+1 (fenced) -> release, and logs every
//! step as a JSON line stamped with the machine-wide monotonic clock (so the coordinator can
//! order the events of all processes).
//!
//! Lock-server faults (restart, stall, failover, Redlock node faults, cluster and Sentinel
//! failovers, slot migrations) make operations fail; the worker logs the error and carries on,
//! reconnecting with the URLs in the file that lists the lock servers (a standalone failover
//! changes them; a cluster's or Sentinel's one URL stays: the client follows the topology). The register has no faults, but a worker stopped in the middle of
//! a request sees its reply timer fire when it resumes: a failed read gives the lock up, a
//! failed write is logged as in doubt (it may have been applied) and the analysis counts it so.

use std::io::Write;
use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use leasehold::redis::RedisClient;
use leasehold::{ClientOptions, Fence, LockGuard, LockOptions, Lockable, Locker};
use rand::{Rng, SeedableRng};
use serde_json::json;

use super::register::{ReadOutcome, Register};
use crate::cli::CheckWorkerArgs;
use crate::target::Servers;

/// Milliseconds on CLOCK_MONOTONIC, shared by every process of the machine.
pub(crate) fn now_ms() -> f64 {
    use nix::time::{ClockId, clock_gettime};
    clock_gettime(ClockId::CLOCK_MONOTONIC)
        .map(|t| t.tv_sec() as f64 * 1000.0 + t.tv_nsec() as f64 / 1e6)
        .unwrap_or(0.0)
}

struct Log(std::fs::File);

impl Log {
    fn event(&mut self, value: serde_json::Value) -> anyhow::Result<()> {
        // One write per line, unbuffered: a worker killed with -9 leaves a whole log behind.
        let line = format!("{value}\n");
        self.0
            .write_all(line.as_bytes())
            .context("cannot write the worker log")
    }
}

/// The lock servers as the coordinator last listed them, and our connection to them.
struct LockSide {
    urls: Vec<String>,
    locks: Locker,
    /// Plain connections for `--release del` (one per server).
    raw: Vec<redis::aio::MultiplexedConnection>,
}

fn read_urls(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(String::from)
        .collect()
}

async fn connect(
    urls: Vec<String>,
    release_del: bool,
    response_timeout: Option<Duration>,
) -> anyhow::Result<LockSide> {
    let servers = Servers::resolve(urls.clone(), None);
    let locks = match (response_timeout, servers.single()) {
        (Some(timeout), Some(target)) => target
            .connect_with(ClientOptions::new().response_timeout(timeout))
            .await?
            .into(),
        _ => servers.connect().await?,
    };
    let mut raw = Vec::new();
    if release_del {
        for url in &urls {
            raw.push(
                redis::Client::open(url.as_str())?
                    .get_multiplexed_async_connection()
                    .await?,
            );
        }
    }
    Ok(LockSide { urls, locks, raw })
}

/// The Redis client a multi-key lock needs (only Redis has them).
fn redis(locker: &Locker) -> leasehold::Result<&RedisClient> {
    locker.as_redis().ok_or(leasehold::Error::Unsupported {
        backend: locker.backend(),
        what: "a multi-key lock".into(),
    })
}

/// Whether `e` is the library refusing a lock it cannot keep safely where it is (session locks
/// through a pooler that hands server sessions from client to client), not a failure.
fn refusal(e: &leasehold::Error) -> bool {
    matches!(e, leasehold::Error::Topology { .. })
}

/// A short pause after a failed lock operation, so a dead server is not hammered.
const RETRY_AFTER: Duration = Duration::from_millis(20);

pub(crate) async fn run(args: CheckWorkerArgs) -> anyhow::Result<()> {
    if args.metrics {
        let addr = crate::metrics::serve("127.0.0.1:0".parse()?).await?;
        // Written whole, then renamed: the coordinator never reads half a port.
        let file = crate::metrics::port_file(&args.log);
        std::fs::write(file.with_extension("tmp"), addr.port().to_string())?;
        std::fs::rename(file.with_extension("tmp"), &file)?;
    }
    let mut register = Register::connect(args.register.parse()?, &args.register_url).await?;
    let mut log = Log(std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&args.log)
        .context("cannot open the worker log")?);
    let w = args.id;
    // Work times vary around --work (0.5x to 1.5x): with work close to the TTL, some critical
    // sections outlive their lease, which is what `--release del` needs to go wrong.
    let mut rng = rand::rngs::StdRng::seed_from_u64(args.seed ^ (w + 1).wrapping_mul(0x9e37));
    // A semaphore admits several holders: it issues no fencing number.
    let mut opts = LockOptions::new(args.ttl)
        .fencing(args.permits.is_none())
        .fair(args.fair)
        .auto_extend(args.auto_extend)
        .wait(Duration::from_secs(3600));
    if let Some(n) = args.replica_ack {
        opts = opts.replica_ack(n, args.ttl / 4);
    }
    let mut side: Option<LockSide> = None;
    while !args.stop_file.exists() {
        let urls = read_urls(&args.lock_urls);
        if side.as_ref().is_none_or(|s| s.urls != urls) {
            side = None;
            match connect(urls, args.release_del, args.response_timeout).await {
                Ok(s) => side = Some(s),
                Err(e) => {
                    let refused = e.downcast_ref::<leasehold::Error>().is_some_and(refusal);
                    log.event(json!({"ev": "error", "w": w, "t": now_ms(), "op": "connect", "error": format!("{e:#}"), "refused": refused}))?;
                    tokio::time::sleep(RETRY_AFTER).await;
                    continue;
                }
            }
        }
        let Some(s) = side.as_mut() else { continue };
        let asked = now_ms();
        let reading = args.rw && !rng.random_bool(1.0 / 3.0);
        // What this round takes, through the library's one dispatch (`Lockable`); a
        // campaign is an election's.
        let taken: leasehold::Result<(Box<dyn Lockable>, LockOptions)> = if args.multi {
            let second = format!("{}:second", args.key);
            let keys = if w.is_multiple_of(2) {
                [args.key.as_str(), second.as_str()]
            } else {
                [second.as_str(), args.key.as_str()]
            };
            redis(&s.locks)
                .and_then(|c| c.multi_lock(&keys))
                .map(|lock| {
                    (
                        Box::new(lock) as Box<dyn Lockable>,
                        opts.clone().fencing(false),
                    )
                })
        } else {
            match (args.permits, args.rw) {
                (Some(n), _) => s
                    .locks
                    .semaphore(&args.key, n)
                    .map(|sem| (Box::new(sem) as Box<dyn Lockable>, opts.clone())),
                // Readers take no fencing number; the writer does.
                (None, true) if reading => s.locks.rwlock(&args.key).map(|rw| {
                    let side = Box::new(rw.read_side()) as Box<dyn Lockable>;
                    (side, opts.clone().fencing(false))
                }),
                (None, true) => s
                    .locks
                    .rwlock(&args.key)
                    .map(|rw| (Box::new(rw.write_side()) as Box<dyn Lockable>, opts.clone())),
                (None, false) => Ok((Box::new(s.locks.lock(&args.key)), opts.clone())),
            }
        };
        let acquired = if args.elect && !args.multi {
            match s.locks.election(&args.key) {
                Ok(election) => election.campaign(&format!("worker-{w}"), &opts).await,
                Err(e) => Err(e),
            }
        } else {
            match taken {
                Ok((taken, opts)) => taken.acquire(&opts).await,
                Err(e) => Err(e),
            }
        };
        let guard = match acquired {
            Ok(guard) => guard,
            Err(e) => {
                log.event(json!({"ev": "error", "w": w, "t": now_ms(), "op": "acquire", "error": e.to_string(), "refused": refusal(&e)}))?;
                // The servers may have moved (failover): read the list again next time.
                side = None;
                tokio::time::sleep(RETRY_AFTER).await;
                continue;
            }
        };
        let fence = guard.fencing_token().unwrap_or(0);
        // The lease's validity as the library computes it (from when the successful attempt
        // was sent, minus the clock-drift allowance): the server cannot free the lock before.
        let now = now_ms();
        let valid_until = now + guard.lease().remaining().as_secs_f64() * 1000.0;
        let side = if reading { "read" } else { "write" };
        log.event(json!({"ev": "acquired", "w": w, "t": now, "asked": asked, "valid_until": valid_until, "fence": fence, "side": side}))?;
        // Who holds which token, for the coordinator's fault injection.
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&args.holders)?
            .write_all(
                format!("{} {w} {}\n", guard.token().expose(), std::process::id()).as_bytes(),
            )?;

        if args.permits.is_some() || reading || args.multi {
            // The semaphore workload: hold the permit for the work time, then give it back;
            // the analysis counts the holders whose permits were valid at once.
            tokio::time::sleep(args.work.mul_f64(rng.random_range(0.5..1.5))).await;
            release(s, &args, guard, &mut log).await?;
            continue;
        }
        let fenced = Fence::new(fence, guard.token().clone());
        let fenced = (!args.no_fencing).then_some(&fenced);
        let value = match register.read(fenced).await {
            Ok(ReadOutcome::Value(v)) => v,
            Err(e) => {
                // E.g. a reply timer that fired while this process was stopped.
                log.event(json!({"ev": "error", "w": w, "t": now_ms(), "op": "read", "error": format!("{e:#}")}))?;
                release(s, &args, guard, &mut log).await?;
                continue;
            }
            Ok(ReadOutcome::Rejected { highest }) => {
                // A later holder already reached the register: this lease is stale. If the
                // register has seen a number the counter has not reached (the counter went
                // back: a restart without persistence, a failover), raise the counter, so the
                // next holder is not refused too.
                log.event(json!({"ev": "read", "w": w, "t": now_ms(), "rejected": true, "highest": highest}))?;
                if highest > fence
                    && args.raise_counter
                    && let Err(e) = s.locks.raise_fencing_counter(&args.key, highest).await
                {
                    log.event(json!({"ev": "error", "w": w, "t": now_ms(), "op": "raise", "error": e.to_string()}))?;
                }
                release(s, &args, guard, &mut log).await?;
                continue;
            }
        };
        log.event(json!({"ev": "read", "w": w, "t": now_ms(), "value": value, "fence": fence}))?;
        let work = args.work.mul_f64(rng.random_range(0.5..1.5));
        tokio::time::sleep(work).await;

        // Logged before the write: a worker killed (or a reply lost) between the write and its
        // result leaves a write in doubt, which the analysis must account for.
        log.event(
            json!({"ev": "writing", "w": w, "t": now_ms(), "value": value + 1, "fence": fence}),
        )?;
        match register.write(fenced, value + 1).await {
            Ok(accepted) => log.event(json!({"ev": "write", "w": w, "t": now_ms(), "value": value + 1, "fence": fence, "accepted": accepted}))?,
            Err(e) => log.event(json!({"ev": "write", "w": w, "t": now_ms(), "value": value + 1, "fence": fence, "in_doubt": true, "error": format!("{e:#}")}))?,
        }

        release(s, &args, guard, &mut log).await?;
    }
    Ok(())
}

/// Releases the lock: with the library (token-checked), or with `--release del` a plain DEL on
/// every server, whoever holds the key now (the seed's bug, on purpose). Logs `releasing` first
/// (the critical section ends there: the server may act on the release before this process
/// gets to log its result) and `released` with whether the lock was still ours (always true
/// for DEL, which cannot tell).
async fn release(
    side: &mut LockSide,
    args: &CheckWorkerArgs,
    guard: LockGuard,
    log: &mut Log,
) -> anyhow::Result<()> {
    let w = args.id;
    log.event(json!({"ev": "releasing", "w": w, "t": now_ms()}))?;
    let held = if args.release_del {
        for conn in &mut side.raw {
            let _: Result<i64, _> = redis::cmd("DEL").arg(&args.key).query_async(conn).await;
        }
        let _ = guard.detach();
        true
    } else {
        guard.release().await.is_ok()
    };
    log.event(json!({"ev": "released", "w": w, "t": now_ms(), "held": held}))
}
