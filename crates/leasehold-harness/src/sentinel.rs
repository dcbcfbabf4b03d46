//! A primary, its replicas and Redis Sentinels watching them, all real processes.

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::thread;
use std::time::{Duration, Instant};

use crate::server::{Mode, conf_quote, info_role, master_link_up};
use crate::{HarnessError, RespValue, Server, ServerBinary, ServerOptions};

/// The default master name the sentinels monitor.
pub const DEFAULT_MASTER_NAME: &str = "leasehold";

/// Sleep between two looks at the sentinels' state.
const POLL_INTERVAL: Duration = Duration::from_millis(25);
/// Socket timeout of the harness' own queries.
const QUERY_TIMEOUT: Duration = Duration::from_secs(5);
/// Lines of each sentinel's log in timeout errors.
const LOG_TAIL_LINES: usize = 25;
/// Extra time on top of the computed bounds of the waits.
const MARGIN: Duration = Duration::from_secs(30);
/// How long a replica may take to link to the primary at start.
const REPLICATION_TIMEOUT: Duration = Duration::from_secs(15);

/// Timer settings applied to every sentinel with `SENTINEL DEBUG` (redis >= 7, valkey), so
/// tests do not wait for production intervals: sentinels find each other within a fraction
/// of a second (hello messages every 250 ms instead of 2 s), see role changes within a
/// second (`INFO` every second instead of 10 s) and leave TILT mode (entered e.g. after a
/// long SIGSTOP) after 5 s instead of 30 s. The ping period is set separately, see
/// [`ping_period_ms`].
const SENTINEL_DEBUG: [(&str, &str); 3] = [
    ("publish-period", "250"),
    ("info-period", "1000"),
    ("tilt-period", "5000"),
];

/// The `SENTINEL DEBUG ping-period`: a quarter of down-after, between 50 ms and the default
/// 1000 ms.
///
/// Sentinel pings an instance every `min(down-after, ping-period)`, and a fresh link (e.g.
/// to a just-promoted primary after `+switch-master`) sends its first PING only one period
/// after it was created, while the down-after clock starts at creation. With down-after at
/// or below the 1 s default period, the new primary can thus be flagged `+sdown` for a
/// moment, and two sentinels doing that at once start a second, spurious failover. Pinging
/// well within down-after avoids that.
fn ping_period_ms(down_after_ms: u128) -> u128 {
    (down_after_ms / 4).clamp(50, 1000)
}

/// How to build a [`SentinelSet`]. Builder style:
/// `SentinelOptions::new().replicas(1).sentinels(3).quorum(2)`.
#[derive(Debug, Clone)]
pub struct SentinelOptions {
    master_name: String,
    replicas: usize,
    sentinels: usize,
    quorum: usize,
    down_after: Duration,
    failover_timeout: Duration,
    server: ServerOptions,
}

impl Default for SentinelOptions {
    fn default() -> Self {
        SentinelOptions {
            master_name: DEFAULT_MASTER_NAME.to_owned(),
            replicas: 1,
            sentinels: 3,
            quorum: 2,
            down_after: Duration::from_millis(1000),
            failover_timeout: Duration::from_millis(5000),
            server: ServerOptions::new(),
        }
    }
}

impl SentinelOptions {
    /// Defaults: master name `leasehold`, 1 replica, 3 sentinels, quorum 2,
    /// `down-after-milliseconds` 1000, `failover-timeout` 5000, default [`ServerOptions`].
    pub fn new() -> Self {
        Self::default()
    }

    /// The name the sentinels monitor the primary under (letters, digits, `.`, `_`, `-`).
    pub fn master_name(mut self, name: impl Into<String>) -> Self {
        self.master_name = name.into();
        self
    }

    /// The number of replicas of the primary (0 is allowed, but then nothing can be
    /// promoted).
    pub fn replicas(mut self, replicas: usize) -> Self {
        self.replicas = replicas;
        self
    }

    /// The number of sentinels (at least 1).
    pub fn sentinels(mut self, sentinels: usize) -> Self {
        self.sentinels = sentinels;
        self
    }

    /// How many sentinels must agree that the primary is down (1 to the number of
    /// sentinels).
    pub fn quorum(mut self, quorum: usize) -> Self {
        self.quorum = quorum;
        self
    }

