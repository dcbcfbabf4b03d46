//! WB: W1, W3 and W5 through the one lock API on Redis, etcd and PostgreSQL.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Context;
use leasehold_harness::ServerBinary;

use super::backend_floors::{self, PgFloor};
use super::stats::Summary;
use super::workloads::{self, Flavour, on_runtime};
use super::{Results, Settings, fresh, median_summary, say};

/// One W1 run of WB: leasehold through the lock API (URL, auto-extended?, recording history?),
/// or a backend's floor.
#[derive(Clone)]
enum W1Run {
    Locker(String, bool, bool),
    EtcdFloor(String),
    PostgresFloor(String, PgFloor),
}

/// W1B's block: how many cycles a system runs before the next system's turn.
pub(super) const W1B_BLOCK: u64 = 200;

/// WB: W1, W3 and W5 through [`leasehold::Locker`] on every backend, the systems taking turns
/// within each repetition (the order rotates). All servers run throughout.
pub(super) async fn wb(
    bin: &ServerBinary,
    st: &Settings,
    results: &mut Results,
) -> anyhow::Result<()> {
    say(format!(
        "WB backends: W1 {} cycles (in blocks of {W1B_BLOCK} taking turns), W3 {} workers {} s, \
         W5 {} leases {} s, x {} repetitions on Redis, etcd (1 and 3 members) and PostgreSQL",
        st.wb_cycles, st.w3_workers, st.wb_w3_secs, st.wb_leases, st.wb_w5_secs, st.reps
    ));
    let redis = fresh(bin)?;
    let (etcd, etcd3, pg) = tokio::task::spawn_blocking(|| {
        anyhow::Ok((
            leasehold_harness::Etcd::start().context("cannot start etcd")?,
            leasehold_harness::EtcdCluster::start(3).context("cannot start an etcd cluster")?,
            leasehold_harness::Postgres::start().context("cannot start PostgreSQL")?,
        ))
    })
    .await??;
    let etcd3_url = format!(
        "etcd://{}",
        etcd3
            .members()
            .iter()
            .map(|m| m.addr().to_string())
            .collect::<Vec<_>>()
            .join(",")
    );
    let systems = [
        ("redis", redis.url()),
        ("etcd", format!("etcd://{}", etcd.addr())),
        ("etcd_3_members", etcd3_url),
        ("postgres", pg.url()),
        ("postgres_lease_rows", format!("{}?lock=lease", pg.url())),
    ];
    // W1 only: each backend's floor (the raw client, the same requests with no lock logic),
    // etcd's locks on the session lease (auto-extended) beside its lease per lock, and each
    // backend recording the lock history (its events ride in the lock's own transaction or
    // statement).
    let history = |i: usize| W1Run::Locker(systems[i].1.clone(), false, true);
    let w1_only = [
        ("etcd_floor", W1Run::EtcdFloor(etcd.addr().to_string())),
        (
            "etcd_session",
            W1Run::Locker(systems[1].1.clone(), true, false),
        ),
        ("etcd_history", history(1)),
        ("postgres_history", history(3)),
        ("postgres_lease_rows_history", history(4)),
        (
            "postgres_floor",
            W1Run::PostgresFloor(pg.url(), PgFloor::Advisory),
        ),
        (
            "postgres_fenced_floor",
            W1Run::PostgresFloor(pg.url(), PgFloor::FencedAdvisory),
        ),
        (
            "postgres_fenced_floor_history",
            W1Run::PostgresFloor(pg.url(), PgFloor::FencedAdvisoryHistory),
        ),
        (
            "postgres_statements_floor",
            W1Run::PostgresFloor(pg.url(), PgFloor::SessionStatements),
        ),
        (
            "postgres_statements_floor_history",
            W1Run::PostgresFloor(pg.url(), PgFloor::SessionStatementsHistory),
        ),
        (
            "postgres_lease_rows_floor",
            W1Run::PostgresFloor(pg.url(), PgFloor::LeaseRows),
        ),
        (
            "postgres_lease_rows_floor_history",
            W1Run::PostgresFloor(pg.url(), PgFloor::LeaseRowsHistory),
        ),
    ];
    let w1_systems: Vec<(&str, W1Run)> = systems
        .iter()
        .map(|(name, url)| (*name, W1Run::Locker(url.clone(), false, false)))
        .chain(w1_only)
        .collect();
    let hold = Duration::from_secs_f64(st.w3_hold_ms / 1000.0);
    let mut runs: BTreeMap<(&str, String), Vec<Summary>> = BTreeMap::new();
    let mut cdfs: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for rep in 0..st.reps {
        let mut order = systems.to_vec();
        order.rotate_left(rep % systems.len());
        // W1B in blocks taking turns: each system's cycles of a repetition run as blocks of
        // `W1B_BLOCK`, every system's block in turn, so that a slow second of the machine lands
        // on every system alike. Run in one stretch a system, the same build measured 0.97-1.50
        // x its floor from run to run (`bench/results/issue32-target7-backend-floors.md`,
        // session 30). Each block is a run of its own (its connection, its warm-ups); the
        // reported figures are the medians over every block of every repetition.
        let blocks = (st.wb_cycles / W1B_BLOCK).max(1);
        for block in 0..blocks {
            let mut w1_order = w1_systems.clone();
            w1_order.rotate_left((rep * blocks as usize + block as usize) % w1_systems.len());
            for (name, run) in w1_order {
                let (c, p) = (st.wb_cycles / blocks, format!("wb1:{name}:{rep}:{block}"));
                let (s, cdf) = on_runtime(Flavour::MultiThread, move || async move {
                    match run {
                        W1Run::Locker(u, auto_extend, history) => {
                            workloads::w1_locker(u, c, p, auto_extend, history).await
                        }
                        W1Run::EtcdFloor(e) => backend_floors::w1_etcd(e, c, p).await,
                        W1Run::PostgresFloor(u, floor) => {
                            backend_floors::w1_postgres(u, c, p, floor).await
                        }
                    }
                })
                .with_context(|| format!("WB W1 {name}"))?;
                cdfs.insert(name.to_string(), cdf);
                runs.entry(("W1B", name.to_string())).or_default().push(s);
            }
        }
        for (name, url) in &order {
            let (u, w, d, k) = (
                url.clone(),
                st.w3_workers,
                Duration::from_secs_f64(st.wb_w3_secs),
                format!("wb3:{name}:{rep}"),
            );
            let (s, _) = on_runtime(Flavour::MultiThread, move || async move {
                let locker = leasehold::Locker::connect(&u).await?;
                workloads::w3_locker(locker, w, hold, d, k, false).await
            })
            .with_context(|| format!("WB W3 {name}"))?;
            runs.entry(("W3B", name.to_string())).or_default().push(s);
        }
        for (name, url) in &order {
            let (u, n, ttl, d, p) = (
                url.clone(),
                st.wb_leases,
                Duration::from_millis(st.wb_ttl_ms),
                Duration::from_secs_f64(st.wb_w5_secs),
                format!("wb5:{name}:{rep}"),
            );
            let s = on_runtime(Flavour::MultiThread, move || {
                workloads::w5_locker(u, n, ttl, d, p)
            })
            .with_context(|| format!("WB W5 {name}"))?;
            runs.entry(("W5B", name.to_string())).or_default().push(s);
        }
    }
    for ((workload, name), r) in &runs {
        results.put(workload, name, &median_summary(r));
    }
    results
        .cdfs
        .insert("W1B".into(), cdfs.into_iter().collect());
    tokio::task::spawn_blocking(move || {
        drop((etcd, etcd3, pg, redis));
    })
    .await?;
    Ok(())
}
