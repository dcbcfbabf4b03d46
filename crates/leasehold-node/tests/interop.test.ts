// One protocol across languages: the Rust CLI (`leasehold`, the same library) and Node on the
// same keys, and node-redlock beside leasehold. (The Python suite's tests/test_interop.py
// runs Node holders beside Python: a killed Node holder taken over after its TTL, fencing
// numbers interleaved from Rust, Python and Node.)
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { describe, test } from 'node:test';

import { Locker, NotAcquiredError, NotHeldError } from 'leasehold';

import { BACKENDS, GENEROUS, freshKey, locker, until, url } from './servers';

const CLI = process.env.LEASEHOLD_CLI as string;
const SERVERS = BACKENDS.filter((b) => b !== 'memory');
const REDIS = SERVERS.filter((b) => ['redis7', 'redis8', 'valkey9'].includes(b));

/** Runs the Rust CLI with --json; its JSON answer. */
function cli(serverUrl: string, ...args: string[]): Record<string, unknown> {
  const out = execFileSync(CLI, [...args, '--url', serverUrl, '--json'], { encoding: 'utf8' });
  return JSON.parse(out) as Record<string, unknown>;
}

/**
 * The server's URL for locks that outlive a CLI command: on PostgreSQL, lease rows (a session
 * lock dies with the command's connection). Both sides use the same form.
 */
function leaseUrl(backend: string): string {
  return backend === 'postgres' ? `${url(backend)}?lock=lease` : url(backend);
}

describe('interop', () => {
  test('the CLI is there', () => {
    assert.ok(CLI, 'LEASEHOLD_CLI (the Rust CLI) is set by scripts/test-node');
  });

  for (const backend of SERVERS) {
    test(`fencing numbers increase across the CLI and Node [${backend}]`, async () => {
      const serverUrl = leaseUrl(backend);
      const locks = await Locker.connect(serverUrl);
      const key = freshKey();
      const seen: number[] = [];
      for (let i = 0; i < 3; i++) {
        const held = cli(serverUrl, 'acquire', key, '--ttl', '30s', '--fencing');
        seen.push(Number(held.fencing_token));
        cli(serverUrl, 'release', key, '--token', String(held.token));
        const lease = await locks.lock(key, { ttl: 30_000, fencing: true });
        seen.push(lease.fence as number);
        await lease.release();
      }
      for (let i = 1; i < seen.length; i++) assert.ok(seen[i - 1] < seen[i], `${seen}`);
    });
  }

  for (const backend of SERVERS.filter((b) => b !== 'postgres')) {
    test(`a fair lock held by the CLI goes to Node waiters in arrival order [${backend}]`, async () => {
      const serverUrl = url(backend);
      const locks = await locker(backend);
      const key = freshKey();
      const held = cli(serverUrl, 'acquire', key, '--ttl', '60s', '--fair');
      const waiting = async () =>
        (await locks.list(key)).find((e) => e.key === key)?.waiters ?? 0;
      const order: number[] = [];
      const waiters: Promise<void>[] = [];
      for (let n = 0; n < 3; n++) {
        waiters.push(
          locks.withLock(key, { ttl: 60_000, wait: GENEROUS, fair: true }, () => {
            order.push(n);
          }),
        );
        // The next waiter starts once this one is in the server's queue: arrival order known.
        await until(async () => (await waiting()) === n + 1, `waiter ${n} queued`);
      }
      cli(serverUrl, 'release', key, '--token', String(held.token), '--fair');
      await Promise.all(waiters);
      assert.deepEqual(order, [0, 1, 2]);
    });
  }

  for (const backend of REDIS) {
    test(`node-redlock and leasehold exclude each other on one key [${backend}]`, async () => {
      // From the test tools (crates/leasehold-node/tools/package.json), loaded here only.
      const Redis = require('ioredis') as typeof import('ioredis').default;
      const Redlock = require('redlock').default as typeof import('redlock').default;
      const client = new Redis(url(backend));
      const redlock = new Redlock([client], { retryCount: 0 });
      const locks = await locker(backend);
      const key = freshKey();
      try {
        const theirs = await redlock.acquire([key], 30_000);
        await assert.rejects(locks.lock(key, { ttl: 30_000 }), NotAcquiredError);
        // leasehold's release with a token that is not the holder's is refused.
        await assert.rejects(locks.release(key, 'not-theirs'), NotHeldError);
        assert.equal(await client.get(key), theirs.value);
        await theirs.release();
        const ours = await locks.lock(key, { ttl: 30_000 });
        await assert.rejects(redlock.acquire([key], 30_000));
        assert.equal(await client.get(key), ours.token);
        await ours.release();
      } finally {
        client.disconnect();
      }
    });
  }
});
