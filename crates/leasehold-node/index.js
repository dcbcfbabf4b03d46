'use strict';
// leasehold for Node.js: the Rust library's locks through its native addon (leasehold.node,
// built by `npm run build`). This file gives them Node's idioms: options objects with
// durations in milliseconds, checked before any round trip; AbortSignals in and out; `await
// using` and `withLock`; error classes; async iterators. Every wait and round trip runs on the
// addon's runtime, never on the event loop.

const native = require('./leasehold.node');
const errors = require('./errors.js');

const { convert, LockLostError, AbortError } = errors;

// ---- argument checks (TypeError / RangeError before any round trip) ----------------------

function typeError(what, want, got) {
  const e = new TypeError(`${what} must be ${want}, not ${got === null ? 'null' : typeof got}`);
  e.code = 'ERR_INVALID_ARG_TYPE';
  return e;
}

function rangeError(what, want, got) {
  const e = new RangeError(`${what} must be ${want}, not ${got}`);
  e.code = 'ERR_OUT_OF_RANGE';
  return e;
}

function checkString(what, v) {
  if (typeof v !== 'string') throw typeError(what, 'a string', v);
  if (v.length === 0) throw rangeError(what, 'a non-empty string', '""');
  return v;
}

/** A duration in ms: a finite number, above 0 (`positive`) or 0 and more. */
function checkMillis(what, v, positive) {
  if (typeof v !== 'number') throw typeError(what, 'a number of milliseconds', v);
  if (!Number.isFinite(v) || v < 0 || (positive && v === 0)) {
    throw rangeError(what, `a finite number of milliseconds ${positive ? 'above 0' : '0 or more'}`, v);
  }
  return v;
}

function checkBool(what, v) {
  if (v !== undefined && typeof v !== 'boolean') throw typeError(what, 'a boolean', v);
  return v;
}

function checkSignal(v) {
  if (v === undefined) return undefined;
  if (!(v instanceof AbortSignal)) throw typeError('signal', 'an AbortSignal', v);
  return v;
}

const LOCK_OPTIONS = new Set([
  'ttl', 'wait', 'fencing', 'autoExtend', 'fair', 'signal', 'maxHold', 'minHold',
  'renewEvery', 'ownerLabel', 'owner',
]);

/** The native request for `kind` on `key` with the user's `options`, checked. */
function request(kind, key, options, extra) {
  if (options === null || typeof options !== 'object') throw typeError('options', 'an object', options);
  for (const k of Object.keys(options)) {
    if (!LOCK_OPTIONS.has(k)) throw rangeError('options', `one of ${[...LOCK_OPTIONS].join(', ')}`, JSON.stringify(k));
  }
  const r = { kind, key, ttl: checkMillis('ttl', options.ttl, true), ...extra };
  if (options.wait !== undefined) r.wait = checkMillis('wait', options.wait, false);
  for (const k of ['maxHold', 'minHold', 'renewEvery']) {
    if (options[k] !== undefined) r[k] = checkMillis(k, options[k], k !== 'minHold');
  }
  for (const k of ['fencing', 'autoExtend', 'fair', 'owner']) {
    if (options[k] !== undefined) r[k] = checkBool(k, options[k]);
  }
  if (options.ownerLabel !== undefined) r.ownerLabel = checkString('ownerLabel', options.ownerLabel);
  checkSignal(options.signal);
  return r;
}

// ---- Lease --------------------------------------------------------------------------------

/** The LockLostError of `key`, lost for `reason`. */
function lockLost(key, reason) {
  return new LockLostError(`lock ${JSON.stringify(key)} was lost (${reason})`, { key, reason });
}

/** A lease's loss as an error (Locker.withLock's): its signal's reason once the signal exists. */
const LOSS = Symbol('leasehold.loss');

