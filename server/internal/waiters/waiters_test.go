package waiters

import (
	"errors"
	"fmt"
	"testing"

	"github.com/fencedio/fenced/lease"
)

// isHead reports whether wt may try to acquire key: first in line, with no
// handover to it in flight.
func isHead(q *Queues, key string, wt *Waiter) bool {
	_, _, head := q.NextStep(key, wt)
	return head
}

// newTestQueues returns queues whose handovers grant the lease IDs id1,
// id2, ...
func newTestQueues() *Queues {
	n := 0
	return New(func() string { n++; return fmt.Sprintf("id%d", n) })
}

// enqueue is Enqueue without limits, counted against want's owner.
func (q *Queues) enqueue(key string, want *lease.Command) *Waiter {
	var owner string
	if want != nil {
		owner = want.Owner
	}
	wt, _ := q.Enqueue(key, want, Limits{Holder: owner, Of: "owner"})
	return wt
}

func TestWaitQueues(t *testing.T) {
	want := &lease.Command{Op: lease.OpAcquire, Key: "k", Owner: "B"}
	signalled := func(w *Waiter) bool {
		select {
		case <-w.ready:
			return true
		default:
			return false
		}
	}
	t.Run("fifo", func(t *testing.T) {
		q := newTestQueues()
		a, b, c := q.enqueue("k", want), q.enqueue("k", want), q.enqueue("k", want)
		other := q.enqueue("other", want)
		if q.Len() != 4 {
			t.Fatalf("len = %d, want 4", q.Len())
		}
		if !isHead(q, "k", a) || isHead(q, "k", b) || isHead(q, "k", c) || !isHead(q, "other", other) || isHead(q, "other", a) {
			t.Fatal("wrong heads after enqueue")
		}
		// A freed key wakes its head only.
		q.Freed("k")
		q.Freed("k") // signals coalesce; freed never blocks
		if !signalled(a) || signalled(a) || signalled(b) || signalled(c) || signalled(other) {
			t.Fatal("freed did not wake exactly the head, once")
		}
		// The head leaving hands the turn to the next in line.
		q.Leave("k", a)
		if !isHead(q, "k", b) || !signalled(b) || signalled(c) {
			t.Fatal("leave of the head did not make and wake the next waiter")
		}
		q.Leave("k", b)
		if !isHead(q, "k", c) || !signalled(c) {
			t.Fatal("leave of the head did not make and wake the last waiter")
		}
		q.Leave("k", c)
		if isHead(q, "k", c) || q.Len() != 1 {
			t.Fatalf("after everyone left: len %d", q.Len())
		}
		q.Freed("k") // an empty queue is fine
		q.Leave("other", other)
		if q.Len() != 0 || len(q.queues) != 0 {
			t.Fatalf("queues not emptied: len %d, %d keys", q.Len(), len(q.queues))
		}
	})
	t.Run("leave from the middle keeps order and wakes nobody", func(t *testing.T) {
		q := newTestQueues()
		a, b, c := q.enqueue("k", want), q.enqueue("k", want), q.enqueue("k", want)
		q.Leave("k", b)
		if signalled(a) || signalled(b) || signalled(c) || !isHead(q, "k", a) {
			t.Fatal("leave from the middle disturbed the queue")
		}
		q.Leave("k", a)
		if !isHead(q, "k", c) || !signalled(c) {
			t.Fatal("c is not next after a")
		}
		// Leaving twice, or a queue one is not in, changes nothing.
		q.Leave("k", a)
		q.Leave("nope", c)
		if q.Len() != 1 || !isHead(q, "k", c) {
			t.Fatalf("len %d after spurious leaves", q.Len())
		}
	})
	t.Run("freedAll wakes every head", func(t *testing.T) {
		q := newTestQueues()
		a1, a2 := q.enqueue("a", want), q.enqueue("a", want)
		b1 := q.enqueue("b", want)
		q.FreedAll()
		if !signalled(a1) || signalled(a2) || !signalled(b1) {
			t.Fatal("freedAll did not wake exactly the heads")
		}
	})
}

