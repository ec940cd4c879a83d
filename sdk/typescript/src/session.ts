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
//   - A new stream is trusted only after a probe: a Renew of the empty key,
//     which the server must refuse as invalid_argument. Until the probe is
//     answered calls wait for it (at most half their time); a call that
//     cannot wait, or whose stream is not trusted, goes unary and nothing
//     of it was sent on the stream.
//   - When the probe fails (no HTTP/2, a server without Session, a proxy
//     that speaks HTTP/1.1 only) or a stream breaks, calls to that endpoint
//     go unary and the next stream opens after a pause that grows from 1 s
//     to 1 min while streams keep failing.
//   - A stream that ends after a call was sent and before its answer leaves
//     that call's outcome unknown, exactly like a unary call cut after it was
//     sent: the call fails with an unavailable ConnectError that may have
//     arrived (rpc.ts), which the failover and the uncertain rules handle.
//   - The call's deadline travels as timeout_ms; an aborted call sends
//     cancel{id} and fails at once, like an aborted unary call (a cancelled
//     Acquire may still have been granted).
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

const minPauseMs = 1000;
const maxPauseMs = 60_000;

type CallInit = NonNullable<MessageInitShape<typeof SessionRequestSchema>["call"]>;

/** What a Session call carries: an acquire, a renew or a release (never a cancel). */
export type SessionCall = Exclude<CallInit, { case: "cancel" } | { case: undefined }>;

/** The answer of a call, its case matching the call's. */
export type SessionResult = Exclude<SessionResponse["result"], { case: "error" } | { case: undefined }>;

/** Opens one Session stream: the requests to send, and a signal that ends it. */
export type OpenSession = (requests: AsyncIterable<SessionRequest>, signal: AbortSignal) => AsyncIterable<SessionResponse>;

