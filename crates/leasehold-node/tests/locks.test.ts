// The package on every backend: memory, redis 7, redis 8, valkey 9, etcd and PostgreSQL (each
// test's name ends with its backend in brackets, which run.js counts).
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { setImmediate as tick } from 'node:timers/promises';

import {
  AbortError,
  Lease,
  LeaseholdError,
  Locker,
  LockLostError,
  NotAcquiredError,
  NotHeldError,
  UnsupportedError,
  cleanupsSettled,
} from 'leasehold';

import { BACKENDS, GENEROUS, aborted, freshKey, locker, until, url } from './servers';

/** The lock is free: one attempt takes it (and gives it back). */
async function assertFree(locks: Locker, key: string): Promise<void> {
  const lease = await locks.lock(key, { ttl: 10_000 });
  await lease.release();
}

for (const backend of BACKENDS) {
  describe(backend, () => {
    const it = (name: string, fn: (locks: Locker, key: string) => Promise<void>) =>
      test(`${name} [${backend}]`, async () => fn(await locker(backend), freshKey()));

    it('a lock excludes, and is free after its release', async (locks, key) => {
      const lease = await locks.lock(key, { ttl: 10_000 });
      assert.equal(lease.key, key);
      assert.equal(lease.held, true);
      assert.equal(lease.lost, false);
      assert.ok(lease.remaining > 0 && lease.remaining <= 10_000);
      assert.equal(lease.fence, null);
      await assert.rejects(locks.lock(key, { ttl: 10_000 }), (e: unknown) => {
        assert.ok(e instanceof NotAcquiredError && e instanceof LeaseholdError && e instanceof Error);
        assert.equal(e.code, 'NOT_ACQUIRED');
        assert.equal(e.key, key);
        assert.ok(e.attempts >= 1);
        return true;
      });
      await lease.release();
      assert.equal(lease.held, false);
      assert.equal(lease.lost, false);
      await assertFree(locks, key);
    });

    it('fencing numbers strictly increase', async (locks, key) => {
      const seen: number[] = [];
      for (let i = 0; i < 3; i++) {
        const lease = await locks.lock(key, { ttl: 10_000, fencing: true });
        assert.equal(typeof lease.fence, 'number');
        seen.push(lease.fence as number);
        await lease.release();
      }
      assert.ok(seen[0] < seen[1] && seen[1] < seen[2], `${seen}`);
    });

    it('a waiter gets the lock when it is released, and the event loop runs meanwhile', async (locks, key) => {
      const holder = await locks.lock(key, { ttl: 30_000 });
      let settled = false;
      const waiter = locks.lock(key, { ttl: 10_000, wait: GENEROUS }).finally(() => {
        settled = true;
      });
      // The loop is free while the waiter waits: these ticks run before it can be granted.
      let ticks = 0;
      while (ticks < 5) {
        await tick();
        ticks++;
      }
      assert.equal(settled, false);
      await holder.release();
      const lease = await waiter;
      assert.equal(lease.held, true);
      await lease.release();
    });

    for (const fair of [false, true]) {
      it(`an aborted ${fair ? 'fair ' : ''}wait leaves nothing held`, async (locks, key) => {
        // TTLs far beyond the test's bound: the lock can come free by the waiter's cleanup,
        // never by expiry.
        const ttl = 4 * GENEROUS;
        let holder: Lease;
        try {
          holder = await locks.lock(key, { ttl, fair });
        } catch (e) {
          // A backend without a fair mode refuses it, never runs it unfair.
          assert.ok(fair && e instanceof UnsupportedError, String(e));
          return;
        }
        const controller = new AbortController();
        const waiter = locks.lock(key, { ttl, fair, wait: 4 * GENEROUS, signal: controller.signal });
        await tick();
        controller.abort(new Error('changed my mind'));
        await assert.rejects(waiter, (e: unknown) => {
          assert.ok(e instanceof AbortError);
          assert.equal(e.code, 'ABORT_ERR');
          assert.equal((e.cause as Error).message, 'changed my mind');
          return true;
        });
        await holder.release();
        // The abandoned waiter's cleanup runs in the background (a lock granted to it
        // meanwhile, as PostgreSQL grants a statement still blocked in the server, is released
        // with it). Once cleanupsSettled() resolves it is done: nobody is queued, and one
        // attempt takes the lock (the TTLs are far beyond the test).
        assert.equal(await cleanupsSettled(GENEROUS), true);
        const entry = (await locks.list(`${key}*`)).find((e) => e.key === key);
        assert.equal(entry?.waiters ?? 0, 0, JSON.stringify(entry));
        await assertFree(locks, key);
      });
    }

    it('a signal aborted before the call rejects before any round trip', async (locks, key) => {
      const signal = AbortSignal.abort();
      await assert.rejects(locks.lock(key, { ttl: 1_000, signal }), AbortError);
      await assertFree(locks, key);
    });

    it("a lost lease aborts its signal, and its extend and release are refused", async (locks, key) => {
      const lease = await locks.lock(key, { ttl: 300 });
      const reason = await aborted(lease.signal);
      assert.ok(reason instanceof LockLostError);
      assert.equal(reason.key, key);
      assert.equal(lease.lost, true);
      assert.equal(lease.held, false);
      assert.equal(lease.remaining, 0);
      assert.ok(lease.lossReason !== null);
      // Another holder may take it now.
      const next = await locks.lock(key, { ttl: 10_000, wait: GENEROUS });
      await assert.rejects(lease.extend(10_000), NotHeldError);
      await assert.rejects(lease.release(), NotHeldError);
      await next.release();
    });

    it('auto-extend keeps the lock past its ttl', async (locks, key) => {
      const lease = await locks.lock(key, { ttl: 600, autoExtend: true });
      // Three renewals observed (each resets the remaining validity), not a sleep.
      let renewals = 0;
      let last = lease.remaining;
      while (renewals < 3) {
        await new Promise((r) => setTimeout(r, 50));
        const now = lease.remaining;
        if (now > last) renewals++;
        last = now;
        assert.equal(lease.lost, false);
      }
      await assert.rejects(locks.lock(key, { ttl: 1_000 }), NotAcquiredError);
      await lease.release();
    });

    it('auto-extend renews while the event loop is blocked', async (locks, key) => {
      const ttl = 1_000;
      const lease = await locks.lock(key, { ttl, autoExtend: true });
      // The event loop is held (no await) for 1.5 TTLs and until three renewals are seen:
      // renewals run on the runtime's thread, not on timers of this loop. Were they on the
      // loop, `remaining` would never rise and the key would expire.
      const start = process.hrtime.bigint();
      const blockedMs = () => Number(process.hrtime.bigint() - start) / 1e6;
      let renewals = 0;
      let last = lease.remaining;
      while (renewals < 3 || blockedMs() < 1.5 * ttl) {
        const now = lease.remaining;
        if (now > last) renewals++;
        last = now;
        assert.ok(blockedMs() < GENEROUS, `only ${renewals} renewals while the loop was blocked`);
      }
      assert.equal(lease.lost, false);
      assert.equal(lease.held, true);
      await assert.rejects(locks.lock(key, { ttl: 1_000 }), NotAcquiredError);
      await lease.release();
    });

    it('extend sets a new validity', async (locks, key) => {
      const lease = await locks.lock(key, { ttl: 2_000 });
      await lease.extend(60_000);
      assert.ok(lease.remaining > 2_000);
      await lease.release();
    });

    it('withLock runs the work under the lock and releases it', async (locks, key) => {
      const result = await locks.withLock(key, { ttl: 10_000 }, async (lease: Lease) => {
        assert.equal(lease.held, true);
        assert.equal(lease.signal.aborted, false);
        await assert.rejects(locks.lock(key, { ttl: 1_000 }), NotAcquiredError);
        return 42;
      });
      assert.equal(result, 42);
      await assertFree(locks, key);
      // The work's own error comes out, and the lock is released.
      await assert.rejects(
        locks.withLock(key, { ttl: 10_000 }, () => {
          throw new Error('work failed');
        }),
        /work failed/,
      );
      await assertFree(locks, key);
    });

    it('withLock rejects with LockLostError when the lock was lost during the work', async (locks, key) => {
      await assert.rejects(
        locks.withLock(key, { ttl: 300 }, async (lease) => {
          await aborted(lease.signal);
          return 'finished unprotected';
        }),
        (e: unknown) => e instanceof LockLostError && e.key === key,
      );
    });

    it('await using releases at the end of the block', async (locks, key) => {
      {
        await using lease = await locks.lock(key, { ttl: 10_000 });
        assert.equal(lease.held, true);
        await assert.rejects(locks.lock(key, { ttl: 1_000 }), NotAcquiredError);
      }
      await assertFree(locks, key);
      {
        // Released inside the block: the end of the block does not release again.
        await using lease = await locks.lock(key, { ttl: 10_000 });
        await lease.release();
      }
    });

    it('a semaphore counts its permits', async (locks, key) => {
      const a = await locks.semaphore(key, 2, { ttl: 10_000 });
      const b = await locks.semaphore(key, 2, { ttl: 10_000 });
      assert.ok(a.held && b.held);
      await assert.rejects(locks.semaphore(key, 2, { ttl: 10_000 }), NotAcquiredError);
      await a.release();
      const c = await locks.semaphore(key, 2, { ttl: 10_000 });
      await Promise.all([b.release(), c.release()]);
    });

    it('a read-write lock shares reads and excludes a write', async (locks, key) => {
      const r1 = await locks.readLock(key, { ttl: 10_000 });
      const r2 = await locks.readLock(key, { ttl: 10_000 });
      await assert.rejects(locks.writeLock(key, { ttl: 10_000 }), NotAcquiredError);
      await Promise.all([r1.release(), r2.release()]);
      const w = await locks.writeLock(key, { ttl: 10_000, fencing: true });
      assert.equal(typeof w.fence, 'number');
      await assert.rejects(locks.readLock(key, { ttl: 10_000 }), NotAcquiredError);
      await w.release();
    });

    it('a multi-lock takes all its keys or none (redis only)', async (locks, key) => {
      const keys = [`{${key}}:a`, `{${key}}:b`];
      if (locks.backend !== 'redis') {
        await assert.rejects(locks.multiLock(keys, { ttl: 10_000 }), UnsupportedError);
        return;
      }
      const one = await locks.lock(keys[1], { ttl: 10_000 });
      await assert.rejects(locks.multiLock(keys, { ttl: 10_000 }), NotAcquiredError);
      await assertFree(locks, keys[0]);
      await one.release();
      const all = await locks.multiLock(keys, { ttl: 10_000 });
      await assert.rejects(locks.lock(keys[0], { ttl: 10_000 }), NotAcquiredError);
      await all.release();
    });

    it('an election has one leader, and watchLeader follows its terms', async (locks, key) => {
      assert.equal(await locks.leader(key), null);
      const controller = new AbortController();
      const seen = locks.watchLeader(key, { every: 200, signal: controller.signal })[Symbol.asyncIterator]();
      const term = await locks.campaign(key, 'node-a', { ttl: 2_000 });
      const leader = await locks.leader(key);
      assert.deepEqual(leader, { id: 'node-a', term: term.fence });
      await assert.rejects(locks.campaign(key, 'node-b', { ttl: 2_000, wait: 0 }), NotAcquiredError);
      const first = await seen.next();
      assert.deepEqual(first.value, { id: 'node-a', term: term.fence });
      await term.release();
      assert.equal((await seen.next()).value, null);
      controller.abort();
      assert.equal((await seen.next()).done, true);
    });

    it('list shows the holder and its owner', async (locks, key) => {
      const lease = await locks.lock(key, { ttl: 30_000, fencing: true, ownerLabel: 'node list test' });
      const entries = (await locks.list(`${key}*`)).filter((e) => e.key === key);
      assert.equal(entries.length, 1);
      assert.equal(entries[0].holders.length, 1);
      assert.ok(entries[0].holders[0].holder.startsWith('#'));
      assert.ok(entries[0].holders[0].owner?.includes('node list test'));
      await lease.release();
      assert.deepEqual((await locks.list(`${key}*`)).filter((e) => e.key === key), []);
    });

    it('history records the acquire and the release', async (_locks, key) => {
      const locks = await Locker.connect(url(backend), { history: true });
      const lease = await locks.lock(key, { ttl: 30_000, fencing: true });
      await lease.release();
      const events = (await locks.history(key, 10)).map((e) => [e.kind, e.fencing]);
      assert.deepEqual(events, [['released', lease.fence], ['acquired', lease.fence]]);
    });

    it('forceRelease ends the holder, and its lease finds out', async (locks, key) => {
      const lease = await locks.lock(key, { ttl: 30_000, fencing: true });
      const counter = await locks.forceRelease(key, 'node test');
      assert.ok(counter === null || counter > (lease.fence as number));
      await assert.rejects(lease.extend(30_000), NotHeldError);
      assert.ok((await aborted(lease.signal)) instanceof LockLostError);
      await assertFree(locks, key);
    });

    it('a lock taken with a token elsewhere is released by its token', async (locks, key) => {
      const lease = await locks.lock(key, { ttl: 30_000 });
      await locks.release(key, lease.token);
      await assertFree(locks, key);
    });

    it('a lock taken with a token elsewhere is extended by its token', async (locks, key) => {
      const lease = await locks.lock(key, { ttl: 5_000 });
      // inspect() shows the holder's token in full, as `leasehold inspect` does.
      assert.equal((await locks.inspect(key)).holder, lease.token);
      await assert.rejects(locks.extend(key, 'not-the-token', 60_000), NotHeldError);
      await locks.extend(key, lease.token, 60_000);
      const state = await locks.inspect(key);
      // Session locks on PostgreSQL show no TTL (the lock lives as long as its session).
      if (state.ttl === null) assert.equal(locks.backend, 'postgres');
      else assert.ok(state.ttl > 5_000, `ttl ${state.ttl} after the extend`);
      await lease.release();
    });

    it('a fair lock taken with a token elsewhere is released by its token to its waiter', async (locks, key) => {
      const lease = await locks.lock(key, { ttl: 30_000, fair: true });
      const waiter = locks.lock(key, { ttl: 30_000, fair: true, wait: GENEROUS });
      // Released once the waiter is queued, so that the release hands the lock over.
      const waiters = async () => (await locks.list(`${key}*`)).find((e) => e.key === key)?.waiters;
      await until(async () => (await waiters()) === 1, 'the waiter in the queue');
      await locks.release(key, lease.token, { fair: true });
      const next = await waiter;
      assert.equal(next.held, true);
      await next.release();
    });

    it('raiseFencingCounter raises the next number', async (locks, key) => {
      if (locks.backend === 'etcd') {
        await assert.rejects(locks.raiseFencingCounter(key, 1000), UnsupportedError);
        return;
      }
      assert.ok((await locks.raiseFencingCounter(key, 1000)) >= 1000);
      const lease = await locks.lock(key, { ttl: 10_000, fencing: true });
      assert.ok((lease.fence as number) > 1000);
      await lease.release();
    });
  });
}