func TestWaitQueueHandover(t *testing.T) {
	want := &lease.Command{Op: lease.OpAcquire, Key: "k", Owner: "B"}
	signalled := func(w *Waiter) bool {
		select {
		case <-w.ready:
			return true
		default:
			return false
		}
	}
	t.Run("only the head is claimed, once", func(t *testing.T) {
		q := newTestQueues()
		if q.Claim("k") != nil {
			t.Fatal("claimed from an empty queue")
		}
		w := q.enqueue("k", want)
		next := q.enqueue("k", want)
		if q.Claim("k") != w || q.Claim("k") != nil {
			t.Fatal("want exactly one claim of the head")
		}
		if _, granted, head := q.NextStep("k", w); granted || head {
			t.Fatal("a claimed waiter was told to try on its own")
		}
		q.Settle("k", w, lease.Lease{Key: "k", Token: 9}, true, false)
		l, granted, _ := q.NextStep("k", w)
		if !granted || l.Token != 9 || !signalled(w) {
			t.Fatalf("nextStep after a handover = %+v, %v, want the signalled grant", l, granted)
		}
		// The granted waiter left the line: the next one has its turn.
		if _, _, head := q.NextStep("k", next); !head || !signalled(next) || q.Len() != 1 {
			t.Fatalf("after the grant: next is head %v, len %d", head, q.Len())
		}
		// Abandoning after the grant returns it, and leaving is harmless.
		if l, granted, inFlight := q.Abandon("k", w); !granted || inFlight || l.Token != 9 {
			t.Fatalf("abandon after the grant = %+v, %v, %v", l, granted, inFlight)
		}
		q.Leave("k", w)
		if q.Len() != 1 {
			t.Fatalf("len %d after the granted waiter left again", q.Len())
		}
	})
	t.Run("the applied grant settles the claim before its writer does", func(t *testing.T) {
		q := newTestQueues()
		w := q.enqueue("k", want)
		q.Claim("k")
		q.Freed("k") // the release in the handover's entry
		if signalled(w) {
			t.Fatal("a claimed waiter was woken by the release before its grant")
		}
		q.Granted(lease.Lease{Key: "k", ID: "other", Token: 8}) // not this claim's
		if _, granted, _ := q.NextStep("k", w); granted || signalled(w) {
			t.Fatal("a grant under another lease ID settled the claim")
		}
		q.Granted(lease.Lease{Key: "k", ID: w.nextID, Token: 9})
		if l, granted, _ := q.NextStep("k", w); !granted || l.Token != 9 || !signalled(w) || q.Len() != 0 {
			t.Fatalf("nextStep after the applied grant = %+v, %v, len %d", l, granted, q.Len())
		}
		// The writer's settle, whatever it learned, changes nothing.
		q.Settle("k", w, lease.Lease{}, false, false)
		if l, granted, _ := q.NextStep("k", w); !granted || l.Token != 9 || signalled(w) {
			t.Fatalf("nextStep after the writer's settle = %+v, %v", l, granted)
		}
	})
	t.Run("a claimed waiter cannot abandon; it gets the outcome", func(t *testing.T) {
		q := newTestQueues()
		w := q.enqueue("k", want)
		q.Claim("k")
		if _, granted, inFlight := q.Abandon("k", w); granted || !inFlight || q.Len() != 1 {
			t.Fatal("a claimed waiter left the line")
		}
		q.Settle("k", w, lease.Lease{}, false, false)
		if !signalled(w) {
			t.Fatal("a failed handover did not give the waiter its turn back")
		}
		if _, _, head := q.NextStep("k", w); !head {
			t.Fatal("a failed handover did not give the waiter its turn back")
		}
		if _, granted, inFlight := q.Abandon("k", w); granted || inFlight || q.Len() != 0 {
			t.Fatal("an unclaimed waiter could not abandon")
		}
	})
	t.Run("settle never blocks, whoever reads", func(t *testing.T) {
		q := newTestQueues()
		w := q.enqueue("k", want)
		// Handovers are settled over and over while the waiter reads
		// nothing: each one must return at once.
		for i := range 3 {
			if q.Claim("k") != w {
				t.Fatalf("round %d: no claim", i)
			}
			q.Settle("k", w, lease.Lease{}, false, false)
		}
		q.Claim("k")
		q.Settle("k", w, lease.Lease{Token: 4}, true, false)
		if l, granted, _ := q.NextStep("k", w); !granted || l.Token != 4 {
			t.Fatalf("grant %+v, %v", l, granted)
		}
		if q.Claim("k") != nil {
			t.Fatal("a waiter that was granted the key was claimed again")
		}
	})
}

// Enqueue counts a waiter against its holder and address, refuses one
// beyond a limit with a LimitError naming it, and counts a waiter no longer
// once it leaves or is handed its lease.
func TestWaitLimits(t *testing.T) {
	want := &lease.Command{Op: lease.OpAcquire, Key: "k", Owner: "B"}
	lim := Limits{Holder: "bob", Of: "principal", Addr: "10.0.0.1", PerHolder: 2, PerAddr: 3, Total: 4}
	refused := func(err error, limit, of, holder string, used, max int) {
		t.Helper()
		var le *LimitError
		if !errors.As(err, &le) {
			t.Fatalf("Enqueue: %v, want a LimitError of %s", err, limit)
		}
		if got := (LimitError{Limit: limit, Of: of, Holder: holder, Used: used, Max: max}); *le != got {
			t.Fatalf("Enqueue refused with %+v, want %+v", *le, got)
		}
	}
	q := newTestQueues()
	a, err := q.Enqueue("k", want, lim)
	if err != nil {
		t.Fatal(err)
	}
	b, err := q.Enqueue("k", want, lim)
	if err != nil {
		t.Fatal(err)
	}
	if n := q.OfHolder("bob"); n != 2 {
		t.Fatalf("bob has %d waiters, want 2", n)
	}
	_, err = q.Enqueue("other", want, lim)
	refused(err, "max-waiters-per-owner", "principal", "bob", 2, 2)
	_, err = q.Enqueue("k", want, Limits{Holder: "carol", Of: "owner", Addr: "10.0.0.1", PerAddr: 2})
	refused(err, "max-waiters-per-client", "client address", "10.0.0.1", 2, 2)
	if _, err := q.Enqueue("k", want, Limits{Holder: "carol", Of: "owner", Addr: "10.0.0.2", Total: 3}); err != nil {
		t.Fatal(err)
	}
	_, err = q.Enqueue("k", want, Limits{Holder: "dave", Of: "owner", Total: 3})
	refused(err, "max-waiters", "", "", 3, 3)
	if q.Len() != 3 || q.Waiting("k") != 3 || q.Waiting("other") != 0 {
		t.Fatalf("after the refusals: len %d, %d waiting for k", q.Len(), q.Waiting("k"))
	}
	// Leaving, or being handed the lease, frees the holder's places.
	q.Leave("k", a)
	if q.Claim("k") != b {
		t.Fatal("b is not the head after a left")
	}
	q.Settle("k", b, lease.Lease{Key: "k", Token: 3}, true, false)
	if n := q.OfHolder("bob"); n != 0 {
		t.Fatalf("bob still counted as %d waiters", n)
	}
	if _, err := q.Enqueue("k", want, lim); err != nil {
		t.Fatalf("bob's places were not given back: %v", err)
	}
}

