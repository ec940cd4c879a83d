// Several endpoints
//
// Every node of a cluster serves every call (followers forward to the
// leader). A call goes to the endpoint that answered last; when the endpoint
// cannot be reached or answers unavailable, the call is sent to the next
// one, going round the list with a pause between rounds (50ms doubling to
// 1s) until the call's signal aborts or the failover timeout passes. No
// other error is retried. With one endpoint nothing is retried.

import * as http from "node:http";
import type * as http2 from "node:http2";
import * as https from "node:https";
import { createClient, type Client as RPCClient, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport, Http2SessionManager } from "@connectrpc/connect-node";
import { LeaseService } from "./gen/fenced/v1/lease_pb.js";
import { RejectionService } from "./gen/fenced/v1/rejection_pb.js";
import { CLUSTER_ID_HEADER, type ClusterPin } from "./pin.js";
import { retryable } from "./rpc.js";
import { Session } from "./session.js";

/** TLS settings for https endpoints; PEM text or buffers. */
export interface TLSOptions {
  /** CA bundle that verifies the server. Default: the system's roots. */
  ca?: string | Buffer;
  /** Client certificate, for servers that ask for one (mTLS). */
  cert?: string | Buffer;
  /** The client certificate's private key. */
  key?: string | Buffer;
  /** Server name to verify, when it differs from the endpoint's host. */
  servername?: string;
}

export interface Endpoint {
  url: string;
  /** Unary calls, over HTTP/1.1 with reused connections. */
  rpc: RPCClient<typeof LeaseService>;
  /** Watch, KeepAlive and Session, over one HTTP/2 connection. */
  streams: RPCClient<typeof LeaseService>;
  /** Acquire, Renew and Release over the Session stream (session.ts). */
  session: Session;
  rejections: RPCClient<typeof RejectionService>;
  /** Whether the node says it leads and serves acquisitions (GET /v1/role). */
  leads(timeoutMs: number): Promise<boolean>;
  close(): void;
}

export function normalizeEndpoints(eps: string | string[] | undefined): string[] {
  const list = eps === undefined ? [] : typeof eps === "string" ? parseEndpoints(eps) : [...eps];
  if (list.length === 0) {
    list.push("http://127.0.0.1:7420");
  }
  const seen = new Set<string>();
  return list.map((e, i) => {
    e = e.trim().replace(/\/+$/, "");
    if (e === "") {
      throw new TypeError(`client config: endpoint ${i} is empty`);
    }
    if (!e.includes("://")) {
      e = "http://" + e;
    }
    const u = new URL(e);
    if (u.protocol !== "http:" && u.protocol !== "https:") {
      throw new TypeError(`client config: endpoint ${e} is neither http nor https`);
    }
    if (seen.has(e)) {
      throw new TypeError(`client config: endpoint ${e} is listed twice`);
    }
    seen.add(e);
    return e;
  });
}

/** Splits a comma-separated list of endpoints, as --endpoints and FENCED_ENDPOINTS give them. */
export function parseEndpoints(s: string): string[] {
  return s.split(",").map((e) => e.trim()).filter((e) => e !== "");
}

const sessionPath = `/${LeaseService.typeName}/${LeaseService.method.session.name}`;

/** How an endpoint's Session stream is used (session.ts). */
export interface SessionOptions {
  enabled: boolean;
  probeTimeoutMs: number;
  now: () => number;
}

/**
 * An Http2SessionManager whose connections always have an 'error'
 * listener, and which lets the process exit while a Session stream is open.
 *
 * The manager removes its own listener when it leaves a state; a
 * connection destroyed by a protocol error emits 'error' on the next tick,
 * so abort() in between (closing the client right after a broken stream)
 * would leave that event unhandled and crash the process. The manager's own
 * listener still sees every error.
 *
 * The manager keeps the process alive while a stream is open, but the
 * Session stream stays open between calls: session.ts keeps the process
 * alive while a call waits for its answer instead, as Watch does while it
 * waits for events and a lease's timers do for its renewals.
 */
export class GuardedSessionManager extends Http2SessionManager {
  readonly #guarded = new WeakSet<http2.Http2Session>();

  override async request(...args: Parameters<Http2SessionManager["request"]>): Promise<http2.ClientHttp2Stream> {
    const stream = await super.request(...args);
    const conn = stream.session;
    if (conn && !this.#guarded.has(conn)) {
      this.#guarded.add(conn);
      conn.on("error", () => {});
    }
    if (conn && args[1] === sessionPath) {
      conn.unref();
    }
    return stream;
  }
}

