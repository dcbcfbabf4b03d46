//! The command line of `leasehold-lab`, as `clap` derive types.

use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use leasehold_cli::{ServerArgs, parse_duration, parse_positive_duration, parse_renewed_ttl};
use leasehold_harness::Flavor;

/// Exit statuses, shown at the end of `--help`.
const EXIT_STATUSES: &str = "\
Exit status:
  0   success
  1   check: with fencing on, a stale write was accepted or an increment lost (or a worker failed)
  64  usage error: bad arguments, a malformed URL
  69  no server could be started (or the one given by --url cannot be reached)
  70  any other failure
  130 interrupted (Ctrl-C)";

/// `leasehold-lab`: the demo, the safety checker and the benchmarks.
#[derive(Debug, Parser)]
#[command(
    name = "leasehold-lab",
    version,
    about = "leasehold's lab: the demo, the fault-injection safety checker and the benchmarks, on \
             throwaway servers it starts itself (the `leasehold` command is the lock CLI)",
    after_help = EXIT_STATUSES
)]
pub struct Cli {
    /// The server (`demo` only).
    #[command(flatten)]
    pub servers: ServerArgs,

    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

impl Cli {
    /// Every `--url`, before and after the subcommand, in order; the last `--node-timeout`.
    pub fn servers(&self) -> ServerArgs {
        match &self.command {
            Command::Demo(a) => self.servers.merge(&a.servers),
            // These start their own servers.
            Command::Bench(_)
            | Command::Check(_)
            | Command::CheckWorker(_)
            | Command::BenchWorker(_) => self.servers.clone(),
        }
    }
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Walk through leasehold's locks against a real server, step by step
    ///
    /// Takes, expires, extends and releases locks with the library and prints ten result lines,
    /// each computed from the server's answers; runs a naive lock helper (a constant value,
    /// released with a plain DEL) through the same expiry to show how it fails; then replays the
    /// same steps as a redis-cli transcript (with the Lua equivalent where the server lacks
    /// DELEX or SET ... IFEQ). Without a URL it starts a throwaway local server (redis >= 8.4 if
    /// installed) and stops it at the end. On a server given by URL it refuses to run if one of
    /// its keys already exists, and deletes its keys at the end.
    Demo(DemoArgs),
    /// Benchmark leasehold against its peers and the server's own limit, side by side
    ///
    /// Starts fresh servers through the harness, runs the workloads (W1-W8, W1T, WB) for
    /// leasehold, the in-process floor (the same commands with no lock logic), redis-benchmark
    /// and the peer libraries installed by bench/install-peers, and writes latest.json,
    /// latest.md and SVG plots to --out. scripts/bench installs the peers and runs this.
    Bench(BenchArgs),
    /// Fault injection against a fenced register: do the locks keep the data correct?
    ///
    /// Spawns worker processes that loop acquire -> read a register -> work -> write register+1
    /// with their fencing token -> release, against lock servers and a register (redis, or a
    /// real PostgreSQL) that it starts itself, injects faults on a seeded schedule (see
    /// --faults), and reports overlapping critical sections (and those where both leases were
    /// still valid), stale writes attempted and accepted, lost increments, and the longest idle
    /// gap, per fault, with report.json and timeline.svg in --out. Exit 1 if, with fencing on, a
    /// stale write was accepted or an increment lost (or a worker failed). docs/safety.md shows
    /// every scenario.
    Check(CheckArgs),
    /// One worker process of `check` (internal).
    #[command(hide = true)]
    CheckWorker(CheckWorkerArgs),
    /// One client process of `bench`'s W8 (internal).
    #[command(hide = true)]
    BenchWorker(BenchWorkerArgs),
}

/// Arguments of the internal `bench-worker`: one of W8's client processes.
#[derive(Debug, Args)]
pub struct BenchWorkerArgs {
    /// The lock server.
    #[arg(long)]
    pub lock_url: String,
    /// Keys to pick from at random (`w8:0` .. `w8:N-1`).
    #[arg(long, default_value_t = 1000)]
    pub keys: u64,
    /// How long to run.
    #[arg(long, default_value_t = 30.0)]
    pub secs: f64,
    /// Start at this instant (milliseconds since the Unix epoch), so that all workers start
    /// together.
    #[arg(long, default_value_t = 0)]
    pub start_at_ms: u64,
    /// How long to hold each lock, in microseconds.
    #[arg(long, default_value_t = 1000)]
    pub hold_us: u64,
    /// How long an acquisition may wait, in milliseconds.
    #[arg(long, default_value_t = 10_000)]
    pub wait_ms: u64,
}

/// Arguments of `leasehold-lab check`.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Worker processes.
    #[arg(long, default_value_t = 4)]
    pub workers: u64,
    /// Serve the workers' metrics (see `leasehold run --metrics-addr`) in the Prometheus text
    /// format on this address while the check runs, each sample labelled with its worker.
    #[arg(long, value_name = "ADDR")]
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// How long to run.
    #[arg(long, value_name = "DURATION", value_parser = parse_positive_duration, default_value = "20s")]
    pub duration: Duration,
    /// The lock's TTL (at least 50 ms: the workers renew their leases).
    #[arg(long, value_name = "DURATION", value_parser = parse_renewed_ttl, default_value = "300ms")]
    pub ttl: Duration,
    /// How long each worker works while holding the lock (each critical section: 0.5 to 1.5
    /// times this, seeded).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "20ms")]
    pub work: Duration,
    /// Faults to inject, in turn: pause, kill (a holder); restart (the lock server: with
    /// AOF and without, in turn; or restart-aof / restart-noaof), stall (SIGSTOP the lock
    /// server), failover (promote its replica), slow-link (the workers' replies held back
    /// past their response timeout; they renew their leases; --nodes 1); with --nodes > 1
    /// restart and stall hit a minority of the nodes, and clock-jump (Redlock only: a minority
    /// cut off until a worker holds the rest, then one of those nodes' clock jumps 2 TTLs
    /// forward, libfaketime; Redis 8 / Valkey 9). With --topology cluster: pause, kill,
    /// failover (the lock slot's master killed, its replica takes over), migrate (the lock's
    /// slot moved to another master), migrate-held (the same, the slot held MIGRATING past
    /// the fair queue's entry lifetime). With --topology sentinel: pause, kill, failover (SENTINEL FAILOVER),
    /// kill-primary (the sentinels promote the replica). With --backend etcd: pause, kill,
    /// member-kill (a follower killed, restarted 2 TTLs later), member-pause (a member
    /// SIGSTOPped for 2 TTLs), leader-kill (the leader killed, restarted 2 TTLs later), restart
    /// (every member killed while a worker holds, so its release fails; restarted with their
    /// data 2 TTLs later). With
    /// --backend postgres: pause, kill, restart (the server restarted: every session, and so
    /// every lock, ends at once).
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    pub faults: Vec<String>,
    /// The lock backend: redis (the servers of --topology and --nodes), etcd (a 3-member etcd
    /// cluster; fencing numbers are etcd revisions), or postgres (a PostgreSQL server of its
    /// own: session advisory locks). --topology, --nodes, --release del and --replica-ack are
    /// for redis only.
    #[arg(long, default_value = "redis", value_parser = ["redis", "etcd", "postgres"])]
    pub backend: String,
    /// Where the lock lives: standalone (one server, or Redlock with --nodes), cluster (a
    /// Redis Cluster of 3 masters with a replica each), or sentinel (a primary, its replica
    /// and 3 sentinels). Default standalone; the redis backend only. The register always
    /// lives on a server of its own.
    #[arg(long, value_parser = ["standalone", "cluster", "sentinel"])]
    pub topology: Option<String>,
    /// --backend postgres only: put a connection pooler in front of the lock's PostgreSQL.
    /// `pgbouncer`: Debian's PgBouncer (pool mode: --pool-mode; server_lifetime = 1 s, so
    /// server connections are closed and opened again all the time; server_login_retry = 1 s); the workers then use
    /// lease rows (`?lock=lease`) unless --pg-lock session.
    #[arg(long, value_name = "POOLER", value_parser = ["pgbouncer"])]
    pub pooler: Option<String>,
    /// With --pooler: PgBouncer's pool_mode, `transaction` (a server session per transaction)
    /// or `session` (per client connection).
    #[arg(long, value_name = "MODE", default_value = "transaction", value_parser = ["transaction", "session"])]
    pub pool_mode: String,
    /// --backend postgres only: the workers' lock, `session` (advisory locks held by a
    /// session) or `lease` (lease rows, `?lock=lease`). Default: lease behind --pooler,
    /// session otherwise. Session locks through a transaction pooler must be refused: the run
    /// reports the refusals (`lock_refusals`) and fails if any lock is granted there.
    #[arg(long, value_name = "LOCK", value_parser = ["session", "lease"])]
    pub pg_lock: Option<String>,
    /// Lock servers: 1 (a plain lock), or an odd number >= 3 (Redlock over them).
    #[arg(long, default_value_t = 1)]
    pub nodes: usize,
    /// Require N replicas to acknowledge each acquisition (WAIT N, bounded by TTL/4) before it
    /// counts; the lock server then runs with a replica. The mitigation of the failover hazard.
    #[arg(long, value_name = "N")]
    pub replica_ack: Option<u32>,
    /// Workers take the lock in arrival order with direct handoff (LockOptions::fair; Redis
    /// only, one lock server or a topology, not Redlock).
    #[arg(long)]
    pub fair: bool,
    /// The semaphore workload: workers take one of N permits of one semaphore (no register
    /// writes: N holders share it); the report's max_valid_holders must stay <= N (exit 1
    /// otherwise). Redis only, one lock server or a topology.
    #[arg(long, value_name = "N")]
    pub permits: Option<u32>,
    /// The read-write lock workload: each worker's critical section is a write (one in three,
    /// with the fenced register increment) or a read (holding only); overlaps count only pairs
    /// with a writer, and any such overlap while both leases were valid fails the run.
    #[arg(long, conflicts_with = "permits")]
    pub rw: bool,
    /// The multi-lock workload: workers take two keys at once, half of them in the opposite
    /// order (no register writes); any overlap while both leases were valid fails the run, and
    /// a deadlock would show as no acquisitions.
    #[arg(long, conflicts_with_all = ["permits", "rw"])]
    pub multi: bool,
    /// The election workload: workers campaign for leadership, and the leader writes the
    /// register fenced by its term.
    #[arg(long, conflicts_with_all = ["permits", "rw", "multi"])]
    pub elect: bool,
    /// The server of the matrix to run the locks on (default redis8 if installed, else the
    /// newest installed); with --backend etcd or postgres, only the register's (--register
    /// redis).
    #[arg(long, value_name = "FLAVOR")]
    pub server: Option<Flavor>,
    /// Seed of the fault schedule and of the work times.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Where the register lives: redis (the library's FencedStore), or postgres (a real
    /// PostgreSQL, one row updated only by a holder whose number is not below the row's).
    #[arg(long, default_value = "redis", value_parser = ["redis", "postgres"])]
    pub register: String,
    /// How workers release: `token` (the library) or `del` (the classic bug, to show it).
    #[arg(long, default_value = "token", value_parser = ["token", "del"])]
    pub release: String,
    /// Write the register without the fencing token (to show what fencing prevents).
    #[arg(long)]
    pub no_fencing: bool,
    /// Do not raise the fencing counter when the register refuses a number below its highest
    /// (by default a refused worker raises it, so a counter that went back in a restart or a
    /// failover catches up at once instead of one refused holder at a time).
    #[arg(long)]
    pub no_raise_counter: bool,
    /// Output directory (report.json, timeline.svg, logs/).
    #[arg(long, value_name = "DIR", default_value = "check-results")]
    pub out: std::path::PathBuf,
}

