//! rslock-bench: runs one leasehold benchmark workload against rslock and prints one JSON object.
//!
//! rslock-bench --url redis://127.0.0.1:PORT/ --workload W1|W2|W3|W4 [--tuned]
//!              [--key-prefix P] [--urls URL,URL,...] [--duration SECS] [--cycles N]
//!
//! See bench/README.md for the workloads and the JSON fields.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rslock::LockManager;
use serde_json::{json, Map, Value};
use tokio::sync::Barrier;

const SYSTEM: &str = "rslock";
const RSLOCK_VERSION: &str = env!("RSLOCK_VERSION");
const REDIS_RS_VERSION: &str = env!("REDIS_RS_VERSION");
const TTL: Duration = Duration::from_secs(10);
const HOLD: Duration = Duration::from_millis(1);
const W2_TASKS: usize = 64;
const W3_WORKERS: usize = 16;
/// rslock's defaults (src/lock.rs): 3 tries per `lock()`, a random delay in [0, 200 ms) between.
const DEFAULT_RETRY_COUNT: u32 = 3;
const DEFAULT_RETRY_DELAY: Duration = Duration::from_millis(200);
const TUNED_RETRY_DELAY: Duration = Duration::from_millis(10);

struct Args {
    url: Option<String>,
    urls: Vec<String>,
    workload: String,
    tuned: bool,
    key_prefix: String,
    duration: Option<f64>,
    cycles: Option<u64>,
    warmup: u64,
}

fn usage() -> &'static str {
    "usage: rslock-bench --url redis://127.0.0.1:PORT/ --workload W1|W2|W3|W4 [--tuned] \
     [--key-prefix P] [--urls URL,URL,...] [--duration SECS] [--cycles N] [--warmup N]"
}

fn parse_args() -> Result<Args, String> {
    let mut it = std::env::args().skip(1);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let mut a = Args {
        url: None,
        urls: Vec::new(),
        workload: String::new(),
        tuned: false,
        key_prefix: format!("bench:{SYSTEM}:{}:{}", std::process::id(), now.as_millis()),
        duration: None,
        cycles: None,
        warmup: 200,
    };
    while let Some(arg) = it.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
            _ => (arg.clone(), None),
        };
        let mut value = |name: &str| -> Result<String, String> {
            inline
                .clone()
                .or_else(|| it.next())
                .ok_or_else(|| format!("{name} needs a value"))
        };
        match flag.as_str() {
            "--url" => a.url = Some(value("--url")?),
            "--urls" => {
                a.urls = value("--urls")?
                    .split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(String::from)
                    .collect()
            }
            "--workload" => a.workload = value("--workload")?.to_uppercase(),
            "--tuned" => a.tuned = true,
            "--key-prefix" => a.key_prefix = value("--key-prefix")?,
            "--duration" => {
                a.duration = Some(
                    value("--duration")?
                        .parse()
                        .map_err(|e| format!("--duration: {e}"))?,
                )
            }
            "--cycles" => {
                a.cycles = Some(
                    value("--cycles")?
                        .parse()
                        .map_err(|e| format!("--cycles: {e}"))?,
                )
            }
            "--warmup" => {
                a.warmup = value("--warmup")?
                    .parse()
                    .map_err(|e| format!("--warmup: {e}"))?
            }
            "-h" | "--help" => return Err(usage().to_string()),
            other => return Err(format!("unknown argument {other:?}\n{}", usage())),
        }
    }
    if !["W1", "W2", "W3", "W4"].contains(&a.workload.as_str()) {
        return Err(format!("--workload must be W1, W2, W3 or W4\n{}", usage()));
    }
    if a.workload == "W4" {
        if a.urls.is_empty() {
            return Err("W4 needs --urls URL,URL,...".into());
        }
    } else if a.url.is_none() {
        return Err("--url is required".into());
    }
    Ok(a)
}

/// Nearest-rank percentile of sorted nanoseconds, in microseconds.
fn pct_us(sorted_ns: &[u64], q: f64) -> f64 {
    if sorted_ns.is_empty() {
        return 0.0;
    }
    let n = sorted_ns.len();
    let rank = ((q * n as f64).ceil() as usize).clamp(1, n);
    round1(sorted_ns[rank - 1] as f64 / 1e3)
}

