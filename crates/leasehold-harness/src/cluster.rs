//! A Redis Cluster of real server processes, built without `redis-cli`.

use std::collections::BTreeMap;
use std::fmt;
use std::thread;
use std::time::{Duration, Instant};

use crate::server::{Mode, info_role, master_link_up};
use crate::{HarnessError, RespValue, Server, ServerBinary, ServerOptions};

/// The number of hash slots of a Redis Cluster (`0..=16383`).
pub const CLUSTER_SLOTS: u16 = 16384;

/// Sleep between two looks at the cluster's state.
const POLL_INTERVAL: Duration = Duration::from_millis(25);
/// Socket timeout of the harness' own queries to live nodes.
const QUERY_TIMEOUT: Duration = Duration::from_secs(5);
/// Minimum bound of [`Cluster::wait_until_stable`] and the other waits.
const MIN_STABLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Keys moved per `MIGRATE` in [`Cluster::migrate_keys`].
const MIGRATE_BATCH: usize = 100;
/// Timeout argument of `MIGRATE`, in milliseconds.
const MIGRATE_TIMEOUT_MS: &str = "10000";

/// How to build a [`Cluster`]. Builder style:
/// `ClusterOptions::new().masters(3).replicas_per_master(1)`.
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    masters: usize,
    replicas_per_master: usize,
    node_timeout: Duration,
    server: ServerOptions,
}

impl Default for ClusterOptions {
    fn default() -> Self {
        ClusterOptions {
            masters: 3,
            replicas_per_master: 1,
            node_timeout: Duration::from_millis(2000),
            server: ServerOptions::new(),
        }
    }
}

impl ClusterOptions {
    /// Defaults: 3 masters, 1 replica each, `cluster-node-timeout` 2000 ms, default
    /// [`ServerOptions`].
    pub fn new() -> Self {
        Self::default()
    }

    /// The number of masters (at least 1); the slots are split evenly among them.
    pub fn masters(mut self, masters: usize) -> Self {
        self.masters = masters;
        self
    }

    /// The number of replicas of each master (0 is allowed).
    pub fn replicas_per_master(mut self, replicas: usize) -> Self {
        self.replicas_per_master = replicas;
        self
    }

    /// `--cluster-node-timeout` (rounded to whole milliseconds, at least 1): how long a node
    /// may be unreachable before it is considered failing.
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.node_timeout = timeout;
        self
    }

    /// The base options of every node (password, AOF, TLS, raw arguments). A password also
    /// becomes every node's `--masterauth`, since any node may become a replica.
    pub fn server(mut self, options: ServerOptions) -> Self {
        self.server = options;
        self
    }

    /// The number of masters.
    pub fn master_count(&self) -> usize {
        self.masters
    }

    /// The number of replicas per master.
    pub fn replica_count(&self) -> usize {
        self.replicas_per_master
    }

    /// The node timeout.
    pub fn node_timeout_value(&self) -> Duration {
        self.node_timeout
    }

    /// The base options of every node.
    pub fn server_options(&self) -> &ServerOptions {
        &self.server
    }

    fn node_timeout_ms(&self) -> u128 {
        self.node_timeout.as_millis().max(1)
    }
}

/// A Redis Cluster on `127.0.0.1`: `masters` masters with `replicas_per_master` replicas
/// each, every node a [`Server`] with its own directory, port and cluster-bus port.
///
/// Node indices are fixed at start: `0..masters` are the nodes started as masters, master
/// `m`'s replicas follow as `masters + m * replicas_per_master + r`. Roles change with
/// failovers; methods that talk about the *current* topology ([`Cluster::masters`],
/// [`Cluster::master_index_for_slot`], [`Cluster::replicas_of`], ...) ask the nodes.
///
/// Each node runs with `--cluster-enabled yes --cluster-config-file <dir>/nodes.conf
/// --cluster-port <free port> --cluster-node-timeout <ms> --cluster-allow-replica-migration
/// no` (plus `--masterauth` if a password is set), then the options' raw arguments, which
/// may override these. Full slot coverage is required (the server's default).
///
/// Dropping the cluster kills every node.
pub struct Cluster {
    nodes: Vec<Server>,
    ids: Vec<String>,
    options: ClusterOptions,
}