/**
 * A held lock (or permit, read or write hold, leadership). Its `signal` aborts when the lock is
 * lost while held, with a LockLostError as the reason; `release()` (or the end of an `await
 * using` block) gives it back.
 *
 * The signal is made when first read: from then until the lease is released or lost, the
 * native side's wait for a loss keeps the event loop alive (work waiting on the signal is not
 * cut short by the process ending). A lease whose signal nobody reads keeps nothing alive: if
 * it is dropped unreleased, garbage collection releases it in the background, and a process
 * that exits leaves it to its TTL.
 */
class Lease {
  #native;
  #controller = null;
  #released = false;

  constructor(nativeLease) {
    this.#native = nativeLease;
  }

  /** The lock's key (or the primitive's name). */
  get key() { return this.#native.key; }
  /** The fencing number issued with this acquisition (null unless `fencing: true`). */
  get fence() { return this.#native.fence; }
  /** The token stored in the lock: a secret capability, for handing the lock to another process. */
  get token() { return this.#native.token; }
  /** True until released, found lost, or its validity runs out. */
  get held() { return this.#native.held; }
  /** True once found lost while held (never after a normal release). */
  get lost() { return this.#native.lossReason !== null; }
  /** Why it was lost: 'expired' or 'not_held'; null while not lost. */
  get lossReason() { return this.#native.lossReason; }
  /** Milliseconds of validity left (0 once over or lost). */
  get remaining() { return this.#native.remaining; }
  /** Aborts when the lock is lost while held; pass it to the work the lock protects. */
  get signal() {
    if (this.#controller === null) {
      const controller = new AbortController();
      const nativeLease = this.#native;
      const reason = nativeLease.lossReason;
      if (reason !== null) {
        controller.abort(lockLost(nativeLease.key, reason));
      } else if (!this.#released) {
        nativeLease.onLost((r) => controller.abort(lockLost(nativeLease.key, r)));
      }
      this.#controller = controller;
    }
    return this.#controller.signal;
  }

  /** The loss as an error: the signal's reason if it was made and aborted, else a new one. */
  [LOSS]() {
    if (this.#controller !== null && this.#controller.signal.aborted) return this.#controller.signal.reason;
    return lockLost(this.key, this.lossReason);
  }

  /** Gives the lock back. Rejects with NotHeldError if it was no longer ours, or released already. */
  async release() {
    this.#released = true;
    try {
      await this.#native.release();
    } catch (e) {
      throw convert(e);
    }
  }

  /** Sets the validity to `ttl` ms from now, if still ours (else NotHeldError; the lease is then lost). */
  async extend(ttl) {
    checkMillis('ttl', ttl, true);
    try {
      await this.#native.extend(ttl);
    } catch (e) {
      throw convert(e);
    }
  }

  /** `await using`: releases at the end of the block, unless released already. */
  async [Symbol.asyncDispose]() {
    if (!this.#released) await this.release();
  }

  get [Symbol.toStringTag]() { return 'Lease'; }
}

// ---- Locker -------------------------------------------------------------------------------

/** A connection to one lock backend, any URL. Cheap to share. */
class Locker {
  #native;

  constructor(nativeLocker) {
    if (!(nativeLocker instanceof native.Locker)) {
      throw new TypeError('use `await Locker.connect(url)` to make a Locker');
    }
    this.#native = nativeLocker;
  }

  /**
   * Connects to `url` (`redis://`, `rediss://`, `redis-sentinel://`, `redis-cluster://`,
   * `redlock://`, `etcd://`, `etcds://`, `postgres://`, `memory://`, `file://`).
   */
  static async connect(url, options = {}) {
    checkString('url', url);
    if (options === null || typeof options !== 'object') throw typeError('options', 'an object', options);
    const o = {};
    for (const k of ['connectTimeout', 'responseTimeout']) {
      if (options[k] !== undefined) o[k] = checkMillis(k, options[k], true);
    }
    for (const k of ['tlsCaFile', 'tlsCertFile', 'tlsKeyFile']) {
      if (options[k] !== undefined) o[k] = checkString(k, options[k]);
    }
    if (options.history !== undefined) o.history = checkBool('history', options.history);
    try {
      return new Locker(await native.connect(url, o));
    } catch (e) {
      throw convert(e);
    }
  }

  /** The backend's name: 'redis', 'redlock', 'etcd', 'postgres', 'memory' or 'file'. */
  get backend() { return this.#native.backend; }

  async #acquire(req, signal) {
    if (signal && signal.aborted) {
      throw new AbortError(`lock ${JSON.stringify(req.key)}: the wait was aborted before it began; nothing is held`, { key: req.key, cause: signal.reason });
    }
    let cancel;
    let onAbort;
    if (signal) {
      cancel = new native.Cancel();
      onAbort = () => cancel.cancel();
      signal.addEventListener('abort', onAbort, { once: true });
    }
    try {
      return new Lease(await this.#native.acquire(req, cancel));
    } catch (e) {
      throw convert(e, signal && signal.aborted ? signal.reason : undefined);
    } finally {
      if (signal) signal.removeEventListener('abort', onAbort);
    }
  }

  /** Takes the lock `key`: one attempt, or waiting up to `wait` ms; rejects with NotAcquiredError if still busy. */
  lock(key, options) {
    return this.#run(() => request('lock', checkString('key', key), options), options);
  }

  /** Takes one of `permits` permits of semaphore `name`. */
  semaphore(name, permits, options) {
    return this.#run(() => {
      if (!Number.isInteger(permits)) throw typeError('permits', 'an integer', permits);
      if (permits < 1 || permits > 0xffffffff) throw rangeError('permits', 'between 1 and 2^32-1', permits);
      return request('semaphore', checkString('name', name), options, { permits });
    }, options);
  }

  /** Takes read-write lock `name` for reading (shared with other readers). */
  readLock(name, options) {
    return this.#run(() => request('read', checkString('name', name), options), options);
  }

  /** Takes read-write lock `name` for writing (alone). */
  writeLock(name, options) {
    return this.#run(() => request('write', checkString('name', name), options), options);
  }

  /** Takes every key of `keys` at once, or none (redis:// only). */
  multiLock(keys, options) {
    return this.#run(() => {
      if (!Array.isArray(keys)) throw typeError('keys', 'an array of strings', keys);
      keys.forEach((k, i) => checkString(`keys[${i}]`, k));
      return request('multi', keys.join(','), options, { keys });
    }, options);
  }

  /** Campaigns in election `name` as candidate `id`: resolves when elected; the lease is the leadership. */
  campaign(name, id, options) {
    return this.#run(() => request('campaign', checkString('name', name), options, { id: checkString('id', id) }), options);
  }

  /** Checks synchronously (so bad input throws before any round trip), then acquires. */
  #run(make, options) {
    const req = make();
    return this.#acquire(req, options.signal);
  }

  /**
   * Takes `key` with `options`, runs `work(lease)` and releases. The work receives the lease;
   * its `signal` aborts if the lock is lost meanwhile. If the lock was lost during the work,
   * rejects with LockLostError (after the work ends) even if the work succeeded: a loss never
   * passes silently.
   */
  async withLock(key, options, work) {
    if (typeof work !== 'function') throw typeError('work', 'a function', work);
    const lease = await this.lock(key, options);
    let result;
    try {
      result = await work(lease);
    } catch (e) {
      await lease.release().catch(() => {});
      throw e;
    }
    if (lease.lost) {
      await lease.release().catch(() => {});
      throw lease[LOSS]();
    }
    try {
      await lease.release();
    } catch (e) {
      // Lost between the work's end and the release: the work ran unprotected at its end.
      throw lease.lost ? lease[LOSS]() : e;
    }
    return result;
  }

  /** What the server says about `key` (no lock taken). */
  async inspect(key) {
    checkString('key', key);
    try { return await this.#native.inspect(key); } catch (e) { throw convert(e); }
  }

  /** The locks whose keys match `pattern` (`*` and `?` globs). */
  async list(pattern = '*') {
    checkString('pattern', pattern);
    try { return await this.#native.list(pattern); } catch (e) { throw convert(e); }
  }

  /** The last `limit` history events of `key`, newest first (with `history: true` on the writers). */
  async history(key, limit = 20) {
    checkString('key', key);
    if (!Number.isInteger(limit)) throw typeError('limit', 'an integer', limit);
    if (limit < 1 || limit > 0xffffffff) throw rangeError('limit', 'between 1 and 2^32-1', limit);
    try { return await this.#native.history(key, limit); } catch (e) { throw convert(e); }
  }

  /** Removes `key`'s holder whatever its token, bumps its fencing counter and records `reason`. */
  async forceRelease(key, reason) {
    checkString('key', key);
    checkString('reason', reason);
    try { return await this.#native.forceRelease(key, reason); } catch (e) { throw convert(e); }
  }

  /**
   * Releases `key` held with `token` (a token taken elsewhere: another process, the CLI);
   * `fair: true` for a fair lock, handed to its longest waiter.
   */
  async release(key, token, { fair = false } = {}) {
    checkString('key', key);
    checkString('token', token);
    checkBool('fair', fair);
    try { return await this.#native.releaseToken(key, token, fair); } catch (e) { throw convert(e); }
  }

  /** Sets the validity of `key`, held with `token` (a token taken elsewhere), to `ttl` ms from now. */
  async extend(key, token, ttl) {
    checkString('key', key);
    checkString('token', token);
    checkMillis('ttl', ttl, true);
    try { return await this.#native.extendToken(key, token, ttl); } catch (e) { throw convert(e); }
  }

  /** Raises `key`'s fencing counter to at least `atLeast` (after a restore); returns the counter. */
  async raiseFencingCounter(key, atLeast) {
    checkString('key', key);
    if (!Number.isSafeInteger(atLeast) || atLeast < 0) throw rangeError('atLeast', 'a safe integer 0 or more', atLeast);
    try { return await this.#native.raiseFencingCounter(key, atLeast); } catch (e) { throw convert(e); }
  }

  /** The current leader of election `name`: `{ id, term }`, or null. */
  async leader(name) {
    checkString('name', name);
    try { return await this.#native.leader(name); } catch (e) { throw convert(e); }
  }

  /**
   * The leadership of election `name` as it changes: an async iterator of `{ id, term }` (or
   * null when nobody leads), reading it at least every `every` ms (default 1000). Ends when
   * `signal` aborts or the loop breaks.
   */
  watchLeader(name, { every = 1000, signal } = {}) {
    checkString('name', name);
    checkMillis('every', every, true);
    checkSignal(signal);
    const watch = this.#native.watchLeader(name, every);
    return {
      async *[Symbol.asyncIterator]() {
        // One cancel for the whole iteration: fired by the signal, or when the loop leaves
        // (break, return, throw), so no wait is left pending on the runtime.
        const cancel = new native.Cancel();
        const onAbort = () => cancel.cancel();
        if (signal) {
          if (signal.aborted) return;
          signal.addEventListener('abort', onAbort, { once: true });
        }
        try {
          for (;;) {
            let next;
            try {
              next = await watch.changed(cancel);
            } catch (e) {
              const err = convert(e);
              if (err instanceof AbortError) return;
              throw err;
            }
            yield next;
          }
        } finally {
          cancel.cancel();
          if (signal) signal.removeEventListener('abort', onAbort);
        }
      },
    };
  }

  get [Symbol.toStringTag]() { return 'Locker'; }
}

// The error classes, without errors.js's internals (`convert`, `classes`).
const { convert: _convert, classes: _classes, ...errorClasses } = errors;
/**
 * Waits until no background clean-up of an aborted wait is running in this process, at most
 * `timeout` ms; resolves with whether they settled. What the wait took (a place in a fair
 * queue, a lock granted as it was given up) has been given back by then. Await it before
 * exiting right after aborting waits.
 */
async function cleanupsSettled(timeout = 5_000) {
  checkMillis('timeout', timeout, false);
  try { return await native.cleanupsSettled(timeout); } catch (e) { throw convert(e); }
}

module.exports = { Locker, Lease, cleanupsSettled, ...errorClasses };
