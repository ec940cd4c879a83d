import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { type Fenced, startFenced, freePort, unique } from "./helpers.js";
import type { AddressInfo } from "node:net";
import {
  Client,
  HeldError,
  LeaseLostError,
  LeaseReleasedError,
  NotHeldError,
  InvalidArgumentError,
  TimeoutError,
  type WatchEvent,
} from "../src/index.js";

let f: Fenced;
const clients: Client[] = [];
const track = (c: Client) => (clients.push(c), c);
before(async () => {
  f = await startFenced();
});
after(async () => {
  for (const c of clients) await c[Symbol.asyncDispose]();
  await f?.stop();
});

test("acquire, held by another, release; tokens increase", async () => {
  const c = track(new Client({ endpoints: f.url, owner: "ts-a" }));
  const key = unique("k");
  const l1 = await c.acquire(key, { ttlMs: 3000 });
  assert.ok(l1.token > 0n);
  assert.match(l1.leaseId, /^[0-9a-f]{32,}$/);
  assert.equal(l1.held, true);
  await assert.rejects(c.acquire(key, { ttlMs: 3000, owner: "ts-b" }), (e: unknown) => {
    assert.ok(e instanceof HeldError);
    assert.equal(e.owner, "ts-a");
    assert.equal(e.token, l1.token);
    assert.ok(e.remainingMs > 0);
    return true;
  });
  await l1.release();
  assert.ok(l1.signal.aborted);
  assert.ok(l1.signal.reason instanceof LeaseReleasedError);
  const l2 = await c.acquire(key, { ttlMs: 3000 });
  assert.ok(l2.token > l1.token);
  await l2.release();
  await assert.rejects(l2.release(), NotHeldError);
});

test("bad input is refused before or by the server", async () => {
  const c = track(new Client({ endpoints: f.url }));
  await assert.rejects(c.acquire("", { ttlMs: 3000 }), InvalidArgumentError);
  await assert.rejects(c.acquire("k", { ttlMs: -1 }), InvalidArgumentError);
  assert.throws(() => new Client({ endpoints: f.url, ttlMs: 12 }), /TTL\/3/);
  assert.throws(() => new Client({ endpoints: [f.url, f.url] }), /listed twice/);
});

for (const keepAliveStream of [true, false]) {
  test(`renewals keep the lease past its TTL (keepAliveStream ${keepAliveStream})`, async () => {
    const c = track(new Client({ endpoints: f.url, keepAliveStream }));
    const key = unique("renew");
    const l = await c.acquire(key, { ttlMs: 1500 });
    await new Promise((r) => setTimeout(r, 3500));
    assert.equal(l.held, true);
    const { lease } = await c.get(key);
    assert.equal(lease?.token, l.token);
    assert.ok(l.deadline > performance.now());
  });
}

test("close releases the leases still held, as the Go and Python clients do", async () => {
  const c = new Client({ endpoints: f.url });
  const other = track(new Client({ endpoints: f.url, owner: "other" }));
  const key = unique("closed");
  const l = await c.acquire(key, { ttlMs: 30_000 });
  await c.close();
  assert.ok(l.signal.reason instanceof LeaseLostError);
  assert.match(l.signal.reason.message, /client closed/);
  assert.equal((await other.get(key)).lease, undefined, "the lease outlived close");
  const l2 = await other.acquire(key, { ttlMs: 3000, timeoutMs: 1000 }); // free now, not after 30 s
  await l2.release();
  await assert.rejects(c.acquire(key), /client closed/);
  await c.close(); // again: the same promise
});

test("every call takes timeoutMs: an acquire waiting in line past it is a TimeoutError, never held", async () => {
  const c = track(new Client({ endpoints: f.url }));
  const key = unique("timeout");
  const l = await c.acquire(key, { ttlMs: 3000 });
  const t0 = performance.now();
  await assert.rejects(c.acquire(key, { ttlMs: 3000, waitMs: 5000, owner: "other", timeoutMs: 300 }), TimeoutError);
  assert.ok(performance.now() - t0 < 2000, "the wait outlived timeoutMs");
  await assert.rejects(c.get(key, { timeoutMs: 0 }), InvalidArgumentError);
  assert.equal((await c.get(key, { timeoutMs: 1000 })).lease?.token, l.token);
  await l.release();
});

