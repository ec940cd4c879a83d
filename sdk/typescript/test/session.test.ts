// The Session stream (src/session.ts): calls go over one HTTP/2 stream per
// endpoint, unary where it is unavailable, with the unary call's meaning.
// A tap (a TCP proxy) in front of the node tells HTTP/2 connections from
// HTTP/1.1 ones and can cut a connection at the next answer on a stream.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { type AddressInfo, connect, createServer, type Server, type Socket } from "node:net";
import { type Fenced, startFenced, unique } from "./helpers.js";
import { GuardedSessionManager } from "../src/endpoints.js";
import {
  AbortedError,
  AcquireUncertainError,
  Client,
  HeldError,
  InvalidArgumentError,
  NotHeldError,
  TimeoutError,
  UnavailableError,
  type Lease,
} from "../src/index.js";

let f: Fenced;
const clients: Client[] = [];
const track = (c: Client) => (clients.push(c), c);
const taps: Tap[] = [];
before(async () => {
  f = await startFenced();
});
after(async () => {
  for (const c of clients) await c[Symbol.asyncDispose]();
  for (const t of taps) t.close();
  await f?.stop();
});

const h2Preface = Buffer.from("PRI * HTTP/2.0");

interface Tap {
  url: string;
  /** Connections that began with the HTTP/2 preface. */
  h2: number;
  /** Connections that began otherwise (HTTP/1.1). */
  http1: number;
  /** Cuts the connection, answer unsent, at the next HTTP/2 DATA frame the node sends; resolves once cut. */
  cutNextAnswer(): Promise<void>;
  close(): void;
}

/**
 * A TCP proxy in front of the node. http1: "pass" forwards HTTP/1.1
 * connections, "drop" closes them (so that GET /v1/role finds no leader
 * there and the client keeps to the endpoint order); h2: false answers the
 * HTTP/2 preface as an HTTP/1.1-only server does.
 */
