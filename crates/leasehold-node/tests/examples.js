#!/usr/bin/env node
// Extracts the TypeScript examples of the README's Node.js section and of docs/node.md into
// readme-examples/ (one module per example, run by tests/readme.test.ts), so that tsc --strict
// checks them with the tests and the suite runs them against a real server. Each example
// becomes `export async function main(url)`: its imports stay at the top, and the address
// 'redis://127.0.0.1:6379/' becomes the server the test passes.
'use strict';
const fs = require('node:fs');
const path = require('node:path');

const here = path.resolve(__dirname, '..');
const root = path.resolve(here, '..', '..');
const out = path.join(here, 'readme-examples');

function blocks(text) {
  return [...text.matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => m[1]);
}

const readme = fs.readFileSync(path.join(root, 'README.md'), 'utf8');
const section = readme.split('\n## Node.js\n')[1].split('\n## ')[0];
const sources = [
  ['readme', blocks(section)],
  ['guide', blocks(fs.readFileSync(path.join(root, 'docs', 'node.md'), 'utf8'))],
];
fs.rmSync(out, { recursive: true, force: true });
fs.mkdirSync(out);
for (const [name, examples] of sources) {
  examples.forEach((code, i) => {
    const lines = code.split('\n');
    const imports = lines.filter((l) => l.startsWith('import '));
    const body = lines
      .filter((l) => !l.startsWith('import '))
      .map((l) => `  ${l.replaceAll("'redis://127.0.0.1:6379/'", 'url')}`.trimEnd());
    const file = path.join(out, `${name}_${i + 1}.ts`);
    fs.writeFileSync(file, [
      `// Example ${i + 1} of ${name === 'readme' ? 'README.md' : 'docs/node.md'} (made by tests/examples.js).`,
      ...imports,
      '',
      'export async function main(url: string): Promise<void> {',
      ...body,
      '}',
      '',
    ].join('\n'));
  });
  process.stderr.write(`[examples] ${examples.length} from ${name}\n`);
}
