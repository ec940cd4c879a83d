// Sequences inside an epoch (guard spec, section 7): every guard refuses a
// copy of a write as a DuplicateError, never as stale, and agrees with the
// Go guards on the scope table's columns and the Redis sequence key.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import pg from "pg";
import { Redis } from "ioredis";
import { requireService, pgConfig, redisConfig, unique, goInterop } from "./helpers.js";
import { PgGuard } from "../src/guards/pg.js";
import { RedisGuard, key } from "../src/guards/redis.js";
import { MemoryGuard, DuplicateError, SequenceGapError, StaleTokenError, InvalidSequenceError, type Decision } from "../src/index.js";
import type { AddressInfo } from "node:net";

type ErrorClass = typeof StaleTokenError | typeof DuplicateError | typeof SequenceGapError;
type Step = [token: bigint, sequence: bigint, err: ErrorClass | null];
type Write = (token: bigint, seq: bigint, applied: () => void) => Promise<unknown>;

// [token, sequence, expected error class or null]
const scenarios: Record<string, { strict?: boolean; steps: Step[] }> = {
  "no sequence": { steps: [[5n, 0n, null], [5n, 0n, null], [4n, 0n, StaleTokenError], [6n, 0n, null]] },
  "in order": { steps: [[5n, 1n, null], [5n, 2n, null], [5n, 7n, null]] },
  duplicate: { steps: [[5n, 1n, null], [5n, 2n, null], [5n, 2n, DuplicateError], [5n, 1n, DuplicateError], [5n, 3n, null]] },
  "new epoch": { steps: [[5n, 9n, null], [6n, 1n, null], [6n, 1n, DuplicateError], [5n, 10n, StaleTokenError]] },
  "new epoch without sequence forgets the last": { steps: [[5n, 9n, null], [6n, 0n, null], [6n, 1n, null]] },
  "gap refused when strict": { strict: true, steps: [[5n, 4n, null], [5n, 6n, SequenceGapError], [5n, 5n, null], [5n, 5n, DuplicateError], [5n, 6n, null]] },
};

async function play(name: string, write: Write): Promise<void> {
  let applied = 0;
  let want = 0;
  for (const [i, [token, seq, err]] of scenarios[name]!.steps.entries()) {
    if (err === null) {
      await write(token, seq, () => applied++);
      want++;
    } else {
      await assert.rejects(write(token, seq, () => applied++), (e: unknown) => e instanceof err, `step ${i}: token ${token} seq ${seq}`);
    }
  }
  assert.equal(applied, want, `${name}: applied writes`);
}

let pool: pg.Pool;
let redis: Redis;
const table = unique("fence_scopes_seq").replace(/-/g, "_");
const prefix = unique("fence-ts-seq") + ":";
before(() => {
  pool = new pg.Pool(pgConfig);
  redis = new Redis({ ...redisConfig, lazyConnect: true, maxRetriesPerRequest: 1 });
});
after(async () => {
  await pool?.query(`DROP TABLE IF EXISTS "${table}"`).catch(() => {});
  await pool?.query(`DROP TABLE IF EXISTS "${table}_old"`).catch(() => {});
  await pool?.end();
  if (redis.status === "ready") {
    const keys = await redis.keys(`*${prefix}*`);
    if (keys.length) await redis.del(...keys);
  }
  redis.disconnect();
});

test("MemoryGuard: the sequence rule", async () => {
  for (const name of Object.keys(scenarios)) {
    const g = new MemoryGuard(undefined, { strictSequences: scenarios[name]!.strict });
    await play(name, (token, seq, applied) => g.do("s", token, async () => applied(), { sequence: seq }));
  }
  await assert.rejects(new MemoryGuard().do("s", 1n, async () => {}, { sequence: 1n << 63n }), InvalidSequenceError);
});

test("MemoryGuard: observers see duplicates apart", async () => {
  const seen: Decision[] = [];
  const g = new MemoryGuard({ observe: (d) => seen.push(d) });
  await g.do("s", 3n, async () => {}, { sequence: 1n });
  await assert.rejects(g.do("s", 3n, async () => {}, { sequence: 1n }), DuplicateError);
  assert.deepEqual(seen.map((d) => [d.accepted, d.duplicate ?? false, d.sequence]), [[true, false, 1n], [false, true, 1n]]);
});

test("PgGuard: the sequence rule", async (t) => {
  if (!(await requireService(t, "PostgreSQL", 5432))) return;
  for (const name of Object.keys(scenarios)) {
    const g = new PgGuard(pool, { table, strictSequences: scenarios[name]!.strict });
    await g.migrate();
    const scope = unique(name);
    await play(name, (token, seq, applied) => g.do(scope, token, async () => applied(), { sequence: seq }));
  }
});

