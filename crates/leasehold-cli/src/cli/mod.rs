//! The command line, as `clap` derive types.

use std::time::Duration;

use clap::{ArgAction, Args, Parser, Subcommand};

/// Exit statuses, shown at the end of `--help`.
const EXIT_STATUSES: &str = "\
Exit status:
  0   success
  1   not held: the token no longer holds the key (expired, released, or taken over)
  64  usage error: bad arguments, a malformed URL, a TTL out of range
  69  server unreachable (also: its TLS certificate is not trusted, or it offers no TLS where
      the URL asks for it), or (Redlock) fewer than a majority of the nodes answered; each
      node's outcome is on stderr; a file:// folder that does not exist or takes no files
  70  any other failure (an unexpected server error or reply)
  75  not acquired: the lock is busy, --wait elapsed, or the grant came too late to be a lease
  76  `run`/`elect`: the lock (or leadership) was lost while the command ran
  77  authentication refused (or an ACL forbids the command; also: the server refused the
      connection for want of TLS or of a client certificate it trusts)
  128+N `run`/`elect`: signal N (SIGINT 130, SIGTERM 143, SIGHUP 129) before CMD started or
      after it ended (see `leasehold run --help`)";

/// How to record lock history, shown at the end of `--help`.
const HISTORY_ENV: &str = "\
Lock history: LEASEHOLD_HISTORY=1 records each lock's events (acquired, released, lost, handed
over; 100 per key, kept 7 days) on redis, etcd and postgres URLs; `inspect KEY --history` shows
them. Off by default; Redlock and file:// keep no history (exit 64 when asked to).";

/// The servers `--url` takes, shown at the end of `--help`.
const URL_FORMS: &str = "\
Servers (--url, else $LEASEHOLD_URL, else $REDIS_URL, else redis://127.0.0.1:6379/):
  redis://[user:password@]host:port[/db]             Redis (valkey://: Valkey; rediss://, valkeys://: TLS)
  redis-cluster://host:port[,host:port...]           a Redis Cluster (rediss-cluster://: TLS)
  redis-sentinel://host:port[,host:port...]#NAME     the primary the sentinels call NAME
  redlock://[user:password@]host:port,host:port,...  Redlock over independent servers
                                                     (rediss-redlock://: TLS; or --url several times)
  etcd://[user:password@]host:port[,host:port...]    etcd v3 (leases; fencing by revision;
                                                     etcds://: TLS)
  postgres://[user:password@]host:port/db            PostgreSQL session advisory locks
                                                     (TLS: ?sslmode=require|verify-ca|verify-full
                                                     &sslrootcert=PATH)
  postgres://...?lock=lease                          PostgreSQL lease rows (a token and an expiry;
                                                     they work through a transaction pooler)
  file:///path/to/folder                             flock'ed files: locks on this machine only
                                                     (no `acquire`: a lock ends with its process)";

/// `leasehold`: distributed locks from the shell.
#[derive(Debug, Parser)]
#[command(
    name = "leasehold",
    version,
    about = "Distributed locks on Redis, Valkey, Redlock, etcd and PostgreSQL (and file:// for \
             one machine): take, release, extend and inspect them from the shell, run a command \
             under a lock, or elect a leader",
    after_help = format!("{URL_FORMS}\n\n{HISTORY_ENV}\n\n{EXIT_STATUSES}")
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
    /// TLS). Also `redis-cluster://host:port[,host:port...]` for a Redis Cluster,
    /// `redis-sentinel://host:port[,host:port...]#master` for a Sentinel-monitored primary,
    /// `redlock://[user:password@]host:port,host:port,...` for Redlock over independent servers
    /// (`rediss-redlock://` for TLS), `etcd://[user:password@]host:port[,host:port...]` for etcd,
    /// and `postgres://user:password@host:port/db` for PostgreSQL session advisory locks (with
    /// `?lock=lease`: lease rows, which work through a transaction pooler such as PgBouncer).
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

    /// For TLS (rediss://, etcds://, postgres://...?sslmode=...): trust the certificate
    /// authority in this PEM file instead of the system's roots (PostgreSQL: the sslrootcert
    /// the URL does not name).
    #[arg(long, value_name = "PATH", env = "LEASEHOLD_TLS_CA_FILE")]
    pub tls_ca_file: Option<std::path::PathBuf>,

    /// Mutual TLS (rediss://, etcds://, postgres://...?sslmode=...): show the client
    /// certificate in this PEM file; give --tls-key-file too.
    #[arg(long, value_name = "PATH", env = "LEASEHOLD_TLS_CERT_FILE")]
    pub tls_cert_file: Option<std::path::PathBuf>,

    /// The private key (PEM, unencrypted) of --tls-cert-file.
    #[arg(long, value_name = "PATH", env = "LEASEHOLD_TLS_KEY_FILE")]
    pub tls_key_file: Option<std::path::PathBuf>,
}

