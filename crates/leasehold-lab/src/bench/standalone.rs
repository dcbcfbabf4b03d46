//! W1 to W8: leasehold, the in-process floor and the peers, each workload on fresh standalone
//! servers.

use std::collections::BTreeMap;
use std::time::Duration;

use leasehold_harness::{Server, ServerBinary};
use serde_json::{Value, json};

use super::peers::{Peer, PeerRun};
use super::redis_floors::{FloorPass, HistoryFloor};
use super::stats::Summary;
use super::workloads::{self, Flavour, W2System, on_runtime};
use super::{Results, Settings, fresh, median_summary, redis_benchmark, redis_floors, say, scale};

/// `[[us, fraction], ...]` from an adapter's JSON.
fn cdf_points(value: &Value) -> Option<Vec<(f64, f64)>> {
    value
        .as_array()?
        .iter()
        .map(|p| Some((p.get(0)?.as_f64()?.max(1.0), p.get(1)?.as_f64()?)))
        .collect()
}

async fn peer_runs(
    peers: &[Peer],
    run: &PeerRun<'_>,
    results: &mut Results,
    out: &mut BTreeMap<String, Vec<Summary>>,
    suffix: &str,
) {
    for peer in peers {
        match peer.run(run).await {
            Ok(Some(mut s)) => {
                let name = format!("{}{suffix}", peer.system);
                // The adapter's latency CDF goes to the plots, not into the table.
                if let Some(points) = s.extra.remove("cdf").and_then(|c| cdf_points(&c)) {
                    let curves = results.cdfs.entry(run.workload.to_string()).or_default();
                    curves.retain(|(n, _)| *n != name);
                    curves.push((name.clone(), points));
                }
                out.entry(name).or_default().push(s)
            }
            Ok(None) => {}
            Err(e) => results
                .notes
                .push(format!("{} {}: {e:#}", peer.system, run.workload)),
        }
    }
}

pub(super) async fn w1(
    bin: &ServerBinary,
    st: &Settings,
    peers: &[Peer],
    results: &mut Results,
) -> anyhow::Result<()> {
    say(format!(
        "W1 uncontended: {} cycles x {} repetitions",
        st.w1_cycles, st.reps
    ));
    let server = fresh(bin)?;
    let url = server.url();
    let mut runs: BTreeMap<String, Vec<Summary>> = BTreeMap::new();
    let mut cdf_src: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for rep in 0..st.reps {
        // In-process systems, in a rotating order.
        // (system, runtime, floor?, release notifications?, history recorded?)
        let mut order = vec![
            ("leasehold", Flavour::MultiThread, false, true, false),
            ("floor", Flavour::MultiThread, true, false, false),
            (
                "leasehold_current_thread",
                Flavour::CurrentThread,
                false,
                true,
                false,
            ),
            (
                "floor_current_thread",
                Flavour::CurrentThread,
                true,
                false,
                false,
            ),
            (
                "leasehold_no_notify",
                Flavour::MultiThread,
                false,
                false,
                false,
            ),
            ("leasehold_history", Flavour::MultiThread, false, true, true),
            ("floor_history", Flavour::MultiThread, true, false, true),
            (
                "floor_history_scripted",
                Flavour::MultiThread,
                true,
                false,
                true,
            ),
        ];
        let turns = rep % order.len();
        order.rotate_left(turns);
        for (name, flavour, floor, notify, history) in order {
            let (u, c, p) = (url.clone(), st.w1_cycles, format!("w1:{name}:{rep}"));
            let (summary, cdf) = on_runtime(flavour, move || async move {
                if floor && history {
                    let how = match name {
                        "floor_history_scripted" => HistoryFloor::Scripted,
                        _ => HistoryFloor::Pipelined,
                    };
                    redis_floors::w1_floor_history(u, c, p, how).await
                } else if floor {
                    redis_floors::w1_floor(u, c, p).await
                } else {
                    workloads::w1_leasehold(u, c, p, notify, history).await
                }
            })?;
            cdf_src.insert(name.to_string(), cdf);
            runs.entry(name.to_string())
                .or_default()
                .push(summary.with("runtime", flavour.name()));
        }
        let run = PeerRun {
            urls: std::slice::from_ref(&url),
            workload: "W1",
            tuned: false,
            prefix: &format!("w1:peer:{rep}"),
            cycles: Some(st.w1_cycles),
            duration: None,
        };
        peer_runs(peers, &run, results, &mut runs, "").await;
    }
    for (name, r) in &runs {
        results.put("W1", name, &median_summary(r));
    }
    match redis_benchmark::pair(bin, &server, 1, st.w1_cycles).await {
        Ok(s) => results.put("W1", "redis-benchmark", &s),
        Err(e) => results.notes.push(format!("redis-benchmark W1: {e:#}")),
    }
    results.cdfs.entry("W1".into()).or_default().extend(cdf_src);
    Ok(())
}

