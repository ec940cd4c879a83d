// The consumer-side message fence (guard spec, section 8), for any broker;
// the Go package fence/fencemsg does the same.
//
// A queue keeps a message after its producer lost its lease, and
// redelivery puts old messages behind new ones: the lease cannot stop
// them, the consumer can. The producer stamps each message with its lease
// (leaseStamp, writeStamp); a MessageConsumer decides each message with a
// guard before applying it, so that the message's effect commits only if
// its token is at least the highest accepted for its scope, together with
// the new highest token (PgGuard: the effect's statements run in the
// guard's transaction). The outcome says how to settle the delivery:
//
//   applied    the guard accepted and the effect committed      ack
//   stale      a higher token was accepted; nothing applied      ack (no redelivery can make it current)
//   duplicate  its sequence was applied already; not again       ack
//   refused    no or malformed stamp, token out of the guard's   reject without requeue (JetStream: term)
//              range
//   redeliver  the guard could not decide, the effect failed,    nack with requeue (JetStream: nak)
//              a strict guard's sequence gap
//
// The amqp (amqplib) and jetstream (@nats-io/jetstream) modules carry the
// headers and settle deliveries that way; this one depends on no broker.
//
// Non-guarantees: the producer is not told of its refused messages (a
// queue has no answer path; it learns of its loss from its lease, and
// fenced from the guard's reporter). Messages of a stale holder that reach
// the consumer before any of the new holder's are applied: they were
// current then. A message without a sequence may be applied twice when the
// consumer stops between the commit and the ack. Sequences assume one
// epoch's messages arrive in order: a broker that redelivers a message
// after later ones of its token makes a non-strict guard refuse it as a
// duplicate although it was never applied; consume such queues with a
// guard with strictSequences, or one message of a scope at a time.

import {
  DuplicateError,
  InvalidScopeError,
  InvalidSequenceError,
  InvalidTokenError,
  NoTokenError,
  StaleTokenError,
  TokenOutOfRangeError,
} from "../errors.js";
import { MAX_SEQUENCE, MAX_TOKEN, validateScope } from "../scope.js";
import type { FenceLease, Guard } from "./guard.js";
import { HEADER_OWNER, HEADER_SCOPE, HEADER_SEQUENCE, HEADER_SIGNATURE, HEADER_TOKEN, parseSequence, parseToken } from "./http.js";

export { HEADER_OWNER, HEADER_SCOPE, HEADER_SEQUENCE, HEADER_SIGNATURE, HEADER_TOKEN };

/** Every header a stamp writes, exact in case. */
export const HEADER_NAMES: readonly string[] = [HEADER_SCOPE, HEADER_TOKEN, HEADER_SEQUENCE, HEADER_OWNER, HEADER_SIGNATURE];

/**
 * What a producer puts in a message's headers: its lease's scope and token,
 * and optionally the message's sequence under that token, the lease's
 * owner (informational) and the token's signature.
 */
export interface Stamp {
  scope: string;
  token: bigint;
  /** 1..2^63-1; absent or 0n: none. */
  sequence?: bigint;
  owner?: string;
  signature?: string;
}

/**
 * Headers a consumer reads, names matched exactly: a plain object (AMQP
 * tables as amqplib decodes them), a Map, or a multi-valued source whose
 * values(name) returns every value (NATS's MsgHdrs). A value must be a
 * string or bytes (Buffer, Uint8Array: UTF-8); undefined is absent.
 */
export type MessageHeaders = Readonly<Record<string, unknown>> | ReadonlyMap<string, unknown> | HeaderValues;

/** Headers with every value of a name, such as NATS's MsgHdrs. */
export interface HeaderValues {
  values(name: string): string[];
}

/** Headers a producer writes through set and delete: NATS's MsgHdrs, a Map, fetch's Headers. */
export interface HeaderWriter {
  set(name: string, value: string): unknown;
  delete(name: string): unknown;
}

const printable = /^[\p{L}\p{M}\p{N}\p{P}\p{S}\p{Zs}]*$/u;

/** An owner that travels: at most 256 bytes of printable UTF-8 (guard spec, section 1). */
function validOwner(o: string | undefined): o is string {
  return typeof o === "string" && o !== "" && Buffer.byteLength(o) <= 256 && printable.test(o);
}

/**
 * The stamp of a message published under lease now: its key and token, its
 * owner (when valid) and signature (when it has one), and a sequence:
 * options.sequence, or with { sequences: true } lease.nextSequence(). Call
 * it once per message and publish a re-sent message with the same stamp, so
 * that a copy that was applied already is a duplicate.
 */
