package server

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"
	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/api/fenced/v1/fencedv1connect"
	"github.com/fencedio/fenced/lease"
)

// The transitions of a round reach each watcher together and in order; a
// watcher they would take past its buffer gets what fits and is cut off,
// one of another prefix is untouched.
func TestHubRoundFillsThenCuts(t *testing.T) {
	h := newHub(16, 3)
	all, _, _ := h.subscribe("", 0)
	other, _, _ := h.subscribe("b/", 0)
	var batch []hubItem
	for i := range 5 {
		batch = append(batch, hubItem{ev: &hubEvent{Event: lease.Event{Type: lease.Acquired, Revision: uint64(10 + i),
			Lease: lease.Lease{Key: fmt.Sprintf("a/%d", i)}}}})
	}
	h.dispatch(batch)
	q := all.take()
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
	if q := other.take(); len(q) != 0 {
		t.Fatalf("watcher of b/ got %d events of a/", len(q))
	}
}

// A watcher that subscribes after revision r is never offered a transition
// at or before r, even one applied before it subscribed and dispatched
// after: a Watch from a state read does not see that state's own events.
func TestHubSubscribeAfterSkipsUndispatched(t *testing.T) {
	h := newHub(16, 8)
	acquired := func(rev uint64) lease.Event {
		return lease.Event{Type: lease.Acquired, Revision: rev, Lease: lease.Lease{Key: "a/1"}}
	}
	h.publish(acquired(5)) // applied, not yet dispatched
	from, _, complete := h.subscribe("a/", 5)
	all, _, _ := h.subscribe("a/", 0)
	if !complete {
		t.Fatal("subscribing after the last applied revision reported missing events")
	}
	h.dispatch(h.in)
	select {
	case <-from.ready:
		t.Fatalf("watcher after 5 woken by revision 5 (queued %v)", revisions(from.take()))
	default:
	}
	h.publish(acquired(6))
	h.dispatch(h.in[1:])
	select {
	case <-from.ready:
	default:
		t.Fatal("watcher after 5 not woken by revision 6")
	}
	if q := from.take(); len(q) != 1 || q[0].Revision != 6 {
		t.Fatalf("watcher after 5 queued %v, want revision 6 only", revisions(q))
	}
	if q := all.take(); len(q) != 2 || q[0].Revision != 5 {
		t.Fatalf("watcher after 0 queued %v, want revisions 5 and 6", revisions(q))
	}
}

func revisions(evs []*hubEvent) []uint64 {
	var r []uint64
	for _, ev := range evs {
		r = append(r, ev.Revision)
	}
	return r
}

// A watcher the server cannot serve within its fan-out budget falls
// behind; past WatchBuffer events it gets what was queued, then RESYNC.
func TestWatcherShedWhenFanoutBudgetSpent(t *testing.T) {
	s := newTestServer(t, Config{WatchBuffer: 4})
	base := serveTest(t, s)
	giveBack := s.fanout.Seize() // no fan-out time left
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	c := fencedv1connect.NewLeaseServiceClient(&http.Client{Transport: tr}, base)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The call returns with the response headers, which come with the
	// first event.
	type opened struct {
		stream *connect.ServerStreamForClient[fencedv1.WatchResponse]
		err    error
	}
	open := make(chan opened, 1)
	go func() {
		stream, err := c.Watch(ctx, connect.NewRequest(&fencedv1.WatchRequest{Prefix: "shed/"}))
		open <- opened{stream, err}
	}()
	for s.hub.watching() == 0 { // until the watcher subscribed
		time.Sleep(time.Millisecond)
	}
	for i := range 10 {
		if _, err := s.Acquire(ctx, fmt.Sprintf("shed/%d", i), "o", time.Minute, 0); err != nil {
			t.Fatal(err)
		}
	}
	for s.hub.watching() != 0 { // until it is cut off
		time.Sleep(time.Millisecond)
	}
	giveBack()
	o := <-open
	if o.err != nil {
		t.Fatal(o.err)
	}
	stream := o.stream
	defer stream.Close()
	var last uint64
	for i := range 4 {
		if !stream.Receive() {
			t.Fatalf("event %d: %v", i, stream.Err())
		}
		ev := stream.Msg().GetEvent()
		if ev.GetType() != fencedv1.Event_ACQUIRED || ev.GetRevision() <= last {
			t.Fatalf("event %d: %v, want an ACQUIRED after revision %d", i, ev, last)
		}
		last = ev.GetRevision()
	}
	if !stream.Receive() || stream.Msg().GetEvent().GetType() != fencedv1.Event_RESYNC {
		t.Fatalf("after the queued events: %v %v, want RESYNC", stream.Msg().GetEvent(), stream.Err())
	}
}

// watching returns the number of subscriptions, for tests.
func (h *hub) watching() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs)
}
