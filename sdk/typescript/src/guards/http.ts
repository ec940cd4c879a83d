// Fenced HTTP, both sides, following the pinned wire contract and the Go
// package fencehttp.
//
// Client: fencedFetch(lease) sends Fencing-Scope and Fencing-Token (and
// Fencing-Owner, Fencing-Token-Signature when known) on every request, with
// the lease's signal so that requests stop when the lease ends, and turns a
// 409 stale-token problem into a lost lease (invariant I7). It never
// retries.
//
// Server: fencingHandler(guard, handler) wraps a node:http request handler,
// and fencingMiddleware(guard) is the same as (req, res, next) middleware
// (Express, Connect, Fastify through @fastify/middie). Every request whose
// method is not safe (anything but GET, HEAD, OPTIONS, TRACE) runs inside
// guard.do: its token is checked first, and recorded when the handler's
// final status is below 500. Answers the middleware gives itself are
// application/problem+json:
//
//   missing Fencing-Token                     428
//   malformed token, missing/malformed scope  400
//   token above what the guard can store      400
//   token below the highest accepted          409, with scope, presentedToken, highestToken
//   Fencing-Sequence already applied          409 duplicate-write, with scope, token, sequence, lastSequence
//   Fencing-Sequence skipped (strict guard)   409 sequence-gap, the same members
//   malformed Fencing-Sequence                400 invalid-sequence
//   guard failure                             503
//
// Non-guarantees: safe methods are neither checked nor serialized; a
// handler that answers 4xx still records its token; if the guard fails to
// record the token after the handler answered, the client has seen success
// and the failure is only logged.

import type { IncomingMessage, ServerResponse } from "node:http";
import {
  DuplicateError,
  FencedError,
  InvalidScopeError,
  InvalidSequenceError,
  InvalidTokenError,
  NoTokenError,
  SequenceGapError,
  StaleTokenError,
  TokenOutOfRangeError,
} from "../errors.js";
import { MAX_SEQUENCE, MAX_TOKEN, validateScope } from "../scope.js";
import type { FenceLease, Guard } from "./guard.js";

export const HEADER_SCOPE = "Fencing-Scope";
export const HEADER_TOKEN = "Fencing-Token";
export const HEADER_SIGNATURE = "Fencing-Token-Signature";
export const HEADER_OWNER = "Fencing-Owner";

export const CONTENT_TYPE_PROBLEM = "application/problem+json";
export const PROBLEM_STALE_TOKEN = "urn:fenced:problem:stale-token";
export const PROBLEM_MISSING_TOKEN = "urn:fenced:problem:missing-token";
export const PROBLEM_INVALID_TOKEN = "urn:fenced:problem:invalid-token";
export const PROBLEM_INVALID_SCOPE = "urn:fenced:problem:invalid-scope";
export const PROBLEM_GUARD_UNAVAILABLE = "urn:fenced:problem:guard-unavailable";
export const HEADER_SEQUENCE = "Fencing-Sequence";
export const PROBLEM_DUPLICATE = "urn:fenced:problem:duplicate-write";
export const PROBLEM_SEQUENCE_GAP = "urn:fenced:problem:sequence-gap";
export const PROBLEM_INVALID_SEQUENCE = "urn:fenced:problem:invalid-sequence";

/**
 * Why s is not canonical decimal ("0", or a digit 1-9 then ASCII digits), or
 * "" if it is: one spelling per number, as in the Go guards (guard spec,
 * section 4). No sign, space or leading zero.
 */
function notCanonical(s: string): string {
  if (/^(0|[1-9][0-9]*)$/.test(s)) return "";
  return /^[0-9]+$/.test(s) ? "has a leading zero" : "is not a decimal number";
}

/** Parses a Fencing-Sequence value: absent is 0n (none); else canonical decimal in 1..2^63-1. */
export function parseSequence(s: string | undefined): bigint {
  if (s === undefined) return 0n;
  const why = notCanonical(s);
  if (why) throw new InvalidSequenceError(`invalid fencing sequence: ${JSON.stringify(s.slice(0, 40))} ${why}`);
  const q = BigInt(s);
  if (q === 0n || q > MAX_SEQUENCE) throw new InvalidSequenceError(`invalid fencing sequence: ${s.slice(0, 40)} is not in 1..2^63-1`);
  return q;
}

const printable = /^[\p{L}\p{M}\p{N}\p{P}\p{S}\p{Zs}]*$/u;

