#!/usr/bin/env node
// leasehold benchmark adapter for leasehold-node, the Node.js package of this repository
// (crates/leasehold-node: the Rust library under napi-rs), its addon built in release mode and
// copied with the package's JavaScript by bench/install-peers into
// ${XDG_CACHE_HOME:-$HOME/.cache}/leasehold/bench/leasehold-node (LEASEHOLD_BENCH_NODE_PACKAGE
// to use another copy).
//
//   node bench/node/leasehold.mjs --url redis://127.0.0.1:PORT/ --workload W1|W2|W3 [--tuned]
//        [--key-prefix P] [--duration SECS] [--cycles N] [--warmup N]
//
// Acquire: the Rust library's acquisition (SET NX PX; with fencing off, one round trip) on the
// addon's tokio runtime, the promise settled on the event loop. W3 waits with fair: true:
// waiters queue on the server and a release hands the lock to the next one (no retry delay to
// tune, so `--tuned` W3 is skipped). Release: DELEX IFEQ on Redis >= 8.4 (else a Lua script).
// One Locker shared by all tasks. W4 is skipped. See bench/README.md.

import { existsSync } from "node:fs";
import { createRequire } from "node:module";
import { homedir } from "node:os";
import { join } from "node:path";

import { TTL_MS, run } from "./benchcommon.mjs";

const FOREVER_MS = 24 * 3600 * 1000;

function packageDir() {
  const cache = process.env.XDG_CACHE_HOME || join(homedir(), ".cache");
  const dir = process.env.LEASEHOLD_BENCH_NODE_PACKAGE || join(cache, "leasehold", "bench", "leasehold-node");
  if (!existsSync(join(dir, "leasehold.node"))) {
    throw new Error(`leasehold-node is not installed in ${dir}: run bench/install-peers`);
  }
  return dir;
}

/**
 * What the binding alone costs a W1 cycle: the same lock and release on `memory://`, where
 * the Rust side does no I/O, so a cycle is two handoffs to the addon's runtime and back (and
 * the library's in-process bookkeeping). p50 over 5 000 cycles, after 500 to warm up.
 */
async function bindingFloor(Locker) {
  const locks = await Locker.connect("memory://");
  const lat = [];
  for (let i = 0; i < 5_500; i++) {
    const t0 = process.hrtime.bigint();
    const lease = await locks.lock(`floor:${i}`, { ttl: TTL_MS });
    await lease.release();
    if (i >= 500) lat.push(Number(process.hrtime.bigint() - t0) / 1e3);
  }
  lat.sort((x, y) => x - y);
  return {
    what: "W1 on memory:// (no I/O): two handoffs to the runtime and back a cycle",
    p50_us: Math.round(lat[Math.floor(lat.length / 2)] * 10) / 10,
  };
}

async function open(a) {
  if (a.workload === "W4") return { skipped: "leasehold-node: W4 (Redlock over N nodes) is the Rust library's own row" };
  if (a.workload === "W3" && a.tuned) {
    return { skipped: "leasehold-node's W3 is fair: waiters are handed the lock in order by the release, there is no retry delay to tune" };
  }
  const dir = packageDir();
  const require = createRequire(join(dir, "index.js"));
  const { Locker, NotAcquiredError } = require(dir);
  const { version } = require(join(dir, "package.json"));
  const locks = await Locker.connect(a.url);
  return {
    base: {
      ...(a.workload === "W1" ? { binding_floor: await bindingFloor(Locker) } : {}),
      version,
      client: "leasehold Locker (the Rust library's multiplexed connection, on the addon's tokio runtime)",
      runtime: `node ${process.version}, async tasks on one event loop`,
      api: "await Locker.connect(url); await locks.lock(key, { ttl, wait, fair }) -> lease.release()",
      urls: [a.url],
      retry: "none",
      retry_settings: {
        delay_distribution: "none in W3: fair queues the waiter on the server and the release hands the lock over; W1/W2: one try",
        default: "no wait (one try); fair: false",
        waiting: "W3: wait 24 h, fair: true",
      },
      key_naming: "<key> (and {<key>}:queue, the fair waiters)",
      nodes: 1,
    },
    acquire: async (key, { waitForever } = {}) => {
      try {
        return await locks.lock(key, waitForever ? { ttl: TTL_MS, wait: FOREVER_MS, fair: true } : { ttl: TTL_MS });
      } catch (e) {
        if (e instanceof NotAcquiredError) throw new Error(`busy: ${key}`);
        throw e;
      }
    },
    release: (lease) => lease.release(),
    close: async () => {},
  };
}

run("leasehold.mjs", "leasehold-node", open);
