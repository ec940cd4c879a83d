import * as os from "node:os";
import { readFileSync } from "node:fs";
import { create } from "@bufbuild/protobuf";
import type { Interceptor } from "@connectrpc/connect";
import { EndpointList, newEndpoint, normalizeEndpoints, type TLSOptions } from "./endpoints.js";
import {
  AcquireUncertainError,
  type ClusterMismatchError,
  HeldError,
  InvalidArgumentError,
  NotHeldError,
  TimeoutError,
  AbortedError,
  FencedError,
} from "./errors.js";
import {
  type AcquireResponse,
  type Event as PBEvent,
  Event_Type,
  type Lease as PBLease,
  type RenewResponse,
} from "./gen/fenced/v1/lease_pb.js";
import { StaleRejectionSchema } from "./gen/fenced/v1/rejection_pb.js";
import { type TraceHook, traced } from "./internal.js";
import { Lease, type LeaseHost, type LeaseInfo } from "./lease.js";
import { NoAnswerError, Renewals } from "./renewals.js";
import { ClusterPin } from "./pin.js";
import { fromRPC, mayHaveArrived, retryable } from "./rpc.js";
import type { SessionResult } from "./session.js";

export interface ClientOptions {
  /** Base URLs of the nodes, as an array or comma-separated. Default "http://127.0.0.1:7420". */
  endpoints?: string | string[];
  /** Bounds how long one call goes round the endpoints while none serves it. Default 5000 ms. */
  failoverTimeoutMs?: number;
  /** TLS for https endpoints (see tlsFromFiles). Default: system roots, no client certificate. */
  tls?: TLSOptions;
  /** Bearer token sent with every call. Prefer TLS with it. */
  token?: string;
  /** Names the holder in leases. Default "hostname/pid". */
  owner?: string;
  /** Default lease TTL. Default 10000 ms. */
  ttlMs?: number;
  /** Caps the time between renewals: min(TTL/3, this). Default: TTL/3. Must be below the TTL. */
  renewIntervalMs?: number;
  /** Bounds each renewal and release request. Default 2000 ms. */
  requestTimeoutMs?: number;
  /**
   * How much slower this process's monotonic clock may run than the
   * server's, as a fraction. The local deadline is the send time of the last
   * successful renewal plus TTL × (1 − clockDrift) − deadlineMarginMs.
   * Default 0.001; must be below 0.5.
   */
  clockDrift?: number;
  /** Subtracted from every local deadline on top of clockDrift. Default 10 ms. */
  deadlineMarginMs?: number;
  /**
   * Send Acquire, Renew and Release over one Session stream per endpoint
   * (HTTP/2), falling back to unary calls where HTTP/2 or Session is not
   * available. Default true.
   */
  session?: boolean;
  /** Renew held leases over the KeepAlive stream (HTTP/2), falling back to unary Renew. Default true. */
  keepAliveStream?: boolean;
  /**
   * Pins the client to the cluster with this ID (hex, as /v1/role and the
   * Fenced-Cluster-Id header show it): answers of any other cluster are
   * never used. Default: the cluster of the first answer that names one.
   */
  clusterId?: string;
  /**
   * Called once per endpoint whose answer named another cluster than the
   * pinned one (that answer is not used). Default: console.error.
   */
  onClusterMismatch?: (err: ClusterMismatchError) => void;
  /** @internal The monotonic clock of the local deadlines, in ms. Default performance.now. For tests. */
  clock?: () => number;
}

/** What every call takes: a time limit and a signal, either of which ends the call. */
export interface CallOptions {
  /** Bounds the call, failover included, in ms. The default depends on the call (see each). */
  timeoutMs?: number;
  /** Aborts the call (not a lease it granted). */
  signal?: AbortSignal;
}

export interface AcquireOptions extends CallOptions {
  /** The lease's TTL in ms. Default: the client's ttlMs. */
  ttlMs?: number;
  /** How long to wait, first come first served, for a held key, in ms. Default 0: try once. */
  waitMs?: number;
  /** Owner instead of the client's. */
  owner?: string;
}

