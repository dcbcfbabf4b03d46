//! The Redis subjects, each on every server of the matrix (`::redis7`, `::redis8`, `::valkey9`):
//! one server, a Cluster (3 masters, 1 replica each), a Sentinel set (a primary, a replica, 3
//! sentinels) and Redlock over 3 independent servers.

use super::{Form, Subject, conforms, connect};
use crate::common;

use std::time::Duration;

use leasehold::Locker;
use leasehold::redlock::{Redlock, RedlockOptions};
use leasehold_harness::{
    Cluster, ClusterOptions, SentinelOptions, SentinelSet, Server, ServerBinary, ServerOptions,
};

/// The servers behind a subject.
enum Servers {
    One(Server),
    Cluster(Cluster),
    Sentinel(SentinelSet),
    Redlock(Vec<Server>),
}

pub(crate) struct Redis {
    name: String,
    url: String,
    backend: &'static str,
    servers: Servers,
}

impl Redis {
    pub(crate) fn one(bin: &ServerBinary) -> Redis {
        let server = Server::start(bin, &ServerOptions::new()).expect("server starts");
        Redis {
            name: format!("{} standalone", bin.label()),
            url: server.url(),
            backend: "redis",
            servers: Servers::One(server),
        }
    }

    pub(crate) fn cluster(bin: &ServerBinary) -> Redis {
        let cluster = Cluster::start(bin, &ClusterOptions::new()).expect("cluster starts");
        let hosts: Vec<String> = cluster.nodes()[..cluster.options().master_count()]
            .iter()
            .map(|n| n.addr().to_string())
            .collect();
        Redis {
            name: format!("{} cluster", bin.label()),
            url: format!("redis-cluster://{}", hosts.join(",")),
            backend: "redis",
            servers: Servers::Cluster(cluster),
        }
    }

    pub(crate) fn sentinel(bin: &ServerBinary) -> Redis {
        let set = SentinelSet::start(bin, &SentinelOptions::new()).expect("sentinel set starts");
        Redis {
            name: format!("{} sentinel", bin.label()),
            url: set.lock_url("redis-sentinel"),
            backend: "redis",
            servers: Servers::Sentinel(set),
        }
    }

    pub(crate) fn redlock(bin: &ServerBinary) -> Redis {
        let nodes: Vec<Server> = (0..3)
            .map(|_| Server::start(bin, &ServerOptions::new()).expect("server starts"))
            .collect();
        let hosts: Vec<String> = nodes.iter().map(|n| n.addr().to_string()).collect();
        Redis {
            name: format!("{} redlock (3 servers)", bin.label()),
            url: format!("redlock://{}", hosts.join(",")),
            backend: "redlock",
            servers: Servers::Redlock(nodes),
        }
    }

    /// The servers that take writes of `key`: the one server, the key's master, the primary,
    /// every Redlock node.
    pub(crate) fn masters_of(&self, key: &str) -> Vec<&Server> {
        match &self.servers {
            Servers::One(server) => vec![server],
            Servers::Cluster(cluster) => vec![cluster.master_for_key(key).expect("key's master")],
            Servers::Sentinel(set) => vec![set.primary().expect("primary")],
            Servers::Redlock(nodes) => nodes.iter().collect(),
        }
    }
}

impl Subject for Redis {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn url(&self) -> String {
        self.url.clone()
    }

    fn form(&self) -> Form {
        Form::counter(self.backend)
    }

    /// Redlock: the same nodes as the URL, with a per-node timeout of 2 s instead of the default 50 ms. A
    /// node slower than its timeout counts as failed, rightly, but on a loaded 2-core machine
    /// that measures the machine, not the lock (as in `redlock.rs`, whose
    /// `the_locker_takes_a_redlock_url` takes the URL with the defaults).
    async fn locker(&self) -> Locker {
        let Servers::Redlock(nodes) = &self.servers else {
            return connect(self).await;
        };
        let nodes: Vec<String> = nodes.iter().map(Server::url).collect();
        let nodes: Vec<&str> = nodes.iter().map(String::as_str).collect();
        let options = RedlockOptions::new().node_timeout(Duration::from_secs(2));
        let locker = Locker::from(Redlock::connect(&nodes, options).await.expect("connects"));
        assert_eq!(locker.backend(), "redlock");
        locker
    }

    async fn take_away(&self, key: &str) {
        let masters = self.masters_of(key);
        // Redlock decides on a majority: a straggler's SET may still be on its way to the last
        // node. Once every node has the key, it is deleted from every one.
        common::until("every node holds the key", || {
            masters.iter().all(|s| common::get(s, key).is_some())
        })
        .await;
        for server in masters {
            let reply = server.command(&["DEL", key]).expect("DEL");
            assert_eq!(
                reply.as_integer(),
                Some(1),
                "{}: DEL {key}: {reply:?}",
                self.name
            );
        }
    }

    /// Lock attempts (a `SET` or a script) each of the key's masters ran so far, from their own
    /// counters (`INFO commandstats`).
    async fn waiters_mark(&self, key: &str) -> Vec<u64> {
        self.masters_of(key)
            .into_iter()
            .map(|s| {
                ["set", "eval", "evalsha", "fcall"]
                    .map(|c| common::calls(s, c))
                    .iter()
                    .sum::<u64>()
            })
            .collect()
    }

    /// Nothing else writes while a check waits (no lease is renewed then), but a Redlock
    /// acquisition decided by a majority may still reach one other node (its SET, then its
    /// fencing raise): an attempt seen by a majority of the nodes is the waiter's, refused (the
    /// lock was held throughout).
    async fn waiter_refused_since(&self, key: &str, mark: &[u64]) -> bool {
        let now = self.waiters_mark(key).await;
        let risen = now.iter().zip(mark).filter(|(n, m)| n > m).count();
        risen > now.len() / 2
    }
}

leasehold_harness::server_test!(async fn standalone(bin) {
    conforms(&Redis::one(&bin)).await;
});

leasehold_harness::server_test!(async fn cluster(bin) {
    conforms(&Redis::cluster(&bin)).await;
});

leasehold_harness::server_test!(async fn sentinel(bin) {
    conforms(&Redis::sentinel(&bin)).await;
});

leasehold_harness::server_test!(async fn redlock(bin) {
    conforms(&Redis::redlock(&bin)).await;
});