pub(super) async fn w2(
    bin: &ServerBinary,
    st: &Settings,
    peers: &[Peer],
    results: &mut Results,
) -> anyhow::Result<()> {
    say(format!(
        "W2 throughput: {} tasks for {} s x {} repetitions",
        st.w2_tasks, st.w2_secs, st.reps
    ));
    let server = fresh(bin)?;
    let url = server.url();
    let d = Duration::from_secs_f64(st.w2_secs);
    let mut runs: BTreeMap<String, Vec<Summary>> = BTreeMap::new();
    // Medians of interleaved repetitions, as for W1: one 10 s run per system let a single
    // disturbed run (another process waking up on a 2-core machine) decide a ratio.
    for rep in 0..st.reps {
        let mut order = vec![
            ("leasehold", W2System::Leasehold { notify: true }),
            ("floor", W2System::Floor),
            ("leasehold_no_notify", W2System::Leasehold { notify: false }),
            (
                "floor_token_checked",
                W2System::TokenChecked { notify: true },
            ),
            (
                "floor_token_checked_no_notify",
                W2System::TokenChecked { notify: false },
            ),
        ];
        let turns = rep % order.len();
        order.rotate_left(turns);
        for (name, system) in order {
            let (u, t, p) = (url.clone(), st.w2_tasks, format!("w2:{name}:{rep}"));
            let s = on_runtime(Flavour::MultiThread, move || {
                workloads::w2(u, t, d, p, system)
            })?;
            runs.entry(name.to_string()).or_default().push(s);
        }
        let run = PeerRun {
            urls: std::slice::from_ref(&url),
            workload: "W2",
            tuned: false,
            prefix: &format!("w2:peer:{rep}"),
            cycles: None,
            duration: Some(d),
        };
        peer_runs(peers, &run, results, &mut runs, "").await;
    }
    for (name, r) in &runs {
        results.put("W2", name, &median_summary(r));
    }
    match redis_benchmark::pair(bin, &server, st.w2_tasks, 100_000).await {
        Ok(s) => results.put("W2", "redis-benchmark", &s),
        Err(e) => results.notes.push(format!("redis-benchmark W2: {e:#}")),
    }
    Ok(())
}

