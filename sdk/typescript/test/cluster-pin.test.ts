// Pinning the cluster (docs/client-algorithm.md, section 7): endpoints of
// two clusters, two separate single-node fenced, each of its own cluster.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { type Fenced, startFenced, unique } from "./helpers.js";
import { AcquireUncertainError, Client, ClusterMismatchError, UnavailableError } from "../src/index.js";

let a: Fenced, b: Fenced;
const clients: Client[] = [];
const track = (c: Client) => (clients.push(c), c);
before(async () => {
  [a, b] = await Promise.all([startFenced(), startFenced()]);
});
after(async () => {
  for (const c of clients) await c[Symbol.asyncDispose]();
  await Promise.all([a?.stop(), b?.stop()]);
});

const clusterId = async (url: string) => ((await (await fetch(`${url}/v1/role`)).json()) as { clusterId: string }).clusterId;

test("clusterId pins up front: an endpoint of another cluster is never used", async () => {
  const [idA, idB] = [await clusterId(a.url), await clusterId(b.url)];
  assert.ok(idA && idB && idA !== idB);
  const reports: ClusterMismatchError[] = [];
  const c = track(new Client({ endpoints: b.url, clusterId: idA.toUpperCase(), onClusterMismatch: (e) => reports.push(e) }));
  const key = unique("pin");
  const mismatch = (e: unknown) => {
    assert.ok(e instanceof ClusterMismatchError && e instanceof UnavailableError, String(e));
    assert.deepEqual([e.endpoint, e.pinned, e.got], [b.url, idA, idB]);
    return true;
  };
  // b grants it, for itself: never reported as granted, nor as uncertain.
  await assert.rejects(c.acquire(key), (e: unknown) => mismatch(e) && !(e instanceof AcquireUncertainError));
  await assert.rejects(c.get(key), mismatch);
  await assert.rejects(async () => {
    for await (const ev of c.watch(key, { after: 1n })) {
      assert.fail(`watch yielded an event of another cluster: ${ev.type}`);
    }
  }, mismatch);
  assert.equal(reports.length, 1);
  assert.throws(() => new Client({ endpoints: a.url, clusterId: "not hex" }), TypeError);
});

// Last: it stops a.
test("endpoints of two clusters: the client keeps to the first that answered", async () => {
  const [idA, idB] = [await clusterId(a.url), await clusterId(b.url)];
  const key = unique("pin");
  const other = track(new Client({ endpoints: b.url, owner: "b" }));
  const held = await other.acquire(key);
  const reports: ClusterMismatchError[] = [];
  const c = track(new Client({ endpoints: [a.url, b.url], failoverTimeoutMs: 300, onClusterMismatch: (e) => reports.push(e) }));
  const lease = await c.acquire(key); // at a, the first endpoint
  await lease.release();
  await a.stop();
  for (let i = 0; i < 3; i++) {
    await assert.rejects(
      c.get(key).then((r) => assert.fail(`answered by the other cluster: held by ${r.lease?.owner}, last token ${r.lastToken}`)),
      UnavailableError,
    );
    await assert.rejects(c.acquire(`${key}/2`), (e: unknown) => e instanceof UnavailableError && !(e instanceof AcquireUncertainError));
  }
  assert.equal(reports.length, 1, reports.join("\n"));
  assert.deepEqual([reports[0].endpoint, reports[0].pinned, reports[0].got], [b.url, idA, idB]);
  await held.release();
});
