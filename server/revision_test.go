package server_test

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"sync"
	"testing"

	"connectrpc.com/connect"
	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/api/fenced/v1/fencedv1connect"
	"github.com/fencedio/fenced/internal/fencedtest"
)

// revEvent is what the handoff test compares of an event.
type revEvent struct {
	typ      fencedv1.Event_Type
	key      string
	token    uint64
	revision uint64
}

func (e revEvent) String() string {
	return fmt.Sprintf("%v %s token %d at %d", e.typ, e.key, e.token, e.revision)
}

// applyEvents applies events to a key -> token view of the current leases.
func applyEvents(state map[string]uint64, evs []revEvent) map[string]uint64 {
	out := maps.Clone(state)
	if out == nil {
		out = map[string]uint64{}
	}
	for _, e := range evs {
		switch e.typ {
		case fencedv1.Event_ACQUIRED:
			out[e.key] = e.token
		case fencedv1.Event_RELEASED, fencedv1.Event_EXPIRED:
			delete(out, e.key)
		}
	}
	return out
}

// watchUntil collects the events of a Watch from after until the
// acquisition of the key end has arrived. RESYNC fails the test: nothing
// here falls behind or asks for forgotten history.
func watchUntil(ctx context.Context, c fencedv1connect.LeaseServiceClient, prefix string, after uint64, end string) ([]revEvent, error) {
	stream, err := c.Watch(ctx, connect.NewRequest(&fencedv1.WatchRequest{Prefix: prefix, AfterRevision: after}))
	if err != nil {
		return nil, err
	}
	defer stream.Close()
	var out []revEvent
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		if ev.GetType() == fencedv1.Event_RESYNC {
			return out, fmt.Errorf("RESYNC at %d after %d events", ev.GetRevision(), len(out))
		}
		out = append(out, revEvent{ev.GetType(), ev.GetLease().GetKey(), ev.GetLease().GetToken(), ev.GetRevision()})
		if ev.GetType() == fencedv1.Event_ACQUIRED && ev.GetLease().GetKey() == end {
			return out, nil
		}
	}
	return out, fmt.Errorf("stream ended before %s was acquired: %v", end, stream.Err())
}

// TestListThenWatchHandoff reads the state with List while other clients
// acquire and release, then watches from the revision List returned: the
// events after it, applied to what List returned, must be exactly the
// events every complete watcher saw after that revision, none missing and
// none repeated, and List must reflect exactly the events up to its
// revision. It does so many times during the writes.
func TestListThenWatchHandoff(t *testing.T) {
	t.Parallel()
	srv := fencedtest.Start(t)
	c := fencedv1connect.NewLeaseServiceClient(http.DefaultClient, srv.URL)
	ctx := t.Context()
	const prefix = "handoff/"

	// A fresh node has applied no command; its revision must still let a
	// watcher pick up the first event.
	first, err := c.List(ctx, connect.NewRequest(&fencedv1.ListRequest{Prefix: prefix}))
	if err != nil {
		t.Fatal(err)
	}
	if first.Msg.GetRevision() == 0 {
		t.Fatal("List on a fresh node: revision 0, which Watch reads as 'no replay'")
	}

	const writers, cycles = 4, 40
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	// progress paces the handoffs: one per completed cycle at most.
	progress := make(chan struct{}, 1)
	for w := range writers {
		wg.Go(func() {
			for i := range cycles {
				key := fmt.Sprintf("%sk%d", prefix, (w+i)%6)
				a, err := c.Acquire(ctx, connect.NewRequest(&fencedv1.AcquireRequest{Key: key, Owner: fmt.Sprint("w", w), TtlMs: 60000, WaitMs: 10000}))
				if err != nil {
					errs <- fmt.Errorf("writer %d acquire %s: %w", w, key, err)
					return
				}
				if _, err := c.Release(ctx, connect.NewRequest(&fencedv1.ReleaseRequest{Key: key, LeaseId: a.Msg.GetLease().GetLeaseId()})); err != nil {
					errs <- fmt.Errorf("writer %d release %s: %w", w, key, err)
					return
				}
				select {
				case progress <- struct{}{}:
				default:
				}
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()

	// Hand off many times while the writers run: List, then at once Watch
	// from List's revision, consuming live.
	type handoff struct {
		revision uint64
		listed   map[string]uint64
		got      []revEvent
		err      error
	}
	endKey := prefix + "end"
	var watchers sync.WaitGroup
	handoffs := []*handoff{{revision: first.Msg.GetRevision(), listed: map[string]uint64{}}}
	start := func(h *handoff) {
		watchers.Go(func() { h.got, h.err = watchUntil(ctx, c, prefix, h.revision, endKey) })
	}
	start(handoffs[0])
	for len(handoffs) < 40 {
		select {
		case <-progress:
		case <-done:
		}
		resp, err := c.List(ctx, connect.NewRequest(&fencedv1.ListRequest{Prefix: prefix}))
		if err != nil {
			t.Fatal(err)
		}
		h := &handoff{revision: resp.Msg.GetRevision(), listed: map[string]uint64{}}
		for _, l := range resp.Msg.GetLeases() {
			h.listed[l.GetKey()] = l.GetToken()
		}
		handoffs = append(handoffs, h)
		start(h)
		select {
		case <-done:
		default:
			continue
		}
		break
	}
	<-done
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// The last event: every watcher reads up to it.
	endAcq, err := c.Acquire(ctx, connect.NewRequest(&fencedv1.AcquireRequest{Key: endKey, Owner: "end", TtlMs: 60000}))
	if err != nil {
		t.Fatal(err)
	}
	watchers.Wait()
	// Nothing happened since: Get reflects the end's grant, whose token is
	// its log index and so its event's revision.
	got, err := c.Get(ctx, connect.NewRequest(&fencedv1.GetRequest{Key: endKey}))
	if err != nil {
		t.Fatal(err)
	}
	if rev, tok := got.Msg.GetRevision(), endAcq.Msg.GetLease().GetToken(); rev != tok {
		t.Errorf("Get after the last write: revision %d, want %d", rev, tok)
	}

	// The reference: every event since the start.
	all, err := watchUntil(ctx, c, prefix, 1, endKey)
	if err != nil {
		t.Fatalf("reference watch: %v", err)
	}
	if want := 2*writers*cycles + 1; len(all) != want {
		t.Fatalf("reference watch saw %d events, want %d", len(all), want)
	}
	final := applyEvents(nil, all)

	distinct := map[uint64]bool{}
	for i, h := range handoffs {
		distinct[h.revision] = true
		var before, after []revEvent
		for _, e := range all {
			if e.revision <= h.revision {
				before = append(before, e)
			} else {
				after = append(after, e)
			}
		}
		if want := applyEvents(nil, before); !maps.Equal(h.listed, want) {
			t.Errorf("handoff %d: List at revision %d returned %v; the events up to it give %v", i, h.revision, h.listed, want)
		}
		if h.err != nil {
			t.Fatalf("handoff %d: watch after %d: %v", i, h.revision, h.err)
		}
		if fmt.Sprint(h.got) != fmt.Sprint(after) {
			t.Errorf("handoff %d: watch after %d saw %d events, want the %d after it:\n got %v\nwant %v", i, h.revision, len(h.got), len(after), h.got, after)
		}
		if state := applyEvents(h.listed, h.got); !maps.Equal(state, final) {
			t.Errorf("handoff %d: List then Watch gives %v, want %v", i, state, final)
		}
	}
	if len(distinct) < 3 {
		t.Errorf("only %d distinct handoff revisions: the handoffs did not overlap the writes", len(distinct))
	}
}
