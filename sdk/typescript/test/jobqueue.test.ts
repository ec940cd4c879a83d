// docs/job-queue.md's TypeScript recipe, run: a worker that stalls past its
// TTL after claiming is refused at its result, because the new holder's
// claim raised the token before it did any work.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import pg from "pg";
import { type Fenced, pgConfig, requireService, startFenced, unique } from "./helpers.js";
import { Client, type Lease, StaleTokenError } from "../src/index.js";
import { PgGuard } from "../src/guards/pg.js";

let f: Fenced;
let pool: pg.Pool;
const table = unique("jobs").replace(/-/g, "_");
const fences = unique("fence_scopes_jobs").replace(/-/g, "_");
before(async () => {
  f = await startFenced();
  pool = new pg.Pool(pgConfig);
});
after(async () => {
  await pool.query(`DROP TABLE IF EXISTS "${table}"`).catch(() => {});
  await pool.query(`DROP TABLE IF EXISTS "${fences}"`).catch(() => {});
  await pool.end();
  await f.stop();
});

test("job queue: claim, work, fenced result; a stalled old holder's result is refused", async (t) => {
  if (!(await requireService(t, "PostgreSQL", 5432))) return;
  await pool.query(`CREATE TABLE "${table}" (id text PRIMARY KEY, status text NOT NULL DEFAULT 'queued', result text)`);
  const guard = new PgGuard(pool, { table: fences });
  await guard.migrate();

  // The recipe's function, with the table name a parameter.
  async function runJob(lease: Lease, id: string, work: (signal: AbortSignal) => Promise<string>): Promise<boolean> {
    const claimed = await guard.doLease(lease, async (tx) => {
      const r = await tx.query(`UPDATE "${table}" SET status = 'running' WHERE id = $1 AND status <> 'done'`, [id]);
      return r.rowCount === 1;
    });
    if (!claimed) return false;
    const result = await work(lease.signal);
    await guard.doLease(lease, (tx) => tx.query(`UPDATE "${table}" SET status = 'done', result = $2 WHERE id = $1`, [id, result]));
    return true;
  }

  const id = unique("job");
  await pool.query(`INSERT INTO "${table}" (id) VALUES ($1)`, [id]);
  const a = new Client({ endpoints: f.url, owner: "worker-a" });
  const b = new Client({ endpoints: f.url, owner: "worker-b" });
  try {
    const key = `jobs/${id}`;
    const leaseA = await a.acquire(key, { ttlMs: 1000 });
    let resumeA!: () => void;
    const aStalled = new Promise<void>((r) => (resumeA = r));
    const aRun = runJob(leaseA, id, async () => {
      leaseA.orphan(); // A stalls: no renewals, the server expires its lease
      await aStalled;
      return "by A";
    });
    // B gets the job after A's lease expired, claims it, and works slowly.
    const leaseB = await b.acquire(key, { ttlMs: 3000, waitMs: 5000 });
    assert.ok(leaseB.token > leaseA.token);
    let bWorking!: () => void;
    const bStarted = new Promise<void>((r) => (bWorking = r));
    const bRun = runJob(leaseB, id, async () => {
      bWorking();
      await new Promise((r) => setTimeout(r, 300));
      return "by B";
    });
    await bStarted; // B has claimed and not written its result yet
    resumeA(); // A resumes and writes its result without looking
    await assert.rejects(aRun, StaleTokenError);
    assert.equal(await bRun, true);
    const { rows } = await pool.query(`SELECT status, result FROM "${table}" WHERE id = $1`, [id]);
    assert.deepEqual(rows[0], { status: "done", result: "by B" });
    // The job is done: a later holder's claim says so and does no work.
    await leaseB.release();
    const leaseC = await b.acquire(key, { ttlMs: 3000 });
    assert.equal(await runJob(leaseC, id, async () => assert.fail("ran a done job")), false);
    await leaseC.release();
  } finally {
    await a.close();
    await b.close();
  }
});
