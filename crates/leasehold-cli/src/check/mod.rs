//! `leasehold check`: Jepsen-style fault injection against a fenced register.
//!
//! W worker processes (this binary's hidden `check-worker`) loop acquire -> read -> work ->
//! fenced write of register+1 -> release against a lock server, while faults are injected on a
//! seeded schedule; the register lives on a separate server so lock faults cannot touch it.
//! Afterwards the logs (stamped with CLOCK_MONOTONIC) are analysed: overlapping critical
//! sections, stale writes attempted and accepted, lost increments, the longest idle gap.
//!
//! Implemented so far: the Redis register, faults `pause` and `kill`, `--release token|del`,
//! `--no-fencing`; the PostgreSQL register and the `restart`, `failover`, `stall` and Redlock
//! faults are the next step.

mod analyze;
mod timeline;
pub(crate) mod worker;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::Context;
use leasehold_harness::{Flavor, Server, ServerOptions};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::json;

use crate::cli::CheckArgs;
use crate::exit::Usage;
use analyze::Fault;
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
}

struct Workers {
    children: Vec<(u64, Child)>,
    next_id: u64,
}

pub(crate) async fn run(args: CheckArgs) -> anyhow::Result<std::process::ExitCode> {
    for f in &args.faults {
        if !["pause", "kill"].contains(&f.as_str()) {
            return Err(Usage(format!(
                "fault {f:?} is not implemented yet (have: pause, kill)"
            ))
            .into());
        }
    }
    if args.register != "redis" {
        return Err(Usage(format!(
            "register {:?} is not implemented yet (have: redis)",
            args.register
        ))
        .into());
    }
    let bin = leasehold_harness::find(Flavor::Redis8)
        .or_else(|| leasehold_harness::discover().into_iter().next())
        .context("no redis/valkey server installed (run scripts/install-servers)")?;
    let lock_server = Server::start(&bin, &ServerOptions::new())?;
    let register_server = Server::start(&bin, &ServerOptions::new())?;
    let out = args.out.clone();
    std::fs::create_dir_all(&out)?;
    let logs = out.join("logs");
    let _ = std::fs::remove_dir_all(&logs);
    std::fs::create_dir_all(&logs)?;
    let stop = logs.join("stop");
    let holders = logs.join("holders");
    register_server.command(&["HSET", "register", "value", "0", "fence", "0"])?;

    let exe = std::env::current_exe()?;
    let spawn = |id: u64| -> anyhow::Result<Child> {
        let mut cmd = Command::new(&exe);
        cmd.arg("check-worker")
            .args([
                "--lock-url",
                &lock_server.url(),
                "--register-url",
                &register_server.url(),
            ])
            .args([
                "--key",
                "check:lock",
                "--register-key",
                "register",
                "--id",
                &id.to_string(),
            ])
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
        if args.release == "del" {
            cmd.arg("--release-del");
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
        "[check] {} workers, ttl {:?}, work {:?}, faults {:?}, seed {}, register on {}",
        args.workers,
        args.ttl,
        args.work,
        args.faults,
        args.seed,
        register_server.url()
    );
    let t0 = now_ms();
    let end = t0 + args.duration.as_secs_f64() * 1000.0;
    let mut rng = Rng(args.seed.max(1));
    let mut faults: Vec<Fault> = Vec::new();
    let ttl_ms = args.ttl.as_secs_f64() * 1000.0;
    let mut next_kind = 0usize;
    while now_ms() < end {
        // Let the lock change hands a few times between faults.
        tokio::time::sleep(Duration::from_millis(
            2 * ttl_ms as u64 + rng.next() % (ttl_ms as u64 + 1),
        ))
        .await;
        if args.faults.is_empty() || now_ms() >= end {
            continue;
        }
        let kind = args.faults[next_kind % args.faults.len()].clone();
        next_kind += 1;
        let Some((id, pid)) = holder(&lock_server, &holders, &workers, &mut rng) else {
            continue;
        };
        let start = now_ms();
        match kind.as_str() {
            "pause" => {
                // Longer than the TTL: the lease runs out while the holder is frozen.
                let _ = kill(pid, Signal::SIGSTOP);
                tokio::time::sleep(Duration::from_secs_f64(ttl_ms * 2.0 / 1000.0)).await;
                let _ = kill(pid, Signal::SIGCONT);
            }
            _ => {
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
        faults.push(Fault {
            kind,
            worker: Some(id),
            start,
            end: now_ms(),
        });
    }

    std::fs::write(&stop, "")?;
    let run_end = now_ms();
    for (_, child) in &mut workers.children {
        let pid = Pid::from_raw(child.id() as i32);
        let _ = kill(pid, Signal::SIGCONT);
        let deadline = std::time::Instant::now() + Duration::from_secs(30) + args.work + args.ttl;
        loop {
            if child.try_wait()?.is_some() {
                break;
            }
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let final_value: u64 = register_server
        .command(&["HGET", "register", "value"])?
        .as_bytes()
        .and_then(|b| std::str::from_utf8(b).ok()?.parse().ok())
        .unwrap_or(0);
    let a = analyze::analyze(&logs, final_value, &faults, ttl_ms, now_ms())?;
    let report = json!({
        "acquisitions": a.acquisitions,
        "overlaps": a.overlaps,
        "stale_writes_attempted": a.stale_writes_attempted,
        "stale_writes_accepted": a.stale_writes_accepted,
        "lost_increments": a.lost_increments,
        "max_gap_ms": a.max_gap_ms,
        "writes_acknowledged": a.writes_acknowledged,
        "register_final_value": final_value,
        "per_fault": a.per_fault,
        "faults": faults,
        "settings": {
            "workers": args.workers, "duration_ms": args.duration.as_millis() as u64, "ttl_ms": args.ttl.as_millis() as u64,
            "work_ms": args.work.as_millis() as u64, "faults": args.faults, "seed": args.seed, "register": args.register,
            "release": args.release, "fencing": !args.no_fencing, "server": bin.label(),
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
    let violated = !args.no_fencing && (a.stale_writes_accepted > 0 || a.lost_increments != 0);
    Ok(if violated {
        std::process::ExitCode::from(1)
    } else {
        std::process::ExitCode::SUCCESS
    })
}

/// The holder right now (the lock key's token, looked up in the holders file), or a random
/// live worker when nobody holds it.
fn holder(lock: &Server, holders: &Path, workers: &Workers, rng: &mut Rng) -> Option<(u64, Pid)> {
    let token = lock
        .command(&["GET", "check:lock"])
        .ok()?
        .as_bytes()
        .map(|b| String::from_utf8_lossy(b).into_owned());
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
    let (id, child) = &workers.children[(rng.next() % workers.children.len() as u64) as usize];
    Some((*id, Pid::from_raw(child.id() as i32)))
}

fn print_table(a: &analyze::Analysis, out: &Path) {
    println!(
        "| fault | acquisitions | overlaps | stale writes attempted | stale writes accepted |"
    );
    println!("|---|---|---|---|---|");
    for (kind, c) in &a.per_fault {
        println!(
            "| {kind} | {} | {} | {} | {} |",
            c.acquisitions, c.overlaps, c.stale_writes_attempted, c.stale_writes_accepted
        );
    }
    println!(
        "| all | {} | {} | {} | {} |\nlost increments: {} (acknowledged writes {}), longest gap with nobody holding: {:.0} ms\nreport: {}, timeline: {}",
        a.acquisitions,
        a.overlaps,
        a.stale_writes_attempted,
        a.stale_writes_accepted,
        a.lost_increments,
        a.writes_acknowledged,
        a.max_gap_ms,
        out.join("report.json").display(),
        out.join("timeline.svg").display()
    );
}
