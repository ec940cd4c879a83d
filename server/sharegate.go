package server

import (
	"context"
	"sync"
	"time"
)

// shareGate hands out slots for work that must not starve the write path:
// reads (Gets, Lists, dashboard snapshots) and fan-out (sends to watchers
// and dashboards). At most len(slots) such jobs run at once, the others
// wait parked instead of filling the run queue. While writes are waiting
// (pending reports so), the jobs also keep to a share of the time: a slot
// whose job took d serves its next job only d*(1-share)/share later, so
// that readers and watchers slow down rather than the write path. With no
// write waiting, or share 1, a slot serves the next job at once. Waiters
// are served in turn (a channel's receivers are FIFO).
type shareGate struct {
	// slots holds one token per free slot: the earliest time it may serve
	// its next job while writes wait.
	slots   chan time.Time
	share   float64
	pending func() bool
	// hold, when not 0, is the longest a job keeps its slot to itself:
	// after it, the slot serves the next job even if this one is not done
	// (a send blocked on a subscriber that does not read must not stall
	// every other). Only the time held counts towards the rest.
	hold time.Duration
}

func newShareGate(n int, share float64, hold time.Duration, pending func() bool) *shareGate {
	g := &shareGate{slots: make(chan time.Time, n), share: share, hold: hold, pending: pending}
	for range n {
		g.slots <- time.Time{}
	}
	return g
}

// acquire waits for a slot, and while writes wait for the slot's rest,
// then returns the func that gives the slot back after the job. It
// returns ctx's error if ctx ends first.
func (g *shareGate) acquire(ctx context.Context) (release func(), err error) {
	var next time.Time
	select {
	case next = <-g.slots:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if wait := time.Until(next); wait > 0 && g.pending() {
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			g.slots <- next
			return nil, ctx.Err()
		}
	}
	start := time.Now()
	var once sync.Once
	giveBack := func() {
		once.Do(func() {
			now := time.Now()
			held := now.Sub(start)
			if g.hold > 0 {
				held = min(held, g.hold)
			}
			g.slots <- now.Add(time.Duration(float64(held) * (1 - g.share) / g.share))
		})
	}
	if g.hold <= 0 {
		return giveBack, nil
	}
	t := time.AfterFunc(g.hold, giveBack)
	return func() {
		t.Stop()
		giveBack()
	}, nil
}

// fanoutHold is the longest a send to one watcher or dashboard keeps a
// fan-out slot to itself. A send of a full queue (WatchBuffer events, some
// 100 KiB) to a subscriber that reads takes far less; one that stops
// reading holds its slot this long, not StreamWriteTimeout.
const fanoutHold = 20 * time.Millisecond
