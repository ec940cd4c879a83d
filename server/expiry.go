package server

import (
	"container/heap"
	"sync"
	"time"

	"github.com/fencedio/fenced/internal/failpoint"
	"github.com/fencedio/fenced/lease"
)

// expirer holds the leader's view of lease deadlines, on the monotonic
// clock. It mirrors the current leases of the state machine (fed by applied
// events) and decides expiry; the expiry itself goes through the log.
//
// Every node tracks deadlines, but only the leader acts on them. On gaining
// leadership the node gives every lease a fresh full TTL (reset), because it
// cannot know when the previous leader last renewed them.
type expirer struct {
	mu     sync.Mutex
	byKey  map[string]*tracked
	heap   deadlineHeap
	active bool
	kick   chan struct{} // wakes run when the earliest deadline may have moved
	// expire submits the expiry of a lease whose deadline passed. It must
	// not block for long and is called without mu held.
	expire func(key, id string)
}

// tracked is kept per lease, so it is kept small: a million leases cost
// 80 bytes each here.
type tracked struct {
	lease    lease.Lease
	deadline monoTime
	index    int // position in heap
}

// monoTime is a point on the monotonic clock, as nanoseconds since the
// process's epoch: 8 bytes where a time.Time takes 24.
type monoTime int64

var epoch = time.Now()

func mono(t time.Time) monoTime { return monoTime(t.Sub(epoch)) }

func (m monoTime) add(d time.Duration) monoTime { return m + monoTime(d) }

func newExpirer(expire func(key, id string)) *expirer {
	return &expirer{byKey: make(map[string]*tracked), kick: make(chan struct{}, 1), expire: expire}
}

func (e *expirer) wake() {
	select {
	case e.kick <- struct{}{}:
	default:
	}
}

// add tracks a newly granted lease with a full TTL from now.
func (e *expirer) add(l lease.Lease, now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if old, ok := e.byKey[l.Key]; ok {
		heap.Remove(&e.heap, old.index)
	}
	t := &tracked{lease: l, deadline: mono(now).add(l.TTL)}
	if failpoint.Enabled(failpoint.ExpireHalfTTL) {
		t.deadline = mono(now).add(l.TTL / 2)
	}
	e.byKey[l.Key] = t
	heap.Push(&e.heap, t)
	if t.index == 0 {
		e.wake()
	}
}

// remove stops tracking lease id of key, if it is tracked.
func (e *expirer) remove(key, id string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if t, ok := e.byKey[key]; ok && t.lease.ID == id {
		delete(e.byKey, key)
		heap.Remove(&e.heap, t.index)
	}
}

// renew extends lease id of key by its full TTL from now. A lease whose
// deadline passed is no longer tracked, so it cannot be renewed.
func (e *expirer) renew(key, id string, now time.Time) (lease.Lease, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	t, ok := e.byKey[key]
	if !ok || t.lease.ID != id {
		return lease.Lease{}, lease.ErrNotHeld
	}
	if failpoint.Enabled(failpoint.RenewNoExtend) {
		return t.lease, nil
	}
	t.deadline = mono(now).add(t.lease.TTL)
	if failpoint.Enabled(failpoint.ExpireHalfTTL) {
		t.deadline = mono(now).add(t.lease.TTL / 2)
	}
	heap.Fix(&e.heap, t.index)
	return t.lease, nil
}

// remaining returns how long the lease of key has left, 0 if untracked.
func (e *expirer) remaining(key string, now time.Time) time.Duration {
	e.mu.Lock()
	defer e.mu.Unlock()
	if t, ok := e.byKey[key]; ok {
		return max(time.Duration(t.deadline-mono(now)), 0)
	}
	return 0
}

// reset replaces the tracked set with leases, each with a full TTL from now.
func (e *expirer) reset(leases []lease.Lease, now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.byKey = make(map[string]*tracked, len(leases))
	e.heap = make(deadlineHeap, 0, len(leases))
	for _, l := range leases {
		t := &tracked{lease: l, deadline: mono(now).add(l.TTL), index: len(e.heap)}
		e.byKey[l.Key] = t
		e.heap = append(e.heap, t)
	}
	heap.Init(&e.heap)
	e.wake()
}

// setActive starts or stops acting on deadlines (leadership).
func (e *expirer) setActive(active bool) {
	e.mu.Lock()
	e.active = active
	e.mu.Unlock()
	e.wake()
}

// run expires leases whose deadlines pass while active, until done closes.
func (e *expirer) run(done <-chan struct{}) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var due []lease.Lease
	for {
		due = due[:0]
		wait := time.Hour
		e.mu.Lock()
		if e.active {
			now := mono(time.Now())
			for len(e.heap) > 0 && e.heap[0].deadline <= now {
				t := heap.Pop(&e.heap).(*tracked)
				delete(e.byKey, t.lease.Key)
				due = append(due, t.lease)
			}
			if len(e.heap) > 0 {
				wait = time.Duration(e.heap[0].deadline - now)
			}
		}
		e.mu.Unlock()
		for _, l := range due {
			e.expire(l.Key, l.ID)
		}
		timer.Reset(wait)
		select {
		case <-done:
			return
		case <-e.kick:
		case <-timer.C:
		}
	}
}

type deadlineHeap []*tracked

func (h deadlineHeap) Len() int           { return len(h) }
func (h deadlineHeap) Less(i, j int) bool { return h[i].deadline < h[j].deadline }
func (h deadlineHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}
func (h *deadlineHeap) Push(x any) {
	t := x.(*tracked)
	t.index = len(*h)
	*h = append(*h, t)
}
func (h *deadlineHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return t
}
