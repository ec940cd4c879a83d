package admission

import "testing"

func current(ok bool) func() bool { return func() bool { return ok } }

// A lease counts against the address it was granted to until it ends; a
// key granted again counts once, against its newest grant.
func TestLeasesCountUntilEnded(t *testing.T) {
	l := NewLeases()
	l.Add("a", "k1", "id1", current(true))
	l.Add("a", "k2", "id2", current(true))
	l.Add("b", "k3", "id3", current(true))
	if a, b := l.Count("a"), l.Count("b"); a != 2 || b != 1 {
		t.Fatalf("counts a %d, b %d; want 2, 1", a, b)
	}
	l.Ended("k1", "other") // another lease of k1: not the one recorded
	if got := l.Count("a"); got != 2 {
		t.Fatalf("after another lease of k1 ended: a holds %d, want 2", got)
	}
	l.Ended("k1", "id1")
	if got := l.Count("a"); got != 1 {
		t.Fatalf("after k1 ended: a holds %d, want 1", got)
	}
	l.Add("b", "k2", "id4", current(true)) // k2 granted anew, to b
	if a, b := l.Count("a"), l.Count("b"); a != 0 || b != 2 {
		t.Fatalf("after k2 was granted to b: a %d, b %d; want 0, 2", a, b)
	}
	l.Ended("k2", "id2") // the old grant: already replaced
	if got := l.Count("b"); got != 2 {
		t.Fatalf("after k2's replaced lease ended: b holds %d, want 2", got)
	}
	l.Reset()
	if got := l.Count("b"); got != 0 {
		t.Fatalf("after Reset: b holds %d, want 0", got)
	}
}

// A lease that ended before it was recorded is not counted, and the empty
// address (a call not over HTTP) is never counted.
func TestLeasesEndedBeforeRecorded(t *testing.T) {
	l := NewLeases()
	l.Add("a", "k", "id", current(false))
	if got := l.Count("a"); got != 0 {
		t.Fatalf("a lease already ended when recorded: a holds %d, want 0", got)
	}
	asked := false
	l.Add("", "k", "id", func() bool { asked = true; return true })
	if got := l.Count(""); got != 0 || asked {
		t.Fatalf("no address: %d counted (current asked %v), want 0 and not asked", got, asked)
	}
}
