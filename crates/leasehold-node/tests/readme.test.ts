// The README's and the guide's TypeScript examples (extracted by tests/examples.js, compiled
// by tsc --strict with the tests) run against a real Redis (redis 8).
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';

import { BACKENDS, url } from './servers';

const dir = path.join(__dirname, '..', 'readme-examples');
const modules = fs.existsSync(dir) ? fs.readdirSync(dir).filter((f) => f.endsWith('.js')).sort() : [];

for (const source of ['readme', 'guide']) {
  const mine = modules.filter((f) => f.startsWith(`${source}_`));
  test(`the ${source}'s examples are there [${BACKENDS.includes('redis8') ? 'redis8' : 'memory'}]`, () => {
    assert.ok(mine.length >= 2, `${source}: ${mine.length} examples`);
  });
  for (const file of mine) {
    test(`${source} example ${file} runs [redis8]`, async () => {
      const example = require(path.join(dir, file)) as { main(url: string): Promise<void> };
      await example.main(url('redis8'));
    });
  }
}
