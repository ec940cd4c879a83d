import { DuplicateError, InvalidScopeError, InvalidSequenceError, NoTokenError, SequenceGapError, StaleTokenError } from "./errors.js";

/** The longest scope (and lease key), in bytes of UTF-8. */
export const MAX_SCOPE_BYTES = 512;

/** The largest token: 2^64-1. */
export const MAX_TOKEN = (1n << 64n) - 1n;

// Go's unicode.IsGraphic: letters, marks, numbers, punctuation, symbols and
// space separators.
const graphic = /^[\p{L}\p{M}\p{N}\p{P}\p{S}\p{Zs}]*$/u;

/**
 * Throws an InvalidScopeError unless scope is a valid lease key: 1 to 512
 * bytes of printable UTF-8, the rule every guard and the server apply.
 */
export function validateScope(scope: string): void {
  if (typeof scope !== "string" || scope === "") {
    throw new InvalidScopeError("invalid fencing scope: scope is empty");
  }
  if (!scope.isWellFormed()) {
    throw new InvalidScopeError("invalid fencing scope: scope is not valid UTF-8");
  }
  const n = Buffer.byteLength(scope, "utf8");
  if (n > MAX_SCOPE_BYTES) {
    throw new InvalidScopeError(`invalid fencing scope: scope is ${n} bytes, the limit is ${MAX_SCOPE_BYTES}`);
  }
  if (!graphic.test(scope)) {
    throw new InvalidScopeError("invalid fencing scope: scope has a non-printable character");
  }
}

/**
 * The guard rule (invariant I5) for one decision: throws a StaleTokenError
 * when token < highest, NoTokenError for token 0, InvalidScopeError for a bad
 * scope. Equal tokens pass.
 */
export function checkToken(scope: string, token: bigint, highest: bigint): void {
  validateScope(scope);
  if (token === 0n) {
    throw new NoTokenError();
  }
  if (token < highest) {
    throw new StaleTokenError(scope, token, highest);
  }
}

/** The largest sequence a write may carry (the SQL guards keep it in a bigint). */
export const MAX_SEQUENCE = (1n << 63n) - 1n;

/**
 * checkToken for a write that may carry a sequence (0n: none), given the
 * last sequence accepted under highest (guard spec, section 7): a higher
 * token starts a new epoch; under the same token a sequence at or below
 * last is a DuplicateError, and with strict anything but last+1 a
 * SequenceGapError.
 */
export function checkSequence(scope: string, token: bigint, seq: bigint, highest: bigint, last: bigint, strict = false): void {
  checkToken(scope, token, highest);
  if (seq < 0n || seq > MAX_SEQUENCE) {
    throw new InvalidSequenceError(`fencing sequence ${seq} is not in 1..2^63-1`);
  }
  if (seq === 0n || token > highest) return;
  if (seq <= last) throw new DuplicateError(scope, token, seq, last);
  if (strict && seq !== last + 1n) throw new SequenceGapError(scope, token, seq, last);
}

/** The last sequence to record after accepting token with seq over highest and last. */
export function nextLast(token: bigint, seq: bigint, highest: bigint, last: bigint): bigint {
  if (seq !== 0n) return seq;
  return token > highest ? 0n : last;
}

/** Converts a token given as bigint, number or decimal string to a bigint in 1..2^64-1. */
export function toToken(t: bigint | number | string): bigint {
  let v: bigint;
  if (typeof t === "bigint") {
    v = t;
  } else if (typeof t === "number") {
    if (!Number.isSafeInteger(t)) {
      throw new RangeError(`token ${t} is not a safe integer; pass a bigint`);
    }
    v = BigInt(t);
  } else if (/^[0-9]+$/.test(t)) {
    v = BigInt(t);
  } else {
    throw new RangeError(`token ${JSON.stringify(t)} is not a decimal number`);
  }
  if (v < 0n || v > MAX_TOKEN) {
    throw new RangeError(`token ${v} is outside 0..2^64-1`);
  }
  return v;
}
