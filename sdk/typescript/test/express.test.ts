// Express typing (@fenced/client/express): req.fencing on Express's Request,
// and fencingOf(req, guard) with the guard's context type. The first part
// is checked by tsc only (with @types/express); the test runs the helper
// behind node:http, as Express would call it.
import { test } from "node:test";
import assert from "node:assert/strict";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import type { Application, Request, Response } from "express";
import type { PoolClient } from "pg";
import { fencingMiddleware, fencingOf, type Fencing } from "../src/guards/express.js";
import type { PgGuard } from "../src/guards/pg.js";
import { MemoryGuard } from "../src/index.js";

// Never called: it only has to compile, as an Express app would write it.
export function expressApp(app: Application, guard: PgGuard): void {
  app.use(fencingMiddleware(guard));
  app.post("/invoices/:id", fencingMiddleware(guard), async (req: Request, res: Response) => {
    const f: Fencing<unknown> | undefined = req.fencing;
    const { context: tx, token }: { context: PoolClient; token: bigint } = fencingOf(req, guard);
    await tx.query("UPDATE invoices SET total = $1 WHERE id = $2", [100, req.params.id]);
    res.json({ token: String(token), scope: f?.scope });
  });
}

test("fencingOf gives req.fencing after fencingMiddleware, and throws on a request it did not fence", async () => {
  const guard = new MemoryGuard();
  const mw = fencingMiddleware(guard);
  const seen: (bigint | string)[] = [];
  const srv = createServer((req, res) =>
    mw(req, res, () => {
      try {
        seen.push(fencingOf(req, guard).token);
      } catch (err) {
        seen.push(String(err));
      }
      res.end();
    }),
  );
  await new Promise<void>((r) => srv.listen(0, "127.0.0.1", r));
  try {
    const url = `http://127.0.0.1:${(srv.address() as AddressInfo).port}/x`;
    assert.equal((await fetch(url, { method: "POST", headers: { "Fencing-Scope": "s", "Fencing-Token": "4" } })).status, 200);
    assert.equal((await fetch(url)).status, 200);
    assert.equal(seen[0], 4n);
    assert.match(String(seen[1]), /not fenced/);
  } finally {
    await new Promise((r) => srv.close(r));
  }
});
