// Errors of the client and the guards. Callers branch with instanceof on
// these classes; every class extends FencedError. Errors from the server keep
// the ConnectError they were made from as `cause`.

/** The base of every error this package throws on purpose. */
export class FencedError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** Acquire found the key held by someone else (after the wait, if any). */
export class HeldError extends FencedError {
  constructor(
    readonly key: string,
    /** The holder's owner name. */
    readonly owner: string,
    /** The holder's fencing token. */
    readonly token: bigint,
    /** Milliseconds the holder's lease had left when the server answered. */
    readonly remainingMs: number,
    options?: { cause?: unknown },
  ) {
    super(`${JSON.stringify(key)} is held by ${JSON.stringify(owner)} (token ${token}, ${remainingMs}ms remaining)`, options);
  }
}

/**
 * The outcome of an Acquire is unknown: an attempt went unanswered (the node
 * died or lost its leadership, perhaps after writing the grant) and the retry
 * on another node found the key held by this same owner, most likely through
 * that unseen grant. The caller may hold the key, without its lease ID, until
 * `remainingMs` passes. Never a HeldError: the holder may be the caller.
 */
export class AcquireUncertainError extends FencedError {
  constructor(
    readonly key: string,
    readonly owner: string,
    readonly remainingMs: number,
    /** The error of the unanswered attempt. */
    readonly attempt: unknown,
  ) {
    super(
      `acquisition outcome unknown: an attempt went unanswered (${String(attempt)}) and the retry found ` +
        `${JSON.stringify(key)} held by this owner ${JSON.stringify(owner)}, perhaps by that attempt's grant ` +
        `(${remainingMs}ms remaining)`,
    );
  }
}

/** Renew or Release of a lease that is not the current lease of its key. */
export class NotHeldError extends FencedError {}

/** The server refused the request as bad input (invalid_argument). */
export class InvalidArgumentError extends FencedError {}

/** The server could not serve the request now, or could not be reached; a retry may succeed. */
export class UnavailableError extends FencedError {}

/**
 * An endpoint answered for another cluster than the one the client is
 * pinned to. Its answer was not used: the endpoint counts as unavailable
 * and the call went on at the next one; thrown when no endpoint of the
 * pinned cluster answered.
 */
export class ClusterMismatchError extends UnavailableError {
  constructor(
    readonly endpoint: string,
    /** The client's cluster ID. */
    readonly pinned: string,
    /** The endpoint's cluster ID. */
    readonly got: string,
  ) {
    super(
      `endpoint belongs to another cluster: ${endpoint} answered for cluster ${got}, but this client is pinned to ` +
        `cluster ${pinned}; its answer was not used (tokens of two clusters are not comparable: check the endpoints)`,
    );
  }
}

/** Credentials missing or refused (unauthenticated). */
export class UnauthenticatedError extends FencedError {}

/** No rule grants the call (permission_denied). */
export class PermissionDeniedError extends FencedError {}

/** The call's deadline passed, on the client or on the server. */
export class TimeoutError extends FencedError {}

/** The caller aborted the call with its AbortSignal. */
export class AbortedError extends FencedError {}

/** Another error code from the server; `code` is the Connect code name. */
export class RPCError extends FencedError {
  constructor(
    message: string,
    readonly code: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/**
 * The reason of a lost lease: its signal's reason and what `lost` resolves
 * with. `cause` says why (a refused renewal, the local deadline, a stale
 * rejection).
 */
export class LeaseLostError extends FencedError {
  constructor(
    readonly key: string,
    readonly token: bigint,
    reason: string,
    options?: { cause?: unknown },
  ) {
    super(`lease lost: ${JSON.stringify(key)} token ${token}: ${reason}`, options);
  }
}

/** The reason of a released lease's signal. */
export class LeaseReleasedError extends FencedError {
  constructor(
    readonly key: string,
    readonly token: bigint,
  ) {
    super(`lease released: ${JSON.stringify(key)} token ${token}`);
  }
}

/**
 * A resource refused a write because a higher token was accepted for its
 * scope: the writer's authority is gone (invariant I7). Do not retry with
 * the same token.
 */
export class StaleTokenError extends FencedError {
  constructor(
    readonly scope: string,
    readonly presented: bigint,
    readonly highest: bigint,
  ) {
    super(`stale fencing token: scope ${JSON.stringify(scope)}: token ${presented} is below ${highest}`);
  }
}

/**
 * A write whose sequence is at or below the last one accepted under its
 * token (guard spec, section 7): it, or an earlier attempt of it, was
 * applied, and it was not applied again. Not a stale token: the lease is
 * still held.
 */
export class DuplicateError extends FencedError {
  constructor(
    readonly scope: string,
    readonly token: bigint,
    readonly sequence: bigint,
    readonly last: bigint,
  ) {
    super(`duplicate write for scope ${JSON.stringify(scope)}: token ${token} sequence ${sequence}, last sequence accepted ${last} (already applied)`);
  }
}

/** A strict guard's refusal of a sequence other than last+1 under the same token. Nothing applied. */
export class SequenceGapError extends FencedError {
  constructor(
    readonly scope: string,
    readonly token: bigint,
    readonly sequence: bigint,
    readonly last: bigint,
  ) {
    super(`fencing sequence gap for scope ${JSON.stringify(scope)}: token ${token} sequence ${sequence}, expected ${last + 1n}`);
  }
}

/** A sequence outside 1..2^63-1. */
export class InvalidSequenceError extends FencedError {}

/** A guard was given no token (0 or absent). */
export class NoTokenError extends FencedError {
  constructor() {
    super("no fencing token");
  }
}

/** A token the guard cannot store (SQL guards: above 2^63-1) or outside uint64. */
export class TokenOutOfRangeError extends FencedError {}

/** A scope that is not a valid lease key (1..512 bytes of printable UTF-8). */
export class InvalidScopeError extends FencedError {}

/** A malformed Fencing-Token header value. */
export class InvalidTokenError extends FencedError {}

/** A negative token found in a guard's table, which no guard writes. */
export class CorruptTokenError extends FencedError {}

/** RowFence.update found no row with the id. */
export class RowNotFoundError extends FencedError {}