/**
 * Parses a Fencing-Token value: canonical decimal (no sign, space or leading
 * zero) in 1..2^64-1. Node's HTTP/1.1 parser removes spaces and tabs around a
 * field value (RFC 9110 section 5.5); anything that reaches here with them is
 * refused.
 */
export function parseToken(s: string | undefined): bigint {
  if (s === undefined || s === "") throw new NoTokenError();
  const why = notCanonical(s);
  if (why) throw new InvalidTokenError(`invalid fencing token: ${JSON.stringify(s.slice(0, 40))} ${why}`);
  const t = BigInt(s);
  if (t > MAX_TOKEN) throw new InvalidTokenError(`invalid fencing token: ${s.slice(0, 40)} exceeds the uint64 range`);
  if (t === 0n) throw new InvalidTokenError("invalid fencing token: 0 is never issued");
  return t;
}

/** A problem details answer (RFC 9457); tokens are bigints, written as JSON numbers. */
export interface Problem {
  type: string;
  title: string;
  status: number;
  detail?: string;
  scope?: string;
  presentedToken?: bigint;
  highestToken?: bigint;
  /** Set on duplicate-write and sequence-gap problems. */
  token?: bigint;
  sequence?: bigint;
  lastSequence?: bigint;
}

/** The answer the middleware gives for an error of the headers or the guard. */
export function problemFor(err: unknown): Problem {
  if (err instanceof StaleTokenError) {
    return {
      type: PROBLEM_STALE_TOKEN,
      title: "Stale fencing token",
      status: 409,
      detail: err.message,
      scope: err.scope,
      presentedToken: err.presented,
      highestToken: err.highest,
    };
  }
  if (err instanceof DuplicateError || err instanceof SequenceGapError) {
    const dup = err instanceof DuplicateError;
    return {
      type: dup ? PROBLEM_DUPLICATE : PROBLEM_SEQUENCE_GAP,
      title: dup ? "Duplicate write" : "Fencing sequence gap",
      status: 409,
      detail: err.message,
      scope: err.scope,
      token: err.token,
      sequence: err.sequence,
      lastSequence: err.last,
    };
  }
  if (err instanceof InvalidSequenceError) {
    return { type: PROBLEM_INVALID_SEQUENCE, title: "Invalid fencing sequence", status: 400, detail: err.message };
  }
  if (err instanceof NoTokenError) {
    return {
      type: PROBLEM_MISSING_TOKEN,
      title: "Fencing token required",
      status: 428,
      detail: `mutating requests need the ${HEADER_SCOPE} and ${HEADER_TOKEN} headers`,
    };
  }
  if (err instanceof InvalidTokenError || err instanceof TokenOutOfRangeError) {
    return { type: PROBLEM_INVALID_TOKEN, title: "Invalid fencing token", status: 400, detail: err.message };
  }
  if (err instanceof InvalidScopeError) {
    return { type: PROBLEM_INVALID_SCOPE, title: "Invalid fencing scope", status: 400, detail: err.message };
  }
  return {
    type: PROBLEM_GUARD_UNAVAILABLE,
    title: "Fencing guard unavailable",
    status: 503,
    detail: "the guard could not check the token; nothing was applied",
  };
}

/** The problem as JSON, tokens as exact JSON numbers. */
export function problemJSON(p: Problem): string {
  const parts = [`"type":${JSON.stringify(p.type)}`, `"title":${JSON.stringify(p.title)}`, `"status":${p.status}`];
  if (p.detail) parts.push(`"detail":${JSON.stringify(p.detail)}`);
  if (p.scope) parts.push(`"scope":${JSON.stringify(p.scope)}`);
  if (p.presentedToken) parts.push(`"presentedToken":${p.presentedToken}`);
  if (p.highestToken) parts.push(`"highestToken":${p.highestToken}`);
  if (p.token) parts.push(`"token":${p.token}`);
  if (p.sequence) parts.push(`"sequence":${p.sequence}`);
  if (p.lastSequence !== undefined && p.sequence) parts.push(`"lastSequence":${p.lastSequence}`);
  return `{${parts.join(",")}}\n`;
}

export function writeProblem(res: ServerResponse, p: Problem): void {
  const body = problemJSON(p);
  res.writeHead(p.status, {
    "Content-Type": CONTENT_TYPE_PROBLEM,
    "X-Content-Type-Options": "nosniff",
    "Content-Length": Buffer.byteLength(body),
  });
  res.end(body);
}

