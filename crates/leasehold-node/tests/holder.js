#!/usr/bin/env node
// A Node process holding a lock, for the cross-language tests (the Python suite's and this
// package's): `node tests/holder.js URL KEY MODE`. Takes KEY with fencing (ttl 2 s,
// auto-extended), prints one JSON line {"fence": N, "token": "..."}, then with MODE `release`
// releases and exits, with MODE `hold` keeps it (renewed) until killed.
'use strict';
const { Locker } = require('..');

async function main() {
  const [url, key, mode] = process.argv.slice(2);
  const locks = await Locker.connect(url);
  const lease = await locks.lock(key, { ttl: 2_000, autoExtend: true, fencing: true, wait: 60_000 });
  process.stdout.write(`${JSON.stringify({ fence: lease.fence, token: lease.token })}\n`);
  if (mode === 'release') {
    await lease.release();
    return;
  }
  // Held until killed: reading the signal keeps the event loop alive while the lease is held.
  await new Promise((resolve) => lease.signal.addEventListener('abort', resolve));
}

main().catch((e) => {
  process.stderr.write(`${e.stack || e}\n`);
  process.exit(1);
});
