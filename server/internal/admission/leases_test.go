package admission

import (
	"testing"

	"github.com/fencedio/fenced/lease"
)

// count is how many leases addr holds.
func count(l *Leases, addr string) int {
	n, _ := l.Count(addr)
	return n
}

func current(ok bool) func() bool { return func() bool { return ok } }

// record is the state's record of lease id of key.
func record(key, id string) *lease.Held {
	return &lease.Held{Lease: lease.Lease{Key: key, ID: id}}
}

// A lease counts against the address it was granted to until it ends, and
// once however often it is added.
func TestLeasesCountUntilEnded(t *testing.T) {
	l := NewLeases(Networks{V4: 24, V6: 64})
	k1, k2, k3 := record("k1", "id1"), record("k2", "id2"), record("k3", "id3")
	l.Add("a", k1, current(true))
	l.Add("a", k2, current(true))
	l.Add("b", k3, current(true))
	l.Add("b", k1, current(true)) // counted already, against a
	if a, b := count(l, "a"), count(l, "b"); a != 2 || b != 1 {
		t.Fatalf("counts a %d, b %d; want 2, 1", a, b)
	}
	l.Ended(record("k1", "other")) // another lease of k1: not the one counted
	l.Ended(nil)
	if got := count(l, "a"); got != 2 {
		t.Fatalf("after another lease of k1 ended: a holds %d, want 2", got)
	}
	l.Ended(k1)
	if got := count(l, "a"); got != 1 || k1.Client != "" {
		t.Fatalf("after k1 ended: a holds %d, want 1 (k1 counts against %q)", got, k1.Client)
	}
	l.Ended(k1) // ended twice: counted once
	if got := count(l, "a"); got != 1 {
		t.Fatalf("after k1 ended twice: a holds %d, want 1", got)
	}
	l.Ended(k2)
	l.Add("b", record("k2", "id4"), current(true)) // k2 granted anew, to b
	if a, b := count(l, "a"), count(l, "b"); a != 0 || b != 2 {
		t.Fatalf("after k2 was granted to b: a %d, b %d; want 0, 2", a, b)
	}
	l.Reset()
	if got := count(l, "b"); got != 0 {
		t.Fatalf("after Reset: b holds %d, want 0", got)
	}
}

// A lease that ended before it was counted is not counted, and the empty
// address (a call not over HTTP) is never counted.
func TestLeasesEndedBeforeRecorded(t *testing.T) {
	l := NewLeases(Networks{V4: 24, V6: 64})
	h := record("k", "id")
	l.Add("a", h, current(false))
	if got := count(l, "a"); got != 0 || h.Client != "" {
		t.Fatalf("a lease already ended when counted: a holds %d, want 0 (it counts against %q)", got, h.Client)
	}
	asked := false
	l.Add("", h, func() bool { asked = true; return true })
	if got := count(l, ""); got != 0 || asked || h.Client != "" {
		t.Fatalf("no address: %d counted (current asked %v), want 0 and not asked", got, asked)
	}
}

// A network counts the leases of all its addresses, each once.
func TestLeasesCountPerNetwork(t *testing.T) {
	l := NewLeases(Networks{V4: 24, V6: 64})
	k1, k2 := record("k1", "id1"), record("k2", "id2")
	l.Add("192.0.2.7", k1, current(true))
	l.Add("192.0.2.8", k2, current(true))
	l.Add("198.51.100.1", record("k3", "id3"), current(true))
	if a, n := l.Count("192.0.2.7"); a != 1 || n != 2 {
		t.Fatalf("192.0.2.7: %d, its network %d; want 1, 2", a, n)
	}
	l.Ended(k1)
	k1again := record("k1", "id4")
	l.Add("192.0.2.9", k1again, current(true)) // k1 again, from another address of the network
	if a, n := l.Count("192.0.2.9"); a != 1 || n != 2 {
		t.Fatalf("after k1 moved within the network: 192.0.2.9 %d, network %d; want 1, 2", a, n)
	}
	l.Ended(k2)
	l.Ended(k1again)
	if _, n := l.Count("192.0.2.1"); n != 0 {
		t.Fatalf("all of the network's leases ended: it holds %d", n)
	}
	if _, n := l.Count("198.51.100.200"); n != 1 {
		t.Fatalf("198.51.100.0/24 holds %d, want 1", n)
	}
}
