//! The server's own limit: `redis-benchmark` running the floor's commands at the same
//! concurrency.

use anyhow::Context;
use leasehold_harness::{Server, ServerBinary};

use super::stats::Summary;

/// rps and p50 (ms) of one command, from `redis-benchmark --csv`.
async fn one(
    tool: &std::path::Path,
    server: &Server,
    clients: usize,
    requests: u64,
    cmd: &[&str],
) -> anyhow::Result<(f64, f64)> {
    let out = tokio::process::Command::new(tool)
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &server.port().to_string(),
            "-c",
            &clients.to_string(),
            "-n",
            &requests.to_string(),
            "-r",
            "100000000",
            "--csv",
        ])
        .args(cmd)
        .output()
        .await
        .with_context(|| format!("cannot run {}", tool.display()))?;
    anyhow::ensure!(
        out.status.success(),
        "redis-benchmark failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    // "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms",...
    let row = text.lines().last().context("no output")?;
    let fields: Vec<f64> = row
        .split(',')
        .map(|f| f.trim_matches('"').parse().unwrap_or(f64::NAN))
        .collect();
    let rps = *fields.get(1).context("no rps")?;
    let p50 = fields.get(4).copied().unwrap_or(f64::NAN);
    Ok((rps, p50))
}

/// The SET NX PX + DEL pair: cycles/s as the harmonic combination of the two commands' rates,
/// p50 as the sum of their p50s.
pub(crate) async fn pair(
    bin: &ServerBinary,
    server: &Server,
    clients: usize,
    requests: u64,
) -> anyhow::Result<Summary> {
    let tool = bin
        .benchmark
        .clone()
        .or_else(|| which("redis-benchmark"))
        .context("no redis-benchmark installed")?;
    let (set_rps, set_p50) = one(
        &tool,
        server,
        clients,
        requests,
        &["SET", "bench:__rand_int__", "v", "NX", "PX", "10000"],
    )
    .await?;
    let (del_rps, del_p50) = one(
        &tool,
        server,
        clients,
        requests,
        &["DEL", "bench:__rand_int__"],
    )
    .await?;
    let cycles = 1.0 / (1.0 / set_rps + 1.0 / del_rps);
    Ok(Summary {
        ops_per_s: cycles,
        p50_us: Some(((set_p50 + del_p50) * 1000.0).round() as u64),
        p99_us: None,
        extra: Default::default(),
    }
    .with("set_rps", set_rps)
    .with("del_rps", del_rps)
    .with("clients", clients as u64))
}

fn which(name: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| std::path::Path::new(d).join(name))
        .find(|p| p.exists())
}