pub(super) async fn w3(
    bin: &ServerBinary,
    st: &Settings,
    peers: &[Peer],
    results: &mut Results,
) -> anyhow::Result<()> {
    say(format!(
        "W3 contention: {} workers on one key, {} ms holds, {} s; leasehold and the floor x {} repetitions",
        st.w3_workers, st.w3_hold_ms, st.w3_secs, st.reps
    ));
    let server = fresh(bin)?;
    let url = server.url();
    let d = Duration::from_secs_f64(st.w3_secs);
    let hold = Duration::from_secs_f64(st.w3_hold_ms / 1000.0);
    let mut runs: BTreeMap<String, Vec<Summary>> = BTreeMap::new();
    let mut cdf_src: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    // In-process systems in `reps` interleaved repetitions, in a rotating order (a run's
    // handoff p50 moves by tens of microseconds from one run to the next on 2 cores; the
    // medians are reported). With a client per worker, every handoff goes from one client to
    // another (as between processes): the plain lock's waiters are then woken by the server
    // (tracking), the fair lock's by its handoff message. `floor_client_each`: the same
    // cross-client handoff with no lock at all; `floor_scripted_client_each`: made by the
    // server's script that hands the key over, as a fair release does, with no library.
    for rep in 0..st.reps {
        // (system, Ok((fair?, a client each?)) or Err(a floor's pass))
        let mut order = vec![
            ("leasehold", Ok((false, false))),
            ("leasehold_client_each", Ok((false, true))),
            ("leasehold_fair", Ok((true, false))),
            ("leasehold_fair_client_each", Ok((true, true))),
            ("floor_client_each", Err(FloorPass::Publish)),
            ("floor_scripted_client_each", Err(FloorPass::Script)),
        ];
        let turns = rep % order.len();
        order.rotate_left(turns);
        for (name, mode) in order {
            let (u, w, key) = (url.clone(), st.w3_workers, format!("w3:{name}:{rep}"));
            let (s, cdf) = on_runtime(Flavour::MultiThread, move || async move {
                match mode {
                    Ok((fair, client_each)) => {
                        workloads::w3_leasehold(u, w, hold, d, key, fair, client_each).await
                    }
                    Err(pass) => redis_floors::w3_floor_handoff(u, w, hold, d, key, pass).await,
                }
            })?;
            runs.entry(name.into()).or_default().push(s);
            cdf_src.insert(format!("{name} (handoff)"), cdf);
        }
        // The peers in every repetition too, as in W1 and W2: their ratios to leasehold's
        // (the Python and Node packages' to the Rust library's, the best peer's) are then
        // medians measured beside it, not one run minutes after it.
        for tuned in [false, true] {
            let prefix = format!("w3:{}:{rep}", if tuned { "tuned" } else { "default" });
            let run = PeerRun {
                urls: std::slice::from_ref(&url),
                workload: "W3",
                tuned,
                prefix: &prefix,
                cycles: None,
                duration: Some(d),
            };
            peer_runs(
                peers,
                &run,
                results,
                &mut runs,
                if tuned { "_tuned" } else { "" },
            )
            .await;
        }
    }
    results.cdfs.entry("W3".into()).or_default().extend(cdf_src);
    for (name, r) in &runs {
        results.put("W3", name, &median_summary(r));
    }
    Ok(())
}

/// W4: Redlock over each N of `w4_nodes`, on the first N of one set of fresh servers, in
/// `reps` interleaved repetitions (the order of N rotating each time) whose medians are
/// reported: N = 1 and N = 5 are then measured side by side, not minutes apart, so the ratio
/// of their p50s does not carry the machine's drift between them.
pub(super) async fn w4(
    bin: &ServerBinary,
    st: &Settings,
    peers: &[Peer],
    results: &mut Results,
) -> anyhow::Result<()> {
    say(format!(
        "W4 Redlock: N = {:?}, {} cycles x {} repetitions",
        st.w4_nodes, st.w4_cycles, st.reps
    ));
    let most = st.w4_nodes.iter().copied().max().unwrap_or(0);
    let servers: Vec<Server> = (0..most)
        .map(|_| fresh(bin))
        .collect::<anyhow::Result<_>>()?;
    let all: Vec<String> = servers.iter().map(Server::url).collect();
    let mut runs: BTreeMap<usize, BTreeMap<String, Vec<Summary>>> = BTreeMap::new();
    for rep in 0..st.reps {
        let mut order = st.w4_nodes.clone();
        let turns = rep % order.len().max(1);
        order.rotate_left(turns);
        for n in order {
            let urls = all[..n].to_vec();
            let runs = runs.entry(n).or_default();
            let (u, c) = (urls.clone(), st.w4_cycles);
            let s = on_runtime(Flavour::MultiThread, move || {
                workloads::w4_leasehold(u, c, format!("w4:{n}:{rep}"))
            })?;
            runs.entry("leasehold".into()).or_default().push(s);
            let (u, c) = (urls.clone(), st.w4_cycles);
            let s = on_runtime(Flavour::MultiThread, move || {
                workloads::w4_floor(u, c, format!("w4:floor:{n}:{rep}"))
            })?;
            runs.entry("floor".into()).or_default().push(s);
            let run = PeerRun {
                urls: &urls,
                workload: "W4",
                tuned: false,
                prefix: &format!("w4:peer:{n}:{rep}"),
                cycles: Some(st.w4_cycles),
                duration: None,
            };
            peer_runs(peers, &run, results, runs, "").await;
        }
    }
    let mut per_system: BTreeMap<String, Value> = BTreeMap::new();
    for (n, runs) in runs {
        for (name, r) in runs {
            let s = median_summary(&r);
            let entry = per_system.entry(name).or_insert_with(|| json!({}));
            entry[format!("n{n}")] = serde_json::to_value(&s)?;
            if n == 3 {
                entry["ops_per_s"] = json!(s.ops_per_s);
                entry["p50_us"] = json!(s.p50_us);
                entry["p99_us"] = json!(s.p99_us);
            }
        }
    }
    results
        .workloads
        .insert("W4".into(), per_system.into_iter().collect());
    Ok(())
}

