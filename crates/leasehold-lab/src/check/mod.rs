//! `leasehold-lab check`: Jepsen-style fault injection against a fenced register.
//!
//! W worker processes (this binary's hidden `check-worker`) loop acquire -> read -> work ->
//! fenced write of register+1 -> release against a lock server, while faults are injected on a
//! seeded schedule; the register lives on a separate server so lock faults cannot touch it.
//! Afterwards the logs (stamped with CLOCK_MONOTONIC) are analysed: overlapping critical
//! sections, stale writes attempted and accepted, lost increments, the longest idle gap.
//!
//! Modules: `fleet` (the worker processes), `faults` (the schedule and the injector),
//! `servers` (the lock servers of `--backend` and `--topology`, dispatching to `standalone`,
//! `cluster`, `sentinel`, `etcd` and `postgres`, each with its server faults; `clock`: a Redlock
//! node's clock jumping forward), `hazard` (the
//! un-replicated lock a failover fault waits for), `worker` (one worker), `register` (what the
//! lock protects), `analyze` and `timeline`.
//! What each scenario shows, with a real run's numbers, is in docs/safety.md.

mod analyze;
mod clock;
mod cluster;
mod etcd;
mod faults;
mod fleet;
mod hazard;
mod postgres;
pub(crate) mod register;
mod sentinel;
mod servers;
mod standalone;
mod timeline;
pub(crate) mod worker;

use std::ffi::OsString;
use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use leasehold_harness::{Server, ServerOptions};
use serde_json::json;

use crate::cli::CheckArgs;
use crate::exit::Usage;
use faults::{FAULTS, Injector, LOCK_KEY, Rng};
use fleet::Fleet;
use register::{Register, RegisterKind};
use servers::{Backend, LockServers, Topology};
use worker::now_ms;

/// Refuses option combinations that cannot run.
fn validate(args: &CheckArgs) -> Result<(), Usage> {
    for f in &args.faults {
        if !FAULTS.contains(&f.as_str()) {
            return Err(Usage(format!(
                "unknown fault {f:?} (have: {})",
                FAULTS.join(", ")
            )));
        }
    }
    let backend = Backend::of(args);
    if let Some(pooler) = args
        .pooler
        .as_deref()
        .filter(|_| backend != Backend::Postgres)
    {
        return Err(Usage(format!(
            "--pooler {pooler}: a pooler goes in front of PostgreSQL, not --backend {}",
            backend.name()
        )));
    }
    if args.pool_mode != "transaction" && args.pooler.is_none() {
        return Err(Usage(format!(
            "--pool-mode {}: the pool mode of --pooler, which is not given",
            args.pool_mode
        )));
    }
    if let Some(lock) = args
        .pg_lock
        .as_deref()
        .filter(|_| backend != Backend::Postgres)
    {
        return Err(Usage(format!(
            "--pg-lock {lock}: PostgreSQL's locks, not --backend {}",
            backend.name()
        )));
    }
    match backend {
        Backend::Redis => validate_redis(args)?,
        other => validate_other(other, args)?,
    }
    if args.workers == 0 {
        return Err(Usage("--workers must be at least 1".into()));
    }
    Ok(())
}

/// `--backend etcd` or `postgres`: the backend runs its own servers, and takes only its own
/// faults; the redis-only options are refused.
fn validate_other(backend: Backend, args: &CheckArgs) -> Result<(), Usage> {
    let name = backend.name();
    let faults = backend.faults(Topology::of(args));
    if let Some(f) = args.faults.iter().find(|f| !faults.contains(&f.as_str())) {
        return Err(Usage(format!(
            "fault {f:?} does not apply to --backend {name} (it takes: {})",
            faults.join(", ")
        )));
    }
    if let Some(topology) = &args.topology {
        return Err(Usage(format!(
            "--topology {topology}: --backend {name} runs its own servers; --topology is for the \
             redis backend"
        )));
    }
    if args.nodes != 1 {
        return Err(Usage(format!(
            "--nodes {}: --backend {name} runs its own servers; --nodes is for the redis backend \
             (Redlock)",
            args.nodes
        )));
    }
    if args.release == "del" {
        return Err(Usage(format!(
            "--release del sends a plain DEL to redis servers: it does not apply to --backend \
             {name}"
        )));
    }
    if args.replica_ack.is_some() {
        return Err(Usage(format!(
            "--replica-ack waits for redis replicas: it does not apply to --backend {name}"
        )));
    }
    if args.permits.is_some() || args.rw || args.multi || args.elect {
        return Err(Usage(format!(
            "--permits, --rw, --multi and --elect: these primitives are Redis and Valkey only, \
             not --backend {name}"
        )));
    }
    if args.fair {
        return Err(Usage(format!(
            "--fair is Redis's queue with direct handoff: --backend {name} waits in arrival \
             order already"
        )));
    }
    Ok(())
}

