//! W1T: W1 on a Redis Cluster and through Sentinel, against a standalone server.

use std::collections::BTreeMap;

use anyhow::Context;
use leasehold_harness::{Cluster, ClusterOptions, SentinelOptions, SentinelSet, ServerBinary};

use super::stats::Summary;
use super::workloads::{self, Flavour, on_runtime};
use super::{Results, Settings, fresh, median_summary, say};

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
pub(super) async fn w1t(
    bin: &ServerBinary,
    st: &Settings,
    results: &mut Results,
) -> anyhow::Result<()> {
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
                workloads::w1_leasehold(u, c, p, true, false)
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
