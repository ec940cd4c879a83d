package expiry

import (
	"container/heap"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencedio/fenced/internal/failpoint"
	"github.com/fencedio/fenced/lease"
)

// Expirer holds the leader's view of lease deadlines, on the monotonic
// clock. It mirrors the current leases of the state machine (fed by applied
// events) and decides expiry; the expiry itself goes through the log. A
// lease's deadline lives in the state's record of it (lease.Held), so
// tracking a lease costs one slot of the Expirer's heap.
//
// Every node tracks deadlines, but only the leader acts on them. On gaining
// leadership the node gives every lease a fresh full TTL (Reset), because it
// cannot know when the previous leader last renewed them.
//
// Many leases can come due at once: after a restart or failover every lease
// has the same fresh deadline. Due leases are therefore expired in batches
// of up to maxBatch per log entry, by at most maxInflight submissions at a
// time; leases past their deadline wait in the heap meanwhile, and cannot
// be renewed there. Goroutines and memory stay flat however many are due.
type Expirer struct {
	mu     sync.Mutex
	heap   deadlineHeap // the records tracked; each one's Slot is its place here plus one
	active bool
	// term is the leadership term whose deadlines these are, stamped on
	// every expiry decided while active.
	term          uint64
	inflight      int           // submissions running
	earliestMoved chan struct{} // wakes run when the earliest deadline may have moved
	// nextLook is when run looks at the heap next on its own (its timer):
	// a lease added with a later deadline needs no wake-up. With one lease
	// acquired and released in a loop, that spares the goroutine a wake-up
	// per grant.
	nextLook monoTime
	// expire writes the expiry of due leases, decided in term, to the log
	// and returns once it is applied or has failed. It is called without mu
	// held, from at most maxInflight goroutines at once.
	expire func(term uint64, due []lease.Lease)

	maxBatch    int // leases per expire call
	maxInflight int // expire calls at once
	submitting  sync.WaitGroup

	// clock, when set, replaces the wall clock for every deadline. It is
	// how tests of a running node fake lease time (UseManualClock), so
	// that TTLs of a few hundred milliseconds pass when the test says.
	// Such a node cannot run in a testing/synctest bubble: its peer port
	// is a real TCP listener, a goroutine waiting in its Accept never
	// counts as durably blocked, so the bubble's clock never moves and
	// the node never elects itself. Tests of the expirer alone own no
	// socket and run in a bubble instead (expiry_test.go), where
	// time.Now is already fake and clock stays unset. SetClock sets it.
	clock atomic.Pointer[func() time.Time]
}

// Defaults of Expirer.maxBatch and maxInflight. A batch of 1024 leases is
// an entry of about 50 KB; four in flight keep raft's group commit fed
// while bounding what waits in memory.
const (
	defaultBatch    = 1024
	defaultInflight = 4
)

// ErrOtherTerm refuses a renewal accepted in another leadership term than
// the one whose deadlines the Expirer holds (Renew).
var ErrOtherTerm = errors.New("renewal of another term than the deadlines'")

// monoTime is a point on the monotonic clock, as nanoseconds since the
// process's epoch: 8 bytes where a time.Time takes 24.
type monoTime int64

var epoch = time.Now()

func mono(t time.Time) monoTime { return monoTime(t.Sub(epoch)) }

func (m monoTime) add(d time.Duration) monoTime { return m + monoTime(d) }

// New returns an inactive Expirer that tracks no lease. expire writes the
// expiry of due leases, decided in term, to the log and returns once it is
// applied or has failed; Run calls it without the Expirer's lock held, from
// at most a few goroutines at once.
func New(expire func(term uint64, due []lease.Lease)) *Expirer {
	return &Expirer{earliestMoved: make(chan struct{}, 1), expire: expire,
		maxBatch: defaultBatch, maxInflight: defaultInflight}
}

// SetClock puts every deadline on now instead of the wall clock: the fake
// lease clock of tests of a running node, which cannot run in a
// testing/synctest bubble (see Expirer.clock). Set it before any lease is
// tracked: deadlines already tracked were measured on the clock before.
// After moving the clock, call Wake.
func (e *Expirer) SetClock(now func() time.Time) {
	e.clock.Store(&now)
}