    /// `sentinel down-after-milliseconds` (rounded to whole milliseconds, at least 1).
    pub fn down_after(mut self, down_after: Duration) -> Self {
        self.down_after = down_after;
        self
    }

    /// `sentinel failover-timeout` (rounded to whole milliseconds, at least 1).
    pub fn failover_timeout(mut self, timeout: Duration) -> Self {
        self.failover_timeout = timeout;
        self
    }

    /// The options of the data nodes (primary and replicas). A password becomes the
    /// replicas' and the primary's `--masterauth` and the sentinels' `sentinel auth-pass`.
    ///
    /// With TLS files ([`ServerOptions::tls`]) the data nodes replicate over TLS: every data
    /// node runs with `--tls-replication yes` and the replicas follow the primary's TLS port
    /// (so each replica announces its TLS port to its primary). The sentinels monitor the
    /// TLS ports and speak TLS to the data nodes and to each other (each sentinel gets a TLS
    /// port too, with `tls-replication yes` and the same certificate files); clients still
    /// ask the sentinels on their plain ports ([`SentinelSet::sentinel_addrs`]), and
    /// `SENTINEL GET-MASTER-ADDR-BY-NAME` names the primary's TLS port. The harness' own
    /// commands keep using every data node's plain port.
    pub fn server(mut self, options: ServerOptions) -> Self {
        self.server = options;
        self
    }

    /// The monitored master name.
    pub fn name(&self) -> &str {
        &self.master_name
    }

    /// The number of replicas.
    pub fn replica_count(&self) -> usize {
        self.replicas
    }

    /// The number of sentinels.
    pub fn sentinel_count(&self) -> usize {
        self.sentinels
    }

    /// The quorum.
    pub fn quorum_value(&self) -> usize {
        self.quorum
    }

    /// The down-after time.
    pub fn down_after_value(&self) -> Duration {
        self.down_after
    }

    /// The failover timeout.
    pub fn failover_timeout_value(&self) -> Duration {
        self.failover_timeout
    }

    /// The options of the data nodes.
    pub fn server_options(&self) -> &ServerOptions {
        &self.server
    }

    fn down_after_ms(&self) -> u128 {
        self.down_after.as_millis().max(1)
    }

    fn failover_timeout_ms(&self) -> u128 {
        self.failover_timeout.as_millis().max(1)
    }

    fn validate(&self) -> Result<(), HarnessError> {
        let name_ok = !self.master_name.is_empty()
            && self
                .master_name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
        if !name_ok {
            return Err(HarnessError::InvalidArgument(format!(
                "master name {:?}: use letters, digits, '.', '_' and '-'",
                self.master_name
            )));
        }
        if self.sentinels == 0 || self.sentinels > 100 {
            return Err(HarnessError::InvalidArgument(format!(
                "{} sentinels: use 1 to 100",
                self.sentinels
            )));
        }
        if self.quorum == 0 || self.quorum > self.sentinels {
            return Err(HarnessError::InvalidArgument(format!(
                "quorum {} with {} sentinels: use 1 to {}",
                self.quorum, self.sentinels, self.sentinels
            )));
        }
        if self.replicas > 100 {
            return Err(HarnessError::InvalidArgument(format!(
                "{} replicas: use at most 100",
                self.replicas
            )));
        }
        Ok(())
    }

    /// The `sentinel ...` lines of every sentinel's configuration file.
    fn sentinel_config(&self, primary_port: u16) -> String {
        let name = &self.master_name;
        let mut conf = format!(
            "sentinel monitor {name} 127.0.0.1 {primary_port} {quorum}\n\
             sentinel down-after-milliseconds {name} {down}\n\
             sentinel failover-timeout {name} {failover}\n\
             sentinel parallel-syncs {name} 1\n",
            quorum = self.quorum,
            down = self.down_after_ms(),
            failover = self.failover_timeout_ms(),
        );
        if let Some(pass) = self.server.password() {
            conf.push_str(&format!("sentinel auth-pass {name} {}\n", conf_quote(pass)));
        }
        conf
    }
}