impl fmt::Debug for Cluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cluster")
            .field("masters", &self.options.masters)
            .field("replicas_per_master", &self.options.replicas_per_master)
            .field(
                "nodes",
                &self
                    .nodes
                    .iter()
                    .zip(&self.ids)
                    .map(|(n, id)| (n.port(), id.as_str()))
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl Cluster {
    /// Starts all nodes of `bin`, joins them into a cluster and waits until it is stable
    /// (see [`Cluster::wait_until_stable`]).
    ///
    /// The cluster is built with cluster commands only: `CLUSTER SET-CONFIG-EPOCH` and
    /// `CLUSTER ADDSLOTSRANGE` on the masters (an even split of `0..=16383`), `CLUSTER MEET`
    /// of every node, `CLUSTER REPLICATE` on the replicas.
    pub fn start(bin: &ServerBinary, options: &ClusterOptions) -> Result<Cluster, HarnessError> {
        let masters = options.masters;
        if masters == 0 || masters > usize::from(CLUSTER_SLOTS) {
            return Err(HarnessError::InvalidArgument(format!(
                "a cluster needs 1 to {CLUSTER_SLOTS} masters, not {masters}"
            )));
        }
        let total = options
            .replicas_per_master
            .checked_add(1)
            .and_then(|per| per.checked_mul(masters))
            .filter(|&n| n <= 1000)
            .ok_or_else(|| {
                HarnessError::InvalidArgument(format!(
                    "{masters} masters with {} replicas each is too many nodes",
                    options.replicas_per_master
                ))
            })?;

        let mut extra = vec![
            "--cluster-node-timeout".to_owned(),
            options.node_timeout_ms().to_string(),
            "--cluster-allow-replica-migration".to_owned(),
            "no".to_owned(),
        ];
        if let Some(pass) = options.server.password() {
            extra.push("--masterauth".to_owned());
            extra.push(pass.to_owned());
        }

        // Start all nodes in parallel; every started node is dropped (killed) on failure.
        let results: Vec<Result<Server, HarnessError>> = thread::scope(|scope| {
            let handles: Vec<_> = (0..total)
                .map(|_| {
                    let extra = extra.clone();
                    scope.spawn(move || {
                        Server::start_with(bin, &options.server, extra, Mode::ClusterNode)
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        Err(HarnessError::Protocol(
                            "a node's start thread panicked".into(),
                        ))
                    })
                })
                .collect()
        });
        let nodes = results.into_iter().collect::<Result<Vec<Server>, _>>()?;

        let mut ids = Vec::with_capacity(total);
        for node in &nodes {
            let reply = node.command_timeout(&["CLUSTER", "MYID"], QUERY_TIMEOUT)?;
            match reply.as_str() {
                Some(id) if !id.is_empty() && id.bytes().all(|b| b.is_ascii_hexdigit()) => {
                    ids.push(id.to_owned())
                }
                _ => {
                    return Err(HarnessError::Server(format!(
                        "CLUSTER MYID on port {}: {reply}",
                        node.port()
                    )));
                }
            }
        }
        let cluster = Cluster {
            nodes,
            ids,
            options: options.clone(),
        };
        cluster.assemble()?;
        Ok(cluster)
    }

    /// Epochs and slots on the masters, `CLUSTER MEET`, `CLUSTER REPLICATE`, then
    /// [`Cluster::wait_until_stable`].
    fn assemble(&self) -> Result<(), HarnessError> {
        let masters = self.options.masters;
        let slots = usize::from(CLUSTER_SLOTS);
        for m in 0..masters {
            let node = &self.nodes[m];
            // Distinct config epochs up front spare the cluster its epoch-collision rounds.
            expect_ok(node, &["CLUSTER", "SET-CONFIG-EPOCH", &(m + 1).to_string()])?;
            let first = m * slots / masters;
            let last = (m + 1) * slots / masters - 1;
            expect_ok(
                node,
                &[
                    "CLUSTER",
                    "ADDSLOTSRANGE",
                    &first.to_string(),
                    &last.to_string(),
                ],
            )?;
        }
        // A full mesh of MEETs (each pair once) instead of one seed and gossip: every node
        // learns every other directly, which saves about a second of gossip rounds (and
        // the rejoin delay after a node briefly saw itself in a minority).
        for (i, from) in self.nodes.iter().enumerate() {
            let commands: Vec<Vec<String>> = self.nodes[i + 1..]
                .iter()
                .map(|to| {
                    let mut meet = vec![
                        "CLUSTER".to_owned(),
                        "MEET".to_owned(),
                        "127.0.0.1".to_owned(),
                        to.port().to_string(),
                    ];
                    meet.extend(to.bus_port().map(|p| p.to_string()));
                    meet
                })
                .collect();
            if commands.is_empty() {
                continue;
            }
            let args: Vec<Vec<&str>> = commands
                .iter()
                .map(|c| c.iter().map(String::as_str).collect())
                .collect();
            let args: Vec<&[&str]> = args.iter().map(Vec::as_slice).collect();
            for (reply, command) in from
                .commands_timeout(&args, QUERY_TIMEOUT)?
                .iter()
                .zip(&args)
            {
                if !reply.is_ok() {
                    return Err(HarnessError::Server(format!(
                        "{} on port {}: {reply}",
                        command.join(" "),
                        from.port()
                    )));
                }
            }
        }

        // Every node must know every other (no handshakes left) before a replica can name
        // its master.
        let deadline = Instant::now() + self.stable_timeout();
        self.wait_for("all nodes to know each other", deadline, |c| {
            for (i, node) in c.nodes.iter().enumerate() {
                let view = c.view_of(i)?;
                let known = view
                    .lines
                    .iter()
                    .filter(|l| !l.has_flag("handshake") && !l.has_flag("noaddr"))
                    .count();
                if known != c.nodes.len() {
                    return Ok(Some(format!(
                        "node {i} (port {}) knows {known} of {} nodes",
                        node.port(),
                        c.nodes.len()
                    )));
                }
            }
            Ok(None)
        })?;

        let per = self.options.replicas_per_master;
        for m in 0..masters {
            for r in 0..per {
                let replica = masters + m * per + r;
                let master_id = self.ids[m].clone();
                self.wait_for(
                    &format!("node {replica} to accept CLUSTER REPLICATE of node {m}"),
                    deadline,
                    |c| match c.nodes[replica]
                        .command_timeout(&["CLUSTER", "REPLICATE", &master_id], QUERY_TIMEOUT)?
                    {
                        reply if reply.is_ok() => Ok(None),
                        // The replica may not have learned that the node is a master yet.
                        reply => Ok(Some(format!("CLUSTER REPLICATE: {reply}"))),
                    },
                )?;
            }
        }
        self.wait_until_stable()
    }

    /// All nodes, by index (see the type's documentation for the numbering).
    pub fn nodes(&self) -> &[Server] {
        &self.nodes
    }

    /// The number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Always false: a cluster has at least one node.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The options the cluster was started with.
    pub fn options(&self) -> &ClusterOptions {
        &self.options
    }

    /// Node `i`.
    pub fn node(&self, i: usize) -> Result<&Server, HarnessError> {
        let len = self.nodes.len();
        self.nodes.get(i).ok_or_else(|| bad_index(i, len))
    }

    /// Node `i`, mutable (to kill, stop or restart it; a restarted node keeps its
    /// `nodes.conf` and so its identity, and rejoins the cluster).
    pub fn node_mut(&mut self, i: usize) -> Result<&mut Server, HarnessError> {
        let len = self.nodes.len();
        self.nodes.get_mut(i).ok_or_else(|| bad_index(i, len))
    }

    /// The cluster node id (`CLUSTER MYID`) of node `i`.
    pub fn node_id(&self, i: usize) -> Result<&str, HarnessError> {
        self.ids
            .get(i)
            .map(String::as_str)
            .ok_or_else(|| bad_index(i, self.ids.len()))
    }

    /// The index of the node with this cluster node id.
    pub fn index_of_id(&self, id: &str) -> Option<usize> {
        self.ids.iter().position(|x| x == id)
    }

    /// Seed URLs `redis://127.0.0.1:PORT/` of the nodes started as masters (indices
    /// `0..masters`) that have not been killed or stopped; if all of them have, of every
    /// node still running. These are start-up seeds, not necessarily the current masters
    /// (see [`Cluster::masters`]).
    pub fn urls(&self) -> Vec<String> {
        let seeds: Vec<String> = self.nodes[..self.options.masters]
            .iter()
            .filter(|n| n.pid().is_some())
            .map(Server::url)
            .collect();
        if seeds.is_empty() {
            self.nodes
                .iter()
                .filter(|n| n.pid().is_some())
                .map(Server::url)
                .collect()
        } else {
            seeds
        }
    }

    /// The first of [`Cluster::urls`] (node 0's URL if no node is running).
    pub fn url(&self) -> String {
        self.urls()
            .into_iter()
            .next()
            .unwrap_or_else(|| self.nodes[0].url())
    }

    /// Indices of the current masters, in index order: the nodes that the first live node
    /// lists as masters (`CLUSTER NODES`), not flagged as failed, and still running.
    pub fn master_indices(&self) -> Result<Vec<usize>, HarnessError> {
        let view = self.any_view()?;
        let mut out: Vec<usize> = view
            .lines
            .iter()
            .filter(|l| l.is_master() && !l.has_flag("fail"))
            .filter_map(|l| self.index_of_id(&l.id))
            .filter(|&i| self.nodes[i].pid().is_some())
            .collect();
        out.sort_unstable();
        Ok(out)
    }

    /// The current masters (see [`Cluster::master_indices`]).
    pub fn masters(&self) -> Result<Vec<&Server>, HarnessError> {
        Ok(self
            .master_indices()?
            .into_iter()
            .map(|i| &self.nodes[i])
            .collect())
    }

    /// The live replicas (running, not paused) that the first live node lists as
    /// replicas of node `i`, in index order.
    pub fn replicas_of(&self, i: usize) -> Result<Vec<usize>, HarnessError> {
        let id = self.node_id(i)?.to_owned();
        let view = self.any_view()?;
        let mut out: Vec<usize> = view
            .lines
            .iter()
            .filter(|l| l.is_replica() && l.master_id.as_deref() == Some(id.as_str()))
            .filter_map(|l| self.index_of_id(&l.id))
            .filter(|&r| self.nodes[r].is_live())
            .collect();
        out.sort_unstable();
        Ok(out)
    }

    /// The hash slot of `key`, as the server computes it (`CLUSTER KEYSLOT`, asked of a
    /// live node).
    pub fn keyslot(&self, key: &str) -> Result<u16, HarnessError> {
        let mut last = None;
        for node in self.nodes.iter().filter(|n| n.is_live()) {
            match node.command_timeout(&["CLUSTER", "KEYSLOT", key], QUERY_TIMEOUT) {
                Ok(RespValue::Integer(slot)) => {
                    return u16::try_from(slot)
                        .ok()
                        .filter(|s| *s < CLUSTER_SLOTS)
                        .ok_or_else(|| {
                            HarnessError::Protocol(format!("CLUSTER KEYSLOT returned {slot}"))
                        });
                }
                Ok(other) => {
                    return Err(HarnessError::Server(format!("CLUSTER KEYSLOT: {other}")));
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or(HarnessError::NotRunning))
    }

    /// The index of the node that currently owns `slot`, according to the first live node.
    pub fn master_index_for_slot(&self, slot: u16) -> Result<usize, HarnessError> {
        check_slot(slot)?;
        let view = self.any_view()?;
        let owners = view.owners(self);
        owners[usize::from(slot)].ok_or_else(|| {
            HarnessError::Server(format!(
                "no node owns slot {slot} (according to node {})\n{}",
                view.source, view.text
            ))
        })
    }

    /// The index of the node that currently owns `key`'s slot.
    pub fn master_index_for_key(&self, key: &str) -> Result<usize, HarnessError> {
        self.master_index_for_slot(self.keyslot(key)?)
    }

    /// The node that currently owns `key`'s slot.
    pub fn master_for_key(&self, key: &str) -> Result<&Server, HarnessError> {
        Ok(&self.nodes[self.master_index_for_key(key)?])
    }

    /// How long the waits of this cluster may take: at least 60 s, or 10 node timeouts.
    fn stable_timeout(&self) -> Duration {
        MIN_STABLE_TIMEOUT.max(self.options.node_timeout.saturating_mul(10))
    }

    /// Waits until the cluster is stable, i.e. on every live node (started and not paused):
    ///
    /// * `CLUSTER INFO` reports `cluster_state:ok`;
    /// * `CLUSTER NODES` lists every node (no handshakes), and no live node as failing;
    /// * the slot owners are the same everywhere, and so is `CLUSTER SLOTS` (compared with
    ///   replicas in sorted order);
    /// * every node agrees with each live node on its role (master, or replica of which
    ///   master);
    /// * every live replica reports `master_link_status:up`.
    ///
    /// Bounded by 60 s (or 10 node timeouts if more); the timeout error says which condition
    /// failed last and includes every live node's `CLUSTER NODES`.
    pub fn wait_until_stable(&self) -> Result<(), HarnessError> {
        let deadline = Instant::now() + self.stable_timeout();
        self.wait_for(
            "the cluster to become stable",
            deadline,
            Cluster::instability,
        )
    }

    /// `None` if stable, else what is not (yet).
    fn instability(&self) -> Result<Option<String>, HarnessError> {
        let live: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| self.nodes[i].is_live())
            .collect();
        if live.is_empty() {
            return Err(HarnessError::NotRunning);
        }
        let mut snapshots = Vec::with_capacity(live.len());
        for &i in &live {
            let node = &self.nodes[i];
            let replies = node.commands_timeout(
                &[
                    &["CLUSTER", "INFO"],
                    &["CLUSTER", "NODES"],
                    &["CLUSTER", "SLOTS"],
                    &["INFO", "replication"],
                ],
                QUERY_TIMEOUT,
            )?;
            let [info, nodes, slots, replication] = <[RespValue; 4]>::try_from(replies)
                .map_err(|_| HarnessError::Protocol("expected 4 replies".into()))?;
            let info = text_reply(&info, "CLUSTER INFO")?;
            if !info.lines().any(|l| l.trim() == "cluster_state:ok") {
                return Ok(Some(format!(
                    "node {i} (port {}) does not report cluster_state:ok",
                    node.port()
                )));
            }
            let view = View::parse(i, text_reply(&nodes, "CLUSTER NODES")?)?;
            let replication = text_reply(&replication, "INFO replication")?.to_owned();
            snapshots.push((i, view, normalize_slots(&slots)?, replication));
        }

        let (first, first_view, first_slots, _) = &snapshots[0];
        let first_owners = first_view.owners(self);
        for (i, view, slots, replication) in &snapshots {
            let known = view
                .lines
                .iter()
                .filter(|l| !l.has_flag("handshake") && !l.has_flag("noaddr"))
                .count();
            if known != self.nodes.len() {
                return Ok(Some(format!(
                    "node {i} knows {known} of {} nodes",
                    self.nodes.len()
                )));
            }
            for line in &view.lines {
                let Some(j) = self.index_of_id(&line.id) else {
                    return Ok(Some(format!("node {i} lists an unknown node {}", line.id)));
                };
                if self.nodes[j].is_live() && (line.has_flag("fail") || line.has_flag("fail?")) {
                    return Ok(Some(format!(
                        "node {i} flags live node {j} as {}",
                        line.flags.join(",")
                    )));
                }
            }
            if view.owners(self) != first_owners {
                return Ok(Some(format!(
                    "nodes {first} and {i} disagree on the slot owners"
                )));
            }
            if slots != first_slots {
                return Ok(Some(format!(
                    "nodes {first} and {i} disagree on CLUSTER SLOTS"
                )));
            }
            let Some(me) = view.myself() else {
                return Ok(Some(format!("node {i} has no `myself` line")));
            };
            let my_role = me.role();
            // Everyone agrees with this node about its role.
            for (k, other, _, _) in &snapshots {
                let theirs = other.line(&self.ids[*i]).map(NodeLine::role);
                if theirs.as_ref() != Some(&my_role) {
                    return Ok(Some(format!(
                        "node {k} sees node {i} as {theirs:?}, but it is {my_role:?}"
                    )));
                }
            }
            if me.is_replica() && !master_link_up(replication) {
                return Ok(Some(format!(
                    "replica {i} (port {}) has no master link yet",
                    self.nodes[*i].port()
                )));
            }
        }
        Ok(None)
    }

    /// Polls `check` every 25 ms until it returns `Ok(None)`; `Ok(Some(why))` means not yet.
    /// Errors of `check` are retried too (a node may be busy), until `deadline`.
    fn wait_for(
        &self,
        what: &str,
        deadline: Instant,
        mut check: impl FnMut(&Cluster) -> Result<Option<String>, HarnessError>,
    ) -> Result<(), HarnessError> {
        loop {
            let why = match check(self) {
                Ok(None) => return Ok(()),
                Ok(Some(why)) => why,
                Err(HarnessError::NotRunning) => {
                    return Err(HarnessError::InvalidArgument(format!(
                        "waiting for {what}: no node of the cluster is live"
                    )));
                }
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

    /// `CLUSTER NODES` of every live node, for error messages.
    pub fn describe(&self) -> String {
        let mut out = String::new();
        for (i, node) in self.nodes.iter().enumerate() {
            let state = if node.pid().is_none() {
                "not running"
            } else if node.is_paused() {
                "paused"
            } else {
                "live"
            };
            out.push_str(&format!(
                "--- node {i} (port {}, {state}) CLUSTER NODES ---\n",
                node.port()
            ));
            if node.is_live() {
                match node.command_timeout(&["CLUSTER", "NODES"], QUERY_TIMEOUT) {
                    Ok(reply) => match reply.as_str() {
                        Some(text) => out.push_str(text.trim_end()),
                        None => out.push_str(&reply.to_string()),
                    },
                    Err(e) => out.push_str(&format!("({e})")),
                }
                out.push('\n');
            }
        }
        out
    }

    /// `CLUSTER NODES` of node `i`, parsed.
    fn view_of(&self, i: usize) -> Result<View, HarnessError> {
        let reply = self.nodes[i].command_timeout(&["CLUSTER", "NODES"], QUERY_TIMEOUT)?;
        View::parse(i, text_reply(&reply, "CLUSTER NODES")?)
    }

    /// The view of the first live node that answers.
    fn any_view(&self) -> Result<View, HarnessError> {
        let mut last = None;
        for i in (0..self.nodes.len()).filter(|&i| self.nodes[i].is_live()) {
            match self.view_of(i) {
                Ok(view) => return Ok(view),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or(HarnessError::NotRunning))
    }

    fn check_index(&self, i: usize) -> Result<(), HarnessError> {
        self.node(i).map(|_| ())
    }

    fn check_live(&self, i: usize) -> Result<(), HarnessError> {
        if self.node(i)?.is_live() {
            Ok(())
        } else {
            Err(HarnessError::InvalidArgument(format!(
                "node {i} (port {}) is not live (killed, stopped or paused)",
                self.nodes[i].port()
            )))
        }
    }

    /// Kills master `i` with SIGKILL and promotes one of its live replicas at once with
    /// `CLUSTER FAILOVER TAKEOVER` (no waiting for the node timeout and an election); then
    /// waits until all live nodes agree that the replica owns the slots, and until the
    /// cluster is stable. Returns the new master's index.
    ///
    /// Fails with [`HarnessError::InvalidArgument`] (before killing anything) if node `i` is
    /// not a master or has no live replica.
    pub fn kill_master_and_promote(&mut self, i: usize) -> Result<usize, HarnessError> {
        self.check_live(i)?;
        let view = self.view_of(i)?;
        if !view.myself().is_some_and(NodeLine::is_master) {
            return Err(HarnessError::InvalidArgument(format!(
                "node {i} is not a master\n{}",
                view.text
            )));
        }
        let slots: Vec<u16> = slots_of(&view.owners(self), i);
        let candidates = self.replicas_of(i)?;
        // Prefer a replica whose link is up (it has the data).
        let replica = candidates
            .iter()
            .copied()
            .find(|&r| {
                self.nodes[r]
                    .info_timeout("replication", QUERY_TIMEOUT)
                    .is_ok_and(|info| master_link_up(&info))
            })
            .or_else(|| candidates.first().copied())
            .ok_or_else(|| {
                HarnessError::InvalidArgument(format!("master {i} has no live replica"))
            })?;

        self.nodes[i].kill();
        expect_ok(&self.nodes[replica], &["CLUSTER", "FAILOVER", "TAKEOVER"])?;
        self.wait_for_owner(&slots, replica, "the takeover")?;
        self.wait_until_stable()?;
        Ok(replica)
    }

    /// Graceful manual failover: `CLUSTER FAILOVER` on replica `replica` (its master must be
    /// reachable); waits until the replica owns its former master's slots on every live
    /// node, and until the cluster is stable. The former master becomes its replica.
    /// Returns the index of the former master.
    pub fn failover(&mut self, replica: usize) -> Result<usize, HarnessError> {
        self.check_live(replica)?;
        let view = self.view_of(replica)?;
        let Some(me) = view.myself().filter(|m| m.is_replica()) else {
            return Err(HarnessError::InvalidArgument(format!(
                "node {replica} is not a replica\n{}",
                view.text
            )));
        };
        let master = me
            .master_id
            .as_deref()
            .and_then(|id| self.index_of_id(id))
            .ok_or_else(|| {
                HarnessError::Server(format!(
                    "node {replica} replicates an unknown node\n{}",
                    view.text
                ))
            })?;
        let slots = slots_of(&view.owners(self), master);
        expect_ok(&self.nodes[replica], &["CLUSTER", "FAILOVER"])?;
        let deadline = Instant::now() + self.stable_timeout();
        self.wait_for("the manual failover", deadline, |c| {
            let own = c.view_of(replica)?;
            match own.myself() {
                Some(me) if me.is_master() => Ok(None),
                _ => Ok(Some(format!("node {replica} is not a master yet"))),
            }
        })?;
        self.wait_for_owner(&slots, replica, "the manual failover")?;
        self.wait_until_stable()?;
        Ok(master)
    }

    /// Waits until every live node says `owner` owns all of `slots`.
    fn wait_for_owner(&self, slots: &[u16], owner: usize, after: &str) -> Result<(), HarnessError> {
        let deadline = Instant::now() + self.stable_timeout();
        self.wait_for(
            &format!("all live nodes to see node {owner} owning its slots after {after}"),
            deadline,
            |c| {
                for i in (0..c.nodes.len()).filter(|&i| c.nodes[i].is_live()) {
                    let owners = c.view_of(i)?.owners(c);
                    if let Some(slot) = slots
                        .iter()
                        .find(|&&s| owners[usize::from(s)] != Some(owner))
                    {
                        return Ok(Some(format!(
                            "node {i} says slot {slot} belongs to {:?}",
                            owners[usize::from(*slot)]
                        )));
                    }
                }
                Ok(None)
            },
        )
    }

    /// First step of a slot migration: `CLUSTER SETSLOT <slot> IMPORTING <from-id>` on `to`,
    /// then `CLUSTER SETSLOT <slot> MIGRATING <to-id>` on `from` (the order `redis-cli`
    /// uses). From now on, `from` answers `-ASK` for keys of the slot that it does not hold.
    ///
    /// `from` must be the slot's current owner and `to` another live master.
    pub fn begin_migration(&self, slot: u16, from: usize, to: usize) -> Result<(), HarnessError> {
        self.check_migration(slot, from, to)?;
        let slot_s = slot.to_string();
        expect_ok(
            &self.nodes[to],
            &["CLUSTER", "SETSLOT", &slot_s, "IMPORTING", &self.ids[from]],
        )?;
        expect_ok(
            &self.nodes[from],
            &["CLUSTER", "SETSLOT", &slot_s, "MIGRATING", &self.ids[to]],
        )
    }

    fn check_migration(&self, slot: u16, from: usize, to: usize) -> Result<(), HarnessError> {
        check_slot(slot)?;
        self.check_live(from)?;
        self.check_live(to)?;
        if from == to {
            return Err(HarnessError::InvalidArgument(format!(
                "cannot migrate slot {slot} from node {from} to itself"
            )));
        }
        let view = self.view_of(from)?;
        let owner = view.owners(self)[usize::from(slot)];
        if owner != Some(from) {
            return Err(HarnessError::InvalidArgument(format!(
                "node {from} does not own slot {slot} (owner: {owner:?})"
            )));
        }
        if !view.line(&self.ids[to]).is_some_and(NodeLine::is_master) {
            return Err(HarnessError::InvalidArgument(format!(
                "node {to} is not a master"
            )));
        }
        Ok(())
    }

    /// Second step: moves every key of `slot` from `from` to `to` with
    /// `CLUSTER GETKEYSINSLOT` and `MIGRATE 127.0.0.1 <port> "" 0 10000 [AUTH pw] KEYS ...`,
    /// in batches of 100, until `from` holds none. Returns how many keys were sent (keys
    /// that expired in between count too).
    ///
    /// Call it between [`Cluster::begin_migration`] and [`Cluster::finish_migration`].
    pub fn migrate_keys(&self, slot: u16, from: usize, to: usize) -> Result<usize, HarnessError> {
        check_slot(slot)?;
        self.check_live(from)?;
        self.check_live(to)?;
        let source = &self.nodes[from];
        // With TLS the nodes talk TLS among themselves (`--tls-cluster yes`), MIGRATE included.
        let port = self.nodes[to]
            .tls_port()
            .unwrap_or_else(|| self.nodes[to].port())
            .to_string();
        let slot_s = slot.to_string();
        let batch = MIGRATE_BATCH.to_string();
        let deadline = Instant::now() + self.stable_timeout();
        let mut moved = 0;
        loop {
            let reply = source.command_timeout(
                &["CLUSTER", "GETKEYSINSLOT", &slot_s, &batch],
                QUERY_TIMEOUT,
            )?;
            let keys: Vec<Vec<u8>> = match reply.as_array() {
                Some(items) => items
                    .iter()
                    .map(|k| {
                        k.as_bytes().map(<[u8]>::to_vec).ok_or_else(|| {
                            HarnessError::Protocol(format!("CLUSTER GETKEYSINSLOT: {reply}"))
                        })
                    })
                    .collect::<Result<_, _>>()?,
                None => {
                    return Err(HarnessError::Server(format!(
                        "CLUSTER GETKEYSINSLOT {slot}: {reply}"
                    )));
                }
            };
            if keys.is_empty() {
                return Ok(moved);
            }
            if Instant::now() >= deadline {
                return Err(HarnessError::Timeout(format!(
                    "migrating the keys of slot {slot}: {moved} moved, more keep appearing"
                )));
            }
            let mut args: Vec<&[u8]> = vec![
                b"MIGRATE",
                b"127.0.0.1",
                port.as_bytes(),
                b"",
                b"0",
                MIGRATE_TIMEOUT_MS.as_bytes(),
            ];
            if let Some(pass) = self.options.server.password() {
                args.push(b"AUTH");
                args.push(pass.as_bytes());
            }
            args.push(b"KEYS");
            args.extend(keys.iter().map(Vec::as_slice));
            match source.command_bytes(&args)? {
                reply if reply.is_ok() => moved += keys.len(),
                // All of them expired meanwhile.
                RespValue::Simple(s) if s == "NOKEY" => {}
                reply => {
                    return Err(HarnessError::Server(format!(
                        "MIGRATE of {} keys of slot {slot} to node {to}: {reply}",
                        keys.len()
                    )));
                }
            }
        }
    }

    /// Last step: `CLUSTER SETSLOT <slot> NODE <to-id>` on `to`, on the slot's current owner
    /// and on every other live master; then waits until all live nodes agree that `to`
    /// owns the slot and the cluster is stable.
    ///
    /// Fails with [`HarnessError::InvalidArgument`] (before changing anything) if the
    /// current owner still holds keys of the slot.
    pub fn finish_migration(&self, slot: u16, to: usize) -> Result<(), HarnessError> {
        check_slot(slot)?;
        self.check_live(to)?;
        let from = self.master_index_for_slot(slot)?;
        if from != to && self.nodes[from].is_live() {
            let reply = self.nodes[from].command_timeout(
                &["CLUSTER", "COUNTKEYSINSLOT", &slot.to_string()],
                QUERY_TIMEOUT,
            )?;
            match reply.as_integer() {
                Some(0) => {}
                Some(n) => {
                    return Err(HarnessError::InvalidArgument(format!(
                        "node {from} still holds {n} keys of slot {slot}; call migrate_keys first"
                    )));
                }
                None => {
                    return Err(HarnessError::Server(format!(
                        "CLUSTER COUNTKEYSINSLOT {slot}: {reply}"
                    )));
                }
            }
        }
        let slot_s = slot.to_string();
        let setslot = ["CLUSTER", "SETSLOT", &slot_s, "NODE", &self.ids[to]];
        expect_ok(&self.nodes[to], &setslot)?;
        if from != to && self.nodes[from].is_live() {
            expect_ok(&self.nodes[from], &setslot)?;
        }
        for m in self.master_indices()? {
            if m != to && m != from && self.nodes[m].is_live() {
                expect_ok(&self.nodes[m], &setslot)?;
            }
        }
        self.wait_for_owner(&[slot], to, "the migration")?;
        self.wait_until_stable()
    }

    /// All three steps of moving `slot` from `from` to `to`; returns the number of keys
    /// moved.
    pub fn migrate_slot(&self, slot: u16, from: usize, to: usize) -> Result<usize, HarnessError> {
        self.begin_migration(slot, from, to)?;
        let moved = self.migrate_keys(slot, from, to)?;
        self.finish_migration(slot, to)?;
        Ok(moved)
    }

    /// Whether node `i` currently calls itself a master (`INFO replication`).
    pub fn is_master(&self, i: usize) -> Result<bool, HarnessError> {
        self.check_index(i)?;
        let info = self.nodes[i].info_timeout("replication", QUERY_TIMEOUT)?;
        Ok(matches!(info_role(&info), Some("master")))
    }
}

fn bad_index(i: usize, len: usize) -> HarnessError {
    HarnessError::InvalidArgument(format!("no node {i}: the cluster has {len} nodes"))
}

fn check_slot(slot: u16) -> Result<(), HarnessError> {
    if slot < CLUSTER_SLOTS {
        Ok(())
    } else {
        Err(HarnessError::InvalidArgument(format!(
            "slot {slot} is out of range (0..={})",
            CLUSTER_SLOTS - 1
        )))
    }
}

fn slots_of(owners: &[Option<usize>], node: usize) -> Vec<u16> {
    (0..CLUSTER_SLOTS)
        .filter(|&s| owners[usize::from(s)] == Some(node))
        .collect()
}

fn expect_ok(node: &Server, args: &[&str]) -> Result<(), HarnessError> {
    match node.command_timeout(args, QUERY_TIMEOUT)? {
        reply if reply.is_ok() => Ok(()),
        reply => Err(HarnessError::Server(format!(
            "{} on port {}: {reply}",
            args.join(" "),
            node.port()
        ))),
    }
}

fn text_reply<'a>(reply: &'a RespValue, what: &str) -> Result<&'a str, HarnessError> {
    match reply {
        RespValue::Error(e) => Err(HarnessError::Server(format!("{what}: {e}"))),
        other => other
            .as_str()
            .ok_or_else(|| HarnessError::Protocol(format!("{what}: unexpected reply {other}"))),
    }
}

/// `CLUSTER SLOTS` as comparable data: ranges sorted by start, each with its master's
/// `ip:port` and the sorted `ip:port`s of its replicas (their order differs between nodes).
type SlotsSummary = Vec<(i64, i64, String, Vec<String>)>;

fn normalize_slots(reply: &RespValue) -> Result<SlotsSummary, HarnessError> {
    let bad = || HarnessError::Protocol(format!("CLUSTER SLOTS: unexpected reply {reply}"));
    if let RespValue::Error(e) = reply {
        return Err(HarnessError::Server(format!("CLUSTER SLOTS: {e}")));
    }
    let endpoint = |node: &RespValue| -> Option<String> {
        let parts = node.as_array()?;
        let ip = parts.first()?.as_str()?;
        let port = parts.get(1)?.as_integer()?;
        Some(format!("{ip}:{port}"))
    };
    let mut out = Vec::new();
    for range in reply.as_array().ok_or_else(bad)? {
        let parts = range.as_array().ok_or_else(bad)?;
        let start = parts
            .first()
            .and_then(RespValue::as_integer)
            .ok_or_else(bad)?;
        let end = parts
            .get(1)
            .and_then(RespValue::as_integer)
            .ok_or_else(bad)?;
        let master = parts.get(2).and_then(endpoint).ok_or_else(bad)?;
        let mut replicas = parts
            .get(3..)
            .unwrap_or_default()
            .iter()
            .map(|n| endpoint(n).ok_or_else(bad))
            .collect::<Result<Vec<_>, _>>()?;
        replicas.sort();
        out.push((start, end, master, replicas));
    }
    out.sort();
    Ok(out)
}

/// One node's `CLUSTER NODES`, parsed.
#[derive(Debug)]
struct View {
    /// The index of the node that answered.
    source: usize,
    text: String,
    lines: Vec<NodeLine>,
}

/// One line of `CLUSTER NODES`:
/// `<id> <ip:port@cport[,hostname]> <flags> <master> <ping-sent> <pong-recv> <config-epoch>
/// <link-state> <slot> <slot> ...`.
#[derive(Debug)]
struct NodeLine {
    id: String,
    flags: Vec<String>,
    master_id: Option<String>,
    /// Inclusive slot ranges (importing/migrating annotations `[...]` are skipped).
    slots: Vec<(u16, u16)>,
}

/// What a node is, as comparable data.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Role {
    Master,
    ReplicaOf(String),
    Other(String),
}

impl NodeLine {
    fn has_flag(&self, flag: &str) -> bool {
        self.flags.iter().any(|f| f == flag)
    }

    fn is_master(&self) -> bool {
        self.has_flag("master") || self.has_flag("primary")
    }

    fn is_replica(&self) -> bool {
        self.has_flag("slave") || self.has_flag("replica")
    }

    fn role(&self) -> Role {
        if self.is_master() {
            Role::Master
        } else if self.is_replica() {
            Role::ReplicaOf(self.master_id.clone().unwrap_or_default())
        } else {
            Role::Other(self.flags.join(","))
        }
    }
}

impl View {
    fn parse(source: usize, text: &str) -> Result<View, HarnessError> {
        let mut lines = Vec::new();
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() < 8 {
                return Err(HarnessError::Protocol(format!(
                    "CLUSTER NODES: short line {line:?}"
                )));
            }
            let mut slots = Vec::new();
            for token in &fields[8..] {
                if token.starts_with('[') {
                    continue;
                }
                let (a, b) = token.split_once('-').unwrap_or((token, token));
                match (a.parse::<u16>(), b.parse::<u16>()) {
                    (Ok(a), Ok(b)) if a <= b && b < CLUSTER_SLOTS => slots.push((a, b)),
                    _ => {
                        return Err(HarnessError::Protocol(format!(
                            "CLUSTER NODES: bad slot range {token:?} in {line:?}"
                        )));
                    }
                }
            }
            lines.push(NodeLine {
                id: fields[0].to_owned(),
                flags: fields[2].split(',').map(str::to_owned).collect(),
                master_id: Some(fields[3]).filter(|m| *m != "-").map(str::to_owned),
                slots,
            });
        }
        Ok(View {
            source,
            text: text.to_owned(),
            lines,
        })
    }

    fn myself(&self) -> Option<&NodeLine> {
        self.lines.iter().find(|l| l.has_flag("myself"))
    }

    fn line(&self, id: &str) -> Option<&NodeLine> {
        self.lines.iter().find(|l| l.id == id)
    }

    /// The owner (node index) of each slot; `None` for unassigned slots or unknown nodes.
    fn owners(&self, cluster: &Cluster) -> Vec<Option<usize>> {
        let mut owners = vec![None; usize::from(CLUSTER_SLOTS)];
        let index: BTreeMap<&str, usize> = cluster
            .ids
            .iter()
            .enumerate()
            .map(|(i, id)| (id.as_str(), i))
            .collect();
        for line in &self.lines {
            let Some(&i) = index.get(line.id.as_str()) else {
                continue;
            };
            for &(a, b) in &line.slots {
                for slot in a..=b {
                    owners[usize::from(slot)] = Some(i);
                }
            }
        }
        owners
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NODES: &str = "\
07c37dfeb235213a872192d90877d0cd55635b91 127.0.0.1:30004@31004,host slave e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 0 1426238317239 4 connected
e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 127.0.0.1:30001@31001 myself,master - 0 0 1 connected 0-5460 [5461->-292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f]
292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f 127.0.0.1:30002@31002 master - 0 1426238316232 2 connected 5461-10922 16383
6ec23923021cf3ffec47632106199cb7f496ce01 127.0.0.1:30005@31005 master,fail - 1426238316232 0 5 disconnected
";

    #[test]
    fn parses_cluster_nodes() {
        let view = View::parse(0, NODES).unwrap();
        assert_eq!(view.lines.len(), 4);
        let me = view.myself().unwrap();
        assert_eq!(me.id, "e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca");
        assert!(me.is_master());
        assert_eq!(me.slots, [(0, 5460)]);
        assert_eq!(view.lines[2].slots, [(5461, 10922), (16383, 16383)]);
        assert_eq!(
            view.lines[0].role(),
            Role::ReplicaOf("e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca".into())
        );
        assert!(view.lines[3].has_flag("fail"));
        assert!(View::parse(0, "abc def\n").is_err());
        assert!(View::parse(0, "a b master - 0 0 1 connected 5-3\n").is_err());
        assert!(View::parse(0, "a b master - 0 0 1 connected 16384\n").is_err());
    }

    #[test]
    fn options_builder() {
        let o = ClusterOptions::new()
            .masters(5)
            .replicas_per_master(2)
            .node_timeout(Duration::from_millis(1500))
            .server(ServerOptions::new().requirepass("pw"));
        assert_eq!(o.master_count(), 5);
        assert_eq!(o.replica_count(), 2);
        assert_eq!(o.node_timeout_value(), Duration::from_millis(1500));
        assert_eq!(o.server_options().password(), Some("pw"));
        assert_eq!(o.node_timeout_ms(), 1500);
        assert_eq!(
            ClusterOptions::new()
                .node_timeout(Duration::ZERO)
                .node_timeout_ms(),
            1
        );
    }

    #[test]
    fn normalizes_cluster_slots() {
        let node = |port: i64| {
            RespValue::Array(Some(vec![
                RespValue::Bulk(Some(b"127.0.0.1".to_vec())),
                RespValue::Integer(port),
            ]))
        };
        let range = |a, b, nodes: Vec<RespValue>| {
            let mut v = vec![RespValue::Integer(a), RespValue::Integer(b)];
            v.extend(nodes);
            RespValue::Array(Some(v))
        };
        let one = RespValue::Array(Some(vec![
            range(100, 200, vec![node(2), node(4), node(3)]),
            range(0, 99, vec![node(1)]),
        ]));
        let two = RespValue::Array(Some(vec![
            range(0, 99, vec![node(1)]),
            range(100, 200, vec![node(2), node(3), node(4)]),
        ]));
        assert_eq!(
            normalize_slots(&one).unwrap(),
            normalize_slots(&two).unwrap()
        );
        assert!(normalize_slots(&RespValue::Integer(1)).is_err());
        assert!(normalize_slots(&RespValue::Error("ERR".into())).is_err());
    }
}
