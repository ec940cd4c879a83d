package sharegate

import (
	"context"
	"sync"
	"time"
)

// Gate hands out slots for work that must not starve the write path:
// reads (Gets, Lists, dashboard snapshots) and fan-out (sends to watchers
// and dashboards). At most len(slots) such jobs run at once, the others
// wait parked instead of filling the run queue. While writes are waiting
// (pending reports so), the jobs also keep to a share of the time: a slot
// whose job took d serves its next job only d*(1-share)/share later, so
// that readers and watchers slow down rather than the write path. With no
// write waiting, or share 1, a slot serves the next job at once. Waiters
// are served in turn (a channel's receivers are FIFO).
type Gate struct {
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

// New returns a gate of n slots that keep to share of the time while
// pending reports writes waiting, each job holding its slot at most hold
// (0: as long as it runs).
func New(n int, share float64, hold time.Duration, pending func() bool) *Gate {
	g := &Gate{slots: make(chan time.Time, n), share: share, hold: hold, pending: pending}
	for range n {
		g.slots <- time.Time{}
	}
	return g
}

// Acquire waits for a slot, and while writes wait for the slot's rest,
// then returns the func that gives the slot back after the job. It
// returns ctx's error if ctx ends first.
func (g *Gate) Acquire(ctx context.Context) (release func(), err error) {
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

// Free returns the number of free slots and of slots in all.
func (g *Gate) Free() (free, total int) { return len(g.slots), cap(g.slots) }

// Seize takes every slot, waiting for those in use, and returns the func
// that gives them back; until then no job runs, whatever hold is. Tests use
// it to stand for a budget that is spent.
func (g *Gate) Seize() (giveBack func()) {
	taken := make([]time.Time, 0, cap(g.slots))
	for range cap(g.slots) {
		taken = append(taken, <-g.slots)
	}
	return func() {
		for _, next := range taken {
			g.slots <- next
		}
	}
}