/// A primary with replicas and sentinels monitoring it, all on `127.0.0.1` with free ports
/// and their own directories.
///
/// Data nodes are numbered at start: `0` is the initial primary, `1..=replicas` its
/// replicas; failovers change which one is the primary ([`SentinelSet::primary`] asks the
/// sentinels). Sentinels are the same server binary run with `<dir>/sentinel.conf
/// --sentinel`; they are [`Server`]s too (kill, pause, resume, `command`).
///
/// Every sentinel gets `SENTINEL DEBUG publish-period 250 info-period 1000 tilt-period
/// 5000` at start, so discovery and failovers take fractions of a second to a few seconds
/// instead of the production intervals.
///
/// Dropping the set kills every process.
pub struct SentinelSet {
    data: Vec<Server>,
    sentinels: Vec<Server>,
    options: SentinelOptions,
}

impl fmt::Debug for SentinelSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SentinelSet")
            .field("master_name", &self.options.master_name)
            .field(
                "data_ports",
                &self.data.iter().map(Server::port).collect::<Vec<_>>(),
            )
            .field(
                "sentinel_ports",
                &self.sentinels.iter().map(Server::port).collect::<Vec<_>>(),
            )
            .finish()
    }
}

/// One entry of `SENTINEL MASTER` / `SENTINEL REPLICAS`: field name to value.
type Fields = BTreeMap<String, String>;

