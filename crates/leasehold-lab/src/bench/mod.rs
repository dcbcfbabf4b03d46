//! `leasehold-lab bench`: leasehold against its peers and against the server's own limit, side by
//! side in one run, so that ratios hold on a noisy machine.
//!
//! Every workload gets a fresh server from the harness; systems take turns within each
//! repetition (the order rotates), and medians of the repetitions are reported. Results go to
//! `<out>/latest.json`, `<out>/latest.md` (`--name` changes the stem) and SVG plots beside them.
//!
//! WB runs W1, W3 and W5 through the one lock API (`leasehold::Locker`) on each backend: Redis,
//! etcd (one member, and a 3-member cluster) and PostgreSQL, taking turns in every repetition.
//!
//! W1T runs W1 on the other topologies the library speaks to: a Redis Cluster (3 masters with a
//! replica each) and a Sentinel-monitored primary (a replica, 3 sentinels), each reached through
//! its URL form, taking turns with a standalone server in every repetition.

mod peers;
mod plot;
mod redis_benchmark;
mod scale;
mod stats;
mod workloads;

pub(crate) use scale::worker;

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Context;
use leasehold_harness::{
    Cluster, ClusterOptions, Flavor, SentinelOptions, SentinelSet, Server, ServerBinary,
    ServerOptions,
};
use serde_json::{Value, json};

use crate::cli::BenchArgs;
use peers::{Peer, PeerRun};
use stats::{Summary, median};
use workloads::{Flavour, on_runtime};

/// Workload sizes: the full settings, or `--quick` ones.
#[derive(Debug, Clone, serde::Serialize)]
struct Settings {
    reps: usize,
    w1_cycles: u64,
    w2_tasks: usize,
    w2_secs: f64,
    w3_workers: usize,
    w3_hold_ms: f64,
    w3_secs: f64,
    w4_cycles: u64,
    w4_nodes: Vec<usize>,
    w5_leases: usize,
    w5_ttl_ms: u64,
    w5_secs: f64,
    wb_cycles: u64,
    wb_w3_secs: f64,
    wb_leases: usize,
    wb_ttl_ms: u64,
    wb_w5_secs: f64,
    w6_waiters: Vec<usize>,
    w6_handoffs: u64,
    w7_leases: Vec<usize>,
    w7_ttl_ms: u64,
    w7_secs: f64,
    w8_processes: Vec<usize>,
    w8_keys: u64,
    w8_secs: f64,
    w8_hold_us: u64,
}

impl Settings {
    fn new(quick: bool, reps: Option<usize>) -> Self {
        if quick {
            Settings {
                reps: reps.unwrap_or(1),
                w1_cycles: 2_000,
                w2_tasks: 64,
                w2_secs: 2.0,
                w3_workers: 16,
                w3_hold_ms: 1.0,
                w3_secs: 2.0,
                w4_cycles: 300,
                w4_nodes: vec![1, 3, 5],
                w5_leases: 2_000,
                w5_ttl_ms: 2_000,
                w5_secs: 7.0,
                wb_cycles: 200,
                wb_w3_secs: 2.0,
                wb_leases: 20,
                wb_ttl_ms: 3_000,
                wb_w5_secs: 4.0,
                w6_waiters: vec![100, 1_000],
                w6_handoffs: 20,
                w7_leases: vec![10_000],
                w7_ttl_ms: 10_000,
                w7_secs: 8.0,
                w8_processes: vec![20],
                w8_keys: 1_000,
                w8_secs: 5.0,
                w8_hold_us: 1_000,
            }
        } else {
            Settings {
                reps: reps.unwrap_or(3),
                w1_cycles: 20_000,
                w2_tasks: 64,
                w2_secs: 10.0,
                w3_workers: 16,
                w3_hold_ms: 1.0,
                w3_secs: 10.0,
                w4_cycles: 2_000,
                w4_nodes: vec![1, 3, 5, 7],
                w5_leases: 10_000,
                w5_ttl_ms: 2_000,
                w5_secs: 60.0,
                wb_cycles: 2_000,
                wb_w3_secs: 5.0,
                wb_leases: 50,
                wb_ttl_ms: 3_000,
                wb_w5_secs: 15.0,
                w6_waiters: vec![100, 1_000, 5_000],
                w6_handoffs: 30,
                w7_leases: vec![10_000, 100_000],
                w7_ttl_ms: 10_000,
                w7_secs: 30.0,
                w8_processes: vec![50, 200],
                w8_keys: 1_000,
                w8_secs: 30.0,
                w8_hold_us: 1_000,
            }
        }
    }
}

/// Named CDF curves for one plot: (system, [(latency us, fraction)]).
type Curves = Vec<(String, Vec<(f64, f64)>)>;