export type EventType = "ACQUIRED" | "RELEASED" | "EXPIRED" | "RESYNC" | "REJECTED";

export interface WatchEvent {
  type: EventType;
  /** The lease the transition is about (no leaseId); absent in RESYNC. */
  lease?: LeaseInfo;
  revision: bigint;
  /** Set in REJECTED events only. */
  rejection?: PBEvent["rejection"];
}

export interface WatchOptions extends CallOptions {
  /** Replay events after this revision first (a RESYNC event when the server no longer has them). */
  after?: bigint;
  /** Also stream REJECTED events. */
  rejections?: boolean;
}

/** One stale rejection as a resource saw it, for reportRejections. */
export interface StaleRejection {
  scope: string;
  presented: bigint;
  highest: bigint;
  owner?: string;
  resource: string;
  count?: number;
}

/** Reads PEM files into TLSOptions. */
export function tlsFromFiles(files: { caFile?: string; certFile?: string; keyFile?: string; servername?: string }): TLSOptions {
  return {
    ca: files.caFile ? readFileSync(files.caFile) : undefined,
    cert: files.certFile ? readFileSync(files.certFile) : undefined,
    key: files.keyFile ? readFileSync(files.keyFile) : undefined,
    servername: files.servername,
  };
}

function infoFrom(l: PBLease | undefined): LeaseInfo {
  return {
    key: l?.key ?? "",
    leaseId: l?.leaseId ?? "",
    owner: l?.owner ?? "",
    token: l?.token ?? 0n,
    ttlMs: Number(l?.ttlMs ?? 0n),
    remainingMs: Number(l?.remainingMs ?? 0n),
  };
}

/** The timeout_ms of a Session call: what is left of the call's time, or 0 for none. */
function timeoutLeft(deadline: number | undefined): number {
  return deadline === undefined ? 0 : Math.max(deadline - performance.now(), 1);
}

/** Rethrows err as the package's error, a TimeoutError or AbortedError when the caller's signal ended. */
function callError(err: unknown, what: string, signal?: AbortSignal): unknown {
  const e = fromRPC(err, what);
  if (signal?.aborted && !(e instanceof TimeoutError)) {
    const reason: unknown = signal.reason;
    if (reason instanceof Error && reason.name === "TimeoutError") {
      return new TimeoutError(`${what}: timed out (${String(e)})`, { cause: e });
    }
    if (!(e instanceof AbortedError)) {
      return new AbortedError(`${what}: aborted (${String(e)})`, { cause: e });
    }
  }
  return e;
}

/**
 * A client of fenced: one node or the nodes of a cluster. Close it (or
 * `await using`) to end its connections.
 */
export class Client implements AsyncDisposable {
  readonly owner: string;
  readonly ttlMs: number;
  readonly requestTimeoutMs: number;
  readonly #eps: EndpointList;
  readonly #renewals: Renewals;
  readonly #drift: number;
  readonly #margin: number;
  readonly #renewIntervalMs: number | undefined;
  readonly #host: LeaseHost;
  readonly #leases = new Set<Lease>();
  /**
   * @internal Told of every attempt of an acquire, renewal, release or get
   * (the torture harness's worker records them; tests time them).
   */
  trace: TraceHook | undefined;
  /**
   * @internal The time an answered Acquire or Renew proves the lease from:
   * its send time (docs/client-algorithm.md, section 3). A seam for the
   * torture harness, whose mutant answers the time the answer arrived.
   */
  proofTime: (sent: number) => number = (sent) => sent;
  /** @internal The monotonic clock of the leases' deadlines, in ms; tests give their own. */
  readonly now: () => number;
  /** Background releases of lost leases, which close waits for. */
  readonly #background = new Set<Promise<void>>();
  #closed = false;
  #closing: Promise<void> | undefined;