/// Arguments of the internal `check-worker`.
#[derive(Debug, Args)]
pub struct CheckWorkerArgs {
    /// A file listing the lock servers' URLs, one per line (re-read after errors: a failover
    /// changes it).
    #[arg(long)]
    pub lock_urls: std::path::PathBuf,
    /// The register's kind (redis or postgres).
    #[arg(long, value_parser = ["redis", "postgres"])]
    pub register: String,
    /// The register's server.
    #[arg(long)]
    pub register_url: String,
    /// Require this many replicas to acknowledge each acquisition.
    #[arg(long)]
    pub replica_ack: Option<u32>,
    /// Take the lock in arrival order with direct handoff.
    #[arg(long)]
    pub fair: bool,
    /// Take one of N permits of a semaphore instead of the lock, and leave the register alone.
    #[arg(long)]
    pub permits: Option<u32>,
    /// Use a read-write lock: write one time in three, read otherwise (reads leave the
    /// register alone).
    #[arg(long)]
    pub rw: bool,
    /// Take two keys at once with a multi-lock (odd workers in the opposite order); no register.
    #[arg(long)]
    pub multi: bool,
    /// Campaign in an election; the term fences the register writes.
    #[arg(long)]
    pub elect: bool,
    /// Serve this worker's metrics on a free loopback port, written to `<log>.metrics`.
    #[arg(long)]
    pub metrics: bool,
    /// After a refused read, raise the fencing counter to the register's highest number.
    #[arg(long)]
    pub raise_counter: bool,
    /// Seeds this worker's work-time jitter.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// The lock key.
    #[arg(long)]
    pub key: String,
    /// This worker's number.
    #[arg(long)]
    pub id: u64,
    /// The lock's TTL.
    #[arg(long, value_parser = parse_positive_duration)]
    pub ttl: Duration,
    /// Work per critical section.
    #[arg(long, value_parser = parse_duration)]
    pub work: Duration,
    /// The event log (JSON lines).
    #[arg(long)]
    pub log: std::path::PathBuf,
    /// Where to record `token worker pid` at each acquisition.
    #[arg(long)]
    pub holders: std::path::PathBuf,
    /// Stop when this file exists.
    #[arg(long)]
    pub stop_file: std::path::PathBuf,
    /// Write without the fencing token.
    #[arg(long)]
    pub no_fencing: bool,
    /// Release with a plain DEL.
    #[arg(long)]
    pub release_del: bool,
    /// Keep each lease alive with the client's renewals while it is held (`slow-link`).
    #[arg(long)]
    pub auto_extend: bool,
    /// Bound on each reply of the lock server (one server only; the library's default when
    /// absent).
    #[arg(long, value_parser = parse_positive_duration)]
    pub response_timeout: Option<Duration>,
}

