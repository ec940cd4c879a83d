package main

import (
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// gcHeadroom is the least heap growth allowed between collections.
const gcHeadroom = 64 << 20

// gcPercent is the GOGC for a live heap of live bytes. The lease state is
// long-lived and the per-request garbage small, so the heap may grow by a
// quarter of the live heap (GOGC=25) but by at least gcHeadroom: a small
// node at GOGC=50 spent 8-10% of its CPU collecting under load. The
// headroom is most of what a large node's RSS has above its live heap:
// with a million leases (bench/'s memory workload) a node keeps about
// 210 MB live, and gcHeadroom in place of half of that took its RSS from
// 374 to 330 MiB. The price is CPU: a heap above 256 MiB live is marked
// each time it allocates a quarter of itself, twice as often as at
// GOGC=50 (the collector took 5% of the CPU while that node took its
// million leases).
func gcPercent(live uint64) int {
	if live == 0 {
		return 400
	}
	headroom := max(live/4, gcHeadroom)
	return int(min(headroom*100/live, 400))
}

// tuneGC sets the GC percent from the live heap at every tick.
func tuneGC(tick <-chan time.Time) {
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	last := -1
	for range tick {
		metrics.Read(sample)
		if p := gcPercent(sample[0].Value.Uint64()); p != last {
			debug.SetGCPercent(p)
			last = p
		}
	}
}
