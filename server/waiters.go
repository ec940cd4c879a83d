package server

import (
	"fmt"
	"sync"

	"github.com/fencedio/fenced/lease"
	"github.com/fencedio/fenced/server/internal/apierr"
)

// waitQueues holds acquisitions waiting for held keys, first come first
// served per key. Only the head of a queue tries to acquire; it is signalled
// when the key is freed and when it becomes the head.
//
// A release or expiry may also claim the head and hand the key over to it in
// the same log entry (see lease.Command.NextID). A claimed waiter stays in
// line until the handover is applied or has failed (settle); then it holds
// the lease (grant) or gets its turn back. A claimed waiter cannot leave: its
// lease may be granted at any moment, and a grant nobody receives would keep
// the key held, under an ID nobody knows, for a full TTL.
//
// Every outcome is recorded under mu and announced through ready, a
// coalescing signal, so nothing here ever blocks while holding mu.
type waitQueues struct {
	mu     sync.Mutex
	queues map[string][]*waiter
	count  int
	// byHolder counts the waiters of each quota holder (quota.go), and
	// byAddr those of each client address.
	byHolder, byAddr map[string]int
}

type waiter struct {
	ready chan struct{}
	// want is what the waiter asks for, and what a handover grants it.
	want *lease.Command
	// holder is whose waiter quota it counts against, if it has a want,
	// and addr the client address it counts against ("" for none).
	holder, addr string

	// Guarded by waitQueues.mu.
	claimed bool         // a handover to this waiter is being applied
	nextID  string       // the lease ID the claiming handover grants
	grant   *lease.Lease // the lease a handover gave this waiter
}

func newWaitQueues() *waitQueues {
	return &waitQueues{queues: make(map[string][]*waiter), byHolder: make(map[string]int), byAddr: make(map[string]int)}
}

func (w *waiter) signal() {
	select {
	case w.ready <- struct{}{}:
	default:
	}
}

// enqueue adds a waiter at the tail of key's queue: want is its acquire
// command (ID unset), which a handover may grant it.
func (q *waitQueues) enqueue(key string, want *lease.Command) *waiter {
	var owner string
	if want != nil {
		owner = want.Owner
	}
	wt, _ := q.enqueueLimited(key, want, waitLimits{holder: owner, of: "owner"})
	return wt
}

// waitLimits are whom a waiter counts against and the limits that apply
// (0: none).
type waitLimits struct {
	holder, of string // the quota holder: the owner or the principal (of)
	addr       string // the client's address; "" is not counted
	perHolder  int    // Config.MaxWaitersPerOwner
	perAddr    int    // Config.MaxWaitersPerClient
	total      int    // Config.MaxWaiters
}

// enqueueLimited is enqueue counted against lim's holder and address,
// refused with an apierr.QuotaError when either already has its limit of waiters,
// or with apierr.ErrTooManyWaiters when the queues hold lim.total.
func (q *waitQueues) enqueueLimited(key string, want *lease.Command, lim waitLimits) (*waiter, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if want != nil {
		if n := q.byHolder[lim.holder]; lim.perHolder > 0 && n >= lim.perHolder {
			return nil, &apierr.QuotaError{Quota: "max-waiters-per-owner", Of: lim.of, Owner: lim.holder, Used: n, Limit: lim.perHolder}
		}
		if n := q.byAddr[lim.addr]; lim.addr != "" && lim.perAddr > 0 && n >= lim.perAddr {
			return nil, &apierr.QuotaError{Quota: "max-waiters-per-client", Of: "client address", Owner: lim.addr, Used: n, Limit: lim.perAddr}
		}
		if lim.total > 0 && q.count >= lim.total {
			return nil, fmt.Errorf("%w: %d acquisitions wait on this server (limit max-waiters %d)", apierr.ErrTooManyWaiters, q.count, lim.total)
		}
		q.byHolder[lim.holder]++
		if lim.addr != "" {
			q.byAddr[lim.addr]++
		}
	}
	wt := &waiter{ready: make(chan struct{}, 1), want: want, holder: lim.holder, addr: lim.addr}
	q.queues[key] = append(q.queues[key], wt)
	q.count++
	return wt, nil
}