impl SentinelSet {
    /// Starts the primary, its replicas (waiting until they are linked) and the sentinels,
    /// then waits until every sentinel knows all other sentinels (`num-other-sentinels`)
    /// and all replicas (`SENTINEL REPLICAS`, each with `master-link-status:ok`), so that a
    /// failover can succeed right away.
    pub fn start(
        bin: &ServerBinary,
        options: &SentinelOptions,
    ) -> Result<SentinelSet, HarnessError> {
        options.validate()?;
        // The primary may become a replica after a failover: it needs masterauth too.
        let mut extra = Vec::new();
        if let Some(pass) = options.server.password() {
            extra.push("--masterauth".to_owned());
            extra.push(pass.to_owned());
        }
        let tls = options.server.tls_files();
        if tls.is_some() {
            // Replicas (and the primary, once the sentinels demote it) replicate over TLS.
            extra.push("--tls-replication".to_owned());
            extra.push("yes".to_owned());
        }
        let primary = Server::start_with(bin, &options.server, extra.clone(), Mode::Standalone)?;
        let mut data = vec![primary];
        for _ in 0..options.replicas {
            let replica = match data[0].tls_port() {
                None => data[0].start_replica(&options.server)?,
                Some(tls_port) => {
                    let mut args = vec![
                        "--replicaof".to_owned(),
                        "127.0.0.1".to_owned(),
                        tls_port.to_string(),
                    ];
                    args.extend(extra.iter().cloned());
                    let replica = Server::start_with(bin, &options.server, args, Mode::Standalone)?;
                    replica.wait_for_master_link(REPLICATION_TIMEOUT)?;
                    replica
                }
            };
            data.push(replica);
        }

        let config = options.sentinel_config(announced_port(&data[0]));
        // With TLS data nodes the sentinels get the certificate files too (see
        // `SentinelOptions::server`); never the data nodes' password or raw arguments.
        let sentinel_options = match tls {
            Some(files) => ServerOptions::new().tls(files),
            None => ServerOptions::new(),
        };
        let results: Vec<Result<Server, HarnessError>> = thread::scope(|scope| {
            let handles: Vec<_> = (0..options.sentinels)
                .map(|_| {
                    let mode = Mode::Sentinel {
                        config: config.clone(),
                    };
                    let sentinel_options = &sentinel_options;
                    scope.spawn(move || Server::start_with(bin, sentinel_options, Vec::new(), mode))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        Err(HarnessError::Protocol(
                            "a sentinel's start thread panicked".into(),
                        ))
                    })
                })
                .collect()
        });
        let sentinels = results.into_iter().collect::<Result<Vec<Server>, _>>()?;
        let set = SentinelSet {
            data,
            sentinels,
            options: options.clone(),
        };
        for i in 0..set.sentinels.len() {
            set.tune(i);
        }
        set.wait_until_ready()?;
        Ok(set)
    }

    /// Applies [`SENTINEL_DEBUG`] and [`ping_period_ms`] to sentinel `i`, best effort (older
    /// servers lack `SENTINEL DEBUG`).
    fn tune(&self, i: usize) {
        let ping = ping_period_ms(self.options.down_after_ms()).to_string();
        // One command per setting: a server that lacks one still takes the others.
        let mut commands = vec![["SENTINEL", "DEBUG", "ping-period", ping.as_str()]];
        commands.extend(
            SENTINEL_DEBUG
                .iter()
                .map(|(key, value)| ["SENTINEL", "DEBUG", *key, *value]),
        );
        let commands: Vec<&[&str]> = commands.iter().map(|c| &c[..]).collect();
        let _ = self.sentinels[i].commands_timeout(&commands, QUERY_TIMEOUT);
    }

    /// Waits until every live sentinel sees the current primary as up, knows every other
    /// sentinel, and knows every live replica as up with `master-link-status:ok`.
    pub fn wait_until_ready(&self) -> Result<(), HarnessError> {
        let deadline = Instant::now() + self.failover_bound();
        let want_sentinels = self.sentinels.len() - 1;
        self.wait_for(
            "the sentinels to know each other and the replicas",
            deadline,
            |s| {
                let primary = s.primary_addr()?;
                let primary_port = announced_port(&s.data[s.data_index(primary)?]);
                let want_replicas: Vec<u16> = s
                    .data
                    .iter()
                    .filter(|n| n.is_live() && n.port() != primary.port())
                    .map(announced_port)
                    .collect();
                for (i, sentinel) in s.live_sentinels() {
                    let master = s.sentinel_fields(sentinel, "MASTER")?;
                    let master = master.first().ok_or_else(|| {
                        HarnessError::Protocol("SENTINEL MASTER: empty reply".into())
                    })?;
                    let flags = field(master, "flags");
                    if flags != "master" {
                        return Ok(Some(format!("sentinel {i}: master flags {flags:?}")));
                    }
                    if field(master, "port") != primary_port.to_string() {
                        return Ok(Some(format!(
                            "sentinel {i} monitors port {}, the primary is {primary}",
                            field(master, "port")
                        )));
                    }
                    let others = field(master, "num-other-sentinels");
                    if others != want_sentinels.to_string() {
                        return Ok(Some(format!(
                            "sentinel {i} knows {others} of {want_sentinels} other sentinels"
                        )));
                    }
                    let replicas = s.sentinel_fields(sentinel, "REPLICAS")?;
                    for port in &want_replicas {
                        let port_s = port.to_string();
                        let Some(r) = replicas.iter().find(|r| field(r, "port") == port_s) else {
                            return Ok(Some(format!("sentinel {i} does not know replica :{port}")));
                        };
                        let (flags, link) = (field(r, "flags"), field(r, "master-link-status"));
                        if flags != "slave" || link != "ok" {
                            return Ok(Some(format!(
                                "sentinel {i}: replica :{port} has flags {flags:?}, \
                             master-link-status {link:?}"
                            )));
                        }
                    }
                }
                Ok(None)
            },
        )
    }

    /// The name the sentinels monitor (default `leasehold`).
    pub fn master_name(&self) -> &str {
        &self.options.master_name
    }

    /// The options the set was started with.
    pub fn options(&self) -> &SentinelOptions {
        &self.options
    }

    /// `redis://127.0.0.1:PORT/` of every sentinel, in index order (also of killed ones).
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels.iter().map(Server::url).collect()
    }

    /// The URL leasehold connects with: `<scheme>://127.0.0.1:S1,127.0.0.1:S2,…#<master>`,
    /// naming every sentinel (their plain ports) and the master (`scheme`: `redis-sentinel`, or
    /// `rediss-sentinel` for TLS to the data nodes).
    pub fn lock_url(&self, scheme: &str) -> String {
        let hosts: Vec<String> = self
            .sentinels
            .iter()
            .map(|s| s.addr().to_string())
            .collect();
        format!("{scheme}://{}#{}", hosts.join(","), self.master_name())
    }

    /// `127.0.0.1:PORT` of every sentinel, in index order (also of killed ones).
    pub fn sentinel_addrs(&self) -> Vec<SocketAddr> {
        self.sentinels.iter().map(Server::addr).collect()
    }

    /// All sentinels, by index.
    pub fn sentinels(&self) -> &[Server] {
        &self.sentinels
    }

    /// Sentinel `i` (to pause, resume or query it).
    pub fn sentinel(&self, i: usize) -> Result<&Server, HarnessError> {
        let len = self.sentinels.len();
        self.sentinels
            .get(i)
            .ok_or_else(|| bad_index("sentinel", i, len))
    }

    /// Sentinel `i`, mutable (to kill or stop it; see [`SentinelSet::restart_sentinel`]).
    pub fn sentinel_mut(&mut self, i: usize) -> Result<&mut Server, HarnessError> {
        let len = self.sentinels.len();
        self.sentinels
            .get_mut(i)
            .ok_or_else(|| bad_index("sentinel", i, len))
    }

    /// Restarts sentinel `i` on its port with its rewritten configuration (it keeps its
    /// identity and what it learned) and applies the harness' timer settings again.
    ///
    /// Sentinel writes `sentinel auth-pass` back into its file without quoting, so a
    /// password with spaces or quotes would make the restart fail; the harness quotes that
    /// line again before restarting.
    pub fn restart_sentinel(&mut self, i: usize) -> Result<(), HarnessError> {
        let name = self.options.master_name.clone();
        let password = self.options.server.password().map(str::to_owned);
        let sentinel = self.sentinel_mut(i)?;
        sentinel.kill();
        if let Some(pass) = password {
            let path = sentinel.dir().join("sentinel.conf");
            let text = std::fs::read_to_string(&path)?;
            let prefix = format!("sentinel auth-pass {name} ");
            let fixed: Vec<String> = text
                .lines()
                .map(|line| match line.starts_with(&prefix) {
                    true => format!("{prefix}{}", conf_quote(&pass)),
                    false => line.to_owned(),
                })
                .collect();
            std::fs::write(&path, fixed.join("\n") + "\n")?;
        }
        sentinel.restart()?;
        self.tune(i);
        Ok(())
    }

    /// All data nodes: index 0 was started as the primary, the others as its replicas.
    pub fn data_nodes(&self) -> &[Server] {
        &self.data
    }

    /// Data node `i`.
    pub fn data_node(&self, i: usize) -> Result<&Server, HarnessError> {
        let len = self.data.len();
        self.data
            .get(i)
            .ok_or_else(|| bad_index("data node", i, len))
    }

    /// Data node `i`, mutable (to kill, stop or restart it; a restarted former primary is
    /// turned into a replica by the sentinels).
    pub fn data_node_mut(&mut self, i: usize) -> Result<&mut Server, HarnessError> {
        let len = self.data.len();
        self.data
            .get_mut(i)
            .ok_or_else(|| bad_index("data node", i, len))
    }

    /// The primary's address according to the first live sentinel that answers
    /// `SENTINEL GET-MASTER-ADDR-BY-NAME`, as the data node's plain address
    /// ([`Server::addr`]): with TLS data nodes the sentinels name the TLS port, which is
    /// mapped back to its node (its TLS address is `primary()?.tls_port()`).
    pub fn primary_addr(&self) -> Result<SocketAddr, HarnessError> {
        let mut last = None;
        for (_, sentinel) in self.live_sentinels() {
            match self.addr_from(sentinel) {
                Ok(addr) => return Ok(addr),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| {
            HarnessError::InvalidArgument("no sentinel is live (all killed or paused)".into())
        }))
    }

    /// The index of the current primary among [`SentinelSet::data_nodes`].
    pub fn primary_index(&self) -> Result<usize, HarnessError> {
        let addr = self.primary_addr()?;
        self.data_index(addr)
    }

    /// The current primary, according to the sentinels.
    pub fn primary(&self) -> Result<&Server, HarnessError> {
        Ok(&self.data[self.primary_index()?])
    }

    /// Forces a failover with `SENTINEL FAILOVER <name>` (retried while the sentinel finds
    /// no suitable replica yet), then waits until every live sentinel reports the same new
    /// primary address, that server reports `role:master`, and every other live data node
    /// replicates it with its link up. Returns the new primary's (plain) address, as
    /// [`SentinelSet::primary_addr`].
    ///
    /// A forced failover that the sentinel aborts (it is not retried by sentinel itself) is
    /// requested again after 2 × failover-timeout, within the overall bound of
    /// down-after + 4 × failover-timeout + 30 s.
    pub fn failover(&self) -> Result<SocketAddr, HarnessError> {
        let old = self.primary_addr()?;
        if !self.data.iter().any(|n| n.is_live() && n.addr() != old) {
            return Err(HarnessError::InvalidArgument(
                "the primary has no live replica to promote".into(),
            ));
        }
        let deadline = Instant::now() + self.failover_bound();
        loop {
            self.request_failover(deadline)?;
            let attempt = Instant::now()
                + self
                    .options
                    .failover_timeout
                    .saturating_mul(2)
                    .saturating_add(Duration::from_secs(5));
            match self.wait_for_new_primary(old, attempt.min(deadline)) {
                Err(e) if e.is_timeout() && Instant::now() < deadline => {
                    // Only ask again if the sentinels still name the old primary.
                    if self.primary_addr()? != old {
                        return Err(e);
                    }
                }
                other => return other,
            }
        }
    }

    /// Sends `SENTINEL FAILOVER <name>` to the first live sentinel until it accepts (or
    /// says a failover is in progress).
    fn request_failover(&self, deadline: Instant) -> Result<(), HarnessError> {
        let name = self.options.master_name.clone();
        self.wait_for("SENTINEL FAILOVER to be accepted", deadline, |s| {
            let (i, sentinel) = s.live_sentinels().next().ok_or_else(|| {
                HarnessError::InvalidArgument("no sentinel is live (all killed or paused)".into())
            })?;
            match sentinel.command_timeout(&["SENTINEL", "FAILOVER", &name], QUERY_TIMEOUT)? {
                reply if reply.is_ok() => Ok(None),
                // A failover is already running: wait for it instead.
                RespValue::Error(e) if e.starts_with("INPROG") => Ok(None),
                RespValue::Error(e) if e.starts_with("NOGOODSLAVE") => {
                    Ok(Some(format!("sentinel {i}: {e}")))
                }
                reply => Err(HarnessError::Server(format!(
                    "SENTINEL FAILOVER {name} on sentinel {i}: {reply}"
                ))),
            }
        })
    }

    /// Kills the current primary with SIGKILL and waits until the sentinels have elected
    /// and promoted a replica (bounded by down-after + 4 × failover-timeout + 30 s), as in
    /// [`SentinelSet::failover`]. Returns the new primary's (plain) address.
    pub fn kill_primary_and_wait(&mut self) -> Result<SocketAddr, HarnessError> {
        let old = self.primary_addr()?;
        let index = self.data_index(old)?;
        if !self
            .data
            .iter()
            .enumerate()
            .any(|(i, n)| i != index && n.is_live())
        {
            return Err(HarnessError::InvalidArgument(
                "the primary has no live replica to promote".into(),
            ));
        }
        self.data[index].kill();
        let deadline = Instant::now() + self.failover_bound();
        self.wait_for_new_primary(old, deadline)
    }

    /// Waits until all live sentinels agree on a primary other than `old` that calls itself
    /// master, and every other live data node replicates it.
    fn wait_for_new_primary(
        &self,
        old: SocketAddr,
        deadline: Instant,
    ) -> Result<SocketAddr, HarnessError> {
        let mut new = None;
        self.wait_for("the sentinels to agree on a new primary", deadline, |s| {
            let mut agreed = None;
            for (i, sentinel) in s.live_sentinels() {
                let addr = s.addr_from(sentinel)?;
                if addr == old {
                    return Ok(Some(format!("sentinel {i} still reports {old}")));
                }
                match agreed {
                    None => agreed = Some(addr),
                    Some(a) if a == addr => {}
                    Some(a) => {
                        return Ok(Some(format!(
                            "sentinels disagree: {a} and {addr} (sentinel {i})"
                        )));
                    }
                }
            }
            let addr = agreed.ok_or_else(|| {
                HarnessError::InvalidArgument("no sentinel is live (all killed or paused)".into())
            })?;
            let node = &s.data[s.data_index(addr)?];
            let info = node.info_timeout("replication", QUERY_TIMEOUT)?;
            if info_role(&info) != Some("master") {
                return Ok(Some(format!("{addr} does not report role:master yet")));
            }
            new = Some(addr);
            Ok(None)
        })?;
        let new = new.ok_or_else(|| HarnessError::Protocol("no new primary".into()))?;
        self.wait_for(
            "the other data nodes to replicate the new primary",
            deadline,
            |s| s.replication_problem(new),
        )?;
        Ok(new)
    }

    /// Why the live data nodes other than `primary` are not (yet) its linked replicas.
    fn replication_problem(&self, primary: SocketAddr) -> Result<Option<String>, HarnessError> {
        // Replicas follow the port the sentinels know: the TLS one with TLS data nodes.
        let followed = announced_port(&self.data[self.data_index(primary)?]);
        let port = format!("master_port:{followed}");
        for (i, node) in self.data.iter().enumerate() {
            if !node.is_live() || node.port() == primary.port() {
                continue;
            }
            let info = node.info_timeout("replication", QUERY_TIMEOUT)?;
            let follows = info
                .lines()
                .any(|l| l.trim() == port || l.trim() == format!("primary_port:{followed}"));
            if info_role(&info) != Some("slave") || !follows || !master_link_up(&info) {
                return Ok(Some(format!(
                    "data node {i} (port {}) is not a linked replica of {primary} yet",
                    node.port()
                )));
            }
        }
        Ok(None)
    }

    /// How long the waits may take: down-after + 4 × failover-timeout + 30 s.
    fn failover_bound(&self) -> Duration {
        self.options
            .down_after
            .saturating_add(self.options.failover_timeout.saturating_mul(4))
            .saturating_add(MARGIN)
    }

    fn live_sentinels(&self) -> impl Iterator<Item = (usize, &Server)> {
        self.sentinels
            .iter()
            .enumerate()
            .filter(|(_, s)| s.is_live())
    }

    /// The data node at `addr`: its plain address, or its TLS port on the same host.
    fn data_index(&self, addr: SocketAddr) -> Result<usize, HarnessError> {
        self.data
            .iter()
            .position(|n| {
                n.addr() == addr
                    || (n.addr().ip() == addr.ip() && n.tls_port() == Some(addr.port()))
            })
            .ok_or_else(|| {
                HarnessError::Server(format!(
                    "the sentinels name {addr}, which is none of the data nodes"
                ))
            })
    }

    /// `SENTINEL GET-MASTER-ADDR-BY-NAME <name>` on `sentinel`, with a data node's TLS port
    /// mapped to its plain address (an address of no data node is returned as is).
    fn addr_from(&self, sentinel: &Server) -> Result<SocketAddr, HarnessError> {
        let name = &self.options.master_name;
        let reply = sentinel.command_timeout(
            &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", name],
            QUERY_TIMEOUT,
        )?;
        let parsed = reply.as_array().and_then(|parts| match parts {
            [ip, port] => {
                let ip: IpAddr = ip.as_str()?.parse().ok()?;
                let port: u16 = port.as_str()?.parse().ok()?;
                Some(SocketAddr::new(ip, port))
            }
            _ => None,
        });
        let addr = parsed.ok_or_else(|| {
            HarnessError::Server(format!("SENTINEL GET-MASTER-ADDR-BY-NAME {name}: {reply}"))
        })?;
        Ok(match self.data_index(addr) {
            Ok(i) => self.data[i].addr(),
            Err(_) => addr,
        })
    }

    /// `SENTINEL MASTER <name>` (one entry) or `SENTINEL REPLICAS <name>` (one per replica)
    /// on `sentinel`, as field maps.
    fn sentinel_fields(&self, sentinel: &Server, what: &str) -> Result<Vec<Fields>, HarnessError> {
        let name = &self.options.master_name;
        let reply = sentinel.command_timeout(&["SENTINEL", what, name], QUERY_TIMEOUT)?;
        let bad = || HarnessError::Protocol(format!("SENTINEL {what} {name}: {reply}"));
        let entries: Vec<&[RespValue]> = match (what, reply.as_array()) {
            ("MASTER", Some(items)) => vec![items],
            (_, Some(items)) => items
                .iter()
                .map(|e| e.as_array().ok_or_else(bad))
                .collect::<Result<_, _>>()?,
            (_, None) => return Err(bad()),
        };
        entries
            .into_iter()
            .map(|items| {
                items
                    .chunks(2)
                    .map(|kv| match kv {
                        [k, v] => Some((k.as_str()?.to_owned(), v.as_str()?.to_owned())),
                        _ => None,
                    })
                    .collect::<Option<Fields>>()
                    .ok_or_else(bad)
            })
            .collect()
    }

    /// Polls `check` every 25 ms until it returns `Ok(None)`; errors are retried (a process
    /// may be busy), [`HarnessError::InvalidArgument`] ends the wait at once.
    fn wait_for(
        &self,
        what: &str,
        deadline: Instant,
        mut check: impl FnMut(&SentinelSet) -> Result<Option<String>, HarnessError>,
    ) -> Result<(), HarnessError> {
        loop {
            let why = match check(self) {
                Ok(None) => return Ok(()),
                Ok(Some(why)) => why,
                Err(e @ HarnessError::InvalidArgument(_)) => return Err(e),
                Err(e) => e.to_string(),
            };
            if Instant::now() >= deadline {
                return Err(HarnessError::Timeout(format!(
                    "waiting for {what}: {why}\n{}",
                    self.describe()
                )));
            }
            thread::sleep(POLL_INTERVAL);
        }
    }

    /// What every live sentinel says about the master and the replicas, and the data nodes'
    /// roles, for error messages.
    pub fn describe(&self) -> String {
        let mut out = String::new();
        let name = &self.options.master_name;
        for (i, s) in self.sentinels.iter().enumerate() {
            out.push_str(&format!("--- sentinel {i} (port {}) ---\n", s.port()));
            out.push_str(&s.log_tail(LOG_TAIL_LINES));
            if !s.is_live() {
                out.push_str("(not live)\n");
                continue;
            }
            for what in ["GET-MASTER-ADDR-BY-NAME", "MASTER", "REPLICAS"] {
                match s.command_timeout(&["SENTINEL", what, name], QUERY_TIMEOUT) {
                    Ok(reply) => out.push_str(&format!("SENTINEL {what}: {reply}\n")),
                    Err(e) => out.push_str(&format!("SENTINEL {what}: ({e})\n")),
                }
            }
        }
        for (i, n) in self.data.iter().enumerate() {
            let role = if n.is_live() {
                n.info_timeout("replication", QUERY_TIMEOUT)
                    .map(|info| {
                        info.lines()
                            .filter(|l| l.starts_with("role:") || l.contains("_link_status:"))
                            .collect::<Vec<_>>()
                            .join(" ")
                    })
                    .unwrap_or_else(|e| format!("({e})"))
            } else {
                "(not live)".to_owned()
            };
            let tls = n
                .tls_port()
                .map(|p| format!(", TLS port {p}"))
                .unwrap_or_default();
            out.push_str(&format!(
                "--- data node {i} (port {}{tls}): {role}\n",
                n.port()
            ));
        }
        out
    }
}