// Term returns the leadership term whose deadlines these are: the one last
// given to Activate.
func (e *Expirer) Term() uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.term
}

// Now is the time deadlines are measured on: the wall clock unless a test
// set another (SetClock).
func (e *Expirer) Now() time.Time {
	if f := e.clock.Load(); f != nil {
		return (*f)()
	}
	return time.Now()
}

// Wake makes Run look at the deadlines now, as after the clock set with
// SetClock moved.
func (e *Expirer) Wake() { e.wake() }

func (e *Expirer) wake() {
	select {
	case e.earliestMoved <- struct{}{}:
	default:
	}
}

// Add tracks a newly granted lease with a full TTL from now. h is the
// state's record of it (lease.Event.Held), whose Deadline and Slot the
// Expirer owns from now on.
func (e *Expirer) Add(h *lease.Held, now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.tracks(h) {
		heap.Remove(&e.heap, h.Slot-1)
	}
	h.Deadline = int64(mono(now).add(h.TTL))
	if failpoint.Enabled(failpoint.ExpireHalfTTL) {
		h.Deadline = int64(mono(now).add(h.TTL / 2))
	}
	heap.Push(&e.heap, h)
	if h.Slot == 1 && monoTime(h.Deadline) < e.nextLook {
		e.wake()
	}
}

// tracks reports whether h is tracked. Its Slot alone does not tell: a
// record of a state that Reset replaced may still carry one.
func (e *Expirer) tracks(h *lease.Held) bool {
	return h != nil && h.Slot > 0 && h.Slot <= len(e.heap) && e.heap[h.Slot-1] == h
}

// Remove stops tracking the lease h records (the state's record of an
// ended lease, lease.Event.Held), if it is tracked.
func (e *Expirer) Remove(h *lease.Held) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.tracks(h) {
		heap.Remove(&e.heap, h.Slot-1)
	}
}

// Renew extends lease id to a full TTL from now, the moment the renewal
// was accepted in term, the leadership term that confirmed it; h is the
// state's record of the current lease of the key (nil if none). A
// deadline only moves forward: a renewal that lands after a later one
// changes nothing. A renewal of another term than the deadlines' is
// refused (ErrOtherTerm): the deadlines were reset since, and the node may
// have missed the lease's end in between. A lease whose deadline passed
// cannot be renewed, whether its expiry is being written or still waits
// for a free submission slot, and neither can one no longer tracked.
func (e *Expirer) Renew(h *lease.Held, id string, now time.Time, term uint64) (lease.Lease, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if failpoint.Enabled(failpoint.DeposedLeaderRenews) {
		term = e.term // the mutant: a renewal of any term counts in this one
	}
	if term != e.term {
		return lease.Lease{}, ErrOtherTerm
	}
	if !e.tracks(h) || h.ID != id || monoTime(h.Deadline) <= mono(now) {
		return lease.Lease{}, lease.ErrNotHeld
	}
	if failpoint.Enabled(failpoint.RenewNoExtend) {
		return h.Lease, nil
	}
	ttl := h.TTL
	if failpoint.Enabled(failpoint.ExpireHalfTTL) {
		ttl /= 2
	}
	if d := mono(now).add(ttl); d > monoTime(h.Deadline) {
		h.Deadline = int64(d)
		heap.Fix(&e.heap, h.Slot-1)
	}
	return h.Lease, nil
}

// Remaining returns how long the lease h records has left, 0 if it is not
// tracked (or h is nil).
func (e *Expirer) Remaining(h *lease.Held, now time.Time) time.Duration {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.remaining(h, now)
}

func (e *Expirer) remaining(h *lease.Held, now time.Time) time.Duration {
	if !e.tracks(h) {
		return 0
	}
	return max(time.Duration(monoTime(h.Deadline)-mono(now)), 0)
}

