// A torture worker in TypeScript, for `fencectl torture --worker-cmd`:
// the same loop as the Go worker (internal/torture), with this package's
// client and guards. It acquires a random key (usually waiting in line),
// makes a few fenced writes with its token to the reference store (through
// fencedFetch) and PostgreSQL (through PgGuard), then releases the lease or
// abandons it to expire. Every lease call and write goes to the history
// file; events go to standard output as JSON lines.
//
// Like the Go worker it does not check its lease before writing, so that
// every pause becomes a write that reaches the resource; a stale rejection
// loses the lease (invariant I7) and is never retried.
//
// FENCED_TORTURE_MUTANT=deadline-from-answer arms the client's local
// deadline from the answer instead of the send (through the client's
// proofTime seam): the bug the harness must catch.
//
// Not part of the package: npm run build:test compiles it to
// build/torture/worker.js.

import { openSync, writeSync } from "node:fs";
import pg from "pg";
import { Client } from "../src/client.js";
import { ConnectError, Code } from "@connectrpc/connect";
import {
  AbortedError,
  HeldError,
  InvalidArgumentError,
  NotHeldError,
  RPCError,
  StaleTokenError,
  TimeoutError,
  UnavailableError,
} from "../src/errors.js";
import { fencedFetch } from "../src/guards/http.js";
import { PgGuard } from "../src/guards/pg.js";
import type { TraceCall, TraceResult } from "../src/internal.js";
import type { Lease } from "../src/lease.js";
import { fromRPC } from "../src/rpc.js";
import { measureWallOffset, wallNs } from "./wallclock.js";

/** The mutant the torture harness must catch: the local deadline counted from the answer instead of the send. */
const MUTANT_ENV = "FENCED_TORTURE_MUTANT";

/** What the harness tells a worker (internal/torture/worker Spec); durations in nanoseconds. */
interface WorkerSpec {
  id: number;
  endpoint: string;
  endpoints?: string[];
  keys: string[];
  storeUrl: string;
  proxyUrl?: string;
  postgresDsn?: string;
  scopeTable?: string;
  writeTable?: string;
  noFencing?: boolean;
  ttl: number;
  wait: number;
  writesMin: number;
  writesMax: number;
  thinkMax: number;
  getProbability: number;
  longHoldShare?: number;
  tryProbability: number;
  delayShare: number;
  abandonProbability: number;
  writeTimeout: number;
  delayedWriteTimeout: number;
  history: string;
  seed: number;
  incarnation?: number;
}

/** One operation of the history, as internal/torture's Op. */
interface Op {
  w: number;
  n: number;
  kind: string;
  key: string;
  owner?: string;
  leaseId?: string;
  ttlMs?: number;
  waitMs?: number;
  token?: bigint;
  object?: string;
  via?: string;
  /** Writes: the lease's local deadline when the write began, wall-clock ns. */
  deadline?: bigint;
  call: bigint;
  ret?: bigint;
  outcome?: "ok" | "fail" | "unknown";
  code?: string;
  holder?: string;
  holderToken?: bigint;
  hasLease?: boolean;
  lastToken?: bigint;
  err?: string;
}

const ms = (ns: number) => ns / 1e6;

// Every process of a run records wall-clock times, compared across
// processes: calls at the earliest and answers at the latest wall time
// their performance.now() reading can be (see wallclock.ts).
const wallOffset = measureWallOffset();

/** Wall-clock Unix nanoseconds, no later than now: for calls and deadlines. */
function callNs(perfMs = performance.now()): bigint {
  return wallNs(wallOffset, perfMs, "lo");
}

/** Wall-clock Unix nanoseconds, no earlier than now: for answers. */
function retNs(): bigint {
  return wallNs(wallOffset, performance.now(), "hi");
}

/** A small seeded generator (mulberry32), so that runs can be replayed by seed. */
function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

class Recorder {
  private seq: number;
  constructor(
    private readonly fd: number,
    private readonly worker: number,
    incarnation: number,
  ) {
    this.seq = incarnation * 1_000_000_000;
  }

  private write(op: Op): void {
    // One write(2) per record, so records survive a SIGKILL.
    // bigints (tokens, nanoseconds) as exact JSON numbers.
    const line = JSON.stringify(op, (_k, v: unknown) => (typeof v === "bigint" ? `__big__${v}` : v));
    writeSync(this.fd, line.replace(/"__big__([0-9]+)"/g, "$1") + "\n");
  }