/// The port the sentinels know a data node by: its TLS port if it has one (then it
/// replicates over TLS and announces that port), else its plain port.
fn announced_port(node: &Server) -> u16 {
    node.tls_port().unwrap_or_else(|| node.port())
}

fn field<'a>(fields: &'a Fields, name: &str) -> &'a str {
    fields.get(name).map(String::as_str).unwrap_or("")
}

fn bad_index(what: &str, i: usize, len: usize) -> HarnessError {
    HarnessError::InvalidArgument(format!("no {what} {i}: there are {len}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ping_period() {
        assert_eq!(ping_period_ms(1000), 250);
        assert_eq!(ping_period_ms(30_000), 1000);
        assert_eq!(ping_period_ms(1), 50);
    }

    #[test]
    fn options_validate() {
        assert!(SentinelOptions::new().validate().is_ok());
        assert!(SentinelOptions::new().sentinels(0).validate().is_err());
        assert!(SentinelOptions::new().quorum(0).validate().is_err());
        assert!(SentinelOptions::new().quorum(4).validate().is_err());
        assert!(SentinelOptions::new().master_name("").validate().is_err());
        assert!(
            SentinelOptions::new()
                .master_name("a b")
                .validate()
                .is_err()
        );
        assert!(
            SentinelOptions::new()
                .master_name("my-master.1_x")
                .validate()
                .is_ok()
        );
    }

    #[test]
    fn sentinel_config_lines() {
        let o = SentinelOptions::new()
            .master_name("m")
            .quorum(1)
            .down_after(Duration::from_millis(1500))
            .failover_timeout(Duration::from_secs(3))
            .server(ServerOptions::new().requirepass("p\"w"));
        assert_eq!(
            o.sentinel_config(7000),
            "sentinel monitor m 127.0.0.1 7000 1\n\
             sentinel down-after-milliseconds m 1500\n\
             sentinel failover-timeout m 3000\n\
             sentinel parallel-syncs m 1\n\
             sentinel auth-pass m \"p\\\"w\"\n"
        );
    }
}
