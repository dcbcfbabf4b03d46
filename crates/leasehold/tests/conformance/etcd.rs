//! The etcd subjects: one member, and a cluster of three (the locker names every member).

use super::{Fencing, Form, Subject, conforms};

use leasehold::MAX_KEY_LEN;
use leasehold_harness::{Etcd, EtcdCluster, etcd_cluster_for_test, etcd_for_test};

/// The members behind a subject (kept until the test ends).
pub(crate) enum Members {
    One(Etcd),
    Cluster(EtcdCluster),
}

pub(crate) struct EtcdSubject {
    name: String,
    url: String,
    /// Looks at (and tampers with) the entries from outside.
    pub(crate) raw: etcd_client::Client,
    _members: Members,
}

impl EtcdSubject {
    pub(crate) async fn new(members: Members) -> Self {
        let all: Vec<&Etcd> = match &members {
            Members::One(etcd) => vec![etcd],
            Members::Cluster(cluster) => cluster.members().iter().collect(),
        };
        let endpoints: Vec<String> = all.iter().map(|m| m.endpoint()).collect();
        let hosts: Vec<String> = all.iter().map(|m| m.addr().to_string()).collect();
        let raw = etcd_client::Client::connect(&endpoints, None)
            .await
            .expect("raw etcd client");
        let n = all.len();
        EtcdSubject {
            name: format!("etcd ({n} member{})", if n == 1 { "" } else { "s" }),
            url: format!("etcd://{}", hosts.join(",")),
            raw,
            _members: members,
        }
    }

    /// The queue of `key` is every etcd key under `key\0`: the holder's entry, then waiters'.
    fn prefix(key: &str) -> Vec<u8> {
        let mut prefix = key.as_bytes().to_vec();
        prefix.push(0);
        prefix
    }

    async fn entries(&self, key: &str) -> u64 {
        let options = etcd_client::GetOptions::new()
            .with_prefix()
            .with_count_only();
        let resp = self
            .raw
            .kv_client()
            .get(Self::prefix(key), Some(options))
            .await
            .expect("count the entries");
        resp.count() as u64
    }
}

impl Subject for EtcdSubject {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn url(&self) -> String {
        self.url.clone()
    }

    fn form(&self) -> Form {
        Form {
            backend: "etcd",
            fencing: Fencing::Revision,
            release_elsewhere: true,
            max_key_len: MAX_KEY_LEN,
            more_bad_keys: vec!["a\0b".into()],
            majority: false,
            permits_recorded: true,
            election_is_the_plain_lock: false,
            announces_leaders: true,
        }
    }

    async fn take_away(&self, key: &str) {
        let options = etcd_client::DeleteOptions::new().with_prefix();
        let resp = self
            .raw
            .kv_client()
            .delete(Self::prefix(key), Some(options))
            .await
            .expect("delete the entries");
        assert!(
            resp.deleted() >= 1,
            "{}: no entry of {key} to delete",
            self.name
        );
    }

    /// The leader's entry deleted: the first (lowest create revision) under the election's
    /// prefix; a waiting candidate's entry stays.
    async fn take_away_leader(&self, key: &str) {
        let prefix = format!("\0election\0{key}\0").into_bytes();
        let options = etcd_client::GetOptions::new()
            .with_prefix()
            .with_sort(
                etcd_client::SortTarget::Create,
                etcd_client::SortOrder::Ascend,
            )
            .with_limit(1)
            .with_keys_only();
        let resp = self
            .raw
            .kv_client()
            .get(prefix, Some(options))
            .await
            .expect("read the election's entries");
        let leader = resp
            .kvs()
            .first()
            .unwrap_or_else(|| panic!("{}: no entry of the election {key}", self.name))
            .key()
            .to_vec();
        let resp = self
            .raw
            .kv_client()
            .delete(leader, None)
            .await
            .expect("delete the leader's entry");
        assert_eq!(
            resp.deleted(),
            1,
            "{}: the leader's entry of {key}",
            self.name
        );
    }

    /// The entries queued under the key.
    async fn waiters_mark(&self, key: &str) -> Vec<u64> {
        vec![self.entries(key).await]
    }

    /// A waiter's entry, queued behind the holder's (an acquisition that finds the queue empty
    /// holds the lock).
    async fn waiter_refused_since(&self, key: &str, mark: &[u64]) -> bool {
        self.entries(key).await > mark[0]
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_member() {
    let Some(etcd) = etcd_for_test() else { return };
    conforms(&EtcdSubject::new(Members::One(etcd)).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_members() {
    let Some(cluster) = etcd_cluster_for_test(3) else {
        return;
    };
    conforms(&EtcdSubject::new(Members::Cluster(cluster)).await).await;
}