  begin(op: Omit<Op, "w" | "n" | "call">): Op {
    const o = op as Op;
    o.w = this.worker;
    o.n = ++this.seq;
    o.call = callNs();
    this.write(o);
    return o;
  }

  end(op: Op, outcome: "ok" | "fail" | "unknown", code = "", err?: unknown): void {
    op.ret = retNs();
    op.outcome = outcome;
    if (code) op.code = code;
    if (err !== undefined) op.err = err instanceof Error ? err.message : String(err);
    this.write(op);
  }
}

function systemCodes(err: unknown): string[] {
  const out: string[] = [];
  for (let e = err, i = 0; e instanceof Error && i < 10; e = (e as { cause?: unknown }).cause, i++) {
    const c = (e as { code?: unknown }).code;
    if (typeof c === "string") out.push(c);
  }
  return out;
}

/** What the caller knows about a lease call that failed: refused (nothing happened) or unknown. */
function classify(kind: string, owner: string | undefined, raw: unknown, op: Op): ["fail" | "unknown", string] {
  const err = fromRPC(raw, kind);
  if (err instanceof HeldError) {
    op.holder = err.owner;
    op.holderToken = err.token;
    // Owners are unique per attempt: held by this very attempt is an unseen grant.
    return kind === "acquire" && err.owner === owner ? ["unknown", "held"] : ["fail", "held"];
  }
  if (err instanceof NotHeldError) return ["fail", "not_found"];
  if (err instanceof InvalidArgumentError) return ["fail", "invalid_argument"];
  if (systemCodes(raw).includes("ECONNREFUSED")) return ["fail", "refused"];
  if (err instanceof TimeoutError || err instanceof AbortedError) return ["unknown", "timeout"];
  const ce = err instanceof Error && err.cause instanceof ConnectError ? err.cause : undefined;
  if (err instanceof UnavailableError) {
    // Only "not ready" proves that nothing was written to the log.
    if (ce?.code === Code.Unavailable && ce.rawMessage.includes("not ready to serve")) return ["fail", "unavailable"];
    return ["unknown", systemCodes(raw).length > 0 ? "transport" : "unavailable"];
  }
  if (err instanceof RPCError) return [err.code === "resource_exhausted" ? "fail" : "unknown", err.code];
  return ["unknown", "transport"];
}

type WriteResult = "ok" | "stale" | "abandon" | "failed";

class Worker {
  private readonly rec: Recorder;
  private readonly rand: () => number;
  private readonly client: Client;
  private readonly name: string;
  private readonly pool?: pg.Pool;
  private readonly guard?: PgGuard;
  private attempts = 0;
  private held = 0;
  private writes = 0;
  private stopping = false;
  private readonly owners = new Map<string, string>(); // lease ID -> owner of its acquisition

  constructor(private readonly spec: WorkerSpec) {
    const inc = spec.incarnation ?? 0;
    this.name = inc === 0 ? `w${spec.id}` : `w${spec.id}.${inc}`;
    this.rec = new Recorder(openSync(spec.history, "a"), spec.id, inc);
    this.rand = rng((spec.seed ^ (spec.id << 16) ^ inc) >>> 0);
    this.client = new Client({
      endpoints: spec.endpoints && spec.endpoints.length > 0 ? spec.endpoints : spec.endpoint,
      owner: this.name,
      ttlMs: ms(spec.ttl),
      requestTimeoutMs: Math.max(ms(spec.ttl) / 2, 100),
    });
    this.client.trace = (call) => this.trace(call);
    if (process.env[MUTANT_ENV] === "deadline-from-answer") {
      this.client.proofTime = () => performance.now(); // the answer's time, not the send's
    }
    if (spec.postgresDsn) {
      this.pool = new pg.Pool({ connectionString: spec.postgresDsn, max: 2 });
      this.guard = new PgGuard(this.pool, { table: spec.scopeTable });
    }
  }