impl Cli {
    /// Every `--url`, before and after the subcommand, in order; the last `--node-timeout`.
    pub fn servers(&self) -> ServerArgs {
        self.servers.merge(self.command.servers())
    }
}

impl ServerArgs {
    /// These (the arguments before the subcommand) and `sub` (the subcommand's own): every
    /// `--url` in order, the subcommand's `--node-timeout`, `--sentinel-master` and
    /// the `--tls-*` files over these.
    pub fn merge(&self, sub: &ServerArgs) -> ServerArgs {
        ServerArgs {
            url: self.url.iter().chain(&sub.url).cloned().collect(),
            node_timeout: sub.node_timeout.or(self.node_timeout),
            cluster: sub.cluster || self.cluster,
            sentinel_master: sub
                .sentinel_master
                .clone()
                .or_else(|| self.sentinel_master.clone()),
            tls_ca_file: sub.tls_ca_file.clone().or_else(|| self.tls_ca_file.clone()),
            tls_cert_file: sub
                .tls_cert_file
                .clone()
                .or_else(|| self.tls_cert_file.clone()),
            tls_key_file: sub
                .tls_key_file
                .clone()
                .or_else(|| self.tls_key_file.clone()),
        }
    }
}

impl ServerArgs {
    /// The servers these arguments name (`--url`, else the environment, else the default), in
    /// the topology `--cluster` or `--sentinel-master` gives them.
    ///
    /// # Errors
    /// [`Usage`](crate::exit::Usage) when the flags contradict each other or the URLs.
    pub fn resolve(self) -> Result<crate::target::Servers, crate::exit::Usage> {
        crate::target::Servers::resolve(self.url, self.node_timeout).topology(
            self.cluster,
            self.sentinel_master,
            crate::target::TlsPaths {
                ca: self.tls_ca_file,
                cert: self.tls_cert_file,
                key: self.tls_key_file,
            },
        )
    }
}

impl Command {
    /// The subcommand's own `--url` and `--node-timeout`.
    fn servers(&self) -> &ServerArgs {
        match self {
            Command::Acquire(a) => &a.servers,
            Command::Release(a) => &a.servers,
            Command::Extend(a) => &a.servers,
            Command::Inspect(a) => &a.servers,
            Command::Run(a) => &a.servers,
            Command::Elect(a) => &a.servers,
            Command::Ls(a) => &a.servers,
            Command::ForceRelease(a) => &a.servers,
        }
    }
}

