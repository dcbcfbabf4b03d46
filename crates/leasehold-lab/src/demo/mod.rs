//! `leasehold-lab demo`: the seed chapter's walkthrough, re-created with the library and run against
//! a real server.
//!
//! 1. [`walkthrough`]: `src/patterns-locks.ts`, printing its ten result lines exactly as the seed
//!    does, each computed from what the server answered.
//! 2. [`helper`]: the chapter's "AI-written helper" (constant value, plain `DEL`) through the
//!    same expiry, to show it fails the same way.
//! 3. [`transcript`]: `cli/patterns-locks-1.redis`, replayed command by command, with the Lua (or
//!    `DELIFEQ`) equivalent wherever the server lacks `DELEX` or `SET ... IFEQ`.
//!
//! `--scenario failover` runs [`failover`] instead: a lock server fails over to a replica that
//! missed the lock, on throwaway servers only (it kills and promotes them; no `--url`).
//! `--scenario failover-sentinel` runs [`failover_sentinel`]: the same hazard with real
//! sentinels doing the promotion and clients connected through them, which follow it.
//!
//! Without a URL the demo starts a throwaway server through the test harness and stops it at the
//! end. On a server it did not start, it refuses to run if any of its keys already exists (it
//! deletes them as it goes), and it deletes them again at the end, also after Ctrl-C.

/// Writes one line of the demo to stdout, returning early with an error if stdout is gone (the
/// keys are still deleted and the server stopped, which a panic or `SIGPIPE` would skip).
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::demo::write_line(::std::format_args!($($arg)*))?
    };
}

mod failover;
mod failover_sentinel;
mod helper;
mod transcript;
mod walkthrough;

use std::fmt;
use std::io::Write;
use std::time::Duration;

use anyhow::Context;
use leasehold::Locker;
use leasehold::redis::{
    ClientConnection, ExtendStrategy, RedisClient, RedisOptions, ReleaseStrategy,
};
use leasehold_harness::{Flavor, Server, ServerBinary, ServerOptions};
use tokio::signal::unix::{Signal, SignalKind, signal};

use crate::cli::{DemoArgs, Scenario};
use crate::exit::{Interrupted, NoServer, Usage};
use crate::target::{Source, Target};

/// The walkthrough's lock (the seed's `KEY`).
const LOCK_KEY: &str = "b3:lock:payment";
/// The fenced resource the fencing scenario writes to.
const RESOURCE_KEY: &str = "b3:resource:payment";
/// The transcript's lock.
const TRANSCRIPT_KEY: &str = "lock:payment";
/// The AI-written helper's lock (`lock:${name}` with name `report`).
const HELPER_KEY: &str = "lock:report";

/// Every key the demo writes.
fn demo_keys() -> [String; 5] {
    [
        LOCK_KEY.to_string(),
        leasehold::redis::fence_key(LOCK_KEY),
        RESOURCE_KEY.to_string(),
        TRANSCRIPT_KEY.to_string(),
        HELPER_KEY.to_string(),
    ]
}

/// A server the demo started, and why that one.
struct Local {
    server: Server,
    bin: ServerBinary,
    why: String,
}

pub(crate) async fn run(target: &Target, args: DemoArgs) -> anyhow::Result<()> {
    let mut stop = Stop::listen();
    if matches!(
        args.scenario,
        Scenario::Failover | Scenario::FailoverSentinel
    ) {
        if target.source == Source::Flag {
            let name = match args.scenario {
                Scenario::FailoverSentinel => "failover-sentinel",
                _ => "failover",
            };
            return Err(Usage(format!(
                "--scenario {name} starts servers of its own (it kills and promotes them); \
                 it cannot be combined with --url"
            ))
            .into());
        }
        let (bin, why) = match args.server {
            Some(flavor) => requested_server(flavor, target.source)?,
            None => default_server()?,
        };
        let why = match target.source {
            Source::Env(var) if args.server.is_none() => format!("{why}; ${var} is not used"),
            _ => why,
        };
        if args.scenario == Scenario::FailoverSentinel {
            return failover_sentinel::run(bin, why, &mut stop).await;
        }
        return failover::run(bin, why, &mut stop).await;
    }
    let local = match (args.server, target.source) {
        (Some(_), Source::Flag) => {
            return Err(Usage(
                "--server starts a server of its own; it cannot be combined with --url".into(),
            )
            .into());
        }
        (Some(flavor), source) => {
            let (bin, why) = requested_server(flavor, source)?;
            Some(start(bin, why, &mut stop).await?)
        }
        (None, Source::Default) => {
            let (bin, why) = default_server()?;
            Some(start(bin, why, &mut stop).await?)
        }
        (None, _) => None,
    };
    let outcome = match &local {
        Some(l) => {
            let target = Target {
                url: l.server.url(),
                source: Source::Flag,
                tls: Default::default(),
            };
            session(&target, Some(l), &mut stop).await
        }
        None => session(target, None, &mut stop).await,
    };
    if let Some(local) = local {
        let what = format!("{} on 127.0.0.1:{}", local.bin.label(), local.server.port());
        let mut server = local.server;
        tokio::task::spawn_blocking(move || server.stop())
            .await
            .context("stopping the throwaway server")?;
        let said = write_line(format_args!("# stopped the throwaway server ({what})"));
        return outcome.and(said);
    }
    outcome
}