pub(super) async fn w5(
    bin: &ServerBinary,
    st: &Settings,
    results: &mut Results,
) -> anyhow::Result<()> {
    say(format!(
        "W5 held leases: {} auto-extended leases (TTL {} ms) for {} s",
        st.w5_leases, st.w5_ttl_ms, st.w5_secs
    ));
    let server = fresh(bin)?;
    let (u, n, ttl, d) = (
        server.url(),
        st.w5_leases,
        Duration::from_millis(st.w5_ttl_ms),
        Duration::from_secs_f64(st.w5_secs),
    );
    let s = on_runtime(Flavour::MultiThread, move || {
        workloads::w5_leasehold(u, n, ttl, d, "w5".into())
    })?;
    results.put("W5", "leasehold", &s);
    Ok(())
}

/// W6: waiters on one key, default and fair mode, a fresh server for each count.
pub(super) async fn w6(
    bin: &ServerBinary,
    st: &Settings,
    results: &mut Results,
) -> anyhow::Result<()> {
    say(format!(
        "W6 herd: {:?} waiters on one key, {} handoffs each, default and fair mode",
        st.w6_waiters, st.w6_handoffs
    ));
    for fair in [false, true] {
        for &n in &st.w6_waiters {
            let server = fresh(bin)?;
            let (u, k) = (server.url(), st.w6_handoffs);
            let s = on_runtime(Flavour::MultiThread, move || {
                workloads::w6_leasehold(u, n, k, fair)
            })?;
            let mode = if fair { "fair" } else { "default" };
            results.put("W6", &format!("leasehold_{mode}_{n}"), &s);
        }
    }
    Ok(())
}

/// W7: many auto-extended leases on one client, a fresh server for each count.
pub(super) async fn w7(
    bin: &ServerBinary,
    st: &Settings,
    results: &mut Results,
) -> anyhow::Result<()> {
    say(format!(
        "W7 many leases: {:?} auto-extended leases (TTL {} ms) on one client for {} s",
        st.w7_leases, st.w7_ttl_ms, st.w7_secs
    ));
    for &n in &st.w7_leases {
        let server = fresh(bin)?;
        let (u, ttl, d) = (
            server.url(),
            Duration::from_millis(st.w7_ttl_ms),
            Duration::from_secs_f64(st.w7_secs),
        );
        let s = on_runtime(Flavour::MultiThread, move || {
            scale::w7_leasehold(u, n, ttl, d)
        })?;
        results.put("W7", &format!("leasehold_{n}"), &s);
    }
    Ok(())
}

/// W8: many client processes on many keys, a fresh server for each count.
pub(super) async fn w8(
    bin: &ServerBinary,
    st: &Settings,
    results: &mut Results,
) -> anyhow::Result<()> {
    say(format!(
        "W8 many clients: {:?} client processes on {} keys for {} s (hold {} us)",
        st.w8_processes, st.w8_keys, st.w8_secs, st.w8_hold_us
    ));
    for &n in &st.w8_processes {
        let server = fresh(bin)?;
        let run = scale::w8(&server.url(), n, st.w8_keys, st.w8_secs, st.w8_hold_us).await?;
        let name = format!("leasehold_{n}_processes");
        if let Some(e) = &run.first_error {
            results
                .notes
                .push(format!("W8 {n} processes, first error: {e}"));
        }
        let s = Summary {
            ops_per_s: run.acquisitions as f64 / st.w8_secs,
            p50_us: Some(run.waits.quantile(0.5)),
            p99_us: Some(run.waits.quantile(0.99)),
            ..Default::default()
        }
        .with("processes", n as u64)
        .with("keys", st.w8_keys)
        .with("acquisitions", run.acquisitions)
        .with("p999_us", run.waits.quantile(0.999))
        .with("max_wait_us", run.waits.quantile(1.0))
        .with("errors", run.errors + run.failed_processes as u64)
        .with("timed_out", run.timed_out)
        .with("hold_us", st.w8_hold_us);
        debug_assert_eq!(run.waits.len(), run.acquisitions);
        results.put("W8", &name, &s);
        results
            .cdfs
            .entry("W8".into())
            .or_default()
            .push((name, run.waits.cdf()));
    }
    Ok(())
}
