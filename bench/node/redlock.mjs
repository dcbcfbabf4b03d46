#!/usr/bin/env node
// leasehold benchmark adapter for redlock 5.0.0-beta.2 on ioredis 5 (npm).
//
//   node bench/node/redlock.mjs --url redis://127.0.0.1:PORT/ --workload W1|W2|W3|W4 [--tuned]
//        [--key-prefix P] [--urls URL,URL,...] [--duration SECS] [--cycles N] [--warmup N]
//
// Prints one JSON object on stdout. The packages are installed by bench/install-peers into
// ${XDG_CACHE_HOME:-$HOME/.cache}/leasehold/bench/node (not into the repository); set
// LEASEHOLD_BENCH_NODE_DIR to use another directory. See bench/README.md.
//
// One process, one event loop: the W2/W3 "tasks" are async functions sharing one Redlock
// instance and one ioredis client (one connection) per node. W3's 1 ms hold is a busy-wait,
// which blocks the event loop for that millisecond (the other workers are waiting anyway).

import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { homedir } from "node:os";
import { performance } from "node:perf_hooks";

const SYSTEM = "node-redlock";
const TTL_MS = 10_000;
const HOLD_MS = 1;
const W2_TASKS = 64;
const W3_WORKERS = 16;
// redlock 5.0.0-beta.2 defaults (dist/esm/index.js): retryCount 10, retryDelay 200 ms,
// retryJitter 100 ms -> each wait is retryDelay + floor(U(-1,1) * retryJitter), i.e. [100, 300) ms.
const DEFAULTS = { retryCount: 10, retryDelay: 200, retryJitter: 100 };
const TUNED = { retryDelay: 10, retryJitter: 5 };

function usage() {
  return (
    "usage: redlock.mjs --url redis://127.0.0.1:PORT/ --workload W1|W2|W3|W4 [--tuned] " +
    "[--key-prefix P] [--urls URL,URL,...] [--duration SECS] [--cycles N] [--warmup N]"
  );
}

class UsageError extends Error {}

function parseArgs(argv) {
  const a = {
    url: null,
    urls: [],
    workload: null,
    tuned: false,
    keyPrefix: `bench:${SYSTEM}:${process.pid}:${Date.now()}`,
    duration: null,
    cycles: null,
    warmup: 200,
  };
  for (let i = 0; i < argv.length; i++) {
    let flag = argv[i];
    let inline = null;
    if (flag.startsWith("--") && flag.includes("=")) {
      inline = flag.slice(flag.indexOf("=") + 1);
      flag = flag.slice(0, flag.indexOf("="));
    }
    const value = () => {
      if (inline !== null) return inline;
      if (i + 1 >= argv.length) throw new UsageError(`${flag} needs a value`);
      return argv[++i];
    };
    switch (flag) {
      case "--url": a.url = value(); break;
      case "--urls": a.urls = value().split(",").map((s) => s.trim()).filter(Boolean); break;
      case "--workload": a.workload = value().toUpperCase(); break;
      case "--tuned": a.tuned = true; break;
      case "--key-prefix": a.keyPrefix = value(); break;
      case "--duration": a.duration = Number(value()); break;
      case "--cycles": a.cycles = parseInt(value(), 10); break;
      case "--warmup": a.warmup = parseInt(value(), 10); break;
      case "-h": case "--help": throw new UsageError(usage());
      default: throw new UsageError(`unknown argument ${JSON.stringify(flag)}\n${usage()}`);
    }
  }
  if (!["W1", "W2", "W3", "W4"].includes(a.workload)) throw new UsageError(`--workload must be W1..W4\n${usage()}`);
  if (a.workload === "W4" ? a.urls.length === 0 : !a.url) {
    throw new UsageError(a.workload === "W4" ? "W4 needs --urls URL,URL,..." : "--url is required");
  }
  return a;
}

// Loads a package from the cache's node_modules (ESM ignores NODE_PATH), or from next to this
// file if someone installed it there.
function nodeModulesDir() {
  const candidates = [];
  if (process.env.LEASEHOLD_BENCH_NODE_DIR) candidates.push(join(process.env.LEASEHOLD_BENCH_NODE_DIR, "node_modules"));
  const cache = process.env.XDG_CACHE_HOME || join(homedir(), ".cache");
  candidates.push(join(cache, "leasehold", "bench", "node", "node_modules"));
  candidates.push(join(new URL(".", import.meta.url).pathname, "node_modules"));
  for (const c of candidates) if (existsSync(join(c, "redlock", "package.json"))) return c;
  throw new Error(`redlock is not installed (looked in ${candidates.join(", ")}): run bench/install-peers`);
}

async function loadPackage(dir, name) {
  const pkg = JSON.parse(readFileSync(join(dir, name, "package.json"), "utf8"));
  const exp = pkg.exports && pkg.exports["."];
  const entry = (exp && (exp.import || exp.default || (typeof exp === "string" ? exp : null))) || pkg.main || "index.js";
  const mod = await import(pathToFileURL(join(dir, name, entry)).href);
  return { mod, version: String(pkg.version).replace(/^v/, "") };
}