/** Reads a JSON number member as a bigint, exactly (JSON.parse would round above 2^53). */
function bigMember(text: string, name: string): bigint {
  const m = new RegExp(`"${name}"\\s*:\\s*([0-9]+)`).exec(text);
  return m ? BigInt(m[1]!) : 0n;
}

/**
 * Reads a response that may be a stale-token rejection (409 with an
 * application/problem+json body of type stale-token). Returns the
 * rejection, if it is one, and a response to hand on whose body is unread.
 */
export async function staleFromResponse(resp: Response): Promise<{ stale?: StaleTokenError; response: Response }> {
  if (resp.status !== 409) return { response: resp };
  const ct = (resp.headers.get("content-type") ?? "").split(";")[0]!.trim().toLowerCase();
  if (ct !== CONTENT_TYPE_PROBLEM) return { response: resp };
  const text = await resp.text();
  const response = new Response(text, { status: resp.status, statusText: resp.statusText, headers: resp.headers });
  if (text.length > 64 << 10) return { response };
  let p: { type?: unknown; scope?: unknown };
  try {
    p = JSON.parse(text);
  } catch {
    return { response };
  }
  if (p.type !== PROBLEM_STALE_TOKEN) return { response };
  const stale = new StaleTokenError(typeof p.scope === "string" ? p.scope : "", bigMember(text, "presentedToken"), bigMember(text, "highestToken"));
  return { stale, response };
}

/**
 * Returns a fetch that fences every request with lease: it sets
 * Fencing-Scope and Fencing-Token (replacing the caller's), Fencing-Owner
 * and Fencing-Token-Signature when the lease has them, passes the lease's
 * signal (with the caller's) so that requests abort when the lease ends,
 * and marks the lease lost when a resource answers that its token is stale.
 * The response is returned with its body unread (a 409 problem is read
 * and handed on as a copy). It never retries.
 *
 * A Fencing-Sequence the caller set is sent as it is (send the same one
 * again to retry a write: a copy already applied is answered 409
 * duplicate-write, which does not lose the lease); with { sequences: true }
 * a request without one gets lease.nextSequence().
 */
export function fencedFetch(
  lease: FenceLease & { readonly signal?: AbortSignal },
  base: typeof fetch = globalThis.fetch,
  options: { sequences?: boolean } = {},
): typeof fetch {
  return async (input, init = {}) => {
    const headers = new Headers(init.headers ?? (input instanceof Request ? input.headers : undefined));
    if (options.sequences && !headers.has(HEADER_SEQUENCE) && lease.nextSequence) {
      headers.set(HEADER_SEQUENCE, lease.nextSequence().toString());
    }
    headers.set(HEADER_SCOPE, lease.key);
    headers.set(HEADER_TOKEN, lease.token.toString());
    headers.delete(HEADER_OWNER);
    headers.delete(HEADER_SIGNATURE);
    if (lease.owner && Buffer.byteLength(lease.owner) <= 256 && printable.test(lease.owner)) {
      headers.set(HEADER_OWNER, lease.owner);
    }
    if (lease.signature) {
      headers.set(HEADER_SIGNATURE, lease.signature);
    }
    const signals = [init.signal, lease.signal].filter((s): s is AbortSignal => s != null);
    const signal = signals.length > 1 ? AbortSignal.any(signals) : signals[0];
    const { stale, response } = await staleFromResponse(await base(input, { ...init, headers, signal }));
    if (stale) {
      lease.markLost(stale);
    }
    return response;
  };
}

/** What a fenced request carries to its handler: req.fencing. */
export interface Fencing<C> {
  scope: string;
  token: bigint;
  /** The request's Fencing-Sequence, when it had one. */
  sequence?: bigint;
  owner?: string;
  signature?: string;
  /** What the guard gave apply: for PgGuard the client of the open transaction. */
  context: C;
}

export interface FencingOptions {
  /** Derives the scope from the request instead of Fencing-Scope. */
  scope?: (req: IncomingMessage) => string;
  /** Which final statuses count as failed (the token is not recorded). Default: status >= 500. */
  failed?: (status: number) => boolean;
  /** Told when the guard failed after the handler answered. Default: console.error. */
  onLateError?: (err: unknown, req: IncomingMessage) => void;
}

/** A node:http request as a fencingHandler handler gets it. */
export type FencedRequest<C> = IncomingMessage & { fencing?: Fencing<C> };

