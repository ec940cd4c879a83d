package waiters

import (
	"fmt"
	"slices"
	"sync"

	"github.com/fencedio/fenced/lease"
)

// Queues holds acquisitions waiting for held keys, first come first
// served per key. Only the head of a queue tries to acquire; it is signalled
// when the key is freed and when it becomes the head.
//
// A release or expiry may also claim the head and hand the key over to it in
// the same log entry (see lease.Command.NextID). A claimed waiter stays in
// line until the handover is applied or has failed (Settle); then it holds
// the lease (grant), gets its turn back, or, when the outcome is unknown,
// leaves the line perhaps granted (MaybeGranted). A claimed waiter cannot
// leave: its lease may be granted at any moment, and a grant nobody
// receives would keep the key held, under an ID nobody knows, for a full
// TTL.
//
// Every outcome is recorded under mu and announced through ready, a
// coalescing signal, so nothing here ever blocks while holding mu.
type Queues struct {
	mu     sync.Mutex
	queues map[string][]*Waiter
	count  int
	// byHolder counts the waiters of each quota holder (the node's
	// quota.go), and byAddr those of each client address and network
	// (a network's name has a '/', an address none).
	byHolder, byAddr map[string]int
	// newID returns a fresh lease ID, for the lease a handover grants.
	newID func() string
}

// Waiter is one acquisition waiting in line for a key.
type Waiter struct {
	ready chan struct{}
	// want is what the waiter asks for, and what a handover grants it.
	want *lease.Command
	// holder is whose waiter quota it counts against, if it has a want,
	// and addr and network the client address and network it counts
	// against ("" for none).
	holder, addr, network string

	// Guarded by Queues.mu.
	claimed bool         // a handover to this waiter is being applied
	nextID  string       // the lease ID the claiming handover grants
	grant   *lease.Lease // the lease a handover gave this waiter
	offered []string     // the lease IDs of every handover that claimed it
	maybe   bool         // a handover to it failed with its outcome unknown
}

// New returns empty queues. newID returns a fresh lease ID: the one a
// handover to a claimed waiter grants (Claim).
func New(newID func() string) *Queues {
	return &Queues{queues: make(map[string][]*Waiter), byHolder: make(map[string]int), byAddr: make(map[string]int),
		newID: newID}
}

// Ready is signalled when the waiter should look at its NextStep again:
// the key may be free, it became the head, or a handover to it was
// decided. Signals coalesce: one may stand for several.
func (w *Waiter) Ready() <-chan struct{} { return w.ready }

// Want is the acquire command the waiter asks for (ID unset), and what a
// handover grants it.
func (w *Waiter) Want() *lease.Command { return w.want }

// NextID is the lease ID the handover that claimed the waiter grants it,
// as set by the Claim that returned it.
func (w *Waiter) NextID() string { return w.nextID }

func (w *Waiter) signal() {
	select {
	case w.ready <- struct{}{}:
	default:
	}
}

// Limits are whom a waiter counts against and the limits that apply
// (0: none).
type Limits struct {
	Holder, Of string // the quota holder: the owner or the principal (Of)
	Addr       string // the client's address; "" is not counted
	Network    string // the client's network; "" or Addr is not counted
	PerHolder  int    // Config.MaxWaitersPerOwner
	PerAddr    int    // Config.MaxWaitersPerClient
	PerNetwork int    // Config.MaxWaitersPerClient times Config.NetworkShare
	Total      int    // Config.MaxWaiters
}

// LimitError refuses a waiter beyond one of its Limits, and names it.
type LimitError struct {
	// Limit is the flag that sets the limit reached: max-waiters-per-owner
	// (Limits.PerHolder), max-waiters-per-client (Limits.PerAddr),
	// max-waiters-per-network (Limits.PerNetwork) or max-waiters
	// (Limits.Total).
	Limit string
	// Of and Holder are whose limit it is: Limits.Of and Limits.Holder,
	// "client address" and Limits.Addr, "client network" and
	// Limits.Network, or empty for max-waiters.
	Of, Holder string
	Used, Max  int // the waiters counted against it, and its value
}

func (e *LimitError) Error() string {
	if e.Limit == "max-waiters" {
		return fmt.Sprintf("%d acquisitions wait (limit %s %d)", e.Used, e.Limit, e.Max)
	}
	return fmt.Sprintf("%s %q has %d waiting acquisitions (limit %s %d)", e.Of, e.Holder, e.Used, e.Limit, e.Max)
}

