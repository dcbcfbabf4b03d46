//! Starting the nodes of a [`Cluster`] and joining them into one.

use std::thread;
use std::time::Instant;

use super::options::ClusterOptions;
use super::{CLUSTER_SLOTS, Cluster, QUERY_TIMEOUT, expect_ok};
use crate::server::Mode;
use crate::{HarnessError, Server, ServerBinary};

impl Cluster {
    /// Starts all nodes of `bin`, joins them into a cluster and waits until it is stable
    /// (see [`Cluster::wait_until_stable`]).
    ///
    /// The cluster is built with cluster commands only: `CLUSTER SET-CONFIG-EPOCH` on every
    /// node (node `i` gets `i + 1`: no two start with the same), `CLUSTER ADDSLOTSRANGE` on
    /// the masters (an even split of `0..=16383`), `CLUSTER MEET` of every node, `CLUSTER
    /// REPLICATE` on the replicas.
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

    /// Epochs on every node, slots on the masters, `CLUSTER MEET`, `CLUSTER REPLICATE`, then
    /// [`Cluster::wait_until_stable`].
    fn assemble(&self) -> Result<(), HarnessError> {
        let masters = self.options.masters;
        let slots = usize::from(CLUSTER_SLOTS);
        // Distinct config epochs up front, on every node, spare the cluster its epoch-collision
        // rounds. The replicas' count too: a node starts as an empty master of epoch 0, and
        // empty masters collide and bump one another, until `CLUSTER REPLICATE` makes them
        // replicas, which ends their collision handling. A replica could then keep an epoch
        // equal to its master's, and a `CLUSTER FAILOVER TAKEOVER` keeps a replica's own epoch
        // when it is the greatest the replica knows: its claim would tie with the old
        // master's, and no node gives a slot away on a tie (`Cluster::drive_takeover`).
        for (i, node) in self.nodes.iter().enumerate() {
            expect_ok(node, &["CLUSTER", "SET-CONFIG-EPOCH", &(i + 1).to_string()])?;
        }
        for m in 0..masters {
            let node = &self.nodes[m];
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
}