/// Results: workload -> system -> summary, plus the CDFs kept for the plots.
#[derive(Default)]
struct Results {
    workloads: BTreeMap<String, BTreeMap<String, Value>>,
    cdfs: BTreeMap<String, Curves>,
    notes: Vec<String>,
}

impl Results {
    fn put(&mut self, workload: &str, system: &str, summary: &Summary) {
        let value = serde_json::to_value(summary).unwrap_or(Value::Null);
        self.workloads
            .entry(workload.to_string())
            .or_default()
            .insert(system.to_string(), value);
    }

    fn get(&self, workload: &str, system: &str, field: &str) -> Option<f64> {
        self.workloads
            .get(workload)?
            .get(system)?
            .get(field)?
            .as_f64()
    }
}

/// The median summary of several repetitions: each number is the median of its own values.
fn median_summary(runs: &[Summary]) -> Summary {
    let mut out = runs.last().cloned().unwrap_or_default();
    out.ops_per_s = median(&mut runs.iter().map(|s| s.ops_per_s).collect::<Vec<_>>());
    let med_u = |f: fn(&Summary) -> Option<u64>| {
        let mut v: Vec<f64> = runs.iter().filter_map(f).map(|x| x as f64).collect();
        (!v.is_empty()).then(|| median(&mut v) as u64)
    };
    out.p50_us = med_u(|s| s.p50_us);
    out.p99_us = med_u(|s| s.p99_us);
    out = out.with("repetitions", runs.len() as u64);
    out
}

pub(crate) fn pick_server(flavor: Option<Flavor>) -> anyhow::Result<ServerBinary> {
    let found = match flavor {
        Some(f) => leasehold_harness::find(f),
        None => leasehold_harness::find(Flavor::Redis8)
            .or_else(|| leasehold_harness::discover().into_iter().next()),
    };
    found.context("no redis/valkey server installed (run scripts/install-servers)")
}

fn say(msg: impl AsRef<str>) {
    eprintln!("[bench] {}", msg.as_ref());
}

pub(crate) async fn run(args: BenchArgs) -> anyhow::Result<()> {
    if args.name.is_empty() || args.name.contains(['/', '\\']) || args.name.starts_with('.') {
        return Err(crate::exit::Usage(format!(
            "--name {:?}: give a plain file name stem such as latest or topologies",
            args.name
        ))
        .into());
    }
    let settings = Settings::new(args.quick, args.reps);
    let bin = pick_server(args.server)?;
    let repo = std::env::current_dir()?;
    let (peers, missing) = if args.no_peers {
        (Vec::new(), vec![])
    } else {
        peers::discover(&repo)
    };
    let wanted = |w: &str| {
        args.workloads.is_empty() || args.workloads.iter().any(|x| x.eq_ignore_ascii_case(w))
    };
    say(format!(
        "server {}; peers: {}",
        bin.label(),
        peers
            .iter()
            .map(|p| p.system)
            .collect::<Vec<_>>()
            .join(", ")
    ));
    let mut results = Results::default();
    if !missing.is_empty() {
        results.notes.push(format!(
            "peers not installed (run bench/install-peers): {}",
            missing.join(", ")
        ));
    }
    let started = std::time::Instant::now();
    if wanted("W1") {
        w1(&bin, &settings, &peers, &mut results).await?;
    }
    if wanted("W1T") {
        w1t(&bin, &settings, &mut results).await?;
    }
    if wanted("W2") {
        w2(&bin, &settings, &peers, &mut results).await?;
    }
    if wanted("W3") {
        w3(&bin, &settings, &peers, &mut results).await?;
    }
    if wanted("W4") {
        w4(&bin, &settings, &peers, &mut results).await?;
    }
    if wanted("W5") {
        w5(&bin, &settings, &mut results).await?;
    }
    if wanted("W6") {
        w6(&bin, &settings, &mut results).await?;
    }
    if wanted("W7") {
        w7(&bin, &settings, &mut results).await?;
    }
    if wanted("W8") {
        w8(&bin, &settings, &mut results).await?;
    }
    // The other backends: only when asked for (`--workloads WB`), so a plain run's figures
    // and time stay what they were.
    if args.workloads.iter().any(|w| w.eq_ignore_ascii_case("WB")) {
        wb(&bin, &settings, &mut results).await?;
    }
    let meta = json!({
        "server": bin.label(),
        "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        "quick": args.quick,
        "workloads": args.workloads,
        "settings": settings,
        "elapsed_s": started.elapsed().as_secs_f64(),
        "leasehold_version": env!("CARGO_PKG_VERSION"),
        "notes": results.notes,
    });
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("cannot create {}", args.out.display()))?;
    let doc = json!({ "meta": meta, "workloads": results.workloads, "targets": targets(&results) });
    let json_path = args.out.join(format!("{}.json", args.name));
    std::fs::write(&json_path, serde_json::to_string_pretty(&doc)?)?;
    let md = markdown(&doc);
    std::fs::write(args.out.join(format!("{}.md", args.name)), &md)?;
    plots(&args.out, &results)?;
    println!("{md}");
    say(format!(
        "wrote {} and {}.md, plots in {}",
        json_path.display(),
        args.name,
        args.out.display()
    ));
    Ok(())
}