/** A call on the stream got no answer within its stall limit; it was cancelled and may be sent again (renewals only). */
export class SessionStalledError extends Error {
  constructor(ms: number) {
    super(`no answer on the session stream within ${Math.round(ms)}ms`);
    this.name = "SessionStalledError";
  }
}

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
  #nextId = 1n;
  #err: unknown;
  /** Keeps the process alive while a call waits (connect-node does not for a stream). */
  #alive: NodeJS.Timeout | undefined;
  /** Resolves true once the probe was answered as it must be, false when the stream failed first. */
  readonly trusted: Promise<boolean>;
  /** When the stream was opened, on the session's clock. */
  readonly opened: number;

  constructor(open: OpenSession, probeTimeoutMs: number, now: number, onEnd: (s: Stream, wasTrusted: boolean) => void) {
    this.opened = now;
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
    const timer = setTimeout(() => this.fail(new Error(`probe unanswered within ${timeoutMs}ms`)), timeoutMs);
    const a = await this.#send({ case: "renew", value: { key: "", leaseId: "" } }, 0);
    clearTimeout(timer);
    if ("err" in a) {
      return false;
    }
    const r = a.resp.result;
    if (r.case === "error" && r.value.code === "invalid_argument") {
      return true;
    }
    this.fail(new Error(`probe answered ${r.case === "error" ? r.value.code : r.case ?? "nothing"}, not invalid_argument`));
    return false;
  }

  async #receive(responses: AsyncIterable<SessionResponse>): Promise<void> {
    try {
      for await (const resp of responses) {
        const w = this.#waiting.get(resp.id);
        // An answer to a call no longer waited for (cancelled, stalled) is dropped.
        if (w) {
          this.#waiting.delete(resp.id);
          this.#idle();
          w({ resp });
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
    this.#idle();
    this.#requests.end();
    this.#ac.abort(this.#err);
    for (const w of waiting) {
      w({ err: this.#err });
    }
  }

  #idle(): void {
    if (this.#waiting.size === 0 && this.#alive !== undefined) {
      clearInterval(this.#alive);
      this.#alive = undefined;
    }
  }

  /** Sends call with a fresh id; the promise has its answer, or the stream's error. */
  #send(call: CallInit, timeoutMs: number, onId?: (id: bigint) => void): Promise<Answer> {
    if (this.#err !== undefined) {
      return Promise.resolve({ err: this.#err });
    }
    const id = this.#nextId++;
    onId?.(id);
    const answer = new Promise<Answer>((resolve) => this.#waiting.set(id, resolve));
    this.#alive ??= setInterval(() => {}, 1 << 30);
    this.#requests.push(create(SessionRequestSchema, { id, timeoutMs: BigInt(Math.max(Math.ceil(timeoutMs), 0)), call }));
    return answer;
  }

  /** Stops waiting for call id and asks the server to stop working on it. */
  #cancel(id: bigint): void {
    if (this.#waiting.delete(id)) {
      this.#idle();
      if (this.#err === undefined) {
        this.#requests.push(create(SessionRequestSchema, { id, call: { case: "cancel", value: {} } }));
      }
    }
  }

  /**
   * Sends one call and waits for its answer. Rejects with the server's
   * error as a ConnectError; with an unavailable ConnectError when the
   * stream ended before the answer (the call may have been applied); with a
   * canceled ConnectError when signal aborted (cancel{id} sent); with a
   * SessionStalledError after stallMs (cancel{id} sent).
   */
  async call(call: SessionCall, timeoutMs: number, signal: AbortSignal | undefined, stallMs: number | undefined): Promise<SessionResult> {
    let id = 0n;
    let stop: ((a: Answer) => void) | undefined;
    const stopped = new Promise<Answer>((r) => (stop = r));
    const onAbort = () => {
      this.#cancel(id);
      stop!({ err: new ConnectError("the call was aborted; cancel sent on the session stream", Code.Canceled) });
    };
    signal?.addEventListener("abort", onAbort, { once: true });
    const stall =
      stallMs === undefined
        ? undefined
        : setTimeout(() => {
            this.#cancel(id);
            stop!({ err: new SessionStalledError(stallMs) });
          }, stallMs);
    try {
      signal?.throwIfAborted();
      const a = await Promise.race([this.#send(call, timeoutMs, (i) => (id = i)), stopped]);
      if ("err" in a) {
        if (a.err instanceof ConnectError && a.err.code === Code.Canceled && signal?.aborted) {
          throw a.err;
        }
        if (a.err instanceof SessionStalledError) {
          throw a.err;
        }
        // Sent, and the stream ended before the answer: the outcome is unknown.
        throw new ConnectError(`session stream ended before the answer, the call may have been applied: ${String(a.err)}`, Code.Unavailable);
      }
      const r = a.resp.result;
      if (r.case === "error") {
        throw answerError(r.value);
      }
      if (r.case !== call.case) {
        throw new ConnectError(`session answered ${r.case ?? "nothing"} to ${call.case}`, Code.Internal);
      }
      return r as SessionResult;
    } finally {
      clearTimeout(stall);
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

  /**
   * open opens a stream; probeTimeoutMs bounds the probe, after which the
   * stream counts as failed; calls wait for a probe at most probeWaitMs
   * after the stream opened, then go unary.
   */
  constructor(
    private readonly open: OpenSession,
    private readonly enabled: boolean,
    private readonly probeTimeoutMs: number,
    private readonly probeWaitMs: number,
    private readonly now: () => number = () => performance.now(),
  ) {}

  /** Whether calls may go over the stream now: it is on, and not pausing after failed streams. */
  available(): boolean {
    return this.enabled && !this.#closed && ((this.#cur !== undefined && !this.#cur.ended) || this.now() >= this.#retryAt);
  }

  /**
   * The stream to send a call on, once trusted, waiting for the probe at
   * most waitMs (and until probeWaitMs after the stream opened); undefined:
   * send the call unary (nothing was sent).
   */
  async ready(waitMs: number, signal?: AbortSignal): Promise<Stream | undefined> {
    if (!this.enabled || this.#closed || waitMs <= 0) {
      return undefined;
    }
    if (this.#cur === undefined || this.#cur.ended) {
      if (this.now() < this.#retryAt) {
        return undefined;
      }
      this.#cur = new Stream(this.open, this.probeTimeoutMs, this.now(), (s, wasTrusted) => this.#ended(s, wasTrusted));
    }
    const s = this.#cur;
    if (s.usable) {
      return s;
    }
    waitMs = Math.min(waitMs, s.opened + this.probeWaitMs - this.now());
    if (waitMs <= 0) {
      return undefined;
    }
    let timer: NodeJS.Timeout | undefined;
    let onAbort: (() => void) | undefined;
    const gaveUp = new Promise<false>((resolve) => {
      timer = setTimeout(() => resolve(false), waitMs);
      onAbort = () => resolve(false);
      signal?.addEventListener("abort", onAbort, { once: true });
    });
    try {
      const ok = await Promise.race([s.trusted, gaveUp]);
      return ok && s.usable ? s : undefined;
    } finally {
      clearTimeout(timer);
      signal?.removeEventListener("abort", onAbort!);
    }
  }

  /** A stream ended: the next one opens after a pause, unless it was trusted and lived long. */
  #ended(s: Stream, wasTrusted: boolean): void {
    if (this.#cur === s) {
      this.#cur = undefined;
    }
    if (wasTrusted) {
      // Calls go on over a new stream, probed first; only streams that keep failing pause.
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