function single(req: IncomingMessage, name: string): string | undefined {
  const v = req.headersDistinct[name.toLowerCase()];
  if (!v || v.length === 0) return undefined;
  if (v.length > 1) throw name === HEADER_TOKEN ? new InvalidTokenError(`${name} given ${v.length} times`) : new InvalidScopeError(`${name} given ${v.length} times`);
  return v[0];
}

const safeMethods = new Set(["GET", "HEAD", "OPTIONS", "TRACE"]);

class HandlerFailed extends FencedError {}

async function runFenced<C>(
  guard: Guard<C>,
  req: FencedRequest<C>,
  res: ServerResponse,
  options: FencingOptions,
  run: () => Promise<void>,
): Promise<void> {
  let scope: string;
  let token: bigint;
  let owner: string | undefined;
  let sequence: bigint;
  try {
    token = parseToken(single(req, HEADER_TOKEN));
    const qs = req.headersDistinct[HEADER_SEQUENCE.toLowerCase()];
    if (qs && qs.length > 1) throw new InvalidSequenceError(`${HEADER_SEQUENCE} given ${qs.length} times`);
    sequence = parseSequence(qs?.[0]);
    if (options.scope) {
      try {
        scope = options.scope(req);
      } catch (err) {
        throw new InvalidScopeError(`invalid fencing scope: ${String(err)}`);
      }
    } else {
      scope = single(req, HEADER_SCOPE) ?? "";
    }
    validateScope(scope);
    const o = req.headersDistinct[HEADER_OWNER.toLowerCase()];
    if (o?.length === 1 && Buffer.byteLength(o[0]!) <= 256 && printable.test(o[0]!)) owner = o[0];
  } catch (err) {
    writeProblem(res, problemFor(err));
    return;
  }
  const failed = options.failed ?? ((s: number) => s >= 500);
  let ran = false;
  try {
    await guard.do(
      scope,
      token,
      async (context) => {
        ran = true;
        req.fencing = { scope, token, owner, signature: single(req, HEADER_SIGNATURE), context };
        if (sequence !== 0n) req.fencing.sequence = sequence;
        await run();
        if (failed(res.statusCode)) {
          throw new HandlerFailed(`handler answered ${res.statusCode}`);
        }
      },
      { owner, sequence },
    );
  } catch (err) {
    if (!ran) {
      if (!res.headersSent) writeProblem(res, problemFor(err));
      return;
    }
    if (err instanceof HandlerFailed) return;
    (options.onLateError ?? ((e) => console.error("fencing guard failed after the handler answered; token not recorded:", e)))(err, req);
    if (!res.writableEnded) {
      if (!res.headersSent) writeProblem(res, problemFor(err));
      else res.end();
    }
  }
}

function finished(res: ServerResponse): Promise<void> {
  return new Promise((resolve) => {
    if (res.writableFinished || res.destroyed) return resolve();
    res.once("finish", resolve);
    res.once("close", resolve);
  });
}

/**
 * Wraps a node:http request handler: mutating requests run inside
 * guard.do, after their token was checked; the handler finds the checked
 * scope and token, and the guard's context, in req.fencing. The handler's
 * answer must be complete when its promise settles (or soon after: the
 * wrapper waits for the response to finish).
 */
export function fencingHandler<C>(
  guard: Guard<C>,
  handler: (req: FencedRequest<C>, res: ServerResponse) => unknown,
  options: FencingOptions = {},
): (req: IncomingMessage, res: ServerResponse) => Promise<void> {
  return async (req, res) => {
    if (safeMethods.has(req.method ?? "GET")) {
      await handler(req, res);
      return;
    }
    await runFenced(guard, req, res, options, async () => {
      await handler(req, res);
      await finished(res);
    });
  };
}

/**
 * The same as (req, res, next) middleware, for Express, Connect and
 * Fastify (through @fastify/middie): the rest of the chain runs inside
 * guard.do, which ends when the response has finished.
 */
export function fencingMiddleware<C>(
  guard: Guard<C>,
  options: FencingOptions = {},
): (req: IncomingMessage, res: ServerResponse, next: (err?: unknown) => void) => void {
  return (req, res, next) => {
    if (safeMethods.has(req.method ?? "GET")) {
      next();
      return;
    }
    void runFenced(guard, req, res, options, async () => {
      const done = finished(res);
      next();
      await done;
    });
  };
}
