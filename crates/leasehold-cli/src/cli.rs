//! The command line, as `clap` derive types.

use std::time::Duration;

use clap::{ArgAction, Args, Parser, Subcommand, ValueEnum};
use leasehold_harness::Flavor;

/// Exit statuses, shown at the end of `--help`.
const EXIT_STATUSES: &str = "\
Exit status:
  0   success
  1   not held: the token no longer holds the key (expired, released, or taken over)
  64  usage error: bad arguments, a malformed URL, a TTL out of range
  69  server unreachable, or (Redlock) fewer than a majority of the nodes answered; each node's
      outcome is on stderr (or no server could be started for the demo)
  70  any other failure (an unexpected server error or reply)
  75  not acquired: the lock is busy, or --wait elapsed
  76  `run`: the lock was lost while the command ran
  77  authentication refused (or an ACL forbids the command)
  130 interrupted (Ctrl-C)";

/// `leasehold`: distributed locks on Redis and Valkey from the shell.
#[derive(Debug, Parser)]
#[command(
    name = "leasehold",
    version,
    about = "Distributed locks on Redis and Valkey: take, release, extend and inspect them from the \
             shell, or run the walkthrough",
    after_help = EXIT_STATUSES
)]
pub struct Cli {
    /// The server(s).
    #[command(flatten)]
    pub servers: ServerArgs,

    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// `--url` and `--node-timeout`, accepted before and after the subcommand alike.
///
/// (Each command level has its own copy instead of one `global` argument: clap keeps only the
/// subcommand's values of a global argument given at both levels, and `--url A sub --url B`
/// must mean both servers, not B alone.)
#[derive(Debug, Clone, Default, Args)]
pub struct ServerArgs {
    /// The server, as `redis://[user:password@]host:port/db` (or `valkey://...`; `rediss://` for
    /// TLS). Also `redis-cluster://host:port[,host:port...]` for a Redis Cluster and
    /// `redis-sentinel://host:port[,host:port...]#master` for a Sentinel-monitored primary.
    ///
    /// Give it two or more times (before or after the subcommand: they add up) for Redlock over
    /// those servers (independent masters, not replicas of each other): a lock is taken when a
    /// majority of them grant it, released and extended on all of them, and `inspect` shows each
    /// one. Default: $LEASEHOLD_URL (several URLs separated by commas mean Redlock too), else
    /// $REDIS_URL, else redis://127.0.0.1:6379/
    #[arg(long, value_name = "URL", action = ArgAction::Append)]
    pub url: Vec<String>,

    /// Redlock only: how long each node has to answer (e.g. 50ms, the default). Keep it far
    /// below the TTL: a slow node costs an acquisition this much of its validity at most.
    #[arg(long, value_name = "DURATION", value_parser = parse_positive_duration)]
    pub node_timeout: Option<Duration>,

    /// The --url(s) are nodes of one Redis Cluster (seeds: the client learns the rest), not
    /// Redlock masters. Same as one `redis-cluster://host:port,host:port` URL.
    #[arg(long, conflicts_with = "sentinel_master")]
    pub cluster: bool,

    /// The --url(s) are sentinels; lock on the primary they name NAME (and follow it through
    /// failovers). Same as one `redis-sentinel://host:port,host:port#NAME` URL.
    #[arg(long, value_name = "NAME")]
    pub sentinel_master: Option<String>,