/// The distribution of sorted nanoseconds: `[latency_us, q]` at q = 0.01, 0.02, ..., 1.00, each
/// the nearest-rank value at that quantile (rank computed in integers, so exact).
fn cdf_us(sorted_ns: &[u64]) -> Value {
    let n = sorted_ns.len();
    if n == 0 {
        return json!([]);
    }
    let points: Vec<Value> = (1..=100usize)
        .map(|k| {
            let rank = (k * n).div_ceil(100).clamp(1, n);
            json!([round1(sorted_ns[rank - 1] as f64 / 1e3), k as f64 / 100.0])
        })
        .collect();
    Value::Array(points)
}

fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

fn nanos(d: Duration) -> u64 {
    d.as_nanos() as u64
}

fn manager(urls: &[String], tuned: bool) -> LockManager {
    let mut lm = LockManager::new(urls.to_vec());
    let delay = if tuned {
        TUNED_RETRY_DELAY
    } else {
        DEFAULT_RETRY_DELAY
    };
    lm.set_retry(DEFAULT_RETRY_COUNT, delay);
    lm
}

/// Warms up the connection (rslock connects lazily) and loads the unlock script, and fails
/// fast if the server is not there: `lock()` gives up after its tries, `acquire()` never does.
async fn warmup(lm: &LockManager, prefix: &str, n: u64) -> Result<(), String> {
    for i in 0..n.max(1) {
        let key = format!("{prefix}:warmup:{i}");
        let lock = lm
            .lock(key.as_bytes(), TTL)
            .await
            .map_err(|e| format!("warm-up acquisition of {key} failed: {e}"))?;
        lock.release().await;
    }
    Ok(())
}

fn base(a: &Args, urls: &[String]) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("system".into(), json!(SYSTEM));
    m.insert("workload".into(), json!(a.workload));
    m.insert("version".into(), json!(RSLOCK_VERSION));
    m.insert(
        "client".into(),
        json!(format!(
            "redis-rs {REDIS_RS_VERSION}, one LockManager (one multiplexed connection per node) \
             shared by all tasks, tokio multi-thread runtime"
        )),
    );
    m.insert("urls".into(), json!(urls));
    m.insert("key_prefix".into(), json!(a.key_prefix));
    m.insert("ttl_ms".into(), json!(TTL.as_millis() as u64));
    m.insert("warmup_cycles".into(), json!(a.warmup));
    m
}

fn retry_settings(m: &mut Map<String, Value>, tuned: bool) {
    let delay = if tuned {
        TUNED_RETRY_DELAY
    } else {
        DEFAULT_RETRY_DELAY
    };
    m.insert(
        "retry".into(),
        json!(if tuned { "10ms" } else { "default" }),
    );
    m.insert(
        "retry_settings".into(),
        json!({
            "retry_count": DEFAULT_RETRY_COUNT,
            "retry_delay_ms": delay.as_millis() as u64,
            "delay_distribution": format!("uniform random in [0, {} ms) between tries", delay.as_millis()),
            "default": "retry_count 3, retry_delay 200 ms (random in [0, 200 ms))",
            "waiting": "LockManager::acquire: loops over lock() forever; lock() makes retry_count \
                        tries and, after each failed try, runs the unlock script on every node",
        }),
    );
}

/// W1 and W4: one task, `cycles` lock+release cycles on distinct keys.
async fn sequential(a: &Args, urls: Vec<String>, default_cycles: u64) -> Result<Value, String> {
    let cycles = a.cycles.unwrap_or(default_cycles);
    let lm = manager(&urls, a.tuned);
    warmup(&lm, &a.key_prefix, a.warmup).await?;
    let tag = a.workload.to_lowercase();
    let mut lat = Vec::with_capacity(cycles as usize);
    let mut errors = 0u64;
    let start = Instant::now();
    for i in 0..cycles {
        let key = format!("{}:{tag}:{i}", a.key_prefix);
        let t0 = Instant::now();
        match lm.lock(key.as_bytes(), TTL).await {
            Ok(lock) => {
                lock.release().await;
                lat.push(nanos(t0.elapsed()));
            }
            Err(_) => errors += 1,
        }
    }
    let elapsed = start.elapsed();
    lat.sort_unstable();
    let mut m = base(a, &urls);
    retry_settings(&mut m, a.tuned);
    m.insert("nodes".into(), json!(urls.len()));
    m.insert("tasks".into(), json!(1));
    m.insert("cycles".into(), json!(cycles));
    m.insert("ok".into(), json!(lat.len()));
    m.insert("errors".into(), json!(errors));
    m.insert("elapsed_s".into(), json!(elapsed.as_secs_f64()));
    m.insert(
        "ops_per_s".into(),
        json!(round1(lat.len() as f64 / elapsed.as_secs_f64())),
    );
    m.insert("p50_us".into(), json!(pct_us(&lat, 0.50)));
    m.insert("p99_us".into(), json!(pct_us(&lat, 0.99)));
    if a.workload == "W1" {
        m.insert("cdf".into(), cdf_us(&lat));
    }
    Ok(Value::Object(m))
}