export function leaseStamp(lease: FenceLease, options: { sequence?: bigint; sequences?: boolean } = {}): Stamp {
  const s: Stamp = { scope: lease.key, token: lease.token };
  if (validOwner(lease.owner)) s.owner = lease.owner;
  if (lease.signature) s.signature = lease.signature;
  checkStamp({ ...s, sequence: options.sequence }); // before a sequence is taken from the lease
  const seq = options.sequence ?? (options.sequences && lease.nextSequence ? lease.nextSequence() : 0n);
  if (seq !== 0n) s.sequence = seq;
  return s;
}

/** Throws, as readStamp would refuse it, unless s can be sent and applied. */
function checkStamp(s: Stamp): void {
  if (typeof s.token !== "bigint" || s.token === 0n) throw new NoTokenError();
  if (s.token < 0n || s.token > MAX_TOKEN) throw new TokenOutOfRangeError(`fencing token ${s.token} is outside 1..2^64-1`);
  validateScope(s.scope);
  const q = s.sequence ?? 0n;
  if (typeof q !== "bigint" || q < 0n || q > MAX_SEQUENCE) {
    throw new InvalidSequenceError(`fencing sequence ${String(q)} is not in 1..2^63-1`);
  }
  // A line break would end the header (NATS refuses it half-way through a write).
  if (s.signature !== undefined && (typeof s.signature !== "string" || /[\r\n]/.test(s.signature))) {
    throw new TypeError("fencing signature must be a string of one line");
  }
}

function isWriter(h: object): h is HeaderWriter {
  const w = h as Partial<HeaderWriter>;
  return typeof w.set === "function" && typeof w.delete === "function";
}

/**
 * Sets the stamp's headers in headers (replacing any fencing headers there)
 * and removes the optional ones the stamp does not have; returns headers.
 * Values are strings (AMQP long strings). An invalid scope, token or
 * sequence throws before anything is written; an owner that is not
 * printable text of at most 256 bytes is not sent (it is informational).
 */
export function writeStamp<H extends Record<string, unknown> | HeaderWriter>(stamp: Stamp, headers: H): H {
  checkStamp(stamp);
  const w: HeaderWriter = isWriter(headers)
    ? headers
    : {
        set: (k, v) => ((headers as Record<string, unknown>)[k] = v),
        delete: (k) => delete (headers as Record<string, unknown>)[k],
      };
  const optional = (k: string, v: string | undefined) => (v ? w.set(k, v) : w.delete(k));
  w.set(HEADER_SCOPE, stamp.scope);
  w.set(HEADER_TOKEN, stamp.token.toString());
  optional(HEADER_SEQUENCE, stamp.sequence ? stamp.sequence.toString() : undefined);
  optional(HEADER_OWNER, validOwner(stamp.owner) ? stamp.owner : undefined);
  optional(HEADER_SIGNATURE, stamp.signature);
  return headers;
}

// ignoreBOM keeps a leading U+FEFF, which the checks then refuse, instead of
// reading the bytes as another value.
const utf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

/** A header's value: absent, one string, or why it is neither (given twice, another type). */
type Value = { value?: string; bad?: string };

function kindOf(v: unknown): string {
  if (v === null) return "null";
  if (Array.isArray(v)) return "array";
  if (typeof v === "object") return "table";
  return typeof v;
}

function convert(name: string, v: unknown): Value {
  if (v === undefined) return {};
  if (typeof v === "string") return { value: v };
  if (v instanceof Uint8Array) {
    try {
      return { value: utf8.decode(v) };
    } catch {
      return { bad: `${name} is not valid UTF-8` };
    }
  }
  // Numbers and tables are refused, never converted (guard spec, section 8).
  return { bad: `${name} is a ${kindOf(v)}, not a string` };
}

function isValues(h: object): h is HeaderValues {
  return !(h instanceof Map) && typeof (h as Partial<HeaderValues>).values === "function";
}

function single(h: MessageHeaders | null | undefined, name: string): Value {
  if (h == null) return {};
  if (h instanceof Map) return convert(name, h.get(name));
  if (isValues(h)) {
    const vs: unknown = h.values(name);
    if (!Array.isArray(vs)) throw new TypeError(`headers: values(${JSON.stringify(name)}) did not return an array`);
    if (vs.length > 1) return { bad: `${name} given ${vs.length} times` };
    return convert(name, vs[0]);
  }
  const r = h as Readonly<Record<string, unknown>>;
  return Object.hasOwn(r, name) ? convert(name, r[name]) : {};
}

/**
 * Reads and validates a message's stamp (guard spec, section 8). Throws,
 * in this order of checking, NoTokenError (no Fencing-Token, or an empty
 * one), InvalidTokenError (not canonical decimal: a sign, a space, a leading
 * zero; 0, above 2^64-1, given twice, not a string), InvalidScopeError
 * (missing or invalid) and InvalidSequenceError (empty, not canonical
 * decimal, 0, above 2^63-1). An invalid
 * owner, and a signature that is not one string, are dropped.
 */
