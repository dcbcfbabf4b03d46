//! W1's floors on Redis: the same round trips as leasehold's, through the `redis` crate with no
//! lock logic (`floor`), and with the lock history's commands beside them (`floor_history`).
//! W2's floors share their acquisition ([`floor_set`]).

use super::stats::Summary;
use super::workloads::measure_cycles;

/// The floors' acquisition: `SET key value NX PX 10000`, which must find `key` free (the
/// workloads use distinct keys).
pub(crate) async fn floor_set(
    conn: &mut redis::aio::ConnectionManager,
    key: &str,
    value: &str,
) -> anyhow::Result<()> {
    let ok: Option<String> = redis::cmd("SET")
        .arg(key)
        .arg(value)
        .arg("NX")
        .arg("PX")
        .arg(10_000)
        .query_async(conn)
        .await?;
    anyhow::ensure!(ok.is_some(), "distinct key busy");
    Ok(())
}

/// W1 floor: the same two round trips with no lock logic (`SET NX PX`, `DEL`).
pub(crate) async fn w1_floor(
    url: String,
    cycles: u64,
    prefix: String,
) -> anyhow::Result<(Summary, Vec<(f64, f64)>)> {
    let conn = redis::Client::open(url)?.get_connection_manager().await?;
    let (summary, cdf) = measure_cycles(cycles, 200, &prefix, |key| {
        let mut conn = conn.clone();
        async move {
            floor_set(&mut conn, &key, "v").await?;
            let _: i64 = redis::cmd("DEL").arg(&key).query_async(&mut conn).await?;
            anyhow::Ok(())
        }
    })
    .await?;
    Ok((summary.with("commands", "SET NX PX + DEL"), cdf))
}

/// W1 history floor: what a recorded cycle makes the server do at the least, with no lock
/// logic and no script: `SET NX PX` with the `acquired` event's `XADD` (capped as leasehold caps
/// it) and the stream's `PEXPIRE` pipelined, then `DEL` with the `released` event's `XADD`
/// pipelined, on the stream leasehold would append to ([`leasehold::redis::history_key`]).
/// Not atomic, so not a lock that records its history safely: the server's own cost of an
/// event on a stream per key, beside [`w1_floor`] (what the machine itself allows for target 3).
pub(crate) async fn w1_floor_history(
    url: String,
    cycles: u64,
    prefix: String,
) -> anyhow::Result<(Summary, Vec<(f64, f64)>)> {
    let options = leasehold::HistoryOptions::default();
    let cap = options.events_per_key();
    let retention = options.retention_period().as_millis() as u64;
    let conn = redis::Client::open(url)?.get_connection_manager().await?;
    let (summary, cdf) = measure_cycles(cycles, 200, &prefix, |key| {
        let mut conn = conn.clone();
        async move {
            let stream = leasehold::redis::history_key(&key);
            let event = |kind: &str| {
                let mut xadd = redis::cmd("XADD");
                xadd.arg(&stream).arg("MAXLEN").arg("=").arg(cap).arg("*");
                xadd.arg("kind")
                    .arg(kind)
                    .arg("holder")
                    .arg("0123456789ab…");
                xadd
            };
            let mut acquire = redis::pipe();
            acquire
                .cmd("SET")
                .arg(&key)
                .arg("v")
                .arg("NX")
                .arg("PX")
                .arg(10_000);
            acquire.add_command(event("acquired")).ignore();
            acquire.cmd("PEXPIRE").arg(&stream).arg(retention).ignore();
            let (ok,): (Option<String>,) = acquire.query_async(&mut conn).await?;
            anyhow::ensure!(ok.is_some(), "distinct key busy");
            let mut release = redis::pipe();
            release.cmd("DEL").arg(&key);
            release.add_command(event("released")).ignore();
            let (_deleted,): (i64,) = release.query_async(&mut conn).await?;
            anyhow::Ok(())
        }
    })
    .await?;
    Ok((
        summary.with(
            "commands",
            "SET NX PX + XADD + PEXPIRE, DEL + XADD (pipelined)",
        ),
        cdf,
    ))
}
