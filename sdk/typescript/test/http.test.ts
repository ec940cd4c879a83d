import { test } from "node:test";
import assert from "node:assert/strict";
import { createServer, type RequestListener } from "node:http";
import type { AddressInfo } from "node:net";
import { startFenced, unique } from "./helpers.js";
import { MemoryGuard } from "../src/guards/guard.js";
import { fencedFetch, fencingHandler, fencingMiddleware } from "../src/guards/http.js";
import { Reporter } from "../src/guards/report.js";
import { Client, StaleTokenError, LeaseLostError } from "../src/index.js";

async function serve(listener: RequestListener) {
  const srv = createServer(listener);
  await new Promise<void>((r) => srv.listen(0, "127.0.0.1", r));
  return { url: `http://127.0.0.1:${(srv.address() as AddressInfo).port}`, close: () => new Promise((r) => srv.close(r)) };
}

test("middleware answers the pinned statuses; the fetch wrapper turns 409 into a lost lease; rejections are reported", async () => {
  const f = await startFenced();
  const c = new Client({ endpoints: f.url });
  const reporter = new Reporter({ resource: "ts-http", sender: c, flushIntervalMs: 50 });
  const guard = new MemoryGuard(reporter);
  const writes: bigint[] = [];
  const srv = await serve(
    fencingHandler(guard, (req, res) => {
      if (req.method === "PUT") writes.push(req.fencing!.token);
      res.end("ok");
    }),
  );
  try {
    const key = unique("http");
    const a = await c.acquire(key, { ttlMs: 3000, owner: "writer-a" });
    const b = await c.acquire(unique("other"), { ttlMs: 3000 }); // unrelated
    const put = (headers: Record<string, string>) => fetch(srv.url + "/x", { method: "PUT", headers });
    assert.equal((await put({})).status, 428);
    assert.equal((await put({ "Fencing-Scope": key, "Fencing-Token": "x1" })).status, 400);
    assert.equal((await put({ "Fencing-Token": "5" })).status, 400);
    // One spelling per token: a leading zero is refused, and raises nothing.
    assert.equal((await put({ "Fencing-Scope": key, "Fencing-Token": "0" + (a.token + 9n).toString() })).status, 400);
    assert.equal((await fetch(srv.url + "/x")).status, 200); // safe methods pass
    const fa = fencedFetch(a);
    assert.equal((await fa(srv.url + "/x", { method: "PUT" })).status, 200);
    // A newer token for the same scope, then a's late write.
    const newer = (a.token + 5n).toString();
    assert.equal((await put({ "Fencing-Scope": key, "Fencing-Token": newer })).status, 200);
    const late = await fa(srv.url + "/x", { method: "PUT" });
    assert.equal(late.status, 409);
    assert.equal(late.headers.get("content-type"), "application/problem+json");
    const p = (await late.json()) as { type: string; scope: string; highestToken: number }; // the body is still readable
    assert.equal(p.type, "urn:fenced:problem:stale-token");
    assert.equal(p.scope, key);
    assert.equal(BigInt(p.highestToken), a.token + 5n);
    assert.ok(a.signal.reason instanceof LeaseLostError);
    assert.ok(a.signal.reason.cause instanceof StaleTokenError);
    assert.deepEqual(writes, [a.token, a.token + 5n]);
    assert.equal(b.held, true);
    // The rejection reaches fenced with the writer's owner.
    await reporter.close();
    assert.equal(reporter.sent, 1);
    const r = await fetch(f.url + "/fenced.v1.RejectionService/ListRejections", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ prefix: key }),
    });
    const list = (await r.json()) as { rejections: { resource: string; reportedOwner: string }[] };
    assert.equal(list.rejections.length, 1);
    assert.equal(list.rejections[0].resource, "ts-http");
    assert.equal(list.rejections[0].reportedOwner, "writer-a");
    await b.release();
  } finally {
    await srv.close();
    await c[Symbol.asyncDispose]();
    await f.stop();
  }
});

test("(req, res, next) middleware runs the chain inside the guard and records only successes", async () => {
  const guard = new MemoryGuard();
  const mw = fencingMiddleware(guard);
  const srv = await serve((req, res) =>
    mw(req, res, () => {
      res.statusCode = req.url === "/fail" ? 500 : 204;
      res.end();
    }),
  );
  try {
    const put = (path: string, token: number) => fetch(srv.url + path, { method: "POST", headers: { "Fencing-Scope": "s", "Fencing-Token": String(token) } });
    assert.equal((await put("/ok", 3)).status, 204);
    assert.equal((await put("/fail", 9)).status, 500);
    assert.equal(await guard.highest("s"), 3n);
    assert.equal((await put("/ok", 2)).status, 409);
  } finally {
    await srv.close();
  }
});
