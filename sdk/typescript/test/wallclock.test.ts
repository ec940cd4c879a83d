// The torture worker's wall clock (torture/wallclock.ts): bounds that hold
// whatever performance.timeOrigin says.
import { test } from "node:test";
import assert from "node:assert/strict";
import { measureWallOffset, wallNs } from "../torture/wallclock.js";

test("wall clock: the offset is measured against Date.now(), not performance.timeOrigin", () => {
  // A fake pair of clocks: the wall is 1,796,452,831,189.4567 ms when the
  // monotonic clock reads 0, and Date.now() floors it; each reading moves
  // the monotonic clock on by 0.37 µs.
  const offset = 1_796_452_831_189.4567;
  let t = 1000;
  const perf = () => (t += 0.00037);
  const wall = () => Math.floor(offset + (t += 0.00037));
  const off = measureWallOffset(50, 0.002, wall, perf);
  assert.ok(off.base + off.lo <= offset + 1e-6 && offset <= off.base + off.hi + 1e-6, `offset ${offset} outside [${off.base + off.lo}, ${off.base + off.hi}]`);
  assert.ok(off.hi - off.lo <= 0.002, `measured to within ${off.hi - off.lo} ms`);
  const at = 5_000.123456; // a performance.now() reading
  const truth = BigInt(Math.round((offset - 1_796_452_831_000) * 1e6 + at * 1e6)) + 1_796_452_831_000n * 1_000_000n;
  const lo = wallNs(off, at, "lo");
  const hi = wallNs(off, at, "hi");
  assert.ok(lo <= truth && truth <= hi, `${truth} outside [${lo}, ${hi}]`);
  assert.ok(hi - lo <= 2_100n, `bounds ${hi - lo} ns apart`);
});

test("wall clock: with the real clocks, every later Date.now() agrees with the bounds", () => {
  const off = measureWallOffset();
  for (let i = 0; i < 100_000; i++) {
    const d0 = Date.now();
    const p = performance.now();
    const d1 = Date.now();
    const lo = wallNs(off, p, "lo");
    const hi = wallNs(off, p, "hi");
    // The wall time at p is in [d0, d1 + 1) ms.
    assert.ok(lo < BigInt(d1 + 1) * 1_000_000n && hi >= BigInt(d0) * 1_000_000n, `[${lo}, ${hi}] vs Date.now() ${d0}..${d1}`);
  }
});