  private emit(ev: { e: string; k?: string; t?: bigint; l?: number; o?: string }): void {
    const parts = [`"e":${JSON.stringify(ev.e)}`];
    if (ev.k !== undefined) parts.push(`"k":${JSON.stringify(ev.k)}`);
    if (ev.t !== undefined) parts.push(`"t":${ev.t}`);
    if (ev.l !== undefined) parts.push(`"l":${ev.l}`);
    if (ev.o !== undefined) parts.push(`"o":${JSON.stringify(ev.o)}`);
    writeSync(1, `{${parts.join(",")}}\n`);
  }

  private trace(call: TraceCall): (r: TraceResult) => void {
    const owner = call.kind === "acquire" ? call.owner : call.leaseId ? (this.owners.get(call.leaseId) ?? `id:${call.leaseId}`) : undefined;
    const op = this.rec.begin({ kind: call.kind, key: call.key, owner, leaseId: call.leaseId, ttlMs: call.ttlMs, waitMs: call.waitMs });
    return (r) => {
      if (r.error !== undefined) {
        const [outcome, code] = classify(call.kind, owner, r.error, op);
        this.rec.end(op, outcome, code, r.error);
        return;
      }
      if (call.kind === "acquire") {
        op.leaseId = r.leaseId;
        op.token = r.token;
        op.ttlMs = r.ttlMs;
        if (r.leaseId) this.owners.set(r.leaseId, call.owner ?? "");
      } else if (call.kind === "renew") {
        op.token = r.token;
        op.ttlMs = r.ttlMs;
      } else if (call.kind === "get") {
        op.lastToken = r.lastToken;
        if (r.hasLease) {
          op.hasLease = true;
          op.holder = r.owner;
          op.holderToken = r.token;
        }
      }
      this.rec.end(op, "ok");
      if (call.kind !== "get") this.emit({ e: "acked", k: call.key, o: call.kind });
    };
  }

  private key(): string {
    return this.spec.keys[Math.floor(this.rand() * this.spec.keys.length)]!;
  }

  private sleep(msec: number): Promise<void> {
    return new Promise((r) => setTimeout(r, msec));
  }

  stop(): void {
    this.stopping = true;
  }

  async run(): Promise<void> {
    const ttl = ms(this.spec.ttl);
    while (!this.stopping) {
      if (this.rand() < this.spec.getProbability) {
        await this.client.get(this.key(), { signal: AbortSignal.timeout(Math.max(ttl, 1000)) }).catch(() => {});
      }
      const key = this.key();
      this.attempts++;
      const owner = `${this.name}-${this.attempts}`;
      this.emit({ e: "acquiring", k: key });
      const wait = this.rand() < this.spec.tryProbability ? 0 : Math.round(ms(this.spec.wait));
      let lease: Lease;
      try {
        lease = await this.client.acquire(key, { ttlMs: ttl, waitMs: wait, owner, signal: AbortSignal.timeout(wait + ttl) });
      } catch (err) {
        this.emit({ e: "idle" });
        const backoff = err instanceof HeldError ? ttl / 20 : ttl / 4;
        await this.sleep(this.rand() * backoff);
        continue;
      }
      this.held++;
      this.emit({ e: "holding", k: key, t: lease.token, l: this.held });
      await this.hold(lease);
      this.emit({ e: "idle" });
    }
  }

  private async hold(l: Lease): Promise<void> {
    const s = this.spec;
    let n = s.writesMin;
    if (s.writesMax > s.writesMin) n += Math.floor(this.rand() * (s.writesMax - s.writesMin + 1));
    let think = ms(s.thinkMax);
    if (this.rand() < (s.longHoldShare ?? 0)) think = Math.max(think, (4 * ms(s.ttl)) / n);
    for (let i = 0; i < n; i++) {
      await this.sleep(this.rand() * think);
      const delayed = !!s.proxyUrl && this.rand() < s.delayShare;
      const r = await this.put(l, delayed);
      if (r === "stale") return; // fencedFetch marked the lease lost
      if (r === "abandon") {
        await this.release(l);
        return;
      }
      if (this.guard && (await this.sql(l)) === "stale") return;
    }
    if (this.rand() < s.abandonProbability) {
      l.orphan(); // no renewal, no release: the server expires it
      return;
    }
    await this.release(l);
  }

  private async release(l: Lease): Promise<void> {
    await l.release().catch(() => {});
    this.emit({ e: "released", k: l.key });
  }