// RemainingOf returns Remaining for each record of held. It takes the
// lock once per chunk rather than once per lease, and lets go between
// chunks so that a long list never holds up the apply path for long.
func (e *Expirer) RemainingOf(held []*lease.Held, now time.Time) []time.Duration {
	out := make([]time.Duration, len(held))
	const chunk = 256
	for start := 0; start < len(held); start += chunk {
		e.mu.Lock()
		for i := start; i < min(start+chunk, len(held)); i++ {
			out[i] = e.remaining(held[i], now)
		}
		e.mu.Unlock()
	}
	return out
}

// Reset replaces the tracked set with held, the records of the current
// leases (as given to Add), each with a full TTL from now.
func (e *Expirer) Reset(held []*lease.Held, now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, h := range e.heap {
		h.Slot = 0
	}
	e.heap = make(deadlineHeap, 0, len(held))
	for _, h := range held {
		h.Deadline = int64(mono(now).add(h.TTL))
		e.heap = append(e.heap, h)
		h.Slot = len(e.heap)
	}
	heap.Init(&e.heap)
	e.wake()
}

// Activate starts acting on deadlines as the leader of term.
func (e *Expirer) Activate(term uint64) {
	e.mu.Lock()
	e.active, e.term = true, term
	e.mu.Unlock()
	e.wake()
}

// Deactivate stops acting on deadlines (leadership lost). Submissions
// already running finish on their own; raft refuses them if this node no
// longer leads, and the state machine ignores them in another term.
func (e *Expirer) Deactivate() {
	e.mu.Lock()
	e.active = false
	e.mu.Unlock()
	e.wake()
}

// Run expires leases whose deadlines pass while active, until done closes;
// then it waits for running submissions to end.
func (e *Expirer) Run(done <-chan struct{}) {
	defer e.submitting.Wait()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		wait := time.Hour
		e.mu.Lock()
		now := mono(e.Now())
		if e.active {
			for e.inflight < e.maxInflight && len(e.heap) > 0 && monoTime(e.heap[0].Deadline) <= now {
				due := make([]lease.Lease, 0, min(e.maxBatch, len(e.heap)))
				for len(due) < e.maxBatch && len(e.heap) > 0 && monoTime(e.heap[0].Deadline) <= now {
					h := heap.Pop(&e.heap).(*lease.Held)
					due = append(due, h.Lease)
				}
				e.inflight++
				e.submitting.Add(1)
				go e.submit(e.term, due)
			}
			// With every slot taken, the next one to free up kicks.
			if len(e.heap) > 0 && e.inflight < e.maxInflight {
				wait = time.Duration(monoTime(e.heap[0].Deadline) - now)
			}
		}
		// An empty heap keeps the timer of the last deadline seen (when
		// it is still ahead): the lease just released is usually followed
		// by one due later, which then needs no wake-up.
		if len(e.heap) == 0 && e.active && e.nextLook > now {
			wait = time.Duration(e.nextLook - now)
		}
		e.nextLook = now.add(wait)
		e.mu.Unlock()
		timer.Reset(wait)
		select {
		case <-done:
			return
		case <-e.earliestMoved:
		case <-timer.C:
		}
	}
}

func (e *Expirer) submit(term uint64, due []lease.Lease) {
	defer e.submitting.Done()
	e.expire(term, due)
	e.mu.Lock()
	e.inflight--
	e.mu.Unlock()
	e.wake()
}

// deadlineHeap orders the tracked records by deadline; each record's Slot
// is its index plus one, 0 once it leaves.
type deadlineHeap []*lease.Held

func (h deadlineHeap) Len() int           { return len(h) }
func (h deadlineHeap) Less(i, j int) bool { return h[i].Deadline < h[j].Deadline }
func (h deadlineHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].Slot = i + 1
	h[j].Slot = j + 1
}
func (h *deadlineHeap) Push(x any) {
	r := x.(*lease.Held)
	*h = append(*h, r)
	r.Slot = len(*h)
}
func (h *deadlineHeap) Pop() any {
	old := *h
	r := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	r.Slot = 0
	return r
}