    /// For rediss:// (TLS): trust the certificate authority in this PEM file instead of the
    /// system's roots.
    #[arg(long, value_name = "PATH", env = "LEASEHOLD_TLS_CA_FILE")]
    pub tls_ca_file: Option<std::path::PathBuf>,
}

impl Cli {
    /// Every `--url`, before and after the subcommand, in order; the last `--node-timeout`.
    pub fn servers(&self) -> ServerArgs {
        let sub = self.command.servers();
        ServerArgs {
            url: self.servers.url.iter().chain(&sub.url).cloned().collect(),
            node_timeout: sub.node_timeout.or(self.servers.node_timeout),
            cluster: sub.cluster || self.servers.cluster,
            sentinel_master: sub
                .sentinel_master
                .clone()
                .or_else(|| self.servers.sentinel_master.clone()),
            tls_ca_file: sub
                .tls_ca_file
                .clone()
                .or_else(|| self.servers.tls_ca_file.clone()),
        }
    }
}

impl Command {
    /// The subcommand's own `--url` and `--node-timeout`.
    fn servers(&self) -> &ServerArgs {
        match self {
            Command::Demo(a) => &a.servers,
            Command::Acquire(a) => &a.servers,
            Command::Release(a) => &a.servers,
            Command::Extend(a) => &a.servers,
            Command::Inspect(a) => &a.servers,
            Command::Run(a) => &a.servers,
            Command::Elect(a) => &a.servers,
            // The benchmark starts its own servers.
            Command::Bench(_)
            | Command::Check(_)
            | Command::CheckWorker(_)
            | Command::BenchWorker(_) => &NO_SERVERS,
        }
    }
}

static NO_SERVERS: ServerArgs = ServerArgs {
    url: Vec::new(),
    node_timeout: None,
    cluster: false,
    sentinel_master: None,
    tls_ca_file: None,
};

/// The subcommands.
#[derive(Debug, Subcommand)]
#[non_exhaustive]
pub enum Command {
    /// Run the course chapter's walkthrough against a real server
    ///
    /// Re-creates src/patterns-locks.ts with the library and prints its ten result lines, runs
    /// the chapter's "AI-written helper" through the same expiry, then replays the
    /// cli/patterns-locks-1.redis transcript (with the Lua equivalent where the server lacks
    /// DELEX or SET ... IFEQ). Without a URL it starts a throwaway local server (redis >= 8.4 if
    /// installed) and stops it at the end. On a server given by URL it refuses to run if one of
    /// its keys already exists, and deletes its keys at the end.
    Demo(DemoArgs),
    /// Take a lock that outlives this command; print its token (and fencing number)
    #[command(
        after_help = "Output: the token on the first line; with --fencing, the fencing \
                            number on the second. Keep the token: `release` and `extend` need it."
    )]
    Acquire(AcquireArgs),
    /// Release a lock, if the token still holds it
    Release(ReleaseArgs),
    /// Reset a lock's TTL, if the token still holds it
    Extend(ExtendArgs),
    /// Show a lock's holder token, remaining TTL and fencing counter (Redlock: on each node)
    #[command(after_help = INSPECT_OUTPUT)]
    Inspect(InspectArgs),
    /// Run a command under a lock: kept alive while it runs, released when it ends
    ///
    /// Runs CMD directly (no shell unless you write one) with LEASEHOLD_KEY, LEASEHOLD_TOKEN and,
    /// with --fencing, LEASEHOLD_FENCING_TOKEN in its environment, renews the lock every TTL/3
    /// while it runs, passes its exit status through (killed by signal N: 128+N), forwards
    /// SIGINT/SIGTERM/SIGHUP to it, and releases the lock however it ends. If the lock is lost
    /// (a renewal finds it gone or taken over, or cannot reach the server in time), CMD's process
    /// group gets SIGTERM, then SIGKILL after --kill-grace, and leasehold exits 76.
    #[command(after_help = RUN_EXIT_STATUSES)]
    Run(RunArgs),
    /// Run a command only while leader of an election
    ///
    /// Campaigns for NAME (waiting as long as it takes), then runs CMD with LEASEHOLD_KEY,
    /// LEASEHOLD_TOKEN, LEASEHOLD_LEADER_ID and LEASEHOLD_TERM (the term: strictly increasing
    /// from leader to leader, a fencing number) in its environment. Leadership is renewed every
    /// TTL/3; if it is lost, CMD's process group gets SIGTERM (SIGKILL after --kill-grace) and
    /// leasehold exits 76. When CMD ends, leasehold resigns and exits with CMD's status. Redis
    /// and Valkey only.
    #[command(after_help = RUN_EXIT_STATUSES)]
    Elect(ElectArgs),
    /// Benchmark leasehold against its peers and the server's own limit, side by side
    ///
    /// Starts fresh servers through the harness, runs the workloads W1-W5 for leasehold, the
    /// in-process floor (the same commands with no lock logic), redis-benchmark and the peer
    /// libraries installed by bench/install-peers, and writes latest.json, latest.md and SVG
    /// plots to --out. scripts/bench installs the peers and runs this.
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

