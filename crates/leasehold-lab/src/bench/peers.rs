//! The peer libraries, each driven by its adapter under `bench/` (installed by
//! `bench/install-peers`) as a separate process that prints one JSON object.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;

use super::stats::Summary;

/// One peer adapter and how to start it.
#[derive(Debug, Clone)]
pub(crate) struct Peer {
    pub(crate) system: &'static str,
    program: PathBuf,
    args: Vec<String>,
    env: Vec<(String, String)>,
}

fn cache() -> PathBuf {
    std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(|| PathBuf::from(".cache"))
        .join("leasehold/bench")
}

/// The installed peers (those whose runtime and adapter exist), and the missing ones by name.
pub(crate) fn discover(repo: &Path) -> (Vec<Peer>, Vec<&'static str>) {
    let cache = cache();
    let python = cache.join("venv/bin/python");
    let node_modules = cache.join("node/node_modules");
    let rslock = cache.join("target/release/rslock-bench");
    let candidates = [
        ("rslock", rslock.clone(), vec![], vec![], rslock.exists()),
        (
            "redis-py",
            python.clone(),
            vec![
                repo.join("bench/python/redis_py_lock.py")
                    .display()
                    .to_string(),
            ],
            vec![],
            python.exists(),
        ),
        (
            "python-redis-lock",
            python.clone(),
            vec![
                repo.join("bench/python/python_redis_lock.py")
                    .display()
                    .to_string(),
            ],
            vec![],
            python.exists(),
        ),
        (
            "leasehold-py",
            python.clone(),
            vec![
                repo.join("bench/python/leasehold_py.py")
                    .display()
                    .to_string(),
            ],
            vec![],
            python.exists() && cache.join("leasehold-py.installed").exists(),
        ),
        (
            "node-redlock",
            PathBuf::from("node"),
            vec![repo.join("bench/node/redlock.mjs").display().to_string()],
            vec![("NODE_PATH".to_string(), node_modules.display().to_string())],
            node_modules.join("redlock").exists(),
        ),
        (
            // Not a peer: the W1 floor of any Node library here (a bare socket on the event
            // loop). It needs only node, there whenever node-redlock is.
            "node_floor",
            PathBuf::from("node"),
            vec![repo.join("bench/node/floor.mjs").display().to_string()],
            vec![],
            node_modules.join("redlock").exists(),
        ),
        (
            "leasehold-node",
            PathBuf::from("node"),
            vec![repo.join("bench/node/leasehold.mjs").display().to_string()],
            vec![],
            cache.join("leasehold-node/leasehold.node").exists(),
        ),
    ];
    let mut found = Vec::new();
    let mut missing = Vec::new();
    for (system, program, args, env, present) in candidates {
        let adapter_ok = args.first().is_none_or(|a| Path::new(a).exists());
        if present && adapter_ok {
            found.push(Peer {
                system,
                program,
                args,
                env,
            });
        } else {
            missing.push(system);
        }
    }
    (found, missing)
}

/// What a peer run is asked to do.
pub(crate) struct PeerRun<'a> {
    pub(crate) urls: &'a [String],
    pub(crate) workload: &'a str,
    pub(crate) tuned: bool,
    pub(crate) prefix: &'a str,
    pub(crate) cycles: Option<u64>,
    pub(crate) duration: Option<Duration>,
}

impl Peer {
    /// Runs the adapter and parses its JSON; `Ok(None)` when it says it skips the workload.
    pub(crate) async fn run(&self, run: &PeerRun<'_>) -> anyhow::Result<Option<Summary>> {
        let mut cmd = tokio::process::Command::new(&self.program);
        cmd.args(&self.args)
            .arg("--url")
            .arg(&run.urls[0])
            .arg("--workload")
            .arg(run.workload)
            .arg("--key-prefix")
            .arg(run.prefix)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .kill_on_drop(true);
        if run.urls.len() > 1 || run.workload == "W4" {
            cmd.arg("--urls").arg(run.urls.join(","));
        }
        if run.tuned {
            cmd.arg("--tuned");
        }
        if let Some(c) = run.cycles {
            cmd.arg("--cycles").arg(c.to_string());
        }
        if let Some(d) = run.duration {
            cmd.arg("--duration").arg(format!("{}", d.as_secs_f64()));
        }
        let out = tokio::time::timeout(Duration::from_secs(300), cmd.output())
            .await
            .with_context(|| format!("{} did not finish {}", self.system, run.workload))?
            .with_context(|| format!("cannot start the {} adapter", self.system))?;
        anyhow::ensure!(
            out.status.success(),
            "{} adapter failed on {}: {}",
            self.system,
            run.workload,
            String::from_utf8_lossy(&out.stderr).trim()
        );
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text
            .lines()
            .rev()
            .find(|l| l.trim_start().starts_with('{'))
            .with_context(|| format!("{} printed no JSON for {}", self.system, run.workload))?;
        let mut value: serde_json::Value = serde_json::from_str(line)
            .with_context(|| format!("{} printed bad JSON: {line}", self.system))?;
        // Adapters report fractional microseconds; the table keeps whole ones.
        for field in ["p50_us", "p99_us"] {
            if let Some(us) = value.get(field).and_then(serde_json::Value::as_f64) {
                value[field] = serde_json::json!(us.round() as u64);
            }
        }
        if value.get("skipped").is_some() {
            return Ok(None);
        }
        let summary: Summary = serde_json::from_value(value)
            .with_context(|| format!("{} JSON lacks ops_per_s: {line}", self.system))?;
        Ok(Some(summary))
    }
}
