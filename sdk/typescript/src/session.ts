// Calls over the Session stream
//
// Acquire, Renew and Release go over one shared Session stream per endpoint
// (HTTP/2), opened by the first call that needs it, so that a call costs a
// stream message instead of a request. Calls are pipelined: each carries an
// id, and the server answers each once, in any order.
//
// The stream changes how a call travels, never what it means
// (docs/client-algorithm.md):
//
//   - A new stream carries no call until it has answered a probe (id 0, a
//     Renew of the empty key, which a server serving Session refuses as
//     invalid_argument, or for want of credentials). The first call to an
//     endpoint opens the stream and goes unary, as do the calls after it
//     until the probe is answered: no call waits for a probe (a server
//     without Session may hold the stream unanswered).
//   - When the probe fails (no HTTP/2, a server without Session, a proxy
//     that speaks HTTP/1.1 only, no answer within the request timeout),
//     calls to that endpoint go unary and the next stream opens after a
//     pause that grows from 1 s to 1 min while probes keep failing. A
//     trusted stream that breaks is replaced at the next call.
//   - A stream that ends after a call was sent and before its answer leaves
//     that call's outcome unknown, exactly like a unary call cut after it was
//     sent: the call fails with an unavailable ConnectError that may have
//     arrived (rpc.ts), which the failover and the uncertain rules handle.
//   - The call's deadline travels as timeout_ms; an aborted call sends
//     cancel{id} and fails at once, like an aborted unary call. An Acquire
//     whose grant comes all the same (it raced the cancel) is handed to
//     onLateGrant, which releases it: nobody holds it.
//   - An answer's error is the unary call's (code, message, LeaseHeld), but
//     "canceled" when the caller did not cancel (the server cancelled the
//     call) is unavailable, as a unary call cut by the server is.
//
// Non-guarantees: a call that went unary because the stream was not usable
// costs a request; answers of a broken stream are never waited for again.

import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { codeFromString } from "@connectrpc/connect/protocol-connect";
import {
  LeaseHeldSchema,
  type SessionRequest,
  SessionRequestSchema,
  type SessionResponse,
} from "./gen/fenced/v1/lease_pb.js";
import { Pushable } from "./internal.js";

/** The probe's answers that prove the server serves Session: refusals of the empty key. */
const probeRefusals = new Set(["invalid_argument", "unauthenticated", "permission_denied"]);

/** The probe's id; calls count from 1. */
const probeId = 0n;

const minPauseMs = 1000;
const maxPauseMs = 60_000;

type CallInit = NonNullable<MessageInitShape<typeof SessionRequestSchema>["call"]>;

/** What a Session call carries: an acquire, a renew or a release (never a cancel). */
export type SessionCall = Exclude<CallInit, { case: "cancel" } | { case: undefined }>;

/** The answer of a call, its case matching the call's. */
export type SessionResult = Exclude<SessionResponse["result"], { case: "error" } | { case: undefined }>;

/** Opens one Session stream: the requests to send, and a signal that ends it. */
export type OpenSession = (requests: AsyncIterable<SessionRequest>, signal: AbortSignal) => AsyncIterable<SessionResponse>;

type Answer = { resp: SessionResponse } | { err: unknown };

/** Turns a call's SessionError into the ConnectError the unary call would have thrown. */
function answerError(e: { code: string; message: string; held?: unknown }): ConnectError {
  const code = codeFromString(e.code) ?? Code.Unknown;
  const details = e.held ? [{ desc: LeaseHeldSchema, value: e.held as never }] : undefined;
  return new ConnectError(e.message, code, undefined, details);
}

/** One Session stream and its calls waiting for their answers, by id. */
class Stream {
  readonly #ac = new AbortController();
  readonly #requests = new Pushable<SessionRequest>();
  readonly #waiting = new Map<bigint, (a: Answer) => void>();
  /** Cancelled calls whose answer may still be a grant, by id; they keep nothing alive. */
  readonly #late = new Map<bigint, (resp: SessionResponse) => void>();
  #nextId = 1n;
  #err: unknown;
  /** Keeps the process alive while a call waits (the stream's connection does not); the probe does not. */
  #alive: NodeJS.Timeout | undefined;
  /** Resolves true once the probe was answered as it must be, false when the stream failed first. */
  readonly trusted: Promise<boolean>;