/// Arguments of `leasehold check`.
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
    /// The lock's TTL.
    #[arg(long, value_name = "DURATION", value_parser = parse_positive_duration, default_value = "300ms")]
    pub ttl: Duration,
    /// How long each worker works while holding the lock (each critical section: 0.5 to 1.5
    /// times this, seeded).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "20ms")]
    pub work: Duration,
    /// Faults to inject, in turn: pause, kill (a holder); restart (the lock server: with
    /// AOF and without, in turn; or restart-aof / restart-noaof), stall (SIGSTOP the lock
    /// server), failover (promote its replica), slow-link (the workers' replies held back
    /// past their response timeout; they renew their leases; --nodes 1); with --nodes > 1
    /// restart and stall hit a minority of the nodes. With --topology cluster: pause, kill,
    /// failover (the lock slot's master killed, its replica takes over), migrate (the lock's
    /// slot moved to another master), migrate-held (the same, the slot held MIGRATING past
    /// the fair queue's entry lifetime). With --topology sentinel: pause, kill, failover (SENTINEL FAILOVER),
    /// kill-primary (the sentinels promote the replica). With --backend etcd: pause, kill,
    /// member-kill (a follower killed, restarted 2 TTLs later), member-pause (a member
    /// SIGSTOPped for 2 TTLs), leader-kill (the leader killed, restarted 2 TTLs later). With
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
    /// `pgbouncer`: Debian's PgBouncer with pool_mode=transaction; the workers then use lease
    /// rows (`?lock=lease`), since session locks are refused through a transaction pooler.
    #[arg(long, value_name = "POOLER", value_parser = ["pgbouncer"])]
    pub pooler: Option<String>,
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
    /// How workers release: `token` (the library) or `del` (the seed's bug, to show it).
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

/// Arguments of `leasehold bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Small counts and short durations (a smoke run of a minute or two).
    #[arg(long)]
    pub quick: bool,
    /// Interleaved repetitions of W1 and W2 whose medians are reported (default 3, 1 with
    /// --quick).
    #[arg(long, value_name = "N")]
    pub reps: Option<usize>,
    /// The server of the matrix to measure against (default redis8: it has DELEX).
    #[arg(long, value_name = "FLAVOR")]
    pub server: Option<Flavor>,
    /// Only these workloads (W1,W1T,W2,W3,W4,W5,W6,W7,W8,WB). W1T is W1 on the other topologies: leasehold
    /// on a Redis Cluster (3 masters + 1 replica each) and through Sentinel (a primary, a
    /// replica, 3 sentinels), interleaved with standalone repetitions. WB (only when named) runs
    /// W1, W3 and W5 through the one lock API on Redis, etcd (1 and 3 members) and PostgreSQL.
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

/// What `leasehold inspect --json` prints.
const INSPECT_OUTPUT: &str = "\
JSON output: {key, held, token, ttl_ms, fencing_token}. With several --url (Redlock): {key, held,
token, nodes: [{node, held, token, ttl_ms, fencing_token} or {node, error}]}, where held is true
and token set when a majority of all the nodes hold the same token. Exits 69 (and prints nothing
on stdout) when fewer than a majority of the nodes answer.";

/// Exit statuses of `leasehold run`.
const RUN_EXIT_STATUSES: &str = "\
Exit status:
  N    the command's own exit status (128+N if signal N killed it)
  69   server unreachable (Redlock: fewer than a majority of the nodes answered)
  75   the lock is busy (--no-wait) or --wait elapsed (or --conflict-exit-code)
  76   the lock was lost while the command ran; the command was stopped
  126  the command could not be executed
  127  the command was not found
Example, a cron job that must never run twice at once (skipped while another run holds it):
  */5 * * * * leasehold run --no-wait --ttl 1m jobs:nightly-report -- /usr/local/bin/report";

impl CheckArgs {
    /// `--topology`, standalone when not given.
    pub fn topology_name(&self) -> &str {
        self.topology.as_deref().unwrap_or("standalone")
    }
}

