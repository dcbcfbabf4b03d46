#!/usr/bin/env node
// Runs the package's compiled tests (tsc's output in BUILD, default build/tests) with
// `node --test`, against servers it starts through the harness's leasehold-serve (one of
// each, shared by every test file, stopped at the end), and prints one line: how many passed,
// failed and skipped (counted from node's JUnit report), and how many passed per backend.
// Under CI (CI=true) a server that is not installed, a skipped test or a backend with no
// passing test fails the run. Exit status: 0 if all is well.
'use strict';
const { spawn, spawnSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const readline = require('node:readline');

const here = path.resolve(__dirname, '..');
const SERVE = process.env.LEASEHOLD_SERVE;
const BUILD = process.env.BUILD || path.join(here, 'build');
const LOG = process.env.LOG || path.join(os.tmpdir(), 'leasehold-node-tests.log');
const CI = process.env.CI === 'true';
const SERVERS = ['redis7', 'redis8', 'valkey9', 'etcd', 'postgres'];
const say = (m) => process.stderr.write(`[test-node] ${m}\n`);

/** Starts `name` through leasehold-serve: its URL, or null if not installed (exit 3). */
function start(name) {
  return new Promise((resolve, reject) => {
    const proc = spawn(SERVE, [name], { stdio: ['pipe', 'pipe', 'inherit'] });
    const lines = readline.createInterface({ input: proc.stdout });
    let url = null;
    lines.once('line', (line) => {
      url = line.trim();
      resolve({ proc, url });
    });
    proc.once('exit', (code) => {
      if (url !== null) return;
      if (code === 3 && !CI) resolve(null);
      else reject(new Error(`${name}: leasehold-serve exited with ${code}`));
    });
  });
}

async function main() {
  if (!SERVE) throw new Error('LEASEHOLD_SERVE (the harness binary) is not set');
  const running = [];
  const urls = {};
  try {
    for (const name of SERVERS) {
      const s = await start(name);
      if (s === null) {
        say(`${name} is not installed: its tests are left out`);
        continue;
      }
      running.push(s);
      urls[name] = s.url;
    }
    // `require('leasehold')` in the compiled tests resolves to this package.
    const modules = fs.mkdtempSync(path.join(os.tmpdir(), 'leasehold-node-modules-'));
    fs.symlinkSync(here, path.join(modules, 'leasehold'), 'dir');
    const files = fs.readdirSync(path.join(BUILD, 'tests'))
      .filter((f) => f.endsWith('.test.js'))
      .map((f) => path.join(BUILD, 'tests', f));
    const junit = path.join(modules, 'results.xml');
    const out = fs.openSync(LOG, 'w');
    const run = spawnSync(process.execPath, [
      '--test', '--test-reporter=spec', '--test-reporter-destination=stdout',
      '--test-reporter=junit', `--test-reporter-destination=${junit}`, ...files,
    ], {
      stdio: ['ignore', out, out],
      env: {
        ...process.env,
        // `leasehold` itself, then the test tools (NODE_TOOLS: node-redlock, ioredis).
        NODE_PATH: [modules, process.env.NODE_TOOLS].filter(Boolean).join(path.delimiter),
        LEASEHOLD_NODE_URLS: JSON.stringify(urls),
        // tests/gc.test.ts collects garbage on purpose.
        NODE_OPTIONS: [process.env.NODE_OPTIONS, '--expose-gc'].filter(Boolean).join(' '),
      },
    });
    fs.closeSync(out);
    const xml = fs.existsSync(junit) ? fs.readFileSync(junit, 'utf8') : '';
    fs.rmSync(modules, { recursive: true, force: true });
    return summarise(xml, run.status, Object.keys(urls));
  } finally {
    for (const s of running) s.proc.stdin.end();
    await Promise.all(running.map((s) => new Promise((r) => {
      if (s.proc.exitCode !== null) r();
      else s.proc.once('exit', r);
    })));
  }
}

/** The one line, from the JUnit report's test cases (not from progress output). */
function summarise(xml, status, servers) {
  let passed = 0;
  let failed = 0;
  let skipped = 0;
  const perBackend = Object.fromEntries(['memory', ...servers].map((b) => [b, 0]));
  // Each <testcase .../> or <testcase ...>...</testcase>.
  const cases = xml.match(/<testcase\b[^>]*?(\/>|>[\s\S]*?<\/testcase>)/g) || [];
  for (const c of cases) {
    const name = (c.match(/name="([^"]*)"/) || [])[1] || '';
    if (/<failure\b|<error\b/.test(c)) failed++;
    else if (/<skipped\b/.test(c)) skipped++;
    else {
      passed++;
      const b = (name.match(/\[([a-z0-9]+)\]$/) || [])[1];
      if (b in perBackend) perBackend[b]++;
    }
  }
  const backends = Object.entries(perBackend).map(([b, n]) => `${b} ${n}`).join(', ');
  console.log(`node: ${passed} passed, ${failed} failed, ${skipped} skipped (${backends})`);
  let ok = status === 0 && failed === 0 && cases.length > 0;
  if (status !== 0) say(`node --test exited with ${status} (log: ${LOG})`);
  if (CI && skipped > 0) {
    say('under CI a skipped test fails the run');
    ok = false;
  }
  for (const [b, n] of Object.entries(perBackend)) {
    if (n === 0) {
      say(`no test passed against ${b}`);
      ok = false;
    }
  }
  return ok;
}

main().then(
  (ok) => process.exit(ok ? 0 : 1),
  (e) => {
    say(e.stack || String(e));
    process.exit(1);
  },
);
