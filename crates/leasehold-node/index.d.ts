// Types of the `leasehold` package (index.js). Durations are milliseconds.

/**
 * Waits until no background clean-up of an aborted wait is running in this process, at most
 * `timeout` ms (default 5 000); resolves with whether they settled. What the wait took (a place
 * in a fair queue, a lock granted as it was given up) has been given back by then. Await it
 * before exiting right after aborting waits.
 */
export declare function cleanupsSettled(timeout?: number): Promise<boolean>;

/** How to connect. */
export interface ConnectOptions {
  /** How long to wait for each connection, in ms. */
  connectTimeout?: number;
  /** How long to wait for each reply, in ms. */
  responseTimeout?: number;
  /** The CA certificate(s) to trust (PEM file). */
  tlsCaFile?: string;
  /** This client's certificate (PEM file), for mutual TLS. */
  tlsCertFile?: string;
  /** This client's private key (PEM file). */
  tlsKeyFile?: string;
  /** Record each lock's history (acquired, released, lost, forced). */
  history?: boolean;
}

/** How to take a lock (or permit, read or write hold, leadership). */
export interface LockOptions {
  /** How long the lock lives unless extended, in ms (required, above 0). */
  ttl: number;
  /** How long to wait for it, in ms; without it, one attempt. */
  wait?: number;
  /** Issue a fencing number (`lease.fence`), to be checked by the protected resource. */
  fencing?: boolean;
  /** Keep the lock alive while held (renewed every `renewEvery`, default ttl/3). */
  autoExtend?: boolean;
  /** Take it in arrival order, handed directly to the next waiter. */
  fair?: boolean;
  /** Gives up the wait when it aborts (the promise rejects with AbortError; nothing is held). */
  signal?: AbortSignal;
  /** Stop auto-extending after this long, in ms. */
  maxHold?: number;
  /** Keep the lock at least this long after taking it, in ms. */
  minHold?: number;
  /** Renew this often, in ms. */
  renewEvery?: number;
  /** A label for the owner record stored with the lock. */
  ownerLabel?: string;
  /** Store the owner record (host, pid, program) with the lock (default true). */
  owner?: boolean;
}

/** A held lock (or permit, read or write hold, leadership). */
export declare class Lease implements AsyncDisposable {
  private constructor();
  /** The lock's key (or the primitive's name). */
  readonly key: string;
  /** The fencing number issued with this acquisition (null unless `fencing: true`). */
  readonly fence: number | null;
  /** The token stored in the lock: a secret capability, for handing the lock to another process. */
  readonly token: string;
  /** True until released, found lost, or its validity runs out. */
  readonly held: boolean;
  /** True once found lost while held (never after a normal release). */
  readonly lost: boolean;
  /** Why it was lost; null while not lost. */
  readonly lossReason: 'expired' | 'not_held' | 'lost' | null;
  /** Milliseconds of validity left (0 once over or lost). */
  readonly remaining: number;
  /** Aborts (reason: a LockLostError) when the lock is lost while held. */
  readonly signal: AbortSignal;
  /** Gives the lock back; rejects with NotHeldError if it was no longer ours, or released already. */
  release(): Promise<void>;
  /** Sets the validity to `ttl` ms from now, if still ours (else NotHeldError). */
  extend(ttl: number): Promise<void>;
  /** `await using`: releases at the end of the block, unless released already. */
  [Symbol.asyncDispose](): Promise<void>;
}

/** What the server says about a key. */
export interface KeyState {
  key: string;
  /** The holder's token in full (as `leasehold inspect` shows it): whoever has it can release the lock. */
  holder: string | null;
  /** Milliseconds left (null: free, or a PostgreSQL session lock, which lives with its session). */
  ttl: number | null;
  fencingCounter: number | null;
  owner: string | null;
}

/** One holder of a listed lock. */
export interface LockHolder {
  /** The holder's token, redacted. */
  holder: string;
  owner: string | null;
  ttl: number | null;
}

/** A lock of the lock table (`list`). */
export interface LockEntry {
  key: string;
  kind: 'lock' | 'fair' | 'permits' | 'read' | 'election' | string;
  holders: LockHolder[];
  ttl: number | null;
  fencingCounter: number | null;
  waiters: number | null;
  permits: number | null;
}

/** One event of a lock's history. */
export interface HistoryEvent {
  /** Milliseconds since the epoch. */
  at: number;
  kind: 'acquired' | 'released' | 'lost' | 'forced' | 'handed-over' | string;
  fencing: number | null;
  holder: string | null;
  owner: string | null;
  detail: string | null;
}

/** An election's leader. */
export interface Leader {
  id: string;
  term: number;
}