describe('arguments', () => {
  test('wrong types and values throw TypeError / RangeError before any round trip', async () => {
    const locks = await locker('memory');
    const bad: Array<[() => unknown, ErrorConstructor, string]> = [
      [() => locks.lock('k', { ttl: '5' as unknown as number }), TypeError, 'ERR_INVALID_ARG_TYPE'],
      [() => locks.lock(5 as unknown as string, { ttl: 1 }), TypeError, 'ERR_INVALID_ARG_TYPE'],
      [() => locks.lock('k', null as unknown as { ttl: number }), TypeError, 'ERR_INVALID_ARG_TYPE'],
      [() => locks.lock('', { ttl: 1 }), RangeError, 'ERR_OUT_OF_RANGE'],
      [() => locks.lock('k', { ttl: -1 }), RangeError, 'ERR_OUT_OF_RANGE'],
      [() => locks.lock('k', { ttl: 0 }), RangeError, 'ERR_OUT_OF_RANGE'],
      [() => locks.lock('k', { ttl: NaN }), RangeError, 'ERR_OUT_OF_RANGE'],
      [() => locks.lock('k', { ttl: Infinity }), RangeError, 'ERR_OUT_OF_RANGE'],
      [() => locks.lock('k', { ttl: 5, wait: -1 }), RangeError, 'ERR_OUT_OF_RANGE'],
      [() => locks.lock('k', { ttl: 5, fencing: 1 as unknown as boolean }), TypeError, 'ERR_INVALID_ARG_TYPE'],
      [() => locks.lock('k', { ttl: 5, signal: {} as AbortSignal }), TypeError, 'ERR_INVALID_ARG_TYPE'],
      [() => locks.lock('k', { ttl: 5, tll: 5 } as unknown as { ttl: number }), RangeError, 'ERR_OUT_OF_RANGE'],
      [() => locks.semaphore('k', 0, { ttl: 5 }), RangeError, 'ERR_OUT_OF_RANGE'],
      [() => locks.semaphore('k', 1.5, { ttl: 5 }), TypeError, 'ERR_INVALID_ARG_TYPE'],
      [() => locks.multiLock('k' as unknown as string[], { ttl: 5 }), TypeError, 'ERR_INVALID_ARG_TYPE'],
      [() => locks.watchLeader('k', { every: 0 }), RangeError, 'ERR_OUT_OF_RANGE'],
    ];
    for (const [call, type, code] of bad) {
      assert.throws(call, (e: unknown) => e instanceof type && (e as { code?: string }).code === code);
    }
    await assert.rejects(Locker.connect(42 as unknown as string), TypeError);
    await assert.rejects(Locker.connect('memory://', { connectTimeout: -5 }), RangeError);
    await assert.rejects(locks.history('k', 0), RangeError);
    await assert.rejects(locks.forceRelease('k', 7 as unknown as string), TypeError);
    await assert.rejects(locks.extend('k', 'token', -1), RangeError);
    await assert.rejects(locks.extend('k', '', 5_000), RangeError);
    await assert.rejects(locks.release('k', 'token', { fair: 'yes' as unknown as boolean }), TypeError);
    await assert.rejects(cleanupsSettled(-1), RangeError);
    const lease = await locks.lock(freshKey(), { ttl: 10_000 });
    await assert.rejects(lease.extend(NaN), RangeError);
    await lease.release();
  });

  test('a Locker is made by connect only', () => {
    assert.throws(() => new (Locker as unknown as new () => Locker)(), TypeError);
  });
});
