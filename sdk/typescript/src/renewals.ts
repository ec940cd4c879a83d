// Renewals over one stream
//
// A client's leases renew over one shared KeepAlive stream (HTTP/2), opened
// when the first lease needs a renewal and closed when the client holds no
// lease. Renewals of any number of leases are pipelined on it, and the
// server answers them in order.
//
// The stream changes how a renewal travels, never what it means: the
// deadline still counts from before the renewal was sent, and a refusal
// still loses the lease. Whenever the stream cannot give an answer (it does
// not open, it breaks, the node answers unavailable, or no answer comes
// within half the renewal's timeout or half the time left before the
// lease's local deadline) the renewal is sent again at once as a unary
// Renew, which fails over between endpoints as every call does, and the
// next stream opens at the next endpoint after a pause that grows from one
// second to a minute while streams keep failing.

import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import type { EndpointList } from "./endpoints.js";
import { type KeepAliveRequest, KeepAliveRequestSchema, type KeepAliveResponse } from "./gen/fenced/v1/lease_pb.js";
import { codeFromString } from "@connectrpc/connect/protocol-connect";
import { Pushable } from "./internal.js";
import { fromRPC } from "./rpc.js";

const minStreamPauseMs = 1000;
const maxStreamPauseMs = 60_000;

/** Marks stream failures that say nothing about the lease. */
export class NoAnswerError extends Error {
  constructor(
    message: string,
    options?: { cause?: unknown },
  ) {
    super(`no answer on the renewal stream: ${message}`, options);
    this.name = "NoAnswerError";
  }
}

type Answer = { resp: KeepAliveResponse } | { err: unknown };

/** One KeepAlive stream and the renewals waiting for their answers, in the order they were sent. */
export class RenewStream {
  readonly opened = performance.now();
  private readonly ac = new AbortController();
  private readonly requests = new Pushable<KeepAliveRequest>();
  private waiting: ((a: Answer) => void)[] = [];
  private err: unknown;

  constructor(
    readonly ep: number,
    eps: EndpointList,
  ) {
    const responses = eps.eps[ep]!.streams.keepAlive(this.requests, { signal: this.ac.signal });
    void this.receive(responses);
  }

  private async receive(responses: AsyncIterable<KeepAliveResponse>): Promise<void> {
    try {
      for await (const resp of responses) {
        const w = this.waiting.shift();
        if (!w) {
          this.fail(new Error("an answer to no renewal"));
          return;
        }
        w({ resp });
      }
      this.fail(new Error("stream ended by the server"));
    } catch (err) {
      this.fail(err);
    }
  }

  /** Ends the stream once, giving err to every renewal still waiting. */
  fail(err: unknown): void {
    if (this.err !== undefined) {
      return;
    }
    this.err = err ?? new Error("failed");
    const waiting = this.waiting;
    this.waiting = [];
    this.requests.end();
    this.ac.abort(this.err);
    for (const w of waiting) {
      w({ err: this.err });
    }
  }

  /**
   * Sends one renewal and waits for its answer, at most limitMs. A
   * NoAnswerError says the stream gave no answer; any other error is the
   * server's answer about the lease.
   */
  async renew(key: string, leaseId: string, limitMs: number): Promise<KeepAliveResponse> {
    if (this.err !== undefined) {
      throw new NoAnswerError(String(this.err), { cause: this.err });
    }
    const answer = new Promise<Answer>((resolve) => this.waiting.push(resolve));
    // Answers come in order: a late one holds up every other, so the stream fails.
    const timer = setTimeout(() => this.fail(new Error(`no answer within ${limitMs}ms`)), limitMs);
    this.requests.push(create(KeepAliveRequestSchema, { key, leaseId }));
    const a = await answer;
    clearTimeout(timer);
    if ("err" in a) {
      throw new NoAnswerError(String(a.err), { cause: a.err });
    }
    const code = a.resp.errorCode;
    if (code !== "") {
      const c = codeFromString(code) ?? Code.Unknown;
      const err = fromRPC(new ConnectError(a.resp.errorMessage, c), `keepalive ${JSON.stringify(key)}`);
      if (c === Code.Unavailable) {
        // This node cannot renew now: try the next one.
        throw new NoAnswerError(String(err), { cause: err });
      }
      throw err;
    }
    return a.resp;
  }
}

/** A client's shared renewal stream. */
export class Renewals {
  private leases = 0;
  private cur: RenewStream | undefined;
  private retryAt = 0;
  private pause = 0;

  constructor(
    private readonly eps: EndpointList,
    private readonly enabled: boolean,
  ) {}

  hold(): void {
    this.leases++;
  }

  drop(): void {
    this.leases--;
    if (this.leases === 0 && this.cur) {
      this.cur.fail(new Error("renewal stream closed: no lease left"));
      this.cur = undefined;
    }
  }

  /** The open stream, opening one if none is open and no pause is under way; undefined: renew with unary calls. */
  stream(): RenewStream | undefined {
    if (!this.enabled) {
      return undefined;
    }
    const [i] = this.eps.pick();
    if (this.cur && this.cur.ep !== i) {
      this.cur.fail(new Error("renewal stream closed: the client moved to another endpoint"));
      this.cur = undefined;
    }
    if (this.cur || this.leases === 0 || performance.now() < this.retryAt) {
      return this.cur;
    }
    this.cur = new RenewStream(i, this.eps);
    return this.cur;
  }

  /** Ends s after err and moves on to the next endpoint; the next stream opens after a pause. */
  failed(s: RenewStream, err: unknown): void {
    s.fail(err);
    if (this.cur !== s) {
      return;
    }
    this.cur = undefined;
    this.eps.failedOver(s.ep);
    if (performance.now() - s.opened > maxStreamPauseMs) {
      this.pause = 0;
    }
    this.pause = Math.min(Math.max(2 * this.pause, minStreamPauseMs), maxStreamPauseMs);
    this.retryAt = performance.now() + this.pause;
  }

  close(): void {
    this.cur?.fail(new Error("client closed"));
    this.cur = undefined;
  }
}
