import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import pg from "pg";
import { requireService, pgConfig, unique, goInterop, startFenced } from "./helpers.js";
import { PgGuard, RowFence } from "../src/guards/pg.js";
import { Client, StaleTokenError, NoTokenError, TokenOutOfRangeError, RowNotFoundError, LeaseLostError } from "../src/index.js";

let pool: pg.Pool;
const table = unique("fence_scopes_ts").replace(/-/g, "_");
before(async () => {
  pool = new pg.Pool(pgConfig);
});
after(async () => {
  await pool?.query(`DROP TABLE IF EXISTS "${table}"`).catch(() => {});
  await pool?.end();
});

test("check in the caller's transaction: stale refused, equal accepted, writes roll back with the token", async (t) => {
  if (!(await requireService(t, "PostgreSQL", 5432))) return;
  const guard = new PgGuard(pool, { table });
  await guard.migrate();
  const scope = unique("orders/7");
  assert.equal(await guard.do(scope, 5n, async () => "ok"), "ok");
  assert.equal(await guard.highest(scope), 5n);
  await assert.rejects(guard.do(scope, 4n, async () => assert.fail("ran with a stale token")), (e: unknown) => {
    assert.ok(e instanceof StaleTokenError);
    assert.equal(e.presented, 4n);
    assert.equal(e.highest, 5n);
    return true;
  });
  await guard.do(scope, 5n, async () => {});
  // A failing callback rolls the raised token back too.
  await assert.rejects(guard.do(scope, 9n, async () => { throw new Error("boom"); }), /boom/);
  assert.equal(await guard.highest(scope), 5n);
  // check inside a transaction the caller owns.
  const c = await pool.connect();
  try {
    await c.query("BEGIN");
    assert.equal(await guard.check(c, scope, 6n), 5n);
    await c.query("COMMIT");
  } finally {
    c.release();
  }
  assert.equal(await guard.highest(scope), 6n);
  await assert.rejects(guard.do(scope, 0n, async () => {}), NoTokenError);
  await assert.rejects(guard.do(scope, 1n << 63n, async () => {}), TokenOutOfRangeError);
  assert.equal(await guard.highest(scope), 6n);
});

test("concurrent writers of one scope: the lower token never commits after the higher", async (t) => {
  if (!(await requireService(t, "PostgreSQL", 5432))) return;
  const guard = new PgGuard(pool, { table });
  await guard.migrate();
  const scope = unique("race");
  const results = await Promise.allSettled(
    Array.from({ length: 20 }, (_, i) => guard.do(scope, BigInt(i + 1), async () => i + 1)),
  );
  const accepted = results.filter((r) => r.status === "fulfilled").map((r) => r.value);
  // Commits happen in lock order, so the accepted tokens ascend.
  assert.deepEqual(accepted, [...accepted].sort((a, b) => a - b));
  assert.equal(await guard.highest(scope), 20n);
  for (const r of results) if (r.status === "rejected") assert.ok(r.reason instanceof StaleTokenError);
});

test("RowFence: one UPDATE with the token; a stale or missing row is told apart", async (t) => {
  if (!(await requireService(t, "PostgreSQL", 5432))) return;
  const orders = unique("orders_ts").replace(/-/g, "_");
  await pool.query(`CREATE TABLE "${orders}" (id int PRIMARY KEY, status text)`);
  try {
    const rf = new RowFence({ table: orders });
    await pool.query(rf.addColumnSQL);
    await pool.query(`INSERT INTO "${orders}" (id, status) VALUES (7, 'new')`);
    await rf.update(pool, 7, 3n, { status: "paid" });
    await assert.rejects(rf.update(pool, 7, 2n, { status: "late" }), (e: unknown) => e instanceof StaleTokenError && e.highest === 3n && e.scope === `${orders}/7`);
    await assert.rejects(rf.update(pool, 8, 3n, { status: "x" }), RowNotFoundError);
    const { rows } = await pool.query(`SELECT status, fence_token FROM "${orders}" WHERE id = 7`);
    assert.deepEqual(rows[0], { status: "paid", fence_token: "3" });
  } finally {
    await pool.query(`DROP TABLE "${orders}"`);
  }
});

test("interop: the Go guard (fencesql) and this one share the scope table", async (t) => {
  if (!(await requireService(t, "PostgreSQL", 5432))) return;
  const guard = new PgGuard(pool, { table });
  await guard.migrate();
  const scope = unique("shared");
  const dsn = `postgres://postgres@127.0.0.1:5432/test?sslmode=disable`;
  await guard.do(scope, 10n, async () => {});
  assert.deepEqual(goInterop("pg", dsn, table, scope, 9), { stale: true, highest: "10" });
  assert.deepEqual(goInterop("pg", dsn, table, scope, 12), { accepted: true });
  await assert.rejects(guard.do(scope, 11n, async () => {}), (e: unknown) => e instanceof StaleTokenError && e.highest === 12n);
  await guard.do(scope, 12n, async () => {});
  assert.equal(await guard.highest(scope), 12n);
});

test("doLease: a stale rejection loses the lease", async (t) => {
  if (!(await requireService(t, "PostgreSQL", 5432))) return;
  const f = await startFenced();
  const c = new Client({ endpoints: f.url });
  try {
    const guard = new PgGuard(pool, { table });
    await guard.migrate();
    const key = unique("lease");
    const a = await c.acquire(key, { ttlMs: 3000 });
    await guard.do(key, a.token + 1n, async () => {}); // a newer holder wrote
    await assert.rejects(guard.doLease(a, async () => {}), StaleTokenError);
    assert.ok(a.signal.reason instanceof LeaseLostError);
    assert.ok(a.signal.reason.cause instanceof StaleTokenError);
  } finally {
    await c[Symbol.asyncDispose]();
    await f.stop();
  }
});