// Enqueue adds a waiter at the tail of key's queue: want is its acquire
// command (ID unset), which a handover may grant it. The waiter is counted
// against lim's holder and address, and refused with a *LimitError when
// either already has its limit of waiters, or when the queues hold
// lim.Total.
func (q *Queues) Enqueue(key string, want *lease.Command, lim Limits) (*Waiter, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if want != nil {
		if n := q.byHolder[lim.Holder]; lim.PerHolder > 0 && n >= lim.PerHolder {
			return nil, &LimitError{Limit: "max-waiters-per-owner", Of: lim.Of, Holder: lim.Holder, Used: n, Max: lim.PerHolder}
		}
		if n := q.byAddr[lim.Addr]; lim.Addr != "" && lim.PerAddr > 0 && n >= lim.PerAddr {
			return nil, &LimitError{Limit: "max-waiters-per-client", Of: "client address", Holder: lim.Addr, Used: n, Max: lim.PerAddr}
		}
		if lim.Network == lim.Addr {
			lim.Network = "" // not an IP address: the address is all there is
		}
		if lim.Total > 0 && q.count >= lim.Total {
			return nil, &LimitError{Limit: "max-waiters", Used: q.count, Max: lim.Total}
		}
		if n := q.byAddr[lim.Network]; lim.Network != "" && lim.PerNetwork > 0 && n >= lim.PerNetwork {
			return nil, &LimitError{Limit: "max-waiters-per-network", Of: "client network", Holder: lim.Network, Used: n, Max: lim.PerNetwork}
		}
		q.byHolder[lim.Holder]++
		for _, k := range [...]string{lim.Addr, lim.Network} {
			if k != "" {
				q.byAddr[k]++
			}
		}
	}
	wt := &Waiter{ready: make(chan struct{}, 1), want: want, holder: lim.Holder, addr: lim.Addr, network: lim.Network}
	q.queues[key] = append(q.queues[key], wt)
	q.count++
	return wt, nil
}

// Claim marks the head of key's queue as the receiver of a handover and
// returns it, or nil if there is no head that can take one now. The
// handover grants the waiter's Want under the lease ID NextID. Every Claim
// must be followed by exactly one Settle.
func (q *Queues) Claim(key string) *Waiter {
	q.mu.Lock()
	defer q.mu.Unlock()
	ws := q.queues[key]
	if len(ws) == 0 || ws[0].claimed || ws[0].grant != nil {
		return nil
	}
	ws[0].claimed = true
	ws[0].nextID = q.newID()
	ws[0].offered = append(ws[0].offered, ws[0].nextID)
	return ws[0]
}

// MaybeGranted reports whether a handover to wt failed with its outcome
// unknown: wt may hold the key under one of the Offered IDs, and has left
// the line (Settle). Its caller must answer that outcome, never that it
// was not granted, and must not try for another grant.
func (q *Queues) MaybeGranted(wt *Waiter) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return wt.maybe
}

// Offered returns the lease IDs of every handover that claimed wt: each
// may have granted it the key, even one settled as failed (a handover
// written when the leader lost its leadership may still be committed).
func (q *Queues) Offered(wt *Waiter) []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	return slices.Clone(wt.offered)
}

// Settle ends a claim of key's head: with ok the waiter is handed l and
// leaves the line (the next waiter gets its turn), otherwise it gets its
// turn back. unknown says the handover failed with its outcome unknown: it
// may still be committed, so the waiter leaves the line too, granted
// perhaps (MaybeGranted), and is never offered another grant, which would
// make one acquisition two grants. Either way the waiter is signalled;
// Settle never blocks. A waiter already handed its lease stays as it is.
func (q *Queues) Settle(key string, wt *Waiter, l lease.Lease, ok, unknown bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if wt.grant != nil {
		return
	}
	wt.claimed = false
	switch {
	case ok:
		wt.grant = &l
		q.remove(key, wt)
	case unknown:
		wt.maybe = true
		q.remove(key, wt)
	}
	wt.signal()
}

// Granted hands l to the waiter whose claim it settles, if any, as soon as
// the grant is applied: the waiter answers without waiting for whoever
// wrote the handover to learn its outcome (that one's Settle then changes
// nothing). A claimed waiter stays the head of its line until settled.
func (q *Queues) Granted(l lease.Lease) {
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

// NextStep reports what wt should do next: take the lease a handover gave it
// (granted), try to acquire (head: first in line and no handover to it in
// flight), or wait for a signal.
func (q *Queues) NextStep(key string, wt *Waiter) (l lease.Lease, granted, head bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if wt.grant != nil {
		return *wt.grant, true, false
	}
	ws := q.queues[key]
	return lease.Lease{}, false, !wt.claimed && len(ws) > 0 && ws[0] == wt
}

// Abandon removes wt from the line unless a handover reached it: granted
// says it was handed l and must return it; inFlight says a handover to it
// is being applied, and the caller must wait for wt's signal (Ready) and
// call Abandon again.
func (q *Queues) Abandon(key string, wt *Waiter) (l lease.Lease, granted, inFlight bool) {
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

// Leave removes wt; if it was the head, the next waiter gets a turn.
func (q *Queues) Leave(key string, wt *Waiter) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.remove(key, wt)
}

func (q *Queues) remove(key string, wt *Waiter) {
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
			for _, k := range [...]string{wt.addr, wt.network} {
				if k != "" {
					if q.byAddr[k]--; q.byAddr[k] <= 0 {
						delete(q.byAddr, k)
					}
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

// Freed tells the head waiter of key that the key may be free, unless a
// handover to it is in flight: settling that signals it.
func (q *Queues) Freed(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if ws := q.queues[key]; len(ws) > 0 && !ws[0].claimed {
		ws[0].signal()
	}
}

// FreedAll wakes every head, after the state was replaced wholesale.
func (q *Queues) FreedAll() {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, ws := range q.queues {
		ws[0].signal()
	}
}

// Len returns the number of waiting acquisitions.
func (q *Queues) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.count
}

// Waiting returns the number of acquisitions waiting for key.
func (q *Queues) Waiting(key string) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.queues[key])
}

// OfHolder returns the number of waiters counted against holder's limit
// (Limits.Holder).
func (q *Queues) OfHolder(holder string) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.byHolder[holder]
}