/** A connection to one lock backend, any URL. Cheap to share. */
export declare class Locker {
  private constructor();
  /**
   * Connects to `url`: `redis://`, `rediss://`, `redis-sentinel://`, `redis-cluster://`,
   * `redlock://`, `etcd://`, `etcds://`, `postgres://`, `memory://`, `file://`.
   */
  static connect(url: string, options?: ConnectOptions): Promise<Locker>;
  /** The backend's name. */
  readonly backend: 'redis' | 'redlock' | 'etcd' | 'postgres' | 'memory' | 'file' | string;
  /** Takes the lock `key`; rejects with NotAcquiredError if still busy when the wait ends. */
  lock(key: string, options: LockOptions): Promise<Lease>;
  /** Takes one of `permits` permits of semaphore `name`. */
  semaphore(name: string, permits: number, options: LockOptions): Promise<Lease>;
  /** Takes read-write lock `name` for reading (shared with other readers). */
  readLock(name: string, options: LockOptions): Promise<Lease>;
  /** Takes read-write lock `name` for writing (alone). */
  writeLock(name: string, options: LockOptions): Promise<Lease>;
  /** Takes every key of `keys` at once, or none (redis:// only). */
  multiLock(keys: string[], options: LockOptions): Promise<Lease>;
  /** Campaigns in election `name` as `id`; resolves when elected (the lease is the leadership). */
  campaign(name: string, id: string, options: LockOptions): Promise<Lease>;
  /**
   * Takes `key`, runs `work(lease)`, releases. Rejects with LockLostError if the lock was lost
   * during the work (after the work ends), even if the work succeeded.
   */
  withLock<T>(key: string, options: LockOptions, work: (lease: Lease) => Promise<T> | T): Promise<T>;
  /** What the server says about `key` (no lock taken). */
  inspect(key: string): Promise<KeyState>;
  /** The locks whose keys match `pattern` (`*` and `?` globs; default `*`). */
  list(pattern?: string): Promise<LockEntry[]>;
  /** The last `limit` (default 20) history events of `key`, newest first. */
  history(key: string, limit?: number): Promise<HistoryEvent[]>;
  /** Removes `key`'s holder whatever its token and bumps its fencing counter; returns the counter. */
  forceRelease(key: string, reason: string): Promise<number | null>;
  /** Releases `key` held with `token` (taken elsewhere); `fair: true` hands a fair lock to its longest waiter. */
  release(key: string, token: string, options?: { fair?: boolean }): Promise<void>;
  /** Sets the validity of `key`, held with `token` (taken elsewhere), to `ttl` ms from now. */
  extend(key: string, token: string, ttl: number): Promise<void>;
  /** Raises `key`'s fencing counter to at least `atLeast`; returns the counter. */
  raiseFencingCounter(key: string, atLeast: number): Promise<number>;
  /** The current leader of election `name`, or null. */
  leader(name: string): Promise<Leader | null>;
  /** The leadership of election `name` as it changes (null: nobody leads). */
  watchLeader(name: string, options?: { every?: number; signal?: AbortSignal }): AsyncIterable<Leader | null>;
}

/** The base of every error the library reports. */
export declare class LeaseholdError extends Error {
  /** The kind, in SCREAMING_SNAKE_CASE (`NOT_ACQUIRED`, `NOT_HELD`, ...). */
  readonly code: string;
  /** The key concerned, where there is one. */
  readonly key?: string;
}
/** An argument was refused by the library before anything was sent. */
export declare class InvalidArgumentError extends LeaseholdError {}
/** The server could not be reached or the connection broke. */
export declare class ConnectionError extends LeaseholdError {
  /** True when the command may have been applied anyway. */
  readonly ambiguous: boolean;
}
/** The server refused a command (ACL, role). */
export declare class PermissionDeniedError extends LeaseholdError {}
/** The deployment does not allow the operation (cluster slots, roles). */
export declare class TopologyError extends LeaseholdError {}
/** The server refused the credentials or certificate. */
export declare class AuthenticationError extends LeaseholdError {}
/** The server replied with an error. */
export declare class ServerError extends LeaseholdError {}
/** The fencing counter reached 2^53; no number was issued. */
export declare class FencingExhaustedError extends LeaseholdError {}
/** The lock is not held by this token (expired, released or taken over). */
export declare class NotHeldError extends LeaseholdError {}
/** The lock was still busy when the wait ended. */
export declare class NotAcquiredError extends LeaseholdError {
  readonly key: string;
  /** How long it waited, in ms. */
  readonly waitedMs: number;
  /** How many attempts it made. */
  readonly attempts: number;
}
/** The lock was granted, but the reply came after its validity. */
export declare class ExpiredOnArrivalError extends LeaseholdError {}
/** Too few replicas acknowledged the lock in time; it was released. */
export declare class NotReplicatedError extends LeaseholdError {}
/** Redlock: too few nodes granted the lock (or answered). */
export declare class NoQuorumError extends LeaseholdError {}
/** The lock was lost while held. */
export declare class LockLostError extends LeaseholdError {
  readonly key: string;
  readonly reason: 'expired' | 'not_held' | 'lost';
}
/** The backend does not have this primitive or option. */
export declare class UnsupportedError extends LeaseholdError {
  readonly backend: string;
}
/** The request contradicts the state on the server. */
export declare class ConflictError extends LeaseholdError {}
/** The URL's backend is not compiled into this build. */
export declare class BackendNotCompiledError extends LeaseholdError {}
/** The server's reply was not one leasehold understands. */
export declare class UnexpectedReplyError extends LeaseholdError {}
/** A wait given up through its AbortSignal; nothing is held. `cause` is the signal's reason. */
export declare class AbortError extends LeaseholdError {}