async function tap(port: number, { http1 = "pass", h2 = true }: { http1?: "pass" | "drop"; h2?: boolean } = {}): Promise<Tap> {
  const conns = new Set<Socket>();
  let armed: (() => void) | undefined;
  const t: Tap = {
    url: "",
    h2: 0,
    http1: 0,
    cutNextAnswer: () => new Promise<void>((resolve) => (armed = resolve)),
    close() {
      server.close();
      for (const s of conns) s.destroy();
    },
  };
  const server: Server = createServer((down) => {
    conns.add(down);
    down.on("error", () => {});
    down.once("data", (first: Buffer) => {
      const isH2 = first.subarray(0, h2Preface.length).equals(h2Preface);
      if (isH2) t.h2++;
      else t.http1++;
      if (isH2 ? !h2 : http1 === "drop") {
        if (!h2 && isH2) down.end("HTTP/1.1 505 HTTP Version Not Supported\r\nConnection: close\r\n\r\n");
        else down.destroy();
        return;
      }
      const up = connect(port, "127.0.0.1");
      conns.add(up);
      up.on("error", () => down.destroy());
      down.on("error", () => up.destroy());
      up.write(first);
      down.pipe(up);
      if (!isH2) {
        up.pipe(down);
        return;
      }
      // Parse the node's HTTP/2 frames (9-byte header: length, type, flags, stream).
      let buf = Buffer.alloc(0);
      up.on("data", (d: Buffer) => {
        buf = Buffer.concat([buf, d]);
        let at = 0;
        while (buf.length - at >= 9) {
          const len = buf.readUIntBE(at, 3);
          const type = buf[at + 3];
          if (buf.length - at < 9 + len) break;
          if (armed && type === 0 && len > 0) {
            down.write(buf.subarray(0, at));
            down.destroy();
            up.destroy();
            const done = armed;
            armed = undefined;
            done();
            return;
          }
          at += 9 + len;
        }
        down.write(buf.subarray(0, at));
        buf = buf.subarray(at);
      });
      up.on("end", () => down.end());
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  t.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  taps.push(t);
  return t;
}

const port = () => Number(new URL(f.url).port);

test("session used: acquire, renew and release go over one HTTP/2 connection, errors as unary", async () => {
  const t = await tap(port(), { http1: "drop" });
  const c = track(new Client({ endpoints: t.url, owner: "s-a" }));
  const other = track(new Client({ endpoints: t.url, owner: "s-b" }));
  // Calls go unary until the stream's probe is answered; the tap drops HTTP/1.1.
  assert.deepEqual([await c.probeSessions(), await other.probeSessions()], [[true], [true]]);
  const key = unique("session");
  const l1 = await c.acquire(key, { ttlMs: 3000 });
  assert.ok(l1.token > 0n);
  await assert.rejects(other.acquire(key, { ttlMs: 3000 }), (e: unknown) => {
    assert.ok(e instanceof HeldError, String(e));
    assert.deepEqual([e.owner, e.token], ["s-a", l1.token]);
    assert.ok(e.remainingMs > 0);
    return true;
  });
  const renewed = await c.renew(key, l1.leaseId);
  assert.equal(renewed.token, l1.token);
  await assert.rejects(c.renew(key, "00"), NotHeldError);
  await assert.rejects(c.acquire("", { ttlMs: 3000 }), InvalidArgumentError);
  await l1.release();
  await assert.rejects(c.release(key, l1.leaseId), NotHeldError);
  const l2 = await other.acquire(key, { ttlMs: 3000 });
  assert.ok(l2.token > l1.token);
  await l2.release();
  assert.equal(t.http1, 0, "a call went unary");
  assert.equal(t.h2, 2, "one HTTP/2 connection per client");
});

test("fallback: where HTTP/2 is not spoken, calls go unary, and the stream is probed again after 1 s, then 2 s", async () => {
  const t = await tap(port(), { h2: false });
  let skew = 0;
  const c = track(new Client({ endpoints: t.url, keepAliveStream: false, clock: () => performance.now() + skew }));
  // Each step: probe (opening a stream unless pausing), then calls, all unary.
  const step = async () => {
    assert.deepEqual(await c.probeSessions(), [false]);
    const l = await c.acquire(unique("fallback"), { ttlMs: 3000 });
    await c.renew(l.key, l.leaseId);
    await l.release();
  };
  await step();
  assert.equal(t.h2, 1);
  assert.ok(t.http1 >= 1, "no call went unary");
  await step();
  assert.equal(t.h2, 1, "probed again within the pause");
  skew += 1100;
  await step();
  assert.equal(t.h2, 2, "not probed again after the pause");
  skew += 1100;
  await step();
  assert.equal(t.h2, 2, "the pause did not double");
  skew += 1000;
  await step();
  assert.equal(t.h2, 3);
});

test("session: false sends every call unary", async () => {
  const t = await tap(port());
  const c = track(new Client({ endpoints: t.url, session: false, keepAliveStream: false }));
  const l = await c.acquire(unique("off"), { ttlMs: 3000 });
  await c.renew(l.key, l.leaseId);
  await l.release();
  assert.equal(t.h2, 0);
  assert.ok(t.http1 >= 1);
});

test("a stream cut after the send: acquire is uncertain (one endpoint: unavailable), release is done", async () => {
  // The taps drop HTTP/1.1 (GET /v1/role finds no leader, the endpoint order
  // holds), so only the Session stream carries calls.
  const [a, b] = [await tap(port(), { http1: "drop" }), await tap(port(), { http1: "drop" })];
  const c = track(new Client({ endpoints: [a.url, b.url], owner: "unsure" }));
  const check = track(new Client({ endpoints: f.url }));
  assert.deepEqual(await c.probeSessions(), [true, true]);
  const warm = await c.acquire(unique("warm"), { ttlMs: 30_000 });
  // The grant is made and its answer cut; the retry at b finds the key held by this owner.
  const key = unique("cut");
  const cut = a.cutNextAnswer();
  await assert.rejects(c.acquire(key, { ttlMs: 30_000 }), (e: unknown) => {
    assert.ok(e instanceof AcquireUncertainError, String(e));
    assert.equal(e.owner, "unsure");
    return true;
  });
  await cut;
  assert.equal((await check.get(key)).lease?.owner, "unsure");
  assert.deepEqual(await c.probeSessions(), [true, true]); // a new stream at a
  // The release is applied and its answer cut at b; the retry at a finds the lease gone.
  const cutB = b.cutNextAnswer();
  await warm.release();
  await cutB;
  assert.equal((await check.get(warm.key)).lease, undefined);
  await assert.rejects(c.release(warm.key, warm.leaseId), NotHeldError);
  // With one endpoint the cut acquire is unavailable, and may have been granted.
  const one = track(new Client({ endpoints: a.url, owner: "unsure" }));
  assert.deepEqual(await one.probeSessions(), [true]);
  const cutOne = a.cutNextAnswer();
  const key2 = unique("cut");
  await assert.rejects(one.acquire(key2, { ttlMs: 30_000 }), UnavailableError);
  await cutOne;
  assert.equal((await check.get(key2)).lease?.owner, "unsure");
});

test("an aborted or timed-out acquire waiting in line is cancelled on the server", async () => {
  const t = await tap(port(), { http1: "drop" });
  const holder = track(new Client({ endpoints: f.url, owner: "holder" }));
  const c = track(new Client({ endpoints: t.url, owner: "waiter" }));
  const check = track(new Client({ endpoints: f.url }));
  const key = unique("cancel");
  const held = await holder.acquire(key, { ttlMs: 30_000 });
  assert.deepEqual(await c.probeSessions(), [true]);
  const ac = new AbortController();
  // Abort once the Acquire is on the stream: the trace hook runs just before it is sent.
  c.trace = (call) => {
    if (call.kind === "acquire") setImmediate(() => ac.abort());
    return () => {};
  };
  await assert.rejects(c.acquire(key, { ttlMs: 3000, waitMs: 60_000, signal: ac.signal }), AbortedError);
  c.trace = undefined;
  await assert.rejects(c.acquire(key, { ttlMs: 3000, waitMs: 60_000, timeoutMs: 300 }), TimeoutError);
  // A call sent after the cancels is answered after the server read them.
  await (await c.acquire(unique("after"), { ttlMs: 3000 })).release();
  await held.release();
  assert.equal((await check.get(key)).lease, undefined, "a cancelled acquire was granted");
  assert.equal(t.http1, 0, "a call went unary");
});

test("pipelining: calls on one stream are answered in any order, a waiting acquire holds up none", async () => {
  const t = await tap(port(), { http1: "drop" });
  const holder = track(new Client({ endpoints: f.url, owner: "holder" }));
  const c = track(new Client({ endpoints: t.url }));
  assert.deepEqual(await c.probeSessions(), [true]);
  const key = unique("line");
  const held = await holder.acquire(key, { ttlMs: 30_000 });
  let waited: Lease | undefined;
  const waiting = c.acquire(key, { ttlMs: 3000, waitMs: 30_000 }).then((l) => (waited = l));
  const leases = await Promise.all(Array.from({ length: 32 }, () => c.acquire(unique("many"), { ttlMs: 3000 })));
  assert.equal(new Set(leases.map((l) => l.key)).size, 32);
  assert.equal(waited, undefined, "the waiting acquire was answered before its key was free");
  await Promise.all(leases.map((l) => l.release()));
  await held.release();
  const l = await waiting;
  assert.ok(l.token > held.token);
  await l.release();
  assert.equal(t.http1, 0, "a call went unary");
  assert.equal(t.h2, 1);
});

test("closing right after an HTTP/2 protocol error does not crash the process", async () => {
  // The connection's 'error' event comes a tick after the protocol error;
  // abort() in between removes the session manager's own listener.
  const server = createServer((down) => {
    down.on("error", () => {});
    down.once("data", () => down.end("HTTP/1.1 505 HTTP Version Not Supported\r\nConnection: close\r\n\r\n"));
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  try {
    for (let i = 0; i < 10; i++) {
      const h2 = new GuardedSessionManager(`http://127.0.0.1:${(server.address() as AddressInfo).port}`);
      const stream = await h2.request("POST", "/fenced.v1.LeaseService/Session", {}, {});
      await new Promise<void>((resolve) => {
        const abort = () => (h2.abort(), resolve());
        stream.once("error", abort);
        stream.once("close", abort);
        stream.write("x");
      });
    }
  } finally {
    server.close();
  }
});

test("an open session stream lets the process exit, and a call waiting on it keeps it alive", async () => {
  // A child process that acquires and releases, then starts an acquire and
  // ends its script without closing the client.
  const index = new URL("../src/index.js", import.meta.url).href;
  const script = `
    import { Client } from ${JSON.stringify(index)};
    const c = new Client({ endpoints: ${JSON.stringify(f.url)}, keepAliveStream: false });
    if ((await c.probeSessions())[0] !== true) throw new Error("no session stream");
    const l = await c.acquire(${JSON.stringify(unique("exit"))}, { ttlMs: 3000 });
    await l.release();
    c.acquire(${JSON.stringify(unique("exit"))}, { ttlMs: 3000, waitMs: 1 }).then((l) => { console.log("answered"); l.orphan(); });
  `;
  const { spawnSync } = await import("node:child_process");
  const r = spawnSync(process.execPath, ["--input-type=module", "-e", script], { encoding: "utf8", timeout: 20_000 });
  assert.equal(r.signal, null, "the process did not exit");
  assert.equal(r.status, 0, r.stderr);
  assert.equal(r.stdout.trim(), "answered");
});