const nowNs = () => process.hrtime.bigint(); // monotonic

function pctUs(sortedNs, q) {
  const n = sortedNs.length;
  if (n === 0) return 0;
  const rank = Math.min(Math.max(Math.ceil(q * n), 1), n);
  return Math.round(Number(sortedNs[rank - 1]) / 100) / 10;
}

// [latency_us, q] at q = 0.01, 0.02, ..., 1.00: the nearest-rank value at each quantile (rank
// computed in integers, so exact); [] without samples.
function cdfUs(sortedNs) {
  const n = sortedNs.length;
  if (n === 0) return [];
  const out = [];
  for (let k = 1; k <= 100; k++) {
    const rank = Math.min(Math.max(Math.ceil((k * n) / 100), 1), n);
    out.push([Math.round(Number(sortedNs[rank - 1]) / 100) / 10, k / 100]);
  }
  return out;
}

const sortBig = (arr) => arr.sort((x, y) => (x < y ? -1 : x > y ? 1 : 0));

function retrySettings(a, waitForever) {
  const s = a.tuned ? TUNED : { retryDelay: DEFAULTS.retryDelay, retryJitter: DEFAULTS.retryJitter };
  const lo = Math.max(0, s.retryDelay - s.retryJitter);
  const hi = s.retryDelay + s.retryJitter;
  return {
    retryCount: waitForever ? -1 : DEFAULTS.retryCount,
    retryDelay: s.retryDelay,
    retryJitter: s.retryJitter,
    delay_distribution: `retryDelay + floor(U(-1,1) * retryJitter): [${lo}, ${hi}) ms between tries`,
    default: "retryCount 10, retryDelay 200 ms, retryJitter 100 ms ([100, 300) ms)",
    waiting: "W3: retryCount -1 (forever); W1/W2/W4: the default retryCount 10 (fresh keys, no retries)",
  };
}

async function main() {
  const a = parseArgs(process.argv.slice(2));
  const dir = nodeModulesDir();
  const { mod: redlockMod, version } = await loadPackage(dir, "redlock");
  const { mod: ioredisMod, version: ioredisVersion } = await loadPackage(dir, "ioredis");
  const Redlock = redlockMod.default;
  const Redis = ioredisMod.default?.default ?? ioredisMod.default ?? ioredisMod.Redis;

  const urls = a.workload === "W4" ? a.urls : [a.url];
  const waitForever = a.workload === "W3";
  const rs = retrySettings(a, waitForever);
  const clients = urls.map((u) => new Redis(u, { lazyConnect: true }));
  await Promise.all(clients.map((c) => c.connect()));
  const redlock = new Redlock(clients, {
    retryCount: rs.retryCount,
    retryDelay: rs.retryDelay,
    retryJitter: rs.retryJitter,
  });

  const base = {
    system: SYSTEM,
    workload: a.workload,
    version,
    client: `ioredis ${ioredisVersion}, one Redlock instance with one ioredis client (one connection) per node, shared by all tasks`,
    runtime: `node ${process.version}, async tasks on one event loop`,
    api: "new Redlock(clients, settings).acquire([key], ttl_ms) -> lock.release()",
    urls,
    key_prefix: a.keyPrefix,
    ttl_ms: TTL_MS,
    warmup_cycles: a.warmup,
    retry: a.tuned ? "10ms" : "default",
    retry_settings: rs,
  };

  try {
    for (let i = 0; i < Math.max(a.warmup, 1); i++) {
      const lock = await redlock.acquire([`${a.keyPrefix}:warmup:${i}`], TTL_MS, { retryCount: 0 });
      await lock.release();
    }
    let out;
    if (a.workload === "W1" || a.workload === "W4") out = await sequential(a, redlock, a.workload === "W1" ? 20_000 : 2_000);
    else if (a.workload === "W2") out = await throughput(a, redlock);
    else out = await contention(a, redlock);
    console.log(JSON.stringify({ ...base, nodes: urls.length, ...out }));
  } finally {
    await Promise.allSettled(clients.map((c) => c.quit()));
  }
}

async function sequential(a, redlock, defaultCycles) {
  const cycles = a.cycles ?? defaultCycles;
  const tag = a.workload.toLowerCase();
  const lat = [];
  let errors = 0;
  const start = nowNs();
  for (let i = 0; i < cycles; i++) {
    const t0 = nowNs();
    try {
      const lock = await redlock.acquire([`${a.keyPrefix}:${tag}:${i}`], TTL_MS);
      await lock.release();
      lat.push(nowNs() - t0);
    } catch (e) {
      errors++;
      if (errors <= 3) console.error(`${SYSTEM} ${a.workload}: ${e}`);
    }
  }
  const elapsed = Number(nowNs() - start) / 1e9;
  sortBig(lat);
  return {
    tasks: 1,
    cycles,
    ok: lat.length,
    errors,
    elapsed_s: elapsed,
    ops_per_s: Math.round((lat.length / elapsed) * 10) / 10,
    p50_us: pctUs(lat, 0.5),
    p99_us: pctUs(lat, 0.99),
    ...(a.workload === "W1" ? { cdf: cdfUs(lat) } : {}),
  };
}

