package server

import (
	"testing"

	"github.com/fencedio/fenced/lease"
)

// isHead reports whether wt may try to acquire key: first in line, with no
// handover to it in flight.
func isHead(q *waitQueues, key string, wt *waiter) bool {
	_, _, head := q.nextStep(key, wt)
	return head
}

func TestWaitQueues(t *testing.T) {
	want := &lease.Command{Op: lease.OpAcquire, Key: "k", Owner: "B"}
	signalled := func(w *waiter) bool {
		select {
		case <-w.ready:
			return true
		default:
			return false
		}
	}
	t.Run("fifo", func(t *testing.T) {
		q := newWaitQueues()
		a, b, c := q.enqueue("k", want), q.enqueue("k", want), q.enqueue("k", want)
		other := q.enqueue("other", want)
		if q.len() != 4 {
			t.Fatalf("len = %d, want 4", q.len())
		}
		if !isHead(q, "k", a) || isHead(q, "k", b) || isHead(q, "k", c) || !isHead(q, "other", other) || isHead(q, "other", a) {
			t.Fatal("wrong heads after enqueue")
		}
		// A freed key wakes its head only.
		q.freed("k")
		q.freed("k") // signals coalesce; freed never blocks
		if !signalled(a) || signalled(a) || signalled(b) || signalled(c) || signalled(other) {
			t.Fatal("freed did not wake exactly the head, once")
		}
		// The head leaving hands the turn to the next in line.
		q.leave("k", a)
		if !isHead(q, "k", b) || !signalled(b) || signalled(c) {
			t.Fatal("leave of the head did not make and wake the next waiter")
		}
		q.leave("k", b)
		if !isHead(q, "k", c) || !signalled(c) {
			t.Fatal("leave of the head did not make and wake the last waiter")
		}
		q.leave("k", c)
		if isHead(q, "k", c) || q.len() != 1 {
			t.Fatalf("after everyone left: len %d", q.len())
		}
		q.freed("k") // an empty queue is fine
		q.leave("other", other)
		if q.len() != 0 || len(q.queues) != 0 {
			t.Fatalf("queues not emptied: len %d, %d keys", q.len(), len(q.queues))
		}
	})
	t.Run("leave from the middle keeps order and wakes nobody", func(t *testing.T) {
		q := newWaitQueues()
		a, b, c := q.enqueue("k", want), q.enqueue("k", want), q.enqueue("k", want)
		q.leave("k", b)
		if signalled(a) || signalled(b) || signalled(c) || !isHead(q, "k", a) {
			t.Fatal("leave from the middle disturbed the queue")
		}
		q.leave("k", a)
		if !isHead(q, "k", c) || !signalled(c) {
			t.Fatal("c is not next after a")
		}
		// Leaving twice, or a queue one is not in, changes nothing.
		q.leave("k", a)
		q.leave("nope", c)
		if q.len() != 1 || !isHead(q, "k", c) {
			t.Fatalf("len %d after spurious leaves", q.len())
		}
	})
	t.Run("freedAll wakes every head", func(t *testing.T) {
		q := newWaitQueues()
		a1, a2 := q.enqueue("a", want), q.enqueue("a", want)
		b1 := q.enqueue("b", want)
		q.freedAll()
		if !signalled(a1) || signalled(a2) || !signalled(b1) {
			t.Fatal("freedAll did not wake exactly the heads")
		}
	})
}