/// The server `--server` asked for, and why (saying so when a URL variable is set but unused).
fn requested_server(flavor: Flavor, source: Source) -> anyhow::Result<(ServerBinary, String)> {
    let bin = leasehold_harness::find(flavor).ok_or_else(|| {
        NoServer(format!(
            "no {flavor} server is installed (run scripts/install-servers)"
        ))
    })?;
    let mut why = format!("--server {flavor}");
    if let Source::Env(var) = source {
        why.push_str(&format!("; ${var} is not used"));
    }
    Ok((bin, why))
}

/// Redis >= 8.4 if installed (it has `DELEX`), else the newest server installed.
fn default_server() -> anyhow::Result<(ServerBinary, String)> {
    if let Some(bin) = leasehold_harness::find(Flavor::Redis8) {
        return Ok((
            bin,
            "no URL given; redis >= 8.4 preferred: it has DELEX".into(),
        ));
    }
    let bin = leasehold_harness::discover()
        .into_iter()
        .next()
        .ok_or_else(|| {
            NoServer(
                "no URL given and no redis/valkey server installed to start one \
             (run scripts/install-servers, or pass --url)"
                    .into(),
            )
        })?;
    Ok((
        bin,
        "no URL given; no redis >= 8.4 installed, so the newest available".into(),
    ))
}

async fn start(bin: ServerBinary, why: String, stop: &mut Stop) -> anyhow::Result<Local> {
    let label = bin.label();
    let b = bin.clone();
    // If a signal comes first, the task still finishes; the server it returns is then dropped,
    // which kills it.
    let starting = tokio::task::spawn_blocking(move || Server::start(&b, &ServerOptions::new()));
    let server = tokio::select! {
        started = starting => started.context("starting a server")?,
        () = stop.requested() => return Err(Interrupted.into()),
    }
    .with_context(|| format!("cannot start a throwaway {label} server"))?;
    Ok(Local { server, bin, why })
}

/// Ctrl-C and `SIGTERM`, listened for from the start, so that a throwaway server is stopped and
/// the demo's keys are deleted instead of the process just dying.
struct Stop {
    interrupt: Option<Signal>,
    terminate: Option<Signal>,
}

impl Stop {
    /// Installs the handlers (a signal whose handler cannot be installed keeps its default).
    fn listen() -> Stop {
        Stop {
            interrupt: signal(SignalKind::interrupt()).ok(),
            terminate: signal(SignalKind::terminate()).ok(),
        }
    }

    /// Resolves when either signal arrives.
    async fn requested(&mut self) {
        async fn one(s: &mut Option<Signal>) {
            match s {
                Some(s) => drop(s.recv().await),
                None => std::future::pending().await,
            }
        }
        tokio::select! {
            () = one(&mut self.interrupt) => {}
            () = one(&mut self.terminate) => {}
        }
    }
}

