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

import { TTL_MS, run } from "./benchcommon.mjs";

const SYSTEM = "node-redlock";
// redlock 5.0.0-beta.2 defaults (dist/esm/index.js): retryCount 10, retryDelay 200 ms,
// retryJitter 100 ms -> each wait is retryDelay + floor(U(-1,1) * retryJitter), i.e. [100, 300) ms.
const DEFAULTS = { retryCount: 10, retryDelay: 200, retryJitter: 100 };
const TUNED = { retryDelay: 10, retryJitter: 5 };

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

async function open(a) {
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
  return {
    base: {
      version,
      client: `ioredis ${ioredisVersion}, one Redlock instance with one ioredis client (one connection) per node, shared by all tasks`,
      runtime: `node ${process.version}, async tasks on one event loop`,
      api: "new Redlock(clients, settings).acquire([key], ttl_ms) -> lock.release()",
      urls,
      retry: a.tuned ? "10ms" : "default",
      retry_settings: rs,
      nodes: urls.length,
    },
    acquire: (key, { warmup } = {}) => redlock.acquire([key], TTL_MS, warmup ? { retryCount: 0 } : undefined),
    release: (lock) => lock.release(),
    close: () => Promise.allSettled(clients.map((c) => c.quit())),
  };
}

run("redlock.mjs", SYSTEM, open);
