// The servers of the tests: started by tests/run.js through the harness's leasehold-serve,
// one of each for the whole run, their URLs passed in LEASEHOLD_NODE_URLS. Every test uses
// keys of its own.
import { randomUUID } from 'node:crypto';
import { Locker } from 'leasehold';

const urls: Record<string, string> = JSON.parse(process.env.LEASEHOLD_NODE_URLS ?? '{}');

/** The backends the tests run on: memory, and each server run.js started. */
export const BACKENDS: string[] = ['memory', ...Object.keys(urls)];

/** The URL of `backend`. */
export function url(backend: string): string {
  return backend === 'memory' ? 'memory://' : urls[backend];
}

const lockers = new Map<string, Promise<Locker>>();

/** One Locker per backend, shared by the tests of a file. */
export function locker(backend: string): Promise<Locker> {
  let l = lockers.get(backend);
  if (!l) {
    l = Locker.connect(url(backend));
    lockers.set(backend, l);
  }
  return l;
}

/** A key no other test uses. */
export function freshKey(): string {
  return `node:${randomUUID().slice(0, 12)}`;
}

/** Long enough for any wait that must succeed on a loaded 2-core machine. */
export const GENEROUS = 60_000;

/** Waits (observing, not sleeping a fixed time) until `cond()` holds, at most GENEROUS. */
export async function until(cond: () => Promise<boolean>, what: string): Promise<void> {
  const deadline = Date.now() + GENEROUS;
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error(`never happened: ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** Resolves when `signal` aborts. */
export function aborted(signal: AbortSignal): Promise<unknown> {
  return new Promise((resolve) => {
    if (signal.aborted) resolve(signal.reason);
    else signal.addEventListener('abort', () => resolve(signal.reason), { once: true });
  });
}