/// `--backend redis`: the faults of the topology, and the shapes of servers that exist.
fn validate_redis(args: &CheckArgs) -> Result<(), Usage> {
    let topology = Topology::of(args);
    if let Some(f) = args
        .faults
        .iter()
        .find(|f| !topology.faults().contains(&f.as_str()))
    {
        // A fault of the etcd cluster's members says where it belongs.
        let etcd = Backend::Etcd.faults(topology);
        let hint =
            if etcd.contains(&f.as_str()) && !Topology::Standalone.faults().contains(&f.as_str()) {
                format!("; --backend etcd takes: {}", etcd.join(", "))
            } else {
                String::new()
            };
        return Err(Usage(format!(
            "fault {f:?} does not apply to --topology {} (it takes: {}){hint}",
            topology.name(),
            topology.faults().join(", ")
        )));
    }
    if topology != Topology::Standalone {
        if args.nodes != 1 {
            return Err(Usage(format!(
                "--nodes {}: --topology {} runs its own servers; --nodes is for standalone \
                 servers (1, or Redlock over an odd number >= 3)",
                args.nodes,
                topology.name()
            )));
        }
        if args.release == "del" {
            return Err(Usage(format!(
                "--release del sends a plain DEL to each server: use it with --topology \
                 standalone, not {}",
                topology.name()
            )));
        }
    }
    if args.nodes == 0 || (args.nodes > 1 && (args.nodes < 3 || args.nodes.is_multiple_of(2))) {
        return Err(Usage(format!(
            "--nodes {}: use 1 (one server) or an odd number >= 3 (Redlock)",
            args.nodes
        )));
    }
    if slow_link(args) && (args.nodes > 1 || args.faults.iter().any(|f| f == "failover")) {
        return Err(Usage(
            "slow-link relays to one lock server that stays put: use --nodes 1, without failover"
                .into(),
        ));
    }
    if args.nodes == 1 && args.faults.iter().any(|f| f == "clock-jump") {
        return Err(Usage(
            "clock-jump moves one Redlock node's clock: use --nodes 3 or more (Redlock)".into(),
        ));
    }
    if args.nodes > 1 && args.faults.iter().any(|f| f == "failover") {
        return Err(Usage(
            "failover needs one master with a replica (--nodes 1); Redlock nodes are independent masters"
                .into(),
        ));
    }
    if args.nodes > 1 && args.replica_ack.is_some() {
        return Err(Usage(
            "--replica-ack applies to one lock server (--nodes 1)".into(),
        ));
    }
    if let Some(n) = args.permits {
        if n == 0 {
            return Err(Usage("--permits must be at least 1".into()));
        }
        if args.nodes > 1 || args.fair || args.replica_ack.is_some() || args.release == "del" {
            return Err(Usage(
                "--permits takes one lock server (or a topology), without --fair, --replica-ack \
                 or --release del"
                    .into(),
            ));
        }
    }
    if (args.rw || args.multi || args.elect)
        && (args.nodes > 1 || args.fair || args.replica_ack.is_some() || args.release == "del")
    {
        return Err(Usage(
            "--rw, --multi and --elect take one lock server (or a topology), without --fair, \
             --replica-ack or --release del"
                .into(),
        ));
    }
    if args.fair && args.nodes > 1 {
        return Err(Usage(
            "--fair: Redlock keeps no queue; use one lock server (--nodes 1) or a topology".into(),
        ));
    }
    if args.fair && args.replica_ack.is_some() {
        return Err(Usage("--fair cannot be combined with --replica-ack".into()));
    }
    if args.replica_ack.is_some_and(|n| n != 1) {
        return Err(Usage(
            "--replica-ack: the lock server runs one replica, so N must be 1".into(),
        ));
    }
    Ok(())
}

/// Whether the workers raise the fencing counter after a refused read: by default, unless
/// the backend cannot (etcd's numbers are its revisions: `raise_fencing_counter` is
/// `Unsupported` there).
fn raises_counter(args: &CheckArgs) -> bool {
    !args.no_raise_counter && Backend::of(args) != Backend::Etcd
}

/// `--backend postgres`: the workers' lock, `lease rows` or `session locks`.
fn pg_lock_name(args: &CheckArgs) -> &'static str {
    if postgres::lease_rows(args) {
        "lease rows"
    } else {
        "session locks"
    }
}

/// Whether the workers go through the `slow-link` relay (and renew their leases).
fn slow_link(args: &CheckArgs) -> bool {
    args.faults.iter().any(|f| f == "slow-link")
}