/// W2: 64 tasks, each lock+release on its own distinct keys, for `duration`.
async fn throughput(a: &Args, url: String) -> Result<Value, String> {
    let duration = Duration::from_secs_f64(a.duration.unwrap_or(10.0));
    let urls = vec![url];
    let lm = manager(&urls, a.tuned);
    warmup(&lm, &a.key_prefix, a.warmup).await?;
    let barrier = Arc::new(Barrier::new(W2_TASKS + 1));
    let mut handles = Vec::new();
    for t in 0..W2_TASKS {
        let lm = lm.clone();
        let barrier = barrier.clone();
        let prefix = a.key_prefix.clone();
        handles.push(tokio::spawn(async move {
            barrier.wait().await;
            let deadline = Instant::now() + duration;
            let (mut ok, mut errors) = (0u64, 0u64);
            let mut i = 0u64;
            while Instant::now() < deadline {
                let key = format!("{prefix}:w2:{t}:{i}");
                i += 1;
                match lm.lock(key.as_bytes(), TTL).await {
                    Ok(lock) => {
                        lock.release().await;
                        ok += 1;
                    }
                    Err(_) => errors += 1,
                }
            }
            (ok, errors)
        }));
    }
    barrier.wait().await;
    let start = Instant::now();
    let (mut ok, mut errors) = (0u64, 0u64);
    for h in handles {
        let (o, e) = h.await.map_err(|e| e.to_string())?;
        ok += o;
        errors += e;
    }
    let elapsed = start.elapsed();
    let mut m = base(a, &urls);
    retry_settings(&mut m, a.tuned);
    m.insert("tasks".into(), json!(W2_TASKS));
    m.insert("duration_s".into(), json!(duration.as_secs_f64()));
    m.insert("elapsed_s".into(), json!(elapsed.as_secs_f64()));
    m.insert("ok".into(), json!(ok));
    m.insert("errors".into(), json!(errors));
    m.insert(
        "ops_per_s".into(),
        json!(round1(ok as f64 / elapsed.as_secs_f64())),
    );
    Ok(Value::Object(m))
}

struct Acq {
    worker: usize,
    wait_start: Instant,
    acquired: Instant,
    released: Instant, // when the holder called release (end of its measured hold)
}

/// W3: 16 workers on one key, each holding it ~1 ms (busy-wait), for `duration`.
async fn contention(a: &Args, url: String) -> Result<Value, String> {
    let duration = Duration::from_secs_f64(a.duration.unwrap_or(10.0));
    let urls = vec![url];
    let lm = manager(&urls, a.tuned);
    warmup(&lm, &a.key_prefix, a.warmup).await?;
    let key = format!("{}:w3", a.key_prefix);
    let barrier = Arc::new(Barrier::new(W3_WORKERS + 1));
    let deadline = Arc::new(std::sync::OnceLock::<Instant>::new());
    let mut handles = Vec::new();
    for w in 0..W3_WORKERS {
        let lm = lm.clone();
        let barrier = barrier.clone();
        let key = key.clone();
        let deadline = deadline.clone();
        handles.push(tokio::spawn(async move {
            barrier.wait().await;
            let deadline = *deadline.get().expect("set before the barrier opens");
            let mut mine = Vec::new();
            let mut errors = 0u64;
            while Instant::now() < deadline {
                let wait_start = Instant::now();
                let guard = match lm.acquire(key.as_bytes(), TTL).await {
                    Ok(g) => g,
                    Err(_) => {
                        errors += 1;
                        continue;
                    }
                };
                let acquired = Instant::now();
                let until = acquired + HOLD;
                while Instant::now() < until {
                    std::hint::spin_loop();
                }
                let released = Instant::now();
                guard.release().await;
                mine.push(Acq {
                    worker: w,
                    wait_start,
                    acquired,
                    released,
                });
            }
            (mine, errors)
        }));
    }
    let start = Instant::now();
    let deadline_at = start + duration;
    deadline.set(deadline_at).ok();
    barrier.wait().await;
    let mut all = Vec::new();
    let mut errors = 0u64;
    for h in handles {
        let (mine, e) = h.await.map_err(|e| e.to_string())?;
        all.extend(mine);
        errors += e;
    }
    let drained = Instant::now();
    all.sort_by_key(|x| x.acquired);
    let stats = contention_stats(&all, deadline_at, W3_WORKERS, start);
    let mut m = base(a, &urls);
    retry_settings(&mut m, a.tuned);
    m.insert("workers".into(), json!(W3_WORKERS));
    m.insert("hold_target_us".into(), json!(HOLD.as_micros() as u64));
    m.insert("duration_s".into(), json!(duration.as_secs_f64()));
    m.insert(
        "drain_ms".into(),
        json!(round1(
            drained.saturating_duration_since(deadline_at).as_secs_f64() * 1e3
        )),
    );
    m.insert("errors".into(), json!(errors));
    for (k, v) in stats {
        m.insert(k, v);
    }
    Ok(Value::Object(m))
}

