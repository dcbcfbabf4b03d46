#!/usr/bin/env node
// Builds the native addon from source with cargo and puts it beside index.js as
// leasehold.node (what `npm install` and `npm run build` run). `--release` for an optimised
// build (benchmarks); the default is cargo's dev profile, which reuses the dependencies the
// workspace's tests already compiled.
'use strict';
const { execFileSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');

const release = process.argv.includes('--release');
const here = __dirname;
const say = (m) => process.stderr.write(`[leasehold build] ${m}\n`);
const args = ['build', '-p', 'leasehold-node', '--message-format', 'json-render-diagnostics'];
if (release) args.push('--release');
say(`cargo ${args.join(' ')}`);
const out = execFileSync('cargo', args, {
  cwd: here,
  stdio: ['ignore', 'pipe', 'inherit'],
  maxBuffer: 256 * 1024 * 1024,
}).toString();
// The library cargo built, from its own report (wherever CARGO_TARGET_DIR points).
let built = null;
for (const line of out.split('\n')) {
  if (!line.startsWith('{')) continue;
  const msg = JSON.parse(line);
  if (msg.reason === 'compiler-artifact' && msg.target && msg.target.name === 'leasehold_node') {
    built = msg.filenames.find((f) => /\.(so|dylib|dll)$/.test(f)) || built;
  }
}
if (!built) {
  say('cargo reported no leasehold_node library');
  process.exit(1);
}
const dest = path.join(here, 'leasehold.node');
// Copied to a fresh file, then renamed: a running process keeps its mapping of the old one.
fs.copyFileSync(built, `${dest}.tmp`);
fs.renameSync(`${dest}.tmp`, dest);
say(`${path.relative(process.cwd(), built)} -> ${path.relative(process.cwd(), dest)}`);