  constructor(options: ClientOptions = {}) {
    const o = options;
    this.owner = o.owner ?? `${os.hostname()}/${process.pid}`;
    this.ttlMs = o.ttlMs ?? 10_000;
    this.requestTimeoutMs = o.requestTimeoutMs ?? 2000;
    this.#drift = o.clockDrift ?? 0.001;
    this.#margin = o.deadlineMarginMs ?? 10;
    this.#renewIntervalMs = o.renewIntervalMs;
    this.now = o.clock ?? (() => performance.now());
    const failover = o.failoverTimeoutMs ?? 5000;
    const urls = normalizeEndpoints(o.endpoints);
    const bad = (m: string) => new TypeError(`client config: ${m}`);
    if (!(this.ttlMs >= 1)) throw bad(`ttlMs ${this.ttlMs} is below 1`);
    if (this.#renewIntervalMs !== undefined && !(this.#renewIntervalMs > 0 && this.#renewIntervalMs < this.ttlMs)) {
      throw bad(`renewIntervalMs ${this.#renewIntervalMs} must be positive and below ttlMs ${this.ttlMs}`);
    }
    if (!(this.requestTimeoutMs > 0)) throw bad(`requestTimeoutMs ${this.requestTimeoutMs} must be positive`);
    if (!(failover >= 0)) throw bad(`failoverTimeoutMs ${failover} is negative`);
    if (!(this.#drift >= 0 && this.#drift < 0.5)) throw bad(`clockDrift ${this.#drift} must be at least 0 and below 0.5`);
    if (!(this.#margin >= 0)) throw bad(`deadlineMarginMs ${this.#margin} must not be negative`);
    if (this.#window(this.ttlMs) <= this.ttlMs / 3) {
      throw bad(`ttlMs ${this.ttlMs} less clockDrift and deadlineMarginMs leaves ${this.#window(this.ttlMs)}ms, not more than TTL/3`);
    }
    if (Buffer.byteLength(this.owner) > 256) throw bad("owner is longer than 256 bytes");
    const clusterId = (o.clusterId ?? "").toLowerCase();
    if (!/^[0-9a-f]*$/.test(clusterId)) throw bad(`clusterId ${JSON.stringify(o.clusterId)} is not a hex string`);
    const pin = new ClusterPin(clusterId, o.onClusterMismatch ?? ((err) => console.error(`fenced client: ${err.message}`)));
    const interceptors: Interceptor[] = [];
    if (o.token) {
      const auth = `Bearer ${o.token}`;
      interceptors.push((next) => (req) => {
        req.header.set("Authorization", auth);
        return next(req);
      });
    }
    const session = { enabled: o.session ?? true, probeTimeoutMs: this.requestTimeoutMs, now: () => this.now() };
    this.#eps = new EndpointList(urls.map((u) => newEndpoint(u, o.tls, interceptors, pin, session)), failover);
    this.#renewals = new Renewals(this.#eps, o.keepAliveStream ?? true);
    this.#host = {
      requestTimeoutMs: this.requestTimeoutMs,
      now: () => this.now(),
      proofTime: (sent) => this.proofTime(sent),
      renew: (key, id, by, timeoutMs) => this.#renew(key, id, by, timeoutMs),
      release: (key, id, opts) => this.release(key, id, opts),
      releaseLost: (key, id) => {
        const p = this.release(key, id, { timeoutMs: this.requestTimeoutMs }).catch(() => {});
        this.#background.add(p);
        void p.finally(() => this.#background.delete(p));
      },
      holdRenewals: (l) => {
        this.#leases.add(l);
        this.#renewals.hold();
      },
      dropRenewals: (l) => {
        this.#leases.delete(l);
        this.#renewals.drop();
      },
    };
  }

  /** The endpoints' base URLs, normalized. */
  get endpoints(): string[] {
    return this.#eps.eps.map((e) => e.url);
  }

  /** How long after a request was sent a lease of this TTL is certainly held: TTL less the drift margin. */
  #window(ttl: number): number {
    return ttl - ttl * this.#drift - this.#margin;
  }

  #interval(ttl: number): number {
    return this.#renewIntervalMs !== undefined ? Math.min(ttl / 3, this.#renewIntervalMs) : ttl / 3;
  }

  /**
   * Acquires key and keeps renewing it until released or lost.
   *
   * Throws HeldError when the key is held (after the wait, if any);
   * AcquireUncertainError when an attempt went unanswered and the retry on
   * another endpoint found the key held by this same owner; TimeoutError or
   * AbortedError when options.signal ended first, never HeldError. An Acquire
   * that failed with a timeout or UnavailableError may still have been
   * granted: that grant then expires after its TTL, unseen.
   *
   * The local deadline counts from when the answered attempt was sent. When
   * the grant comes back late (typically after waiting longer than a TTL),
   * Acquire renews once before returning and counts from that renewal; if
   * that renewal fails, it throws a LeaseLostError.
   */
  async acquire(key: string, options: AcquireOptions = {}): Promise<Lease> {
    this.#checkOpen();
    const start = this.now();
    const ttl = options.ttlMs ?? this.ttlMs;
    const wait = options.waitMs ?? 0;
    const owner = options.owner ?? this.owner;
    const signal = this.#callSignal(options, undefined);
    const deadline = this.#deadline(options, undefined);
    if (!Number.isInteger(ttl) || ttl <= 0 || !Number.isInteger(wait) || wait < 0) {
      throw new InvalidArgumentError(`acquire ${JSON.stringify(key)}: ttlMs must be a positive and waitMs a non-negative whole number of milliseconds`);
    }
    let sent = start;
    let unanswered: unknown;
    let resp;
    try {
      resp = await this.#eps.do(signal, async (ep) => {
        const s = ep.session.ready();
        const waitMs = Math.max(Math.floor(wait - (this.now() - start)), 0);
        try {
          return await traced(
            this.trace,
            { kind: "acquire", key, owner, ttlMs: ttl, waitMs },
            (): Promise<AcquireResponse> => {
              sent = this.now();
              const req = { key, owner, ttlMs: BigInt(ttl), waitMs: BigInt(waitMs) };
              return s
                ? s.call({ case: "acquire", value: req }, timeoutLeft(deadline), signal, (r) => this.#releaseUnheld(key, r)).then((r) => r.value as AcquireResponse)
                : ep.rpc.acquire(req, { signal });
            },
            (r) => ({ leaseId: r.lease?.leaseId, token: r.lease?.token, owner: r.lease?.owner, ttlMs: Number(r.lease?.ttlMs ?? 0n) }),
          );
        } catch (err) {
          if (unanswered === undefined && retryable(err) && mayHaveArrived(err)) {
            unanswered = err;
          }
          throw err;
        }
      });
    } catch (err) {
      let e = callError(err, `acquire ${JSON.stringify(key)}`, signal);
      if (e instanceof HeldError && unanswered !== undefined && e.owner === owner) {
        e = new AcquireUncertainError(e.key, e.owner, e.remainingMs, unanswered);
      }
      throw e;
    }
    sent = this.proofTime(sent);
    const info = infoFrom(resp.lease);
    const interval = this.#interval(info.ttlMs);
    const window = this.#window(info.ttlMs);
    const lease = new Lease(this.#host, info, resp.tokenSignature ?? "", interval, window);
    if (window <= interval) {
      // A TTL this short leaves no time to renew before the local deadline.
      lease.lose("TTL too short for the deadline margin", new InvalidArgumentError(`TTL ${info.ttlMs}ms`));
      lease.throwIfLost();
    }
    const late = this.now() - sent;
    if (late > (window - interval) / 2) {
      try {
        sent = await lease.renewOnce();
      } catch (err) {
        lease.lose(`renewal after a grant that took ${Math.round(late)}ms`, err);
        lease.throwIfLost();
      }
    }
    lease.start(sent);
    return lease;
  }

  /**
   * Renews a held lease over the KeepAlive stream when one is usable, else
   * (or when it gives no answer) with a unary Renew: not over the Session
   * stream, which shares the KeepAlive stream's connection, perhaps what
   * failed.
   */
  async #renew(key: string, leaseId: string, by: number, timeoutMs: number): Promise<{ signature: string }> {
    const t0 = this.now();
    let limit = timeoutMs / 2;
    if (by > 0) {
      limit = Math.min(limit, (by - t0) / 2);
    }
    const s = this.#renewals.stream();
    if (s && limit > 0) {
      try {
        const r = await traced(
          this.trace,
          { kind: "renew", key, leaseId },
          () => s.renew(key, leaseId, limit),
          (r) => ({ leaseId, token: r.lease?.token, ttlMs: Number(r.lease?.ttlMs ?? 0n) }),
        );
        return { signature: r.tokenSignature ?? "" };
      } catch (err) {
        if (!(err instanceof NoAnswerError)) {
          throw err;
        }
        this.#renewals.failed(s, err);
      }
    }
    const left = timeoutMs - (this.now() - t0);
    if (left <= 0) {
      throw new TimeoutError(`renew ${JSON.stringify(key)}: no answer within ${timeoutMs}ms`);
    }
    const info = await this.#renewBy(key, leaseId, { timeoutMs: left }, false);
    return { signature: info.signature };
  }

  /** Releases, in the background, a lease granted to an Acquire that was cancelled: nobody holds it. */
  #releaseUnheld(key: string, r: SessionResult): void {
    const leaseId = r.case === "acquire" ? r.value.lease?.leaseId : undefined;
    if (leaseId && !this.#closed) {
      const p = this.release(key, leaseId, { timeoutMs: this.requestTimeoutMs }).catch(() => {});
      this.#background.add(p);
      void p.finally(() => this.#background.delete(p));
    }
  }

  /** @internal For tests: opens every endpoint's Session stream and resolves whether each answered its probe. */
  probeSessions(): Promise<boolean[]> {
    return Promise.all(this.#eps.eps.map((ep) => ep.session.probe()));
  }

  /** The end of a call on performance.now()'s clock (as its signal's timeout counts), or undefined for none. */
  #deadline(options: CallOptions, defaultMs: number | undefined): number | undefined {
    const ms = options.timeoutMs ?? defaultMs;
    return ms === undefined ? undefined : performance.now() + ms;
  }

  /** The signal of one call: options.signal, ended also after options.timeoutMs (or defaultMs; undefined: no limit). */
  #callSignal(options: CallOptions, defaultMs: number | undefined): AbortSignal | undefined {
    const ms = options.timeoutMs ?? defaultMs;
    if (ms !== undefined && !(ms > 0)) {
      throw new InvalidArgumentError(`timeoutMs ${ms} must be positive`);
    }
    const t = ms === undefined ? undefined : AbortSignal.timeout(Math.ceil(ms));
    return options.signal && t ? AbortSignal.any([options.signal, t]) : (options.signal ?? t);
  }