/// Statistics over the acquisitions made before the deadline (sorted by acquisition time);
/// waits are counted to their completion, also past the deadline.
fn contention_stats(
    all: &[Acq],
    deadline: Instant,
    workers: usize,
    start: Instant,
) -> Map<String, Value> {
    let in_window: Vec<&Acq> = all.iter().filter(|x| x.acquired <= deadline).collect();
    let mut per_worker = vec![0u64; workers];
    let mut handoffs = Vec::new();
    let mut same = 0u64;
    let mut holds = 0f64;
    for (i, x) in in_window.iter().enumerate() {
        per_worker[x.worker] += 1;
        holds += (x.released - x.acquired).as_secs_f64();
        if i > 0 {
            let prev = in_window[i - 1];
            if prev.worker == x.worker {
                same += 1;
            } else {
                handoffs.push(nanos(x.acquired.saturating_duration_since(prev.released)));
            }
        }
    }
    handoffs.sort_unstable();
    let n = in_window.len();
    let max_wait = all
        .iter()
        .map(|x| x.acquired - x.wait_start)
        .max()
        .unwrap_or_default();
    let window = deadline.saturating_duration_since(start).as_secs_f64();
    let mut m = Map::new();
    m.insert("acquisitions".into(), json!(n));
    m.insert("ops_per_s".into(), json!(round1(n as f64 / window)));
    m.insert("handoffs".into(), json!(handoffs.len()));
    m.insert("handoff_p50_us".into(), json!(pct_us(&handoffs, 0.50)));
    m.insert("handoff_p99_us".into(), json!(pct_us(&handoffs, 0.99)));
    m.insert("cdf".into(), cdf_us(&handoffs));
    m.insert(
        "same_worker_rate".into(),
        json!(if n > 1 {
            (same as f64 / (n - 1) as f64 * 1e4).round() / 1e4
        } else {
            0.0
        }),
    );
    m.insert(
        "min_per_worker".into(),
        json!(per_worker.iter().min().copied().unwrap_or(0)),
    );
    m.insert(
        "max_per_worker".into(),
        json!(per_worker.iter().max().copied().unwrap_or(0)),
    );
    m.insert("per_worker".into(), json!(per_worker));
    m.insert(
        "max_wait_ms".into(),
        json!(round1(max_wait.as_secs_f64() * 1e3)),
    );
    m.insert(
        "hold_us_mean".into(),
        json!(if n > 0 {
            round1(holds / n as f64 * 1e6)
        } else {
            0.0
        }),
    );
    m
}

fn error_json(a: &Args, reason: String) -> Value {
    json!({"system": SYSTEM, "workload": a.workload, "version": RSLOCK_VERSION, "error": reason})
}

#[tokio::main]
async fn main() -> ExitCode {
    let a = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("rslock-bench: {e}");
            return ExitCode::from(2);
        }
    };
    let result = match a.workload.as_str() {
        "W1" => sequential(&a, vec![a.url.clone().unwrap()], 20_000).await,
        "W2" => throughput(&a, a.url.clone().unwrap()).await,
        "W3" => contention(&a, a.url.clone().unwrap()).await,
        _ => sequential(&a, a.urls.clone(), 2_000).await,
    };
    match result {
        Ok(v) => {
            println!("{v}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("rslock-bench: {e}");
            println!("{}", error_json(&a, e));
            ExitCode::from(1)
        }
    }
}
