package fanout

import (
	"fmt"
	"slices"
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
	h.mu.Lock()
	h.dispatch(batch)
	h.mu.Unlock()
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
	all, _, _ := h.Subscribe("a/", 0)
	h.Publish(acquired(5)) // applied, not yet dispatched
	from, _, complete := h.Subscribe("a/", 5)
	if !complete {
		t.Fatal("subscribing after the last applied revision reported missing events")
	}
	dispatchWaiting(h)
	select {
	case <-from.ready:
		t.Fatalf("watcher after 5 woken by revision 5 (queued %v)", revisions(from.Take()))
	default:
	}
	h.Publish(acquired(6))
	dispatchWaiting(h)
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

// dispatchWaiting does what the dispatcher does when woken.
func dispatchWaiting(h *Hub) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.dispatchWaiting()
}

// woken reports whether the dispatcher was woken since the last call.
func woken(h *Hub) bool {
	select {
	case <-h.inReady:
		return true
	default:
		return false
	}
}

// While nobody watches, transitions wake the dispatcher once per idleBatch;
// rejections and restores at once, and every transition once someone
// watches.
func TestHubIdleWakesOncePerBatch(t *testing.T) {
	h := NewHub(16, 8, watchEvent)
	for rev := range uint64(idleBatch - 1) {
		h.Publish(lease.Event{Type: lease.Acquired, Revision: rev + 1, Lease: lease.Lease{Key: "a/1"}})
		if woken(h) {
			t.Fatalf("transition %d of %d, nobody watching: the dispatcher was woken", rev+1, idleBatch)
		}
	}
	h.Publish(lease.Event{Type: lease.Acquired, Revision: idleBatch, Lease: lease.Lease{Key: "a/1"}})
	if !woken(h) {
		t.Fatalf("transition %d, nobody watching: the dispatcher was not woken", idleBatch)
	}
	dispatchWaiting(h)
	h.PublishRejection(rejected(&fencedv1.Rejection{Scope: "a/1"}))
	if !woken(h) {
		t.Fatal("a rejection did not wake the dispatcher")
	}
	h.Restored(idleBatch)
	if !woken(h) {
		t.Fatal("a restore did not wake the dispatcher")
	}
	dispatchWaiting(h)
	s, _, _ := h.Subscribe("b/", idleBatch)
	h.Publish(lease.Event{Type: lease.Acquired, Revision: idleBatch + 1, Lease: lease.Lease{Key: "a/1"}})
	if !woken(h) {
		t.Fatal("a transition with a watcher did not wake the dispatcher")
	}
	h.Unsubscribe(s)
	h.Publish(lease.Event{Type: lease.Acquired, Revision: idleBatch + 2, Lease: lease.Lease{Key: "a/1"}})
	if woken(h) {
		t.Fatal("the dispatcher was woken after the last watcher left")
	}
}

// Transitions published while nobody watched, and not yet dispatched, are
// replayed to a watcher that resumes before them, or offered to one that
// subscribes after 0, as if the dispatcher had run.
func TestHubIdleTransitionsReachTheNextWatcher(t *testing.T) {
	for _, after := range []uint64{1, 0} {
		h := NewHub(16, 8, watchEvent)
		for rev := range uint64(4) {
			h.Publish(lease.Event{Type: lease.Acquired, Revision: rev + 1, Lease: lease.Lease{Key: "a/1"}})
		}
		s, replay, complete := h.Subscribe("a/", after)
		got := revisions(append(replay, s.Take()...))
		want := []uint64{2, 3, 4}
		if after == 0 {
			want = []uint64{1, 2, 3, 4}
		}
		if !complete || !slices.Equal(got, want) {
			t.Errorf("after %d: got %v (complete %v), want %v", after, got, complete, want)
		}
	}
}

// Watchers that come and go while transitions are published each get
// every transition after their starting point, once, in order: none stays
// undispatched while someone waits for it.
func TestHubWatchersComeAndGo(t *testing.T) {
	const n = 2000
	h := NewHub(n, n, watchEvent)
	done := make(chan struct{})
	defer close(done)
	go h.Run(done)
	go func() {
		for rev := range uint64(n) {
			h.Publish(lease.Event{Type: lease.Acquired, Revision: rev + 1, Lease: lease.Lease{Key: "a/1"}})
		}
	}()
	for after := uint64(1); after < n; after += 97 {
		target := min(after+50, n)
		s, replay, complete := h.Subscribe("", after)
		got := revisions(replay)
		for len(got) == 0 || got[len(got)-1] < target {
			select {
			case <-s.Ready():
			case <-time.After(10 * time.Second):
				t.Fatalf("after %d: got %v, still waiting for %d", after, got, target)
			}
			got = append(got, revisions(s.Take())...)
		}
		for i, rev := range got {
			if rev != after+1+uint64(i) {
				t.Fatalf("after %d: got %v (complete %v), want every revision after it", after, got, complete)
			}
		}
		h.Unsubscribe(s)
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