  constructor(open: OpenSession, probeTimeoutMs: number, onEnd: (s: Stream, wasTrusted: boolean) => void) {
    void this.#receive(open(this.#requests, this.#ac.signal));
    this.trusted = this.#probe(probeTimeoutMs).then((ok) => (this.#trusted = ok));
    this.#ac.signal.addEventListener("abort", () => onEnd(this, this.#trusted), { once: true });
  }

  #trusted = false;

  /** Whether calls may go on the stream now: the probe was answered and the stream has not ended. */
  get usable(): boolean {
    return this.#trusted && this.#err === undefined;
  }

  get ended(): boolean {
    return this.#err !== undefined;
  }

  async #probe(timeoutMs: number): Promise<boolean> {
    const timer = setTimeout(() => this.fail(new Error(`probe unanswered within ${timeoutMs}ms`)), timeoutMs).unref();
    const a = await this.#send({ case: "renew", value: { key: "", leaseId: "" } }, 0, probeId);
    clearTimeout(timer);
    if ("err" in a) {
      return false;
    }
    const r = a.resp.result;
    if (r.case === "error" && probeRefusals.has(r.value.code)) {
      return true;
    }
    this.fail(new Error(`probe answered ${r.case === "error" ? r.value.code : r.case ?? "nothing"}, not a refusal`));
    return false;
  }

  async #receive(responses: AsyncIterable<SessionResponse>): Promise<void> {
    try {
      for await (const resp of responses) {
        const w = this.#waiting.get(resp.id);
        if (w) {
          this.#waiting.delete(resp.id);
          this.#idle();
          w({ resp });
        } else {
          const late = this.#late.get(resp.id);
          this.#late.delete(resp.id);
          late?.(resp);
        }
      }
      this.fail(new Error("stream ended by the server"));
    } catch (err) {
      this.fail(err);
    }
  }

  /** Ends the stream once, giving err to every call still waiting. */
  fail(err: unknown): void {
    if (this.#err !== undefined) {
      return;
    }
    this.#err = err ?? new Error("failed");
    const waiting = [...this.#waiting.values()];
    this.#waiting.clear();
    this.#late.clear();
    this.#idle();
    this.#requests.end();
    this.#ac.abort(this.#err);
    for (const w of waiting) {
      w({ err: this.#err });
    }
  }

  #idle(): void {
    if (this.#waiting.size === (this.#waiting.has(probeId) ? 1 : 0) && this.#alive !== undefined) {
      clearInterval(this.#alive);
      this.#alive = undefined;
    }
  }

  /** Sends call with id; the promise has its answer, or the stream's error. */
  #send(call: CallInit, timeoutMs: number, id: bigint): Promise<Answer> {
    if (this.#err !== undefined) {
      return Promise.resolve({ err: this.#err });
    }
    const answer = new Promise<Answer>((resolve) => this.#waiting.set(id, resolve));
    if (id !== probeId) {
      this.#alive ??= setInterval(() => {}, 1 << 30);
    }
    this.#requests.push(create(SessionRequestSchema, { id, timeoutMs: BigInt(Math.max(Math.ceil(timeoutMs), 0)), call }));
    return answer;
  }

  /** Stops waiting for call id and asks the server to stop working on it; late gets the answer if one still comes. */
  #cancel(id: bigint, late?: (resp: SessionResponse) => void): void {
    if (this.#waiting.delete(id)) {
      this.#idle();
      if (late) {
        this.#late.set(id, late);
      }
      if (this.#err === undefined) {
        this.#requests.push(create(SessionRequestSchema, { id, call: { case: "cancel", value: {} } }));
      }
    }
  }

  /**
   * Sends one call and waits for its answer. Rejects with the server's
   * error as a ConnectError; with an unavailable ConnectError when the
   * stream ended before the answer (the call may have been applied); with a
   * canceled ConnectError when signal aborted (cancel{id} sent: an answer
   * that still comes as a grant goes to onLateGrant).
   */
  async call(call: SessionCall, timeoutMs: number, signal: AbortSignal | undefined, onLateGrant?: (r: SessionResult) => void): Promise<SessionResult> {
    signal?.throwIfAborted();
    const id = this.#nextId++;
    let stop: ((a: Answer) => void) | undefined;
    const stopped = new Promise<Answer>((r) => (stop = r));
    const late = onLateGrant && ((resp: SessionResponse) => void (resp.result.case === call.case && onLateGrant(resp.result as SessionResult)));
    const onAbort = () => {
      this.#cancel(id, late);
      stop!({ err: new ConnectError("the call was aborted; cancel sent on the session stream", Code.Canceled) });
    };
    signal?.addEventListener("abort", onAbort, { once: true });
    try {
      const a = await Promise.race([this.#send(call, timeoutMs, id), stopped]);
      if ("err" in a) {
        if (a.err instanceof ConnectError && a.err.code === Code.Canceled && signal?.aborted) {
          throw a.err;
        }
        // Sent, and the stream ended before the answer: the outcome is unknown.
        throw new ConnectError(`session stream ended before the answer, the call may have been applied: ${String(a.err)}`, Code.Unavailable);
      }
      const r = a.resp.result;
      if (r.case === "error" && r.value.code === "canceled") {
        // Not asked for: the server cut the call, as it cuts a unary one.
        throw new ConnectError(`the server cancelled the call, which may have been applied: ${r.value.message}`, Code.Unavailable);
      }
      if (r.case === "error") {
        throw answerError(r.value);
      }
      if (r.case !== call.case) {
        throw new ConnectError(`session answered ${r.case ?? "nothing"} to ${call.case}`, Code.Internal);
      }
      return r as SessionResult;
    } finally {
      signal?.removeEventListener("abort", onAbort);
    }
  }
}

/** The Session stream of one endpoint, opened lazily, and its back-off. */
export class Session {
  #cur: Stream | undefined;
  #retryAt = 0;
  #pause = 0;
  #closed = false;

  /** open opens a stream; probeTimeoutMs bounds the probe, after which the stream counts as failed. */
  constructor(
    private readonly open: OpenSession,
    private readonly enabled: boolean,
    private readonly probeTimeoutMs: number,
    private readonly now: () => number = () => performance.now(),
  ) {}

  /**
   * The stream to send a call on, if one is open and trusted; undefined:
   * send the call unary (nothing of it was sent). Opens a stream, probed in
   * the background, when none is open and no pause is under way.
   */
  ready(): Stream | undefined {
    if (!this.enabled || this.#closed) {
      return undefined;
    }
    if (this.#cur === undefined || this.#cur.ended) {
      if (this.now() < this.#retryAt) {
        return undefined;
      }
      this.#cur = new Stream(this.open, this.probeTimeoutMs, (s, wasTrusted) => this.#ended(s, wasTrusted));
    }
    return this.#cur.usable ? this.#cur : undefined;
  }

  /** @internal For tests: opens the stream as ready does and resolves whether its probe was answered. */
  async probe(): Promise<boolean> {
    this.ready();
    const alive = setInterval(() => {}, 1 << 30); // the probe itself keeps nothing alive
    try {
      return (await this.#cur?.trusted) === true && this.#cur?.usable === true;
    } finally {
      clearInterval(alive);
    }
  }

  /** A stream ended: the next one opens after a pause unless its probe had been answered. */
  #ended(s: Stream, wasTrusted: boolean): void {
    if (this.#cur === s) {
      this.#cur = undefined;
    }
    if (wasTrusted) {
      // A new stream opens at the next call, probed first; only probes that keep failing pause.
      this.#pause = 0;
      return;
    }
    this.#pause = Math.min(Math.max(2 * this.#pause, minPauseMs), maxPauseMs);
    this.#retryAt = this.now() + this.#pause;
  }

  close(): void {
    this.#closed = true;
    this.#cur?.fail(new Error("client closed"));
    this.#cur = undefined;
  }
}

export type { Stream as SessionStream };