/// Arguments of `leasehold-lab bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Small counts and short durations (a smoke run of a minute or two).
    #[arg(long)]
    pub quick: bool,
    /// Interleaved repetitions of W1, W1T, W2, W3, W4 and WB whose medians are reported (default 3,
    /// 1 with --quick).
    #[arg(long, value_name = "N")]
    pub reps: Option<usize>,
    /// The server of the matrix to measure against (default redis8: it has DELEX).
    #[arg(long, value_name = "FLAVOR")]
    pub server: Option<Flavor>,
    /// Only these workloads (W1,W1T,W2,W3,W4,W5,W6,W7,W8,WB). W1T is W1 on the other topologies: leasehold
    /// on a Redis Cluster (3 masters + 1 replica each) and through Sentinel (a primary, a
    /// replica, 3 sentinels), interleaved with standalone repetitions. WB runs W1, W3 and W5
    /// through the one lock API on Redis, etcd (1 and 3 members) and PostgreSQL. Without this
    /// option every workload runs.
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    pub workloads: Vec<String>,
    /// Where to write the results and the plots.
    #[arg(long, value_name = "DIR", default_value = "bench/results")]
    pub out: std::path::PathBuf,
    /// The file name (without extension) of the JSON and markdown results in --out, e.g.
    /// `--workloads W1T --name topologies` for a partial run that leaves latest.* alone.
    #[arg(long, value_name = "STEM", default_value = "latest")]
    pub name: String,
    /// Leave the peer libraries out.
    #[arg(long)]
    pub no_peers: bool,
}

