// The URLs beyond the matrix's one server each: Redlock over the matrix's three Redis servers
// (independent masters: redis 7, redis 8 and valkey 9), and file:// (this machine only).
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';

import { Locker, NotAcquiredError, UnsupportedError } from 'leasehold';

import { BACKENDS, freshKey, url } from './servers';

const REDIS = ['redis7', 'redis8', 'valkey9'].filter((b) => BACKENDS.includes(b));

/** Takes a key twice (the second refused), releases, takes it again with a higher fence. */
async function exercise(locks: Locker): Promise<void> {
  const key = freshKey();
  const first = await locks.lock(key, { ttl: 10_000, fencing: true });
  await assert.rejects(locks.lock(key, { ttl: 10_000 }), NotAcquiredError);
  await first.release();
  const second = await locks.lock(key, { ttl: 10_000, fencing: true });
  assert.ok((second.fence as number) > (first.fence as number));
  await second.release();
  // By token, as another process would: extend, and release. Neither Redlock nor file:// has a
  // fair mode, so a fair release is refused, never run unfair.
  const third = await locks.lock(key, { ttl: 10_000 });
  await locks.extend(key, third.token, 30_000);
  await assert.rejects(locks.release(key, third.token, { fair: true }), UnsupportedError);
  await locks.release(key, third.token);
  await (await locks.lock(key, { ttl: 10_000 })).release();
}

test('redlock:// over three independent servers [redis8]', { skip: REDIS.length < 3 && 'needs the three Redis servers' }, async () => {
  const hosts = REDIS.map((b) => new URL(url(b)).host);
  const locks = await Locker.connect(`redlock://${hosts.join(',')}`);
  assert.equal(locks.backend, 'redlock');
  await exercise(locks);
});

test('file:// on this machine [memory]', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'leasehold-node-file-'));
  try {
    const locks = await Locker.connect(`file://${dir}`);
    assert.equal(locks.backend, 'file');
    await exercise(locks);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
