// A Lease's local deadline on an injected clock (performance.now) and
// mocked timers: no server, no sleeps.
import { test, mock } from "node:test";
import assert from "node:assert/strict";
import { Lease, LeaseLostError } from "../src/index.js";
import type { LeaseHost } from "../src/lease.js";

test("a renewal answered before the local deadline but applied after it loses the lease for good", async (t) => {
  let now = 1000; // the lease's clock, injected
  mock.timers.enable({ apis: ["setTimeout"] });
  t.after(() => mock.timers.reset());
  const ttl = 3000;
  const window = ttl - ttl * 0.001 - 10;
  let released = 0;
  const host: LeaseHost = {
    requestTimeoutMs: 2000,
    async renew() {
      now = 1000 + window + 1; // answered in time, applied after the deadline (the loop was late)
      return { signature: "" };
    },
    async release() {},
    releaseLost() {
      released++;
    },
    now: () => now,
    proofTime: (sent) => sent,
    holdRenewals() {},
    dropRenewals() {},
  };
  const info = { key: "k", leaseId: "id", owner: "me", token: 7n, ttlMs: ttl, remainingMs: ttl };
  const lease = new Lease(host, info, "", ttl / 3, window);
  lease.start(now);
  const before = lease.deadline;
  now += ttl / 3; // the renewal is sent before the deadline
  mock.timers.tick(ttl / 3);
  await new Promise((r) => setImmediate(r)); // the renewal's answer is applied
  assert.equal(lease.held, false);
  assert.ok(lease.signal.reason instanceof LeaseLostError, String(lease.signal.reason));
  assert.equal(lease.deadline, before, "the deadline moved after it had passed");
  assert.equal(released, 1);
});