export function newEndpoint(url: string, tls: TLSOptions | undefined, interceptors: Interceptor[], pin: ClusterPin, session: SessionOptions): Endpoint {
  interceptors = [...interceptors, pin.interceptor(url)];
  const secure = url.startsWith("https:");
  const tlsOpts = secure && tls ? { ca: tls.ca, cert: tls.cert, key: tls.key, servername: tls.servername } : {};
  const agent = secure ? new https.Agent({ keepAlive: true, ...tlsOpts }) : new http.Agent({ keepAlive: true });
  const h2 = new GuardedSessionManager(url, { pingIntervalMs: 10_000, pingTimeoutMs: 5_000, idleConnectionTimeoutMs: 60_000 }, tlsOpts);
  const unary = createConnectTransport({ baseUrl: url, httpVersion: "1.1", nodeOptions: { agent }, interceptors });
  const streams = createConnectTransport({ baseUrl: url, httpVersion: "2", sessionManager: h2, interceptors });
  const streamClient = createClient(LeaseService, streams);
  return {
    url,
    rpc: createClient(LeaseService, unary),
    streams: streamClient,
    session: new Session((requests, signal) => streamClient.session(requests, { signal }), session.enabled, session.probeTimeoutMs, session.now),
    rejections: createClient(RejectionService, unary),
    leads(timeoutMs) {
      return new Promise((resolve) => {
        const get = secure ? https.get : http.get;
        const req = get(`${url}/v1/role`, { agent, timeout: timeoutMs }, (res) => {
          let body = "";
          res.setEncoding("utf8");
          res.on("data", (d: string) => (body += d.length + body.length > 4096 ? "" : d));
          res.on("end", () => {
            try {
              // A node of another cluster is not a leader to go to (pin.ts).
              pin.foreign(url, res.headers[CLUSTER_ID_HEADER] as string | undefined);
              const r = JSON.parse(body) as { role?: unknown; ready?: unknown };
              resolve(res.statusCode === 200 && r.role === "leader" && r.ready === true);
            } catch {
              resolve(false);
            }
          });
          res.on("error", () => resolve(false));
        });
        req.on("timeout", () => req.destroy());
        req.on("error", () => resolve(false));
      });
    },
    close() {
      this.session.close();
      h2.abort();
      agent.destroy();
    },
  };
}

// Going to the leader: a follower forwards every write to the leader, a
// second request and round trip. So with several endpoints the client asks
// them who leads (GET /v1/role, answered without credentials) in the
// background, at its first call and after each failover, and makes the
// leader the endpoint in use. Calls still fail over as above.
const leaderTimeoutMs = 2000;

export class EndpointList {
  current = 0;
  #started = false;
  #searching = false;

  constructor(
    readonly eps: Endpoint[],
    readonly failoverTimeoutMs: number,
  ) {}

  pick(): [number, Endpoint] {
    const i = this.current % this.eps.length;
    return [i, this.eps[i]!];
  }

  /** Moves on from endpoint i unless another call already did. */
  failedOver(i: number): void {
    if (this.current === i) {
      this.current = (i + 1) % this.eps.length;
      this.lookForLeader();
    }
  }

  /** Starts a search for the leader unless one is under way or there is one endpoint. */
  lookForLeader(): void {
    if (this.eps.length < 2 || this.#searching) {
      return;
    }
    this.#searching = true;
    void Promise.all(
      this.eps.map(async (ep, i) => {
        if (await ep.leads(leaderTimeoutMs)) {
          this.current = i;
        }
      }),
    ).finally(() => (this.#searching = false));
  }

  /** Runs call against the endpoints until one serves it; call's error is thrown as is. */
  async do<T>(signal: AbortSignal | undefined, call: (ep: Endpoint) => Promise<T>): Promise<T> {
    if (this.eps.length === 1) {
      return call(this.eps[0]!);
    }
    if (!this.#started) {
      this.#started = true;
      this.lookForLeader();
    }
    const start = performance.now();
    let pause = 50;
    let tried = 0;
    for (;;) {
      const [i, ep] = this.pick();
      try {
        return await call(ep);
      } catch (err) {
        if (signal?.aborted) {
          // The node did not answer in time: the next call starts at the next node.
          this.failedOver(i);
          throw err;
        }
        if (!retryable(err)) {
          throw err;
        }
        this.failedOver(i);
        tried++;
        if (tried % this.eps.length !== 0) {
          continue;
        }
        // A full round failed: every node is down or between leaders.
        if (performance.now() - start + pause > this.failoverTimeoutMs) {
          throw err;
        }
        await sleep(pause, signal);
        if (signal?.aborted) {
          throw err;
        }
        pause = Math.min(2 * pause, 1000);
      }
    }
  }
}

export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const t = setTimeout(done, ms);
    function done() {
      clearTimeout(t);
      signal?.removeEventListener("abort", done);
      resolve();
    }
    signal?.addEventListener("abort", done, { once: true });
  });
}