/// The arguments every `check-worker` gets (all but its id and log file).
fn worker_args(
    args: &CheckArgs,
    urls_file: &Path,
    register_url: &str,
    logs: &Path,
) -> Vec<OsString> {
    let mut v: Vec<OsString> = vec![
        "--lock-urls".into(),
        urls_file.into(),
        "--register".into(),
        args.register.clone().into(),
        "--register-url".into(),
        register_url.into(),
        "--key".into(),
        LOCK_KEY.into(),
        "--seed".into(),
        args.seed.to_string().into(),
        "--ttl".into(),
        format!("{}ms", args.ttl.as_millis()).into(),
        "--work".into(),
        format!("{}ms", args.work.as_millis()).into(),
        "--holders".into(),
        logs.join("holders").into(),
        "--stop-file".into(),
        logs.join("stop").into(),
    ];
    if args.no_fencing {
        v.push("--no-fencing".into());
    }
    if raises_counter(args) {
        v.push("--raise-counter".into());
    }
    if args.release == "del" {
        v.push("--release-del".into());
    }
    if slow_link(args) {
        // Renewals, so the fault's late replies hit extends; a reply timeout it outlasts.
        v.push("--auto-extend".into());
        v.push("--response-timeout".into());
        let timeout = standalone::slow_link_timeout(args.ttl);
        v.push(format!("{}ms", timeout.as_millis().max(1)).into());
    }
    if let Some(n) = args.replica_ack {
        v.push("--replica-ack".into());
        v.push(n.to_string().into());
    }
    if args.fair {
        v.push("--fair".into());
    }
    if let Some(n) = args.permits {
        v.push("--permits".into());
        v.push(n.to_string().into());
    }
    if args.rw {
        v.push("--rw".into());
    }
    if args.multi {
        v.push("--multi".into());
    }
    if args.elect {
        v.push("--elect".into());
    }
    if args.metrics_addr.is_some() {
        v.push("--metrics".into());
    }
    v
}

