'use strict';
// The error classes: one per variant of the Rust library's `leasehold::Error` (the same
// names, with `Error` at the end), each with a `code` (the name in SCREAMING_SNAKE_CASE) and
// the variant's fields. Arguments refused by this package before any round trip are the
// built-in TypeError and RangeError instead (codes ERR_INVALID_ARG_TYPE and ERR_OUT_OF_RANGE,
// as Node's own).

/** The base of every error the library reports. */
class LeaseholdError extends Error {
  constructor(message, fields = {}) {
    super(message, fields.cause === undefined ? undefined : { cause: fields.cause });
    this.name = new.target.name;
    this.code = new.target.code;
    for (const [k, v] of Object.entries(fields)) {
      if (k !== 'cause' && k !== 'message' && k !== 'kind') this[k] = v;
    }
  }
}
LeaseholdError.code = 'LEASEHOLD';

// [name in the library, what it means]
const KINDS = [
  ['InvalidArgument', 'An argument was refused before anything was sent.'],
  ['Connection', 'The server could not be reached or the connection broke (ambiguous: the command may have been applied).'],
  ['PermissionDenied', 'The server refused a command (ACL, role).'],
  ['Topology', 'The deployment does not allow the operation (cluster slots, roles).'],
  ['Authentication', 'The server refused the credentials or certificate.'],
  ['Server', 'The server replied with an error.'],
  ['FencingExhausted', 'The fencing counter reached 2^53; no number was issued.'],
  ['NotHeld', 'The lock is not held by this token (expired, released or taken over).'],
  ['NotAcquired', 'The lock was still busy when the wait ended.'],
  ['ExpiredOnArrival', 'The lock was granted, but the reply came after its validity.'],
  ['NotReplicated', 'Too few replicas acknowledged the lock in time; it was released.'],
  ['NoQuorum', 'Redlock: too few nodes granted the lock (or answered).'],
  ['LockLost', 'The lock was lost while held (its renewal failed, or it expired).'],
  ['Unsupported', 'The backend does not have this primitive or option.'],
  ['Conflict', 'The request contradicts the state on the server (e.g. another number of permits).'],
  ['BackendNotCompiled', "The URL's backend is not compiled into this build."],
  ['UnexpectedReply', "The server's reply was not one leasehold understands."],
];

const snake = (name) => name.replace(/([a-z])([A-Z])/g, '$1_$2').toUpperCase();
const classes = {};
for (const [kind] of KINDS) {
  const className = `${kind}Error`;
  // A named class (its `name` is the class name), made per kind.
  const cls = { [className]: class extends LeaseholdError {} }[className];
  cls.code = snake(kind);
  classes[kind] = cls;
}

/** A wait given up through its AbortSignal: nothing is left held. `cause` is the signal's reason. */
class AbortError extends LeaseholdError {}
AbortError.code = 'ABORT_ERR';
classes.Aborted = AbortError;

const MARK = '\u0001leasehold:';

/** The library's error behind a native rejection, as its class; any other error unchanged. */
function convert(e, cause) {
  if (!(e instanceof Error) || typeof e.message !== 'string' || !e.message.startsWith(MARK)) {
    return e;
  }
  let fields;
  try {
    fields = JSON.parse(e.message.slice(MARK.length));
  } catch {
    return e;
  }
  const cls = classes[fields.kind] || classes.UnexpectedReply;
  if (cause !== undefined) fields.cause = cause;
  return new cls(fields.message, fields);
}

module.exports = {
  LeaseholdError,
  AbortError,
  convert,
  classes,
  InvalidArgumentError: classes.InvalidArgument,
  ConnectionError: classes.Connection,
  PermissionDeniedError: classes.PermissionDenied,
  TopologyError: classes.Topology,
  AuthenticationError: classes.Authentication,
  ServerError: classes.Server,
  FencingExhaustedError: classes.FencingExhausted,
  NotHeldError: classes.NotHeld,
  NotAcquiredError: classes.NotAcquired,
  ExpiredOnArrivalError: classes.ExpiredOnArrival,
  NotReplicatedError: classes.NotReplicated,
  NoQuorumError: classes.NoQuorum,
  LockLostError: classes.LockLost,
  UnsupportedError: classes.Unsupported,
  ConflictError: classes.Conflict,
  BackendNotCompiledError: classes.BackendNotCompiled,
  UnexpectedReplyError: classes.UnexpectedReply,
};