  private async put(l: Lease, delayed: boolean): Promise<WriteResult> {
    const s = this.spec;
    this.writes++;
    const base = delayed ? s.proxyUrl! : s.storeUrl;
    const timeout = ms(delayed ? s.delayedWriteTimeout : s.writeTimeout);
    const object = `${l.key}/${this.name}/${this.writes}`;
    const op = this.rec.begin({ kind: "put", key: l.key, token: l.token, object, via: delayed ? "proxy" : "direct", deadline: callNs(l.deadline) });
    const value = `${l.key}|${l.token}|w${s.id}|${object}`;
    // The lease's signal is left out on purpose: the write must reach the
    // store even after the lease was lost, as from a paused process.
    const f = fencedFetch({ key: l.key, token: l.token, owner: l.owner, signature: l.signature, markLost: (c) => l.markLost(c) });
    let resp: Response;
    try {
      resp = await f(`${base.replace(/\/+$/, "")}/v1/objects/${encodeURIComponent(object)}`, {
        method: "PUT",
        body: value,
        signal: AbortSignal.timeout(Math.max(Math.round(timeout), 1)),
      });
    } catch (err) {
      const refused = systemCodes(err).includes("ECONNREFUSED");
      const timedOut = err instanceof Error && (err.name === "TimeoutError" || err.name === "AbortError");
      this.rec.end(op, refused ? "fail" : "unknown", refused ? "refused" : timedOut ? "timeout" : "transport", err);
      return delayed && !refused ? "abandon" : "failed";
    }
    const body = (await resp.text().catch(() => "")).slice(0, 4096).trim();
    if (resp.status >= 200 && resp.status < 300) {
      this.rec.end(op, "ok");
      return "ok";
    }
    if (resp.status === 409) {
      this.rec.end(op, "fail", "stale", `HTTP 409: ${body}`);
      return "stale";
    }
    this.rec.end(op, resp.status >= 500 ? "unknown" : "fail", `http_${resp.status}`, body);
    return "failed";
  }

  private async sql(l: Lease): Promise<WriteResult> {
    const s = this.spec;
    this.writes++;
    const object = `${l.key}/${this.name}/${this.writes}`;
    const op = this.rec.begin({ kind: "sql", key: l.key, token: l.token, object, deadline: callNs(l.deadline) });
    const table = `"${s.writeTable!.replace(/"/g, '""')}"`;
    const insert = (c: pg.PoolClient) =>
      c.query(`INSERT INTO ${table} (scope, token, worker, object) VALUES ($1, $2, $3, $4)`, [l.key, l.token.toString(), s.id, object]);
    try {
      if (s.noFencing) {
        const c = await this.pool!.connect();
        try {
          await c.query("BEGIN");
          await insert(c);
          await c.query("COMMIT");
        } catch (err) {
          await c.query("ROLLBACK").catch(() => {});
          throw err;
        } finally {
          c.release();
        }
      } else {
        await this.guard!.do(l.key, l.token, insert, { owner: l.owner });
      }
      this.rec.end(op, "ok");
      return "ok";
    } catch (err) {
      if (err instanceof StaleTokenError) {
        this.rec.end(op, "fail", "stale", err);
        l.markLost(err);
        return "stale";
      }
      // The commit may have happened before the connection broke.
      this.rec.end(op, "unknown", "transport", err);
      return "failed";
    }
  }

  async close(): Promise<void> {
    await this.client.close();
    await this.pool?.end().catch(() => {});
  }
}

function specFromArgs(argv: string[]): WorkerSpec {
  const i = argv.indexOf("--spec");
  const text = i >= 0 ? argv[i + 1] : process.env.FENCED_TORTURE_SPEC;
  if (!text) {
    throw new Error("usage: worker.js --spec JSON (or FENCED_TORTURE_SPEC)");
  }
  return JSON.parse(text) as WorkerSpec;
}

async function main(): Promise<void> {
  const w = new Worker(specFromArgs(process.argv.slice(2)));
  // The harness stops workers with SIGTERM and waits for the lease in hand.
  process.once("SIGTERM", () => w.stop());
  process.once("SIGINT", () => w.stop());
  await w.run();
  await w.close();
}

main().then(
  () => process.exit(0),
  (err: unknown) => {
    console.error("torture worker:", err);
    process.exit(1);
  },
);
