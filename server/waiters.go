package server

import "sync"

// waitQueues holds acquisitions waiting for held keys, first come first
// served per key. Only the head of a queue tries to acquire; it is signalled
// when the key is freed and when it becomes the head.
type waitQueues struct {
	mu     sync.Mutex
	queues map[string][]*waiter
	count  int
}

type waiter struct{ ready chan struct{} }

func newWaitQueues() *waitQueues { return &waitQueues{queues: make(map[string][]*waiter)} }

func (w *waiter) signal() {
	select {
	case w.ready <- struct{}{}:
	default:
	}
}

// enqueue adds a waiter at the tail of key's queue.
func (q *waitQueues) enqueue(key string) *waiter {
	q.mu.Lock()
	defer q.mu.Unlock()
	wt := &waiter{ready: make(chan struct{}, 1)}
	q.queues[key] = append(q.queues[key], wt)
	q.count++
	return wt
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