test("a renewal refused (released by ID elsewhere) loses the lease for good", async () => {
  const c = track(new Client({ endpoints: f.url }));
  const other = track(new Client({ endpoints: f.url }));
  const key = unique("refused");
  const l = await c.acquire(key, { ttlMs: 1200 });
  await other.release(key, l.leaseId);
  const lost = await l.lost;
  assert.ok(lost instanceof LeaseLostError);
  assert.match(lost.message, /renewal refused/);
  assert.ok(lost.cause instanceof NotHeldError);
  assert.equal(l.held, false);
  assert.throws(() => l.throwIfLost(), LeaseLostError);
  // The key is free, and a new acquisition gets a new lease; the old one stays lost.
  const l2 = await c.acquire(key, { ttlMs: 1200 });
  assert.ok(l2.token > l.token);
  assert.equal(l.held, false);
  await l2.release();
});

test("a paused server: the lease is lost at the local deadline, counted from the send, and never comes back", async () => {
  const g = await startFenced();
  try {
    const c = new Client({ endpoints: g.url, requestTimeoutMs: 300 });
    const key = unique("paused");
    const ttl = 1500;
    const window = ttl - ttl * 0.001 - 10;
    // The acquire's trace hook runs in the same tick as, and just before,
    // the client reads the send time. A grant that comes back late is
    // renewed before acquire returns, and the deadline counts from that
    // renewal: from a moment after the grant and before the renewal is
    // sent (the client reads its time before it opens the stream, so
    // before the renewal's hook).
    let sendAt = 0;
    let renewAt = 0;
    c.trace = (call) => {
      if (call.kind === "acquire") sendAt = performance.now();
      if (call.kind === "renew") renewAt = performance.now();
      return () => {};
    };
    const l = await c.acquire(key, { ttlMs: ttl });
    c.trace = undefined;
    if (renewAt === 0) {
      assert.ok(l.deadline >= sendAt + window && l.deadline <= sendAt + window + 1, `deadline ${l.deadline - sendAt}ms after the send, window ${window}ms`);
    } else {
      assert.ok(l.deadline > sendAt + window && l.deadline <= renewAt + window, `late grant: deadline ${l.deadline - sendAt}ms after the acquire's send and ${l.deadline - renewAt}ms after the renewal's, window ${window}ms`);
    }
    g.pause();
    const lost = await l.lost;
    assert.match(lost.message, /local deadline passed/);
    assert.ok(performance.now() >= l.deadline);
    g.resume();
    await new Promise((r) => setTimeout(r, 500));
    assert.equal(l.held, false);
    await c.close();
  } finally {
    await g.stop();
  }
});

test("a grant that comes back late is renewed before acquire returns", async () => {
  const c = track(new Client({ endpoints: f.url }));
  const key = unique("late");
  const first = await c.acquire(key, { ttlMs: 1000, owner: "first" });
  // Queue behind the holder, who releases after longer than a TTL.
  setTimeout(() => void first.release(), 1300);
  const t0 = performance.now();
  const l = await c.acquire(key, { ttlMs: 1000, waitMs: 5000, owner: "second" });
  const took = performance.now() - t0;
  assert.ok(took > 1000, `took ${took}ms`);
  // Counted from the renewal: from the Acquire, sent 1.3s ago, it would have passed.
  assert.equal(l.held, true);
  assert.ok(l.deadline > t0 + 1000, `deadline ${l.deadline - t0}ms after the Acquire was sent`);
});

test("markLost aborts the signal and releases in the background", async () => {
  const c = track(new Client({ endpoints: f.url }));
  const key = unique("marked");
  const l = await c.acquire(key, { ttlMs: 3000 });
  l.markLost(new Error("stale somewhere"));
  assert.ok(l.signal.reason instanceof LeaseLostError);
  for (let i = 0; i < 50 && (await c.get(key)).lease; i++) await new Promise((r) => setTimeout(r, 20));
  assert.equal((await c.get(key)).lease, undefined);
});

test("failover: a refused endpoint is skipped; a signal that ends first is a timeout, not held", async () => {
  const dead = `http://127.0.0.1:${await freePort()}`;
  const c = track(new Client({ endpoints: [dead, f.url], owner: "fo" }));
  const key = unique("failover");
  const l = await c.acquire(key, { ttlMs: 3000 });
  assert.deepEqual(c.endpoints, [dead, f.url]);
  await assert.rejects(
    c.acquire(key, { ttlMs: 3000, waitMs: 5000, owner: "other", signal: AbortSignal.timeout(300) }),
    TimeoutError,
  );
  await l.release();
});