func TestWaitQueueHandover(t *testing.T) {
	want := &lease.Command{Op: lease.OpAcquire, Key: "k", Owner: "B"}
	signalled := func(w *waiter) bool {
		select {
		case <-w.ready:
			return true
		default:
			return false
		}
	}
	t.Run("only the head is claimed, once", func(t *testing.T) {
		q := newWaitQueues()
		if q.claim("k") != nil {
			t.Fatal("claimed from an empty queue")
		}
		w := q.enqueue("k", want)
		next := q.enqueue("k", want)
		if q.claim("k") != w || q.claim("k") != nil {
			t.Fatal("want exactly one claim of the head")
		}
		if _, granted, head := q.nextStep("k", w); granted || head {
			t.Fatal("a claimed waiter was told to try on its own")
		}
		q.settle("k", w, lease.Lease{Key: "k", Token: 9}, true)
		l, granted, _ := q.nextStep("k", w)
		if !granted || l.Token != 9 || !signalled(w) {
			t.Fatalf("nextStep after a handover = %+v, %v, want the signalled grant", l, granted)
		}
		// The granted waiter left the line: the next one has its turn.
		if _, _, head := q.nextStep("k", next); !head || !signalled(next) || q.len() != 1 {
			t.Fatalf("after the grant: next is head %v, len %d", head, q.len())
		}
		// Abandoning after the grant returns it, and leaving is harmless.
		if l, granted, inFlight := q.abandon("k", w); !granted || inFlight || l.Token != 9 {
			t.Fatalf("abandon after the grant = %+v, %v, %v", l, granted, inFlight)
		}
		q.leave("k", w)
		if q.len() != 1 {
			t.Fatalf("len %d after the granted waiter left again", q.len())
		}
	})
	t.Run("the applied grant settles the claim before its writer does", func(t *testing.T) {
		q := newWaitQueues()
		w := q.enqueue("k", want)
		q.claim("k")
		q.freed("k") // the release in the handover's entry
		if signalled(w) {
			t.Fatal("a claimed waiter was woken by the release before its grant")
		}
		q.granted(lease.Lease{Key: "k", ID: "other", Token: 8}) // not this claim's
		if _, granted, _ := q.nextStep("k", w); granted || signalled(w) {
			t.Fatal("a grant under another lease ID settled the claim")
		}
		q.granted(lease.Lease{Key: "k", ID: w.nextID, Token: 9})
		if l, granted, _ := q.nextStep("k", w); !granted || l.Token != 9 || !signalled(w) || q.len() != 0 {
			t.Fatalf("nextStep after the applied grant = %+v, %v, len %d", l, granted, q.len())
		}
		// The writer's settle, whatever it learned, changes nothing.
		q.settle("k", w, lease.Lease{}, false)
		if l, granted, _ := q.nextStep("k", w); !granted || l.Token != 9 || signalled(w) {
			t.Fatalf("nextStep after the writer's settle = %+v, %v", l, granted)
		}
	})
	t.Run("a claimed waiter cannot abandon; it gets the outcome", func(t *testing.T) {
		q := newWaitQueues()
		w := q.enqueue("k", want)
		q.claim("k")
		if _, granted, inFlight := q.abandon("k", w); granted || !inFlight || q.len() != 1 {
			t.Fatal("a claimed waiter left the line")
		}
		q.settle("k", w, lease.Lease{}, false)
		if !signalled(w) {
			t.Fatal("a failed handover did not give the waiter its turn back")
		}
		if _, _, head := q.nextStep("k", w); !head {
			t.Fatal("a failed handover did not give the waiter its turn back")
		}
		if _, granted, inFlight := q.abandon("k", w); granted || inFlight || q.len() != 0 {
			t.Fatal("an unclaimed waiter could not abandon")
		}
	})
	t.Run("settle never blocks, whoever reads", func(t *testing.T) {
		q := newWaitQueues()
		w := q.enqueue("k", want)
		// Handovers are settled over and over while the waiter reads
		// nothing: each one must return at once.
		for i := range 3 {
			if q.claim("k") != w {
				t.Fatalf("round %d: no claim", i)
			}
			q.settle("k", w, lease.Lease{}, false)
		}
		q.claim("k")
		q.settle("k", w, lease.Lease{Token: 4}, true)
		if l, granted, _ := q.nextStep("k", w); !granted || l.Token != 4 {
			t.Fatalf("grant %+v, %v", l, granted)
		}
		if q.claim("k") != nil {
			t.Fatal("a waiter that was granted the key was claimed again")
		}
	})
}