export function readStamp(headers: MessageHeaders | null | undefined): Stamp {
  const tok = single(headers, HEADER_TOKEN);
  if (tok.bad) throw new InvalidTokenError(`invalid fencing token: ${tok.bad}`);
  const token = parseToken(tok.value);
  const sc = single(headers, HEADER_SCOPE);
  if (sc.bad) throw new InvalidScopeError(`invalid fencing scope: ${sc.bad}`);
  if (sc.value === undefined) throw new InvalidScopeError(`invalid fencing scope: no ${HEADER_SCOPE}`);
  validateScope(sc.value);
  const sq = single(headers, HEADER_SEQUENCE);
  if (sq.bad) throw new InvalidSequenceError(`invalid fencing sequence: ${sq.bad}`);
  const sequence = parseSequence(sq.value);
  const s: Stamp = { scope: sc.value, token };
  if (sequence !== 0n) s.sequence = sequence;
  const owner = single(headers, HEADER_OWNER).value;
  if (validOwner(owner)) s.owner = owner;
  const sig = single(headers, HEADER_SIGNATURE).value;
  if (sig) s.signature = sig;
  return s;
}

/** What to do with a message once decided; see the table at the top of this module. */
export type Outcome = "applied" | "stale" | "duplicate" | "refused" | "redeliver";

/**
 * The outcome of a message whose guard call (or effect) threw err:
 * StaleTokenError is stale, DuplicateError duplicate; a missing or
 * malformed token, scope or sequence, or a token outside the guard's
 * range, is refused; anything else (a SequenceGapError, the guard's or the
 * effect's failure) is redeliver.
 */
export function classify(err: unknown): Exclude<Outcome, "applied"> {
  if (err instanceof StaleTokenError) return "stale";
  if (err instanceof DuplicateError) return "duplicate";
  if (
    err instanceof NoTokenError ||
    err instanceof InvalidTokenError ||
    err instanceof InvalidScopeError ||
    err instanceof InvalidSequenceError ||
    err instanceof TokenOutOfRangeError
  ) {
    return "refused";
  }
  return "redeliver";
}

/**
 * The decision on one message: applied with the effect's value, or another
 * outcome with the error behind it (StaleTokenError, DuplicateError, the
 * reason of a refusal, the failure to redeliver after). stamp is absent
 * only when the message had no valid stamp.
 */
export type MessageResult<T> =
  | { outcome: "applied"; stamp: Stamp; value: T }
  | { outcome: Exclude<Outcome, "applied">; stamp?: Stamp; error: unknown };

function isStamp(m: object): m is Stamp {
  const s = m as Partial<Stamp>;
  return !(m instanceof Map) && typeof s.token === "bigint" && typeof s.scope === "string";
}

/**
 * Applies fenced messages through a guard: PgGuard (the effect writes
 * through the transaction's client it is given, so that it commits with
 * the token), MemoryGuard for an effect in this process's memory, or any
 * Guard that runs apply inside its check. The guard's observer is told of
 * every stale message (a Reporter tells fenced). Messages of one scope are
 * serialized by the guard.
 */
export class MessageConsumer<C = void> {
  constructor(readonly guard: Guard<C>) {
    if (!guard || typeof guard.do !== "function") throw new TypeError("MessageConsumer needs a guard");
  }

  /**
   * Decides one message, from its headers (readStamp) or a stamp read
   * already, and runs effect through the guard with the stamp's scope,
   * token, sequence and owner: effect runs only if the token is current for
   * its scope, and its writes commit with the new highest token. Never
   * throws: every failure is an outcome (an error effect throws is
   * classified like the guard's, see classify). Settle the delivery by the
   * outcome only after this resolves.
   */
  async apply<T>(message: MessageHeaders | Stamp | null | undefined, effect: (ctx: C, stamp: Stamp) => Promise<T>): Promise<MessageResult<T>> {
    let stamp: Stamp;
    try {
      if (message != null && isStamp(message)) {
        checkStamp(message);
        stamp = message;
      } else {
        stamp = readStamp(message);
      }
    } catch (error) {
      return { outcome: "refused", error };
    }
    try {
      const value = await this.guard.do(stamp.scope, stamp.token, (ctx) => effect(ctx, stamp), {
        owner: validOwner(stamp.owner) ? stamp.owner : undefined,
        sequence: stamp.sequence,
      });
      return { outcome: "applied", stamp, value };
    } catch (error) {
      return { outcome: classify(error), stamp, error };
    }
  }
}
