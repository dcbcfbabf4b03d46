//! The Redis subjects, each on every server of the matrix (`::redis7`, `::redis8`, `::valkey9`):
//! one server, a Cluster (3 masters, 1 replica each), a Sentinel set (a primary, a replica, 3
//! sentinels) and Redlock over 3 independent servers.

use super::{Form, Subject, conforms};
use crate::common;

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

struct Redis {
    name: String,
    url: String,
    backend: &'static str,
    servers: Servers,
}

impl Redis {
    fn one(bin: &ServerBinary) -> Redis {
        let server = Server::start(bin, &ServerOptions::new()).expect("server starts");
        Redis {
            name: format!("{} standalone", bin.label()),
            url: server.url(),
            backend: "redis",
            servers: Servers::One(server),
        }
    }

    fn cluster(bin: &ServerBinary) -> Redis {
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

    fn sentinel(bin: &ServerBinary) -> Redis {
        let set = SentinelSet::start(bin, &SentinelOptions::new()).expect("sentinel set starts");
        Redis {
            name: format!("{} sentinel", bin.label()),
            url: set.lock_url("redis-sentinel"),
            backend: "redis",
            servers: Servers::Sentinel(set),
        }
    }

    fn redlock(bin: &ServerBinary) -> Redis {
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
    fn masters_of(&self, key: &str) -> Vec<&Server> {
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

    async fn take_away(&self, key: &str) {
        for server in self.masters_of(key) {
            let reply = server.command(&["DEL", key]).expect("DEL");
            assert_eq!(
                reply.as_integer(),
                Some(1),
                "{}: DEL {key}: {reply:?}",
                self.name
            );
        }
    }

    /// Lock attempts (a `SET` or a script) the key's masters ran so far, from their own
    /// counters (`INFO commandstats`). Nothing else runs these while a check waits: no lease is
    /// renewed then.
    async fn waiters_mark(&self, key: &str) -> u64 {
        self.masters_of(key)
            .into_iter()
            .map(|s| {
                ["set", "eval", "evalsha", "fcall"]
                    .map(|c| common::calls(s, c))
                    .iter()
                    .sum::<u64>()
            })
            .sum()
    }

    async fn waiter_refused_since(&self, key: &str, mark: u64) -> bool {
        // The holder is not auto-extended and nobody else writes: an attempt after the mark is
        // the waiter's, refused (the lock was held throughout).
        self.waiters_mark(key).await > mark
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
