//! Tests of [`Postgres`]: a real PostgreSQL from the system's packages.
//!
//! Without PostgreSQL installed they skip (printing `skipping: ...`), unless
//! `LEASEHOLD_REQUIRE_MATRIX=1` (or `CI`) is set: then they fail.

use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use leasehold_harness::{POSTGRES_DATABASE, POSTGRES_USER, Postgres, postgres_for_test};

fn port_is_closed(port: u16) -> bool {
    TcpStream::connect_timeout(
        &SocketAddr::from(([127, 0, 0, 1], port)),
        Duration::from_secs(2),
    )
    .is_err()
}

fn proc_exists(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// `psql` next to the server binaries, or the one on `PATH`.
fn psql(pg: &Postgres) -> PathBuf {
    let beside = pg.bin_dir().join("psql");
    if beside.exists() {
        beside
    } else {
        PathBuf::from("psql")
    }
}

/// Runs one SQL statement with `psql` over TCP and returns its unaligned output.
fn psql_query(pg: &Postgres, sql: &str) -> String {
    let out = Command::new(psql(pg))
        .args(["-h", "127.0.0.1", "-p", &pg.port().to_string()])
        .args(["-U", POSTGRES_USER, "-d", POSTGRES_DATABASE])
        .args(["-w", "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-c", sql])
        .env("PGCONNECT_TIMEOUT", "10")
        .stdin(Stdio::null())
        .output()
        .expect("cannot run psql");
    assert!(
        out.status.success(),
        "psql -c {sql:?} failed ({}): {}\n--- server log ---\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
        pg.log_tail(30)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

#[test]
fn starts_answers_stops_and_cleans_up() {
    let Some(mut pg) = postgres_for_test() else {
        return;
    };
    let port = pg.port();
    let dir = pg.dir().to_path_buf();
    assert_eq!(
        pg.url(),
        format!("postgres://leasehold@127.0.0.1:{port}/postgres")
    );
    assert!(dir.join("data").join("PG_VERSION").exists());
    assert!(pg.is_running());

    assert_eq!(psql_query(&pg, "select 1"), "1");
    // The harness' settings are in effect.
    assert_eq!(psql_query(&pg, "show fsync"), "off");
    assert_eq!(psql_query(&pg, "show listen_addresses"), "127.0.0.1");
    assert_eq!(psql_query(&pg, "show server_encoding"), "UTF8");
    // The postmaster is our child, and not root (PostgreSQL refuses to run as root).
    let pid = pg.pid().expect("running");
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|l| l.split_whitespace().next())
            .unwrap()
            .to_owned()
    };
    assert_ne!(field("Uid:"), "0", "the postmaster runs as root");
    assert_eq!(
        field("PPid:"),
        std::process::id().to_string(),
        "not our child"
    );

    pg.stop();
    assert!(!pg.is_running());
    assert_eq!(pg.pid(), None);
    assert!(port_is_closed(port), "port {port} still open after stop");
    assert!(!proc_exists(pid), "postmaster {pid} still there after stop");
    pg.stop(); // idempotent
    assert!(
        dir.exists(),
        "the directory stays until drop (for the logs)"
    );
    assert!(
        pg.log_tail(50).contains("database system is ready"),
        "{}",
        pg.log_tail(50)
    );

    drop(pg);
    assert!(!dir.exists(), "{} still exists after drop", dir.display());
}

#[test]
fn drop_stops_a_running_server_and_removes_its_directory() {
    let Some(pg) = postgres_for_test() else {
        return;
    };
    let port = pg.port();
    let dir = pg.dir().to_path_buf();
    let pid = pg.pid().expect("running");
    assert_eq!(psql_query(&pg, "select 40 + 2"), "42");

    drop(pg);
    assert!(port_is_closed(port), "port {port} still open after drop");
    assert!(!proc_exists(pid), "postmaster {pid} still there after drop");
    assert!(!dir.exists(), "{} still exists after drop", dir.display());
}

#[test]
fn two_servers_run_side_by_side() {
    let Some(a) = postgres_for_test() else {
        return;
    };
    let Some(b) = postgres_for_test() else {
        return;
    };
    assert_ne!(a.port(), b.port());
    assert_ne!(a.dir(), b.dir());
    psql_query(&a, "create table t (x int); insert into t values (1)");
    assert_eq!(psql_query(&a, "select count(*) from t"), "1");
    // Separate clusters: b has no table t.
    assert_eq!(
        psql_query(&b, "select count(*) from pg_tables where tablename = 't'"),
        "0"
    );
}