test("PgGuard: migrate adds the sequence columns to an old table; Go and TypeScript refuse each other's duplicates", async (t) => {
  if (!(await requireService(t, "PostgreSQL", 5432))) return;
  const old = `${table}_old`;
  await pool.query(`CREATE TABLE "${old}" (scope varchar(512) PRIMARY KEY, highest_token bigint NOT NULL CHECK (highest_token >= 0))`);
  const g = new PgGuard(pool, { table: old });
  const scope = unique("shared");
  await g.do(scope, 5n, async () => {}); // before the migration, without a sequence
  await Promise.all([g.migrate(), g.migrate()]);
  assert.equal(await g.highest(scope), 5n);
  await g.do(scope, 5n, async () => {}, { sequence: 1n });
  const dsn = `postgres://postgres@127.0.0.1:5432/test?sslmode=disable`;
  assert.deepEqual(goInterop("pg", dsn, old, scope, "5:1"), { duplicate: true, last: "1" });
  assert.deepEqual(goInterop("pg", dsn, old, scope, "5:2"), { accepted: true });
  await assert.rejects(g.do(scope, 5n, async () => {}, { sequence: 2n }), (e: unknown) => e instanceof DuplicateError && e.last === 2n);
  await g.do(scope, 5n, async () => {}, { sequence: 3n });
});

test("RedisGuard: the sequence rule", async (t) => {
  if (!(await requireService(t, "Redis", 6379))) return;
  for (const name of Object.keys(scenarios)) {
    const g = new RedisGuard(redis, { prefix, strictSequences: scenarios[name]!.strict });
    const scope = unique(name);
    await play(name, (token, seq, applied) =>
      g.set(scope, token, key(scope, "v"), "x", { sequence: seq }).then(() => applied()),
    );
  }
});

test("RedisGuard: Go and TypeScript share the sequence key", async (t) => {
  if (!(await requireService(t, "Redis", 6379))) return;
  const g = new RedisGuard(redis, { prefix });
  const scope = unique("shared{x}");
  const k = key(scope, "v");
  await g.set(scope, 7n, k, "ts", { sequence: 4n });
  assert.equal(await redis.get(g.sequenceKey(scope)), "7:4");
  const addr = `${redisConfig.host ?? "127.0.0.1"}:${redisConfig.port ?? 6379}`;
  assert.deepEqual(goInterop("redis", addr, prefix, scope, "7:4", k, "go"), { duplicate: true, last: "4" });
  assert.deepEqual(goInterop("redis", addr, prefix, scope, "7:5", k, "go"), { accepted: true });
  await assert.rejects(g.set(scope, 7n, k, "late", { sequence: 5n }), (e: unknown) => e instanceof DuplicateError && e.last === 5n);
  assert.equal(await redis.get(k), "go");
});

test("HTTP: Fencing-Sequence through fencedFetch and the middleware; a duplicate is 409 duplicate-write and keeps the lease", async () => {
  const { createServer } = await import("node:http");
  const { fencedFetch, fencingHandler, PROBLEM_DUPLICATE, PROBLEM_SEQUENCE_GAP, PROBLEM_INVALID_SEQUENCE } = await import("../src/guards/http.js");
  const applied: (bigint | undefined)[] = [];
  const srv = createServer(
    fencingHandler(new MemoryGuard(undefined, { strictSequences: true }), (req, res) => {
      applied.push(req.fencing!.sequence);
      res.end("ok");
    }),
  );
  await new Promise<void>((r) => srv.listen(0, "127.0.0.1", r));
  const url = `http://127.0.0.1:${(srv.address() as AddressInfo).port}/x`;
  let n = 0n;
  const lost: unknown[] = [];
  const lease = { key: "orders/7", token: 5n, markLost: (e: unknown) => lost.push(e), nextSequence: () => ++n };
  try {
    const f = fencedFetch(lease, fetch, { sequences: true });
    assert.equal((await f(url, { method: "PUT" })).status, 200); // sequence 1
    assert.equal((await f(url, { method: "PUT" })).status, 200); // sequence 2
    const dup = await f(url, { method: "PUT", headers: { "Fencing-Sequence": "2" } });
    assert.equal(dup.status, 409);
    const p = (await dup.json()) as { type: string; lastSequence: number };
    assert.equal(p.type, PROBLEM_DUPLICATE);
    assert.equal(p.lastSequence, 2);
    const gap = await f(url, { method: "PUT", headers: { "Fencing-Sequence": "9" } });
    assert.equal(gap.status, 409);
    assert.equal(((await gap.json()) as { type: string }).type, PROBLEM_SEQUENCE_GAP);
    const bad = await f(url, { method: "PUT", headers: { "Fencing-Sequence": "0" } });
    assert.equal(bad.status, 400);
    assert.equal(((await bad.json()) as { type: string }).type, PROBLEM_INVALID_SEQUENCE);
    assert.equal((await fencedFetch(lease)(url, { method: "PUT" })).status, 200); // no sequence
    assert.deepEqual(applied, [1n, 2n, undefined]);
    assert.equal(lost.length, 0);
  } finally {
    await new Promise((r) => srv.close(r));
  }
});
