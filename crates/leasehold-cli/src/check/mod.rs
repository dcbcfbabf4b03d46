//! `leasehold check`: Jepsen-style fault injection against a fenced register.
//!
//! W worker processes (this binary's hidden `check-worker`) loop acquire -> read -> work ->
//! fenced write of register+1 -> release against a lock server, while faults are injected on a
//! seeded schedule; the register lives on a separate server so lock faults cannot touch it.
//! Afterwards the logs (stamped with CLOCK_MONOTONIC) are analysed: overlapping critical
//! sections, stale writes attempted and accepted, lost increments, the longest idle gap.
//!
//! What each scenario shows, with a real run's numbers, is in docs/safety.md.

mod analyze;
pub(crate) mod register;
mod timeline;
pub(crate) mod worker;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::Context;
use leasehold_harness::{Server, ServerBinary, ServerOptions};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::json;

use crate::cli::CheckArgs;
use crate::exit::Usage;
use analyze::Fault;
use register::{Register, RegisterKind};
use worker::now_ms;

/// A seeded xorshift: the same seed gives the same schedule.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A number in `0..n` (`n` > 0).
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// The fault kinds `--faults` takes.
const FAULTS: &[&str] = &[
    "pause",
    "kill",
    "restart",
    "restart-aof",
    "restart-noaof",
    "stall",
    "failover",
];

/// The lock key the workers fight over.
const LOCK_KEY: &str = "check:lock";

struct Workers {
    children: Vec<(u64, Child)>,
    next_id: u64,
}

/// The lock servers: one master (and, for `failover`, its replica), or the Redlock nodes.
struct LockServers {
    options: ServerOptions,
    nodes: Vec<Server>,
    replica: Option<Server>,
    /// Whether `nodes[0]` is a promoted replica (a restart brings back its `--replicaof`).
    promoted: bool,
    /// The file the workers read the URLs from.
    urls_file: PathBuf,
}

impl LockServers {
    fn start(args: &CheckArgs, bin: &ServerBinary, urls_file: PathBuf) -> anyhow::Result<Self> {
        // One node restarted keeps its locks only with the AOF (fsync always); Redlock nodes run
        // without persistence and are restarted late, as the Redlock algorithm requires.
        let options = ServerOptions::new().aof(args.nodes == 1);
        let nodes = (0..args.nodes)
            .map(|_| Server::start(bin, &options))
            .collect::<Result<Vec<_>, _>>()?;
        let replica = if args.faults.iter().any(|f| f == "failover") || args.replica_ack.is_some() {
            Some(nodes[0].start_replica(&options)?)
        } else {
            None
        };
        let servers = LockServers {
            options,
            nodes,
            replica,
            promoted: false,
            urls_file,
        };
        servers.publish_urls()?;
        Ok(servers)
    }

    /// Writes the current URLs for the workers (atomically: a new file renamed over the old).
    fn publish_urls(&self) -> anyhow::Result<()> {
        let tmp = self.urls_file.with_extension("tmp");
        let list: Vec<String> = self.nodes.iter().map(Server::url).collect();
        std::fs::write(&tmp, list.join("\n") + "\n")?;
        std::fs::rename(&tmp, &self.urls_file)?;
        Ok(())
    }

    /// A random minority of the nodes (at least one, for a single node: that node).
    fn minority(&self, rng: &mut Rng) -> Vec<usize> {
        let n = self.nodes.len();
        let count = ((n - 1) / 2).max(1).min(n);
        let mut picked: Vec<usize> = Vec::new();
        while picked.len() < count {
            let i = rng.below(n);
            if !picked.contains(&i) {
                picked.push(i);
            }
        }
        picked.sort_unstable();
        picked
    }
}