/// The subcommands.
#[derive(Debug, Subcommand)]
#[non_exhaustive]
pub enum Command {
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
    ///
    /// CMD runs in a process group of its own, and the lock is released only once that whole
    /// group is gone: processes CMD leaves behind (`sleep 1000 &`) get SIGTERM when it exits,
    /// then SIGKILL after --kill-grace. SIGINT, SIGTERM and SIGHUP are caught from the start:
    /// before CMD starts (connecting, waiting) leasehold gives up and exits 128+N without running
    /// it; while CMD runs they are forwarded to its group, which gets SIGKILL if still running
    /// --kill-grace after the first; after CMD ended the release is finished, then leasehold
    /// exits 128+N (a second signal gives up on the release: the lock expires with its TTL).
    /// SIGTSTP (Ctrl-Z) is ignored once the lock is held: it would stop leasehold, not CMD.
    #[command(after_help = RUN_EXIT_STATUSES)]
    Run(RunArgs),
    /// Run a command only while leader of an election
    ///
    /// Campaigns for NAME (waiting as long as it takes), then runs CMD with LEASEHOLD_KEY,
    /// LEASEHOLD_TOKEN, LEASEHOLD_LEADER_ID and LEASEHOLD_TERM (the term: strictly increasing
    /// from leader to leader, a fencing number) in its environment. Leadership is renewed every
    /// TTL/3; if it is lost, CMD's process group gets SIGTERM (SIGKILL after --kill-grace) and
    /// leasehold exits 76. When CMD ends, leasehold resigns and exits with CMD's status. Every
    /// backend but Redlock and file://.
    ///
    /// Signals and leftover processes are handled as by `run`: a signal while campaigning
    /// exits 128+N without running CMD; while leading it is forwarded (SIGKILL after
    /// --kill-grace); processes CMD leaves in its group are stopped before resigning.
    #[command(after_help = RUN_EXIT_STATUSES)]
    Elect(ElectArgs),
    /// List the held locks: key, kind, holders and owners, TTL, fencing counter, waiters
    ///
    /// Reads the server (every master of a cluster) with SCAN, never KEYS: the server keeps
    /// serving while it is listed. PATTERN is a glob on lock names (`*`, `?`, `\`).
    #[command(after_help = LS_OUTPUT)]
    Ls(LsArgs),
    /// Remove a stuck lock whoever holds it, bump its fencing counter, and record why
    ///
    /// The old holder's release and extend then fail (it is told it lost the lock), and every
    /// fencing number issued later is above the counter printed, so a resource that keeps the
    /// highest number it saw refuses the old holder. Who forced it and why is logged, printed,
    /// and on Redis kept in a `{KEY}:forced` hash for a week.
    #[command(after_help = FORCE_RELEASE_OUTPUT)]
    ForceRelease(ForceReleaseArgs),
}

/// What `leasehold ls` prints, and its exit statuses.
const LS_OUTPUT: &str = "\
JSON output: one array of {key, kind, ttl_ms, fencing_counter, waiters, permits, holders:
[{holder, owner: {host, pid, program, label} or null, ttl_ms}]}, sorted by key; kind is lock,
fair, permits, read or election; holder is the token's redacted name (never the token).
Exit status: 0 listed; 64 usage (a backend without a lock table); 69 server unreachable;
77 the server refused the listing (a Redis user without SCAN: see docs/acl.md).
--watch redraws the table every INTERVAL (default 2s) until SIGINT or q.";

/// What `leasehold force-release` prints, and its exit statuses.
const FORCE_RELEASE_OUTPUT: &str = "\
JSON output: {key, previous_holder, previous_owner, fencing_counter, forced_by, reason}.
Exit status: 0 released; 1 nobody holds KEY; 64 KEY is not a lock (another type, a value that
is not a leasehold token: nothing is written) or the backend cannot force locks; 69 server
unreachable; 77 permission denied.";

/// Arguments of `leasehold ls`.
#[derive(Debug, Args)]
pub struct LsArgs {
    /// The server(s).
    #[command(flatten)]
    pub servers: ServerArgs,
    /// Only the locks whose names match this glob.
    #[arg(default_value = "*")]
    pub pattern: String,
    /// Redraw the table in place every INTERVAL (default 2s), like `watch`; q or Ctrl-C ends.
    #[arg(long, value_name = "INTERVAL", value_parser = parse_positive_duration,
          num_args = 0..=1, default_missing_value = "2s", conflicts_with = "json")]
    pub watch: Option<Duration>,
    /// Print one JSON array instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `leasehold force-release`.
