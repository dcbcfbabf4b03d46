//! Every integration test of this crate in one binary: one link instead of one per file, and
//! one pool of test threads, so that a file's slowest tests overlap the next file's instead
//! of running after them (each file was its own binary, run one after another).

mod acl;
mod bad_input;
mod calling_thread;
mod cluster;
mod common;
mod conformance;
mod election;
mod etcd_backend;
mod etcd_primitives;
mod failover;
mod fair;
mod fencing;
mod history;
mod lock;
mod lock_table;
mod min_hold;
mod multi;
mod postgres_backend;
mod postgres_primitives;
mod redlock;
mod renewal;
mod roundtrips;
mod rwlock;
mod semaphore;
mod sentinel;
mod short_ttl;
mod tls;
mod tls_backends;
mod tracing_spans;
mod waiting;
