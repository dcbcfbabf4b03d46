//! The PostgreSQL subjects: session advisory locks (`postgres://`) and lease rows
//! (`postgres://...?lock=lease`), each on a server of its own.

use super::{Fencing, Form, Subject, conforms};

use leasehold::postgres::MAX_PG_KEY_LEN;
use leasehold_harness::{Postgres, postgres_for_test};
use tokio_postgres::NoTls;

/// Which kind of lock the subject takes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Session,
    LeaseRow,
}

pub(crate) struct Pg {
    pub(crate) kind: Kind,
    pg: Postgres,
    /// Looks at (and tampers with) the server from outside.
    pub(crate) admin: tokio_postgres::Client,
}

impl Pg {
    pub(crate) async fn new(kind: Kind, pg: Postgres) -> Pg {
        let (admin, conn) = tokio_postgres::connect(&pg.url(), NoTls)
            .await
            .expect("admin connects");
        tokio::spawn(conn);
        Pg { kind, pg, admin }
    }

    /// Advisory locks of `key` (`granted`: held, or waited for).
    async fn advisory(&self, key: &str, granted: bool) -> Vec<i32> {
        self.admin
            .query(
                "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted = $2
                   AND objsubid = 1
                   AND classid::bigint = ((hashtextextended($1, 0) >> 32) & 4294967295)
                   AND objid::bigint = (hashtextextended($1, 0) & 4294967295)",
                &[&key, &granted],
            )
            .await
            .expect("pg_locks")
            .iter()
            .map(|r| r.get(0))
            .collect()
    }
}

impl Subject for Pg {
    fn name(&self) -> String {
        match self.kind {
            Kind::Session => "postgres session locks".into(),
            Kind::LeaseRow => "postgres lease rows".into(),
        }
    }

    fn url(&self) -> String {
        match self.kind {
            Kind::Session => self.pg.url(),
            Kind::LeaseRow => format!("{}?lock=lease", self.pg.url()),
        }
    }

    fn form(&self) -> Form {
        Form {
            backend: match self.kind {
                Kind::Session => "postgres",
                Kind::LeaseRow => "postgres-lease",
            },
            fencing: Fencing::PerKeyCounter,
            release_elsewhere: self.kind == Kind::LeaseRow,
            max_key_len: MAX_PG_KEY_LEN,
            more_bad_keys: vec!["a\0b".into()],
            majority: false,
            permits_recorded: self.kind == Kind::LeaseRow,
            election_is_the_plain_lock: true,
            announces_leaders: self.kind == Kind::LeaseRow,
        }
    }

    /// The holding session terminated, or the lease row's token cleared.
    async fn take_away(&self, key: &str) {
        match self.kind {
            Kind::Session => {
                let holders = self.advisory(key, true).await;
                assert_eq!(holders.len(), 1, "{}: sessions holding {key}", self.name());
                let row = self
                    .admin
                    .query_one("SELECT pg_terminate_backend($1)", &[&holders[0]])
                    .await
                    .expect("pg_terminate_backend");
                assert!(row.get::<_, bool>(0), "{}: not terminated", self.name());
            }
            Kind::LeaseRow => {
                // The row's token cleared, not the row deleted: the row also holds the key's
                // fencing counter, which a deletion would reset (as deleting a Redis lock's
                // counter key would).
                let n = self
                    .admin
                    .execute(
                        "UPDATE leasehold_leases SET token = NULL WHERE key = $1 AND token IS NOT NULL",
                        &[&key],
                    )
                    .await
                    .expect("UPDATE");
                assert_eq!(n, 1, "{}: lease rows of {key}", self.name());
            }
        }
    }

    /// Sessions: nothing to mark (the waiter is in the server's lock queue of the key). Lease
    /// rows: the server's clock, in microseconds.
    async fn waiters_mark(&self, _key: &str) -> Vec<u64> {
        let row = self
            .admin
            .query_one(
                "SELECT (extract(epoch FROM clock_timestamp()) * 1e6)::bigint",
                &[],
            )
            .await
            .expect("clock_timestamp");
        vec![row.get::<_, i64>(0) as u64]
    }

    /// Sessions: a session waits for the key's advisory lock. Lease rows: a session that started
    /// after the mark made a waiter's attempt (the acquiring statement with the waiters' mark)
    /// and went idle: refused, since the key is held (it waits for the release's notification
    /// or its backoff).
    async fn waiter_refused_since(&self, key: &str, mark: &[u64]) -> bool {
        match self.kind {
            Kind::Session => !self.advisory(key, false).await.is_empty(),
            Kind::LeaseRow => {
                let row = self
                    .admin
                    .query_one(
                        "SELECT count(*) FROM pg_stat_activity
                          WHERE backend_start > to_timestamp($1::bigint / 1e6)
                            AND state = 'idle'
                            AND query LIKE 'WITH a AS (%wait_until%'",
                        &[&(mark[0] as i64)],
                    )
                    .await
                    .expect("pg_stat_activity");
                row.get::<_, i64>(0) > 0
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_locks() {
    let Some(pg) = postgres_for_test() else {
        return;
    };
    conforms(&Pg::new(Kind::Session, pg).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_rows() {
    let Some(pg) = postgres_for_test() else {
        return;
    };
    conforms(&Pg::new(Kind::LeaseRow, pg).await).await;
}