#[derive(Debug, Args)]
pub struct ForceReleaseArgs {
    /// The server(s).
    #[command(flatten)]
    pub servers: ServerArgs,
    /// The lock key.
    #[arg(value_parser = parse_key)]
    pub key: String,
    /// Why (kept with the record of the forced release).
    #[arg(long, value_name = "TEXT")]
    pub reason: String,
    /// Output format.
    #[command(flatten)]
    pub output: OutputArgs,
}

/// Who takes a lock, as `inspect` and `ls` show it (`run` and `acquire`).
#[derive(Debug, Clone, Args)]
pub struct OwnerArgs {
    /// A label stored with the lock's owner record (host, pid and program are always there
    /// unless --no-owner), shown by `inspect` and `ls`. Default for `run`: CMD's name.
    #[arg(long, value_name = "TEXT", value_parser = parse_owner_label)]
    pub owner_label: Option<String>,
    /// Store no owner record with the lock (the bare token).
    #[arg(long, conflicts_with = "owner_label")]
    pub no_owner: bool,
}

impl OwnerArgs {
    /// `options` with the owner record these flags ask for (`default_label` when no label).
    pub fn apply(
        &self,
        options: leasehold::LockOptions,
        default_label: Option<&str>,
    ) -> leasehold::LockOptions {
        if self.no_owner {
            return options;
        }
        let me = leasehold::Owner::this_process();
        let label = self.owner_label.as_deref().or(default_label);
        // A default label that does not pass (a control character in CMD's name) is left out.
        let owner = match label {
            Some(label) => me.clone().label(label).unwrap_or(me),
            None => me,
        };
        options.owner(owner)
    }
}

/// An owner label: what [`leasehold::Owner::label`] accepts.
pub fn parse_owner_label(s: &str) -> Result<String, String> {
    leasehold::Owner::this_process()
        .label(s)
        .map(|_| s.to_string())
        .map_err(|e| e.to_string())
}

/// What `leasehold inspect --json` prints.
const INSPECT_OUTPUT: &str = "\
JSON output: {key, held, token, ttl_ms, fencing_token, owner}. With several --url (Redlock): {key, held,
token, nodes: [{node, held, token, ttl_ms, fencing_token} or {node, error}]}, where held is true
and token set when a majority of all the nodes hold the same token. Exits 69 (and prints nothing
on stdout) when fewer than a majority of the nodes answer.
With --history[=N]: also history, newest first: [{at_ms, event, fencing_token, holder, owner,
detail}], event one of acquired, released, lost, forced, handed-over. Events are recorded only by
commands and programs run with history on: LEASEHOLD_HISTORY=1 in the environment of `run`,
`acquire`, `release` (ClientOptions::history in the library). Redlock and file:// keep none.";

/// Exit statuses of `leasehold run`.
const RUN_EXIT_STATUSES: &str = "\
Exit status:
  N    the command's own exit status (128+N if signal N killed it; 137 if it was still
       running --kill-grace after a forwarded signal)
  69   server unreachable (Redlock: fewer than a majority of the nodes answered)
  75   the lock is busy (--no-wait) or --wait elapsed (or --conflict-exit-code)
  76   the lock was lost while the command ran; the command was stopped
  126  the command could not be executed
  127  the command was not found
  128+N  signal N (SIGINT 130, SIGTERM 143, SIGHUP 129) before the command started, or after
       it ended (the lock was released first; a second signal: it expires with its TTL)
Signals and misuse, stage by stage: docs/cli-signals.md.
Example, a cron job that must never run twice at once (skipped while another run holds it):
  */5 * * * * leasehold run --no-wait --ttl 1m jobs:nightly-report -- /usr/local/bin/report";