impl CheckArgs {
    /// `--topology`, standalone when not given.
    pub fn topology_name(&self) -> &str {
        self.topology.as_deref().unwrap_or("standalone")
    }
}

/// Arguments of `leasehold-lab demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// The server(s).
    #[command(flatten)]
    pub servers: ServerArgs,
    /// Start this server of the test matrix (redis7, redis8, valkey9) instead of the default
    /// choice (redis8 if installed, else the newest installed). Cannot be combined with --url.
    #[arg(long, value_name = "FLAVOR")]
    pub server: Option<Flavor>,
    /// What to show. `walkthrough` (the default): the lock walkthrough, the unsafe hand-written
    /// helper and the redis-cli transcript. `failover`: a lock server fails over to a
    /// replica that had not received the lock, so two clients hold it at once; the fenced write
    /// keeps the stale holder out, and a replica-acknowledged acquisition fails instead. It
    /// starts its own throwaway servers (master, replica, resource), so it cannot be combined
    /// with --url. `failover-sentinel`: the same with real sentinels (a primary, a replica, 3
    /// sentinels) doing the promotion; the clients connect through them and follow it without
    /// being rebuilt, and the holder that lost the lock in the failover is told so by its
    /// auto-extension (about 20 s: it waits for a renewal). Throwaway servers too, no --url.
    #[arg(long, value_enum, value_name = "SCENARIO", default_value_t = Scenario::Walkthrough)]
    pub scenario: Scenario,
}

/// The scenarios of `leasehold-lab demo`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
#[non_exhaustive]
pub enum Scenario {
    /// The lock walkthrough, the unsafe helper and the redis-cli transcript.
    #[default]
    Walkthrough,
    /// A failover to a replica that missed the lock: two holders, and what stops them.
    Failover,
    /// The same with real sentinels promoting the replica, and clients that follow them.
    FailoverSentinel,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }
}
