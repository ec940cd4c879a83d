package server

import (
	"sync"

	"github.com/fencedio/fenced/lease"
)

// waitQueues holds acquisitions waiting for held keys, first come first
// served per key. Only the head of a queue tries to acquire; it is signalled
// when the key is freed and when it becomes the head.
//
// A release or expiry may also claim the head and hand the key over to it in
// the same log entry (see lease.Command.NextID). A claimed waiter stays in
// line until the handover is applied or has failed; then it gets the lease
// (granted) or its turn back (ready).
type waitQueues struct {
	mu     sync.Mutex
	queues map[string][]*waiter
	count  int
}

type waiter struct {
	ready chan struct{}
	// want is what the waiter asks for; nil means it cannot be handed a
	// key (only tries on its own).
	want *lease.Command
	// granted receives the lease of a handover made to this waiter.
	granted chan lease.Lease
	claimed bool // a handover to this waiter is being applied
}

func newWaitQueues() *waitQueues { return &waitQueues{queues: make(map[string][]*waiter)} }

func (w *waiter) signal() {
	select {
	case w.ready <- struct{}{}:
	default:
	}
}

// enqueue adds a waiter at the tail of key's queue.
func (q *waitQueues) enqueue(key string) *waiter { return q.enqueueWanting(key, nil) }

// enqueueWanting adds a waiter that may be handed the key: want is its
// acquire command (ID unset).
func (q *waitQueues) enqueueWanting(key string, want *lease.Command) *waiter {
	q.mu.Lock()
	defer q.mu.Unlock()
	wt := &waiter{ready: make(chan struct{}, 1), want: want, granted: make(chan lease.Lease, 1)}
	q.queues[key] = append(q.queues[key], wt)
	q.count++
	return wt
}

// claim marks the head of key's queue as the receiver of a handover and
// returns it, or nil if there is no head that can take one.
func (q *waitQueues) claim(key string) *waiter {
	q.mu.Lock()
	defer q.mu.Unlock()
	ws := q.queues[key]
	if len(ws) == 0 || ws[0].want == nil || ws[0].claimed {
		return nil
	}
	ws[0].claimed = true
	return ws[0]
}

// settle ends a claim: with ok the waiter is handed l, otherwise it gets
// its turn back.
func (q *waitQueues) settle(wt *waiter, l lease.Lease, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	wt.claimed = false
	if ok {
		wt.granted <- l
		return
	}
	wt.signal()
}

// abandon removes wt unless a handover to it is in flight; it reports
// whether one is, in which case the caller must wait for it to settle.
func (q *waitQueues) abandon(key string, wt *waiter) (inFlight bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if wt.claimed {
		return true
	}
	q.remove(key, wt)
	return false
}

// isHead reports whether wt is first in key's queue.
func (q *waitQueues) isHead(key string, wt *waiter) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	ws := q.queues[key]
	return len(ws) > 0 && ws[0] == wt
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

// freed tells the head waiter of key that the key may be free.
func (q *waitQueues) freed(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if ws := q.queues[key]; len(ws) > 0 {
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
