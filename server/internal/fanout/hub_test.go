package fanout

import (
	"fmt"
	"testing"
	"time"

	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/lease"
)

// watchEvent is the Watch event of a transition, for the hubs of tests:
// its type and revision.
func watchEvent(ev lease.Event) *fencedv1.Event {
	t := map[lease.EventType]fencedv1.Event_Type{lease.Acquired: fencedv1.Event_ACQUIRED,
		lease.Released: fencedv1.Event_RELEASED, lease.Expired: fencedv1.Event_EXPIRED}[ev.Type]
	return &fencedv1.Event{Type: t, Revision: ev.Revision, Lease: &fencedv1.Lease{Key: ev.Lease.Key, Token: ev.Lease.Token}}
}

// The transitions of a round reach each watcher together and in order; a
// watcher they would take past its buffer gets what fits and is cut off,
// one of another prefix is untouched.
func TestHubRoundFillsThenCuts(t *testing.T) {
	h := NewHub(16, 3, watchEvent)
	all, _, _ := h.Subscribe("", 0)
	other, _, _ := h.Subscribe("b/", 0)
	var batch []item
	for i := range 5 {
		batch = append(batch, item{ev: &Event{Event: lease.Event{Type: lease.Acquired, Revision: uint64(10 + i),
			Lease: lease.Lease{Key: fmt.Sprintf("a/%d", i)}}}})
	}
	h.dispatch(batch)
	q := all.Take()
	if len(q) != 3 || q[0].Revision != 10 || q[2].Revision != 12 {
		t.Fatalf("watcher of \"\" queued %d events, want revisions 10-12", len(q))
	}
	select {
	case <-all.lost:
	default:
		t.Fatal("watcher 2 events past its buffer not cut off")
	}
	select {
	case <-other.lost:
		t.Fatal("watcher of another prefix cut off")
	default:
	}
	if q := other.Take(); len(q) != 0 {
		t.Fatalf("watcher of b/ got %d events of a/", len(q))
	}
}

// A watcher that subscribes after revision r is never offered a transition
// at or before r, even one applied before it subscribed and dispatched
// after: a Watch from a state read does not see that state's own events.
func TestHubSubscribeAfterSkipsUndispatched(t *testing.T) {
	h := NewHub(16, 8, watchEvent)
	acquired := func(rev uint64) lease.Event {
		return lease.Event{Type: lease.Acquired, Revision: rev, Lease: lease.Lease{Key: "a/1"}}
	}
	h.Publish(acquired(5)) // applied, not yet dispatched
	from, _, complete := h.Subscribe("a/", 5)
	all, _, _ := h.Subscribe("a/", 0)
	if !complete {
		t.Fatal("subscribing after the last applied revision reported missing events")
	}
	h.dispatch(h.in)
	select {
	case <-from.ready:
		t.Fatalf("watcher after 5 woken by revision 5 (queued %v)", revisions(from.Take()))
	default:
	}
	h.Publish(acquired(6))
	h.dispatch(h.in[1:])
	select {
	case <-from.ready:
	default:
		t.Fatal("watcher after 5 not woken by revision 6")
	}
	if q := from.Take(); len(q) != 1 || q[0].Revision != 6 {
		t.Fatalf("watcher after 5 queued %v, want revision 6 only", revisions(q))
	}
	if q := all.Take(); len(q) != 2 || q[0].Revision != 5 {
		t.Fatalf("watcher after 0 queued %v, want revisions 5 and 6", revisions(q))
	}
}

func revisions(evs []*Event) []uint64 {
	var r []uint64
	for _, ev := range evs {
		r = append(r, ev.Revision)
	}
	return r
}

// Without watchers events are dispatched as they come; with many, rounds
// are spaced, but never by more than 50ms.
func TestRoundInterval(t *testing.T) {
	if d := roundInterval(0); d != 0 {
		t.Errorf("roundInterval(0) = %v, want 0", d)
	}
	if a, b := roundInterval(10), roundInterval(1000); !(0 < a && a < b) {
		t.Errorf("roundInterval(10) = %v, roundInterval(1000) = %v: want 0 < first < second", a, b)
	}
	if d := roundInterval(1 << 30); d != 50*time.Millisecond {
		t.Errorf("roundInterval(2^30) = %v, want the 50ms cap", d)
	}
}
