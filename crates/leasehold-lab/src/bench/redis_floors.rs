//! W1's floors on Redis: the same round trips as leasehold's, through the `redis` crate with no
//! lock logic (`floor`), and with the lock history's commands beside them (`floor_history`).
//! W2's floors share their acquisition ([`floor_set`]). W3's cross-client handoff has its own
//! ([`w3_floor_handoff`]).

use std::time::{Duration, Instant};

use super::stats::Summary;
use super::workloads::{Turns, measure_cycles};

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

/// W3's cross-client handoff floor (issue 32, target 1): the least a handoff from one client
/// to another costs here, with no lock at all. `workers` each have a connection and a
/// subscriber connection of their own (as leasehold's clients do), and pass a turn round in a
/// fixed order: the holder spins for `hold`, then `PUBLISH`es to the next worker's channel and
/// waits for that command's reply (as a fair release does), and the next worker holds once the
/// message reaches it. One message from one client to another per handoff, and nothing else:
/// no queue, no token, no script. Reported as W3's figures ([`Turns`]), so its
/// handoff p50 stands beside `leasehold_fair_client_each`'s.
pub(crate) async fn w3_floor_handoff(
    url: String,
    workers: usize,
    hold: Duration,
    duration: Duration,
    prefix: String,
) -> anyhow::Result<(Summary, Vec<(f64, f64)>)> {
    use futures_util::StreamExt;
    let channel = |w: usize| format!("{prefix}:turn:{}", w % workers);
    let mut ends = Vec::new();
    for w in 0..workers {
        let client = redis::Client::open(url.as_str())?;
        let conn = client.get_multiplexed_async_connection().await?;
        let mut subscriber = client.get_async_pubsub().await?;
        subscriber.subscribe(channel(w)).await?;
        ends.push((conn, subscriber));
    }
    let turns = Turns::default();
    let deadline = Instant::now() + duration;
    let mut handles = Vec::new();
    for (w, (mut conn, subscriber)) in ends.into_iter().enumerate() {
        let (turns, next) = (turns.clone(), channel(w + 1));
        handles.push(tokio::spawn(async move {
            let mut messages = subscriber.into_on_message();
            let mut asked = Instant::now();
            while messages.next().await.is_some() {
                let acquired = Instant::now();
                // Past the deadline a turn is passed on unheld, so every worker sees one and ends.
                let over = acquired >= deadline;
                let released = if over {
                    acquired
                } else {
                    turns.hold(asked, acquired, hold)
                };
                let _: i64 = redis::cmd("PUBLISH")
                    .arg(&next)
                    .arg("turn")
                    .query_async(&mut conn)
                    .await?;
                if over {
                    break;
                }
                turns.done(w, acquired, released);
                asked = Instant::now();
            }
            anyhow::Ok(())
        }));
    }
    let start = Instant::now();
    let mut first = redis::Client::open(url.as_str())?
        .get_multiplexed_async_connection()
        .await?;
    let _: i64 = redis::cmd("PUBLISH")
        .arg(channel(0))
        .arg("turn")
        .query_async(&mut first)
        .await?;
    for h in handles {
        h.await??;
    }
    let (summary, cdf) = turns.summary(workers, start.elapsed());
    Ok((
        summary.with(
            "commands",
            "PUBLISH to the next worker's channel, read by its own subscriber connection",
        ),
        cdf,
    ))
}
