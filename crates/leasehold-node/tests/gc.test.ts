// A lease dropped unreleased, its signal never read, is released by garbage collection (run
// with --expose-gc: tests/run.js sets it), long before its TTL.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { setImmediate as tick } from 'node:timers/promises';

import { Locker, NotAcquiredError } from 'leasehold';

import { BACKENDS, GENEROUS, freshKey, locker } from './servers';

/** Takes `key` and forgets the lease (nothing refers to it once this returns). */
async function takeAndForget(locks: Locker, key: string): Promise<void> {
  await locks.lock(key, { ttl: 4 * GENEROUS, autoExtend: true });
}

for (const backend of BACKENDS) {
  test(`a lease dropped unreleased is released by garbage collection [${backend}]`, async () => {
    const gc = (globalThis as { gc?: () => void }).gc;
    assert.ok(gc, 'needs --expose-gc (tests/run.js passes it)');
    const locks = await locker(backend);
    const key = freshKey();
    await takeAndForget(locks, key);
    await assert.rejects(locks.lock(key, { ttl: 10_000 }), NotAcquiredError);
    // Collected, then released in the background: free long before the 4 x GENEROUS TTL
    // (auto-extended, so it would otherwise never end while this process lives).
    const deadline = Date.now() + GENEROUS;
    for (;;) {
      gc();
      await tick();
      await new Promise((r) => setTimeout(r, 20));
      try {
        const again = await locks.lock(key, { ttl: 10_000 });
        await again.release();
        return;
      } catch (e) {
        if (!(e instanceof NotAcquiredError) || Date.now() > deadline) throw e;
      }
    }
  });
}