/// Arguments of `leasehold run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The server(s).
    #[command(flatten)]
    pub servers: ServerArgs,
    /// The lock key.
    #[arg(value_parser = parse_key)]
    pub key: String,
    /// The lease: how long the lock outlives leasehold if leasehold dies (renewed every TTL/3).
    #[arg(long, value_name = "DURATION", value_parser = parse_renewed_ttl, default_value = "30s")]
    pub ttl: Duration,
    /// Wait at most this long for a busy lock (default: wait as long as it takes).
    #[arg(long, value_name = "DURATION", value_parser = parse_wait, conflicts_with = "no_wait")]
    pub wait: Option<Duration>,
    /// Do not wait: exit 75 at once if the lock is busy.
    #[arg(long)]
    pub no_wait: bool,
    /// Take a fencing number and export it as LEASEHOLD_FENCING_TOKEN.
    #[arg(long, conflicts_with_all = ["permits", "read"])]
    pub fencing: bool,
    /// Keep the lock after CMD ends until this long after it was taken, measured by the
    /// server's clock, so that the same job started on machines whose clocks disagree runs
    /// once (cron on many hosts; see docs/cron.md). At most --ttl. Not on every URL:
    /// PostgreSQL session locks refuse it (use ?lock=lease).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration,
          conflicts_with_all = ["permits", "read", "write", "fair"])]
    pub min_hold: Option<Duration>,
    /// Stop renewing the lock this long after it was taken: it then expires one --ttl later,
    /// and CMD is stopped as for a lost lock (a job stuck for ever keeps nobody out for ever).
    #[arg(long, value_name = "DURATION", value_parser = parse_positive_duration)]
    pub max_hold: Option<Duration>,
    /// A semaphore or a read-write lock instead of a lock: the command runs while it holds a
    /// permit (at most N such commands at once, across machines) or its side.
    #[command(flatten)]
    pub primitive: PrimitiveArgs,
    /// Take the lock in arrival order: wait in the server's queue, and get the lock handed over
    /// by the release (no barging, no herd). Every holder and waiter of the key must use it.
    #[arg(long, conflicts_with_all = ["permits", "read", "write"])]
    pub fair: bool,
    /// How long CMD's process group has to end after SIGTERM (a lost lock; processes CMD left
    /// behind) or a forwarded signal, before SIGKILL.
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
    /// The owner record.
    #[command(flatten)]
    pub owner: OwnerArgs,
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
    #[arg(value_parser = parse_key)]
    pub name: String,
    /// This candidate's id, as `leader()` and the other candidates see it (default: pid-PID).
    #[arg(long)]
    pub id: Option<String>,
    /// The leader's lease: how long a crashed leader keeps the others waiting.
    #[arg(long, value_name = "DURATION", value_parser = parse_renewed_ttl, default_value = "10s")]
    pub ttl: Duration,
    /// How long CMD's process group has to end after SIGTERM (a lost leadership; processes CMD
    /// left behind) or a forwarded signal, before SIGKILL.
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
    #[arg(value_parser = parse_key)]
    pub key: String,
    /// How long the lock lives unless released or extended (e.g. 200ms, 30s, 5m).
    #[arg(long, value_name = "DURATION", value_parser = parse_ttl)]
    pub ttl: Duration,
    /// Keep retrying a busy lock for this long (default: one attempt).
    #[arg(long, value_name = "DURATION", value_parser = parse_wait)]
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
    /// The owner record.
    #[command(flatten)]
    pub owner: OwnerArgs,
    /// Output format.
    #[command(flatten)]
    pub output: OutputArgs,
}

/// What KEY names, when it is not a lock (on every backend that has the primitive): `run` and
/// `acquire` take it, `extend` and `release` act on what the token holds of it.
#[derive(Debug, Args)]
pub struct PrimitiveArgs {
    /// KEY is a counting semaphore of N permits: one of them. Every holder of KEY must name
    /// the same N.
    #[arg(long, value_name = "N", value_parser = parse_permits)]
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
    #[arg(value_parser = parse_key)]
    pub key: String,
    /// The token `acquire` printed (or $LEASEHOLD_TOKEN, which keeps it out of `ps`).
    /// (Any text: a token may begin with `-`.)
    #[arg(
        long,
        value_name = "TOKEN",
        env = "LEASEHOLD_TOKEN",
        hide_env_values = true,
        allow_hyphen_values = true
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
    #[arg(value_parser = parse_key)]
    pub key: String,
    /// The token `acquire` printed (or $LEASEHOLD_TOKEN, which keeps it out of `ps`).
    /// (Any text: a token may begin with `-`.)
    #[arg(
        long,
        value_name = "TOKEN",
        env = "LEASEHOLD_TOKEN",
        hide_env_values = true,
        allow_hyphen_values = true
    )]
    pub token: String,
    /// The new TTL, counted from now (e.g. 30s).
    #[arg(long, value_name = "DURATION", value_parser = parse_ttl)]
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
    #[arg(value_parser = parse_key)]
    pub key: String,
    /// Also show the key's N newest history events (default 20), recorded by the clients
    /// that had history on (LEASEHOLD_HISTORY=1)
    #[arg(long, value_name = "N", num_args = 0..=1, default_missing_value = "20")]
    pub history: Option<usize>,
    /// Output format.
    #[command(flatten)]
    pub output: OutputArgs,
}