async fn session(target: &Target, local: Option<&Local>, stop: &mut Stop) -> anyhow::Result<()> {
    let client = Locker::from(target.connect().await?);
    // A client with Redis-only options, used through a Locker like the first.
    let lua = Locker::from(
        target
            .connect_with(
                RedisOptions::new()
                    .release_strategy(ReleaseStrategy::Lua)
                    .extend_strategy(ExtendStrategy::Lua),
            )
            .await?,
    );
    let redis = redis_of(&client)?;
    let server = redis.server();
    say!(
        "# leasehold demo: the seed's src/patterns-locks.ts, its AI-written helper, then the \
         cli/patterns-locks-1.redis transcript"
    );
    match local {
        Some(l) => say!(
            "# server: {server}, a throwaway server started for this demo on 127.0.0.1:{} ({}); \
             it is stopped at the end",
            l.server.port(),
            l.why
        ),
        None => say!(
            "# server: {server} at {} (from {})",
            target.shown(),
            match target.source {
                Source::Env(var) => format!("${var}"),
                Source::Flag => "--url".into(),
                Source::Default => "the default URL".into(),
            }
        ),
    }
    say!(
        "# release strategy: {} | extend strategy: {}",
        redis.release_strategy(),
        redis.extend_strategy()
    );
    if local.is_none() {
        ensure_keys_free(redis).await?;
    }
    let prompt = prompt(&target.url)?;
    let body = async {
        walkthrough::run(&client, &lua).await?;
        helper::run(redis).await?;
        transcript::run(redis, &prompt).await
    };
    let outcome = tokio::select! {
        r = body => r,
        () = stop.requested() => Err(Interrupted.into()),
    };
    let cleaned = del(&mut redis.connection(), &demo_keys())
        .await
        .context("deleting the demo's keys");
    outcome.and(cleaned)
}

/// The Redis client behind one of the demo's lockers (the demo connects to Redis and Valkey
/// only): for what only Redis has, its server's facts, its strategies and raw commands.
fn redis_of(locker: &Locker) -> anyhow::Result<&RedisClient> {
    locker.as_redis().with_context(|| {
        format!(
            "the demo needs a Redis or Valkey server, not {}",
            locker.backend()
        )
    })
}

/// On a server the demo did not start, refuses to touch keys that already exist.
async fn ensure_keys_free(client: &RedisClient) -> anyhow::Result<()> {
    let keys = demo_keys();
    let mut pipe = redis::pipe();
    for k in &keys {
        pipe.exists(k);
    }
    let exist: Vec<bool> = pipe.query_async(&mut client.connection()).await?;
    let taken: Vec<&str> = keys
        .iter()
        .zip(exist)
        .filter_map(|(k, e)| e.then_some(k.as_str()))
        .collect();
    if taken.is_empty() {
        return Ok(());
    }
    Err(Usage(format!(
        "the demo writes and deletes the keys {}, and {} already exist{} on this server; \
         delete {} first, or run `leasehold-lab demo` without a URL to use a throwaway server",
        keys.join(", "),
        taken.join(", "),
        if taken.len() == 1 { "s" } else { "" },
        if taken.len() == 1 { "it" } else { "them" },
    ))
    .into())
}

/// redis-cli's prompt for the server: `host:port`, with `[db]` when not 0.
fn prompt(url: &str) -> anyhow::Result<String> {
    let client = redis::Client::open(url).context("reading the URL")?;
    let info = client.get_connection_info();
    let db = info.redis_settings().db();
    Ok(if db == 0 {
        info.addr().to_string()
    } else {
        format!("{}[{db}]", info.addr())
    })
}

fn write_line(args: fmt::Arguments<'_>) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{args}").context("cannot write to stdout")
}

/// `DEL keys...`.
async fn del(conn: &mut ClientConnection, keys: &[impl AsRef<str>]) -> anyhow::Result<()> {
    let mut cmd = redis::cmd("DEL");
    for k in keys {
        cmd.arg(k.as_ref());
    }
    cmd.query_async::<i64>(conn).await?;
    Ok(())
}

/// `GET key`.
async fn get(conn: &mut ClientConnection, key: &str) -> anyhow::Result<Option<String>> {
    Ok(redis::cmd("GET").arg(key).query_async(conn).await?)
}

/// The seed's TTLs and pauses.
const TTL_SHORT: Duration = Duration::from_millis(200);
const TTL_LONG: Duration = Duration::from_secs(30);
/// How long a slow holder works (its short lock expires meanwhile).
const STALL: Duration = Duration::from_millis(300);
/// How much later the slow holder releases after the next holder came in.
const LATE: Duration = Duration::from_millis(100);
