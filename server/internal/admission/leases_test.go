package admission

import "testing"

// count is how many leases addr holds.
func count(l *Leases, addr string) int {
	n, _ := l.Count(addr)
	return n
}

func current(ok bool) func() bool { return func() bool { return ok } }

// A lease counts against the address it was granted to until it ends; a
// key granted again counts once, against its newest grant.
func TestLeasesCountUntilEnded(t *testing.T) {
	l := NewLeases(Networks{V4: 24, V6: 64})
	l.Add("a", "k1", "id1", current(true))
	l.Add("a", "k2", "id2", current(true))
	l.Add("b", "k3", "id3", current(true))
	if a, b := count(l, "a"), count(l, "b"); a != 2 || b != 1 {
		t.Fatalf("counts a %d, b %d; want 2, 1", a, b)
	}
	l.Ended("k1", "other") // another lease of k1: not the one recorded
	if got := count(l, "a"); got != 2 {
		t.Fatalf("after another lease of k1 ended: a holds %d, want 2", got)
	}
	l.Ended("k1", "id1")
	if got := count(l, "a"); got != 1 {
		t.Fatalf("after k1 ended: a holds %d, want 1", got)
	}
	l.Add("b", "k2", "id4", current(true)) // k2 granted anew, to b
	if a, b := count(l, "a"), count(l, "b"); a != 0 || b != 2 {
		t.Fatalf("after k2 was granted to b: a %d, b %d; want 0, 2", a, b)
	}
	l.Ended("k2", "id2") // the old grant: already replaced
	if got := count(l, "b"); got != 2 {
		t.Fatalf("after k2's replaced lease ended: b holds %d, want 2", got)
	}
	l.Reset()
	if got := count(l, "b"); got != 0 {
		t.Fatalf("after Reset: b holds %d, want 0", got)
	}
}

// A lease that ended before it was recorded is not counted, and the empty
// address (a call not over HTTP) is never counted.
func TestLeasesEndedBeforeRecorded(t *testing.T) {
	l := NewLeases(Networks{V4: 24, V6: 64})
	l.Add("a", "k", "id", current(false))
	if got := count(l, "a"); got != 0 {
		t.Fatalf("a lease already ended when recorded: a holds %d, want 0", got)
	}
	asked := false
	l.Add("", "k", "id", func() bool { asked = true; return true })
	if got := count(l, ""); got != 0 || asked {
		t.Fatalf("no address: %d counted (current asked %v), want 0 and not asked", got, asked)
	}
}

// A network counts the leases of all its addresses, each once.
func TestLeasesCountPerNetwork(t *testing.T) {
	l := NewLeases(Networks{V4: 24, V6: 64})
	l.Add("192.0.2.7", "k1", "id1", current(true))
	l.Add("192.0.2.8", "k2", "id2", current(true))
	l.Add("198.51.100.1", "k3", "id3", current(true))
	if a, n := l.Count("192.0.2.7"); a != 1 || n != 2 {
		t.Fatalf("192.0.2.7: %d, its network %d; want 1, 2", a, n)
	}
	l.Add("192.0.2.9", "k1", "id4", current(true)) // k1 again, from another address of the network
	if a, n := l.Count("192.0.2.9"); a != 1 || n != 2 {
		t.Fatalf("after k1 moved within the network: 192.0.2.9 %d, network %d; want 1, 2", a, n)
	}
	l.Ended("k2", "id2")
	l.Ended("k1", "id4")
	if _, n := l.Count("192.0.2.1"); n != 0 {
		t.Fatalf("all of the network's leases ended: it holds %d", n)
	}
	if _, n := l.Count("198.51.100.200"); n != 1 {
		t.Fatalf("198.51.100.0/24 holds %d, want 1", n)
	}
}
