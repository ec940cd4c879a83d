// The wall clock at a performance.now() reading, for the torture worker's
// history, whose times are compared across processes. Not part of the package.
//
// performance.timeOrigin is not good enough for that: in a torture run a
// worker's records ran 1.6 to 6.2 ms ahead of the node's wall clock for the
// whole run, enough to put an operation before the one that caused it. So
// the offset is measured against Date.now(), which floors the wall clock to
// the millisecond: a reading of performance.now() between two Date.now()
// readings d0 and d1 happened at a wall time in [d0, d1 + 1). Readings at
// different points of the millisecond narrow the interval to microseconds.

/**
 * The wall clock minus performance.now(), in milliseconds: at least base +
 * lo, below base + hi. base is a whole number of milliseconds, so that lo
 * and hi are small and exact as doubles.
 */
export interface WallOffset {
  base: number;
  lo: number;
  hi: number;
}

/**
 * Measures the offset for up to maxMs (busy, on the calling thread), or
 * until it is known to within goalMs.
 */
export function measureWallOffset(
  maxMs = 50,
  goalMs = 0.002,
  wall: () => number = Date.now,
  perf: () => number = () => performance.now(),
): WallOffset {
  const base = wall();
  let lo = -Infinity;
  let hi = Infinity;
  const end = perf() + maxMs;
  for (;;) {
    const d0 = wall() - base;
    const p = perf();
    const d1 = wall() - base;
    lo = Math.max(lo, d0 - p);
    hi = Math.min(hi, d1 + 1 - p);
    if (hi - lo <= goalMs || p >= end) {
      return { base, lo, hi };
    }
  }
}

/** Wall-clock Unix nanoseconds at perfMs: the earliest it can be ("lo") or the latest ("hi"). */
export function wallNs(off: WallOffset, perfMs: number, bound: "lo" | "hi"): bigint {
  const ns = (perfMs + (bound === "lo" ? off.lo : off.hi)) * 1e6;
  return BigInt(off.base) * 1_000_000n + BigInt(bound === "lo" ? Math.floor(ns) : Math.ceil(ns));
}
