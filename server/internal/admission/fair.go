package admission

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// FairGate lets at most capacity calls be worked on at once. Beyond that,
// calls wait, in one line per group (a client network), and each place
// that frees up goes to the head of the waiting group that has used the
// least of the gate's time: start-time fair queueing, with the time a
// call held its place as its cost. A group that floods the gate therefore
// gets its turn in proportion to what others ask, not to what it sends: a
// group with one call waiting is served at the next free place, behind at
// most one call of each other group with the same use.
//
// A group that waits for the first time, or again after it was idle,
// starts at the use of the group last served, so that time not asked for
// earlier cannot be saved up and spent in a burst.
//
// Each freed place looks at every group with calls in the gate or waiting
// (a linear scan): as many as the gate's capacity plus the networks whose
// calls wait, each network's calls bounded by its slots.
type FairGate struct {
	capacity int
	now      func() time.Time

	mu      sync.Mutex
	running int
	waiting int // calls waiting in all groups
	vtime   time.Duration
	groups  map[string]*fairGroup
}

type fairGroup struct {
	used    time.Duration // virtual time: the time its calls held places, from when it became active
	running int
	queue   []*fairWaiter
}

type fairWaiter struct {
	place   *Place
	ready   chan struct{} // closed when place was given
	granted bool          // under the gate's lock
}

// NewFairGate lets capacity calls in at once; now is the clock (time.Now
// when nil).
func NewFairGate(capacity int, now func() time.Time) *FairGate {
	if now == nil {
		now = time.Now
	}
	return &FairGate{capacity: capacity, now: now, groups: make(map[string]*fairGroup)}
}

// Place is a call's place in a FairGate. The zero Place holds none.
type Place struct {
	gate  *FairGate
	group string
	since time.Time
	left  atomic.Bool
}

// Enter takes a place for a call of group, waiting for one while the gate
// is full, until ctx ends (ctx's error, and no place).
func (g *FairGate) Enter(ctx context.Context, group string) (*Place, error) {
	g.mu.Lock()
	grp := g.groups[group]
	if grp == nil {
		grp = &fairGroup{used: g.vtime}
		g.groups[group] = grp
	} else if grp.running == 0 && len(grp.queue) == 0 {
		grp.used = max(grp.used, g.vtime)
	}
	if g.running < g.capacity && g.waiting == 0 {
		p := g.admitLocked(group, grp)
		g.mu.Unlock()
		return p, nil
	}
	w := &fairWaiter{ready: make(chan struct{})}
	grp.queue = append(grp.queue, w)
	g.waiting++
	g.mu.Unlock()

	select {
	case <-w.ready:
		return w.place, nil
	case <-ctx.Done():
	}
	g.mu.Lock()
	if w.granted {
		// Given a place as ctx ended: pass it on.
		g.mu.Unlock()
		w.place.Leave()
		return nil, ctx.Err()
	}
	for i, q := range grp.queue {
		if q == w {
			grp.queue = append(grp.queue[:i], grp.queue[i+1:]...)
			break
		}
	}
	g.waiting--
	g.forgetIfIdleLocked(group, grp)
	g.mu.Unlock()
	return nil, ctx.Err()
}

func (g *FairGate) admitLocked(group string, grp *fairGroup) *Place {
	g.running++
	grp.running++
	return &Place{gate: g, group: group, since: g.now()}
}

// Leave gives the place back, once, and charges its group the time it
// held it. Leaving a nil or zero Place does nothing.
func (p *Place) Leave() {
	if p == nil || p.gate == nil || p.left.Swap(true) {
		return
	}
	g := p.gate
	held := g.now().Sub(p.since)
	g.mu.Lock()
	defer g.mu.Unlock()
	g.running--
	grp := g.groups[p.group]
	grp.running--
	grp.used += held
	g.forgetIfIdleLocked(p.group, grp)
	g.dispatchLocked()
}

// dispatchLocked gives the free places to the heads of the waiting groups
// that have used the least.
func (g *FairGate) dispatchLocked() {
	for g.running < g.capacity && g.waiting > 0 {
		var next string
		var nextGrp *fairGroup
		for name, grp := range g.groups {
			if len(grp.queue) > 0 && (nextGrp == nil || grp.used < nextGrp.used) {
				next, nextGrp = name, grp
			}
		}
		w := nextGrp.queue[0]
		nextGrp.queue[0] = nil
		nextGrp.queue = nextGrp.queue[1:]
		g.waiting--
		g.vtime = nextGrp.used
		w.place, w.granted = g.admitLocked(next, nextGrp), true
		close(w.ready)
	}
}

func (g *FairGate) forgetIfIdleLocked(name string, grp *fairGroup) {
	if grp.running == 0 && len(grp.queue) == 0 {
		delete(g.groups, name)
	}
}

// Running is how many calls hold places, and Waiting how many wait.
func (g *FairGate) Running() (running, waiting int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.running, g.waiting
}
