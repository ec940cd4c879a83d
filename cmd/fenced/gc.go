package main

import (
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// gcHeadroom is the least heap growth allowed between collections.
const gcHeadroom = 64 << 20

// gcPercent is the GOGC for a live heap of live bytes. The lease state is
// long-lived and the per-request garbage small, so the heap may grow by
// half the live heap (GOGC=50, which keeps a million leases under 1 GiB of
// RSS) but by at least gcHeadroom: a small node at GOGC=50 spent 8-10% of
// its CPU collecting under load.
func gcPercent(live uint64) int {
	if live == 0 {
		return 400
	}
	headroom := max(live/2, gcHeadroom)
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