/// Parses a human duration (`200ms`, `30s`, `1m 30s`).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s)
        .map_err(|e| format!("{e} (expected a duration such as 200ms, 30s or 1m30s)"))
}

/// A TTL: a duration within [`leasehold::MIN_TTL`] ..= [`leasehold::MAX_TTL`].
pub fn parse_ttl(s: &str) -> Result<Duration, String> {
    ttl_within(parse_duration(s)?, leasehold::LockOptions::new)
}

/// The TTL of a lease that is renewed while it is held (`run`, `elect`): at least
/// [`leasehold::MIN_RENEWED_TTL`].
pub fn parse_renewed_ttl(s: &str) -> Result<Duration, String> {
    ttl_within(parse_duration(s)?, |ttl| {
        leasehold::LockOptions::new(ttl).auto_extend(true)
    })
}

/// The library's own check of the options the TTL goes into, so the CLI and the library
/// refuse the same TTLs with the same words.
fn ttl_within(
    ttl: Duration,
    options: impl FnOnce(Duration) -> leasehold::LockOptions,
) -> Result<Duration, String> {
    match options(ttl).validate() {
        Ok(()) => Ok(ttl),
        Err(leasehold::Error::InvalidArgument { reason, .. }) => Err(reason),
        Err(e) => Err(e.to_string()),
    }
}

/// A lock key (or election name): 1 to [`leasehold::MAX_KEY_LEN`] bytes, the limit of every
/// backend (PostgreSQL and etcd check theirs after connecting). Checked as the command line is
/// read, so a bad key is a usage error (64) even when the server cannot be reached.
pub fn parse_key(s: &str) -> Result<String, String> {
    if s.is_empty() {
        return Err("a lock key cannot be empty".into());
    }
    if s.len() > leasehold::MAX_KEY_LEN {
        return Err(format!(
            "{} bytes is longer than the limit of {}",
            s.len(),
            leasehold::MAX_KEY_LEN
        ));
    }
    Ok(s.to_string())
}

/// A semaphore's number of permits: 1 ..= [`leasehold::MAX_PERMITS`], checked as the command
/// line is read (as [`parse_key`]).
pub fn parse_permits(s: &str) -> Result<u32, String> {
    match s.parse::<u32>() {
        Ok(n) if (1..=leasehold::MAX_PERMITS).contains(&n) => Ok(n),
        Ok(n) => Err(format!(
            "{n} is outside 1 ..= {} permits",
            leasehold::MAX_PERMITS
        )),
        Err(e) => Err(e.to_string()),
    }
}

/// A wait bound (`--wait`): a duration, longer ones taken as [`leasehold::FOREVER`], which means the same
/// (waiting for ever, in practice). The library's deadline is now + the bound, which the clock
/// cannot represent for the longest durations `humantime` reads (the sum panicked).
pub fn parse_wait(s: &str) -> Result<Duration, String> {
    parse_duration(s).map(|d| d.min(leasehold::FOREVER))
}

/// As [`parse_duration`], refusing zero.
pub fn parse_positive_duration(s: &str) -> Result<Duration, String> {
    match parse_duration(s)? {
        d if d.is_zero() => Err("must be longer than zero".into()),
        d => Ok(d),
    }
}

#[cfg(test)]
mod tests;