// A network's waiters are capped on top of its addresses': an address
// with room is refused once its network is full, and a waiter that leaves
// gives its network's place back.
func TestWaitLimitsPerNetwork(t *testing.T) {
	want := &lease.Command{Op: lease.OpAcquire, Key: "k", Owner: "B"}
	lim := func(addr string) Limits {
		return Limits{Holder: addr, Of: "owner", Addr: addr, Network: "10.0.0.0/24", PerAddr: 2, PerNetwork: 3}
	}
	q := newTestQueues()
	var first *Waiter
	for i, addr := range []string{"10.0.0.1", "10.0.0.1", "10.0.0.2"} {
		w, err := q.Enqueue("k", want, lim(addr))
		if err != nil {
			t.Fatalf("waiter %d: %v", i, err)
		}
		if first == nil {
			first = w
		}
	}
	_, err := q.Enqueue("k", want, lim("10.0.0.3"))
	var le *LimitError
	wantErr := LimitError{Limit: "max-waiters-per-network", Of: "client network", Holder: "10.0.0.0/24", Used: 3, Max: 3}
	if !errors.As(err, &le) || *le != wantErr {
		t.Fatalf("a fourth waiter from the network: %v, want %+v", err, wantErr)
	}
	if _, err := q.Enqueue("k", want, Limits{Holder: "x", Addr: "10.0.1.1", Network: "10.0.1.0/24", PerAddr: 2, PerNetwork: 3}); err != nil {
		t.Fatalf("a waiter of another network: %v", err)
	}
	q.Leave("k", first)
	if _, err := q.Enqueue("k", want, lim("10.0.0.3")); err != nil {
		t.Fatalf("a waiter once its network has room: %v", err)
	}
}

// Every handover that claimed a waiter may have granted it the key, also
// one settled as failed: Offered names them all.
func TestOfferedNamesEveryClaim(t *testing.T) {
	q := newTestQueues()
	wt := q.enqueue("k", &lease.Command{Op: lease.OpAcquire, Key: "k", Owner: "B"})
	if got := q.Offered(wt); len(got) != 0 {
		t.Fatalf("offered before any claim: %v", got)
	}
	q.Claim("k")
	q.Settle("k", wt, lease.Lease{}, false, false) // the handover failed: its turn back
	q.Claim("k")
	if got := q.Offered(wt); len(got) != 2 || got[0] != "id1" || got[1] != "id2" {
		t.Fatalf("offered %v, want [id1 id2]", got)
	}
}

// A handover that failed with its outcome unknown leaves the waiter maybe
// granted, whatever comes after, short of a grant; one that was never
// written does not.
func TestMaybeGranted(t *testing.T) {
	q := newTestQueues()
	wt := q.enqueue("k", &lease.Command{Op: lease.OpAcquire, Key: "k", Owner: "B"})
	q.Claim("k")
	q.Settle("k", wt, lease.Lease{}, false, false) // never written
	if q.MaybeGranted(wt) {
		t.Fatal("maybe granted after a handover that was never written")
	}
	next := q.enqueue("k", &lease.Command{Op: lease.OpAcquire, Key: "k", Owner: "C"})
	q.Claim("k")
	q.Settle("k", wt, lease.Lease{}, false, true) // leadership lost while it was written
	if !q.MaybeGranted(wt) {
		t.Fatal("not maybe granted after a handover whose outcome is unknown")
	}
	if _, granted, head := q.NextStep("k", wt); granted || head {
		t.Fatalf("maybe granted waiter: granted %v, head %v; want out of line", granted, head)
	}
	if got := q.Claim("k"); got != next {
		t.Fatal("the next handover does not go to the next waiter: one waiter could get two grants")
	}
	if !q.MaybeGranted(wt) || q.MaybeGranted(next) {
		t.Fatal("maybe granted changed by another waiter's claim")
	}
}