async function throughput(a, redlock) {
  const duration = a.duration ?? 10;
  const start = nowNs();
  const deadline = start + BigInt(Math.round(duration * 1e9));
  let ok = 0;
  let errors = 0;
  const task = async (t) => {
    for (let i = 0; nowNs() < deadline; i++) {
      try {
        const lock = await redlock.acquire([`${a.keyPrefix}:w2:${t}:${i}`], TTL_MS);
        await lock.release();
        ok++;
      } catch (e) {
        errors++;
        if (errors <= 3) console.error(`${SYSTEM} W2: ${e}`);
      }
    }
  };
  await Promise.all(Array.from({ length: W2_TASKS }, (_, t) => task(t)));
  const elapsed = Number(nowNs() - start) / 1e9;
  return {
    tasks: W2_TASKS,
    duration_s: duration,
    elapsed_s: elapsed,
    ok,
    errors,
    ops_per_s: Math.round((ok / elapsed) * 10) / 10,
  };
}

function busyHold() {
  const end = nowNs() + BigInt(HOLD_MS * 1e6);
  let t = nowNs();
  while (t < end) t = nowNs();
  return t;
}

async function contention(a, redlock) {
  const duration = a.duration ?? 10;
  const key = `${a.keyPrefix}:w3`;
  const records = []; // [acquired, worker, waitStart, released]
  let errors = 0;
  const start = nowNs();
  const deadline = start + BigInt(Math.round(duration * 1e9));
  const worker = async (w) => {
    while (nowNs() < deadline) {
      const waitStart = nowNs();
      let lock;
      try {
        lock = await redlock.acquire([key], TTL_MS);
      } catch (e) {
        errors++;
        if (errors <= 3) console.error(`${SYSTEM} W3: ${e}`);
        continue;
      }
      const acquired = nowNs();
      const released = busyHold();
      try {
        await lock.release();
      } catch (e) {
        errors++;
        if (errors <= 3) console.error(`${SYSTEM} W3 release: ${e}`);
      }
      records.push([acquired, w, waitStart, released]);
    }
  };
  await Promise.all(Array.from({ length: W3_WORKERS }, (_, w) => worker(w)));
  const drained = nowNs();
  records.sort((x, y) => (x[0] < y[0] ? -1 : x[0] > y[0] ? 1 : 0));
  return {
    workers: W3_WORKERS,
    hold_target_us: HOLD_MS * 1000,
    hold_method: "busy-wait on process.hrtime.bigint() (blocks the event loop for the hold)",
    duration_s: duration,
    drain_ms: Math.round(Number(drained - deadline) / 1e5) / 10,
    errors,
    ...contentionStats(records, start, deadline),
  };
}

// Counts, handoffs and holds over the acquisitions made before the deadline; waits are counted
// to their completion, also past the deadline (the stragglers drain after it).
function contentionStats(all, start, deadline) {
  const win = all.filter((x) => x[0] <= deadline);
  const perWorker = new Array(W3_WORKERS).fill(0);
  const handoffs = [];
  let same = 0;
  let holds = 0n;
  win.forEach(([acq, w, , rel], i) => {
    perWorker[w]++;
    holds += rel - acq;
    if (i > 0) {
      const [, pw, , prel] = win[i - 1];
      if (pw === w) same++;
      else handoffs.push(acq > prel ? acq - prel : 0n);
    }
  });
  sortBig(handoffs);
  const n = win.length;
  let maxWait = 0n;
  for (const [acq, , ws] of all) if (acq - ws > maxWait) maxWait = acq - ws;
  const window = Number(deadline - start) / 1e9;
  return {
    acquisitions: n,
    ops_per_s: Math.round((n / window) * 10) / 10,
    handoffs: handoffs.length,
    handoff_p50_us: pctUs(handoffs, 0.5),
    handoff_p99_us: pctUs(handoffs, 0.99),
    cdf: cdfUs(handoffs),
    same_worker_rate: n > 1 ? Math.round((same / (n - 1)) * 1e4) / 1e4 : 0,
    min_per_worker: Math.min(...perWorker),
    max_per_worker: Math.max(...perWorker),
    per_worker: perWorker,
    max_wait_ms: Math.round(Number(maxWait) / 1e5) / 10,
    hold_us_mean: n ? Math.round(Number(holds / BigInt(n)) / 100) / 10 : 0,
  };
}

main().then(
  () => process.exit(0),
  (e) => {
    if (e instanceof UsageError) {
      // A bad command line: stderr only, exit 2 (as the other adapters).
      console.error(`redlock.mjs: ${e.message}`);
      process.exit(2);
    }
    console.error(`${SYSTEM}: ${e && e.stack ? e.stack : e}`);
    const i = process.argv.indexOf("--workload");
    const workload = i > 0 ? (process.argv[i + 1] || "").toUpperCase() : null;
    console.log(JSON.stringify({ system: SYSTEM, workload, error: String(e && e.message ? e.message : e) }));
    process.exit(1);
  },
);
