import { test } from "node:test";
import assert from "node:assert/strict";
import { startCluster, leaderOf, unique } from "./helpers.js";
import { Client, type WatchEvent } from "../src/index.js";

// Long (a 3-node cluster and an election): runs with FENCED_LONG=1, as CI sets.
test("a 3-node cluster: the leader is killed; the lease and the watch carry on at the other nodes", { skip: process.env.FENCED_LONG !== "1" && "FENCED_LONG=1 runs it" }, async () => {
  const cl = await startCluster(3);
  const c = new Client({ endpoints: cl.urls, failoverTimeoutMs: 10_000 });
  try {
    const prefix = unique("cl") + "/";
    const ac = new AbortController();
    const seen: WatchEvent[] = [];
    const { revision } = await c.list(prefix);
    const watching = (async () => {
      for await (const ev of c.watch(prefix, { signal: ac.signal, after: revision })) {
        seen.push(ev);
        if (ev.type === "RELEASED") ac.abort();
      }
    })();
    const l = await c.acquire(prefix + "a", { ttlMs: 4000 });
    const leader = await leaderOf(cl.nodes);
    assert.ok(leader, "no leader");
    leader.proc.kill("SIGKILL");
    // Longer than the TTL: renewals must have found the new leader.
    await new Promise((r) => setTimeout(r, 5000));
    assert.equal(l.held, true, String(l.signal.reason));
    assert.notEqual(await leaderOf(cl.nodes.filter((x) => x !== leader)), undefined);
    const { lease } = await c.get(l.key);
    assert.equal(lease?.token, l.token);
    await l.release();
    await watching;
    const types = seen.filter((e) => e.type !== "RESYNC").map((e) => e.type);
    assert.deepEqual(types, ["ACQUIRED", "RELEASED"]);
  } finally {
    await c[Symbol.asyncDispose]();
    await cl.stop();
  }
});
