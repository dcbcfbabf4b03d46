//! Real etcd servers from the system's (Debian's `etcd-server`) package: one [`Etcd`]
//! member, or an [`EtcdCluster`] of several.
//!
//! Every member gets its own temporary directory (the data dir `data/` and the log
//! `etcd.log`), a free loopback client port, a free loopback peer port and its own `etcd`
//! process, a child of the test process. The harness talks to etcd through its JSON gateway
//! to the gRPC API (etcd 3.4 serves it under `/v3/`; keys and values are base64 in JSON),
//! with a minimal HTTP/1.1 client on `std::net`, so it needs no gRPC or HTTP dependency.

mod cluster;
mod find;
mod gateway;
mod http;
mod member;
mod restart;
#[cfg(test)]
mod tests;

pub use cluster::{DEFAULT_ETCD_MEMBERS, EtcdCluster};
pub use find::{etcd_cluster_for_test, etcd_for_test, etcd_tls_for_test, find_etcd};
pub use gateway::EtcdStatus;
pub use member::Etcd;