test("watch yields transitions in order", async () => {
  const c = track(new Client({ endpoints: f.url }));
  const prefix = unique("watch") + "/";
  const ac = new AbortController();
  const seen: WatchEvent[] = [];
  const { revision } = await c.list(prefix);
  const done = (async () => {
    for await (const ev of c.watch(prefix, { signal: ac.signal, after: revision })) {
      seen.push(ev);
      if (seen.length === 2) ac.abort();
    }
  })();
  const l = await c.acquire(prefix + "a", { ttlMs: 3000 });
  await l.release();
  await done;
  assert.deepEqual(seen.map((e) => e.type), ["ACQUIRED", "RELEASED"]);
  assert.equal(seen[0]?.lease?.token, l.token);
  assert.equal(seen[0]?.lease?.leaseId, "");
  assert.ok(seen[1].revision > seen[0].revision);
});

test("an acquire whose answer was lost, retried on the next endpoint, is uncertain, never held", async () => {
  // A proxy in front of the node that passes the request on and cuts the
  // connection instead of passing the answer back: the grant is made, unseen.
  const { createServer, connect } = await import("node:net");
  const port = new URL(f.url).port;
  const proxy = createServer((down) => {
    const up = connect(Number(port), "127.0.0.1");
    down.pipe(up);
    up.once("data", () => {
      down.destroy();
      up.destroy();
    });
    up.on("error", () => down.destroy());
    down.on("error", () => up.destroy());
  });
  await new Promise<void>((r) => proxy.listen(0, "127.0.0.1", r));
  const { AcquireUncertainError } = await import("../src/index.js");
  try {
    const c = track(new Client({ endpoints: [`http://127.0.0.1:${(proxy.address() as AddressInfo).port}`, f.url], owner: "unsure" }));
    const key = unique("uncertain");
    await assert.rejects(c.acquire(key, { ttlMs: 2000 }), (e: unknown) => {
      assert.ok(e instanceof AcquireUncertainError, String(e));
      assert.equal(e.owner, "unsure");
      assert.ok(e.remainingMs > 0);
      return true;
    });
    // The unseen grant is there, held by this owner.
    const { lease } = await c.get(key);
    assert.equal(lease?.owner, "unsure");
  } finally {
    proxy.close();
  }
});

test("a release whose answer was lost, retried on the next endpoint, is done, never NotHeldError", async () => {
  // Two proxies in front of the node that pass everything on, except the
  // answer to the first unary Release (at either one): the node releases,
  // then the connection is cut, and the retry at the other proxy finds the
  // lease gone. (session.test.ts cuts a Release on the Session stream.)
  const { createServer, connect } = await import("node:net");
  const port = Number(new URL(f.url).port);
  let cut = 0;
  const proxy = () =>
    createServer((down) => {
      const up = connect(port, "127.0.0.1");
      let cutting = false;
      down.on("data", (d) => {
        if (cut === 0 && d.includes("/fenced.v1.LeaseService/Release")) {
          cut++;
          cutting = true;
        }
        up.write(d);
      });
      up.on("data", (d) => {
        if (cutting) {
          down.destroy();
          up.destroy();
        } else {
          down.write(d);
        }
      });
      up.on("end", () => down.end());
      down.on("end", () => up.end());
      up.on("error", () => down.destroy());
      down.on("error", () => up.destroy());
    });
  const proxies = [proxy(), proxy()];
  await Promise.all(proxies.map((p) => new Promise<void>((r) => p.listen(0, "127.0.0.1", r))));
  try {
    const c = track(new Client({ endpoints: proxies.map((p) => `http://127.0.0.1:${(p.address() as AddressInfo).port}`), session: false }));
    const key = unique("release-cut");
    const lease = await c.acquire(key, { ttlMs: 5000 });
    await lease.release(); // before the fix: NotHeldError
    assert.equal(cut, 1, "no answer was cut");
    assert.ok(lease.signal.reason instanceof LeaseReleasedError);
    assert.equal((await c.get(key)).lease, undefined);
    // A release answered not_found is still NotHeldError.
    await assert.rejects(c.release(key, lease.leaseId), NotHeldError);
  } finally {
    for (const p of proxies) p.close();
  }
});