// claim marks the head of key's queue as the receiver of a handover and
// returns it, or nil if there is no head that can take one now. The
// handover grants the waiter's want under the lease ID nextID. Every claim
// must be followed by exactly one settle.
func (q *waitQueues) claim(key string) *waiter {
	q.mu.Lock()
	defer q.mu.Unlock()
	ws := q.queues[key]
	if len(ws) == 0 || ws[0].claimed || ws[0].grant != nil {
		return nil
	}
	ws[0].claimed = true
	ws[0].nextID = newLeaseID()
	return ws[0]
}

// settle ends a claim of key's head: with ok the waiter is handed l and
// leaves the line (the next waiter gets its turn), otherwise it gets its
// turn back. Either way the waiter is signalled; settle never blocks. A
// waiter already handed its lease stays as it is.
func (q *waitQueues) settle(key string, wt *waiter, l lease.Lease, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if wt.grant != nil {
		return
	}
	wt.claimed = false
	if ok {
		wt.grant = &l
		q.remove(key, wt)
	}
	wt.signal()
}

// granted hands l to the waiter whose claim it settles, if any, as soon as
// the grant is applied: the waiter answers without waiting for whoever
// wrote the handover to learn its outcome (that one's settle then changes
// nothing). A claimed waiter stays the head of its line until settled.
func (q *waitQueues) granted(l lease.Lease) {
	q.mu.Lock()
	defer q.mu.Unlock()
	ws := q.queues[l.Key]
	if len(ws) == 0 || !ws[0].claimed || ws[0].nextID != l.ID {
		return
	}
	wt := ws[0]
	wt.claimed = false
	wt.grant = &l
	q.remove(l.Key, wt)
	wt.signal()
}

// nextStep reports what wt should do next: take the lease a handover gave it
// (granted), try to acquire (head: first in line and no handover to it in
// flight), or wait for a signal.
func (q *waitQueues) nextStep(key string, wt *waiter) (l lease.Lease, granted, head bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if wt.grant != nil {
		return *wt.grant, true, false
	}
	ws := q.queues[key]
	return lease.Lease{}, false, !wt.claimed && len(ws) > 0 && ws[0] == wt
}

// abandon removes wt from the line unless a handover reached it: granted
// says it was handed l and must return it; inFlight says a handover to it
// is being applied, and the caller must wait for wt's signal and call
// abandon again.
func (q *waitQueues) abandon(key string, wt *waiter) (l lease.Lease, granted, inFlight bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	switch {
	case wt.grant != nil:
		return *wt.grant, true, false
	case wt.claimed:
		return lease.Lease{}, false, true
	}
	q.remove(key, wt)
	return lease.Lease{}, false, false
}

// leave removes wt; if it was the head, the next waiter gets a turn.
func (q *waitQueues) leave(key string, wt *waiter) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.remove(key, wt)
}

func (q *waitQueues) remove(key string, wt *waiter) {
	ws := q.queues[key]
	for i, w := range ws {
		if w != wt {
			continue
		}
		ws = append(ws[:i], ws[i+1:]...)
		q.count--
		if wt.want != nil {
			if q.byHolder[wt.holder]--; q.byHolder[wt.holder] <= 0 {
				delete(q.byHolder, wt.holder)
			}
			if wt.addr != "" {
				if q.byAddr[wt.addr]--; q.byAddr[wt.addr] <= 0 {
					delete(q.byAddr, wt.addr)
				}
			}
		}
		if len(ws) == 0 {
			delete(q.queues, key)
			return
		}
		q.queues[key] = ws
		if i == 0 {
			ws[0].signal()
		}
		return
	}
}

// freed tells the head waiter of key that the key may be free, unless a
// handover to it is in flight: settling that signals it.
func (q *waitQueues) freed(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if ws := q.queues[key]; len(ws) > 0 && !ws[0].claimed {
		ws[0].signal()
	}
}

// freedAll wakes every head, after the state was replaced wholesale.
func (q *waitQueues) freedAll() {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, ws := range q.queues {
		ws[0].signal()
	}
}

// len returns the number of waiting acquisitions.
func (q *waitQueues) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.count
}