  #checkOpen(): void {
    if (this.#closed) {
      throw new FencedError("client closed");
    }
  }

  /** Renews lease leaseId of key once, for callers that renew by ID themselves. timeoutMs defaults to requestTimeoutMs. */
  renew(key: string, leaseId: string, options: CallOptions = {}): Promise<LeaseInfo & { signature: string }> {
    return this.#renewBy(key, leaseId, options, true);
  }

  /** renew, over the Session stream only if session is set. */
  async #renewBy(key: string, leaseId: string, options: CallOptions, session: boolean): Promise<LeaseInfo & { signature: string }> {
    const signal = this.#callSignal(options, this.requestTimeoutMs);
    const deadline = this.#deadline(options, this.requestTimeoutMs);
    const req = { key, leaseId };
    try {
      const r = await this.#eps.do(signal, (ep) => {
        const s = session ? ep.session.ready() : undefined;
        return traced(
          this.trace,
          { kind: "renew", key, leaseId },
          () => (s ? s.call({ case: "renew", value: req }, timeoutLeft(deadline), signal).then((r) => r.value as RenewResponse) : ep.rpc.renew(req, { signal })),
          (r) => ({ leaseId, token: r.lease?.token, ttlMs: Number(r.lease?.ttlMs ?? 0n) }),
        );
      });
      return { ...infoFrom(r.lease), signature: r.tokenSignature ?? "" };
    } catch (err) {
      throw callError(err, `renew ${JSON.stringify(key)}`, signal);
    }
  }

  /**
   * Releases lease leaseId of key, for callers that hold only the ID.
   * NotHeldError: a node answered that it is not the current lease, and no
   * earlier attempt of this call can have ended it. With several endpoints,
   * an attempt that went unanswered (the node died, or stopped leading,
   * after applying it) is sent to the next one; if that retry finds the
   * lease gone, release resolves: the unanswered attempt released it or it
   * expired, and it is gone either way. timeoutMs defaults to requestTimeoutMs.
   */
  async release(key: string, leaseId: string, options: CallOptions = {}): Promise<void> {
    const signal = this.#callSignal(options, this.requestTimeoutMs);
    const deadline = this.#deadline(options, this.requestTimeoutMs);
    let unanswered: unknown; // the first failed attempt that may have been applied
    try {
      await this.#eps.do(signal, async (ep) => {
        const s = ep.session.ready();
        try {
          const req = { key, leaseId };
          return await traced(
            this.trace,
            { kind: "release", key, leaseId },
            async () => {
              await (s ? s.call({ case: "release", value: req }, timeoutLeft(deadline), signal) : ep.rpc.release(req, { signal }));
            },
            () => ({ leaseId }),
          );
        } catch (err) {
          if (unanswered === undefined && retryable(err) && mayHaveArrived(err)) {
            unanswered = err;
          }
          throw err;
        }
      });
    } catch (err) {
      const e = callError(err, `release ${JSON.stringify(key)}`, signal);
      if (e instanceof NotHeldError && unanswered !== undefined) {
        return; // released by the unanswered attempt, or expired
      }
      throw e;
    }
  }

  /** The current lease of key (undefined when free), the last token issued for it and the revision of the answer. No timeout unless timeoutMs. */
  async get(key: string, options: CallOptions = {}): Promise<{ lease?: LeaseInfo; lastToken: bigint; revision: bigint }> {
    const signal = this.#callSignal(options, undefined);
    try {
      const r = await this.#eps.do(signal, (ep) =>
        traced(
          this.trace,
          { kind: "get", key },
          () => ep.rpc.get({ key }, { signal }),
          (r) => ({ hasLease: r.lease !== undefined, owner: r.lease?.owner, token: r.lease?.token, lastToken: r.lastToken }),
        ),
      );
      return { lease: r.lease ? infoFrom(r.lease) : undefined, lastToken: r.lastToken, revision: r.revision };
    } catch (err) {
      throw callError(err, `get ${JSON.stringify(key)}`, signal);
    }
  }

  /** Up to limit current leases under prefix, sorted by key, and the revision of the answer. No timeout unless timeoutMs. */
  async list(prefix = "", options: { limit?: number } & CallOptions = {}): Promise<{ leases: LeaseInfo[]; revision: bigint }> {
    const signal = this.#callSignal(options, undefined);
    try {
      const r = await this.#eps.do(signal, (ep) => ep.rpc.list({ prefix, limit: options.limit ?? 0 }, { signal }));
      return { leases: r.leases.map(infoFrom), revision: r.revision };
    } catch (err) {
      throw callError(err, `list ${JSON.stringify(prefix)}`, signal);
    }
  }

  /**
   * Yields every transition under prefix, in order, until the signal aborts
   * or the loop breaks. With several endpoints a broken stream is opened
   * again on the next one after the last revision seen, so no transition is
   * missed or repeated; when no revision was seen yet, a RESYNC event comes
   * first. On RESYNC re-read the state with list and watch again from its
   * revision. timeoutMs, if given, ends the watch like the signal.
   */
  async *watch(prefix = "", options: WatchOptions = {}): AsyncGenerator<WatchEvent> {
    const after = options.after ?? 0n;
    const outer = this.#callSignal(options, undefined);
    // A release or expiry that hands the key to a waiter is two events with
    // one revision; a stream broken between them resumes after the revision
    // before, skipping the events of that revision already delivered.
    const n = this.#eps.eps.length;
    // connect-node does not keep the process alive for an open stream; a
    // watcher waiting for events must.
    const alive = setInterval(() => {}, 1 << 30);
    try {
      yield* this.#watch(prefix, options, after, outer, n);
    } finally {
      clearInterval(alive);
    }
  }

  async *#watch(prefix: string, options: WatchOptions, after: bigint, outer: AbortSignal | undefined, n: number): AsyncGenerator<WatchEvent> {
    let broken = 0;
    let lastRev = 0n;
    let atLastRev = 0;
    let skip = 0;
    for (;;) {
      const ac = new AbortController();
      const signal = outer ? AbortSignal.any([outer, ac.signal]) : ac.signal;
      let opened = 0;
      let err: unknown;
      try {
        const stream = await this.#eps.do(outer, async (ep) => {
          opened = this.#eps.eps.indexOf(ep);
          const it = ep.streams.watch({ prefix, afterRevision: after, rejections: options.rejections ?? false }, { signal })[Symbol.asyncIterator]();
          // Open it now, so that a node that cannot be reached fails over.
          const first = await it.next();
          return { it, first };
        });
        if (broken > 0 && after === 0n) {
          yield { type: "RESYNC", revision: 0n };
        }
        let next = stream.first;
        while (!next.done) {
          const ev = next.value.event;
          const type = ev ? (Event_Type[ev.type] as EventType) : "RESYNC";
          const e: WatchEvent = { type, revision: ev?.revision ?? 0n };
          if (ev?.lease) e.lease = infoFrom(ev.lease);
          if (ev?.rejection) e.rejection = ev.rejection;
          let deliver = true;
          if (e.type !== "RESYNC" && e.type !== "REJECTED" && e.revision > 0n) {
            if (e.revision === lastRev && skip > 0) {
              skip--;
              deliver = false;
            } else {
              if (e.revision !== lastRev) {
                lastRev = e.revision;
                atLastRev = 0;
              }
              atLastRev++;
              after = lastRev - 1n;
              broken = 0;
              skip = 0;
            }
          }
          if (deliver) {
            yield e;
          }
          next = await stream.it.next();
        }
      } catch (e) {
        err = e;
      } finally {
        ac.abort();
      }
      if (outer?.aborted) {
        return;
      }
      broken++;
      if (n === 1 && err === undefined) {
        return;
      }
      if (n === 1 || broken > 2 * n) {
        throw callError(err ?? new Error("stream ended by the server"), `watch ${JSON.stringify(prefix)}`, outer);
      }
      this.#eps.failedOver(opened);
      if (lastRev > 0n) {
        skip = atLastRev;
      }
    }
  }

  /** Reports stale rejections to fenced (see fencereport); returns how many were recorded. timeoutMs defaults to 5000. */
  async reportRejections(rejections: StaleRejection[], options: CallOptions = {}): Promise<bigint> {
    const signal = this.#callSignal(options, 5000);
    const req = {
      rejections: rejections.map((r) =>
        create(StaleRejectionSchema, {
          scope: r.scope,
          presentedToken: r.presented,
          highestToken: r.highest,
          owner: r.owner ?? "",
          resource: r.resource,
          count: r.count ?? 1,
        }),
      ),
    };
    try {
      const r = await this.#eps.do(signal, (ep) => ep.rejections.reportRejections(req, { signal }));
      return r.recorded;
    } catch (err) {
      throw callError(err, "report rejections", signal);
    }
  }

  /**
   * Closes the client, as the Go and Python clients do: every lease it
   * still holds is lost (its signal aborts with a LeaseLostError, "client
   * closed") and released, best effort, each bounded by requestTimeoutMs;
   * the promise resolves once those releases (and those of leases lost
   * earlier) have ended, and then the connections are closed. Calls after
   * close throw. Closing again returns the same promise.
   */
  close(): Promise<void> {
    this.#closing ??= this.#close();
    return this.#closing;
  }

  async #close(): Promise<void> {
    this.#closed = true;
    for (const l of [...this.#leases]) {
      l.lose("client closed");
    }
    await Promise.allSettled([...this.#background]);
    this.#renewals.close();
    for (const ep of this.#eps.eps) {
      ep.close();
    }
  }

  /** For `await using`: close(). */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}