fn fresh(bin: &ServerBinary) -> anyhow::Result<Server> {
    Server::start(bin, &ServerOptions::new()).context("cannot start a server")
}

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

async fn w1(
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
        // (system, runtime, floor?, release notifications?)
        let mut order = vec![
            ("leasehold", Flavour::MultiThread, false, true),
            ("floor", Flavour::MultiThread, true, false),
            (
                "leasehold_current_thread",
                Flavour::CurrentThread,
                false,
                true,
            ),
            ("floor_current_thread", Flavour::CurrentThread, true, false),
            ("leasehold_no_notify", Flavour::MultiThread, false, false),
        ];
        let turns = rep % order.len();
        order.rotate_left(turns);
        for (name, flavour, floor, notify) in order {
            let (u, c, p) = (url.clone(), st.w1_cycles, format!("w1:{name}:{rep}"));
            let (summary, cdf) = on_runtime(flavour, move || async move {
                if floor {
                    workloads::w1_floor(u, c, p).await
                } else {
                    workloads::w1_leasehold(u, c, p, notify).await
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

/// `redis-cluster://` for the nodes started as masters: the seeds the client discovers the rest
/// from.
fn cluster_url(cluster: &Cluster) -> String {
    let seeds: Vec<String> = cluster.nodes()[..cluster.options().master_count()]
        .iter()
        .map(|n| n.addr().to_string())
        .collect();
    format!("redis-cluster://{}", seeds.join(","))
}

/// W1T: W1 for leasehold through each topology's URL form, standalone, cluster and Sentinel
/// taking turns in every repetition (the order rotates), so that the p50 ratios to standalone
/// compare runs made under the same load. All servers run throughout (the cluster's and the
/// sentinels' background chatter is the same for every system); the cluster's masters and the
/// Sentinel primary replicate every write to their replica, as deployed. Two more systems split
/// the difference: a cluster of 3 masters without replicas (the cluster client and cluster mode
/// alone), and the Sentinel primary through a plain `redis://` URL (replication alone, without
/// the Sentinel connection).
async fn w1t(bin: &ServerBinary, st: &Settings, results: &mut Results) -> anyhow::Result<()> {
    say(format!(
        "W1T topologies: {} cycles x {} repetitions on standalone, a cluster (3 masters + 1 \
         replica each) and Sentinel (primary + replica + 3 sentinels)",
        st.w1_cycles, st.reps
    ));
    let standalone = fresh(bin)?;
    let b = bin.clone();
    let cluster = tokio::task::spawn_blocking(move || Cluster::start(&b, &ClusterOptions::new()))
        .await?
        .context("cannot start a cluster")?;
    let b = bin.clone();
    let bare = tokio::task::spawn_blocking(move || {
        Cluster::start(&b, &ClusterOptions::new().replicas_per_master(0))
    })
    .await?
    .context("cannot start a cluster without replicas")?;
    let b = bin.clone();
    let sentinels =
        tokio::task::spawn_blocking(move || SentinelSet::start(&b, &SentinelOptions::new()))
            .await?
            .context("cannot start a Sentinel set")?;
    // The first three are what the targets compare; the last two split each topology's cost
    // into the client's and the servers' (replication on a 2-core machine is not free).
    let systems = [
        ("leasehold_standalone", standalone.url()),
        ("leasehold_cluster", cluster_url(&cluster)),
        ("leasehold_sentinel", sentinels.lock_url("redis-sentinel")),
        ("leasehold_cluster_no_replicas", cluster_url(&bare)),
        (
            "leasehold_sentinel_primary_direct",
            sentinels.primary().context("the Sentinel primary")?.url(),
        ),
    ];
    let mut runs: BTreeMap<String, Vec<Summary>> = BTreeMap::new();
    let mut cdf_src: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for rep in 0..st.reps {
        let mut order = systems.to_vec();
        order.rotate_left(rep % systems.len());
        for (name, url) in order {
            let (u, c, p) = (url.clone(), st.w1_cycles, format!("w1t:{name}:{rep}"));
            let (summary, cdf) = on_runtime(Flavour::MultiThread, move || {
                workloads::w1_leasehold(u, c, p, true)
            })
            .with_context(|| format!("W1T {name} ({url})"))?;
            cdf_src.insert(name.to_string(), cdf);
            runs.entry(name.to_string())
                .or_default()
                .push(summary.with("url", url.as_str()));
        }
    }
    for (name, r) in &runs {
        results.put("W1T", name, &median_summary(r));
    }
    results
        .cdfs
        .insert("W1T".into(), cdf_src.into_iter().collect());
    tokio::task::spawn_blocking(move || {
        drop(cluster);
        drop(bare);
        drop(sentinels);
        drop(standalone);
    })
    .await?;
    Ok(())
}

/// WB: W1, W3 and W5 through [`leasehold::Locker`] on every backend, the systems taking turns
/// within each repetition (the order rotates). All servers run throughout.
async fn wb(bin: &ServerBinary, st: &Settings, results: &mut Results) -> anyhow::Result<()> {
    say(format!(
        "WB backends: W1 {} cycles, W3 {} workers {} s, W5 {} leases {} s, x {} repetitions on \
         Redis, etcd (1 and 3 members) and PostgreSQL",
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
    let hold = Duration::from_secs_f64(st.w3_hold_ms / 1000.0);
    let mut runs: BTreeMap<(&str, String), Vec<Summary>> = BTreeMap::new();
    let mut cdfs: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for rep in 0..st.reps {
        let mut order = systems.to_vec();
        order.rotate_left(rep % systems.len());
        for (name, url) in &order {
            let (u, c, p) = (url.clone(), st.wb_cycles, format!("wb1:{name}:{rep}"));
            let (s, cdf) = on_runtime(Flavour::MultiThread, move || workloads::w1_locker(u, c, p))
                .with_context(|| format!("WB W1 {name}"))?;
            cdfs.insert(name.to_string(), cdf);
            runs.entry(("W1B", name.to_string())).or_default().push(s);
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

async fn w2(
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
            ("leasehold", false, true),
            ("floor", true, false),
            ("leasehold_no_notify", false, false),
        ];
        let turns = rep % order.len();
        order.rotate_left(turns);
        for (name, floor, notify) in order {
            let (u, t, p) = (url.clone(), st.w2_tasks, format!("w2:{name}:{rep}"));
            let s = on_runtime(Flavour::MultiThread, move || {
                workloads::w2(u, t, d, p, floor, notify)
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

async fn w3(
    bin: &ServerBinary,
    st: &Settings,
    peers: &[Peer],
    results: &mut Results,
) -> anyhow::Result<()> {
    say(format!(
        "W3 contention: {} workers on one key, {} ms holds, {} s",
        st.w3_workers, st.w3_hold_ms, st.w3_secs
    ));
    let server = fresh(bin)?;
    let url = server.url();
    let d = Duration::from_secs_f64(st.w3_secs);
    let hold = Duration::from_secs_f64(st.w3_hold_ms / 1000.0);
    let mut runs: BTreeMap<String, Vec<Summary>> = BTreeMap::new();
    let mut cdfs = Vec::new();
    // The last: fair, with a client per worker (every handoff by a message; not a target).
    for (fair, client_each) in [(false, false), (true, false), (true, true)] {
        let (u, w) = (url.clone(), st.w3_workers);
        let (key, name) = match (fair, client_each) {
            (false, _) => ("w3:leasehold", "leasehold"),
            (true, false) => ("w3:fair", "leasehold_fair"),
            (true, true) => ("w3:fair:clients", "leasehold_fair_client_each"),
        };
        let (s, cdf) = on_runtime(Flavour::MultiThread, move || {
            workloads::w3_leasehold(u, w, hold, d, key.into(), fair, client_each)
        })?;
        runs.entry(name.into()).or_default().push(s);
        cdfs.push((format!("{name} (handoff)"), cdf));
    }
    results.cdfs.insert("W3".into(), cdfs);
    for tuned in [false, true] {
        let run = PeerRun {
            urls: std::slice::from_ref(&url),
            workload: "W3",
            tuned,
            prefix: if tuned { "w3:tuned" } else { "w3:default" },
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
    for (name, r) in &runs {
        results.put("W3", name, &median_summary(r));
    }
    Ok(())
}

async fn w4(
    bin: &ServerBinary,
    st: &Settings,
    peers: &[Peer],
    results: &mut Results,
) -> anyhow::Result<()> {
    say(format!(
        "W4 Redlock: N = {:?}, {} cycles",
        st.w4_nodes, st.w4_cycles
    ));
    let mut per_system: BTreeMap<String, Value> = BTreeMap::new();
    for &n in &st.w4_nodes {
        let servers: Vec<Server> = (0..n).map(|_| fresh(bin)).collect::<anyhow::Result<_>>()?;
        let urls: Vec<String> = servers.iter().map(Server::url).collect();
        let mut runs: BTreeMap<String, Vec<Summary>> = BTreeMap::new();
        let (u, c) = (urls.clone(), st.w4_cycles);
        let s = on_runtime(Flavour::MultiThread, move || {
            workloads::w4_leasehold(u, c, format!("w4:{n}"))
        })?;
        runs.entry("leasehold".into()).or_default().push(s);
        let run = PeerRun {
            urls: &urls,
            workload: "W4",
            tuned: false,
            prefix: &format!("w4:peer:{n}"),
            cycles: Some(st.w4_cycles),
            duration: None,
        };
        peer_runs(peers, &run, results, &mut runs, "").await;
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

async fn w5(bin: &ServerBinary, st: &Settings, results: &mut Results) -> anyhow::Result<()> {
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
async fn w6(bin: &ServerBinary, st: &Settings, results: &mut Results) -> anyhow::Result<()> {
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
async fn w7(bin: &ServerBinary, st: &Settings, results: &mut Results) -> anyhow::Result<()> {
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
async fn w8(bin: &ServerBinary, st: &Settings, results: &mut Results) -> anyhow::Result<()> {
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

/// The targets, each with the measured ratio and whether it is met.
fn targets(r: &Results) -> Value {
    let mut out = Vec::new();
    let mut check = |name: &str, value: Option<f64>, bound: f64, at_most: bool, what: &str| {
        let met = value.map(|v| if at_most { v <= bound } else { v >= bound });
        out.push(json!({ "target": name, "measured": value, "bound": bound, "at_most": at_most, "met": met, "what": what }));
    };
    let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    };
    let best_peer = |w: &str, field: &str| {
        ["rslock", "redis-py", "python-redis-lock", "node-redlock"]
            .iter()
            .filter_map(|p| r.get(w, p, field))
            .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))))
    };
    check(
        "W1 p50 / floor p50 (multi_thread)",
        ratio(
            r.get("W1", "leasehold", "p50_us"),
            r.get("W1", "floor", "p50_us"),
        ),
        1.15,
        true,
        "leasehold p50 <= 1.15 x the in-process floor",
    );
    check(
        "W1 p50 / floor p50 (current_thread)",
        ratio(
            r.get("W1", "leasehold_current_thread", "p50_us"),
            r.get("W1", "floor_current_thread", "p50_us"),
        ),
        1.15,
        true,
        "same, current_thread runtime",
    );
    check(
        "W1 cycles/s / best peer",
        ratio(
            r.get("W1", "leasehold", "ops_per_s"),
            best_peer("W1", "ops_per_s"),
        ),
        0.97,
        false,
        "cycles/s >= 0.97 x the best peer",
    );
    check(
        "W1 p50 cluster / standalone",
        ratio(
            r.get("W1T", "leasehold_cluster", "p50_us"),
            r.get("W1T", "leasehold_standalone", "p50_us"),
        ),
        1.15,
        true,
        "W1T: leasehold on a cluster, 3 masters + 1 replica each, p50 <= 1.15 x standalone",
    );
    check(
        "W1 p50 sentinel / standalone",
        ratio(
            r.get("W1T", "leasehold_sentinel", "p50_us"),
            r.get("W1T", "leasehold_standalone", "p50_us"),
        ),
        1.15,
        true,
        "W1T: leasehold through Sentinel, primary + replica, p50 <= 1.15 x standalone",
    );
    check(
        "W2 cycles/s / floor",
        ratio(
            r.get("W2", "leasehold", "ops_per_s"),
            r.get("W2", "floor", "ops_per_s"),
        ),
        0.9,
        false,
        ">= 0.9 x the in-process floor",
    );
    check(
        "W2 cycles/s / best peer",
        ratio(
            r.get("W2", "leasehold", "ops_per_s"),
            best_peer("W2", "ops_per_s"),
        ),
        1.0,
        false,
        ">= the best peer",
    );
    let best_w3 = [
        "rslock",
        "redis-py",
        "python-redis-lock",
        "node-redlock",
        "rslock_tuned",
        "redis-py_tuned",
        "python-redis-lock_tuned",
        "node-redlock_tuned",
    ]
    .iter()
    .filter_map(|p| r.get("W3", p, "ops_per_s"))
    .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))));
    check(
        "W3 acquisitions/s / best peer",
        ratio(r.get("W3", "leasehold", "ops_per_s"), best_w3),
        0.95,
        false,
        ">= 0.95 x the best peer",
    );
    check(
        "W3 cross-worker handoff p50 (us)",
        r.get("W3", "leasehold", "handoff_p50_us"),
        150.0,
        true,
        "<= 150 us",
    );
    check(
        "W3 fair acquisitions/s / best peer",
        ratio(r.get("W3", "leasehold_fair", "ops_per_s"), best_w3),
        1.0,
        false,
        "fair mode: >= the best peer",
    );
    check(
        "W3 fair max wait (ms)",
        r.get("W3", "leasehold_fair", "max_wait_ms"),
        60.0,
        true,
        "fair mode: <= 60 ms",
    );
    check(
        "W3 fair same-worker rate",
        r.get("W3", "leasehold_fair", "same_worker_rate"),
        1.0 / 16.0,
        true,
        "fair mode: <= 1/16 (no re-taking by the releaser)",
    );
    check(
        "W3 fair cross-worker handoff p50 (us)",
        r.get("W3", "leasehold_fair", "handoff_p50_us"),
        150.0,
        true,
        "fair mode: <= 150 us",
    );
    let w4 = |n: &str| {
        r.workloads
            .get("W4")?
            .get("leasehold")?
            .get(n)?
            .get("p50_us")?
            .as_f64()
    };
    check(
        "W4 p50 N=5 / N=1",
        ratio(w4("n5"), w4("n1")),
        1.5,
        true,
        "concurrent fan-out",
    );
    // The herd: commands per handoff at the most waiters measured against the fewest.
    let w6 = |mode: &str| {
        let systems = r.workloads.get("W6")?;
        let per = |s: &Value| {
            Some((
                s.get("waiters")?.as_f64()?,
                s.get("commands_per_handoff")?.as_f64()?,
            ))
        };
        let mut pts: Vec<(f64, f64)> = systems
            .iter()
            .filter(|(n, _)| n.starts_with(&format!("leasehold_{mode}_")))
            .filter_map(|(_, s)| per(s))
            .collect();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        ratio(pts.last().map(|p| p.1), pts.first().map(|p| p.1))
    };
    check(
        "W6 fair commands per handoff, most / fewest waiters",
        w6("fair"),
        1.1,
        true,
        "constant as waiters grow (fair mode: one waiter woken per release)",
    );
    check(
        "W6 default commands per handoff, most / fewest waiters",
        w6("default"),
        1.1,
        true,
        "default mode: one waiter of the client woken per release, the others poll at their backoff (shown, not a target of this mode)",
    );
    for (name, s) in r.workloads.get("W7").into_iter().flatten() {
        check(
            &format!("W7 leases lost ({name})"),
            s.get("leases_lost").and_then(Value::as_f64),
            0.0,
            true,
            "0 lost",
        );
    }
    for (name, s) in r.workloads.get("W8").into_iter().flatten() {
        check(
            &format!("W8 errors ({name})"),
            s.get("errors").and_then(Value::as_f64),
            0.0,
            true,
            "errors 0 (acquisitions that timed out count separately)",
        );
    }
    check(
        "W5 leases lost",
        r.get("W5", "leasehold", "leases_lost"),
        0.0,
        true,
        "0 lost",
    );
    check(
        "W5 renewal round trips per renewal",
        ratio(
            r.get("W5", "leasehold", "renewal_round_trips_per_s"),
            r.get("W5", "leasehold", "ops_per_s"),
        ),
        1.0 / 50.0,
        true,
        "<= renewals/s / 50 (batched)",
    );
    Value::Array(out)
}

fn markdown(doc: &Value) -> String {
    let mut md = String::new();
    let meta = &doc["meta"];
    md.push_str(&format!(
        "# leasehold benchmarks\n\nServer {} on {} cores{}; generated by `scripts/bench`{}{}. Medians of {} interleaved repetitions where it says so.\n\n",
        meta["server"].as_str().unwrap_or("?"),
        meta["cores"],
        if meta["quick"].as_bool() == Some(true) { " (--quick: small counts)" } else { "" },
        if meta["quick"].as_bool() == Some(true) { " --quick" } else { "" },
        match meta["workloads"].as_array().filter(|w| !w.is_empty()) {
            Some(w) => format!(
                " (only {})",
                w.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(", ")
            ),
            None => String::new(),
        },
        meta["settings"]["reps"],
    ));
    let fmt = |v: &Value| match v {
        Value::Number(n) => n.as_f64().map_or(n.to_string(), |f| {
            if f.fract() == 0.0 {
                format!("{f:.0}")
            } else {
                format!("{f:.2}")
            }
        }),
        Value::Null => "-".into(),
        other => other.to_string(),
    };
    for (w, cols) in [
        ("W1", vec!["ops_per_s", "p50_us", "p99_us"]),
        ("W1T", vec!["ops_per_s", "p50_us", "p99_us"]),
        ("W2", vec!["ops_per_s"]),
        (
            "W3",
            vec![
                "ops_per_s",
                "handoff_p50_us",
                "handoff_p99_us",
                "same_worker_rate",
                "min_per_worker",
                "max_per_worker",
                "max_wait_ms",
                "hold_us_mean",
            ],
        ),
        ("W4", vec!["ops_per_s", "p50_us", "p99_us"]),
        (
            "W6",
            vec![
                "waiters",
                "commands_per_handoff",
                "ops_per_s",
                "client_kib_per_waiter",
            ],
        ),
        (
            "W7",
            vec![
                "leases",
                "ops_per_s",
                "renewal_round_trips_per_s",
                "leases_per_round_trip",
                "client_cpu_percent",
                "client_bytes_per_lease",
                "leases_lost",
            ],
        ),
        (
            "W8",
            vec![
                "processes",
                "ops_per_s",
                "p50_us",
                "p99_us",
                "p999_us",
                "errors",
                "timed_out",
            ],
        ),
        ("W1B", vec!["ops_per_s", "p50_us", "p99_us"]),
        (
            "W3B",
            vec![
                "ops_per_s",
                "handoff_p50_us",
                "handoff_p99_us",
                "same_worker_rate",
                "min_per_worker",
                "max_per_worker",
                "max_wait_ms",
            ],
        ),
        (
            "W5B",
            vec!["leases", "ttl_ms", "client_cpu_percent", "leases_lost"],
        ),
        (
            "W5",
            vec![
                "ops_per_s",
                "renewal_round_trips_per_s",
                "client_cpu_percent",
                "leases_lost",
            ],
        ),
    ] {
        let Some(systems) = doc["workloads"][w].as_object() else {
            continue;
        };
        md.push_str(&format!(
            "## {w}\n\n| system | {} |\n|---|{}\n",
            cols.join(" | "),
            "---|".repeat(cols.len())
        ));
        for (name, s) in systems {
            let row: Vec<String> = cols.iter().map(|c| fmt(&s[*c])).collect();
            md.push_str(&format!("| {name} | {} |\n", row.join(" | ")));
        }
        if w == "W1T" {
            md.push_str(
                "\n(W1 through each topology's URL: standalone `redis://`, a cluster of 3 masters \
                 with 1 replica each `redis-cluster://`, a primary with 1 replica and 3 sentinels \
                 `redis-sentinel://`; all servers run throughout. To split the cost: \
                 `cluster_no_replicas` is a cluster of 3 masters without replicas, \
                 `sentinel_primary_direct` the Sentinel primary through a plain `redis://` URL)\n",
            );
        }
        if w == "W1B" {
            md.push_str(
                "\n(WB: W1, W3 and W5 through `leasehold::Locker` on each backend, the systems \
                 taking turns in every repetition: Redis standalone, etcd with one member and \
                 with three, PostgreSQL session advisory locks and lease rows (`?lock=lease`). W3B is W3's contention on one key \
                 with its fairness columns; W5B holds auto-extended leases and counts the lost)\n",
            );
        }
        if w == "W7" {
            md.push_str(
                "\n(ops_per_s is renewals per second; the leases' TTL is in latest.json; memory is \
                 the process's growth from before the first acquisition to all leases held)\n",
            );
        }
        if w == "W8" {
            md.push_str(
                "\n(acquisitions per second over all processes; p50/p99/p999 of the wait from the call \
                 to holding the lock, merged from every process's histogram)\n",
            );
        }
        if w == "W4" {
            md.push_str(
                "\n(ops/s and latencies at N=3; per-N figures in latest.json under n1, n3, n5, n7)\n",
            );
        }
        md.push('\n');
    }
    md.push_str("## Targets\n\n| target | measured | bound | met |\n|---|---|---|---|\n");
    // A run of some workloads only lists the targets it measured.
    let partial = meta["workloads"].as_array().is_some_and(|w| !w.is_empty());
    for t in doc["targets"].as_array().into_iter().flatten() {
        if partial && t["measured"].is_null() {
            continue;
        }
        let met = match t["met"].as_bool() {
            Some(true) => "yes",
            Some(false) => "**no**",
            None => "not measured",
        };
        md.push_str(&format!(
            "| {} ({}) | {} | {} {} | {met} |\n",
            t["target"].as_str().unwrap_or(""),
            t["what"].as_str().unwrap_or(""),
            fmt(&t["measured"]),
            if t["at_most"].as_bool() == Some(true) {
                "<="
            } else {
                ">="
            },
            fmt(&t["bound"]),
        ));
    }
    if let Some(notes) = doc["meta"]["notes"].as_array().filter(|n| !n.is_empty()) {
        md.push_str("\n## Notes\n\n");
        for n in notes {
            md.push_str(&format!("- {}\n", n.as_str().unwrap_or("")));
        }
    }
    // Only the plots this run drew.
    let links: Vec<String> = [
        ("W1", "W1 latency CDF", "w1_latency_cdf.svg"),
        ("W1T", "W1T latency CDF", "w1t_latency_cdf.svg"),
        ("W1B", "W1B latency CDF", "w1b_latency_cdf.svg"),
        ("W3", "W3 handoff CDF", "w3_handoff_cdf.svg"),
        ("W2", "W2 throughput", "w2_throughput.svg"),
        ("W3", "W3 throughput", "w3_throughput.svg"),
        ("W4", "Redlock latency against N", "w4_redlock_latency.svg"),
        ("W6", "W6 commands per handoff", "w6_herd.svg"),
        ("W7", "W7 client CPU against leases", "w7_leases.svg"),
        ("W8", "W8 wait CDF", "w8_wait_cdf.svg"),
    ]
    .iter()
    .filter(|(w, ..)| doc["workloads"].get(*w).is_some())
    .map(|(_, title, file)| format!("[{title}]({file})"))
    .collect();
    if !links.is_empty() {
        md.push_str(&format!("\nPlots: {}.\n", links.join(", ")));
    }
    md
}

fn plots(dir: &std::path::Path, r: &Results) -> anyhow::Result<()> {
    if let Some(series) = r.cdfs.get("W1") {
        plot::cdf(
            &dir.join("w1_latency_cdf.svg"),
            "W1: acquire + release latency (in-process systems)",
            series,
        )?;
    }
    if let Some(series) = r.cdfs.get("W1B") {
        plot::cdf(
            &dir.join("w1b_latency_cdf.svg"),
            "W1B: acquire + release latency, Redis / etcd / PostgreSQL",
            series,
        )?;
    }
    if let Some(series) = r.cdfs.get("W1T") {
        plot::cdf(
            &dir.join("w1t_latency_cdf.svg"),
            "W1T: acquire + release latency, standalone / cluster / Sentinel",
            series,
        )?;
    }
    if let Some(series) = r.cdfs.get("W3") {
        plot::cdf(
            &dir.join("w3_handoff_cdf.svg"),
            "W3: handoff latency, release -> acquisition by another worker",
            series,
        )?;
    }
    for (w, file, title) in [
        (
            "W2",
            "w2_throughput.svg",
            "W2: cycles/s, 64 tasks on distinct keys",
        ),
        (
            "W3",
            "w3_throughput.svg",
            "W3: acquisitions/s, 16 workers on one key",
        ),
    ] {
        if let Some(systems) = r.workloads.get(w) {
            let bars: Vec<(String, f64)> = systems
                .iter()
                .filter_map(|(n, s)| Some((n.clone(), s.get("ops_per_s")?.as_f64()?)))
                .collect();
            plot::bars(&dir.join(file), title, "per second", &bars)?;
        }
    }
    if let Some(systems) = r.workloads.get("W6") {
        let mut series: BTreeMap<&str, Vec<(f64, f64)>> = BTreeMap::new();
        for (name, s) in systems {
            let mode = if name.contains("_fair_") {
                "fair"
            } else {
                "default"
            };
            if let (Some(n), Some(c)) = (
                s.get("waiters").and_then(Value::as_f64),
                s.get("commands_per_handoff").and_then(Value::as_f64),
            ) {
                series.entry(mode).or_default().push((n, c));
            }
        }
        let series: Vec<(String, Vec<(f64, f64)>)> = series
            .into_iter()
            .map(|(m, mut pts)| {
                pts.sort_by(|a, b| a.0.total_cmp(&b.0));
                (format!("leasehold {m}"), pts)
            })
            .collect();
        plot::lines(
            &dir.join("w6_herd.svg"),
            "W6: server commands per handoff against waiters on one key",
            "waiters",
            "server commands per handoff",
            &series,
        )?;
    }
    if let Some(series) = r.cdfs.get("W8") {
        plot::cdf(
            &dir.join("w8_wait_cdf.svg"),
            "W8: wait for the lock, many client processes on 1 000 keys",
            series,
        )?;
    }
    if let Some(systems) = r.workloads.get("W7") {
        let mut cpu: Vec<(f64, f64)> = systems
            .values()
            .filter_map(|s| {
                Some((
                    s.get("leases")?.as_f64()?,
                    s.get("client_cpu_percent")?.as_f64()?,
                ))
            })
            .collect();
        cpu.sort_by(|a, b| a.0.total_cmp(&b.0));
        plot::lines(
            &dir.join("w7_leases.svg"),
            "W7: client CPU keeping auto-extended leases alive",
            "leases",
            "client CPU (% of one core)",
            &[("leasehold".to_string(), cpu)],
        )?;
    }
    if let Some(systems) = r.workloads.get("W4") {
        let series: Curves = systems
            .iter()
            .map(|(name, s)| {
                let pts = [1.0, 3.0, 5.0, 7.0]
                    .iter()
                    .filter_map(|n| Some((*n, s.get(format!("n{n}"))?.get("p50_us")?.as_f64()?)))
                    .collect();
                (name.clone(), pts)
            })
            .collect();
        plot::lines(
            &dir.join("w4_redlock_latency.svg"),
            "W4: Redlock acquire + release p50 against N",
            "nodes",
            "p50 (us)",
            &series,
        )?;
    }
    Ok(())
}
