// The workloads and statistics the Node adapters share (redlock.mjs, leasehold.mjs): argument
// parsing, W1/W4 (sequential cycles), W2 (64 tasks on distinct keys), W3 (16 workers on one key
// with a 1 ms busy-wait hold), percentiles and CDFs, and the one JSON object an adapter prints.
// An adapter calls `run(name, system, open)`: `open(args)` connects and returns
// { base, acquire(key, { waitForever, warmup }), release(lock), close() } (`base`: the fields
// that describe it), or { skipped: reason } for a workload it does not run. See bench/README.md.

export const TTL_MS = 10_000;
export const HOLD_MS = 1;
export const W2_TASKS = 64;
export const W3_WORKERS = 16;


function usage(name) {
  return (
    `usage: ${name}` + " --url redis://127.0.0.1:PORT/ --workload W1|W2|W3|W4 [--tuned] " +
    "[--key-prefix P] [--urls URL,URL,...] [--duration SECS] [--cycles N] [--warmup N]"
  );
}

export class UsageError extends Error {}

function parseArgs(argv, name, system) {
  const a = {
    url: null,
    urls: [],
    workload: null,
    tuned: false,
    keyPrefix: `bench:${system}:${process.pid}:${Date.now()}`,
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
      case "-h": case "--help": throw new UsageError(usage(name));
      default: throw new UsageError(`unknown argument ${JSON.stringify(flag)}\n${usage(name)}`);
    }
  }
  if (!["W1", "W2", "W3", "W4"].includes(a.workload)) throw new UsageError(`--workload must be W1..W4\n${usage(name)}`);
  if (a.workload === "W4" ? a.urls.length === 0 : !a.url) {
    throw new UsageError(a.workload === "W4" ? "W4 needs --urls URL,URL,..." : "--url is required");
  }
  return a;
}

// Loads a package from the cache's node_modules (ESM ignores NODE_PATH), or from next to this
// file if someone installed it there.
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

async function sequential(a, client, defaultCycles) {
  const cycles = a.cycles ?? defaultCycles;
  const tag = a.workload.toLowerCase();
  const lat = [];
  let errors = 0;
  const start = nowNs();
  for (let i = 0; i < cycles; i++) {
    const t0 = nowNs();
    try {
      const lock = await client.acquire(`${a.keyPrefix}:${tag}:${i}`, {});
      await client.release(lock);
      lat.push(nowNs() - t0);
    } catch (e) {
      errors++;
      if (errors <= 3) console.error(`${client.system} ${a.workload}: ${e}`);
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

async function throughput(a, client) {
  const duration = a.duration ?? 10;
  const start = nowNs();
  const deadline = start + BigInt(Math.round(duration * 1e9));
  let ok = 0;
  let errors = 0;
  const task = async (t) => {
    for (let i = 0; nowNs() < deadline; i++) {
      try {
        const lock = await client.acquire(`${a.keyPrefix}:w2:${t}:${i}`, {});
        await client.release(lock);
        ok++;
      } catch (e) {
        errors++;
        if (errors <= 3) console.error(`${client.system} W2: ${e}`);
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

async function contention(a, client) {
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
        lock = await client.acquire(key, { waitForever: true });
      } catch (e) {
        errors++;
        if (errors <= 3) console.error(`${client.system} W3: ${e}`);
        continue;
      }
      const acquired = nowNs();
      const released = busyHold();
      try {
        await client.release(lock);
      } catch (e) {
        errors++;
        if (errors <= 3) console.error(`${client.system} W3 release: ${e}`);
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


/** Runs the workload the command line names with the adapter `open` makes; prints its JSON. */
export function run(name, system, open) {
  main(name, system, open).then(
    () => process.exit(0),
    (e) => {
      if (e instanceof UsageError) {
        // A bad command line: stderr only, exit 2 (as the other adapters).
        console.error(`${name}: ${e.message}`);
        process.exit(2);
      }
      console.error(`${system}: ${e && e.stack ? e.stack : e}`);
      const i = process.argv.indexOf("--workload");
      const workload = i > 0 ? (process.argv[i + 1] || "").toUpperCase() : null;
      console.log(JSON.stringify({ system, workload, error: String(e && e.message ? e.message : e) }));
      process.exit(1);
    },
  );
}

async function main(name, system, open) {
  const a = parseArgs(process.argv.slice(2), name, system);
  const client = await open(a);
  if (client.skipped) {
    console.log(JSON.stringify({ system, workload: a.workload, skipped: client.skipped }));
    return;
  }
  client.system = system;
  try {
    for (let i = 0; i < Math.max(a.warmup, 1); i++) {
      const lock = await client.acquire(`${a.keyPrefix}:warmup:${i}`, { warmup: true });
      await client.release(lock);
    }
    let out;
    if (a.workload === "W1" || a.workload === "W4") out = await sequential(a, client, a.workload === "W1" ? 20_000 : 2_000);
    else if (a.workload === "W2") out = await throughput(a, client);
    else out = await contention(a, client);
    console.log(JSON.stringify({ system, workload: a.workload, ...client.base, key_prefix: a.keyPrefix, ttl_ms: TTL_MS, warmup_cycles: a.warmup, ...out }));
  } finally {
    await client.close();
  }
}