/// Arguments of `leasehold run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The server(s).
    #[command(flatten)]
    pub servers: ServerArgs,
    /// The lock key.
    pub key: String,
    /// The lease: how long the lock outlives leasehold if leasehold dies (renewed every TTL/3).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "30s")]
    pub ttl: Duration,
    /// Wait at most this long for a busy lock (default: wait as long as it takes).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, conflicts_with = "no_wait")]
    pub wait: Option<Duration>,
    /// Do not wait: exit 75 at once if the lock is busy.
    #[arg(long)]
    pub no_wait: bool,
    /// Take a fencing number and export it as LEASEHOLD_FENCING_TOKEN.
    #[arg(long, conflicts_with_all = ["permits", "read"])]
    pub fencing: bool,
    /// A semaphore or a read-write lock instead of a lock: the command runs while it holds a
    /// permit (at most N such commands at once, across machines) or its side.
    #[command(flatten)]
    pub primitive: PrimitiveArgs,
    /// Take the lock in arrival order: wait in the server's queue, and get the lock handed over
    /// by the release (no barging, no herd). Every holder and waiter of the key must use it.
    #[arg(long, conflicts_with_all = ["permits", "read", "write"])]
    pub fair: bool,
    /// After SIGTERM on a lost lock, wait this long before SIGKILL.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "5s")]
    pub kill_grace: Duration,
    /// Exit with this status instead of 75 when the lock is busy or --wait elapsed.
    #[arg(long, value_name = "N")]
    pub conflict_exit_code: Option<u8>,
    /// Serve leasehold's metrics (acquisitions, wait and hold times, renewals, losses,
    /// handoffs, round trips) in the Prometheus text format on this address, e.g.
    /// 127.0.0.1:9464 (any path answers; port 0 picks a free one, printed on stderr).
    #[arg(long, value_name = "ADDR")]
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// The command and its arguments (after `--`).
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "CMD"
    )]
    pub command: Vec<String>,
}

/// Arguments of `leasehold elect`.
#[derive(Debug, Args)]
pub struct ElectArgs {
    /// The server(s).
    #[command(flatten)]
    pub servers: ServerArgs,
    /// The election's name (its lock key).
    pub name: String,
    /// This candidate's id, as `leader()` and the other candidates see it (default: pid-PID).
    #[arg(long)]
    pub id: Option<String>,
    /// The leader's lease: how long a crashed leader keeps the others waiting.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "10s")]
    pub ttl: Duration,
    /// After SIGTERM on a lost leadership, wait this long before SIGKILL.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "5s")]
    pub kill_grace: Duration,
    /// The command and its arguments (after `--`).
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "CMD"
    )]
    pub command: Vec<String>,
}

/// Arguments of `leasehold demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// The server(s).
    #[command(flatten)]
    pub servers: ServerArgs,
    /// Start this server of the test matrix (redis7, redis8, valkey9) instead of the default
    /// choice (redis8 if installed, else the newest installed). Cannot be combined with --url.
    #[arg(long, value_name = "FLAVOR")]
    pub server: Option<Flavor>,
    /// What to show. `walkthrough` (the default): the seed chapter's walkthrough, its
    /// AI-written helper and its redis-cli transcript. `failover`: a lock server fails over to a
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

/// The scenarios of `leasehold demo`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
#[non_exhaustive]
pub enum Scenario {
    /// The seed chapter's walkthrough, helper and transcript.
    #[default]
    Walkthrough,
    /// A failover to a replica that missed the lock: two holders, and what stops them.
    Failover,
    /// The same with real sentinels promoting the replica, and clients that follow them.
    FailoverSentinel,
}

/// Output options shared by the lock subcommands.
#[derive(Debug, Args)]
pub struct OutputArgs {
    /// Print one JSON object (`key`, `token`, `fencing_token` when there is one, `ttl_ms`)
    /// instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `leasehold acquire`.
#[derive(Debug, Args)]
pub struct AcquireArgs {
    /// The server(s).
    #[command(flatten)]
    pub servers: ServerArgs,
    /// The lock key.
    pub key: String,
    /// How long the lock lives unless released or extended (e.g. 200ms, 30s, 5m).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub ttl: Duration,
    /// Keep retrying a busy lock for this long (default: one attempt).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub wait: Option<Duration>,
    /// Also take a fencing number: strictly increasing with each acquisition of this key.
    #[arg(long, conflicts_with_all = ["permits", "read"])]
    pub fencing: bool,
    /// Take the lock in arrival order: wait in the server's queue, and get the lock handed over
    /// by the release (no barging, no herd). Every holder and waiter of the key must use it.
    #[arg(long, conflicts_with_all = ["permits", "read", "write"])]
    pub fair: bool,
    /// A permit of a semaphore or a side of a read-write lock instead of a lock; `extend` and
    /// `release` with the same flag take its token.
    #[command(flatten)]
    pub primitive: PrimitiveArgs,
    /// Output format.
    #[command(flatten)]
    pub output: OutputArgs,
}

/// What KEY names, when it is not a lock (Redis and Valkey only): `run` and `acquire` take it,
/// `extend` and `release` act on what the token holds of it.
#[derive(Debug, Args)]
pub struct PrimitiveArgs {
    /// KEY is a counting semaphore of N permits: one of them. Every holder of KEY must name
    /// the same N.
    #[arg(long, value_name = "N")]
    pub permits: Option<u32>,
    /// KEY is a read-write lock: one of its readers (any number at once, none while a writer
    /// holds or waits for it).
    #[arg(long, conflicts_with_all = ["write", "permits"])]
    pub read: bool,
    /// KEY is a read-write lock: its one writer (it waits for the readers to drain, and new
    /// readers wait behind it); --fencing gives the writer a number.
    #[arg(long, conflicts_with = "permits")]
    pub write: bool,
}

/// Arguments of `leasehold release`.
#[derive(Debug, Args)]
pub struct ReleaseArgs {
    /// The server(s).
    #[command(flatten)]
    pub servers: ServerArgs,
    /// The lock key.
    pub key: String,
    /// The token `acquire` printed (or $LEASEHOLD_TOKEN, which keeps it out of `ps`).
    #[arg(
        long,
        value_name = "TOKEN",
        env = "LEASEHOLD_TOKEN",
        hide_env_values = true
    )]
    pub token: String,
    /// The lock was taken with --fair: hand it to the first waiter in the queue.
    #[arg(long, conflicts_with_all = ["permits", "read", "write"])]
    pub fair: bool,
    /// The token holds a permit or a side of a read-write lock (taken with the same flag).
    #[command(flatten)]
    pub primitive: PrimitiveArgs,
    /// Output format.
    #[command(flatten)]
    pub output: OutputArgs,
}