pub(crate) async fn run(args: CheckArgs) -> anyhow::Result<std::process::ExitCode> {
    for f in &args.faults {
        if !FAULTS.contains(&f.as_str()) {
            return Err(Usage(format!("unknown fault {f:?} (have: {})", FAULTS.join(", "))).into());
        }
    }
    if args.nodes == 0 || (args.nodes > 1 && (args.nodes < 3 || args.nodes.is_multiple_of(2))) {
        return Err(Usage(format!(
            "--nodes {}: use 1 (one server) or an odd number >= 3 (Redlock)",
            args.nodes
        ))
        .into());
    }
    if args.nodes > 1 && args.faults.iter().any(|f| f == "failover") {
        return Err(Usage(
            "failover needs one master with a replica (--nodes 1); Redlock nodes are independent masters"
                .into(),
        )
        .into());
    }
    if args.nodes > 1 && args.replica_ack.is_some() {
        return Err(Usage("--replica-ack applies to one lock server (--nodes 1)".into()).into());
    }
    if args.replica_ack.is_some_and(|n| n != 1) {
        return Err(Usage(
            "--replica-ack: the lock server runs one replica, so N must be 1".into(),
        )
        .into());
    }
    if args.workers == 0 {
        return Err(Usage("--workers must be at least 1".into()).into());
    }
    let bin = crate::bench::pick_server(args.server)?;
    let out = args.out.clone();
    std::fs::create_dir_all(&out)?;
    let logs = out.join("logs");
    let _ = std::fs::remove_dir_all(&logs);
    std::fs::create_dir_all(&logs)?;
    let stop = logs.join("stop");
    let holders = logs.join("holders");
    let mut lock = LockServers::start(&args, &bin, logs.join("lock-urls"))?;

    // The register, on a server no fault touches.
    let (_register_redis, _register_pg, register_url, register_kind) = match args.register.as_str()
    {
        "postgres" => {
            let pg = leasehold_harness::Postgres::start()
                .context("cannot start PostgreSQL (run scripts/install-servers)")?;
            let url = pg.url();
            (None, Some(pg), url, RegisterKind::Postgres)
        }
        _ => {
            let server = Server::start(&bin, &ServerOptions::new())?;
            let url = server.url();
            (Some(server), None, url, RegisterKind::Redis)
        }
    };
    let mut register = Register::connect(register_kind, &register_url).await?;
    register.init().await?;

    let exe = std::env::current_exe()?;
    let urls_file = lock.urls_file.clone();
    let spawn = |id: u64| -> anyhow::Result<Child> {
        let mut cmd = Command::new(&exe);
        cmd.arg("check-worker")
            .arg("--lock-urls")
            .arg(&urls_file)
            .args([
                "--register",
                &args.register,
                "--register-url",
                &register_url,
            ])
            .args(["--key", LOCK_KEY, "--id", &id.to_string()])
            .args(["--seed", &args.seed.to_string()])
            .args([
                "--ttl",
                &format!("{}ms", args.ttl.as_millis()),
                "--work",
                &format!("{}ms", args.work.as_millis()),
            ])
            .arg("--log")
            .arg(logs.join(format!("worker-{id}.log")))
            .arg("--holders")
            .arg(&holders)
            .arg("--stop-file")
            .arg(&stop)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(
                logs.join(format!("worker-{id}.err")),
            )?);
        if args.no_fencing {
            cmd.arg("--no-fencing");
        }
        if !args.no_raise_counter {
            cmd.arg("--raise-counter");
        }
        if args.release == "del" {
            cmd.arg("--release-del");
        }
        if let Some(n) = args.replica_ack {
            cmd.args(["--replica-ack", &n.to_string()]);
        }
        Ok(cmd.spawn()?)
    };
    let mut workers = Workers {
        children: Vec::new(),
        next_id: 0,
    };
    for _ in 0..args.workers {
        let id = workers.next_id;
        workers.children.push((id, spawn(id)?));
        workers.next_id += 1;
    }

    eprintln!(
        "[check] {} workers, {} lock node(s) ({}), ttl {:?}, work {:?} (x0.5..1.5), faults {:?}, seed {}, register: {}",
        args.workers,
        args.nodes,
        bin.label(),
        args.ttl,
        args.work,
        args.faults,
        args.seed,
        args.register,
    );
    let t0 = now_ms();
    let end = t0 + args.duration.as_secs_f64() * 1000.0;
    let mut rng = Rng(args.seed.max(1));
    let mut faults: Vec<Fault> = Vec::new();
    let ttl = args.ttl;
    let ttl_ms = ttl.as_secs_f64() * 1000.0;
    let mut next_kind = 0usize;
    let mut restarts = 0usize;
    while now_ms() < end {
        // Let the lock change hands a few times between faults.
        tokio::time::sleep(Duration::from_millis(
            2 * ttl_ms as u64 + rng.next() % (ttl_ms as u64 + 1),
        ))
        .await;
        if args.faults.is_empty() || now_ms() >= end {
            continue;
        }
        let mut kind = args.faults[next_kind % args.faults.len()].clone();
        next_kind += 1;
        let mut start = now_ms();
        let mut worker = None;
        let mut nodes = Vec::new();
        match kind.as_str() {
            "pause" | "kill" => {
                let Some((id, pid)) = holder(&lock, &holders, &workers, &mut rng) else {
                    continue;
                };
                worker = Some(id);
                start = now_ms();
                if kind == "pause" {
                    // Longer than the TTL: the lease runs out while the holder is frozen.
                    let _ = kill(pid, Signal::SIGSTOP);
                    tokio::time::sleep(ttl * 2).await;
                    let _ = kill(pid, Signal::SIGCONT);
                } else {
                    let _ = kill(pid, Signal::SIGKILL);
                    if let Some(pos) = workers.children.iter().position(|(w, _)| *w == id) {
                        let (_, mut child) = workers.children.remove(pos);
                        let _ = child.wait();
                    }
                    let new_id = workers.next_id;
                    workers.children.push((new_id, spawn(new_id)?));
                    workers.next_id += 1;
                }
            }
            "restart" | "restart-aof" | "restart-noaof" => {
                nodes = lock.minority(&mut rng);
                if lock.nodes.len() == 1 {
                    let keep = match kind.as_str() {
                        "restart-aof" => true,
                        "restart-noaof" => false,
                        _ => restarts.is_multiple_of(2),
                    };
                    restarts += 1;
                    kind = if keep { "restart-aof" } else { "restart-noaof" }.into();
                    let node = &mut lock.nodes[0];
                    node.kill();
                    if !keep {
                        // A restart without persistence: the node comes back empty.
                        remove_persistence(node.dir());
                    }
                    node.restart()?;
                    if lock.promoted {
                        node.promote()?;
                    }
                } else {
                    // Redlock: a crashed node must stay down for a TTL before it rejoins
                    // without its data (the algorithm's "delayed restart").
                    for &i in &nodes {
                        lock.nodes[i].kill();
                    }
                    tokio::time::sleep(ttl * 2).await;
                    for &i in &nodes {
                        remove_persistence(lock.nodes[i].dir());
                        lock.nodes[i].restart()?;
                    }
                }
            }
            "stall" => {
                // The lock server(s) frozen for longer than the TTL: keys expire meanwhile.
                nodes = lock.minority(&mut rng);
                for &i in &nodes {
                    lock.nodes[i].pause()?;
                }
                tokio::time::sleep(ttl * 2).await;
                for &i in &nodes {
                    lock.nodes[i].resume()?;
                }
            }
            _ => {
                failover(&mut lock, ttl).await?;
                nodes = vec![0];
            }
        }
        faults.push(Fault {
            kind,
            worker,
            nodes,
            start,
            end: now_ms(),
        });
    }

    std::fs::write(&stop, "")?;
    let run_end = now_ms();
    let mut worker_errors = Vec::new();
    for (id, child) in &mut workers.children {
        let pid = Pid::from_raw(child.id() as i32);
        let _ = kill(pid, Signal::SIGCONT);
        let deadline = std::time::Instant::now() + Duration::from_secs(30) + args.work * 2 + ttl;
        loop {
            if let Some(status) = child.try_wait()? {
                if !status.success() {
                    let err = std::fs::read_to_string(logs.join(format!("worker-{id}.err")))
                        .unwrap_or_default();
                    worker_errors.push(format!("worker {id}: {status}: {}", err.trim()));
                }
                break;
            }
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                worker_errors.push(format!("worker {id} did not stop within 30 s"));
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let final_value = register.value().await?;
    let a = analyze::analyze(&logs, final_value, &faults, ttl_ms, now_ms())?;
    let report = json!({
        "operations": a.operations,
        "acquisitions": a.acquisitions,
        "overlaps": a.overlaps,
        "overlaps_within_ttl": a.overlaps_within_ttl,
        "stale_writes_attempted": a.stale_writes_attempted,
        "stale_writes_accepted": a.stale_writes_accepted,
        "stale_reads_rejected": a.stale_reads_rejected,
        "lost_increments": a.lost_increments,
        "max_gap_ms": a.max_gap_ms,
        "writes_acknowledged": a.writes_acknowledged,
        "writes_in_doubt": a.writes_in_doubt,
        "writes_in_doubt_applied": a.writes_in_doubt_applied,
        "register_final_value": final_value,
        "lock_errors": a.lock_errors,
        "worker_errors": worker_errors,
        "per_fault": a.per_fault,
        "faults": faults,
        "settings": {
            "workers": args.workers, "nodes": args.nodes, "duration_ms": args.duration.as_millis() as u64,
            "ttl_ms": args.ttl.as_millis() as u64, "work_ms": args.work.as_millis() as u64,
            "faults": args.faults, "seed": args.seed, "register": args.register,
            "release": args.release, "fencing": !args.no_fencing, "server": bin.label(),
            "replica_ack": args.replica_ack, "raise_counter": !args.no_raise_counter,
        },
    });
    std::fs::write(
        out.join("report.json"),
        serde_json::to_string_pretty(&report)?,
    )?;
    timeline::draw(
        &out.join("timeline.svg"),
        &a,
        &faults,
        t0,
        run_end.max(now_ms()),
    )?;
    print_table(&a, &out);
    for e in &worker_errors {
        eprintln!("[check] {e}");
    }
    let violated = !args.no_fencing && (a.stale_writes_accepted > 0 || a.lost_increments != 0);
    Ok(if violated || !worker_errors.is_empty() {
        std::process::ExitCode::from(1)
    } else {
        std::process::ExitCode::SUCCESS
    })
}

/// Deletes a stopped server's data files, so it restarts empty.
fn remove_persistence(dir: &Path) {
    let _ = std::fs::remove_dir_all(dir.join("appendonlydir"));
    let _ = std::fs::remove_file(dir.join("appendonly.aof"));
    let _ = std::fs::remove_file(dir.join("dump.rdb"));
}

/// The replication hazard: the link to the replica is cut (the replica is stopped and its
/// connection killed, so nothing more reaches it), a worker acquires on the master, the master
/// dies, the replica is promoted and the workers move to it, where the lock is free. The master
/// is killed only once the lock the replica knows of (the holder at the cut) has expired, so
/// that the new master's lock is free while the last holder still works: this is the failover
/// that lets two holders in. A fresh replica of the new master is started for the next one.
async fn failover(lock: &mut LockServers, ttl: Duration) -> anyhow::Result<()> {
    let Some(replica) = lock.replica.take() else {
        return Ok(());
    };
    let master = &lock.nodes[0];
    let token_now = |s: &Server| {
        s.command(&["GET", LOCK_KEY])
            .ok()
            .and_then(|v| v.as_bytes().map(<[u8]>::to_vec))
    };
    // The lock as the replica will know it: the holder at the cut, until its TTL runs out
    // (the replica's clock keeps running while it is stopped).
    let at_cut = token_now(master);
    let pttl = master
        .command(&["PTTL", LOCK_KEY])
        .ok()
        .and_then(|v| v.as_integer())
        .unwrap_or(0)
        .max(0) as f64;
    replica.pause()?;
    master.command(&["CLIENT", "KILL", "TYPE", "replica"])?;
    let replica_key_gone = now_ms() + pttl + 5.0;
    // Kill the master once the replica's copy of the lock has expired while a holder the
    // replica never heard of holds it on the master (a few TTLs at most).
    let deadline = replica_key_gone + 4.0 * ttl.as_secs_f64() * 1000.0;
    while now_ms() < deadline {
        let t = token_now(master);
        if now_ms() >= replica_key_gone && t.is_some() && t != at_cut {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    lock.nodes[0].kill();
    replica.resume()?;
    replica.promote()?;
    lock.nodes[0] = replica;
    lock.promoted = true;
    // Tell the workers first: they are failing against the dead master meanwhile.
    lock.publish_urls()?;
    lock.replica = Some(lock.nodes[0].start_replica(&lock.options)?);
    Ok(())
}

/// The holder right now (the lock key's token on the first node that answers, looked up in
/// the holders file), or a random live worker when nobody holds it.
fn holder(
    lock: &LockServers,
    holders: &Path,
    workers: &Workers,
    rng: &mut Rng,
) -> Option<(u64, Pid)> {
    let token = lock.nodes.iter().find_map(|n| {
        n.command_timeout(&["GET", LOCK_KEY], Duration::from_millis(200))
            .ok()?
            .as_bytes()
            .map(|b| String::from_utf8_lossy(b).into_owned())
    });
    let table = std::fs::read_to_string(holders).unwrap_or_default();
    if let Some(token) = token
        && let Some((id, pid)) = table.lines().rev().find_map(|l| {
            let mut f = l.split_whitespace();
            (f.next()? == token)
                .then(|| Some((f.next()?.parse().ok()?, f.next()?.parse().ok()?)))?
        })
        && workers.children.iter().any(|(w, _)| *w == id)
    {
        return Some((id, Pid::from_raw(pid)));
    }
    if workers.children.is_empty() {
        return None;
    }
    let (id, child) = &workers.children[rng.below(workers.children.len())];
    Some((*id, Pid::from_raw(child.id() as i32)))
}

fn print_table(a: &analyze::Analysis, out: &Path) {
    println!(
        "| fault | acquisitions | overlaps | overlaps within TTL | stale writes attempted | stale writes accepted |"
    );
    println!("|---|---|---|---|---|---|");
    for (kind, c) in &a.per_fault {
        println!(
            "| {kind} | {} | {} | {} | {} | {} |",
            c.acquisitions,
            c.overlaps,
            c.overlaps_within_ttl,
            c.stale_writes_attempted,
            c.stale_writes_accepted
        );
    }
    println!(
        "| all | {} | {} | {} | {} | {} |\noperations: {}, stale reads rejected: {}, lock errors: {}\nlost increments: {} (acknowledged writes {}, in doubt {} of which applied {}), longest gap with nobody holding: {:.0} ms\nreport: {}, timeline: {}",
        a.acquisitions,
        a.overlaps,
        a.overlaps_within_ttl,
        a.stale_writes_attempted,
        a.stale_writes_accepted,
        a.operations,
        a.stale_reads_rejected,
        a.lock_errors,
        a.lost_increments,
        a.writes_acknowledged,
        a.writes_in_doubt,
        a.writes_in_doubt_applied,
        a.max_gap_ms,
        out.join("report.json").display(),
        out.join("timeline.svg").display()
    );
}