pub(crate) async fn run(args: CheckArgs) -> anyhow::Result<std::process::ExitCode> {
    validate(&args)?;
    let backend = Backend::of(&args);
    // A redis/valkey server: for the redis backend's servers and the redis register.
    let bin = if backend == Backend::Redis || args.register != "postgres" {
        Some(crate::bench::pick_server(args.server)?)
    } else {
        None
    };
    let out = args.out.clone();
    std::fs::create_dir_all(&out)?;
    let logs = out.join("logs");
    let _ = std::fs::remove_dir_all(&logs);
    std::fs::create_dir_all(&logs)?;
    if let Some(addr) = args.metrics_addr {
        crate::metrics::serve_workers(addr, logs.clone()).await?;
    }
    let holders = logs.join("holders");
    let mut lock = LockServers::start(&args, bin.as_ref(), logs.join("lock-urls")).await?;

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
            let bin = bin
                .as_ref()
                .context("the redis register needs a redis/valkey server")?;
            let server = Server::start(bin, &ServerOptions::new())?;
            let url = server.url();
            (Some(server), None, url, RegisterKind::Redis)
        }
    };
    let mut register = Register::connect(register_kind, &register_url).await?;
    register.init().await?;

    let mut fleet = Fleet::new(
        std::env::current_exe()?,
        worker_args(&args, lock.urls_file(), &register_url, &logs),
        &logs,
    );
    for _ in 0..args.workers {
        fleet.spawn()?;
    }
    let server_label = bin.as_ref().map(|b| b.label());
    let lock_shown = match backend {
        Backend::Redis => format!(
            "{} ({} node(s), {})",
            args.topology_name(),
            args.nodes,
            server_label.as_deref().unwrap_or("-")
        ),
        Backend::Etcd => format!("{} members", backend.lock_nodes(&args)),
        Backend::Postgres if args.pooler.is_some() => format!(
            "one PostgreSQL server behind PgBouncer ({} pooling, server_lifetime 1 s, {})",
            args.pool_mode,
            pg_lock_name(&args)
        ),
        Backend::Postgres => format!("one PostgreSQL server ({})", pg_lock_name(&args)),
    };
    eprintln!(
        "[check] {} workers, backend: {}, lock: {}, ttl {:?}, work {:?} (x0.5..1.5), faults {:?}, seed {}, register: {}",
        args.workers,
        backend.name(),
        lock_shown,
        args.ttl,
        args.work,
        args.faults,
        args.seed,
        args.register,
    );

    if backend == Backend::Etcd
        && (args.ttl < Duration::from_secs(2) || args.ttl.subsec_nanos() != 0)
    {
        eprintln!(
            "[check] note: etcd leases are whole seconds, at least 2 s with etcd's default \
             election timeout: the workers' leases last longer than --ttl {:?} (the faults \
             and the analysis still count in --ttl)",
            args.ttl
        );
    }

    let t0 = now_ms();
    let end = t0 + args.duration.as_secs_f64() * 1000.0;
    let mut rng = Rng::new(args.seed);
    let ttl = args.ttl;
    let ttl_ms = ttl.as_secs_f64() * 1000.0;
    let mut injector = Injector::new(ttl);
    let mut kinds = args.faults.iter().cycle();
    while now_ms() < end {
        // Let the lock change hands a few times between faults.
        tokio::time::sleep(Duration::from_millis(
            2 * ttl_ms as u64 + rng.next() % (ttl_ms as u64 + 1),
        ))
        .await;
        if now_ms() >= end {
            break;
        }
        if let Some(kind) = kinds.next() {
            injector
                .inject(kind, &mut lock, &mut fleet, &holders, &mut rng)
                .await?;
        }
    }

    std::fs::write(logs.join("stop"), "")?;
    let run_end = now_ms();
    let worker_errors = fleet.stop(args.work * 2 + ttl).await?;
    // Every worker finished its last critical section and released: nothing should hold the
    // lock now. An entry left behind (a release that failed and was never retried) stays
    // until its lease or TTL runs out, or for ever while its session lives.
    let lock_free_at_end = lock.holder_token().await.is_none();
    let faults = injector.faults;
    let final_value = register.value().await?;
    let a = analyze::analyze(&logs, final_value, &faults, ttl_ms, now_ms())?;
    // Two literals: one is past serde_json::json!'s recursion limit.
    let settings = json!({
        "backend": backend.name(),
        "workers": args.workers,
        // Redis only: the other backends run their own servers (`nodes`: how many).
        "topology": (backend == Backend::Redis).then_some(args.topology_name()),
        "nodes": backend.lock_nodes(&args), "duration_ms": args.duration.as_millis() as u64,
        "ttl_ms": args.ttl.as_millis() as u64, "work_ms": args.work.as_millis() as u64,
        "faults": args.faults, "seed": args.seed, "register": args.register,
        "release": args.release, "fencing": !args.no_fencing, "server": server_label,
        "replica_ack": args.replica_ack, "raise_counter": raises_counter(&args),
        "fair": args.fair,
        "auto_extend": slow_link(&args),
        "permits": args.permits,
        "rw": args.rw,
        "multi": args.multi,
        "elect": args.elect,
        "pooler": args.pooler,
        "pool_mode": args.pooler.is_some().then_some(&args.pool_mode),
        "pg_lock": (backend == Backend::Postgres).then(|| pg_lock_name(&args)),
    });
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
        "max_holders": a.max_holders,
        "max_valid_holders": a.max_valid_holders,
        "writes_acknowledged": a.writes_acknowledged,
        "writes_in_doubt": a.writes_in_doubt,
        "writes_in_doubt_applied": a.writes_in_doubt_applied,
        "register_final_value": final_value,
        "lock_errors": a.lock_errors,
        "lock_refusals": a.lock_refusals,
        "lock_free_at_end": lock_free_at_end,
        "worker_errors": worker_errors,
        "per_fault": a.per_fault,
        "faults": faults,
        "settings": settings,
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
    // Session locks through a transaction pooler: the library must refuse every one (the
    // next client of the same server session would be granted it too).
    let pooled_session_locks = backend == Backend::Postgres
        && args.pooler.is_some()
        && args.pool_mode == "transaction"
        && !postgres::lease_rows(&args);
    if pooled_session_locks {
        println!(
            "session locks through a transaction pooler: {} refused, {} granted (must be 0)",
            a.lock_refusals, a.acquisitions
        );
    }
    let violated = pooled_session_locks && a.acquisitions > 0
        || !args.no_fencing && (a.stale_writes_accepted > 0 || a.lost_increments != 0)
        || args
            .permits
            .is_some_and(|n| a.max_valid_holders > u64::from(n))
        || ((args.rw || args.multi) && a.overlaps_within_ttl > 0);
    if let Some(n) = args.permits {
        println!(
            "semaphore of {n} permits: at most {} holders at once, {} of them with a valid permit",
            a.max_holders, a.max_valid_holders
        );
    }
    Ok(if violated || !worker_errors.is_empty() {
        std::process::ExitCode::from(1)
    } else {
        std::process::ExitCode::SUCCESS
    })
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
        "| all | {} | {} | {} | {} | {} |\noperations: {}, stale reads rejected: {}, lock errors: {} (refused: {})\nlost increments: {} (acknowledged writes {}, in doubt {} of which applied {}), longest gap with nobody holding: {:.0} ms\nreport: {}, timeline: {}",
        a.acquisitions,
        a.overlaps,
        a.overlaps_within_ttl,
        a.stale_writes_attempted,
        a.stale_writes_accepted,
        a.operations,
        a.stale_reads_rejected,
        a.lock_errors,
        a.lock_refusals,
        a.lost_increments,
        a.writes_acknowledged,
        a.writes_in_doubt,
        a.writes_in_doubt_applied,
        a.max_gap_ms,
        out.join("report.json").display(),
        out.join("timeline.svg").display()
    );
}