/// Arguments of `leasehold extend`.
#[derive(Debug, Args)]
pub struct ExtendArgs {
    /// The server(s).
    #[command(flatten)]
    pub servers: ServerArgs,
    /// The lock key.
    pub key: String,
    /// The token `acquire` printed (or $LEASEHOLD_TOKEN, which keeps it out of `ps`).
    #[arg(
        long,
        value_name = "TOKEN",
        env = "LEASEHOLD_TOKEN",
        hide_env_values = true
    )]
    pub token: String,
    /// The new TTL, counted from now (e.g. 30s).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub ttl: Duration,
    /// The token holds a permit or a side of a read-write lock (taken with the same flag).
    #[command(flatten)]
    pub primitive: PrimitiveArgs,
    /// Output format.
    #[command(flatten)]
    pub output: OutputArgs,
}

/// Arguments of `leasehold inspect`.
#[derive(Debug, Args)]
pub struct InspectArgs {
    /// The server(s).
    #[command(flatten)]
    pub servers: ServerArgs,
    /// The lock key.
    pub key: String,
    /// Output format.
    #[command(flatten)]
    pub output: OutputArgs,
}

/// Parses a human duration (`200ms`, `30s`, `1m 30s`).
fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s)
        .map_err(|e| format!("{e} (expected a duration such as 200ms, 30s or 1m30s)"))
}

/// As [`parse_duration`], refusing zero.
fn parse_positive_duration(s: &str) -> Result<Duration, String> {
    match parse_duration(s)? {
        d if d.is_zero() => Err("must be longer than zero".into()),
        d => Ok(d),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("200ms"), Ok(Duration::from_millis(200)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert!(parse_duration("banana").is_err());
        assert!(parse_positive_duration("0s").is_err());
        assert_eq!(
            parse_positive_duration("50ms"),
            Ok(Duration::from_millis(50))
        );
    }

    #[test]
    fn urls_before_and_after_the_subcommand_add_up() {
        let cli = Cli::try_parse_from([
            "leasehold",
            "--url",
            "redis://a:1/",
            "--url",
            "redis://b:2/",
            "inspect",
            "k",
            "--url",
            "redis://c:3/",
        ])
        .unwrap();
        let servers = cli.servers();
        assert_eq!(
            servers.url,
            ["redis://a:1/", "redis://b:2/", "redis://c:3/"]
        );
        assert_eq!(servers.node_timeout, None);
        // The last --node-timeout counts; CMD's own arguments are CMD's.
        let cli = Cli::try_parse_from([
            "leasehold",
            "--node-timeout",
            "1s",
            "run",
            "k",
            "--node-timeout",
            "20ms",
            "--",
            "cmd",
            "--url",
            "x",
        ])
        .unwrap();
        let servers = cli.servers();
        assert!(servers.url.is_empty());
        assert_eq!(servers.node_timeout, Some(Duration::from_millis(20)));
    }
}
