// Two workers, one order. Worker A stalls past its lease's TTL (here its
// event loop is blocked; a GC pause or a frozen VM does the same), B takes
// the lease over and writes, then A wakes up and writes late: PostgreSQL
// refuses A's write, because B's token is higher.
import pg from "pg";
import { Client, StaleTokenError } from "@fenced/client";
import { PgGuard } from "@fenced/client/pg";

const endpoints = process.env.FENCED_ENDPOINTS ?? "http://127.0.0.1:7420";
const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/test" });
const guard = new PgGuard(pool); // keeps the highest token per scope in fence_scopes
await guard.migrate();
await pool.query("CREATE TABLE IF NOT EXISTS orders (id text PRIMARY KEY, status text)");
const order = `orders/${process.pid}`; // the lease key is the fencing scope

// Check the token and write, in one transaction.
const write = (lease, status) =>
  guard.doLease(lease, (tx) =>
    tx.query("INSERT INTO orders VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET status = $2", [order, status]));

const a = new Client({ endpoints, owner: "worker-a" });
const b = new Client({ endpoints, owner: "worker-b" });
const leaseA = await a.acquire(order, { ttlMs: 1000 });
await write(leaseA, "packed by A");
for (const end = Date.now() + 1500; Date.now() < end; ); // A stalls: nothing runs, nothing renews

const leaseB = await b.acquire(order, { ttlMs: 1000 }); // A's lease expired: B gets a higher token
await write(leaseB, "shipped by B");
try {
  await write(leaseA, "cancelled by A"); // A resumes and writes without looking
} catch (err) {
  if (!(err instanceof StaleTokenError)) throw err;
  console.log(`A's late write refused: token ${err.presented} < ${err.highest}`);
}
const { rows } = await pool.query("SELECT status FROM orders WHERE id = $1", [order]);
console.log(`order status: ${rows[0].status}`);
await leaseB.release();
await Promise.all([a.close(), b.close(), pool.end()]);
